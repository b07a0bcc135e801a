"""What every actor of one manager shares: the hub client, options, limits and counters."""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Protocol

import attrs
import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kokumi.core import api, schedule
from kokumi.core.availability import Change, Fleet, FleetSnapshot
from kokumi.core.egress import EgressPolicy
from kokumi.core.reasons import Reason
from kokumi.core.status import Outcome, unstructured
from kokumi.kube import errors
from kokumi.kube.client import EVENTS, Client
from kokumi.kube.objects import Resource, name_of, namespace_of
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.runtime.options import Options
from kokumi.runtime.probe import checks

if TYPE_CHECKING:
    from kokumi.core.kubeconfig import Connection
    from kokumi.core.ownership import ClusterRef
    from kokumi.core.registration import Registration

__all__ = ["Context", "EventRecorder", "InClusterCheck", "Metrics", "write_status"]

log = logging.getLogger(__name__)
#: Ready changes of Clusters, one line each, with the Cluster and reason as ``extra`` fields.
clusters_log = logging.getLogger("kokumi.clusters")


@attrs.define
class Metrics:
    """Everything the manager counts, in one place: plain counters and its Prometheus registry.

    Tests and benchmarks read the plain counters; ``registry`` holds the Prometheus collectors
    (never the process-wide default registry, so two managers in one process never mix), and
    ``/metrics`` serves :meth:`exposition`, the same figures taken at one moment so that a worker
    thread can render them. The manager decides nothing on any of it. The hooks are small and
    observe from outside the actors: the kube Client's request path and watches (:meth:`request`,
    :meth:`watch_restarted`), the check limiter, and the Cluster watch (:meth:`clusters_seen`).
    """

    status_writes: int = 0
    environment_status_writes: int = 0
    checks: int = 0
    in_cluster_checks: int = 0
    registry_writes: int = 0
    concurrent_checks: int = 0
    max_concurrent_checks: int = 0
    registry: CollectorRegistry = attrs.field(factory=CollectorRegistry, eq=False, repr=False)
    fleet: Fleet = attrs.field(factory=lambda: Fleet(api.FINALIZER), eq=False, repr=False)
    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False, repr=False)
    cluster_checks: dict[tuple[str, str], int] = attrs.field(factory=dict, eq=False, repr=False)
    """Checks per Cluster (namespace, name), for as long as the Cluster watch sees it."""
    running_checks: dict[str, int] = attrs.field(
        factory=lambda: {"answering": 0, "silent": 0}, eq=False, repr=False
    )
    """Checks holding a slot now, by class (the limiter keeps it)."""
    check_due: dict[tuple[str, str], float] = attrs.field(factory=dict, eq=False, repr=False)
    """When each Cluster's next check falls due (Trio's clock), while none runs or waits."""
    due_clock: Callable[[], float] | None = attrs.field(default=None, eq=False, repr=False)
    """The clock of ``check_due``: Trio's, set by the first Cluster that plans a check."""
    check_interval: float = schedule.CHECK_INTERVAL
    check_results: Counter = attrs.field(init=False, eq=False, repr=False)
    check_seconds: Histogram = attrs.field(init=False, eq=False, repr=False)
    check_wait_seconds: Histogram = attrs.field(init=False, eq=False, repr=False)
    checks_waiting: Gauge = attrs.field(init=False, eq=False, repr=False)
    watch_restarts: Counter = attrs.field(init=False, eq=False, repr=False)
    api_requests: Counter = attrs.field(init=False, eq=False, repr=False)
    leader: Gauge = attrs.field(init=False, eq=False, repr=False)
    _collectors: tuple[Collector, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        r = self.registry
        self.check_results = Counter(
            "kokumi_checks",
            "Checks of Clusters, by the Ready reason they found",
            ["result"],
            registry=r,
        )
        self.check_seconds = Histogram(
            "kokumi_check_duration_seconds",
            "How long one check of a cluster took, once it had its turn under the limiter",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0),
            registry=r,
        )
        self.check_wait_seconds = Histogram(
            "kokumi_check_wait_seconds",
            "How long a check waited for its turn under the limiter: past the check interval,"
            " Clusters are checked less often than the interval says",
            buckets=(0.1, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
            registry=r,
        )
        self.checks_waiting = Gauge(
            "kokumi_checks_waiting",
            "Checks waiting for one of the check slots, by class: answering Clusters go first,"
            " silent ones (their last checks got no answer) take the slots the answering leave",
            ["class"],
            registry=r,
        )
        for kind in ("answering", "silent"):
            self.checks_waiting.labels(kind)
        self.watch_restarts = Counter(
            "kokumi_watch_restarts",
            "Watches started again: reason gone is a 410 (history compacted, a relist follows),"
            " error a failed request or stream",
            ["resource", "reason"],
            registry=r,
        )
        self.api_requests = Counter(
            "kokumi_api_requests",
            "Requests to the hub's API server, by verb (HTTP method, WATCH for watches) and"
            " status code (error: no answer)",
            ["verb", "code"],
            registry=r,
        )
        self.leader = Gauge(
            "kokumi_leader",
            "1 while this manager leads (holds the Lease, or runs without election), else 0",
            registry=r,
        )
        self._collectors = (
            self.check_results,
            self.check_seconds,
            self.check_wait_seconds,
            self.checks_waiting,
            self.watch_restarts,
            self.api_requests,
            self.leader,
        )
        r.register(_FleetCollector(self.figures))

    def figures(self) -> _Figures:
        """The fleet and the plain counters now, immutable: about 5 ms at 10,000 Clusters."""
        return _Figures(
            self.fleet.snapshot(),
            self.clock(),
            self.status_writes,
            self.registry_writes,
            self.checks,
            dict(self.running_checks),
            self.due_spread(),
        )

    def due_spread(self) -> tuple[tuple[str, int], ...]:
        """Clusters by when their next check falls due: per tenth of the coming interval, plus
        ``overdue`` (due, not begun) and ``later`` (past the interval).

        Flat tenths are checks spread over the minute; a tenth far above the others is a burst.
        About 1 ms at 10,000 Clusters. Empty off the event loop, where Trio's clock is unknown.
        """
        clock = self.due_clock
        if clock is None:
            return ()
        try:
            now = clock()
        except RuntimeError:
            return ()
        interval = self.check_interval
        tenth = interval / 10
        counts = [0] * 12  # overdue, ten tenths, later
        for due in self.check_due.values():
            ahead = due - now
            if ahead < 0:
                counts[0] += 1
            elif ahead >= interval:
                counts[11] += 1
            else:
                counts[1 + min(9, int(ahead / tenth))] += 1
        labels = [
            "overdue",
            *(f"{i * tenth:g}-{(i + 1) * tenth:g}s" for i in range(10)),
            "later",
        ]
        return tuple(zip(labels, counts, strict=True))

    def check_planned(self, cluster: ClusterRef, due: float | None) -> None:
        """The Cluster's next check falls due at ``due`` (``None``: one runs or waits now)."""
        key = (cluster.namespace, cluster.name)
        if due is None or due == math.inf:
            self.check_due.pop(key, None)
        else:
            self.check_due[key] = due

    def exposition(self) -> CollectorRegistry:
        """Everything ``registry`` serves, with the fleet's figures taken now, on the event loop.

        Rendering the answer to a scrape takes 300 to 600 ms at 10,000 Clusters (three series per
        Cluster); done on the loop, it was the longest step of the steady state. What is returned
        shares nothing mutable with the actors (the Prometheus metrics lock their own values), so
        :mod:`kokumi.runtime.health` renders it in a worker thread while the loop turns.
        """
        snapshot = CollectorRegistry(auto_describe=False)
        for collector in self._collectors:
            snapshot.register(collector)
        figures = self.figures()
        snapshot.register(_FleetCollector(lambda: figures))
        return snapshot

    # --- hooks ------------------------------------------------------------------------------

    def request(self, verb: str, code: str) -> None:
        """The kube Client answered one request (each retry counts)."""
        self.api_requests.labels(verb, code).inc()

    def watch_restarted(self, resource: str, reason: str) -> None:
        self.watch_restarts.labels(resource, reason).inc()

    def check_finished(self, cluster: ClusterRef, result: str) -> None:
        self.check_results.labels(result).inc()
        key = (cluster.namespace, cluster.name)
        self.cluster_checks[key] = self.cluster_checks.get(key, 0) + 1

    def checks_of(self, cluster: ClusterRef) -> int:
        """How many checks ``cluster`` has had since this manager began watching it."""
        return self.cluster_checks.get((cluster.namespace, cluster.name), 0)

    def clusters_seen(self, event: WatchEvent | Resync) -> None:
        """The dispatcher's Cluster watch brought ``event``: follow Ready, log each change once."""
        now = self.clock()
        if isinstance(event, Resync):
            changes = self.fleet.resync(event.objects, now)
            for key in set(self.cluster_checks) - set(self.fleet.clusters):
                del self.cluster_checks[key]
            for key in set(self.check_due) - set(self.fleet.clusters):
                del self.check_due[key]
        elif event.type == "DELETED":
            self.fleet.delete(event.object)
            key = (namespace_of(event.object), name_of(event.object))
            self.cluster_checks.pop(key, None)
            self.check_due.pop(key, None)
            changes = []
        else:
            changes = self.fleet.update(event.object, now)
        for change in changes:
            _log_change(change)


@attrs.frozen
class _Figures:
    """:meth:`Metrics.figures`: what :class:`_FleetCollector` reports, as it was at ``now``."""

    fleet: FleetSnapshot
    now: float
    status_writes: int
    registry_writes: int
    checks: int
    running: dict[str, int]
    due: tuple[tuple[str, int], ...]


class _FleetCollector(Collector):
    """Per-Cluster and per-reason figures, computed when ``/metrics`` is read."""

    def __init__(self, figures: Callable[[], _Figures]) -> None:
        self._figures = figures

    def collect(self) -> Iterable[Metric]:
        m = self._figures()
        fleet = m.fleet.fleet()
        now = m.now
        by_reason = GaugeMetricFamily(
            "kokumi_clusters", "Clusters by the reason of their Ready condition", labels=["reason"]
        )
        for reason, count in sorted(fleet.by_reason().items()):
            by_reason.add_metric([reason], count)
        yield by_reason
        yield GaugeMetricFamily(
            "kokumi_registrations_held",
            "Clusters that hold their server's Argo CD registration",
            value=fleet.registrations(),
        )
        yield GaugeMetricFamily(
            "kokumi_registration_conflicts",
            "Clusters whose Ready reason is ClusterConflict",
            value=fleet.by_reason().get(Reason.CLUSTER_CONFLICT, 0),
        )
        availability = GaugeMetricFamily(
            "kokumi_cluster_availability_ratio",
            "Share of the last hour (as watched by this manager) with Ready True",
            labels=["namespace", "name"],
        )
        flips = GaugeMetricFamily(
            "kokumi_cluster_ready_flips_last_hour",
            "Changes of Ready within the last hour (flaps)",
            labels=["namespace", "name"],
        )
        flips_total = CounterMetricFamily(
            "kokumi_cluster_ready_flips",
            "Changes of Ready since this manager began watching the Cluster",
            labels=["namespace", "name"],
        )
        for (namespace, name), state in sorted(fleet.clusters.items()):
            ratio = state.history.ratio(now)
            if ratio is None:
                continue
            availability.add_metric([namespace, name], ratio)
            flips.add_metric([namespace, name], state.history.flips(now))
            flips_total.add_metric([namespace, name], state.flips_total)
        yield availability
        yield flips
        yield flips_total
        for name, help_text, value in (
            ("kokumi_status_writes", "Status writes of Clusters", m.status_writes),
            ("kokumi_registry_writes", "Writes of Argo CD cluster Secrets", m.registry_writes),
            ("kokumi_checks_started", "Checks that got their turn under the limiter", m.checks),
        ):
            yield CounterMetricFamily(name, help_text, value=value)
        running = GaugeMetricFamily(
            "kokumi_checks_running",
            "Checks holding one of the check slots now, by class (answering, silent)",
            labels=["class"],
        )
        for kind, count in sorted(m.running.items()):
            running.add_metric([kind], count)
        yield running
        if m.due:
            due = GaugeMetricFamily(
                "kokumi_checks_due",
                "Clusters by when their next check falls due: per tenth of the coming check"
                " interval (flat is spread over the minute), overdue (due, not begun) or later",
                labels=["within"],
            )
            for within, count in m.due:
                due.add_metric([within], count)
            yield due


def _log_change(change: Change) -> None:
    status, reason, message = change.after
    extra = {"cluster_namespace": change.namespace, "cluster_name": change.name, "reason": reason}
    where = f"{change.namespace}/{change.name}"
    if status == "True":
        clusters_log.info("Cluster %s is Ready", where, extra=extra)
    else:
        clusters_log.warning(
            "Cluster %s is not Ready (%s): %s", where, reason, message, extra=extra
        )


class RegistryHandle(Protocol):
    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None: ...
    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None: ...
    async def want(self, cluster: ClusterRef, uid: str, connection: Connection) -> None: ...
    async def release(self, cluster: ClusterRef, uid: str) -> bool: ...


class Probe(Protocol):
    """One check of one connection: :func:`kokumi.runtime.probe.checks.check`, or a stand-in in
    a model test."""

    async def __call__(
        self,
        connection: Connection,
        *,
        timeout: float,  # noqa: ASYNC109
        egress: EgressPolicy | None = None,
    ) -> Outcome: ...


class CountingLimiter:
    """The shared limit of eight checks at a time, in two classes, counting how close it came.

    Answering Clusters go first and silent ones (:mod:`kokumi.core.schedule`: their last checks
    got no answer) take the capacity the answering ones leave: when a slot frees, the first
    answering check that waits gets it, else the silent one checked longest ago; silent checks
    never hold the last free slot. Answering checks are served first come, first served; silent
    ones by the time of their last check, so that each silent Cluster gets its turn even when
    many of them ask at the same moment. Before the two classes, spokes that
    never answered held the slots 10 s each and every Cluster queued behind them (with half of 400
    spokes hanging, every Cluster was checked every 4 minutes).

    Each Cluster's status still says what its last check found; the limiter is where lateness
    shows, so it says so once when an answering check has waited longer than ``late_after`` (the
    check interval), and once when they keep up again. That happens when the manager is short of
    CPU for its fleet, or when slow spokes (answering within the 10 s) fill the slots; how long
    checks hold their slot tells the two apart, so the warning names the right remedy. Silent
    checks waiting minutes are the design, not lateness: ``kokumi_checks_waiting{class="silent"}``
    shows them.
    """

    def __init__(self, total: int, metrics: Metrics, late_after: float = math.inf) -> None:
        self._total = total
        self._silent_max = schedule.silent_slots(total)
        self._metrics = metrics
        self._running = {ANSWERING: 0, SILENT: 0}
        self._answering: collections.deque[_Ticket] = collections.deque()
        self._silent: list[tuple[float, int, _Ticket]] = []  # a heap: last checked, then asked
        self._asked = itertools.count()
        self._waiting = {ANSWERING: 0, SILENT: 0}
        self._started: dict[trio.lowlevel.Task, tuple[float, str]] = {}
        self._late_after = late_after
        self._behind = False
        self._held = 0.0  # seconds a check holds its slot, a moving average

    @property
    def total(self) -> int:
        return self._total

    def running(self, kind: str) -> int:
        """Checks of ``kind`` (``answering`` or ``silent``) holding a slot now."""
        return self._running[kind]

    def waiting(self, kind: str) -> int:
        """Checks of ``kind`` waiting for a slot now."""
        return self._waiting[kind]

    def slot(self, *, silent: bool, since: float = -math.inf) -> _Slot:
        """``async with limiter.slot(silent=..., since=...)``: hold one slot, in the Cluster's
        class; ``since`` is when its last check was (it orders the silent ones)."""
        return _Slot(self, SILENT if silent else ANSWERING, since)

    async def __aenter__(self) -> None:
        await self.acquire(ANSWERING)

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    async def acquire(self, kind: str, since: float = -math.inf) -> None:
        m = self._metrics
        asked = trio.current_time()
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._may_start(kind) and not self._waiting[kind]:
            self._running[kind] += 1
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            ticket = _Ticket(trio.Event())
            if kind == ANSWERING:
                self._answering.append(ticket)
            else:
                heapq.heappush(self._silent, (since, next(self._asked), ticket))
            self._waiting[kind] += 1
            m.checks_waiting.labels(kind).inc()
            try:
                await ticket.granted.wait()
            except BaseException:
                if ticket.granted.is_set():
                    self._running[kind] -= 1  # granted as it was cancelled: hand it on
                    self._dispatch()
                else:
                    ticket.cancelled = True
                    self._waiting[kind] -= 1
                    m.checks_waiting.labels(kind).dec()
                raise
        waited = trio.current_time() - asked
        m.check_wait_seconds.observe(waited)
        if kind == ANSWERING:
            self._keeping_up(waited)
        m.checks += 1
        m.concurrent_checks += 1
        m.running_checks[kind] = self._running[kind]
        m.max_concurrent_checks = max(m.max_concurrent_checks, m.concurrent_checks)
        self._started[trio.lowlevel.current_task()] = (trio.current_time(), kind)

    def release(self) -> None:
        started = self._started.pop(trio.lowlevel.current_task(), None)
        kind = ANSWERING
        if started is not None:
            began, kind = started
            held = trio.current_time() - began
            self._metrics.check_seconds.observe(held)
            if kind == ANSWERING:
                self._held += (held - self._held) * 0.05
        self._metrics.concurrent_checks -= 1
        self._running[kind] -= 1
        self._metrics.running_checks[kind] = self._running[kind]
        self._dispatch()

    def _may_start(self, kind: str) -> bool:
        if self._running[ANSWERING] + self._running[SILENT] >= self._total:
            return False
        return kind == ANSWERING or self._running[SILENT] < self._silent_max

    def _dispatch(self) -> None:
        """Hand free slots on: to the first answering check that waits, else the first silent."""
        while self._answering and self._may_start(ANSWERING):
            self._grant(ANSWERING, self._answering.popleft())
        while self._silent and self._may_start(SILENT):
            self._grant(SILENT, heapq.heappop(self._silent)[2])

    def _grant(self, kind: str, ticket: _Ticket) -> None:
        if ticket.cancelled:
            return
        self._running[kind] += 1
        self._waiting[kind] -= 1
        self._metrics.checks_waiting.labels(kind).dec()
        ticket.granted.set()

    def _keeping_up(self, waited: float) -> None:
        if not self._behind and waited > self._late_after:
            self._behind = True
            if self._held >= 1.0:
                why = (
                    f"checks hold their slot {self._held:.1f} s on average, as spokes that answer"
                    " slowly or not at all do: fix or remove the Clusters that report Unreachable"
                    " (timed out) and those that answer slowly, or shard the manager"
                )
            else:
                why = (
                    f"checks hold their slot {self._held * 1000:.0f} ms on average, so the"
                    " manager is short of CPU for this many Clusters: give it more CPU, or shard"
                    " it (--shards)"
                )
            log.warning(
                "checks are falling behind: a check waited %.0f s for one of the %d check slots"
                " (%d more waiting), so Clusters are checked less often than every %.0f s; %s",
                waited,
                self._total,
                self._waiting[ANSWERING],
                self._late_after,
                why,
            )
        elif self._behind and waited < self._late_after / 2:
            self._behind = False
            log.info("checks keep up again: the last one waited %.1f s for its slot", waited)


ANSWERING = "answering"
SILENT = "silent"


@attrs.define
class _Ticket:
    granted: trio.Event
    cancelled: bool = False


@attrs.frozen
class _Slot:
    limiter: CountingLimiter
    kind: str
    since: float

    async def __aenter__(self) -> None:
        await self.limiter.acquire(self.kind, self.since)

    async def __aexit__(self, *exc: object) -> None:
        self.limiter.release()


class InClusterCheck:
    """One check of the cluster the manager runs in, shared by every InCluster Cluster.

    Single-flight: while a check runs, other askers wait for its result instead of starting theirs.
    """

    def __init__(
        self,
        client: Client,
        limiter: CountingLimiter,
        options: Options,
        metrics: Metrics,
        check_own: Callable[..., Awaitable[Outcome]] = checks.check_client,
    ):
        self._client = client
        self._check_own = check_own
        self._limiter = limiter
        self._options = options
        self._metrics = metrics
        self._last: tuple[float, Outcome] | None = None
        self._running: trio.Event | None = None

    async def check(self, max_age: float) -> Outcome:
        while True:
            if self._last is not None and trio.current_time() - self._last[0] < max_age:
                return self._last[1]
            if self._running is None:
                break
            await self._running.wait()
            if self._last is not None:
                return self._last[1]
        self._running = done = trio.Event()
        try:
            async with self._limiter:
                self._metrics.in_cluster_checks += 1
                finding = await self._check_own(self._client, timeout=self._options.probe_timeout)
            self._last = (trio.current_time(), finding)
        finally:
            self._running = None
            done.set()
        return finding


_Status = api.ClusterStatus | api.EnvironmentStatus


async def write_status(
    client: Client,
    resource: Resource,
    meta: api.Meta,
    status: _Status,
    *,
    unchanged: Iterable[_Status | None],
) -> bool:
    """Write ``status`` unless it equals one of ``unchanged``; whether it was written.

    ``unchanged`` holds what the object says and what was last written (the watch may not have
    brought our own write back yet): a status equal to either costs no API call. The values are
    compared typed, and turned into the API's JSON only here, once, for the write.
    """
    if any(status == seen for seen in unchanged):
        return False
    body = {"status": unstructured(status)}
    try:
        await client.patch_merge(
            resource, meta.name, body, namespace=meta.namespace, subresource="status"
        )
    except errors.NotFound:
        return False  # deleted meanwhile: nothing to report on
    return True


class EventRecorder:
    """Kubernetes Events on Ready transitions, as ``kubectl describe`` users expect to see them."""

    def __init__(self, client: Client, component: str = "kokumi") -> None:
        self._client = client
        self._component = component

    async def record(
        self,
        resource: Resource,
        meta: api.Meta,
        *,
        reason: str,
        message: str,
        warning: bool,
        client: Client | None = None,
    ) -> None:
        """Record an Event, with ``client`` if given (a Cluster actor's fenced writer)."""
        now = api.now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
            "involvedObject": {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self._component,
        }
        try:
            await (client or self._client).create(EVENTS, event, namespace=meta.namespace)
        except errors.Fenced:
            return  # the Cluster's shard went meanwhile: its new server tells
        except errors.KubeError as exc:
            # An Event is a courtesy; losing one must not stop the status from being right.
            log.info("could not record event for %s/%s: %s", meta.namespace, meta.name, exc)


@attrs.define
class Context:
    client: Client
    options: Options
    registry: RegistryHandle
    in_cluster: InClusterCheck
    probe_limiter: CountingLimiter
    events: EventRecorder
    metrics: Metrics
    secret_versions: MutableMapping[tuple[str, str], str] = attrs.field(factory=dict)
    check: Probe = checks.check
    username: str | None = None  # the manager's own identity on the hub, named in RBAC fixes
    # Reads of kubeconfig Secrets, as many at a time as checks: after a restart every Cluster
    # reads its Secret at once, and the hub must not get thousands of GETs together.
    secret_reads: trio.CapacityLimiter = attrs.field(
        factory=lambda: trio.CapacityLimiter(schedule.CHECK_SLOTS)
    )
    #: The client of a Cluster's writes (status, finalizer, Events); with shards or a leader
    #: Lease, fenced by the Lease that lets this replica serve it. None: ``client``.
    writers: Callable[[ClusterRef], Client] | None = None

    def writer(self, cluster: ClusterRef) -> Client:
        return self.client if self.writers is None else self.writers(cluster)
