"""The server registry with a fleet's worth of Argo CD Secrets, on the in-process API fake.

At 10,000 Clusters the registry took in Argo CD's Secrets (at a restart, or a relist after a
410) and settled the servers they touched in one step of 1.0 to 1.6 s, during which no check,
Lease renewal or watch could run. It also stopped settling after 1,000 servers, taking that for
a table that does not converge: the rest were neither written nor told until touched again.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from kokumi.actors import pace
from kokumi.actors.registry import Registry
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from tests.support.fakeapi import FakeApi

N = 1100  # past the old limit of 1,000 servers per settle


def _secrets(fake: FakeApi) -> list[dict[str, object]]:
    for index in range(N):
        holder = ClusterRef("fleet", f"c{index:04d}")
        server = f"https://10.0.{index // 250}.{index % 250 + 1}:6443"
        fake.put(argocd.cluster_secret(Connection(server, token="t"), holder, "argocd"))
    return [dict(s) for s in fake.objects(SECRETS, "argocd") if argocd.holder_of(s) is not None]


class _Steps(trio.abc.Instrument):
    """After each step of the registry's own task, how many Secrets it has taken in."""

    def __init__(self) -> None:
        self.registry: Registry | None = None
        self.counts: list[int] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Registry.run") and self.registry is not None:
            self.counts.append(len(self.registry._memory.secrets))


@asynccontextmanager
async def _registry(fake: FakeApi, steps: _Steps | None = None) -> AsyncIterator[Registry]:
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        registry = Registry(client, "argocd")
        if steps is not None:
            steps.registry = registry
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            yield registry
            nursery.cancel_scope.cancel()


async def test_every_server_of_a_large_settle_is_settled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """1,100 Clusters deleted while the manager was away: each Secret goes, the last included."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    assert len(_secrets(fake)) == N
    async with _registry(fake) as registry:
        await registry.prune(())
        left = [s for s in fake.objects(SECRETS, "argocd") if argocd.is_ours(s)]
        assert left == []
        assert registry.out_of_step() == frozenset()


async def test_the_secrets_are_taken_in_slices(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    monkeypatch.setattr(pace, "SLICE", 0.0)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    _secrets(fake)
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with _registry(fake, steps) as registry:
            assert len(registry._memory.secrets) == N
    finally:
        trio.lowlevel.remove_instrument(steps)
    # Taken in one step, the list would leave no count between none and all.
    partial = {count for count in steps.counts if 0 < count < N}
    assert len(partial) >= N // 2, sorted(partial)


class _ReshardSteps(trio.abc.Instrument):
    """After each step of the registry's task: how many servers it knows to be held elsewhere."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.remotes: list[int] = []

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Registry.run"):
            self.remotes.append(len(self.registry._memory.table.remotes()))


async def test_a_reshard_is_taken_in_slices(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    """A replica that takes a shard classifies every Secret again: 3.3 s in one step at 10,000
    Secrets and two replicas after a restart, now in slices. Half the holders are served here."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    _secrets(fake)
    async with _registry(fake) as registry:
        registry.follow_shards(lambda ref: math.inf if ref.name.endswith(("0", "2", "4")) else None)
        monkeypatch.setattr(pace, "SLICE", 0.0)
        steps = _ReshardSteps(registry)
        trio.lowlevel.add_instrument(steps)
        try:
            await registry.reshard()
        finally:
            trio.lowlevel.remove_instrument(steps)
        elsewhere = N - N * 3 // 10
        assert len(registry._memory.table.remotes()) == elsewhere
        # Taken in one step, the Secrets held elsewhere would leave no count between none and all.
        partial = {count for count in steps.remotes if 0 < count < elsewhere}
        assert len(partial) >= elsewhere // 2, sorted(partial)


async def test_claims_that_wait_together_are_written_several_at_once_in_first_come_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A hub that takes 0.5 s for each create, 72 new Clusters claiming at once (a fleet
    onboarding), 56 of them a server of their own and 8 pairs one server each: the 64 Secrets
    are created eight at a time, so every claim is served within about 5 s, not 32 s one after
    the other, and of each pair the first to claim holds its server and the other waits in its
    line."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    fake.delay(0.5, verb="create", resource="secrets")
    servers = [f"https://10.1.0.{i + 1}:6443" for i in range(56)]
    servers += [f"https://10.2.0.{i // 2 + 1}:6443" for i in range(16)]
    clusters = [ClusterRef("fleet", f"c{i:02d}") for i in range(len(servers))]
    served: dict[ClusterRef, float] = {}
    async with _registry(fake) as registry:
        began = trio.current_time()

        async def claim(index: int) -> None:
            await trio.sleep(index * 0.001)  # in this order
            cluster = clusters[index]
            await registry.want(cluster, f"uid-{index}", Connection(servers[index], token="t"))
            served[cluster] = trio.current_time() - began

        async with trio.open_nursery() as nursery:
            for index in range(len(clusters)):
                nursery.start_soon(claim, index)
        holders = {
            argocd.holder_of(s) for s in fake.objects(SECRETS, "argocd") if argocd.is_ours(s)
        }
        assert registry.out_of_step() == frozenset()
    assert len(served) == len(clusters)
    assert max(served.values()) < 8.0, sorted(served.values())[-3:]
    assert holders == set(clusters[:56]) | set(clusters[56::2])
