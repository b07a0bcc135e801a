"""What every actor of one manager shares: the hub client, options, limits and counters."""

from __future__ import annotations

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

from kokumi.core import api
from kokumi.core.availability import Change, Fleet, FleetSnapshot
from kokumi.core.egress import EgressPolicy
from kokumi.core.reasons import Reason
from kokumi.core.status import unstructured
from kokumi.kube import errors
from kokumi.kube.client import EVENTS, Client
from kokumi.kube.objects import Resource, name_of, namespace_of
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.runtime import probe
from kokumi.runtime.options import Options

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
            "Checks waiting for the limiter of concurrent checks",
            registry=r,
        )
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
            self.concurrent_checks,
        )

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
        elif event.type == "DELETED":
            self.fleet.delete(event.object)
            key = (namespace_of(event.object), name_of(event.object))
            self.cluster_checks.pop(key, None)
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
    concurrent_checks: int


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
        yield GaugeMetricFamily(
            "kokumi_checks_running", "Checks running now", value=m.concurrent_checks
        )


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
    """One check of one connection: :func:`kokumi.runtime.probe.check`, or a stand-in in a model
    test."""

    async def __call__(
        self,
        connection: Connection,
        *,
        timeout: float,  # noqa: ASYNC109
        egress: EgressPolicy | None = None,
    ) -> probe.Finding: ...


class CountingLimiter:
    """The shared limit of eight checks at a time, counting how close it came.

    Its queue is first in, first out, so when spokes that never answer hold the slots (10 s
    each, 48 such checks a minute at most) every Cluster waits behind them and is checked less
    often than once a minute: with half of 400 spokes hanging, every 4 minutes. Each Cluster's
    status still says what its last check found; the limiter is where the lateness shows, so it
    says so once when a check has waited longer than ``late_after`` (the check interval), and
    once when checks keep up again. The same happens with healthy spokes when the manager is
    short of CPU for its fleet (measured at 10,000 Clusters on one core); how long checks hold
    their slot tells the two apart, so the warning names the right remedy.
    """

    def __init__(self, total: int, metrics: Metrics, late_after: float = math.inf) -> None:
        self._limiter = trio.CapacityLimiter(total)
        self._metrics = metrics
        self._started: dict[trio.lowlevel.Task, float] = {}
        self._late_after = late_after
        self._behind = False
        self._held = 0.0  # seconds a check holds its slot, a moving average

    async def __aenter__(self) -> None:
        m = self._metrics
        asked = trio.current_time()
        with m.checks_waiting.track_inprogress():
            await self._limiter.acquire()
        waited = trio.current_time() - asked
        m.check_wait_seconds.observe(waited)
        self._keeping_up(waited)
        m.checks += 1
        m.concurrent_checks += 1
        m.max_concurrent_checks = max(m.max_concurrent_checks, m.concurrent_checks)
        self._started[trio.lowlevel.current_task()] = trio.current_time()

    async def __aexit__(self, *exc: object) -> None:
        started = self._started.pop(trio.lowlevel.current_task(), None)
        if started is not None:
            held = trio.current_time() - started
            self._metrics.check_seconds.observe(held)
            self._held += (held - self._held) * 0.05
        self._metrics.concurrent_checks -= 1
        self._limiter.release()

    def _keeping_up(self, waited: float) -> None:
        if not self._behind and waited > self._late_after:
            self._behind = True
            if self._held >= 1.0:
                why = (
                    f"checks hold their slot {self._held:.1f} s on average, as spokes that answer"
                    " slowly or not at all do: fix or remove the Clusters that report Unreachable"
                    " (timed out), or shard the manager"
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
                int(self._limiter.total_tokens),
                int(self._limiter.statistics().tasks_waiting),
                self._late_after,
                why,
            )
        elif self._behind and waited < self._late_after / 2:
            self._behind = False
            log.info("checks keep up again: the last one waited %.1f s for its slot", waited)


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
        check_own: Callable[..., Awaitable[probe.Finding]] = probe.check_client,
    ):
        self._client = client
        self._check_own = check_own
        self._limiter = limiter
        self._options = options
        self._metrics = metrics
        self._last: tuple[float, probe.Finding] | None = None
        self._running: trio.Event | None = None

    async def check(self, max_age: float) -> probe.Finding:
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
    check: Probe = probe.check
    username: str | None = None  # the manager's own identity on the hub, named in RBAC fixes
    # Reads of kubeconfig Secrets, as many at a time as checks: after a restart every Cluster
    # reads its Secret at once, and the hub must not get thousands of GETs together.
    secret_reads: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(8))
    #: The client of a Cluster's writes (status, finalizer, Events); with shards or a leader
    #: Lease, fenced by the Lease that lets this replica serve it. None: ``client``.
    writers: Callable[[ClusterRef], Client] | None = None

    def writer(self, cluster: ClusterRef) -> Client:
        return self.client if self.writers is None else self.writers(cluster)
