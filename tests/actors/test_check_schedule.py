"""The check schedule over simulated minutes: the real Manager and Cluster actors on the
in-process API fake, with a stand-in for the spoke check (the probe's own tests are elsewhere).

300 Clusters, 60 of them silent (their checks run out the whole 10 s): 600 slot-seconds a minute
for the silent against the 420 that seven slots give, so the silent ones queue all the time.
The answering Clusters must still be checked about once a minute, each at its own place in the
minute, and the silent ones in turn every few minutes; a silent Cluster that answers again is
back on the minute.
"""

from __future__ import annotations

import base64
import itertools
from collections import defaultdict

import trio
import trio.testing
from prometheus_client.exposition import generate_latest

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import NotFound
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support import strategies as s
from tests.support.fakeapi import FakeApi

NS = "fleet"
ANSWERING, SILENT = 240, 60
FLIPPER = "https://flipper.example:6443"


def server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


class Fleet:
    """The stand-in spokes: which hang, and when each was asked."""

    def __init__(self) -> None:
        self.hanging = {server(i) for i in range(ANSWERING, ANSWERING + SILENT)} | {FLIPPER}
        self.asked: dict[str, list[float]] = defaultdict(list)

    async def check(
        self, connection: Connection, *, timeout: float, egress: object = None
    ) -> Outcome:
        self.asked[connection.server].append(trio.current_time())
        if connection.server in self.hanging:
            await trio.sleep(timeout)
            return Outcome(
                False, Reason.UNREACHABLE, f"timed out after {timeout:g} s", connection.server
            )
        await trio.sleep(0.005)
        return Outcome(True, Reason.READY, "reachable", connection.server, "v1.36.3")

    async def check_own(self, client: Client, *, timeout: float) -> Outcome:
        return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def _put_cluster(fake: FakeApi, name: str, url: str) -> None:
    text = s.dump(
        s.kubeconfig(
            cluster={"server": url, "certificate-authority-data": s.b64(s.ca_pem())},
            user={"token": f"token-{name}"},
        )
    )
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "data": {"value": base64.b64encode(text.encode()).decode()},
        }
    )
    fake.put(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": name}}},
        }
    )


def _gaps(times: list[float], since: float) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times) if a >= since]


async def test_silent_clusters_take_only_the_slots_the_answering_ones_leave(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=25)
    for index in range(ANSWERING + SILENT):
        _put_cluster(fake, f"c{index:03d}", server(index))
    _put_cluster(fake, "flipper", FLIPPER)
    fleet = Fleet()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(300.0)
            scraped = generate_latest(manager.metrics.registry).decode()
            fleet.hanging.discard(FLIPPER)  # the flipper answers again
            answered = trio.current_time()
            await trio.sleep(900.0)
            nursery.cancel_scope.cancel()

    # The silent queue is never empty, the answering one always is.
    assert 'kokumi_checks_waiting{class="answering"} 0.0' in scraped
    waiting = next(
        float(line.rsplit(" ", 1)[1])
        for line in scraped.splitlines()
        if line.startswith('kokumi_checks_waiting{class="silent"}')
    )
    assert 20 <= waiting <= SILENT, scraped
    assert 'kokumi_checks_running{class="silent"} 7.0' in scraped

    # Every answering Cluster about once a minute once the silent ones are known (their first
    # two checks each, at full priority, fill the slots for the first two minutes): its place
    # plus up to 6 s of lateness each time, and never a wait for a slot.
    for index in range(ANSWERING):
        gaps = _gaps(fleet.asked[server(index)], 240.0)
        assert len(gaps) >= 14, (index, gaps)
        assert all(53.9 <= gap <= 66.1 for gap in gaps), (index, gaps)

    # Every silent one in its turn: 600 slot-seconds a minute of demand on 420, so every one is
    # checked every minute and a half or so, and none waits much longer than the others.
    silent_gaps = [
        gap
        for index in range(ANSWERING, ANSWERING + SILENT)
        for gap in _gaps(fleet.asked[server(index)], 300.0)
    ]
    assert max(silent_gaps) <= 180.0, max(silent_gaps)
    counts = [
        sum(1 for t in fleet.asked[server(i)] if t >= 300.0)
        for i in range(ANSWERING, ANSWERING + SILENT)
    ]
    assert max(counts) - min(counts) <= 3, counts

    # The flipper: checked in the silent queue while it hung; its first check that answers
    # comes within a few minutes, the next at its own place within the following minute, and
    # from then on it is on the minute.
    after = [t for t in fleet.asked[FLIPPER] if t >= answered]
    assert after[0] - answered <= 180.0, after
    assert after[1] - after[0] <= 66.1, after
    assert all(53.9 <= gap <= 66.1 for gap in _gaps(after, after[1])), after

    # Spread over the minute: the answering Clusters' checks in the fifth minute, by the tenth
    # of the minute they came in, hold about 24 each (no burst of the fleet created together).
    tenths = [0] * 10
    for index in range(ANSWERING):
        for t in fleet.asked[server(index)]:
            if 240.0 <= t < 300.0:
                tenths[int((t - 240.0) // 6)] += 1
    # About one check each: a Cluster whose place is near the window's edges has 0 or 2 in it,
    # as its random lateness falls (up to 6 s: about one Cluster in ten).
    assert abs(sum(tenths) - ANSWERING) <= 20, sum(tenths)
    assert all(8 <= count <= 48 for count in tenths), tenths


async def test_metrics_show_where_the_next_checks_fall_in_the_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``kokumi_checks_due``: the Clusters by the tenth of the coming minute their next check
    falls in; flat, and none overdue, on a manager that keeps up."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=7)
    for index in range(200):
        _put_cluster(fake, f"c{index:03d}", server(index))
    fleet = Fleet()
    fleet.hanging.clear()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(150.3)
            due = dict(manager.metrics.due_spread())
            scraped = generate_latest(manager.metrics.registry).decode()
            nursery.cancel_scope.cancel()
    assert due["overdue"] == 0
    # "later": checked a moment ago with less lateness than its next check has, so due a
    # little over a minute on; about 1 in 60 at any moment, 3 of 200 on average.
    assert due["later"] <= 12, due
    tenths = [count for within, count in due.items() if within.endswith("s")]
    assert len(tenths) == 10
    assert sum(tenths) >= 188
    assert all(8 <= count <= 35 for count in tenths), due
    assert 'kokumi_checks_due{within="0-6s"}' in scraped
    assert 'kokumi_checks_due{within="54-60s"}' in scraped


async def test_a_cluster_waiting_for_its_slot_is_deleted_without_waiting_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """60 silent Clusters queue for seven slots, each waiting a minute or more for its turn: a
    deletion (or any other message) takes the Cluster out of the queue at once, and its
    finalizer (it holds its Argo CD registration) goes without waiting for a check."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=26)
    for index in range(ANSWERING, ANSWERING + SILENT):
        _put_cluster(fake, f"c{index:03d}", server(index))
    fake.put(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": "all", "namespace": NS},
            "spec": {"clusterSelector": {}},
        }
    )
    fleet = Fleet()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=fleet.check, check_own=fleet.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(200.0)
            queued = [
                actor
                for actor in manager.dispatcher.actors
                if actor.waiting_for_slot and api.FINALIZER in actor.cluster.metadata.finalizers
            ]
            assert len(queued) > SILENT // 2
            # The one whose turn is furthest away: checked last, so last in the silent queue.
            victim = max(queued, key=lambda actor: fleet.asked[_server_of(actor.ref.name)][-1])
            spoke = _server_of(victim.ref.name)
            before = len(fleet.asked[spoke])
            deleted = trio.current_time()
            await client.delete(api.CLUSTERS, victim.ref.name, namespace=NS)
            while True:
                try:
                    await client.get(api.CLUSTERS, victim.ref.name, namespace=NS)
                except NotFound:
                    break
                await trio.sleep(0.1)
            took = trio.current_time() - deleted
            nursery.cancel_scope.cancel()

    # Simulated seconds: its turn in the queue was 40 s or more away.
    assert took < 2.0, f"the deletion waited {took:.1f} s for the check slot"
    assert len(fleet.asked[spoke]) == before  # and it was never checked again


def _server_of(name: str) -> str:
    return server(int(name[1:]))
