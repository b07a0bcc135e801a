"""The manager: wires the registry, the dispatcher, the Cluster actors and the in-cluster keeper.

This is also the entry point for embedding: another Trio program starts the manager in its own
nursery and stops it by cancelling that nursery (or a scope around it)::

    async with trio.open_nursery() as nursery:
        manager = await nursery.start(kokumi.run_manager, config)
        await manager.wait_checked()

With ``Options.leader_election`` set, everything that reads or writes Clusters runs only while
this process holds the Lease (:mod:`kokumi.runtime.election`); the health server, when asked for,
runs from the start, so a standby answers its probes.

With ``Options.sharding`` set instead, the watches run from the start and this replica stands
for every shard's Lease (:mod:`kokumi.core.fleet.shards`): the Cluster actors of a shard run only
inside that shard's Lease, and Environments' status and the in-cluster defaults only inside shard
0's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
from collections.abc import Awaitable, Callable

import trio

from kokumi.actors.checks import CountingLimiter, InClusterCheck, Probe
from kokumi.actors.context import Context, wall_shift
from kokumi.actors.dispatcher import Dispatcher
from kokumi.actors.incluster import keep_in_cluster
from kokumi.actors.metrics import Metrics
from kokumi.actors.registry import Registry
from kokumi.actors.writes import EventRecorder
from kokumi.core.cluster.status import Outcome
from kokumi.core.fleet import stoprecord
from kokumi.core.fleet.leader import LeaderElection
from kokumi.core.fleet.shards import preference
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import CONFIG_MAPS
from kokumi.runtime import health, heap
from kokumi.runtime.election import Admission, CountGate, LeadershipLost, LeaseElector
from kokumi.runtime.options import Options
from kokumi.runtime.probe import checks

__all__ = ["Manager", "run_manager", "run_manager_until_signalled"]

log = logging.getLogger(__name__)

#: Requests in flight of the Leases' own lane: a renewal and a count at once per Lease held,
#: a few Leases at most (--max-shards), each request a small one.
LEASE_REQUESTS = 4


class Manager:
    """A running manager, as handed back by :func:`run_manager` through ``nursery.start``.

    ``elector`` is the Lease candidate when leader election is on; ``health_port`` the port the
    health server bound, once it runs.
    """

    def __init__(
        self,
        client: Client,
        options: Options,
        *,
        check: Probe = checks.check,
        check_own: Callable[..., Awaitable[Outcome]] = checks.check_client,
    ) -> None:
        """``check`` and ``check_own`` are the two checks (a Kubeconfig Cluster's, and the
        manager's own cluster's); a model test puts stand-ins there, nothing else does."""
        self.options = options
        self.metrics = Metrics()
        # The labels carried onto Argo CD's Secrets are the ones alerts may route by.
        self.metrics.fleet.carry = options.carry.labels
        self.client = client
        client.observer = self.metrics
        limiter = CountingLimiter(
            options.max_concurrent_checks, self.metrics, late_after=options.check_interval
        )
        events = EventRecorder(client)
        self.registry = Registry(
            client,
            options.argocd_namespace,
            self.metrics,
            backoff_initial=options.retry_initial,
            backoff_max=options.retry_max,
            events=events,
            egress=options.probe_egress,
        )
        self.context = Context(
            client=client,
            options=options,
            registry=self.registry,
            in_cluster=InClusterCheck(client, limiter, options, self.metrics, check_own),
            probe_limiter=limiter,
            events=events,
            metrics=self.metrics,
            check=check,
        )
        self.dispatcher = Dispatcher(self.context, self.registry)
        self.elector: LeaseElector | None = None
        #: The Leases of other shard counts, as this replica last listed them.
        self.gate: CountGate | None = None
        # The Leases' requests never wait behind the actors' (onboarding's thousands).
        leases = client.lane(LEASE_REQUESTS)
        if options.leader_election is not None:
            # The single leader is one shard: it waits for the replicas of any --shards N too.
            self.gate = CountGate(leases, options.namespace, 1, options.leader_election.lease_name)
            self.elector = LeaseElector(
                leases,
                options.namespace,
                options.leader_election,
                on_change=lambda leading: self.metrics.held({0: leading}),
                gate=self.gate,
            )
        #: shard -> this replica's candidate for its Lease (empty without sharding).
        self.shard_electors: dict[int, LeaseElector] = {}
        self._shard_zero_writer = client
        # The stop's record is written with the Lease's fence, like every other write (with
        # shards, each shard's record with that shard's).
        self._record_writers: dict[int | None, Client] = {None: client}
        sharding = options.sharding
        if sharding is not None:
            admission = Admission(sharding.limit)
            self.gate = CountGate(leases, options.namespace, sharding.shards, sharding.leader_lease)
            for shard in preference(sharding.identity, sharding.shards):
                self.shard_electors[shard] = LeaseElector(
                    leases,
                    options.namespace,
                    LeaderElection(
                        sharding.identity,
                        lease_name=sharding.lease_name(shard),
                        timing=sharding.timing,
                    ),
                    on_change=self._shards_changed,
                    admission=admission,
                    gate=self.gate,
                )
            # A waiter of a dead replica is served again once its shard has moved.
            self.registry.follow_shards(self._serves, grace=2 * sharding.timing.lease_duration)
            self.dispatcher.environments_actor.writes_until = functools.partial(
                self._serving_until, 0
            )
            # ClusterSources are written by the replica serving shard 0, as Environments are.
            self.dispatcher.sources_actor.writes = lambda: self._serving_until(0) is not None
            # Every write for a shard is fenced by its Lease at the moment it is sent: the
            # checks above are made before awaits (a request slot's among them) during which
            # the Lease may go, and a Cluster actor being stopped may be past its last one.
            writers = {
                shard: client.fenced(functools.partial(self._may_write, shard))
                for shard in self.shard_electors
            }
            self.context.writers = lambda ref: writers[sharding.shard_of(ref.namespace, ref.name)]
            self.dispatcher.environments_actor.writer = writers[0]
            self.dispatcher.sources_actor.writer = writers[0]
            self._shard_zero_writer = writers[0]
            self._record_writers = {shard: writer for shard, writer in writers.items()}
        elif self.elector is not None:
            elector = self.elector
            fenced = client.fenced(lambda: elector.serving_until() is not None)
            self._record_writers = {None: fenced}
            self.registry.fence_writes(lambda: elector.serving_until() is not None)
            self.context.writers = lambda ref: fenced
            self.dispatcher.environments_actor.writer = fenced
            self.dispatcher.sources_actor.writer = fenced
        # Every shard is on /metrics from the start, held or not: one nobody holds must show.
        self.metrics.held(dict.fromkeys(self.shard_electors or (0,), False))
        self.health_port: int | None = None
        self.started = trio.Event()

    def held_shards(self) -> set[int]:
        """The shards whose Lease this replica holds now."""
        return {s for s, e in self.shard_electors.items() if e.serving_until() is not None}

    def _shards_changed(self, _leading: bool) -> None:
        self.metrics.held({s: e.state.leading for s, e in self.shard_electors.items()})

    def _may_write(self, shard: int) -> bool:
        return self._serving_until(shard) is not None

    def _serving_until(self, shard: int) -> float | None:
        elector = self.shard_electors.get(shard)
        return elector.serving_until() if elector is not None else None

    def _serves(self, cluster: ClusterRef) -> float | None:
        sharding = self.options.sharding
        assert sharding is not None
        return self._serving_until(sharding.shard_of(cluster.namespace, cluster.name))

    async def wait_checked(self) -> None:
        """Return once every Cluster that exists now has been checked at least once."""
        await self.dispatcher.wait_checked()

    def readiness(self) -> tuple[bool, str]:
        """Whether the pod should count as ready, and why, for ``/readyz``.

        A standby is ready while it reads the Lease: it has nothing else to do, and a rollout
        must be able to count it. A leader (or a manager without election) is ready once its
        watches have listed everything and every actor has started.
        """
        elector = self.elector
        if elector is not None and not elector.leading.is_set():
            seen = elector.last_seen
            limit = elector.timing.lease_duration
            if seen is None or trio.current_time() - seen > limit:
                return False, f"standby: the Lease has not been read in the last {limit:g} s"
            if self.gate is not None and self.gate.rivals:
                name, holder = self.gate.rivals[0]
                return True, f"standby: waiting for the Lease {name} of another --shards ({holder})"
            holder = elector.state.holder or "nobody"
            return True, f"standby: the Lease is held by {holder}"
        synced = self.dispatcher.clusters.synced and self.dispatcher.environments.synced
        if not (self.started.is_set() and synced):
            return False, "starting: the watches have not listed everything yet"
        return True, "leading: watches synced" if elector is not None else "running: watches synced"

    async def run(
        self, *, task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The controller itself, without election or health server (see :meth:`serve`)."""
        with contextlib.ExitStack() as stack:
            if self.options.freeze_heap:
                # Before the first list: its full collections would walk the whole growing heap.
                stack.enter_context(heap.freezing_survivors())
            await self._run(task_status)

    async def _run(self, task_status: trio.TaskStatus[Manager]) -> None:
        async with trio.open_nursery() as nursery:
            if not self.shard_electors:
                await self._read_stop_record()
            await nursery.start(self.registry.run)
            await nursery.start(self.context.alarms.run)
            if self.options.keep_in_cluster and not self.shard_electors:
                await nursery.start(keep_in_cluster, self.client, self.options.namespace)
            await nursery.start(self.dispatcher.run)
            if self.options.freeze_heap:
                nursery.start_soon(heap.freeze_as_it_grows, lambda: len(self.dispatcher.clusters))
                nursery.start_soon(heap.sweep)
            log.info("manager started (namespace %s)", self.options.namespace)
            if self.elector is None and not self.shard_electors:
                self.metrics.held({0: True})
            if self.shard_electors:
                nursery.start_soon(self._stand_for_all, nursery)
            self.started.set()
            task_status.started(self)

    def _recording(self) -> list[int | None]:
        """What a stop now records: each shard this replica holds, or the whole fleet (None)
        when it serves every Cluster (no shards; the leader, or no Lease)."""
        if not self.started.is_set():
            return []
        if self.shard_electors:
            return [*sorted(self.held_shards())]
        return [None] if self.elector is None or self.elector.serving_until() is not None else []

    def _where(self, shard: int | None) -> str:
        where = f"ConfigMap {self.options.namespace}/{stoprecord.NAME}"
        return where if shard is None else f"{where} (shard {shard})"

    async def _read_stop_record(self, shard: int | None = None) -> None:
        """Read the stop record of the manager that stopped before this one, if it left a fresh one
        (with shards, of the replica that held ``shard`` before this one took it).

        One GET. Whatever goes wrong, each Cluster is checked at its place, as without a record:
        the record only makes the checks across a restart come on time.
        """
        where = self._where(shard)
        try:
            with trio.fail_after(self.options.probe_timeout):
                obj = await self.client.get(
                    CONFIG_MAPS, stoprecord.NAME, namespace=self.options.namespace
                )
            now = trio.current_time() - wall_shift()
            recorded = stoprecord.read_config_map(
                obj, now, 2 * self.options.check_interval, shard=shard
            )
        except errors.NotFound:
            return
        except (errors.KubeError, trio.TooSlowError) as exc:
            log.warning(
                "could not read %s, the last manager's next checks (%s): each Cluster is checked"
                " at its place in the minute instead",
                where,
                _why(exc),
            )
            return
        except stoprecord.RecordError as exc:
            log.warning(
                "%s is not a record of next checks (%s): each Cluster is checked at its place in"
                " the minute; the next stop writes it anew",
                where,
                exc,
            )
            return
        self.context.stop_record.recorded.update(recorded)
        if recorded or shard is None:
            log.info("read %s: the next checks of %d Clusters", where, len(recorded))

    async def record_stop(self) -> None:
        """Stop gracefully: check every answering Cluster due within
        :data:`~kokumi.core.fleet.stoprecord.HORIZON` now, then write the stop record, every
        Cluster's next due, for the next manager (:mod:`kokumi.core.fleet.stoprecord`); with
        shards, one record per shard this replica holds, for the replica that takes it.

        Waits for those checks at most :data:`~kokumi.core.fleet.stoprecord.BUDGET`; the writes
        have their own timeout. A refused or failed write is logged once: the next manager then
        checks each Cluster at its place, as after a crash. Does nothing in a replica that
        serves no Cluster (a standby, or one that holds no shard).
        """
        recording = self._recording()
        if not recording:
            return
        state = self.context.stop_record
        now = trio.current_time()
        asked = sum(a.check_before_stop(now + stoprecord.HORIZON) for a in self.dispatcher.actors)
        state.begin(asked)
        with trio.move_on_after(stoprecord.BUDGET):
            await state.done.wait()
        shift = wall_shift()
        dues: dict[int | None, list[tuple[str, float]]] = {part: [] for part in recording}
        sharding = self.options.sharding
        for actor in self.dispatcher.actors:
            if actor.uid and (due := actor.next_due) is not None:
                ref = actor.ref
                part = sharding.shard_of(ref.namespace, ref.name) if sharding else None
                if part in dues:
                    dues[part].append((actor.uid, due - shift))
        self.context.probe_limiter.close()  # the record has the next checks: none starts here
        written_at = trio.current_time() - shift
        written: list[int | None] = []
        async with trio.open_nursery() as nursery:
            for part, entries in dues.items():
                nursery.start_soon(self._write_record, part, entries, written_at, written)
        if written:
            log.info(
                "stopping: checked %d of %d Clusters due in the next %g s early; recorded the"
                " next checks of %d in %s",
                asked - max(state.pending, 0),
                asked,
                stoprecord.HORIZON,
                sum(len(dues[part]) for part in written),
                self._where(None)
                + ("" if written == [None] else f" (shards {', '.join(map(str, written))})"),
            )

    async def _write_record(
        self,
        shard: int | None,
        dues: list[tuple[str, float]],
        written_at: float,
        written: list[int | None],
    ) -> None:
        """One shard's record (or the fleet's), by a field manager of that shard's own: records
        of shards written by other replicas stay beside it (server-side apply keeps what other
        managers own), and each write is fenced by its own shard's Lease."""
        sharding = self.options.sharding
        body = stoprecord.config_map(
            dues,
            written_at,
            namespace=self.options.namespace,
            shard=shard,
            limit=stoprecord.MAX_ENTRIES // (sharding.shards if sharding else 1),
        )
        manager = self.options.field_manager
        try:
            with trio.fail_after(self.options.probe_timeout):
                await self._record_writers[shard].apply(
                    CONFIG_MAPS,
                    body,
                    field_manager=manager if shard is None else f"{manager}-shard-{shard}",
                )
        except (errors.KubeError, trio.TooSlowError) as exc:
            log.warning(
                "stopping: could not write %s (%s): the next manager checks each Cluster at its"
                " place in the minute",
                self._where(shard),
                _why(exc),
            )
            return
        written.append(shard)

    #: The first name of :meth:`record_stop` (docs/embedding.md), kept so that embedding
    #: programs that call it keep working.
    hand_over = record_stop

    async def _stand_for_all(self, nursery: trio.Nursery) -> None:
        """Stand for every shard in this replica's order of preference, each first try made
        before the next shard's (Trio does not run tasks in the order they were started)."""
        for shard, elector in self.shard_electors.items():
            nursery.start_soon(self._stand_for, shard)
            await elector.tried.wait()

    async def _stand_for(self, shard: int) -> None:
        """Be a candidate for ``shard``'s Lease for ever; serve the shard while holding it."""
        elector = self.shard_electors[shard]
        while True:
            try:
                await elector.run(functools.partial(self._serve_shard, shard))
            except LeadershipLost as lost:
                # Its Cluster actors have stopped already: stand again, as a fresh candidate.
                log.warning("shard %d: %s; standing for it again", shard, lost)

    async def _serve_shard(self, shard: int) -> None:
        # The record of the replica that held it before, if it stopped and left one.
        await self._read_stop_record(shard)
        async with trio.open_nursery() as nursery:
            if shard == 0:
                if self.options.keep_in_cluster:
                    await nursery.start(
                        keep_in_cluster, self._shard_zero_writer, self.options.namespace
                    )
                # Environments' status is this replica's to write now: compute every namespace.
                for environment in self.dispatcher.environments.values():
                    namespace = str(environment.get("metadata", {}).get("namespace", ""))
                    self.dispatcher.environments_actor.changed(namespace)
                self.dispatcher.sources_actor.changed(None)
            await self.dispatcher.serve_shard(shard)

    async def serve(
        self, *, task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The health server if asked for, and :meth:`run`, inside the Lease if asked for.

        Without election ``nursery.start`` returns once the manager runs; with it, at once (a
        standby may wait long), and ``elector.leading`` says when it leads. Raises
        :class:`LeadershipLost` when the Lease could not be renewed in time.
        """
        try:
            async with trio.open_nursery() as nursery:
                if self.options.health_port is not None:
                    self.health_port = await nursery.start(
                        health.serve,
                        self.options.health_port,
                        self.metrics.exposition,
                        self.readiness,
                    )
                if self.elector is None:
                    await nursery.start(self.run)
                    task_status.started(self)
                    return
                task_status.started(self)
                await self.elector.run(self.run)
                nursery.cancel_scope.cancel()
        except* LeadershipLost as group:
            raise LeadershipLost(str(group.exceptions[0])) from None


def _why(exc: Exception) -> object:
    """A request's failure as a log line says it: the hub's answer, or that none came in time
    (the client's errors carry no credentials)."""
    return exc if isinstance(exc, errors.KubeError) else "no answer in time"


async def run_manager(
    config: Config | None = None,
    options: Options | None = None,
    *,
    task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the manager until cancelled; ``nursery.start`` hands back the :class:`Manager`.

    ``config`` is the hub connection (default: in-cluster, else the kubeconfig as kubectl finds
    it); ``options`` the behaviour (default: what the spec asks for, no election, no health
    server).
    """
    config = config or Config.load()
    options = options or Options()
    async with Client(config, field_manager=options.field_manager) as client:
        await Manager(client, options).serve(task_status=task_status)


async def run_manager_until_signalled(config: Config | None, options: Options) -> None:
    """``kokumi manager``: run until SIGINT or SIGTERM, record the stop
    (:meth:`Manager.record_stop`), then stop; a signal before the manager has started, or a
    second one, stops at once.

    Kubernetes stops a pod with SIGTERM and kills it ``terminationGracePeriodSeconds`` (30)
    later: the stop record takes at most half of that, and cancelling lets every actor, watch and
    check end inside its own nursery. The signals are heard from the first moment: a start that
    waits for a hub that does not answer must not make a pod deaf to its stop.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            running: list[Manager] = []

            async def run() -> None:
                async with trio.open_nursery() as inner:
                    running.append(await inner.start(run_manager, config, options))
                nursery.cancel_scope.cancel()  # it ended by itself

            nursery.start_soon(run)
            async for signum in signals:
                log.info(
                    "%s received: %s",
                    signal.Signals(signum).name,
                    "writing the stop record, then stopping" if running else "stopping",
                )
                break
            if running:
                with trio.CancelScope() as recording:

                    async def second_signal() -> None:
                        async for again in signals:
                            log.info("%s received again: stopping now", signal.Signals(again).name)
                            recording.cancel()
                            return

                    nursery.start_soon(second_signal)
                    await running[0].record_stop()
            nursery.cancel_scope.cancel()
