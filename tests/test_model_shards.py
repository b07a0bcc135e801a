"""The model test with two replicas and ``--shards``: one Cluster, one writer, through every fault.

``tests/test_model.py``'s state machine, its rules, invariants and convergence check, with two
real Managers (``r1`` and ``r2``) sharing the fake hub instead of one. Each replica has a
transport, field manager and Lease identity of its own, short Lease timings, and stands for every
shard's Lease as ``kokumi manager --shards N`` does. Rules added here: a replica killed (its
requests stop at once, so it never hands its Leases back; a SIGKILL) or stopped cleanly (as on
SIGTERM: the stop record of each shard it holds first, its write perhaps refused or cut), and
started again, perhaps with another ``--shards`` (a rolling change of the count); a shard Lease
deleted, stolen by a candidate that then goes silent, or its renewals refused or slowed until the
renew deadline passes. The one-replica model's rules (Clusters, Secrets, Environments,
ClusterSources, foreign Secrets, refused and lost writes, dropped and stalled watches, the hub
down) all run as before.

Invariants, besides the one-replica model's (which every replica is held to):

- at every write the hub receives for a Cluster (its status, its finalizer, its Argo CD Secret:
  created for it, released or handed over from it, re-copied while it holds it) the writing
  replica holds that Cluster's shard Lease, and no other replica serves that Cluster at that
  moment; the same for the writes that are shard 0's duty (Environments' and ClusterSources'
  status, the Clusters a ClusterSource makes, the in-cluster Cluster's spec);
- a shard's stop record is written only while the writer holds that shard's Lease;
- after every step no Cluster is served by two replicas.

At convergence (faults off, every replica running, the clock run for minutes): every Cluster is
served by exactly one replica, and the state is the one ``tests.support.prediction`` predicts from
the objects alone, as for one replica.

``MODEL_SHARDS_EXAMPLES`` (else ``MODEL_EXAMPLES``) sets the examples and ``MODEL_MIN_STEPS``
the steps a run must count; the soak session runs 2,200 examples and asserts 50,000 steps. The
runner, its settings and its counters are ``tests.support.model``'s, as for one replica.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest
import trio
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from kokumi.core import api
from kokumi.core.fleet import stoprecord
from kokumi.core.fleet.leader import Timing
from kokumi.core.fleet.shards import Sharding, count_of, shard_of
from kokumi.core.registry import argocd, handover
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import LEASES, SECRETS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests import test_model as one
from tests.support import model
from tests.support.fakeapi import FakeApi
from tests.support.model import SEEN
from tests.test_model import ARGOCD, HUB, OWN, ManagerMachine, World

# Short, so that a Lease changes hands within a rule's time step; the rules are the real ones.
TIMING = Timing(lease_duration=6.0, renew_deadline=4.0, retry_period=2.0)
REPLICAS = ("r1", "r2")
COUNTS = (1, 2, 3)
FIRST_COUNT = 2
SHARD_ZERO = ClusterRef("", "(shard 0's duties)")

EXAMPLES = model.examples(80, "MODEL_SHARDS_EXAMPLES")

# Counted across all examples: what the two-replica rules did and what the checks saw.
SHARDED = {
    "kills": 0,
    "clean_stops": 0,
    "records_checked": 0,
    "count_changes": 0,
    "lease_deletes": 0,
    "lease_steals": 0,
    "lease_refusals": 0,
    "writes_checked": 0,
    "cross_replica_handovers": 0,
    "steps_with_two_counts": 0,
    "served_by_r1": 0,
    "served_by_r2": 0,
}


@attrs.define
class Replica:
    name: str
    shards: int
    manager: Manager
    scope: trio.CancelScope
    stopped: trio.Event
    transport: ReplicaTransport


class ReplicaTransport(one._Observed):
    """One replica's connection to the fake hub: the model knows who sends each request, and a
    killed replica's requests stop at once (a process that is gone sends nothing more)."""

    def __init__(self, fake: FakeApi, world: ShardedWorld, name: str) -> None:
        super().__init__(fake, world)
        self.name = name
        self.dead = False
        self._sharded = world

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.dead:
            raise httpx.ConnectError("the replica was killed", request=request)
        # Read by the observer, which the base transport calls before its first await.
        self._sharded.writer = self.name
        return await super().handle_async_request(request)


class ShardedWorld(World):
    """The fake hub and two sharded managers in one Trio run that only moves when told."""

    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}
        self.writer: str | None = None
        self.generation = 0
        self.counts: dict[str, int] = dict.fromkeys(REPLICAS, FIRST_COUNT)
        #: Every moment two replicas served one Cluster, as found by ``settle``.
        self.overlaps: list[str] = []
        super().__init__()

    @property
    def manager(self) -> Manager | None:
        """The replica that sends the request being observed (the base model's checks of a
        write read the writer's memory); None between requests."""
        replica = self.replicas.get(self.writer) if self.writer is not None else None
        return replica.manager if replica is not None else None

    @manager.setter
    def manager(self, _value: Manager | None) -> None:
        pass  # the base World resets it; the replicas are kept in ``replicas``

    async def settle(self) -> None:
        """Settle, then look who serves what: ``advance`` settles at every deadline on its way,
        so an overlap of two replicas is seen however short it is (not only at a step's end)."""
        await super().settle()
        self.overlaps.extend(self.overlap())

    def overlap(self) -> list[str]:
        """Each Cluster (and shard 0's duties) that two replicas serve at this moment."""
        if len(self.replicas) < 2:
            return []
        refs = [SHARD_ZERO] + [
            ClusterRef(obj["metadata"]["namespace"], obj["metadata"]["name"])
            for obj in self.fake.objects(api.CLUSTERS)
        ]
        found = []
        for ref in refs:
            serving = self.serving(ref)
            if len(serving) > 1:
                found.append(
                    f"at {trio.current_time():.3f} s {ref} is served by {serving} "
                    f"(counts {self.counts})"
                )
        return found

    async def start_replica(self, name: str, shards: int) -> None:
        assert self._nursery is not None and name not in self.replicas
        self.generation += 1
        self.counts[name] = shards
        transport = ReplicaTransport(self.fake, self, name)
        field_manager = f"kokumi-{name}"
        client = Client(
            Config(server=HUB),
            transport=transport,
            max_retries=0,
            field_manager=field_manager,
            user_agent=field_manager,
        )
        # A new identity at every start, as a new pod's name and random suffix give.
        sharding = Sharding(f"{name}-{self.generation}", shards, None, TIMING)
        options = Options(
            namespace=OWN,
            argocd_namespace=ARGOCD,
            field_manager=field_manager,
            sharding=sharding,
            secret_list_at=2,  # the list path under the model's faults (as in test_model.py)
            carry=one.CARRY,
        )
        manager = Manager(client, options, check=self._check, check_own=self._check_own)
        scope = trio.CancelScope()
        stopped = trio.Event()
        self.replicas[name] = Replica(name, shards, manager, scope, stopped, transport)
        self._scope = scope

        async def run() -> None:
            try:
                with scope:
                    await manager.run()
            except BaseException as exc:  # reported by the next step
                self.crash = exc
            finally:
                stopped.set()

        self._nursery.start_soon(run)
        await self.settle()

    async def stop_replica(self, name: str, *, kill: bool) -> None:
        """``kill``: a SIGKILL, nothing more is sent (its Leases run out by themselves); else a
        clean stop as on SIGTERM: the stop record of each shard it holds, then its Leases
        handed back."""
        replica = self.replicas[name]
        if not kill:
            await self.record_stop(replica.manager)
        replica.transport.dead = kill
        replica.scope.cancel()
        await self.settle()
        # A clean stop hands its Leases back under a shield, on a hub that may be slow: the
        # stop takes the time it takes, and the other replica lives on meanwhile.
        while not replica.stopped.is_set():
            await self.advance(0.25)
        del self.replicas[name]

    async def start_manager(self) -> None:
        for name in REPLICAS:
            if name not in self.replicas:
                await self.start_replica(name, self.counts[name])

    async def stop_manager(self) -> None:
        for name in list(self.replicas):
            await self.stop_replica(name, kill=True)

    def serving(self, ref: ClusterRef) -> list[str]:
        """The replicas serving ``ref`` now (their own shard of it, by their own count)."""
        found = []
        for name, replica in self.replicas.items():
            manager = replica.manager
            until = manager._serving_until(0) if ref == SHARD_ZERO else manager._serves(ref)
            if until is not None:
                found.append(name)
        return found

    def leads(self, name: str, ref: ClusterRef) -> bool:
        """Whether replica ``name`` holds (and has not stepped down from) ``ref``'s shard Lease:
        its writes for ``ref`` may still be on their way until it has stopped them."""
        replica = self.replicas.get(name)
        if replica is None:
            return False
        shard = 0 if ref == SHARD_ZERO else shard_of(ref.namespace, ref.name, replica.shards)
        return replica.manager.shard_electors[shard].state.leading


class ShardedMachine(ManagerMachine):
    world: ShardedWorld

    def __init__(self) -> None:
        # The base builds a one-manager World; put the two-replica one in its place before any
        # rule runs (the base World's thread is closed at once).
        super().__init__()
        self.world.close()
        self.world = ShardedWorld()
        self.world.observer = self._observe_replica
        api.now_rfc3339 = self.world.stamp
        self.intruders = 0

    def teardown(self) -> None:
        try:
            if self.world.replicas and self.world.crash is None:
                self.converge()
        finally:
            self.close()

    # --- who writes for whom -----------------------------------------------------------------

    def _observe_replica(self, request: httpx.Request) -> None:
        writer = self.world.writer
        try:
            if writer is not None:
                self._check_one_writer(writer, request)
            self._observe(request)
        finally:
            self.world.writer = None

    def _acts_for(self, request: httpx.Request) -> ClusterRef | None:
        """The Cluster a write acts for (``SHARD_ZERO`` for shard 0's duties), or None for a
        request that acts for nobody in particular (a read, an Event, a Lease, a line join)."""
        method = request.method
        if method not in ("POST", "PUT", "PATCH", "DELETE"):
            return None
        parts = request.url.path.rstrip("/").split("/")
        body: Any = json.loads(request.content) if request.content else {}
        if len(parts) > 2 and parts[1] == "apis" and parts[2] == api.GROUP:
            if "namespaces" not in parts:
                return None
            at = parts.index("namespaces")
            namespace, plural = parts[at + 1], parts[at + 2] if len(parts) > at + 2 else ""
            rest = parts[at + 3 :]
            if plural in ("environments", "clustersources"):
                return SHARD_ZERO
            if plural != "clusters":
                return None
            if method in ("POST", "DELETE") or (not rest[1:] and model.sets_spec(body)):
                return SHARD_ZERO  # a ClusterSource's Clusters, the in-cluster Cluster's spec
            return ClusterRef(namespace, rest[0]) if rest else None
        if f"/namespaces/{ARGOCD}/secrets" not in request.url.path:
            return None
        if method == "POST":
            return argocd.holder_of(body)
        current = self.world.fake.object(SECRETS, parts[-1], ARGOCD)
        if current is None or not argocd.is_ours(current):
            return None
        holder = argocd.holder_of(current)
        if holder is None:
            return None  # a stray: whoever starts deletes it
        new_holder = argocd.holder_of(body) if method == "PUT" else holder
        if new_holder != holder:
            if new_holder is not None and self.world.serving(new_holder) not in (
                [],
                [self.world.writer],
            ):
                SHARDED["cross_replica_handovers"] += 1
            return holder  # let go, or handed over: the holder's replica does that
        if method == "DELETE":
            return holder
        # The holder unchanged: the holder's replica re-copies it, or another replica keeps
        # its waiters' places in the line (a write guarded by the version it read). Which of
        # the two is told by whether the writer serves the holder at this moment, not by
        # whether it still leads the holder's shard: a replica past its renew deadline may
        # still lead (it has not stepped down yet) while another serves the shard, and every
        # write is fenced at its send, so it can write the line only for its own waiters.
        line = {*handover.waiting_of(current), *handover.waiting_of(body)}
        writer = self.world.writer
        assert writer is not None
        if writer not in self.world.serving(holder):
            version = (body.get("metadata") or {}).get("resourceVersion")
            if version == current["metadata"].get("resourceVersion") and (
                body.get("data") or {}
            ) != (current.get("data") or {}):
                # (A write at an older version is refused with 409 and changes nothing.)
                self.violations.append(
                    f"{writer} wrote a connection into Secret {parts[-1]} of {holder}, which"
                    " it does not serve"
                )
            mine = [ref for ref in line if self.world.leads(writer, ref)]
            if not mine:
                self.violations.append(
                    f"{writer} wrote Secret {parts[-1]} of {holder}, serving neither it nor"
                    f" a Cluster in its line {sorted(line)}"
                )
            return None
        return holder

    def _record_of(self, request: httpx.Request) -> int | None:
        """The shard whose stop record ``request`` writes, or None for any other request."""
        path = request.url.path.rstrip("/")
        if (
            request.method != "PATCH"
            or path != f"/api/v1/namespaces/{OWN}/configmaps/{stoprecord.NAME}"
        ):
            return None
        _, sharded, shard = request.url.params.get("fieldManager", "").rpartition("-shard-")
        return int(shard) if sharded else None

    def _check_one_writer(self, writer: str, request: httpx.Request) -> None:
        shard = self._record_of(request)
        if shard is not None:
            # Each shard's record is fenced by its own Lease, as the shard's Clusters' writes.
            SHARDED["records_checked"] += 1
            replica = self.world.replicas[writer]
            if not replica.manager.shard_electors[shard].state.leading:
                self.violations.append(
                    f"{writer} wrote the stop record of shard {shard}, which it does not hold"
                )
            return
        ref = self._acts_for(request)
        if ref is None:
            return
        SHARDED["writes_checked"] += 1
        what = f"{request.method} {request.url.path}"
        if not self.world.leads(writer, ref):
            self.violations.append(f"{writer} sent {what} for {ref}, whose shard it does not hold")
        others = [name for name in self.world.serving(ref) if name != writer]
        if others:
            self.violations.append(
                f"{writer} sent {what} for {ref} while {others} served it too "
                f"(counts {self.world.counts})"
            )

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def one_replica_per_cluster(self) -> None:
        """Not at this step's end, nor at any moment the clock stopped at on its way."""
        overlaps = [*self.world.overlaps, *self.world.run(self.world.overlap)]
        assert not overlaps, "\n".join([*overlaps[:5], "after:", *self.history])
        if len(set(r.shards for r in self.world.replicas.values())) > 1:
            SHARDED["steps_with_two_counts"] += 1

    @invariant()
    def no_false_holder(self) -> None:
        """The base model's check, for each replica in turn (each believes only its own)."""
        for name in list(self.world.replicas):
            self.world.writer = name
            try:
                super().no_false_holder()
            finally:
                self.world.writer = None

    # --- rules --------------------------------------------------------------------------------

    @rule(
        replica=st.sampled_from(REPLICAS),
        kill=st.booleans(),
        shards=st.sampled_from((None, None, *COUNTS)),
        refused=st.sampled_from((None, None, 403, 0)),
        stay_down=st.sampled_from((False, False, True)),
        record=st.sampled_from((None, None, 403, 0)),
    )
    def restart_manager(
        self,
        replica: str,
        kill: bool,
        shards: int | None,
        refused: int | None,
        stay_down: bool = False,
        record: int | None = None,
    ) -> None:
        """A replica killed (SIGKILL) or stopped cleanly (its shards' stop records first, their
        writes perhaps refused or cut), and started again, perhaps with another ``--shards``;
        perhaps left down a while (the other one must take its shards)."""
        world = self.world
        fake = world.fake
        if replica in world.replicas:
            SEEN["restarts"] += 1
            SHARDED["kills" if kill else "clean_stops"] += 1
            if not kill:
                world.refuse_record(record)
            world.arun(lambda: world.stop_replica(replica, kill=kill))
        if not stay_down:
            if refused == 0:
                world.run(lambda: fake.reset(verb="delete", namespace=ARGOCD, times=2))
            elif refused is not None:
                world.run(lambda: fake.fail(refused, verb="delete", namespace=ARGOCD, times=2))
            count = shards if shards is not None else world.counts[replica]
            if count != world.counts[replica]:
                SHARDED["count_changes"] += 1
            world.arun(world.start_replica, replica, count)
        self._step()

    @rule(
        pick=st.integers(0, 7),
        how=st.sampled_from(("delete", "steal", "refuse", "slow")),
        seconds=st.sampled_from((0.0, 3.0, 7.0)),
    )
    def lease_fault(self, pick: int, how: str, seconds: float) -> None:
        """A shard Lease deleted by hand, taken by a candidate that then falls silent, or its
        holder's renewals refused or held past the renew deadline; and perhaps a few seconds
        at once, the moments when the Lease changes hands."""
        world = self.world
        fake = world.fake
        leases = [
            lease
            for lease in self._objects(LEASES, OWN)
            if count_of(lease["metadata"]["name"]) is not None
        ]
        if leases:
            lease = leases[pick % len(leases)]
            name = lease["metadata"]["name"]
            if how == "delete":
                SHARDED["lease_deletes"] += 1
                world.run(lambda: fake.remove(LEASES, name, OWN))
            elif how == "steal":
                SHARDED["lease_steals"] += 1
                self.intruders += 1
                stolen = dict(lease)
                stolen["spec"] = {
                    **lease.get("spec", {}),
                    "holderIdentity": f"intruder-{self.intruders}",
                    "leaseDurationSeconds": TIMING.lease_seconds,
                }
                world.run(lambda: fake.put(stolen))
            elif how == "refuse":
                SHARDED["lease_refusals"] += 1
                world.run(
                    lambda: fake.fail(500, verb="update", resource="leases", name=name, times=4)
                )
            else:
                SHARDED["lease_refusals"] += 1
                world.run(lambda: fake.delay(TIMING.renew_deadline, resource="leases", times=2))
        if seconds:
            world.arun(world.advance, seconds)
        self._step()

    # --- convergence --------------------------------------------------------------------------

    def converge(self) -> None:
        """Every replica running again, then the one-replica model's convergence."""
        self.world.run(self.world.fake.clear_faults)
        self.world.run(lambda: setattr(self.world.fake, "down", False))
        self.world.arun(self.world.start_manager)
        super().converge()

    def check_converged(self) -> None:
        super().check_converged()
        refs = [SHARD_ZERO] + [
            ClusterRef(obj["metadata"]["namespace"], obj["metadata"]["name"])
            for obj in self._objects(api.CLUSTERS)
        ]
        for ref in refs:
            serving = self.world.run(self.world.serving, ref)
            assert len(serving) == 1, f"at convergence {ref} is served by {serving}"
            SHARDED[f"served_by_{serving[0]}"] += 1


@pytest.fixture(autouse=True)
def _quiet_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("CRITICAL")


def _tour() -> None:
    """Each kind of step the run's coverage check asks for, once, in a fixed order: a kill and a
    clean stop of each replica (one of a holder, which writes its shards' records), a change of
    --shards, a Lease stolen, each replica serving.

    The random run alone cannot promise them: under seed 302 of a flake run its 18 restarts
    were all kills (Hypothesis's choices are not independent coin flips), and the check failed
    with nothing wrong but the draw. The tour is judged by the same invariants as every step.
    """
    model.seed_scheduler(0)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "a", S0), ("ws2", "b", S1), ("ws1", "c", S2)], sourced=[], before=True
        )
        machine.time_passes(seconds=5.0)
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=None)
        machine.restart_manager(kill=True, refused=None, replica="r1", shards=1)
        machine.restart_manager(kill=False, refused=None, replica="r2", shards=None)
        machine.time_passes(seconds=31.0)
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=3, record=403)
        machine.lease_fault(how="steal", pick=0, seconds=3.0)
        machine.restart_manager(kill=True, refused=None, replica="r2", shards=None)
        machine.converges_cleanly()
    finally:
        machine.close()


def test_two_replicas_never_serve_one_cluster_and_converge() -> None:
    """At least 2,000 steps per run, counted, as for one replica."""
    model.reset(SEEN, SHARDED)
    _tour()
    toured = dict(SHARDED)
    assert all(
        toured[k] > 0 for k in ("kills", "clean_stops", "count_changes", "records_checked")
    ), toured
    elapsed = model.run(ShardedMachine, EXAMPLES)
    print(f"two-replica model: {SEEN['steps']} steps in {elapsed:.0f} s; {SEEN}; {SHARDED}")
    assert model.enough_steps(EXAMPLES) <= SEEN["steps"], f"only {SEEN['steps']} steps ran"
    if EXAMPLES >= 50:
        assert all(
            SHARDED[k] > 0
            for k in (
                "kills",
                "clean_stops",
                "count_changes",
                "records_checked",
                "writes_checked",
                "served_by_r1",
                "served_by_r2",
            )
        ), SHARDED
        # Which way a Lease is broken varies from run to run; that one is, never.
        assert SHARDED["lease_deletes"] + SHARDED["lease_steals"] + SHARDED["lease_refusals"]
        assert all(SEEN[k] > 0 for k in ("holders", "waiters", "restarts")), SEEN


@pytest.mark.parametrize("seed", range(4))
def test_a_write_that_waited_while_shard_zero_went_is_not_sent(seed: int) -> None:
    """Shard 0's Lease deleted while a ClusterSource's status write of its holder waits on a
    slow hub: a check of the Lease made before the write's awaits (a request slot's among them)
    let it out after the replica had lost the Lease. Found by the test above; writes are now
    fenced at the moment they are sent. The order depends on the scheduler's choices, so the
    steps run under several seeds of its (and the jitter's) random."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        s0 = one.SERVERS[0]
        machine.start(layout=[("ws1", "a", s0)] * 3, sourced=[], before=True)
        machine.put_source(ns="ws1", tier="gold")
        machine.slow_hub(seconds=0.5)
        machine.lease_fault(how="delete", pick=7, seconds=7.0)
        machine.slow_hub(seconds=0.5)
        machine.put_capi_secret(broken=None, name="c", ns="ws1", server=s0)
        machine.slow_hub(seconds=0.5)
        machine.lease_fault(how="refuse", pick=0, seconds=3.0)
        machine.put_capi_secret(broken=None, name="a", ns="ws1", server=s0)
        machine.slow_hub(seconds=0.5)
        machine.slow_hub(seconds=0.5)
        machine.put_source(ns="ws1", tier="gold")
        machine.lease_fault(how="delete", pick=0, seconds=7.0)
        machine.converges_cleanly()
    finally:
        machine.close()


S0, S1, S2 = one.SERVERS


@pytest.mark.parametrize("seed", [14, 20, 21, 32, 34, 39])
def test_a_waiter_let_go_behind_another_replicas_holder_leaves_the_line(seed: int) -> None:
    """The shrunk example of issue 33's 'waiting {ws2/c}' at convergence: ws2/c waits for s2
    behind ws1/b, each served by another replica after the shards move; the hub goes down, the
    Environment of ws2 stops selecting ws2/c, the replicas restart with another --shards. The
    replica that took ws2/c's shard heard its release, but nothing made it write s2's line,
    which another replica's Cluster holds: ws2/c stayed in it for good. Each seed replays the
    same path every run; these fail with the fix reverted (the release's line writes and the
    reshard's pass over stale lines; 21, 32, 34 and 39 with the first alone), chosen again
    from range(40) when later changes had moved the paths of the first seeds off the bug.
    tests/actors/registry/test_lines.py holds the same fix without a scheduler."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws2", "a", S0), ("ws2", "c", S2), ("ws1", "b", S2)],
            sourced=[("a", S0)],
            before=True,
        )
        machine.remove_foreign(server=S0)
        machine.plant_foreign(by_name=False, server=S0)
        machine.restart_manager(kill=False, refused=0, replica="r2", shards=None)
        machine.restart_manager(kill=False, refused=0, replica="r1", shards=None)
        machine.lease_fault(how="delete", pick=0, seconds=3.0)
        machine.delete_source(ns="ws1")
        machine.plant_stray(server=S1)
        machine.delete_source(ns="ws1")
        machine.plant_stray(server=S0)
        machine.hub(down=True)
        machine.restart_manager(kill=False, refused=None, replica="r2", shards=None)
        machine.plant_foreign(by_name=True, server=S0)
        machine.lease_fault(how="delete", pick=0, seconds=3.0)
        for _ in range(4):
            machine.delete_source(ns="ws1")
        machine.lease_fault(how="steal", pick=0, seconds=0.0)
        machine.put_environment(ns="ws2", tier="iron")
        machine.fault(resource="environments", status=-1, times=3, verb="delete")
        machine.delete_source(ns="ws2")
        machine.delete_source(ns="ws1")
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=None)
        machine.fault(resource="secrets", status=0, times=1, verb="create")
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=3)
        machine.delete_capi_secret(name="c", ns="ws1")
        machine.restart_manager(kill=False, refused=None, replica="r2", shards=3)
        machine.converges_cleanly()
    finally:
        machine.close()


def test_a_replica_past_its_renew_deadline_writes_lines_only_for_its_waiters() -> None:
    """Found by the flake runs of this test: r1, past the renew deadline of shard 0 but not
    yet stepped down, wrote its own waiter's place into the line of s2's Secret, whose holder
    ws2/a r2 served by then. The model took the write for the holder's (r1 still 'led' the
    holder's shard) and failed it; it is told apart now by who serves the holder, and a line
    write that would change the holder's connection fails on its own. Under this seed the old
    bookkeeping failed."""
    model.seed_scheduler(0)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "b", S0), ("ws1", "a", S0)],
            sourced=[("a", S0), ("a", S2), ("c", S2)],
            before=False,
        )
        machine.delete_environment(ns="ws1")
        machine.delete_cluster(name="a", ns="ws2", refused=0)
        machine.hub(down=True)
        machine.fault(resource="secrets", status=403, times=1, verb="create")
        machine.time_passes(seconds=5.0)
        machine.put_kubeconfig(broken=None, name="a", ns="ws1", server=S0)
        machine.hub(down=False)
        machine.time_passes(seconds=31.0)
        machine.converges_cleanly()
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_lease_taken_again_by_its_own_replica_releases_nothing(seed: int) -> None:
    """Found by the flake runs of this test (seed 16): 'DELETE of Secret ... let go of ws1/c,
    which never stopped wanting s1'. Slow renewals made r2 step down from ws1/c's shard and
    take its Lease again at once; between the two its actors were stopped and not yet started,
    and the registry, asked whether ws1/c's claim was the live object's, heard "no" from the
    actor index: it released ws1/c, deleted its Secret under Argo CD and made it again a moment
    later. The Clusters watch answers that question now. Under these seeds the tree before the
    fix failed (the tree before this issue, under every seed tried)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "c", S0), ("ws2", "a", S2), ("ws1", "a", S0), ("ws1", "c", S1)],
            sourced=[("a", S0), ("b", S0), ("a", S0)],
            before=False,
        )
        machine.put_capi_secret(broken=None, name="a", ns="ws1", server=S0)
        machine.time_passes(seconds=1.0)
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=None)
        machine.slow_hub(seconds=0.5)
        machine.put_capi_secret(broken=None, name="a", ns="ws1", server=S0)
        machine.watch_fault(how="stall")
        machine.put_capi_secret(broken=None, name="a", ns="ws1", server=S0)
        machine.restart_manager(kill=True, refused=None, replica="r1", shards=None, stay_down=True)
        machine.hub(down=False)
        machine.watch_fault(how="drop")
        machine.time_passes(seconds=31.0)
        machine.watch_fault(how="drop")
        machine.slow_hub(seconds=3.0)
        machine.put_kubeconfig(broken=None, name="a", ns="ws1", server=S0)
        machine.fault(resource="secrets", status=403, times=1, verb="create")
        machine.delete_source(ns="ws2")
        machine.slow_hub(seconds=3.0)
        machine.plant_stray(server=S1)
        machine.delete_kubeconfig(name="a", ns="ws2")
        machine.time_passes(seconds=31.0)
        machine.converges_cleanly()
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_holder_no_table_here_adopted_is_let_go_when_it_releases(seed: int) -> None:
    """Issue 33's example 2, 'Secrets for [s1], expected []', as the flake runs shrank it (seed
    21): after a stolen shard Lease and clean restarts, r2 served ws2/a, whose Secret named it,
    but r2's table had never adopted that Secret. ws2/a's release then touched no server, and
    was never done: its Secret stayed registered for a Cluster no Environment selected. A
    release now settles every Secret that names the Cluster, adopted or not. The tree before
    the fix failed under these seeds (and the tree before this issue too)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "a", S0), ("ws1", "a", S0)], sourced=[("a", S0)], before=False
        )
        for _ in range(3):
            machine.delete_environment(ns="ws1")
        machine.delete_source(ns="ws1")
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=None)
        machine.put_capi_secret(broken=None, name="a", ns="ws2", server=S1)
        machine.plant_stray(server=S1)
        machine.lease_fault(how="steal", pick=0, seconds=7.0)
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=None)
        machine.delete_environment(ns="ws2")
        machine.converges_cleanly()
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_a_waiter_handed_the_server_while_its_release_is_on_its_way_may_be_let_go(
    seed: int,
) -> None:
    """The soak's shrunk example (2,200 examples): ws2's Environment deleted and made again at
    once, on a slow hub. ws2/a's release reached the registry first, which handed s0 to ws2/c,
    next in its line; ws2/c's own release, for the same deletion, was already on its way (its
    actor had heard nothing selects it), and the registry let go of it too; both claimed again
    once the new Environment came, and ws2/a holds s0 again. The model took the handover for a
    fresh claim and called the release 'let go of ws2/c, which never stopped wanting s0'. It
    now judges the handover on the writer's own actor, as it judges a create on its view.
    These seeds failed before (5 of seeds 0-9)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "b", S0), ("ws2", "a", S0), ("ws1", "a", S0), ("ws1", "a", S0)],
            sourced=[("c", S0), ("b", S0), ("a", S0)],
            before=True,
        )
        machine.put_environment(ns="ws1", tier="iron")
        machine.delete_environment(ns="ws1")
        machine.delete_environment(ns="ws1")
        machine.fault(resource="secrets", status=403, times=1, verb="patch")
        machine.delete_kubeconfig(name="a", ns="ws1")
        machine.time_passes(seconds=31.0)
        machine.put_environment(ns="ws1", tier=None)
        machine.delete_environment(ns="ws1")
        machine.delete_environment(ns="ws1")
        machine.watch_fault(how="drop")
        machine.fault(resource="secrets", status=403, times=1, verb="create")
        machine.delete_cluster(name="b", ns="ws2", refused=None)
        machine.put_kubeconfig(broken=None, name="b", ns="ws1", server=S0)
        machine.put_cluster(in_cluster=False, name="a", ns="ws1", tier="iron")
        machine.time_passes(seconds=75.0)
        machine.slow_hub(seconds=0.5)
        machine.delete_environment(ns="ws2")
        machine.put_cluster(in_cluster=True, name="b", ns="ws2", tier="iron")
        machine.put_cluster(in_cluster=True, name="b", ns="ws1", tier="gold")
        machine.slow_hub(seconds=3.0)
        machine.put_kubeconfig(broken=None, name="b", ns="ws1", server=S2)
        machine.delete_environment(ns="ws1")
        machine.put_environment(ns="ws1", tier="gold")
        machine.delete_environment(ns="ws2")
        machine.put_environment(ns="ws2", tier=None)
        machine.watch_fault(how="expire")
        machine.time_passes(seconds=75.0)
        machine.converges_cleanly()
    finally:
        machine.close()


SEED_1007_LAYOUT = [("ws1", "a", S0), ("ws2", "a", S0), ("ws2", "b", S0), ("ws1", "b", S0),
                    ("ws2", "a", S1)]  # fmt: skip


@pytest.mark.parametrize("seed", [0, 5, 9])
def test_a_write_refused_as_stale_lets_nobody_go(seed: int) -> None:
    """Seed 1007's second shrunk example (CI settings): ws1's Environment stops selecting its
    Clusters. Replica r2 hands s0 from ws1/b to ws2/b; r1, which had not heard yet, sends the
    line without ws1/a on the version before, naming ws1/b: the API server refuses it (409),
    r1 reads again and writes the line on ws2/b's Secret. The model took the refused PUT for a
    handover back and called it 'let go of ws2/b'. It now passes over a write whose
    resourceVersion (or DELETE precondition) the Secret no longer has, as the API server does.
    These seeds failed before (3 of seeds 0-9)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(layout=SEED_1007_LAYOUT, before=False, sourced=[("c", S0)], team=[("a", S0)])
        machine.slow_hub(seconds=3.0)
        machine.delete_team_source(ns="ws1")
        machine.put_environment(ns="ws1", tier=None)
        machine.delete_team_source(ns="ws1")
        machine.delete_team_source(ns="ws2")
        machine.delete_team_source(ns="ws2")
        machine.slow_hub(seconds=11.0)
        machine.put_environment(ns="ws2", tier=None)
        machine.slow_hub(seconds=0.5)
        machine.delete_team_source(ns="ws1")
        machine.slow_hub(seconds=11.0)
        machine.delete_team_source(ns="ws1")
        machine.time_passes(seconds=75.0)
        machine.put_capi_secret(broken=None, name="c", ns="ws2", server=S2)
        machine.put_environment(ns="ws1", tier="iron")
        machine.nothing_let_go_early()
        machine.converges_cleanly()
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 8])
def test_a_holder_whose_secret_was_never_written_does_not_bar_the_line(seed: int) -> None:
    """Seed 1007's first shrunk example: on a slow hub, ws1's Environment selects its Clusters
    again and r1 sends the Secret of s0 for ws1/b; the shard's Lease is not renewed in time, so
    the write is cancelled unsent, and the reshard that follows disowns ws1/b, which the table
    then kept as s0's holder elsewhere. No Secret came, none was awaited, and no Cluster was
    ever registered for s0. A holder disowned before its Secret was written now leaves the line
    to the next after the grace (its replica may write it meanwhile). These seeds failed
    before (2 of seeds 0-9, 'Secrets for [], expected [s0]' at convergence)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(layout=SEED_1007_LAYOUT, before=False, sourced=[("c", S0)], team=[("a", S0)])
        machine.put_capi_secret(broken=None, name="a", ns="ws1", server=S0)
        machine.put_environment(ns="ws1", tier="iron")
        machine.time_passes(seconds=75.0)
        machine.put_capi_secret(broken=None, name="c", ns="ws1", server=S1)
        machine.delete_team_source(ns="ws2")
        machine.slow_hub(seconds=11.0)
        machine.put_environment(ns="ws2", tier=None)
        machine.slow_hub(seconds=0.5)
        machine.delete_team_source(ns="ws1")
        machine.slow_hub(seconds=11.0)
        machine.delete_team_source(ns="ws1")
        machine.time_passes(seconds=75.0)
        machine.put_capi_secret(broken=None, name="c", ns="ws2", server=S2)
        machine.put_environment(ns="ws1", tier="iron")
        machine.put_environment(ns="ws2", tier=None)
        machine.delete_team_source(ns="ws2")
        machine.put_environment(ns="ws1", tier="iron")
        machine.delete_team_source(ns="ws2")
        machine.slow_hub(seconds=0.5)
        machine.time_passes(seconds=5.0)
        machine.put_environment(ns="ws2", tier="iron")
        machine.slow_hub(seconds=0.5)
        machine.slow_hub(seconds=11.0)
        machine.delete_team_source(ns="ws2")
        machine.put_environment(ns="ws1", tier=None)
        machine.time_passes(seconds=75.0)
        machine.put_environment(ns="ws1", tier=None)
        machine.delete_team_source(ns="ws2")
        machine.time_passes(seconds=5.0)
        machine.converges_cleanly()
    finally:
        machine.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_move_cut_short_is_finished_by_the_replica_that_takes_its_shard(seed: int) -> None:
    """Seed 6023's shrunk example (CI settings): ws2/b moves from s0 to s2; r1 creates s2's
    Secret for it, and the delete of s0's is cut. r1 is stopped, and started again while r2
    runs with another --shards: its rebuild finds both Secrets naming ws2/b before it holds
    ws2/b's shard. The reshard that gives it the shard adopted the newest, s2's, and passed the
    older over, held elsewhere in the table by a Cluster served here: nothing ever wrote it
    again, and Argo CD kept s0 registered for a Cluster that let it go ('Secrets for [s0, s1,
    s2], expected [s1, s2]'; with the team's source kept, 'ws2/b holds s0 but does not want
    it'). The older is now classified after the newest, a move cut short, and deleted. These
    seeds failed before (all seeds tried, 0-5)."""
    model.seed_scheduler(seed)
    machine = ShardedMachine()
    try:
        machine.start(
            layout=[("ws1", "b", S0), ("ws1", "b", S2)],
            sourced=[("b", S0), ("c", S1)],
            team=[("c", S0), ("b", S2), ("a", S1)],
            before=True,
        )
        machine.delete_team_source(ns="ws1")
        machine.restart_manager(kill=True, refused=0, replica="r2", shards=3)
        machine.lease_fault(how="delete", pick=1, seconds=7.0)
        machine.put_capi_secret(broken=None, name="b", ns="ws2", server=S2)
        machine.restart_manager(kill=False, refused=None, replica="r1", shards=2, stay_down=True)
        machine.converges_cleanly()
    finally:
        machine.close()
