"""With ``--shards`` a stopping replica records each shard it holds, and the replica that takes
the shard follows that record: a rolling upgrade moves every shard, and without it the taker
checks at once each Cluster whose place came in the seconds before (before its minute, since the
old holder may have checked it) and the others at their places with a new lateness.

Three real Managers on the in-process API fake under Trio's autojump clock, with a stand-in for
the spoke check, as a Deployment's rolling upgrade has them: two replicas hold one shard each of
two, a new one (room for two) starts and holds nothing, then the oldest stops and the new one
takes its shard. The fleet is young when the roll comes (created over 100 s, the last a minute
before), as in tests/actors/test_stoprecord.py.
"""

from __future__ import annotations

import itertools
import logging

import pytest
import trio
import trio.testing

from kokumi.core.api import CLUSTERS
from kokumi.core.fleet import stoprecord
from kokumi.core.fleet.leader import Timing
from kokumi.core.fleet.shards import Sharding, shard_of
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import CONFIG_MAPS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster

NS = "fleet"
COUNT = 120
SHARDS = 2
TIMING = Timing(lease_duration=6.0, renew_deadline=4.0, retry_period=1.0)
MINUTE = 60.0 - 1e-6  # the shortest gap between two checks, but for floating point
LOGGER = "kokumi.manager"


def server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


def _replica(fake: FakeApi, fleet: StandInSpokes, name: str, room: int) -> Manager:
    options = Options(
        namespace="kokumi",
        argocd_namespace="argocd",
        keep_in_cluster=False,
        field_manager=f"kokumi-{name}",
        sharding=Sharding(f"replica-{name}", SHARDS, room, TIMING),
    )
    client = Client(
        Config(server="https://hub.example:6443"), transport=fake, field_manager=f"kokumi-{name}"
    )
    return Manager(client, options, check=fleet.check, check_own=fleet.check_own)


async def _roll(
    fake: FakeApi, fleet: StandInSpokes, *, record: bool
) -> tuple[float, int, list[str]]:
    """Replicas a and b, a young fleet, then c; a stops (recording its shard or not) and c takes
    its shard; run on 130 s. When a stopped, the shard that moved, and the uids of the Clusters
    whose actors c started, in the order it started them."""
    first = _replica(fake, fleet, "a", 1)
    second = _replica(fake, fleet, "b", 1)
    third = _replica(fake, fleet, "c", 2)
    a_scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(_run_in, first, a_scope)
        await trio.sleep(3.0)  # a takes a shard first, then b the other
        await nursery.start(second.run)
        await trio.sleep(10.0)
        assert len(first.held_shards()) == 1 and len(second.held_shards()) == 1
        (moved,) = first.held_shards()
        for index in range(COUNT):
            put_cluster(fake, NS, f"c{index:03d}", server(index))
            await trio.sleep(100.0 / COUNT)
        await trio.sleep(60.0)
        await nursery.start(third.run)
        await trio.sleep(10.0)
        assert third.held_shards() == set()  # every shard is held: the new one waits
        if record:
            await first.record_stop()
        stopped = trio.current_time()
        a_scope.cancel()
        await trio.sleep(130.0)
        assert third.held_shards() == {moved}
        started = [actor.uid for actor in third.dispatcher.actors]
        nursery.cancel_scope.cancel()
    return stopped, moved, started


async def _run_in(
    manager: Manager,
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        await manager.run(task_status=task_status)


def _split(fleet: StandInSpokes, index: int, stopped: float) -> tuple[list[float], list[float]]:
    """A Cluster's checks before the stop and after it."""
    times = fleet.asked[server(index)]
    return [t for t in times if t <= stopped], [t for t in times if t > stopped]


def _uid(fake: FakeApi, index: int) -> str:
    obj = fake.object(CLUSTERS, f"c{index:03d}", NS)
    assert obj is not None
    return str(obj["metadata"]["uid"])


def _moved(moved: int) -> list[int]:
    return [i for i in range(COUNT) if shard_of(NS, f"c{i:03d}", SHARDS) == moved]


async def test_a_shard_taken_over_on_a_stop_keeps_every_cluster_on_its_minute(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=51)
    fleet = StandInSpokes()
    stopped, moved, started = await _roll(fake, fleet, record=True)

    record = fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi")
    assert record is not None
    assert set(record["data"]) == {stoprecord.keys(moved)[0]}  # the stopping replica's shard only
    indexes = _moved(moved)
    assert len(indexes) > COUNT // 4
    for index in indexes:
        times = fleet.asked[server(index)]
        before, after = _split(fleet, index, stopped)
        assert before and after, index
        # No check before the minute since the last one began, across the handover too, and
        # each gap one of the Cluster's chain: the taker knew when each was due.
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= MINUTE, (index, times)
        assert after[0] - before[-1] <= 66.1, (index, before[-1] - stopped, after[0] - stopped)
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any(f"(shard {moved}): the next checks of" in m for m in said), said
    # The taker started the shard's actors soonest recorded due first, not in the store's
    # order (the Clusters' creation, whose places wrap around the minute).
    written_key = stoprecord.keys(moved)[0]
    dues = stoprecord.read_config_map(record, float(record["data"][written_key]), 1.0, shard=moved)
    in_start = [dues[stoprecord.uid_key(uid)] for uid in started]
    assert len(in_start) == len(indexes) and in_start == sorted(in_start)
    in_store = [dues[stoprecord.uid_key(_uid(fake, index))] for index in indexes]
    assert in_store != sorted(in_store)  # else the order above proves nothing


async def test_without_the_shards_record_the_same_handover_checks_before_the_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The roll above with the old replica killed, not stopped: the taker checks at once the
    Clusters whose place came in the seconds before, whatever the old holder did, and the young
    ones at their places. This is what the record is for; if this test fails, the one above
    proves nothing."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=51)
    fleet = StandInSpokes()
    stopped, moved, _ = await _roll(fake, fleet, record=False)
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is None
    gaps = []
    for index in _moved(moved):
        before, after = _split(fleet, index, stopped)
        gaps.append(after[0] - before[-1])
    assert min(gaps) < MINUTE or max(gaps) > 70.0, sorted(gaps)


async def test_a_refused_shard_record_is_logged_once_and_the_taker_checks_at_the_places(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The hub refuses the record's write: the stop goes on (the Lease is handed back at once),
    the refusal is one warning naming the shard, and the taker serves the shard as after a
    crash, every Cluster checked again."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=52)
    fake.fail(403, times=None, verb="patch", resource="configmaps")
    fleet = StandInSpokes()
    stopped, moved, _ = await _roll(fake, fleet, record=True)
    assert fake.object(CONFIG_MAPS, stoprecord.NAME, "kokumi") is None
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and "could not write" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert f"(shard {moved})" in warnings[0] and "at its place in the minute" in warnings[0]
    for index in _moved(moved):
        assert any(t > stopped for t in fleet.asked[server(index)]), index
