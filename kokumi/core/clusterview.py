"""What a person sees of a Cluster, as ``kokumi cluster describe`` and ``kokumi ui`` show it.

Both front ends read the same objects (Clusters, Environments, Argo CD's cluster Secrets) and must
say the same thing about them: the registration line, the target in each Environment, the list's
columns and the "Checking…" of a Cluster not checked yet are computed here, once, from the
objects as the API server returns them. Pure: the caller reads, this decides what it means.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kokumi.core import api
from kokumi.core.environments import selectors, targets
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef, normalise_server
from kokumi.core.text import one_line
from kokumi.objects import metadata_of

__all__ = [
    "CHECKING",
    "EnvironmentView",
    "Row",
    "age",
    "environment_targets",
    "environment_view",
    "label_text",
    "ready_condition",
    "registration",
    "row",
]

CHECKING: Final = "Checking…"
"""The reason shown before the manager's first check: not Unknown, which says nothing."""


def ready_condition(cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (cluster.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return {}


def label_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def age(timestamp: str | None, now: datetime.datetime) -> str:
    """How old, as kubectl's AGE column says it: 42s, 5m, 3h, 12d."""
    if not timestamp:
        return "-"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@attrs.frozen
class Row:
    """One Cluster as the list shows it; never a credential (a Cluster holds none)."""

    name: str
    namespace: str
    connection: str
    server: str
    version: str
    ready: str  # True, False, or Unknown before the first check
    reason: str  # the Ready condition's reason, or CHECKING
    message: str
    labels: tuple[tuple[str, str], ...]
    age: str
    description: str


def row(cluster: Mapping[str, Any], now: datetime.datetime) -> Row:
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    ready = ready_condition(cluster)
    checked = bool(ready.get("reason"))
    return Row(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        connection=str(spec.get("connection", "")),
        server=str(status.get("server") or "-"),
        version=str(status.get("kubernetesVersion") or "-"),
        ready=str(ready.get("status") or "Unknown"),
        reason=str(ready.get("reason")) if checked else CHECKING,
        message=one_line(str(ready.get("message") or ""))
        if checked
        else "Kokumi has not checked it yet (within a minute while the manager runs)",
        labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
        age=age(meta.get("creationTimestamp"), now),
        description=str(spec.get("description") or ""),
    )


def registration(
    cluster: Mapping[str, Any],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    argocd_namespace: str,
) -> str:
    """One line on the Cluster's Argo CD registration: held here, by whom, or why there is none.

    ``argocd_secrets`` are the cluster Secrets of Argo CD's namespace, None when the user may not
    list them. Names come from :mod:`kokumi.core.registry.argocd`, the module the registry writes
    them with.
    """
    meta = metadata_of(cluster)
    spec = cluster.get("spec") or {}
    if spec.get("connection") == "InCluster":
        return "none needed: Argo CD knows the cluster it runs in (InCluster)"
    server = (cluster.get("status") or {}).get("server")
    if not server:
        return "none: the Cluster reports no server yet, so it cannot be registered"
    server = normalise_server(server)
    name = argocd.secret_name(server)
    if argocd_secrets is None:
        return (
            f"unknown: you may not list Secrets in {argocd_namespace}; Kokumi would register "
            f"{server} in Secret {argocd_namespace}/{name}"
        )
    me = ClusterRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    by_name = {s["metadata"]["name"]: s for s in argocd_secrets}
    ours = by_name.get(name)
    if ours is not None and argocd.is_ours(ours):
        holder = argocd.holder_of(ours)
        if holder == me:
            shown = argocd.cluster_name(me, server)
            return (
                f"Secret {argocd_namespace}/{name} registers this Cluster with Argo CD as {shown}"
            )
        if holder is not None:
            return (
                f"Cluster {holder.namespace}/{holder.name} holds server {server} (Secret "
                f"{argocd_namespace}/{name}); this Cluster waits and takes over once it lets go"
            )
    foreign = sorted(
        s["metadata"]["name"]
        for s in argocd_secrets
        if not argocd.is_ours(s)
        and (s["metadata"]["name"] == name or argocd.server_of(s) == server)
    )
    if foreign:
        return (
            f"Argo CD's Secret {argocd_namespace}/{foreign[0]}, which Kokumi did not write, holds "
            f"server {server}: delete it so Kokumi can take the server over"
        )
    return "none: Kokumi registers the Cluster while an Environment selects it and it is Ready"


def environment_targets(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str]]:
    """(Environment, target, message) for each Environment of the namespace that selects it.

    Computed with :mod:`kokumi.core.environments.selectors` and
    :mod:`kokumi.core.environments.targets`, as the manager computes it, from the Clusters' reported
    status.
    """
    name = cluster["metadata"]["name"]
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    rows: list[tuple[str, str, str]] = []
    for obj in sorted(environments, key=lambda e: e["metadata"]["name"]):
        environment = api.parse_environment(obj)
        if isinstance(environment, api.Invalid):
            continue
        selector = selectors.parse(environment.spec.cluster_selector)
        if isinstance(selector, selectors.SelectorError):
            continue
        selected = [c for c in parsed if selector.matches(c.metadata.labels)]
        for target in targets.targets([targets.selected_cluster(c) for c in selected]):
            if target.cluster == name:
                rows.append((environment.metadata.name, target.reason, target.message))
    return rows


@attrs.frozen
class EnvironmentView:
    """An Environment, its selector as kubectl writes one, and the target of each Cluster."""

    name: str
    namespace: str
    selector: str
    description: str
    selected: int
    deploying: int
    targets: tuple[tuple[str, str, str], ...]  # (Cluster, target reason, message)
    problem: str  # why the Environment selects nothing, if it is invalid


def environment_view(
    environment: Mapping[str, Any], clusters: Sequence[Mapping[str, Any]]
) -> EnvironmentView:
    """Computed as the manager computes it, from the Clusters of the namespace as reported."""
    meta = metadata_of(environment)
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace", ""))
    spec = environment.get("spec") or {}
    description = str(spec.get("description") or "")
    parsed_env = api.parse_environment(environment)
    if isinstance(parsed_env, api.Invalid):
        return EnvironmentView(name, namespace, "-", description, 0, 0, (), parsed_env.message)
    selector = selectors.parse(parsed_env.spec.cluster_selector)
    if isinstance(selector, selectors.SelectorError):
        return EnvironmentView(name, namespace, "-", description, 0, 0, (), str(selector))
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    selected = [c for c in parsed if selector.matches(c.metadata.labels)]
    found = targets.targets([targets.selected_cluster(c) for c in selected])
    rows = tuple((t.cluster, str(t.reason), one_line(t.message)) for t in found)
    deploying = sum(1 for t in found if isinstance(t, targets.Deploy))
    return EnvironmentView(
        name, namespace, str(selector) or "(every Cluster)", description, len(rows), deploying,
        rows, "",
    )  # fmt: skip
