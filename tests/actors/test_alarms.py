"""The actors' timers, rung a tick at a time (kokumi.actors.alarms), and what ``/metrics`` makes
of a check due in the tick that has not rung yet."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.actors.alarms import Alarms
from kokumi.actors.metrics import Metrics
from kokumi.core.cluster.schedule import TIMER_GRAIN as GRAIN
from kokumi.core.registry.ownership import ClusterRef


class Sleeper:
    def __init__(self) -> None:
        self.serial = 0
        self.rung: list[tuple[int, float]] = []

    def ring(self, serial: int) -> None:
        if serial == self.serial:
            self.rung.append((serial, trio.current_time()))


def run(test: object) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.001, max_value=30.0), min_size=1, max_size=20))
def test_each_timer_rings_once_at_the_end_of_its_tick_never_before_it(dues: list[float]) -> None:
    async def main() -> None:
        alarms = Alarms()
        sleepers = [Sleeper() for _ in dues]
        async with trio.open_nursery() as nursery:
            await nursery.start(alarms.run)
            start = trio.current_time()
            for sleeper, due in zip(sleepers, dues, strict=True):
                sleeper.serial = 1
                alarms.set(start + due, sleeper, 1)
            await trio.sleep(31.0)
            nursery.cancel_scope.cancel()
        for sleeper, due in zip(sleepers, dues, strict=True):
            [(_, at)] = sleeper.rung
            assert start + due <= at <= start + due + GRAIN + 1e-9
            # On the grid: every timer of one tick rings at the same moment.
            assert at == pytest.approx(max(start + due, math.ceil((start + due) / GRAIN) * GRAIN))
        assert len(alarms) == 0

    run(main)


def test_timers_of_one_tick_ring_together_and_a_later_one_at_its_own_tick() -> None:
    async def main() -> None:
        alarms = Alarms()
        order: list[int] = []

        class Recording(Sleeper):
            def __init__(self, index: int) -> None:
                super().__init__()
                self.index = index

            def ring(self, serial: int) -> None:
                super().ring(serial)
                order.append(self.index)

        sleepers = [Recording(index) for index in range(9)]
        async with trio.open_nursery() as nursery:
            await nursery.start(alarms.run)
            for index, sleeper in enumerate(sleepers[:8]):
                sleeper.serial = 1
                alarms.set(10.045 - index * 0.005, sleeper, 1)  # 10.045 .. 10.010: one tick
            sleepers[8].serial = 1
            alarms.set(10.07, sleepers[8], 1)
            await trio.sleep(11.0)
            nursery.cancel_scope.cancel()
        assert {s.rung[0][1] for s in sleepers[:8]} == {pytest.approx(10.05)}
        assert sleepers[8].rung[0][1] == pytest.approx(10.1)
        # Within a tick, in the order they fell due.
        assert order == [7, 6, 5, 4, 3, 2, 1, 0, 8]


def test_a_timer_set_again_leaves_the_old_one_unheard() -> None:
    async def main() -> None:
        alarms = Alarms()
        sleeper = Sleeper()
        async with trio.open_nursery() as nursery:
            await nursery.start(alarms.run)
            sleeper.serial = 1
            alarms.set(5.0, sleeper, 1)
            sleeper.serial = 2
            alarms.set(2.0, sleeper, 2)  # sooner than the tick the task sleeps until
            await trio.sleep(10.0)
            nursery.cancel_scope.cancel()
        [(serial, at)] = sleeper.rung
        assert serial == 2
        assert at == pytest.approx(2.0)

    run(main)


def test_a_time_gone_by_rings_at_once_and_never_rings_nothing() -> None:
    async def main() -> None:
        alarms = Alarms()
        sleeper = Sleeper()
        await trio.sleep(1.0)
        sleeper.serial = 1
        alarms.set(0.5, sleeper, 1)  # without the task running: it is not needed for this
        assert sleeper.rung == [(1, 1.0)]
        alarms.set(math.inf, sleeper, 1)
        assert len(alarms) == 0

    run(main)


def test_a_check_due_within_the_tick_is_not_overdue_one_due_before_it_is() -> None:
    """``kokumi_checks_due{within="overdue"}`` alerts (deploy/monitoring): a check due in the
    tick that has not rung yet is on time, not behind."""
    metrics = Metrics()
    now = 1000.0
    metrics.due_clock = lambda: now
    metrics.check_planned(ClusterRef("fleet", "on-time"), now - GRAIN * 0.9)
    metrics.check_planned(ClusterRef("fleet", "behind"), now - GRAIN * 1.1)
    metrics.check_planned(ClusterRef("fleet", "soon"), now + 1.0)
    due = dict(metrics.due_spread())
    assert due["overdue"] == 1
    assert due["0-6s"] == 2
