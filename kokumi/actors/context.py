"""What every actor of one manager shares: the hub client, options, limits and counters."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from kokumi.actors.checks import CountingLimiter, InClusterCheck, Probe
from kokumi.actors.metrics import Metrics
from kokumi.actors.writes import EventRecorder
from kokumi.core.cluster import schedule
from kokumi.kube.client import Client
from kokumi.runtime.options import Options
from kokumi.runtime.probe import checks

if TYPE_CHECKING:
    from kokumi.core.kubeconfig.connection import Connection
    from kokumi.core.registry.ownership import ClusterRef
    from kokumi.core.registry.registration import Registration

__all__ = ["Context", "RegistryHandle"]


class RegistryHandle(Protocol):
    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None: ...
    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None: ...
    async def want(self, cluster: ClusterRef, uid: str, connection: Connection) -> None: ...
    async def release(self, cluster: ClusterRef, uid: str) -> bool: ...


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
    # reads its Secret at once, and the hub must not get thousands of GETs together. 32 at a
    # time was measured too: the hub of the 10,000 benchmark served 83 GETs a second either way.
    secret_reads: trio.CapacityLimiter = attrs.field(
        factory=lambda: trio.CapacityLimiter(schedule.CHECK_SLOTS)
    )
    #: The client of a Cluster's writes (status, finalizer, Events); with shards or a leader
    #: Lease, fenced by the Lease that lets this replica serve it. None: ``client``.
    writers: Callable[[ClusterRef], Client] | None = None

    def writer(self, cluster: ClusterRef) -> Client:
        return self.client if self.writers is None else self.writers(cluster)
