"""One actor per Cluster: it owns the Cluster's last check, its probe timer and its status.

Its mailbox is a handful of "latest value" slots plus a wake-up event, filled by plain method calls
that never block. That keeps the dispatcher, the Environments actor and the registry from ever
waiting on a Cluster actor (the registry -> Cluster direction is half of a cycle), and it bounds the
mailbox by construction: a burst of watch events for one Cluster costs one reconcile, with the
newest state.
"""

from __future__ import annotations

import functools
import logging
import math
import random

import attrs
import trio

from kokumi.actors.context import Context, wall_shift
from kokumi.actors.parsing import off_loop
from kokumi.actors.writes import write_status
from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.core.cluster.status import (
    Outcome,
    SecretRead,
    claim_stands,
    cluster_outcome,
    cluster_status,
    observed_cluster_status,
    ready_event,
    seeded_outcome,
)
from kokumi.core.fleet import stoprecord
from kokumi.core.kubeconfig.connection import Connection, Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.reasons import PROBE_REASONS, Reason
from kokumi.core.registry.ownership import ClusterRef, is_argocd_own
from kokumi.core.registry.registration import NOT_REGISTERED, Registration
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.objects import resource_version, secret_data, secret_keys

__all__ = ["Check", "ClusterActor"]

log = logging.getLogger(__name__)


@attrs.frozen
class Check:
    """What one check found, when, and from which version of the kubeconfig Secret."""

    outcome: Outcome
    at: float
    secret_version: str | None
    connection: Connection | None = attrs.field(default=None, repr=False)
    #: When its probe had its slot and began, if it asked the server: the next check is due a
    #: minute after that, so that the spoke sees a minute between two checks whatever the wait.
    began: float | None = None
    #: How many words of a changed Secret the actor had heard when its read began: a word
    #: that comes during the check (after the read) makes the next reconcile check again.
    heard: int = 0


def _version_of(cluster: api.Cluster, version: str | None) -> str:
    """What a read or a check of ``cluster``'s kubeconfig is of: the Secret's key and version and
    the context read, in one spelling, so that a read is reused exactly while all three hold."""
    ref = cluster.secret_ref
    assert ref is not None
    return f"{ref.name}/{ref.key}/{cluster.kubeconfig_context or ''}@{version}"


SECRET_REREAD = 600.0
"""Seconds a kubeconfig read is reused at least while the Secret watch reports the same version.

Past this (and a random share of it again, so that Clusters created together do not all read at
once ten minutes later), the next check reads the Secret again, so a RoleBinding removed
meanwhile shows as SecretNotReadable within twenty minutes (the metadata watch keeps its last
versions when it is refused).
"""


@attrs.frozen
class _Read:
    """One read of the kubeconfig Secret: its version, and the connection or why there is none."""

    version: str | None
    at: float
    connection: Connection | None = attrs.field(repr=False)
    outcome: Outcome | None
    #: Reused until ``at + keep``: SECRET_REREAD to twice that, at random.
    keep: float = attrs.field(factory=lambda: SECRET_REREAD * random.uniform(1.0, 2.0))  # noqa: S311
    #: The actor's count of words of a changed Secret when the read began (see Check.heard).
    news: int = 0


class ClusterActor:
    # One per Cluster: slots instead of an instance dict keep 10,000 of them about 15 MB
    # smaller (the dict of 30 attributes was 1.9 KB an actor).
    __slots__ = (
        "_alarm_at",
        "_answered",
        "_backoffs",
        "_check",
        "_checked_generation",
        "_claim_answer",
        "_claimed",
        "_cluster",
        "_context",
        "_doing",
        "_failures",
        "_may_hold",
        "_missed_due",
        "_next_check",
        "_offset",
        "_read",
        "_registration",
        "_retry_at",
        "_secret_heard",
        "_secret_news",
        "_seed",
        "_selected",
        "_serial",
        "_since",
        "_slot_wait",
        "_stop_check",
        "_stop_check_due",
        "_stopping",
        "_superseded",
        "_unanswered",
        "_wake",
        "_writer",
        "_written",
        "checked",
        "ref",
        "uid",
    )

    def __init__(self, context: Context, cluster: api.Cluster | api.Invalid) -> None:
        self._context = context
        self._cluster = cluster
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
        # Unknown until the Environments actor has said: after a restart, acting on a guess
        # would release (and so delete) a registration that is still wanted.
        self._selected: bool | None = None
        # Words of a changed Secret (the watch's), and how many of them the last check heard.
        self._secret_news = 0
        self._secret_heard = 0
        self._registration = NOT_REGISTERED
        # Whether the registry may count this Cluster as holding or waiting. True at start: after
        # a restart the registry's table, rebuilt from Argo CD's Secrets, may name it.
        self._may_hold = True
        self._check: Check | None = None
        # The spec generation the check above was made for: a new spec (a connection switched,
        # or valid again after an Invalid spell) is checked afresh, never served an old check.
        self._checked_generation: int | None = None
        self._read: _Read | None = None
        # The connection last claimed and the registry's answer to it: a check that finds both
        # the same claims nothing again (see _register).
        self._claimed: Connection | None = None
        self._claim_answer: Registration | None = None
        # What the status said when this actor started: a manager that restarts takes it as
        # its first check and spreads its own first checks over the interval (see _seed_check).
        self._seed = seeded_outcome(cluster)
        self._next_check = -math.inf
        # Its own place in the check interval (kokumi.core.cluster.schedule), so the fleet's checks
        # spread evenly over the minute from the first one; the same second of the minute in
        # every process, so a restart keeps it.
        identity = cluster.metadata.uid or f"{self.ref.namespace}/{self.ref.name}"
        interval = context.options.check_interval
        self._offset = (schedule.offset_of(identity, interval) + wall_shift()) % interval
        # When this manager began serving the Cluster: a place that came since (or a little
        # before, while the last manager may have been stopping) may have gone unchecked.
        self._since = trio.current_time() - schedule.RESTART_ALLOWANCE
        # A restart's first check of a place missed: when it fell due, at a guess, which orders
        # it among the others checked at once (schedule.missed_due). None once it has run.
        self._missed_due: float | None = None
        # This manager's stop asked for its check (1), which has been made (2), and when that
        # check fell due before the stop asked for it: see check_before_stop.
        self._stop_check = 0
        self._stop_check_due = math.nan
        # Checks in a row that got no answer, and whether any check ever got one: they choose
        # the class of its next check (schedule.check_class); silent checks take only the slots
        # that answering Clusters leave.
        self._unanswered = 0
        self._answered = False
        self._retry_at = math.inf
        self._backoffs: dict[str, Backoff] = {}
        self._failures = FailureLog(log, f"Cluster {self.ref}")
        self._doing = "reconciling"
        self._written: api.ClusterStatus | None = None
        self._stopping = False
        self._superseded = False
        # Set while a check waits for its slot: a message cancels the wait (see _run_check).
        self._slot_wait: trio.CancelScope | None = None
        self.checked = trio.Event()  # set after the first check: "all Clusters checked once"

    # --- the mailbox: every method returns at once ----------------------------------------------

    def update(self, cluster: api.Cluster | api.Invalid) -> None:
        self._cluster = cluster
        observed = observed_cluster_status(cluster)
        if observed is not None and observed == self._written:
            # The watch brought our last write back: one copy of it is enough (10,000 fewer
            # statuses kept once a fleet has onboarded).
            self._written = observed
        self._interrupt()

    def secret_changed(self) -> None:
        self._secret_news += 1
        self._interrupt()

    def secret_gone(self) -> None:
        """The Secret watch listed without this Cluster's Secret: a read from before is stale.

        A Secret deleted before the watch's first list sends no event (the watch never knew
        it), so the list's silence is the only word of it.
        """
        if self._read is not None:
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

    def set_selected(self, selected: bool) -> None:
        if selected != self._selected:
            self._selected = selected
            self._interrupt()

    def registration(self, registration: Registration) -> None:
        if registration != self._registration:
            self._registration = registration
            self._interrupt()

    def check_before_stop(self, until: float) -> bool:
        """The manager is stopping: check now if the next check falls due by ``until``, so that
        it does not fall due while no manager checks; whether a check was asked for.

        Only an answering Cluster, on its chain of checks: a silent one could hold a slot for
        its whole timeout while the stop waits, and its gap is not what the stop protects.
        """
        if (
            self._stopping
            or self._check is None
            or not self._next_check <= until
            or schedule.check_class(self._unanswered, self._answered) != schedule.ANSWERING
        ):
            return False
        self._missed_due = self._stop_check_due = self._next_check  # soonest due first
        self._plan(trio.current_time())
        self._stop_check = 1
        self._wake.set()
        return True

    @property
    def next_due(self) -> float | None:
        """When the next check falls due (Trio time), for the stop record; None without one.

        A check the stop asked for that has not ended yet is due when it was before the stop
        asked: the next manager orders the checks it makes at once by when they fell due.
        """
        if self._check is None or self._stopping or not math.isfinite(self._next_check):
            return None
        if self._stop_check == 1:
            return self._stop_check_due
        return self._next_check

    def stop(self) -> None:
        """The Cluster is gone from the API: let go of its server and end."""
        self._stopping = True
        self._interrupt()

    def supersede(self) -> None:
        """A Cluster of the same name was created again before this actor ended.

        Its claims are now the new actor's: this one must neither want nor release anything,
        or a late message of the old Cluster would undo the new one's registration.
        """
        self._superseded = True
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
        return self._cluster

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
                deadline = self._retry_at if self._retry_at != math.inf else self._next_check
                if deadline != self._alarm_at:
                    # A new time; one set before and not rung yet still rings at the same.
                    self._serial += 1
                    self._alarm_at = deadline
                    self._context.alarms.set(deadline, self, self._serial)
                await self._wake.wait()
                self._wake = trio.Event()
                if self._stopping:
                    break
                self._retry_at = math.inf
                try:
                    await self._reconcile()
                except errors.Fenced:
                    # Its shard went while a write waited: the actor is being stopped, or the
                    # Lease ran past its renew deadline unrenewed; nothing to log either way.
                    self._retry_later(self._doing)
                except errors.KubeError as exc:
                    # The hub said no or went away. Retried after a growing, jittered delay per
                    # kind of request, and logged once per change of error, so a long outage
                    # costs neither a request storm nor a log flood.
                    delay = self._retry_later(self._doing)
                    self._failures.failed(f"{self._doing}: {exc}", retry_in=delay)
                except Exception:
                    # A bug must cost one Cluster a retry, never the manager and every other
                    # Cluster. Our exceptions carry no credentials, so the traceback may be logged.
                    log.exception("Cluster %s: unexpected error; retrying", self.ref)
                    self._retry_later("reconciling")
                else:
                    if self._retry_at == math.inf:
                        self._backoffs.clear()
                        self._failures.recovered()
                if self._stop_check == 2:
                    # Counted once the step is over, its status written: the stop record must
                    # not follow a finding the status does not show yet.
                    self._stop_check = 0
                    self._context.stop_record.checked()
            await self._release()
        finally:
            # An actor that ends (its Cluster gone) is never checked: wait_checked goes on.
            self.checked.set()
            self._context.registry.unsubscribe(self.ref, self.uid)

    def _retry_later(self, kind: str) -> float:
        """Wake again after the next backoff delay of ``kind``; the delay."""
        backoff = self._backoffs.setdefault(kind, self._context.options.backoff())
        delay = backoff.next()
        self._retry_at = min(self._retry_at, trio.current_time() + delay)
        return delay

    async def _reconcile(self) -> None:
        cluster = self._cluster
        if cluster.metadata.deletion_timestamp:
            # Deleted (with our finalizer, or it would be gone): let go first, and let the
            # object go only once the registry says no Secret names it any more. Nothing is
            # checked any more: with the check timer in the past, a Cluster whose DELETED event
            # is late (a watch down) would reconcile in a loop that never blocks.
            self._plan(math.inf)
            # Never checked again, so nobody waiting for its first check (wait_checked) may
            # wait for it: a Cluster left deleting by a manager that stopped would hold them.
            self.checked.set()
            self._doing = "releasing its Argo CD registration"
            if await self._release():
                self._doing = "removing its finalizer"
                await self._drop_finalizer(cluster)
            else:
                self._retry_later(self._doing)
            return
        if isinstance(cluster, api.Invalid):
            self._doing = "releasing its Argo CD registration"
            released = await self._release()
            self._doing = "writing its status"
            await self._write(self._status(cluster_outcome(cluster), None), cluster.metadata)
            self.checked.set()
            self._plan(math.inf)
            if released:
                self._doing = "removing its finalizer"
                await self._drop_finalizer(cluster)
            else:
                self._retry_later("releasing its Argo CD registration")
            return
        now = trio.current_time()
        if self._seed is not None and await self._seed_check(cluster, now):
            pass
        elif self._needs_check(now):
            self._doing = "reading its kubeconfig Secret"
            self._context.metrics.check_planned(self.ref, None)
            check = await self._run_check(cluster)
            if check is None:
                # A message came while it waited for a slot: the loop sees to it at once (its
                # wake-up is set) and asks for a slot again after, still due. Meanwhile the
                # last check, if any, serves as it is.
                if self._check is None:
                    return
            else:
                self._check = check
                self._after_check(cluster, now)
        assert self._check is not None
        if self._selected is None:
            # Until the Environments actor has spoken, neither claim nor release anything, and
            # write no status that the registration would change a moment later.
            return
        self._doing = "registering with Argo CD"
        settled = await self._register(cluster, self._check)
        self._doing = "updating its finalizer"
        await self._ensure_finalizer(cluster)
        self._doing = "writing its status"
        await self._write(self._status(self._check.outcome, self._registration), cluster.metadata)
        if not settled:
            self._retry_later("releasing its Argo CD registration")

    def _after_check(self, cluster: api.Cluster, now: float) -> None:
        """Count the check of ``cluster`` that fell due at ``now`` and plan the next one."""
        assert self._check is not None
        self._checked_generation = cluster.metadata.generation
        reason = self._check.outcome.reason
        self._context.metrics.check_finished(self.ref, reason)
        if schedule.is_unanswered(reason):
            self._unanswered += 1
        elif reason in PROBE_REASONS:  # the server answered (a Secret's finding asked nobody)
            self._unanswered = 0
            self._answered = True
        self._secret_heard = self._check.heard
        # An interval after this check began (the spoke sees the gap between two probes, so a
        # wait for a slot must not shorten it), moved toward the Cluster's place plus the
        # spec's random lateness.
        options = self._context.options
        began = self._check.began if self._check.began is not None else now
        self._plan(
            schedule.due_after(
                began,
                trio.current_time(),
                self._offset,
                options.check_interval,
                lateness=options.check_lateness(),
                drift=options.check_interval / 10,
            )
        )
        self.checked.set()
        if self._stop_check:
            self._stop_check = 2

    def _needs_check(self, now: float) -> bool:
        """A reconcile for another reason reuses a check under half a minute old.

        The timer, a changed kubeconfig Secret, a new Secret reference or a new spec check again.
        """
        check = self._check
        if check is None or now >= self._next_check or self._secret_news != self._secret_heard:
            return True
        cluster = self._cluster
        if cluster.metadata.generation != self._checked_generation:
            return True
        watched = (
            self._context.secret_versions.get((cluster.metadata.namespace, cluster.secret_ref.name))
            if isinstance(cluster, api.Cluster) and cluster.secret_ref is not None
            else None
        )
        # Until the Secret watch has listed, its version is unknown, not changed: the first
        # list wakes the actor, which compares then.
        if watched is not None and self._secret_version() != check.secret_version:
            return True
        return now - check.at >= self._context.options.reuse_window

    def _secret_version(self) -> str | None:
        cluster = self._cluster
        if not isinstance(cluster, api.Cluster) or cluster.secret_ref is None:
            return None
        version = self._context.secret_versions.get(
            (cluster.metadata.namespace, cluster.secret_ref.name)
        )
        return _version_of(cluster, version)

    async def _seed_check(self, cluster: api.Cluster, now: float) -> bool:
        """Take the status's last finding as this actor's first check; whether it could.

        After a restart every Cluster would otherwise check at once: thousands of connections
        together, the loop too busy to finish the checks in their 10 s, and healthy Clusters
        marked Unreachable. The status holds what the last check found, so the actor reads the
        kubeconfig (for its registration), keeps that finding, writes nothing since nothing
        changed, and checks at its own place within the interval, or at once if that place
        came while no manager may have checked it. A Cluster whose status does not match its
        spec or its kubeconfig's server is checked at once.

        Deferring the read to that first check was measured too: at 10,000 Clusters the hub
        served 83 GETs a second either way, so the first checks queued behind their reads and
        the gap across a restart grew (p99 152-172 s against 119-136 s). The reads of a restart
        are a few paged lists now (kokumi.actors.secretreads).
        """
        seed, self._seed = self._seed, None
        if seed is None or cluster.spec.connection != "Kubeconfig":
            return False
        self._doing = "reading its kubeconfig Secret"
        read = await self._read_kubeconfig(cluster, now)
        if read.outcome is not None or read.connection is None:
            return False
        if read.connection.server != seed.server:
            return False
        self._check = Check(seed, now, read.version, read.connection, heard=read.news)
        self._secret_heard = read.news
        self._checked_generation = cluster.metadata.generation
        # Silent before the restart: its first checks must not take the answering Clusters'
        # slots either (200 dead spokes, two checks each at full priority, would hold all
        # eight slots for eight minutes).
        if schedule.is_unanswered(seed.reason):
            self._unanswered = schedule.SILENT_AFTER
        else:
            self._answered = True
        options = self._context.options
        after = trio.current_time()
        recorded = (
            self._context.stop_record.recorded.pop(stoprecord.uid_key(self.uid), None)
            if self.uid and self._context.stop_record.recorded
            else None
        )
        if recorded is not None:
            # The last manager said when this check falls due as it stopped: on its chain,
            # wherever that is in the minute; if that time has gone by, now, in its turn.
            due = recorded + wall_shift()
            if due > after:
                self._plan(due)
            else:
                self._plan(after)
                self._missed_due = due
        elif schedule.missed_place(after, self._offset, options.check_interval, self._since):
            # Its place came while no manager may have checked it: now, not a minute late, and
            # before the others of the restart that were checked more lately.
            self._plan(after)
            self._missed_due = schedule.missed_due(after, self._offset, options.check_interval)
        else:
            # Its own place in the interval: the restarted fleet's checks are as evenly spread
            # as they were before it.
            due = schedule.first_place(after, self._offset, options.check_interval)
            self._plan(due + options.check_lateness())
        self.checked.set()
        return True

    def _plan(self, at: float) -> None:
        """The next check falls due ``at`` (``math.inf``: never); ``/metrics`` shows the spread."""
        self._next_check = at
        self._context.metrics.check_planned(self.ref, at)

    async def _run_check(self, cluster: api.Cluster) -> Check | None:
        """The check of ``cluster``; None if a message came while it waited for a slot."""
        now = trio.current_time()
        if cluster.spec.connection == "InCluster":
            outcome = await self._context.in_cluster.check(self._context.options.reuse_window)
            return Check(outcome, now, None, heard=self._secret_news)
        ref = cluster.secret_ref
        assert ref is not None  # parse_cluster guarantees it for Kubeconfig
        read = self._reusable_read(cluster, now)
        if read is None:
            read = await self._read_kubeconfig(cluster, now)
        version, parsed = read.version, read.connection
        if read.outcome is not None:
            return Check(read.outcome, now, version, parsed, heard=read.news)
        assert parsed is not None
        kind = schedule.check_class(self._unanswered, self._answered)
        since = self._check.at if self._check is not None else -math.inf
        # When it fell due: the slots go to the checks that fell due first (a first check, or
        # one a changed Secret asks for early, is due as it asks).
        due = self._missed_due if self._missed_due is not None else self._next_check
        limiter = self._context.probe_limiter
        with trio.CancelScope() as waiting:
            self._slot_wait = waiting
            try:
                await limiter.acquire(kind, since, due if math.isfinite(due) else math.inf)
            finally:
                self._slot_wait = None
        if waiting.cancelled_caught:
            return None
        self._missed_due = None
        began = trio.current_time()
        try:
            found = await self._context.check(
                parsed,
                timeout=self._context.options.probe_timeout,
                egress=self._context.options.probe_egress,
            )
        finally:
            limiter.release()
        return Check(found, trio.current_time(), version, parsed, began, heard=read.news)

    def _reusable_read(self, cluster: api.Cluster, now: float) -> _Read | None:
        """The kubeconfig last read, while the Secret watch says the Secret is that version.

        A steady check then costs the hub nothing: the watch (metadata only) already tells
        when the Secret changes. A read is still renewed every 10-20 minutes (``SECRET_REREAD``),
        since the watch cannot tell when the manager may no longer read the Secret.

        A read younger than the reuse window serves while the watch does not know the Secret
        (it has not listed yet): after a restart, a Cluster checked at once for a place missed
        is not read twice. Once the watch has told of a change (a new version, or the Secret
        deleted, which leaves the watch not knowing it either), nothing read before serves.
        """
        read = self._read
        ref = cluster.secret_ref
        if read is None or ref is None or now - read.at >= read.keep:
            return None
        if read.news != self._secret_news:
            return None
        watched = self._context.secret_versions.get((cluster.metadata.namespace, ref.name))
        if watched is None:
            return read if now - read.at < self._context.options.reuse_window else None
        if read.version != _version_of(cluster, watched):
            return None
        return read

    async def _read_kubeconfig(self, cluster: api.Cluster, now: float) -> _Read:
        """Read the Secret and parse its kubeconfig; kept for reuse unless it was unreadable."""
        ref = cluster.secret_ref
        assert ref is not None
        namespace = cluster.metadata.namespace
        version = self._secret_version()
        news = self._secret_news
        last, self._read = self._read, None
        try:
            secret = await self._context.secret_reads.get(namespace, ref.name)
        except errors.NotFound:
            missing = SecretRead(ref.name, ref.key, namespace, found=False)
            return _Read(version, now, None, self._outcome(cluster, missing), news=news)
        except errors.Forbidden:
            refused = SecretRead(ref.name, ref.key, namespace, readable=False)
            return _Read(version, now, None, self._outcome(cluster, refused), news=news)
        # The version read, not the one the watch last saw: the watch may not have listed yet.
        context = cluster.kubeconfig_context
        read_version = resource_version(secret)
        version = _version_of(cluster, read_version)
        text = secret_data(secret, ref.key)
        parsed: Connection | Refusal | None = None
        if (
            read_version is not None
            and last is not None
            and last.connection is not None
            and last.version == version
        ):
            # Read again for its own sake (may the manager still read it?): the same version
            # holds the same kubeconfig, and the same Connection tells the registry that
            # nothing changed. Parsing it anew cost a YAML parse a Cluster every 10-20 minutes.
            parsed = last.connection
        elif text is not None:
            # Whoever may write the Secret chooses what this costs: read off the event loop
            # (kokumi/actors/parsing.py), so that one Cluster's Secret never stalls every other
            # actor, within the reader's own budget.
            parsed = await off_loop(functools.partial(parse, text, context=context))
        read = SecretRead(ref.name, ref.key, namespace, keys=secret_keys(secret), kubeconfig=parsed)
        outcome = self._outcome(cluster, read)
        connection = parsed if isinstance(parsed, Connection) else None
        self._read = _Read(version, now, connection, outcome, news=news)
        return self._read

    def _outcome(self, cluster: api.Cluster, read: SecretRead) -> Outcome | None:
        """What the Secret read makes of the Cluster; ``None``: its connection is to be checked."""
        return cluster_outcome(
            cluster,
            read,
            username=self._context.username,
            own_namespace=self._context.options.namespace,
        )

    # --- the server registry --------------------------------------------------------------------

    async def _register(self, cluster: api.Cluster, check: Check) -> bool:
        """Want the server while selected and the kubeconfig is usable; else let go.

        "Usable" means a valid connection: an unreachable cluster keeps its registration (an
        outage should not hand its server to someone else), a broken kubeconfig does not, nor
        one whose server the egress policy refuses (Argo CD's pods would connect there with
        the Cluster's credential; the registry judges literal addresses itself too).
        Whether the registry is settled for this Cluster (a release it has not done yet is not).
        """
        connection = check.connection
        usable = (
            connection is not None
            and cluster.spec.connection == "Kubeconfig"
            and not is_argocd_own(connection.server)
            and check.outcome.reason != Reason.EGRESS_DENIED
        )
        if self._superseded:
            return True
        if claim_stands(check.outcome):
            return True
        if self._selected and usable and connection is not None:
            self._may_hold = True
            if connection is self._claimed and self._registration == self._claim_answer:
                # The same connection claimed, and the registry has said nothing new since
                # its answer: it has the claim. Any change of the table reaches this actor
                # as a new registration, and the next check claims again.
                return True
            # The answer comes to self.registration, as every word of the registry does.
            await self._context.registry.want(self.ref, self.uid, connection)
            self._claimed, self._claim_answer = connection, self._registration
            return True
        return await self._release()

    async def _release(self) -> bool:
        """Let go of any claim; whether the API server has it (no Secret names us any more)."""
        self._claimed = self._claim_answer = None
        if self._superseded:
            return True
        if self._may_hold:
            done = await self._context.registry.release(self.ref, self.uid)
            if not done:
                # A Secret still names this Cluster: keep saying so, so the finalizer stays.
                self._registration = Registration(holding=True)
                return False
            self._may_hold = False
        self._registration = NOT_REGISTERED
        return True

    async def _ensure_finalizer(self, cluster: api.Cluster) -> None:
        """A holder carries a finalizer: its Secret goes even if it is deleted while we are down.

        It goes only once the Cluster wants no server and its release is done. A Cluster in a
        server's line (behind a foreign Secret, say) keeps one it has: the registry may hand
        it the server at any moment, and a finalizer dropped on the view of a moment ago would
        reach the API server after the Secret that names the Cluster again. Once released, the
        Cluster is in no line, so no Secret can come for it until this actor wants again.
        """
        has = api.FINALIZER in cluster.metadata.finalizers
        if self._registration.holding and not has:
            await self._set_finalizers(cluster, (*cluster.metadata.finalizers, api.FINALIZER))
        elif not self._registration.holding and not self._may_hold and has:
            await self._drop_finalizer(cluster)

    async def _drop_finalizer(self, cluster: api.Cluster | api.Invalid) -> None:
        if api.FINALIZER in cluster.metadata.finalizers:
            rest = tuple(f for f in cluster.metadata.finalizers if f != api.FINALIZER)
            await self._set_finalizers(cluster, rest)

    async def _set_finalizers(
        self, cluster: api.Cluster | api.Invalid, finalizers: tuple[str, ...]
    ) -> None:
        """Set the finalizers of the version we know; on a 409, once more from a fresh read.

        The resourceVersion makes the patch safe against a concurrent edit of the list. A
        conflict is not retried at once with the same stale version (that is a request loop until
        the watch catches up): the object is read again, and a second conflict waits its backoff.
        """
        meta = cluster.metadata
        for attempt in range(2):
            patch = {
                "metadata": {
                    "finalizers": list(finalizers),
                    "resourceVersion": meta.resource_version,
                }
            }
            try:
                updated = await self._writer.patch_merge(
                    api.CLUSTERS, meta.name, patch, namespace=meta.namespace
                )
            except errors.NotFound:
                return
            except errors.Conflict:
                if attempt:
                    raise
                try:
                    fresh = await self._context.client.get(
                        api.CLUSTERS, meta.name, namespace=meta.namespace
                    )
                except errors.NotFound:
                    return
                fresh_cluster = api.parse_cluster(fresh)
                if fresh_cluster.metadata.uid != self.uid:
                    return  # another Cluster of the same name: not ours to change
                self._cluster = fresh_cluster
                meta = fresh_cluster.metadata
                wanted = api.FINALIZER in finalizers
                if (api.FINALIZER in meta.finalizers) == wanted:
                    return  # already as it should be
                others = tuple(f for f in meta.finalizers if f != api.FINALIZER)
                finalizers = (*others, api.FINALIZER) if wanted else others
                continue
            self._cluster = api.parse_cluster(updated)
            return

    # --- status ---------------------------------------------------------------------------------

    def _status(self, outcome: Outcome, registration: Registration | None) -> api.ClusterStatus:
        """What the status should say; the registry's conflict, if any, outranks a good check."""
        said = registration if registration is not None else NOT_REGISTERED
        return cluster_status(
            self._cluster,
            outcome,
            conflict=said.conflict,
            conflict_reason=said.reason,
            now=api.now_rfc3339(),
            written=self._written,
        )

    async def _write(self, new: api.ClusterStatus, meta: api.Meta) -> None:
        """Write only what differs from what the object already says, or what we last wrote."""
        observed = observed_cluster_status(self._cluster)
        written = await write_status(
            self._writer, api.CLUSTERS, meta, new, unchanged=(observed, self._written)
        )
        if not written:
            return
        self._written = new
        self._context.metrics.status_writes += 1
        ready = ready_event(observed, new)
        if ready is not None:
            await self._context.events.record(
                api.CLUSTERS,
                meta,
                reason=ready.reason,
                message=ready.message,
                warning=ready.status != "True",
                client=self._writer,
            )
