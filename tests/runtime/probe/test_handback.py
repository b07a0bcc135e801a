"""The lean checks' worker threads hand their answers back to the event loop a few at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import trio

from kokumi.runtime.probe import lean


class Wakes(trio.abc.Instrument):
    """How many times the event loop came back from waiting for I/O (or a thread's word)."""

    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


async def test_answers_that_end_together_come_back_in_one_wake_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first answer waits this long for the others: long enough that a busy machine's
    # thread scheduling never splits the batch here (the product's 5 ms is measured in the
    # fleet benchmark, not asserted).
    monkeypatch.setattr(lean, "_GATHER", 0.2)
    wakes = Wakes()
    answers: dict[int, int] = {}
    resumed: set[int] = set()  # the loop's wake-ups after which a caller had its answer
    together = threading.Barrier(8)

    def answer(value: int) -> int:
        together.wait(10)  # eight checks that end together, as those of one tick do
        return value

    async def one(index: int) -> None:
        answers[index] = await lean._in_thread(answer, index * 10)
        resumed.add(wakes.count)

    trio.lowlevel.add_instrument(wakes)
    try:
        async with trio.open_nursery() as nursery:
            for index in range(8):
                nursery.start_soon(one, index)
    finally:
        trio.lowlevel.remove_instrument(wakes)
    assert answers == {index: index * 10 for index in range(8)}
    # One wake-up an answer would be up to eight (trio.to_thread.run_sync: 3-8 here).
    assert len(resumed) == 1


async def test_an_error_in_the_thread_is_raised_to_its_caller_alone() -> None:
    def fail() -> int:
        raise OSError("no route to host")

    results: list[object] = []

    async def one(fn: Callable[[], int]) -> None:
        try:
            results.append(await lean._in_thread(fn))
        except OSError as exc:
            results.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, fail)
        nursery.start_soon(one, lambda: 7)
    assert sorted(map(str, results)) == ["7", "no route to host"]


async def test_a_cancelled_wait_leaves_the_thread_and_its_place_is_given_back_when_it_ends() -> (
    None
):
    release = threading.Event()
    ended = threading.Event()

    def blocked() -> int:
        release.wait(10)
        ended.set()
        return 1

    limiter = lean._threads()
    with trio.move_on_after(0.05) as scope:
        await lean._in_thread(blocked)
    assert scope.cancelled_caught  # the caller is free at its deadline, the thread still runs
    assert limiter.borrowed_tokens == 1
    release.set()
    with trio.fail_after(5):
        # The thread's answer comes back on the loop, which gives the place back: poll for it.
        while limiter.borrowed_tokens:  # noqa: ASYNC110
            await trio.sleep(0.01)
    assert ended.is_set()


async def test_a_caller_cancelled_before_a_thread_is_free_starts_none() -> None:
    limiter = lean._threads()
    started: list[int] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await lean._in_thread(started.append, 1)
    assert started == []
    assert limiter.borrowed_tokens == 0
