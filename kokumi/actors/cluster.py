"""One actor per Cluster: it owns the Cluster's state, its probe timer and its status writes.

Its mailbox is a handful of "latest value" slots plus a wake-up event, filled by plain method calls
that never block. That keeps the dispatcher, the Environments actor and the registry from ever
waiting on a Cluster actor (the registry -> Cluster direction is half of a cycle), and it bounds the
mailbox by construction: a burst of watch events for one Cluster costs one reconcile, with the
newest state.

What to do is never decided here: the Cluster's state is one frozen value
(:class:`kokumi.core.cluster.lifecycle.State`), and a reconcile asks
:func:`~kokumi.core.cluster.lifecycle.next_step` for its next step until the turn is done,
carrying out each (a check, a claim, a finalizer, a status) and folding its result back in.
"""

from __future__ import annotations

import logging
import math

import attrs
import trio

from kokumi.actors.context import Context, wall_shift
from kokumi.actors.kubeconfigs import read_kubeconfig
from kokumi.actors.writes import set_finalizer, write_status
from kokumi.core import api
from kokumi.core.cluster import findings, lifecycle, schedule
from kokumi.core.cluster.findings import Check, Read
from kokumi.core.cluster.lifecycle import State, Turn
from kokumi.core.cluster.status import observed_cluster_status, seeded_outcome
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import Registration
from kokumi.kube import errors
from kokumi.kube.backoff import FailureLog, Retries

__all__ = ["ClusterActor"]

log = logging.getLogger(__name__)

#: What each step is, in the one log line a failing one costs.
_DOING = {
    lifecycle.Seed: "reading its kubeconfig Secret",
    lifecycle.RunCheck: "reading its kubeconfig Secret",
    lifecycle.Want: "registering with Argo CD",
    lifecycle.Release: lifecycle.RELEASING,
    lifecycle.AddFinalizer: "updating its finalizer",
    lifecycle.DropFinalizer: "removing its finalizer",
    lifecycle.StopChecking: "reconciling",
    lifecycle.WriteStatus: "writing its status",
}


class ClusterActor:
    """The mailbox, the timer and the carrying out of one Cluster's lifecycle."""

    # One per Cluster: slots instead of an instance dict keep 10,000 of them smaller.
    __slots__ = (
        "_alarm_at",
        "_context",
        "_doing",
        "_offset",
        "_retries",
        "_serial",
        "_since",
        "_slot_wait",
        "_state",
        "_stopping",
        "_wake",
        "_writer",
        "checked",
        "ref",
        "uid",
    )

    def __init__(self, context: Context, cluster: api.Cluster | api.Invalid) -> None:
        self._context = context
        # What a status said when the actor started is its first check after a restart.
        self._state = State(cluster, seed=seeded_outcome(cluster), carry=context.options.carry)
        self.ref = ClusterRef(cluster.metadata.namespace, cluster.metadata.name)
        #: The Cluster object this actor acts for: the registry ignores it once it is gone.
        self.uid = cluster.metadata.uid
        # Its writes go through this client: with shards, fenced by its shard's Lease, so that
        # a write that waited while the Lease went is never sent.
        self._writer = context.writer(self.ref)
        self._wake = trio.Event()
        # Which of the timers it set is the one that counts (kokumi.actors.alarms): the last,
        # set for ``_alarm_at`` (None once it rang).
        self._serial = 0
        self._alarm_at: float | None = None
        # Its own place in the check period (kokumi.core.cluster.schedule): the fleet's checks
        # spread evenly from the first one, at the same moment in every process across restarts.
        identity = cluster.metadata.uid or f"{self.ref.namespace}/{self.ref.name}"
        period = schedule.period_of(context.options.check_interval, context.options.check_jitter)
        self._offset = (schedule.offset_of(identity, period) + wall_shift()) % period
        # When this manager began serving the Cluster: a place that came since (or a little
        # before, while the last manager may have been stopping) may have gone unchecked.
        self._since = trio.current_time() - schedule.RESTART_ALLOWANCE
        self._retries = Retries(context.options.backoff, FailureLog(log, f"Cluster {self.ref}"))
        self._doing = "reconciling"
        self._stopping = False
        # Set while a check waits for its slot: a message cancels the wait (see _run_check).
        self._slot_wait: trio.CancelScope | None = None
        self.checked = trio.Event()  # set after the first check: "all Clusters checked once"

    @property
    def state(self) -> State:
        """What the actor knows of its Cluster (frozen: a copy to read, never to change)."""
        return self._state

    def _evolve(self, **changes: object) -> None:
        self._state = attrs.evolve(self._state, **changes)  # type: ignore[arg-type]

    # --- the mailbox: every method returns at once ----------------------------------------------

    def update(self, cluster: api.Cluster | api.Invalid) -> None:
        self._state = lifecycle.seen(self._state, cluster)
        self._interrupt()

    def secret_changed(self) -> None:
        self._evolve(secret_news=self._state.secret_news + 1)
        self._interrupt()

    def secret_gone(self) -> None:
        """The Secret watch listed without this Cluster's Secret: a read from before is stale.

        A Secret deleted before the watch's first list sends no event (the watch never knew
        it), so the list's silence is the only word of it.
        """
        if self._state.read is not None:
            self.secret_changed()

    def wake(self) -> None:
        """Reconcile; a check is reused only while the kubeconfig Secret's version is the same."""
        self._wake.set()

    def ring(self, serial: int) -> None:
        """Its timer (kokumi.actors.alarms): the next check or retry is due, unless the loop
        has set another timer since (``serial`` is then an old one's)."""
        if serial == self._serial:
            self._alarm_at = None
            self._wake.set()

    def set_environments(self, environments: tuple[str, ...]) -> None:
        """Which Environments select it (none: not selected); its Secret carries their names."""
        if (bool(environments), environments) != (self._state.selected, self._state.environments):
            self._evolve(selected=bool(environments), environments=environments)
            self._interrupt()

    def registration(self, registration: Registration) -> None:
        if registration != self._state.registration:
            self._evolve(registration=registration)
            self._interrupt()

    def check_before_stop(self, until: float) -> bool:
        """The manager stops: check now if lifecycle.ask_before_stop says; whether it did."""
        now, interval = trio.current_time(), self._context.options.check_interval
        asked = lifecycle.ask_before_stop(self._state, until, now, interval)
        if asked is None or self._stopping:
            return False
        self._state = asked
        self._context.metrics.check_planned(self.ref, now)
        self._wake.set()
        return True

    @property
    def next_due(self) -> float | None:
        """When the next check falls due (Trio time), for the stop record; None without one."""
        interval = self._context.options.check_interval
        return None if self._stopping else lifecycle.next_due(self._state, interval)

    def stop(self) -> None:
        """The Cluster is gone from the API: let go of its server and end."""
        self._stopping = True
        self._interrupt()

    def supersede(self) -> None:
        """A Cluster of the same name was created again before this actor ended.

        Its claims are now the new actor's: this one must neither want nor release anything,
        or a late message of the old Cluster would undo the new one's registration.
        """
        self._evolve(superseded=True)
        self._stopping = True
        self._interrupt()

    def _interrupt(self) -> None:
        """Wake the loop, and give up a place in the queue for a check slot.

        A silent Cluster's check may wait minutes for its slot (they take only what answering
        Clusters leave); its deletion, a new spec or selection must not wait with it. The check
        itself, 10 s at most, is never cut short: only the wait for a slot.
        """
        self._wake.set()
        if self._slot_wait is not None:
            self._slot_wait.cancel()

    @property
    def cluster(self) -> api.Cluster | api.Invalid:
        return self._state.cluster

    @property
    def waiting_for_slot(self) -> bool:
        """Whether its check is queued for one of the check slots now."""
        return self._slot_wait is not None

    # --- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        self._context.registry.subscribe(self.ref, self.uid, self.registration)
        metrics = self._context.metrics
        metrics.due_clock = trio.current_time
        metrics.check_interval = self._context.options.check_interval
        try:
            while True:
                # While a retry is pending its backoff rules, also over a check that fell due:
                # a check that failed leaves the timer in the past, and waiting for it would be
                # a request loop.
                retries = self._retries
                deadline = retries.at if retries.at != math.inf else self._state.next_check
                if deadline != self._alarm_at:
                    # A new time; one set before and not rung yet still rings at the same.
                    self._serial += 1
                    self._alarm_at = deadline
                    self._context.alarms.set(deadline, self, self._serial)
                await self._wake.wait()
                self._wake = trio.Event()
                if self._stopping:
                    break
                retries.at = math.inf
                try:
                    await self._reconcile()
                except errors.Fenced:
                    # Its shard went while a write waited: the actor is being stopped, or the
                    # Lease ran past its renew deadline unrenewed; nothing to log either way.
                    retries.later(self._doing, trio.current_time())
                except errors.KubeError as exc:
                    # The hub said no or went away: retried after its kind's backoff.
                    retries.failed(self._doing, exc, trio.current_time())
                except Exception:
                    # A bug must cost one Cluster a retry, never the manager and every other
                    # Cluster. Our exceptions carry no credentials, so the traceback may be logged.
                    log.exception("Cluster %s: unexpected error; retrying", self.ref)
                    retries.later("reconciling", trio.current_time())
                else:
                    retries.settled()
                if self._state.stop_check == 2:
                    # Counted once the step is over, its status written: the stop record must
                    # not follow a finding the status does not show yet.
                    self._evolve(stop_check=0)
                    self._context.stop_record.checked()
            await self._release()
        finally:
            # An actor that ends (its Cluster gone) is never checked: wait_checked goes on.
            self.checked.set()
            self._context.registry.unsubscribe(self.ref, self.uid)

    async def _reconcile(self) -> None:
        """One turn: the lifecycle's steps, each carried out, until it says the turn is done."""
        now = trio.current_time()
        turn = Turn(path=lifecycle.path_of(self._state.cluster))
        options = self._context.options
        while True:
            step = lifecycle.next_step(
                self._state,
                turn,
                now,
                watched=self._watched(),
                reuse_window=options.reuse_window,
                stamp=api.now_rfc3339(),
            )
            if isinstance(step, lifecycle.Done):
                if step.retry is not None:
                    self._retries.later(step.retry, trio.current_time())
                return
            self._doing = _DOING[type(step)]
            turn = await self._carry_out(step, turn, now)

    async def _carry_out(self, step: lifecycle.Step, turn: Turn, now: float) -> Turn:
        """Do ``step``; what the turn has done once it is done."""
        if isinstance(step, lifecycle.Seed):
            return attrs.evolve(turn, checked=await self._seed(now))
        if isinstance(step, lifecycle.RunCheck):
            self._context.metrics.check_planned(self.ref, None)
            check = await self._run_check()
            if check is not None:
                self._after_check(check, now)
            return attrs.evolve(turn, checked=True)
        if isinstance(step, lifecycle.Want):
            self._evolve(may_hold=True)
            # The answer comes to self.registration, as every word of the registry does.
            await self._context.registry.want(self.ref, self.uid, step.connection, step.extras)
            self._evolve(claimed=step, claim_answer=self._state.registration)
            return attrs.evolve(turn, registered=True)
        if isinstance(step, lifecycle.Release):
            return attrs.evolve(turn, registered=True, released=await self._release())
        if isinstance(step, lifecycle.AddFinalizer | lifecycle.DropFinalizer):
            await self._set_finalizer(present=isinstance(step, lifecycle.AddFinalizer))
            return attrs.evolve(turn, finalized=True)
        if isinstance(step, lifecycle.StopChecking):
            # Never checked again, so nobody waiting for its first check (wait_checked) may
            # wait for it: a Cluster left deleting by a manager that stopped would hold them.
            self._plan(math.inf)
            self.checked.set()
            return turn
        assert isinstance(step, lifecycle.WriteStatus)
        await self._write(step.status)
        return attrs.evolve(turn, wrote=True)

    def _watched(self) -> str | None:
        """The Secret watch's version of the Cluster's kubeconfig Secret; None: not known yet."""
        key = findings.secret_key(self._state.cluster)
        return None if key is None else self._context.secret_versions.get(key)

    def _plan(self, at: float) -> None:
        """The next check falls due ``at`` (``math.inf``: never); ``/metrics`` shows the spread."""
        self._evolve(next_check=at)
        self._context.metrics.check_planned(self.ref, at)

    # --- the steps carried out ----------------------------------------------------------------

    async def _seed(self, now: float) -> bool:
        """Take the status's last finding as the first check (lifecycle.State.seed); whether it
        could. The reads of a restart are a few paged lists (kokumi.actors.secretreads)."""
        seed, cluster = self._state.seed, self._state.cluster
        self._evolve(seed=None)
        if seed is None or not isinstance(cluster, api.Cluster):
            return False
        if cluster.spec.connection != "Kubeconfig":
            return False
        check = lifecycle.seed_check(seed, await self._read_kubeconfig(cluster, now), now)
        if check is None:
            return False
        self._state = lifecycle.after_seed(self._state, check, cluster.metadata.generation)
        options, recorded = self._context.options, self._context.stop_record.take(self.uid)
        due, missed = lifecycle.first_due(
            trio.current_time(),
            recorded=recorded + wall_shift() if recorded is not None else None,
            offset=self._offset,
            period=schedule.period_of(options.check_interval, options.check_jitter),
            since=self._since,
            lateness=options.check_lateness(),
        )
        self._plan(due)
        if missed is not None:
            self._evolve(missed_due=missed)
        self.checked.set()
        return True

    def _after_check(self, check: Check, now: float) -> None:
        """Count ``check``, which fell due at ``now``, and plan the next one."""
        options = self._context.options
        self._state = lifecycle.after_check(
            self._state,
            check,
            fell_due=now,
            finished=trio.current_time(),
            offset=self._offset,
            interval=options.check_interval,
            lateness=options.check_lateness(),
            jitter=options.check_jitter,
        )
        self._context.metrics.check_finished(self.ref, check.outcome.reason)
        self._context.metrics.check_planned(self.ref, self._state.next_check)
        self.checked.set()

    async def _run_check(self) -> Check | None:
        """The check of the Cluster; None if a message came while it waited for a slot."""
        now = trio.current_time()
        cluster = self._state.cluster
        assert isinstance(cluster, api.Cluster)
        if cluster.spec.connection == "InCluster":
            outcome = await self._context.in_cluster.check(self._context.options.reuse_window)
            return Check(outcome, now, None, heard=self._state.secret_news)
        read = lifecycle.reusable_read(
            self._state,
            now,
            watched=self._watched(),
            reuse_window=self._context.options.reuse_window,
        )
        if read is None:
            read = await self._read_kubeconfig(cluster, now)
        if read.outcome is not None:
            return Check(read.outcome, now, read.version, read.connection, heard=read.news)
        assert read.connection is not None
        kind, since, due = lifecycle.slot_request(self._state)
        limiter = self._context.probe_limiter
        with trio.CancelScope() as waiting:
            self._slot_wait = waiting
            try:
                await limiter.acquire(kind, since, due)
            finally:
                self._slot_wait = None
        if waiting.cancelled_caught:
            return None
        began = trio.current_time()
        self._evolve(missed_due=None, running_since=began)
        try:
            found = await self._context.check(
                read.connection,
                timeout=self._context.options.probe_timeout,
                egress=self._context.options.probe_egress,
                cluster_wide=findings.lists_cluster_wide(cluster),
            )
        finally:
            limiter.release()
        return Check(found, trio.current_time(), read.version, read.connection, began, read.news)

    async def _read_kubeconfig(self, cluster: api.Cluster, now: float) -> Read:
        """Read the Secret (kokumi.actors.kubeconfigs); kept for reuse unless it was unreadable."""
        last = self._state.read
        self._evolve(read=None)
        read = await read_kubeconfig(
            self._context.secret_reads,
            cluster,
            version=findings.version_of(cluster, self._watched()),
            last=last,
            news=self._state.secret_news,
            now=now,
            username=self._context.username,
            own_namespace=self._context.options.namespace,
        )
        self._evolve(read=read if read.reusable else None)
        return read

    async def _release(self) -> bool:
        """Let go of any claim; whether the API server has it (no Secret names us any more)."""
        self._evolve(claimed=None, claim_answer=None)
        if self._state.superseded:
            return True
        done = not self._state.may_hold or await self._context.registry.release(self.ref, self.uid)
        self._state = lifecycle.after_release(self._state, done)
        return done

    async def _set_finalizer(self, *, present: bool) -> None:
        cluster, parse = self._state.cluster, self._context.options.parse_cluster
        now = await set_finalizer(self._writer, self._context.client, cluster, present, parse)
        if now is not None:
            self._evolve(cluster=now)

    async def _write(self, new: api.ClusterStatus) -> None:
        """Write the status the lifecycle chose, and an Event when Ready changed."""
        cluster = self._state.cluster
        observed = observed_cluster_status(cluster)
        if not await write_status(self._writer, api.CLUSTERS, cluster.metadata, new, unchanged=()):
            return
        self._evolve(written=new)
        self._context.metrics.status_writes += 1
        await self._context.events.ready_changed(
            api.CLUSTERS, cluster.metadata, observed, new, client=self._writer
        )
