"""A stopping manager leaves a stop record: it checks the Clusters due in the next seconds whose
minute since their last check began is over, and records every Cluster's next check; the next
manager checks each Cluster when the last one would have, and never before the minute.

The real Manager and Cluster actors on the in-process API fake, under Trio's autojump clock, with
a stand-in for the spoke check. The fleet is young when the restart comes (its Clusters created
over 100 s, the last a minute before the stop): most Clusters are not yet at their place in the
minute, which is exactly what a restart without a record cannot know; and the new manager's
first list of Secrets takes 10 s, as a busy hub's does at 10,000 Clusters.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing

from kokumi.actors.context import wall_shift
from kokumi.core import api
from kokumi.core.fleet import stoprecord
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import CONFIG_MAPS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster

NS = "fleet"
COUNT = 240
DOWN = 8.0  # from the stop to the next manager's start
MINUTE = 60.0 - 1e-6  # the shortest gap between two checks, but for floating point
LIST_TAKES = 6.0  # each of the next manager's lists of Secrets
LOGGER = "kokumi.manager"


def server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


def _options() -> Options:
    return Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)


async def _restart(fake: FakeApi, fleet: StandInSpokes, *, record: bool) -> tuple[float, float]:
    """Create the fleet over 100 s, stop the manager a minute later (leaving a stop record or not),
    start another ``DOWN`` s later and run it 150 s; when the first stopped and the second
    started."""
    options = _options()
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        first = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            for index in range(COUNT):
                put_cluster(fake, NS, f"c{index:03d}", server(index))
                await trio.sleep(100.0 / COUNT)
            await trio.sleep(60.0)
            if record:
                await first.record_stop()
            stopped = trio.current_time()
            nursery.cancel_scope.cancel()
        await trio.sleep(DOWN)
        fake.delay(LIST_TAKES, verb="list", resource="secrets")
        started = trio.current_time()
        await _run_for(150.0, client, options, fleet)
    return stopped, started


async def _run_for(
    seconds: float, client: Client, options: Options, fleet: StandInSpokes
) -> Manager:
    """The next manager, run ``seconds`` from its start and stopped; it, for what it read."""
    manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return manager


def _across(fleet: StandInSpokes, stopped: float) -> list[float]:
    """Each Cluster's gap from its last check before the stop to its first after it."""
    gaps = []
    for index in range(COUNT):
        times = fleet.asked[server(index)]
        before = [t for t in times if t <= stopped]
        after = [t for t in times if t > stopped]
        gaps.append(after[0] - before[-1])
    return gaps


@pytest.mark.parametrize("seed", [41, 42])
async def test_a_restart_with_a_stop_record_keeps_every_cluster_on_its_minute(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=seed)
    fleet = StandInSpokes()
    stopped, started = await _restart(fake, fleet, record=True)

    record = fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi")
    assert record is not None
    assert len(stoprecord.read_config_map(record, stopped, 60.0)) == COUNT
    across = _across(fleet, stopped)
    # No check before the minute since the last one began, the stop's and the next manager's
    # included: the stop makes only the checks whose minute is over (the rest of their random
    # lateness), the next manager follows the record.
    for index in range(COUNT):
        times = fleet.asked[server(index)]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= MINUTE, (index, times)
        after = [t for t in times if t > started]
        assert all(b - a <= 66.1 for a, b in itertools.pairwise(after)), (index, after)
    # The gap across the restart is a gap of the chain, as if no restart had come, for every
    # Cluster due once the next manager checks; one due before waits for the next manager's
    # lists of Secrets (6 s each: the first, and one for the reads that came while it ran), and
    # no longer.
    catch_up = started + 3 * LIST_TAKES + 2.0
    for index, gap in enumerate(across):
        last = max(t for t in fleet.asked[server(index)] if t <= stopped)
        assert gap <= max(66.1, catch_up - last), (index, gap, catch_up - stopped)
    on_chain = sum(gap <= 66.1 for gap in across)
    assert on_chain >= COUNT * 3 // 4, sorted(across)[-5:]


async def test_without_a_stop_record_the_same_restart_leaves_gaps_over_a_minute_and_a_quarter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The fleet of the test above restarted as after a crash: the young Clusters resume at
    their places, and those due while no manager ran wait for the new one's lists. This is what
    the record is for; if this test fails, the test above proves nothing."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=41)
    fleet = StandInSpokes()
    stopped, _ = await _restart(fake, fleet, record=False)
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is None
    across = sorted(_across(fleet, stopped))
    assert across[-COUNT // 20] > 75.0, across[-COUNT // 20 :]


async def _record_stop_then_start(
    fake: FakeApi, fleet: StandInSpokes, down: float = DOWN, between: Callable[[], object] = list
) -> tuple[float, Manager]:
    """A settled fleet of 40 Clusters, a manager that records its stop, ``between()``, and the next
    one ``down`` s later run 70 s; when the first stopped, and the second manager."""
    options = _options()
    for index in range(40):
        put_cluster(fake, NS, f"c{index:03d}", server(index))
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        first = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await trio.sleep(200.0)
            with trio.fail_after(stoprecord.BUDGET + options.probe_timeout + 1):
                await first.record_stop()
            stopped = trio.current_time()
            nursery.cancel_scope.cancel()
        await trio.sleep(down)
        between()
        second = await _run_for(70.0, client, options, fleet)
    return stopped, second


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


async def test_a_refused_record_write_is_logged_once_and_the_stop_goes_on(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=43)
    fake.fail(403, times=None, verb="patch", resource="configmaps")
    fleet = StandInSpokes()
    stopped, _ = await _record_stop_then_start(fake, fleet)
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is None
    warnings = [m for level, m in _said(caplog) if level == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"could not write ConfigMap kokumi/{stoprecord.NAME}" in warnings[0]
    assert "at its place in the minute" in warnings[0]
    # The next manager checks each Cluster at its place, as after a crash: every one again.
    for index in range(40):
        assert any(t > stopped for t in fleet.asked[server(index)]), index


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"data": {"written-at": "soon"}, "binaryData": {stoprecord.KEY: ""}}, "not a Unix time"),
        ({"data": {"written-at": "1"}, "binaryData": {stoprecord.KEY: "@@"}}, "is not base64"),
        ({"data": {"written-at": "1"}, "binaryData": {stoprecord.KEY: "AAAA"}}, "3 bytes"),
        ({"data": {}}, "binaryData"),
    ],
    ids=["time", "base64", "length", "missing"],
)
async def test_a_record_that_is_not_one_is_named_and_each_cluster_checked_at_its_place(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    record: dict[str, object],
    said: str,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=44)
    for index in range(10):
        put_cluster(fake, NS, f"c{index:03d}", server(index))
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": stoprecord.NAME, "namespace": "kokumi"},
            **record,
        }
    )
    fleet = StandInSpokes()
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, _options(), check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(90.0)
            nursery.cancel_scope.cancel()
    warnings = [m for level, m in _said(caplog) if level == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"ConfigMap kokumi/{stoprecord.NAME} is not a record of next checks" in warnings[0]
    assert said in warnings[0]
    assert all(len(fleet.asked[server(i)]) >= 2 for i in range(10))


async def test_a_refused_record_read_is_logged_once_and_each_cluster_checked_at_its_place(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=45)
    fleet = StandInSpokes()
    stopped, second = await _record_stop_then_start(
        fake, fleet, between=lambda: fake.fail(403, times=None, verb="get", resource="configmaps")
    )
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is not None
    assert second.context.stop_record.recorded == {}
    warnings = [m for level, m in _said(caplog) if level == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"could not read ConfigMap kokumi/{stoprecord.NAME}" in warnings[0]
    for index in range(40):
        assert any(t > stopped for t in fleet.asked[server(index)]), index


async def test_a_record_older_than_two_minutes_is_not_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every due of a stale record has gone by: used, it would check the whole fleet at once
    where the places spread the checks over the minute."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=46)
    fleet = StandInSpokes()
    _, second = await _record_stop_then_start(fake, fleet, down=121.0)
    assert second.context.stop_record.recorded == {}
    fresh = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=46)
    _, second = await _record_stop_then_start(fresh, StandInSpokes(), down=DOWN)
    # Each actor took its own entry as it started: the record is spent, not kept.
    assert second.context.stop_record.recorded == {}


async def test_a_stop_records_unix_times(autojump_clock: trio.testing.MockClock) -> None:
    """The record holds Unix times, not Trio's clock of the process that wrote it."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=47)
    stopped, _ = await _record_stop_then_start(fake, StandInSpokes())
    record = fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi")
    assert record is not None
    wall = stopped - wall_shift()
    dues = stoprecord.read_config_map(record, wall, 60.0)
    assert len(dues) == 40
    # Every due still to come: the stop checked the ones whose minute was over (due a minute
    # on), the others were due after the stop already.
    assert all(wall < d <= wall + 66.1 for d in dues.values()), sorted(
        d - wall for d in dues.values()
    )


async def test_checks_the_stop_could_not_make_are_recorded_when_they_fell_due(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Spokes that take 4 s each: eight slots make two checks a second where 200 Clusters ask for
    three, so about 70 wait for a slot at any moment, their minute over. The stop asks for those,
    and makes about 30 in its 15 s. It still ends within its budget, and a check it could not
    make is recorded as due when it was, not when the stop asked for it: the next manager makes
    those first, in the order they fell due, and no recorded due comes sooner than a minute after
    the Cluster's last check began."""
    count = 200
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=48)
    for index in range(count):
        put_cluster(fake, NS, f"c{index:03d}", server(index))
    fleet = StandInSpokes(latency=4.0)
    options = _options()
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            await trio.sleep(300.0)
            began = trio.current_time()
            await manager.record_stop()
            took = trio.current_time() - began
            left = manager.context.stop_record.pending
            nursery.cancel_scope.cancel()
    assert took <= stoprecord.BUDGET + 1.0, took
    assert left > 10, left  # the budget ran out: the case this test is for
    record = fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi")
    assert record is not None
    dues = stoprecord.read_config_map(record, began, 60.0)
    for index in range(count):
        cluster = fake.object(api.CLUSTERS, f"c{index:03d}", NS)
        assert cluster is not None
        uid = cluster["metadata"]["uid"]
        # The Cluster's last check begun before the record was written, ended or not: one
        # still running when it was written is as much a check as one that had ended.
        last = max(t for t in fleet.asked[server(index)] if t < began + took)
        assert dues[stoprecord.uid_key(uid)] - last >= MINUTE, (index, last)


async def test_no_check_starts_once_the_stop_is_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The record holds every Cluster's next due; a check begun after it, while the process
    still runs down, would be made again at that due by the next manager, seconds later."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=49)
    for index in range(40):
        put_cluster(fake, NS, f"c{index:03d}", server(index))
    fleet = StandInSpokes()
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, _options(), check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            await trio.sleep(200.0)
            await manager.record_stop()
            recorded = trio.current_time()
            await trio.sleep(70.0)  # a minute and more of dues go by
            nursery.cancel_scope.cancel()
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is not None
    late = [t for i in range(40) for t in fleet.asked[server(i)] if t > recorded]
    assert late == [], late


def test_the_first_name_of_record_stop_is_kept_for_embedding_programs() -> None:
    """``Manager.hand_over`` was the public name (docs/embedding.md); programs that call it keep
    working."""
    assert Manager.hand_over is Manager.record_stop
