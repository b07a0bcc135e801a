"""The dispatcher takes a large first list in slices, so a restart does not block the loop.

After a restart the Clusters' first list is the whole fleet, and each Cluster costs an actor
(about 0.4 ms): at 1,000 Clusters the benchmark measured one 364 ms step, during which no check,
Lease renewal or watch could run. No server and no timing here: ``SLICE`` is set to zero, so
each unit of work ends in a checkpoint, and the test counts the dispatcher's task steps.
"""

from __future__ import annotations

import pytest
import trio

from kokumi import api
from kokumi.actors import pace
from kokumi.actors.context import Options
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kubeconfig import Connection
from kokumi.manager import Manager
from kokumi.ownership import IN_CLUSTER_SERVER
from kokumi.probe import Finding
from kokumi.reasons import Reason
from tests.fakeapi import FakeApi

N = 300


class _Steps(trio.abc.Instrument):
    """After each step of the task that follows the Clusters' watch, how many actors run."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.counts: list[int] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("._follow_clusters") and self.manager is not None:
            self.counts.append(len(_fleet(self.manager)))


async def _unreachable(connection: Connection, *, timeout: float, egress: object = None) -> Finding:
    return Finding(False, Reason.UNREACHABLE, "connection refused", connection.server)


async def _own(client: Client, *, timeout: float) -> Finding:
    return Finding(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def _fleet(manager: Manager) -> set[str]:
    """The Clusters with an actor, apart from the in-cluster default the manager creates."""
    return {a.ref.name for a in manager.dispatcher.actors if a.ref.namespace == "fleet"}


async def test_the_first_list_is_taken_in_slices(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(pace, "SLICE", 0.0)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    for index in range(N):
        fake.put(
            {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": f"c{index:04d}", "namespace": "fleet"},
                "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "kc"}}},
            }
        )
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with Client(
            Config(server="https://hub.example:6443"), transport=fake, max_retries=0
        ) as client:
            manager = Manager(
                client,
                Options(namespace="kokumi", argocd_namespace="argocd"),
                check=_unreachable,
                check_own=_own,
            )
            steps.manager = manager
            async with trio.open_nursery() as nursery:
                nursery.start_soon(manager.run)
                with trio.fail_after(60):
                    await manager.dispatcher.wait_checked()
                started = _fleet(manager)
                nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert started == {f"c{i:04d}" for i in range(N)}
    # Taken in one step, the list would leave no count between none and all.
    partial = {count for count in steps.counts if 0 < count < N}
    assert len(partial) >= N // 2, sorted(partial)
