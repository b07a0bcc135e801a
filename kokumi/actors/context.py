"""What every actor of one manager shares: the hub client, options, limits and counters."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from kokumi import api, probe
from kokumi.actors.secretwatch import SecretScope
from kokumi.egress import EgressPolicy
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff
from kokumi.kube.client import EVENTS, Client, Resource

if TYPE_CHECKING:
    from kokumi.actors.registry import Registration
    from kokumi.kubeconfig import Connection
    from kokumi.ownership import ClusterRef

__all__ = ["Context", "EventRecorder", "InClusterCheck", "Metrics", "Options", "write_status"]

log = logging.getLogger(__name__)


@attrs.frozen
class Options:
    """How the manager behaves; every default is what the spec asks for.

    ``check_jitter``: each check comes up to 6 s (a tenth of the interval) later than the minute,
    at random. The delays add up like a random walk, so Clusters created together (say, by one
    ``kubectl apply``) drift apart within a few minutes and their checks spread over the whole
    minute instead of arriving eight at a time every 60 s; a tenth keeps "about once a minute" true.
    """

    namespace: str = "kokumi"
    argocd_namespace: str = "argocd"
    check_interval: float = 60.0
    check_jitter: float = 6.0
    probe_timeout: float = 10.0
    max_concurrent_checks: int = 8
    reuse_window: float = 30.0
    keep_in_cluster: bool = True
    field_manager: str = "kokumi"
    #: Retries of refused or failed API requests wait from ``retry_initial`` up to
    #: ``retry_max`` seconds, doubling, with jitter; per Cluster and per kind of request.
    retry_initial: float = 1.0
    retry_max: float = 120.0
    # Where Secrets are followed: "namespace" (per namespace holding Kubeconfig Clusters, with a
    # RoleBinding of kokumi-manager-secrets in each) or "cluster" (an explicit, wider opt-in).
    secrets_scope: SecretScope = SecretScope.NAMESPACE
    # Addresses the probe of a Kubeconfig Cluster may connect to (kokumi/egress.py).
    probe_egress: EgressPolicy = attrs.field(factory=EgressPolicy)

    def next_check_delay(self) -> float:
        return self.check_interval + random.uniform(0.0, self.check_jitter)  # noqa: S311

    def backoff(self) -> Backoff:
        return Backoff(self.retry_initial, self.retry_max)


@attrs.define
class Metrics:
    """Counters a test or a benchmark reads; the manager never decides anything on them."""

    status_writes: int = 0
    checks: int = 0
    in_cluster_checks: int = 0
    registry_writes: int = 0
    concurrent_checks: int = 0
    max_concurrent_checks: int = 0


class RegistryHandle(Protocol):
    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None: ...
    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None: ...
    async def want(self, cluster: ClusterRef, uid: str, connection: Connection) -> Registration: ...
    async def release(self, cluster: ClusterRef, uid: str) -> bool: ...


class Probe(Protocol):
    """One check of one connection: :func:`kokumi.probe.check`, or a stand-in in a model test."""

    async def __call__(
        self,
        connection: Connection,
        *,
        timeout: float,  # noqa: ASYNC109
        egress: EgressPolicy | None = None,
    ) -> probe.Finding: ...


class CountingLimiter:
    """The shared limit of eight checks at a time, counting how close it came."""

    def __init__(self, total: int, metrics: Metrics) -> None:
        self._limiter = trio.CapacityLimiter(total)
        self._metrics = metrics

    async def __aenter__(self) -> None:
        await self._limiter.acquire()
        m = self._metrics
        m.checks += 1
        m.concurrent_checks += 1
        m.max_concurrent_checks = max(m.max_concurrent_checks, m.concurrent_checks)

    async def __aexit__(self, *exc: object) -> None:
        self._metrics.concurrent_checks -= 1
        self._limiter.release()


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


async def write_status(
    client: Client,
    resource: Resource,
    meta: api.Meta,
    status: dict[str, Any],
    *,
    unchanged: Iterable[dict[str, Any] | None],
) -> bool:
    """Write ``status`` unless it equals one of ``unchanged``; whether it was written.

    ``unchanged`` holds what the object says and what was last written (the watch may not have
    brought our own write back yet): a status equal to either costs no API call.
    """
    if any(status == seen for seen in unchanged):
        return False
    try:
        await client.patch_merge(
            resource, meta.name, {"status": status}, namespace=meta.namespace, subresource="status"
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
        self, resource: Resource, meta: api.Meta, *, reason: str, message: str, warning: bool
    ) -> None:
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
            await self._client.create(EVENTS, event, namespace=meta.namespace)
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
