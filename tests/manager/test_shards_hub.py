"""Two replicas with ``--shards 2`` on the real hub: each Cluster has exactly one replica.

Short Lease timings (4 s lease) keep the tests quick; the rules are the ones of leader election.
Each replica is a manager of its own in this process, with its own hub client and field manager.
"""

from __future__ import annotations

import base64
import functools
import operator
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

from kokumi.actors.registry import HANDOVER_REASON
from kokumi.core import api
from kokumi.core.fleet import stoprecord
from kokumi.core.fleet.leader import LeaderElection, Timing
from kokumi.core.fleet.shards import Sharding, lease_name, preference, shard_of
from kokumi.core.registry import argocd
from kokumi.core.registry.handover import ANNOTATION_WAITING, waiting_of
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube import LEASES, Conflict
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import CONFIG_MAPS, EVENTS, NAMESPACES, SECRETS
from kokumi.kube.watch import Resync, WatchEvent, watch
from kokumi.manager import Manager, run_manager
from kokumi.objects import Resource
from kokumi.runtime.election import Admission, LeaseElector
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration, closed_port_server, closed_port_servers
from tests.support.manager import (
    Workspace,
    holder_labels,
    hub_client,
    make_namespace,
    ready_of,
    wait_for,
    wait_reason,
    workspace,
)

TIMING = Timing(lease_duration=4.0, renew_deadline=3.0, retry_period=0.5)
"""Short Leases keep the tests quick; a renewal must still fit into a loaded two-core machine,
where 1.5 s did not always (a replica lost a shard it was expected to keep)."""
SHARDS = 2


@attrs.define
class Replica:
    name: str
    manager: Manager
    scope: trio.CancelScope

    def serves(self, ref: ClusterRef) -> bool:
        return shard_of(ref.namespace, ref.name, SHARDS) in self.manager.held_shards()


@asynccontextmanager
async def replicas(
    hub: APIServer, ws: Workspace, limits: dict[str, int | None]
) -> AsyncIterator[dict[str, Replica]]:
    """Start one sharded manager per name, in order, each holding at most its limit of shards."""
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    running: dict[str, Replica] = {}
    async with trio.open_nursery() as nursery:
        for name, limit in limits.items():
            options = ws.options(
                keep_in_cluster=False,
                check_interval=3.0,
                check_jitter=0.3,
                field_manager=f"kokumi-{name}",
                sharding=Sharding(f"replica-{name}", SHARDS, limit, TIMING),
            )
            scope = trio.CancelScope()

            async def run(
                options: Any = options,
                scope: trio.CancelScope = scope,
                *,
                task_status: trio.TaskStatus[Manager],
            ) -> None:
                with scope:
                    await run_manager(config, options, task_status=task_status)

            free = SHARDS - sum(len(r.manager.held_shards()) for r in running.values())
            manager: Manager = await nursery.start(run)
            running[name] = Replica(name, manager, scope)
            # Let this one take what it may before the next one starts.
            want = min(limit or SHARDS, free)
            await wait_for(
                functools.partial(_held, manager),
                functools.partial(operator.eq, want),
                f"replica {name} to take its shards",
                timeout=10,
            )
        try:
            yield running
        finally:
            nursery.cancel_scope.cancel()


async def _async(value: Any) -> Any:
    return value


async def _held(manager: Manager) -> int:
    return len(manager.held_shards())


async def _checks(manager: Manager, ref: ClusterRef) -> int:
    return manager.metrics.checks_of(ref)


def argo_name(secret: dict[str, Any]) -> str:
    """The cluster's name in Argo CD, as the Secret's data says (the holder's replica writes it)."""
    return base64.b64decode(secret["data"]["name"]).decode()


def named_in_shard(namespace: str, prefix: str, shard: int, skip: int = 0) -> str:
    """The first name ``prefix-<k>`` whose Cluster falls in ``shard`` (after ``skip`` such)."""
    found = 0
    for k in range(1000):
        name = f"{prefix}-{k}"
        if shard_of(namespace, name, SHARDS) == shard:
            if found == skip:
                return name
            found += 1
    raise AssertionError("no name found")  # pragma: no cover


async def kubeconfig_cluster(
    ws: Workspace, reg: Registration, namespace: str, name: str, server: str | None = None
) -> None:
    text = reg.variant(server=server) if server is not None else reg.kubeconfig
    await ws.kubeconfig_secret(namespace, f"{name}-kubeconfig", text)
    await ws.cluster(namespace, name, secret=f"{name}-kubeconfig", labels={"fleet": "edge"})


async def secrets_by_holder(ws: Workspace) -> dict[tuple[str, str], dict[str, Any]]:
    return {holder_labels(s): s for s in await ws.argocd_secrets()}


async def drain(ws: Workspace) -> None:
    """Delete the Clusters while a replica runs, and wait until no finalizer or Secret is left."""
    await ws.cleanup()
    for namespace in ws.namespaces:
        await wait_for(
            functools.partial(ws.client.list, api.CLUSTERS, namespace=namespace),
            lambda listing: not listing["items"],
            f"the Clusters of {namespace} to be gone",
        )
    await wait_for(ws.argocd_secrets, lambda items: not items, "Argo CD's Secrets to be gone")


@attrs.define
class Writes:
    """Every change the watches saw, with when, which object and its resourceVersion."""

    seen: list[tuple[float, str, str, str]] = attrs.field(factory=list)

    def after(self, start: float, names: set[str]) -> list[tuple[float, str, str, str]]:
        return [w for w in self.seen if w[0] >= start and w[1] in names]


async def follow(
    client: Client, resource: Resource, namespace: str, writes: Writes, *, task_status: Any
) -> None:
    send, receive = trio.open_memory_channel[WatchEvent | Resync](100)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(watch, client, resource, send, namespace=namespace))
        task_status.started()
        async for event in receive:
            if isinstance(event, Resync):
                continue
            meta = event.object["metadata"]
            writes.seen.append(
                (trio.current_time(), meta["name"], event.type, str(meta["resourceVersion"]))
            )


async def _holder_and_names(
    ws: Workspace, reg: Registration, ns: str, shard_a: int, shard_b: int
) -> tuple[str, str, str, dict[str, Any]]:
    """A holder in shard a, Ready and registered; the names of a first waiter in shard b and a
    second in shard a, not created yet; and the holder's Secret."""
    holder = named_in_shard(ns, "spoke", shard_a)
    early = named_in_shard(ns, "spoke", shard_b)
    late = named_in_shard(ns, "spoke", shard_a, skip=1)
    await ws.environment(ns, "edge", {"fleet": "edge"})
    await kubeconfig_cluster(ws, reg, ns, holder)
    await wait_reason(ws, ns, holder, "Ready")
    (secret,) = await ws.argocd_secrets()
    return holder, early, late, secret


async def test_each_cluster_has_one_replica_and_a_stopped_replicas_shards_move(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        refs = [ClusterRef(ns, f"edge-{k}") for k in range(8)]
        assert {shard_of(r.namespace, r.name, SHARDS) for r in refs} == {0, 1}
        async with replicas(hub, ws, {"a": 1, "b": None}) as running:
            a, b = running["a"], running["b"]
            assert len(a.manager.held_shards()) == len(b.manager.held_shards()) == 1
            for ref, server in zip(refs, closed_port_servers(len(refs)), strict=True):
                await kubeconfig_cluster(ws, spoke_kubeconfig, ns, ref.name, server)
            await ws.environment(ns, "edge", {"fleet": "edge"})
            every = {(r.namespace, r.name) for r in refs}
            before = await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: set(found) == every,
                "every Cluster to be registered",
            )
            for ref in refs:
                serving = a if a.serves(ref) else b
                other = b if serving is a else a
                await wait_for(
                    functools.partial(_checks, serving.manager, ref),
                    lambda n: n > 0,
                    f"{ref} to be checked by replica {serving.name}",
                )
                assert other.manager.metrics.checks_of(ref) == 0, f"{ref} checked twice"
                assert ref in serving.manager.registry._memory.table.wanting()
                assert ref not in other.manager.registry._memory.table.wanting()
            # A write is counted when its answer is in, which may come after the hub lists it.
            created = await wait_for(
                lambda: _async(
                    {r.name: r.manager.metrics.registry_writes for r in running.values()}
                ),
                lambda counts: sum(counts.values()) >= len(refs),
                "every create's answer",
            )
            served = {r.name: sum(r.serves(ref) for ref in refs) for r in running.values()}
            assert created == served, "each Secret was written once, by its Cluster's replica"

            a_refs = [ref for ref in refs if a.serves(ref)]
            stopped = trio.current_time()
            a.scope.cancel()  # as on SIGTERM: it hands its Lease back
            await wait_for(
                lambda: _async(len(b.manager.held_shards())),
                lambda held: held == SHARDS,
                "replica b to take replica a's shard",
                timeout=TIMING.lease_duration * 2,
            )
            took = trio.current_time() - stopped
            for ref in a_refs:
                await wait_for(
                    functools.partial(_checks, b.manager, ref),
                    lambda n: n > 0,
                    f"{ref} to be checked by replica b",
                )
                assert ref in b.manager.registry._memory.table.wanting(), "b's registry acts for it"
            after = await secrets_by_holder(ws)
            assert {k: s["metadata"]["uid"] for k, s in after.items()} == {
                k: s["metadata"]["uid"] for k, s in before.items()
            }, "nothing was lost or written again"
            for ref in refs:
                cluster = await ws.get_cluster(ref.namespace, ref.name)
                assert api.FINALIZER in cluster["metadata"].get("finalizers", [])
            print(f"shard taken over {took:.2f} s after its replica stopped")
            await drain(ws)


async def test_a_replica_that_loses_a_shard_lease_writes_nothing_for_it(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        async with replicas(hub, ws, {"a": 1, "b": 1}) as running:
            a, b = running["a"], running["b"]
            (shard,) = a.manager.held_shards()
            name = named_in_shard(ns, "lost", shard)
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, name, closed_port_server())
            await ws.environment(ns, "edge", {"fleet": "edge"})
            registered = await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: (ns, name) in found,
                "the Cluster to be registered",
            )
            await wait_for(
                lambda: ws.get_cluster(ns, name),
                lambda c: (
                    api.FINALIZER in c["metadata"].get("finalizers", [])
                    and ready_of(c).get("reason") == "Unreachable"
                ),
                "the Cluster to be checked and hold its finalizer",
            )
            secret_name = registered[(ns, name)]["metadata"]["name"]
            writes = Writes()
            async with trio.open_nursery() as watching:
                await watching.start(follow, ws.client, api.CLUSTERS, ns, writes)
                await watching.start(follow, ws.client, SECRETS, ws.argocd, writes)

                # Somebody else takes the shard's Lease: replica a must stop at once. A renewal
                # of a's between the read and the write makes the write a 409; a thief reads
                # again and tries again, as every client of a Lease does.
                while True:
                    lease = await ws.client.get(LEASES, lease_name(shard, SHARDS), namespace=ws.own)
                    lease["spec"]["holderIdentity"] = "intruder"
                    lease["spec"]["leaseDurationSeconds"] = 30
                    try:
                        await ws.client.replace(LEASES, lease, namespace=ws.own)
                    except Conflict:
                        continue
                    break
                await wait_for(
                    lambda: _async(a.manager.held_shards()),
                    lambda held: not held,
                    "replica a to step down",
                    timeout=TIMING.renew_deadline + 1,
                )
                # A change that a serving replica would act on at once: nobody selects it.
                changed = await ws.client.patch_merge(
                    api.CLUSTERS, name, {"metadata": {"labels": {"fleet": "none"}}}, namespace=ns
                )
                since = trio.current_time()
                await trio.sleep(TIMING.lease_duration * 2)
                late = [
                    w
                    for w in writes.after(since, {name, secret_name})
                    if not (w[1] == name and w[3] == changed["metadata"]["resourceVersion"])
                ]
                assert late == [], "a replica wrote for a shard it does not hold"
                assert b.manager.held_shards() != {shard}
                assert (ns, name) in await secrets_by_holder(ws), "still registered meanwhile"

                # The intruder lets go: a replica serves the shard again and catches up.
                lease = await ws.client.get(LEASES, lease_name(shard, SHARDS), namespace=ws.own)
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await ws.client.replace(LEASES, lease, namespace=ws.own)
                await wait_for(
                    functools.partial(secrets_by_holder, ws),
                    lambda found: (ns, name) not in found,
                    "the unselected Cluster's registration to go",
                )
                watching.cancel_scope.cancel()
            await drain(ws)


async def test_a_server_held_in_one_shard_is_waited_for_and_taken_over_from_another(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        async with replicas(hub, ws, {"a": 1, "b": 1}) as running:
            a, b = running["a"], running["b"]
            (shard_a,), (shard_b,) = a.manager.held_shards(), b.manager.held_shards()
            first = named_in_shard(ns, "spoke", shard_a)
            second = named_in_shard(ns, "spoke", shard_b)
            await ws.environment(ns, "edge", {"fleet": "edge"})
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, first)
            held = await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: (ns, first) in found,
                "the first Cluster to hold the server",
            )
            await wait_reason(ws, ns, first, "Ready")
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, second)
            waiting = ready_of(await wait_reason(ws, ns, second, "ClusterConflict"))
            assert f"held by Cluster {ns}/{first}" in waiting["message"]
            assert waiting["status"] == "False"
            assert set(await secrets_by_holder(ws)) == {(ns, first)}

            started = trio.current_time()
            await ws.client.delete(api.CLUSTERS, first, namespace=ns)
            taken = await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: set(found) == {(ns, second)},
                "the waiter in the other shard to take the server over",
            )
            handover = trio.current_time() - started
            await wait_reason(ws, ns, second, "Ready")
            server = argocd.server_of(taken[(ns, second)])
            assert server == argocd.server_of(held[(ns, first)])
            print(f"taken over across shards {handover:.2f} s after the holder's deletion")

            # The replica that serves the new holder gives Argo CD the new name, and says so.
            async def renamed() -> list[dict[str, Any]]:
                events = await ws.client.list(EVENTS, namespace=ns)
                return [e for e in events["items"] if e["reason"] == HANDOVER_REASON]

            (event,) = await wait_for(renamed, bool, "the handover Event")
            taker = await ws.client.get(api.CLUSTERS, second, namespace=ns)
            assert event["involvedObject"]["uid"] == taker["metadata"]["uid"]
            assert server is not None
            old = argocd.cluster_name(ClusterRef(ns, first), server)
            new = argocd.cluster_name(ClusterRef(ns, second), server)
            assert event["message"] == (
                f"took over server {server}: Argo CD now names it {new} (was {old});"
                " target it by server, not by name (see docs/argocd.md)"
            )
            await drain(ws)


async def test_the_first_to_wait_takes_over_whichever_replica_serves_it(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    """Holder in shard A; a waiter in shard B comes first, one in shard A second. When the
    holder goes, B's waiter takes the server, though A could have handed it over in place."""
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        async with replicas(hub, ws, {"a": 1, "b": 1}) as running:
            a, b = running["a"], running["b"]
            (shard_a,), (shard_b,) = a.manager.held_shards(), b.manager.held_shards()
            holder, early, late, first_secret = await _holder_and_names(
                ws, spoke_kubeconfig, ns, shard_a, shard_b
            )
            server_hash = argocd.server_hash(str(argocd.server_of(first_secret)))
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, early)
            await wait_reason(ws, ns, early, "ClusterConflict")

            def recorded(found: dict[tuple[str, str], dict[str, Any]]) -> str:
                secret = found.get((ns, holder)) or {}
                annotations = secret.get("metadata", {}).get("annotations") or {}
                return str(annotations.get(ANNOTATION_WAITING, ""))

            await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: recorded(found) == f"{ns}/{early}",
                "the waiter of the other replica to be recorded on the holder's Secret",
            )
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, late)
            await wait_reason(ws, ns, late, "ClusterConflict")
            await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: recorded(found) == f"{ns}/{early},{ns}/{late}",
                "both waiters recorded, in the order they came",
            )

            writes = Writes()
            async with trio.open_nursery() as watching:
                await watching.start(follow, ws.client, SECRETS, ws.argocd, writes)
                started = trio.current_time()
                await ws.client.delete(api.CLUSTERS, holder, namespace=ns)
                taken = await wait_for(
                    functools.partial(secrets_by_holder, ws),
                    lambda found: (
                        set(found) == {(ns, early)}
                        and argo_name(found[(ns, early)]) == f"kokumi-{ns}-{early}-{server_hash}"
                    ),
                    "the first waiter, of the other replica, to take the server over",
                )
                handover = trio.current_time() - started
                await wait_reason(ws, ns, early, "Ready")
                watching.cancel_scope.cancel()
            assert [w for w in writes.seen if w[2] == "DELETED"] == [], "never vanished"
            assert waiting_of(taken[(ns, early)]) == (ClusterRef(ns, late),)
            uid = first_secret["metadata"]["uid"]
            assert taken[(ns, early)]["metadata"]["uid"] == uid, "handed over in place"
            await wait_reason(ws, ns, early, "Ready")
            waiting = ready_of(await wait_reason(ws, ns, late, "ClusterConflict"))
            assert f"held by Cluster {ns}/{early}" in waiting["message"]

            await ws.client.delete(api.CLUSTERS, early, namespace=ns)
            await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: set(found) == {(ns, late)},
                "the second waiter to take it over next",
            )
            await wait_reason(ws, ns, late, "Ready")
            print(f"first waiter of the other replica took over after {handover:.2f} s")
            await drain(ws)


async def test_a_handover_cut_short_by_the_takers_replica_stopping_is_finished_by_another(
    hub: APIServer,
    crds: object,
    spoke_kubeconfig: Registration,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Holder and second waiter in replica a's shard, first waiter in replica b's. The holder
    goes; the moment a has handed the Secret to b's Cluster, b stops with its Lease left held
    (as a killed process leaves it), before or while it writes the new holder's connection. a
    takes b's shard once the Lease runs out and finishes the handover: in place, never deleted,
    the new holder's connection and Argo CD name, the second waiter still recorded."""
    real_release = LeaseElector._release

    async def release(self: LeaseElector) -> None:
        if self.identity != "replica-b":
            await real_release(self)

    monkeypatch.setattr(LeaseElector, "_release", release)
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        async with replicas(hub, ws, {"b": 1, "a": None}) as running:
            a, b = running["a"], running["b"]
            (shard_a,), (shard_b,) = a.manager.held_shards(), b.manager.held_shards()
            holder, early, late, first_secret = await _holder_and_names(
                ws, spoke_kubeconfig, ns, shard_a, shard_b
            )
            server = str(argocd.server_of(first_secret))
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, early)
            await wait_reason(ws, ns, early, "ClusterConflict")
            await kubeconfig_cluster(ws, spoke_kubeconfig, ns, late)
            await wait_reason(ws, ns, late, "ClusterConflict")
            await wait_for(
                functools.partial(secrets_by_holder, ws),
                lambda found: (
                    waiting_of(found.get((ns, holder)) or {})
                    == (ClusterRef(ns, early), ClusterRef(ns, late))
                ),
                "both waiters recorded, in the order they came",
            )

            writes = Writes()
            cut_short: list[str] = []
            async with trio.open_nursery() as watching:
                await watching.start(follow, ws.client, SECRETS, ws.argocd, writes)
                send, receive = trio.open_memory_channel[WatchEvent | Resync](100)
                await watching.start(
                    functools.partial(watch, ws.client, SECRETS, send, namespace=ws.argocd)
                )
                await ws.client.delete(api.CLUSTERS, holder, namespace=ns)
                async for event in receive:
                    if isinstance(event, Resync) or event.type == "DELETED":
                        continue
                    if argocd.holder_of(event.object) == ClusterRef(ns, early):
                        b.scope.cancel()  # at once, in the loop's turn that brought the news
                        cut_short.append(argo_name(event.object))
                        break
                stopped = trio.current_time()
                await wait_for(
                    lambda: _async(a.manager.held_shards()),
                    lambda held: held == {shard_a, shard_b},
                    "replica a to take the stopped replica's shard",
                    timeout=TIMING.lease_duration * 4,
                )
                taken_after = trio.current_time() - stopped
                new_name = argocd.cluster_name(ClusterRef(ns, early), server)
                taken = await wait_for(
                    functools.partial(secrets_by_holder, ws),
                    lambda found: (
                        set(found) == {(ns, early)} and argo_name(found[(ns, early)]) == new_name
                    ),
                    "replica a to finish the handover",
                )
                await wait_reason(ws, ns, early, "Ready")
                watching.cancel_scope.cancel()
            assert [w for w in writes.seen if w[2] == "DELETED"] == [], "never vanished"
            secret = taken[(ns, early)]
            assert secret["metadata"]["uid"] == first_secret["metadata"]["uid"], "in place"
            assert waiting_of(secret) == (ClusterRef(ns, late),)
            waiting = ready_of(await wait_reason(ws, ns, late, "ClusterConflict"))
            assert f"held by Cluster {ns}/{early}" in waiting["message"]
            was = argocd.cluster_name(ClusterRef(ns, holder), server)
            print(
                f"b stopped when the Secret named {cut_short[0]}"
                f" ({'before' if cut_short[0] == was else 'after'} b's write);"
                f" a took b's shard {taken_after:.1f} s later"
            )
            await drain(ws)


async def test_a_replica_holds_no_more_shards_than_it_may(hub: APIServer) -> None:
    """Three free shard Leases, a replica that may hold two: it takes exactly two, in its own
    order, and another replica takes the third."""
    async with hub_client(hub) as client:
        namespace = await make_namespace(client, "shards")

        def electors(identity: str, limit: int) -> list[LeaseElector]:
            admission = Admission(limit)
            return [
                LeaseElector(
                    client,
                    namespace,
                    LeaderElection(identity, lease_name=lease_name(shard, 3), timing=TIMING),
                    admission=admission,
                )
                for shard in preference(identity, 3)
            ]

        first, second = electors("replica-a", 2), electors("replica-b", 2)
        async with trio.open_nursery() as nursery:
            for elector in first:
                nursery.start_soon(elector.run, trio.sleep_forever)
                await elector.tried.wait()  # as the manager does: its first choice first
            await trio.sleep(TIMING.lease_duration * 2)  # ample time to take more, if it could
            held = [e.config.lease_name for e in first if e.leading.is_set()]
            assert len(held) == 2
            assert held == [lease_name(s, 3) for s in preference("replica-a", 3)[:2]]
            for elector in second:
                nursery.start_soon(elector.run, trio.sleep_forever)
            await wait_for(
                lambda: _async([e.config.lease_name for e in second if e.leading.is_set()]),
                lambda names: names == [lease_name(preference("replica-a", 3)[2], 3)],
                "the other replica to take the third shard",
                timeout=10,
            )
            nursery.cancel_scope.cancel()
        await client.delete(NAMESPACES, namespace)


@asynccontextmanager
async def replica_of(
    nursery: trio.Nursery, hub: APIServer, ws: Workspace, name: str, shards: int
) -> AsyncIterator[Replica]:
    """One sharded manager of ``shards`` (no --max-shards), until the block ends (as SIGTERM)."""
    options = ws.options(
        keep_in_cluster=False,
        check_interval=3.0,
        check_jitter=0.3,
        field_manager=f"kokumi-{name}",
        sharding=Sharding(f"replica-{name}", shards, None, TIMING),
    )
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[Manager]) -> None:
        with scope:
            await run_manager(
                Config.from_kubeconfig(hub.admin_kubeconfig), options, task_status=task_status
            )

    manager: Manager = await nursery.start(run)
    try:
        yield Replica(name, manager, scope)
    finally:
        scope.cancel()


def _uids(replica: Replica, namespace: str | None = None) -> set[str]:
    """The Clusters this replica has an actor for (in ``namespace``: other tests' run beside)."""
    actors = replica.manager.dispatcher._actors
    return {u for u, a in actors.items() if namespace is None or a.ref.namespace == namespace}


async def _one_count_at_a_time(old: Replica, new: Replica, seconds: float) -> int:
    """Sample both replicas' actors for ``seconds``: never one Cluster in both; the new count
    holds no shard. Returns how many samples were taken."""
    samples = 0
    with trio.move_on_after(seconds):
        while True:
            both = _uids(old) & _uids(new)
            assert not both, f"{len(both)} Clusters have an actor in both replicas"
            assert new.manager.held_shards() == set(), "a replica of another count serves"
            samples += 1
            await trio.sleep(0.02)
    return samples


async def test_a_change_of_the_shard_count_never_serves_a_cluster_twice(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    """--shards 2 runs; a replica of --shards 3 joins, as in a rolling change, and waits
    (holding nothing) until the last replica of 2 has gone; then it serves every Cluster. And
    back: a replica of 2 waits for the replica of 3 the same way."""
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        names = [f"edge-{k}" for k in range(16)]
        await ws.environment(ns, "edge", {"fleet": "edge"})
        async with trio.open_nursery() as nursery:
            async with replica_of(nursery, hub, ws, "two", 2) as two:
                await wait_for(
                    lambda: _async(two.manager.held_shards()),
                    lambda held: held == {0, 1},
                    "the replica of 2 to take both shards",
                )
                for name, server in zip(names, closed_port_servers(len(names)), strict=True):
                    await kubeconfig_cluster(ws, spoke_kubeconfig, ns, name, server)
                every = {(ns, n) for n in names}
                before = await wait_for(
                    functools.partial(secrets_by_holder, ws),
                    lambda found: set(found) == every,
                    "every Cluster to be registered",
                )
                await wait_for(
                    lambda: _async(len(_uids(two, ns))), lambda n: n == len(names), "16 actors"
                )
                async with replica_of(nursery, hub, ws, "three", 3) as three:
                    samples = await _one_count_at_a_time(two, three, TIMING.lease_duration * 2)
                    ready, why = three.manager.readiness()
                    assert ready, why
                    assert three.manager.gate is not None and three.manager.gate.rivals
                    # The replica of 2 goes (SIGTERM): the replica of 3 takes all three shards.
                    stopped = trio.current_time()
                    two.scope.cancel()
                    await wait_for(
                        lambda: _async(three.manager.held_shards()),
                        lambda held: held == {0, 1, 2},
                        "the replica of 3 to serve once the replica of 2 has gone",
                        timeout=TIMING.lease_duration * 3,
                    )
                    took = trio.current_time() - stopped
                    await wait_for(
                        lambda: _async(len(_uids(three, ns))),
                        lambda n: n == len(names),
                        "16 actors",
                    )
                    # And back: a replica of 2 joins the replica of 3.
                    async with replica_of(nursery, hub, ws, "two-again", 2) as again:
                        samples += await _one_count_at_a_time(three, again, TIMING.lease_duration)
                        three.scope.cancel()
                        await wait_for(
                            lambda: _async(again.manager.held_shards()),
                            lambda held: held == {0, 1},
                            "the new replica of 2 to serve once the replica of 3 has gone",
                            timeout=TIMING.lease_duration * 3,
                        )
                        after = await wait_for(
                            functools.partial(secrets_by_holder, ws),
                            lambda found: set(found) == every,
                            "every Cluster still registered",
                        )
                        assert {k: s["metadata"]["uid"] for k, s in after.items()} == {
                            k: s["metadata"]["uid"] for k, s in before.items()
                        }, "no Secret was deleted or created again"
                        print(
                            f"{samples} samples, never a Cluster in two replicas; the replica"
                            f" of 3 served {took:.2f} s after the last replica of 2 stopped"
                        )
                        await drain(ws)
            nursery.cancel_scope.cancel()


async def test_each_replica_records_its_own_shards_beside_the_others(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    """Stopping, each replica writes the records of the shards it holds into the one ConfigMap
    the Role names, by a server-side apply of a field manager of each shard's: the API server
    keeps every shard's keys, whichever replica wrote them (one field manager for all would
    drop a shard's keys at the next write of another), and each shard's record names its
    Clusters, read back as the replica that takes the shard reads it."""
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        refs = [ClusterRef(ns, named_in_shard(ns, "edge", shard)) for shard in range(SHARDS)]
        async with replicas(hub, ws, {"a": 1, "b": 1}) as running:
            for ref, server in zip(refs, closed_port_servers(len(refs)), strict=True):
                await kubeconfig_cluster(ws, spoke_kubeconfig, ns, ref.name, server)
            for ref in refs:
                serving = next(r for r in running.values() if r.serves(ref))
                await wait_for(
                    functools.partial(_checks, serving.manager, ref),
                    lambda n: n > 0,
                    f"{ref} to be checked by replica {serving.name}",
                )
            for replica in running.values():
                await replica.manager.record_stop()
            record = await ws.client.get(CONFIG_MAPS, stoprecord.NAME, namespace=ws.own)
            now = time.time()
            for ref in refs:
                shard = shard_of(ref.namespace, ref.name, SHARDS)
                key = stoprecord.uid_key(
                    (await ws.get_cluster(ref.namespace, ref.name))["metadata"]["uid"]
                )
                # Each Cluster is in its own shard's record and in no other (the hub may hold
                # other tests' Clusters: the managers watch every namespace).
                for other in range(SHARDS):
                    recorded = stoprecord.read_config_map(record, now, 60.0, shard=other)
                    assert (key in recorded) == (other == shard), (shard, other, record["data"])
            managers = {entry["manager"] for entry in record["metadata"]["managedFields"]}
            assert managers == {f"kokumi-{r}-shard-{s}" for r, s in (("a", 0), ("b", 1))} or (
                managers == {f"kokumi-{r}-shard-{s}" for r, s in (("a", 1), ("b", 0))}
            ), managers
