"""The manager freezes its heap as its fleet grows, so full collections skip the fleet."""

from __future__ import annotations

import gc

import pytest
import trio
import trio.testing

from kokumi import heap


def test_the_heap_is_frozen_once_known_then_per_quarter_of_growth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = iter([0, 0, 1, 50, 101, 150, 1000, 1100, 1249, 1250, *[1300] * 7])
    seen: list[int] = []
    frozen: list[int] = []
    real_freeze = gc.freeze

    def size() -> int:
        seen.append(next(sizes))
        return seen[-1]

    def freeze() -> None:
        frozen.append(seen[-1])
        real_freeze()

    monkeypatch.setattr(gc, "freeze", freeze)
    monkeypatch.setattr(heap, "_full_collections", lambda: 0)  # none: the sizes decide alone

    async def main() -> None:
        with trio.move_on_after(10.0 * 16 + 5):  # 17 polls, the first at once
            await heap.freeze_as_it_grows(size, every=10.0)

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    # 1 when the fleet is first seen; then at least 25 % and 100 more each time; and once the
    # size has stayed the same (1,300) for six polls.
    assert frozen == [1, 101, 1000, 1250, 1300]


def test_what_survives_a_full_collection_is_frozen_and_all_is_thawed_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet's size stays at 500; full collections happen before the 3rd and 6th polls.
    Each is followed by a freeze at the next poll; the thaw every 60 s unfreezes everything."""
    polls = 0
    full = [0]
    events: list[tuple[int, str]] = []

    def size() -> int:
        nonlocal polls
        polls += 1
        if polls in (3, 6):
            full[0] += 1
        return 500

    monkeypatch.setattr(heap, "_full_collections", lambda: full[0])
    monkeypatch.setattr(gc, "freeze", lambda: events.append((polls, "freeze")))
    monkeypatch.setattr(gc, "unfreeze", lambda: events.append((polls, "thaw")))

    async def main() -> None:
        with trio.move_on_after(10.0 * 7 + 5):  # polls at 0, 10, ..., 70 s
            await heap.freeze_as_it_grows(size, every=10.0, thaw=60.0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert events == [(1, "freeze"), (3, "freeze"), (6, "freeze"), (7, "thaw")]
