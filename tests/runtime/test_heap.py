"""The manager freezes its heap as its fleet grows, so full collections skip the fleet."""

from __future__ import annotations

import functools
import gc

import pytest
import trio
import trio.testing

from kokumi.runtime import heap


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
    # Full collections freeze from their own hook (next test): here the sizes decide alone.
    monkeypatch.setattr(heap, "_freeze_after_full_collection", lambda phase, info: None)

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


def test_what_survives_a_full_collection_is_frozen_as_it_ends_and_all_is_thawed_now_and_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet's size stays at 500. A full collection is followed by a freeze at once, with no
    poll between and no young collection of its own; a young collection is not; the thaw every
    60 s unfreezes everything; the hook goes with the task."""
    events: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: events.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: events.append("thaw"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(heap.freeze_as_it_grows, lambda: 500, every=10.0, thaw=60.0)
            )
            await trio.sleep(15)  # polls at 0 (the first freeze) and 10
            gc.collect()
            events.append("full collection")
            await trio.sleep(10)
            gc.collect(1)
            events.append("young collection")
            await trio.sleep(50)  # the thaw at 60
            assert heap._freeze_after_full_collection in gc.callbacks
            nursery.cancel_scope.cancel()
        assert heap._freeze_after_full_collection not in gc.callbacks

    gc.disable()  # no collection but the test's own
    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        gc.enable()
    assert events == ["freeze", "freeze", "full collection", "young collection", "thaw"]
