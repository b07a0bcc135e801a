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

    async def main() -> None:
        with trio.move_on_after(10.0 * 17 + 5):
            await heap.freeze_as_it_grows(size, every=10.0)

    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    # 1 when the fleet is first seen; then at least 25 % and 100 more each time; and once the
    # size has stayed the same (1,300) for six polls.
    assert frozen == [1, 101, 1000, 1250, 1300]
