"""The limit of eight checks at a time says once when checks fall behind, and once when they
keep up again; how long each check waited is a histogram on ``/metrics``.

Spokes that never answer hold a slot for the whole 10 s timeout, and the queue is first in,
first out: measured with half of 400 spokes hanging, every healthy Cluster was checked every
240 s, each status still saying what its last check found.
"""

from __future__ import annotations

import itertools
import logging
import math

import pytest
import trio
import trio.testing
from prometheus_client.exposition import generate_latest

from kokumi.actors.checks import ANSWERING, NEW, SILENT, CountingLimiter
from kokumi.actors.metrics import Metrics

LOGGER = "kokumi.actors.checks"


async def test_falling_behind_is_said_once_and_so_is_keeping_up(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    metrics = Metrics()
    limiter = CountingLimiter(1, metrics, late_after=60.0)

    async def check(seconds: float) -> None:
        async with limiter:
            await trio.sleep(seconds)

    async with trio.open_nursery() as nursery:
        for _ in range(5):  # one slot, 30 s each: they wait 0, 30, 60, 90 and 120 s
            nursery.start_soon(check, 30.0)
            await trio.testing.wait_all_tasks_blocked()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1, said
    level, message = said[0]
    assert level == logging.WARNING
    assert "waited 90 s for one of the 1 check slots (1 more waiting)" in message
    assert "less often than every 60 s" in message
    # Three checks had held the slot 30 s each: the average has come up from nothing to 4.3 s.
    assert "hold their slot 4.3 s on average" in message
    assert "fix or remove the Clusters that report Unreachable" in message

    caplog.clear()
    await check(1.0)  # no wait: keeping up again, said once
    await check(1.0)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert said == [(logging.INFO, "checks keep up again: the last one waited 0.0 s for its slot")]

    scraped = generate_latest(metrics.registry).decode()
    assert "kokumi_check_wait_seconds_count 7.0" in scraped
    assert "kokumi_check_wait_seconds_sum 300.0" in scraped


async def test_quick_checks_that_fall_behind_name_the_managers_cpu(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Healthy spokes, too many of them for the CPU: each check holds its slot briefly, and
    still the queue grows past the interval (one replica at 10,000 Clusters)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    limiter = CountingLimiter(1, Metrics(), late_after=5.0)

    async def check() -> None:
        async with limiter:
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        for _ in range(100):  # the 52nd waits 5.1 s, after 51 checks of 0.1 s
            nursery.start_soon(check)
            await trio.testing.wait_all_tasks_blocked()
    (said,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "waited 5 s for one of the 1 check slots (48 more waiting)" in said
    assert "hold their slot 93 ms on average" in said
    assert "short of CPU for this many Clusters: give it more CPU, or shard it" in said


async def test_without_an_interval_nothing_is_said(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An embedding program's own limiter: the default ``late_after`` never trips."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    limiter = CountingLimiter(1, Metrics())

    async def check() -> None:
        async with limiter:
            await trio.sleep(3600.0)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(check)
    assert [r for r in caplog.records if r.name == LOGGER] == []


# --- two classes: answering Clusters first, silent ones take what is left -------------------


async def test_an_answering_check_never_waits_for_silent_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Forty silent checks (10 s each) queue for eight slots; quick answering checks keep
    arriving: silent ones hold at most seven slots, so each answering check starts at once."""
    metrics = Metrics()
    limiter = CountingLimiter(8, metrics, late_after=60.0)
    waits: list[float] = []
    most_silent = 0

    async def silent() -> None:
        nonlocal most_silent
        async with limiter.slot(SILENT):
            most_silent = max(most_silent, limiter.running("silent"))
            await trio.sleep(10.0)

    async def answering() -> None:
        asked = trio.current_time()
        async with limiter.slot(ANSWERING):
            waits.append(trio.current_time() - asked)
            await trio.sleep(0.005)

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(silent)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.running("silent") == 7
        assert limiter.waiting("silent") == 33
        scraped = generate_latest(metrics.registry).decode()
        assert 'kokumi_checks_waiting{class="silent"} 33.0' in scraped
        assert 'kokumi_checks_waiting{class="answering"} 0.0' in scraped
        for _ in range(200):  # every 0.25 s for 50 s
            nursery.start_soon(answering)
            await trio.sleep(0.25)
    assert most_silent == 7
    assert len(waits) == 200
    assert max(waits) == 0.0


async def test_a_freed_slot_goes_to_an_answering_check_before_any_silent_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With one slot, silent checks may take it (nothing else would run them): an answering
    check that arrives then waits for that one silent check, never for the silent queue."""
    limiter = CountingLimiter(1, Metrics())
    order: list[str] = []
    began: dict[str, float] = {}

    async def check(name: str, silent: bool, seconds: float) -> None:
        async with limiter.slot(SILENT if silent else ANSWERING):
            order.append(name)
            began[name] = trio.current_time()
            await trio.sleep(seconds)

    async with trio.open_nursery() as nursery:
        for index in range(5):
            nursery.start_soon(check, f"silent-{index}", True, 10.0)
            await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(1.0)
        asked = trio.current_time()
        nursery.start_soon(check, "answering", False, 0.01)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting("answering") == 1
    assert began["answering"] - asked == pytest.approx(9.0)  # the rest of one silent check
    assert order == ["silent-0", "answering", "silent-1", "silent-2", "silent-3", "silent-4"]


async def test_silent_checks_take_turns(autojump_clock: trio.testing.MockClock) -> None:
    """Thirty silent Clusters ask again as soon as each check ends, seven at a time finishing
    together; the answering ones keep one slot busy. The silent one checked longest ago goes
    first, so over half an hour each is checked every 30 / 7 rounds of 10 s: its gaps are 40 or
    50 s, never more, and none is checked twice while another waits longer."""
    limiter = CountingLimiter(8, Metrics())
    times: dict[int, list[float]] = {index: [] for index in range(30)}

    async def silent(index: int) -> None:
        last = -math.inf
        while True:
            async with limiter.slot(SILENT, last):
                last = trio.current_time()
                times[index].append(last)
                await trio.sleep(10.0)

    async def answering() -> None:
        while True:
            async with limiter.slot(ANSWERING):
                await trio.sleep(0.5)
            await trio.sleep(0.1)

    with trio.move_on_after(1800.0):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answering)
            for index in range(30):
                nursery.start_soon(silent, index)
    # Seven slots, 10 s each, for half an hour: 1,260 checks.
    assert sum(len(t) for t in times.values()) == 1260
    gaps = [b - a for t in times.values() for a, b in itertools.pairwise(t)]
    assert min(gaps) == pytest.approx(40.0)
    assert max(gaps) == pytest.approx(50.0)
    assert all(len(t) >= 36 for t in times.values())


async def test_new_checks_leave_the_answering_ones_a_slot_and_go_before_silent_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A batch of 100 new Clusters whose servers never answer, beside silent ones and live
    ones: the new and the silent hold seven slots at most between them, every answering check
    starts at once, and every new Cluster has its first try before any silent one its next."""
    metrics = Metrics()
    limiter = CountingLimiter(8, metrics, late_after=60.0)
    order: list[str] = []
    waits: list[float] = []
    most_unproven = 0

    async def hang(kind: str, name: str) -> None:
        nonlocal most_unproven
        async with limiter.slot(kind):
            order.append(name)
            most_unproven = max(most_unproven, limiter.running(NEW) + limiter.running(SILENT))
            await trio.sleep(10.0)

    async def answering() -> None:
        asked = trio.current_time()
        async with limiter.slot(ANSWERING):
            waits.append(trio.current_time() - asked)
            await trio.sleep(0.005)

    async with trio.open_nursery() as nursery:
        for index in range(5):
            nursery.start_soon(hang, SILENT, f"silent-{index}")
        await trio.testing.wait_all_tasks_blocked()
        for index in range(100):
            nursery.start_soon(hang, NEW, f"new-{index}")
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.running(SILENT) == 5
        assert limiter.running(NEW) == 2
        assert limiter.waiting(NEW) == 98
        scraped = generate_latest(metrics.registry).decode()
        assert 'kokumi_checks_waiting{class="new"} 98.0' in scraped
        for index in range(5, 10):
            nursery.start_soon(hang, SILENT, f"silent-{index}")
        for _ in range(800):  # every 0.25 s for 200 s: the batch's first tries take 143 s
            nursery.start_soon(answering)
            await trio.sleep(0.25)
    assert most_unproven == 7
    assert len(waits) == 800
    assert max(waits) == 0.0
    firsts = [index for index, name in enumerate(order) if name.startswith("new-")]
    assert len(firsts) == 100
    assert order.index("silent-5") > max(firsts)


async def test_answering_and_new_checks_share_one_first_come_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While 10,000 Clusters onboard, checks wait for CPU, not for slow spokes: first checks
    and repeat checks are served in the order they asked, so neither starves the other."""
    limiter = CountingLimiter(1, Metrics())  # one at a time: the order they start is the order
    order: list[str] = []

    async def check(kind: str, name: str) -> None:
        async with limiter.slot(kind):
            order.append(name)
            await trio.sleep(1.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(check, ANSWERING, "busy")
        await trio.testing.wait_all_tasks_blocked()
        for index, kind in enumerate((NEW, ANSWERING, NEW, NEW, ANSWERING, ANSWERING)):
            nursery.start_soon(check, kind, f"{kind}-{index}")
            await trio.testing.wait_all_tasks_blocked()
    assert order[1:] == [
        "new-0", "answering-1", "new-2", "new-3", "answering-4", "answering-5"
    ]  # fmt: skip


async def test_a_check_that_fell_due_earlier_goes_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """First come is when each check fell due: a restart's Clusters whose place was missed ask
    together, each with the place it missed, and go in the order of those places; a check due
    later than it asks (one a changed Secret asks for early) is due as it asks."""
    limiter = CountingLimiter(1, Metrics())
    order: list[str] = []

    async def check(kind: str, name: str, due: float) -> None:
        async with limiter.slot(kind, due=due):
            order.append(name)
            await trio.sleep(1.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(check, ANSWERING, "busy", math.inf)
        await trio.testing.wait_all_tasks_blocked()
        now = trio.current_time()
        for name, kind, due in (
            ("asks-now", ANSWERING, math.inf),
            ("missed-10s-ago", ANSWERING, now - 10.0),
            ("new", NEW, math.inf),
            ("early", ANSWERING, now + 30.0),
            ("missed-30s-ago", ANSWERING, now - 30.0),
            ("new-missed-20s-ago", NEW, now - 20.0),
        ):
            nursery.start_soon(check, kind, name, due)
            await trio.testing.wait_all_tasks_blocked()
    assert order[1:] == [
        "missed-30s-ago", "new-missed-20s-ago", "missed-10s-ago", "asks-now", "new", "early"
    ]  # fmt: skip


async def test_a_cancelled_wait_gives_up_its_place_and_loses_no_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Cluster deleted while its check waits: its place goes, and the slots stay counted."""
    metrics = Metrics()
    limiter = CountingLimiter(2, metrics)
    started: list[str] = []

    async def check(name: str, silent: bool) -> None:
        async with limiter.slot(SILENT if silent else ANSWERING):
            started.append(name)
            await trio.sleep(10.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(check, "a", False)
        nursery.start_soon(check, "b", False)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as scope:
            scope.cancel()
            await check("cancelled-at-once", False)
        waiter = trio.CancelScope()

        async def gone() -> None:
            with waiter:
                await check("gone", True)

        nursery.start_soon(gone)
        nursery.start_soon(check, "c", True)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting("silent") == 2
        waiter.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting("silent") == 0 + 1
    assert sorted(started) == ["a", "b", "c"]
    assert limiter.running("answering") == limiter.running("silent") == 0
    assert metrics.concurrent_checks == 0
    scraped = generate_latest(metrics.registry).decode()
    assert 'kokumi_checks_waiting{class="silent"} 0.0' in scraped


async def test_a_check_given_its_slot_just_before_the_close_never_begins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The stop record is taken, then the slots close: a check whose slot was handed to it just
    before (the holder's release woke it) but whose task has not run since must not begin, or
    the next manager makes it again at the due the record holds, seconds later (eight such at
    10,000 Clusters, checked again 10-20 s after the restart)."""
    limiter = CountingLimiter(1, Metrics())
    begun: list[str] = []
    release = trio.Event()

    async def holder() -> None:
        async with limiter.slot(ANSWERING):
            begun.append("holder")
            await release.wait()
            # Handing the slot on and closing happen with no checkpoint between, as the stop
            # record's snapshot and close() do while the woken task has not run yet.
        limiter.close()

    async def waiter() -> None:
        async with limiter.slot(ANSWERING):
            begun.append("waiter")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert limiter.waiting(ANSWERING) == 1
        release.set()
        await trio.sleep(3600.0)
        assert begun == ["holder"]
        assert limiter.running(ANSWERING) == 0
        nursery.cancel_scope.cancel()  # the manager's end: the waiter goes without a check
    assert begun == ["holder"]
    # Nothing starts once closed, whether it waited or asks now.
    with trio.move_on_after(60.0) as late:
        async with limiter.slot(ANSWERING):
            begun.append("late")
    assert late.cancelled_caught and begun == ["holder"]
