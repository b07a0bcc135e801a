"""What the manager counts, and the one line per Ready change of a Cluster.

Apart from the actors that feed it: the counters and the Prometheus registry are read by
``/metrics``, the tests and the benchmarks, and decide nothing, so they need neither the hub
nor the check slots.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.core.cluster.availability import Change, Fleet, FleetSnapshot, registration_state
from kokumi.core.reasons import Reason
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.objects import name_of, namespace_of

if TYPE_CHECKING:
    from kokumi.core.registry.ownership import ClusterRef

__all__ = ["Metrics", "clusters_log"]

_NOT_A_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")

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
        factory=lambda: dict.fromkeys(schedule.CLASSES, 0), eq=False, repr=False
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
    shard_held: Gauge = attrs.field(init=False, eq=False, repr=False)
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
            " then new ones (never answered, first try); silent ones (their last checks got no"
            " answer) take the slots the others leave",
            ["class"],
            registry=r,
        )
        for kind in schedule.CLASSES:
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
        self.shard_held = Gauge(
            "kokumi_shard_held",
            "1 while this replica holds the shard's Lease, else 0: each replica reports every"
            " shard (with --shards N, 0 to N-1; without, the one shard 0, as kokumi_leader)",
            ["shard"],
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
            self.shard_held,
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
        ``overdue`` (due, not begun, and more than a tick of the timers ago: a check due within
        the last tick begins at its end, kokumi.actors.alarms) and ``later`` (past the interval).

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
            if ahead < -schedule.TIMER_GRAIN:
                counts[0] += 1
            elif ahead < 0:
                counts[1] += 1  # due now, in the tick that rings next
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

    def held(self, shards: dict[int, bool]) -> None:
        """Which shards' Leases this replica holds now; ``kokumi_leader`` is 1 if any is held."""
        for shard, holding in shards.items():
            self.shard_held.labels(str(shard)).set(int(holding))
        self.leader.set(int(any(shards.values())))

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
        yield from _per_cluster(fleet)
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


def _per_cluster(fleet: Fleet) -> Iterable[Metric]:
    """One series per Cluster and family, each labelled by the Cluster's namespace and name.

    The values that change (the Ready reason, the registration's state, the version) are labels
    of that one series, as kube-state-metrics' ``kube_pod_container_status_waiting_reason``
    carries only the reason in force: a series per possible reason would be twenty per Cluster,
    200,000 at 10,000 Clusters, nearly all 0. A Cluster that goes takes its series with it.
    """
    ready = GaugeMetricFamily(
        "kokumi_cluster_ready",
        "1 while the Cluster is Ready, else 0; reason is its Ready condition's (one series per"
        " Cluster, from its first check)",
        labels=["namespace", "name", "reason"],
    )
    info = GaugeMetricFamily(
        "kokumi_cluster_info",
        "Always 1: the server and Kubernetes version the Cluster's status reports (empty"
        " until its first check finds them)",
        labels=["namespace", "name", "server", "kubernetes_version"],
    )
    registration = GaugeMetricFamily(
        "kokumi_cluster_registration",
        "Always 1: whether the Cluster holds its server's Argo CD registration (held), waits"
        " for it (waiting: ClusterConflict, RegistrationPending) or has none",
        labels=["namespace", "name", "state"],
    )
    for (namespace, name), state in sorted(fleet.clusters.items()):
        if state.ready is not None:
            status, reason, _ = state.ready
            ready.add_metric([namespace, name, reason], 1.0 if status == "True" else 0.0)
        info.add_metric([namespace, name, state.server, state.version], 1.0)
        held = registration_state(state.holds_registration, state.ready)
        registration.add_metric([namespace, name, held], 1.0)
    yield ready
    yield info
    yield registration
    if fleet.carry:
        yield _carried_labels(fleet)


def _carried_labels(fleet: Fleet) -> Metric:
    """``kokumi_cluster_labels``: the carried labels of each Cluster, as kube-state-metrics'
    ``kube_pod_labels`` carries a pod's, so that a rule joins them to the per-Cluster alerts and
    routes prod apart from the rest (``* on (namespace, name) group_left(label_env)``).

    A key becomes ``label_`` and the key with every character Prometheus refuses as ``_``; two
    keys that come out alike (``a.b`` and ``a_b``) are told apart by ``_conflict1``, ``_2``...
    in the order of the keys, so one fleet always names them alike. Every series has every
    name, empty where its Cluster lacks the label: Prometheus reads an empty label as none.
    """
    keys = sorted({key for state in fleet.clusters.values() for key, _ in state.labels})
    names: dict[str, str] = {}
    taken: dict[str, int] = {}
    for key in keys:
        name = "label_" + _NOT_A_LABEL_CHAR.sub("_", key)
        seen = taken.get(name, 0)
        taken[name] = seen + 1
        names[key] = name if seen == 0 else f"{name}_conflict{seen}"
    family = GaugeMetricFamily(
        "kokumi_cluster_labels",
        "Always 1: the Cluster's labels that --carry-labels names, as label_<key>, for joins",
        labels=["namespace", "name", *(names[k] for k in keys)],
    )
    for (namespace, name), state in sorted(fleet.clusters.items()):
        carried = dict(state.labels)
        family.add_metric([namespace, name, *(carried.get(k, "") for k in keys)], 1.0)
    return family


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
