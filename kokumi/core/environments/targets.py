"""Where an Environment deploys: one target per selected Cluster.

A Serving deploys to a Cluster only when the Cluster is Ready. Two Ready Clusters of one Environment
that connect to the same server would make Argo CD apply the same manifests twice to one cluster, so
only the first by name deploys. Deciding by name, never by the order the Clusters were listed in,
keeps the choice stable across restarts and relists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal, TypeAlias

import attrs

from kokumi.core import api
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, normalise_server
from kokumi.core.text import one_line

__all__ = [
    "CLUSTER_CONFLICT",
    "NOT_CHECKED_MESSAGE",
    "ClusterNotReady",
    "Deploy",
    "SelectedCluster",
    "Target",
    "TargetTaken",
    "deploy_server",
    "selected_cluster",
    "target",
    "targets",
]

CLUSTER_CONFLICT = Reason.CLUSTER_CONFLICT
"""The Ready reason of a Cluster that cannot register its server; it must not deploy either."""

NOT_CHECKED_MESSAGE = (
    "no check has reported on it yet, which Kokumi does within a minute of a new Cluster: "
    "if it stays so, check that the Kokumi manager runs"
)
"""The message of a Cluster without a Ready condition (reason NotChecked): why, and what to do."""

ConnectionKind: TypeAlias = Literal["Kubeconfig", "InCluster"]


@attrs.frozen
class SelectedCluster:
    """What an Environment needs to know of a Cluster it selects, from the Cluster's status."""

    name: str
    connection: ConnectionKind
    ready: bool
    reason: str
    server: str | None = None
    message: str = ""


def selected_cluster(cluster: api.Cluster) -> SelectedCluster:
    """What an Environment reads of a Cluster: its Ready condition and server, as last reported.

    One reading for the manager and for ``kokumi cluster describe``, so that both say the same.
    """
    ready = cluster.ready
    return SelectedCluster(
        name=cluster.metadata.name,
        connection=cluster.spec.connection,
        ready=ready is not None and ready.status == "True",
        reason=ready.reason if ready is not None else Reason.NOT_CHECKED,
        server=cluster.status.server,
        message=ready.message if ready is not None else NOT_CHECKED_MESSAGE,
    )


@attrs.frozen
class Deploy:
    """The Serving deploys to this Cluster's server."""

    reason: ClassVar[Literal[Reason.DEPLOY]] = Reason.DEPLOY
    cluster: str
    server: str
    message: str


@attrs.frozen
class ClusterNotReady:
    """The Serving holds this target until the Cluster is Ready."""

    reason: ClassVar[Literal[Reason.CLUSTER_NOT_READY]] = Reason.CLUSTER_NOT_READY
    cluster: str
    message: str


@attrs.frozen
class TargetTaken:
    """The Serving holds this target: ``winner`` deploys to the same server for this Environment."""

    reason: ClassVar[Literal[Reason.CLUSTER_CONFLICT]] = Reason.CLUSTER_CONFLICT
    cluster: str
    server: str
    winner: str
    message: str


Target: TypeAlias = Deploy | ClusterNotReady | TargetTaken


def _server(cluster: SelectedCluster) -> str | None:
    """The server Argo CD deploys to; every InCluster Cluster is Argo CD's own cluster."""
    if cluster.connection == "InCluster":
        return IN_CLUSTER_SERVER
    if cluster.server:
        return normalise_server(cluster.server) or None
    return None


def _not_ready(cluster: SelectedCluster) -> str:
    reason = one_line(cluster.reason) or "Unknown"
    detail = one_line(cluster.message)
    text = f"Cluster {cluster.name} is not ready ({reason})"
    return f"{text}: {detail}" if detail else text


def deploy_server(cluster: SelectedCluster) -> str | None:
    """The server ``cluster`` deploys to unless another selected Cluster takes it; else None.

    None for a Cluster that is held whatever the others are: not Ready, in conflict, or Ready
    without a server yet.
    """
    if not cluster.ready or cluster.reason == CLUSTER_CONFLICT:
        return None
    return _server(cluster)


def target(cluster: SelectedCluster, taken_by: str | None = None) -> Target:
    """The target of one Cluster; ``taken_by`` names the Cluster that deploys to its server
    for this Environment when it is not this one (see :func:`targets`)."""
    server = _server(cluster)
    if not cluster.ready or cluster.reason == CLUSTER_CONFLICT:
        return ClusterNotReady(cluster.name, _not_ready(cluster))
    if server is None:
        message = f"Cluster {cluster.name} is Ready but reports no server yet"
        return ClusterNotReady(cluster.name, message)
    if taken_by is None:
        return Deploy(cluster.name, server, f"deploys to {server}")
    message = (
        f"Cluster {cluster.name} connects to server {server} as Cluster {taken_by} does, "
        f"which deploys there for this Environment; only the first by name deploys"
    )
    return TargetTaken(cluster.name, server, taken_by, message)


def targets(clusters: Sequence[SelectedCluster]) -> tuple[Target, ...]:
    """One target per Cluster, in the order given.

    A Cluster that reports ClusterConflict is held even if something calls it Ready: it is not
    registered with Argo CD, so a deployment there would fail or, worse, reach the registration of
    another Cluster. A Ready Kubeconfig Cluster without a server yet is held for the same reason.
    """
    first: dict[str, tuple[str, int]] = {}
    servers = [deploy_server(cluster) for cluster in clusters]
    for index, (cluster, server) in enumerate(zip(clusters, servers, strict=True)):
        if server is None:
            continue
        key = (cluster.name, index)
        if server not in first or key < first[server]:
            first[server] = key
    return tuple(
        target(
            cluster,
            None if server is None or first[server] == (cluster.name, index) else first[server][0],
        )
        for index, (cluster, server) in enumerate(zip(clusters, servers, strict=True))
    )
