"""The dispatcher: a large first list is taken in slices, so a restart does not block the loop;
a shard on its way out takes no new actor.

After a restart the Clusters' first list is the whole fleet, and each Cluster costs an actor
(about 0.4 ms): at 1,000 Clusters the benchmark measured one 364 ms step, during which no check,
Lease renewal or watch could run. No server and no timing here: ``SLICE`` is set to zero, so
each unit of work ends in a checkpoint, and the test counts the dispatcher's task steps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from kokumi.actors import pace
from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, ClusterRef
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi
from tests.support.standin import put_environment

N = 300


class _Steps(trio.abc.Instrument):
    """After each step of the task that follows the Clusters' watch, how many actors run."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.counts: list[int] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("._follow_clusters") and self.manager is not None:
            self.counts.append(len(_fleet(self.manager)))


async def _unreachable(
    connection: Connection, *, timeout: float, egress: object = None, cluster_wide: bool = True
) -> Outcome:
    return Outcome(False, Reason.UNREACHABLE, "connection refused", connection.server)


async def _own(client: Client, *, timeout: float) -> Outcome:
    return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def _cluster(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "kc"}}},
    }


@asynccontextmanager
async def _manager(fake: FakeApi, shard_7: bool = False) -> AsyncIterator[Manager]:
    """A manager on ``fake`` whose checks all find the spoke unreachable, running until the
    block ends; ``shard_7``: namespace ``fleet`` is in shard 7, which it does not serve."""
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        manager = Manager(
            client,
            Options(namespace="kokumi", argocd_namespace="argocd"),
            check=_unreachable,
            check_own=_own,
        )
        if shard_7:
            manager.dispatcher._shard_of = lambda ref: 7 if ref.namespace == "fleet" else 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            yield manager
            nursery.cancel_scope.cancel()


def _fleet(manager: Manager) -> set[str]:
    """The Clusters with an actor, apart from the in-cluster default the manager creates."""
    return {a.ref.name for a in manager.dispatcher.actors if a.ref.namespace == "fleet"}


async def test_the_first_list_is_taken_in_slices(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(pace, "SLICE", 0.0)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    for index in range(N):
        fake.put(_cluster("fleet", f"c{index:04d}"))
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with _manager(fake) as manager:
            steps.manager = manager
            with trio.fail_after(60):
                await manager.dispatcher.wait_checked()
            started = _fleet(manager)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert started == {f"c{i:04d}" for i in range(N)}
    # Taken in one step, the list would leave no count between none and all.
    partial = {count for count in steps.counts if 0 < count < N}
    assert len(partial) >= N // 2, sorted(partial)


async def _slow_to_end() -> None:
    """A child that takes its time once cancelled, as an actor releasing its server does."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(5)


async def test_a_shard_on_its_way_out_takes_no_new_actor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its Lease lost, a shard's nursery waits for its actors to end, then closes before the
    shard's task runs again: a Cluster event for the shard in between must start nothing (it
    started an actor that would outlive the Lease, or crashed the manager on the closed
    nursery, seen with three replicas at 10,000 Clusters)."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    async with _manager(fake) as manager, trio.open_nursery() as nursery:
        dispatcher = manager.dispatcher
        await dispatcher.wait_checked()
        dispatcher._shard_of = lambda ref: 7 if ref.namespace == "fleet" else 0
        lease = trio.CancelScope()

        async def serve(task_status: trio.TaskStatus[None]) -> None:
            with lease:
                await dispatcher.serve_shard(7, task_status=task_status)

        await nursery.start(serve)
        dispatcher._nurseries[7].start_soon(_slow_to_end)
        dispatcher._upsert(_cluster("fleet", "early"))
        assert ClusterRef("fleet", "early") in {a.ref for a in dispatcher.actors}
        lease.cancel()
        await trio.sleep(1)  # the shard's actors are ending; one takes its time
        dispatcher._upsert(_cluster("fleet", "late"))
        assert ClusterRef("fleet", "late") not in {a.ref for a in dispatcher.actors}
        await trio.sleep(10)
        assert ClusterRef("fleet", "early") not in {a.ref for a in dispatcher.actors}
        nursery.cancel_scope.cancel()


class _ShardSteps(trio.abc.Instrument):
    """After each step of the task serving a shard: how many actors run, and which names ever
    had one."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.counts: list[int] = []
        self.ever: set[str] = set()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith(".serve"):
            started = _fleet(self.manager)
            self.counts.append(len(started))
            self.ever |= started


async def test_a_shard_taken_starts_its_actors_in_slices_from_the_store(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    """A replica that takes a shard starts its share of the fleet in slices (5,000 actors took
    500-600 ms in one step at 10,000 Clusters and two replicas), each Cluster read when its turn
    comes: one deleted while the shard starts gets no actor."""
    monkeypatch.setattr(pace, "SLICE", 0.0)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    for index in range(N):
        fake.put(_cluster("fleet", f"c{index:04d}"))
    last = f"c{N - 1:04d}"
    async with _manager(fake, shard_7=True) as manager:
        dispatcher = manager.dispatcher
        async with trio.open_nursery() as nursery:
            await dispatcher.wait_checked()
            assert _fleet(manager) == set(), "nobody serves shard 7 yet"
            steps = _ShardSteps(manager)

            async def serve(task_status: trio.TaskStatus[None]) -> None:
                await dispatcher.serve_shard(7, task_status=task_status)

            async def delete_the_last_once_under_way() -> None:
                while len(_fleet(manager)) < 10:
                    await trio.lowlevel.checkpoint()
                fake.remove(api.CLUSTERS, last, "fleet")

            trio.lowlevel.add_instrument(steps)
            try:
                nursery.start_soon(delete_the_last_once_under_way)
                with trio.fail_after(60):
                    await nursery.start(serve)
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert _fleet(manager) == {f"c{i:04d}" for i in range(N - 1)}
            nursery.cancel_scope.cancel()
    assert last not in steps.ever, "an actor for a Cluster deleted before its turn"
    partial = {count for count in steps.counts if 0 < count < N - 1}
    assert len(partial) >= N // 2, sorted(partial)


async def test_each_cluster_is_kept_once_by_its_actor_and_the_environments_index(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The Environments' index takes the actor's Cluster of the same version, not a parse of
    its own; and once the watch brings a status write back, the actor keeps that one copy."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    put_environment(fake, "fleet")
    for index in range(5):
        fake.put(_cluster("fleet", f"c{index}"))
    async with _manager(fake) as manager:
        with trio.fail_after(60):
            await manager.dispatcher.wait_checked()
        actors = {a.ref.name: a for a in manager.dispatcher.actors if a.ref.namespace == "fleet"}
        indexes = manager.dispatcher.environments_actor._index

        def settled() -> bool:
            entries = indexes["fleet"].entries if "fleet" in indexes else {}
            return all(
                name in entries
                and isinstance(actor.cluster, api.Cluster)
                and actor.cluster.status.conditions
                and entries[name].cluster.metadata.resource_version
                == actor.cluster.metadata.resource_version
                for name, actor in actors.items()
            )

        with trio.fail_after(60):
            while not settled():  # noqa: ASYNC110 - polling the actors' state
                await trio.sleep(0.1)
        for name, actor in actors.items():
            cluster = actor.cluster
            assert isinstance(cluster, api.Cluster)
            assert indexes["fleet"].entries[name].cluster is cluster
            assert actor.state.written is cluster.status
