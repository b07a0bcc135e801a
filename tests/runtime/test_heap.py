"""The manager freezes its heap as its fleet grows, so full collections skip the fleet."""

from __future__ import annotations

import functools
import gc

import pytest
import trio
import trio.testing

from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.runtime import heap
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi


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
    60 s unfreezes everything; the hook goes with its context."""
    events: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: events.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: events.append("thaw"))

    async def main() -> None:
        with heap.freezing_survivors():
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


def test_the_sweep_collects_the_young_generations_each_second_and_all_every_tenth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collected: list[tuple[float, int]] = []

    def collect(generation: int = 2) -> int:
        collected.append((trio.current_time(), generation))
        return 0

    monkeypatch.setattr(gc, "collect", collect)

    async def main() -> None:
        with trio.move_on_after(25.5):
            await heap.sweep(every=1.0, full_every=10)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [t for t, _ in collected] == [float(t) for t in range(1, 26)]
    assert [t for t, g in collected if g == 2] == [10.0, 20.0]
    assert {g for _, g in collected} == {1, 2}


async def test_a_full_collection_while_the_manager_takes_in_its_first_list_is_frozen(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While a restart takes in 10,000 Clusters the heap grows fast, and Python's full
    collections came every few hundred milliseconds, each walking all of it (ten, 60 to 300 ms
    each, 1.6 s in all): what survives each one is frozen from before the first list, not from
    after it."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd"), seed=5)
    fake.delay(30.0, verb="list", resource="clusters")  # the first list takes a while
    options = Options(
        namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False, freeze_heap=True
    )
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(10.0)
            assert not manager.started.is_set()  # still listing
            assert heap._freeze_after_full_collection in gc.callbacks
            await trio.sleep(30.0)
            assert manager.started.is_set()
            assert heap._freeze_after_full_collection in gc.callbacks
            nursery.cancel_scope.cancel()
    assert heap._freeze_after_full_collection not in gc.callbacks
    gc.unfreeze()


class _State:
    """A Cluster's waiting state: a few tracked objects, replaced at each check."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.parts = [{"at": index}, (index, [index])]


@pytest.mark.parametrize("swept", [True, False], ids=["swept", "not swept"])
def test_a_steady_fleet_s_young_generation_holds_a_second_of_survivors_when_swept(
    swept: bool,
) -> None:
    """6,000 states, 200 replaced each second for 30 s (a fleet checked once a minute): as many
    freed as made, so Python's count hardly grows and, left to it, the young generations fill
    with every replacement (the collection that comes at last walks them all); swept each
    second, they hold about one second's."""
    fleet = {i: _State(i) for i in range(6_000)}
    largest = 0

    async def churn() -> None:
        nonlocal largest
        await trio.sleep(0.5)  # between two sweeps
        for second in range(30):
            for i in range(second * 200, (second + 1) * 200):
                fleet[i] = _State(i)
            largest = max(largest, len(gc.get_objects(0)) + len(gc.get_objects(1)))
            await trio.sleep(1.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if swept:
                nursery.start_soon(heap.sweep)
            await churn()
            nursery.cancel_scope.cancel()

    gc.collect()
    gc.freeze()
    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        gc.unfreeze()
    per_second = 200 * 4  # tracked: the state, its two lists, the tuple (the dict is atomic)
    if swept:
        assert largest < 2 * per_second, largest
    else:  # what the sweep mends, kept to show that the test can tell
        assert largest > 20 * per_second, largest
