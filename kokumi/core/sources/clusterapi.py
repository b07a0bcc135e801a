"""Cluster API's rules: which of its Secrets a ``from: ClusterAPI`` source takes, and its plan.

A ``ClusterSource`` (``from: ClusterAPI``) keeps one Cluster per Cluster API kubeconfig Secret of
its namespace that its selector matches. What it decides is here, as pure functions of what the
actor read (the source, the Secrets' metadata and verdicts, the Cluster API clusters' labels, the
Clusters that exist), so that Hypothesis can hold the rules without a server; the rules every
kind of source shares are :mod:`kokumi.core.sources.plan`'s:

- a Secret is Cluster API's kubeconfig when it is labelled ``cluster.x-k8s.io/cluster-name: X``
  and named ``X-kubeconfig`` (Cluster API's other Secrets of the cluster carry the label too);
- it is imported only while the Cluster API cluster ``X`` exists and is the Secret's controller
  ownerReference, as Cluster API writes it: name and label are what anybody who may create
  Secrets can write (a tenant's ExternalSecret template, a sealed secret), and the credential
  would go to every Environment of the namespace. A Cluster whose Secret stops passing goes, as
  when its Secret stops matching;
- the selector is over the Cluster API cluster's labels, which live on the
  ``clusters.cluster.x-k8s.io`` object, not on the Secret;
- the Cluster is named ``X``, reads the Secret where it is (key ``value``), carries the Cluster
  API cluster's labels with the source's on top;
- while the source cannot tell what matches or what is Cluster API's (the manager may not list
  the Secrets, or may not read Cluster API's clusters), nothing is created or deleted, as through
  an outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from kokumi.core import limits
from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import (
    Candidate,
    Existing,
    OwnerRef,
    Plan,
    mine_of,
    settle,
    waiting_on,
)
from kokumi.core.sources.spec import ClusterSource
from kokumi.core.text import quoted
from kokumi.objects import Resource

__all__ = [
    "CAPI_CLUSTERS",
    "CAPI_CLUSTER_NAME",
    "CAPI_GROUP",
    "CapiView",
    "SecretView",
    "capi_cluster_of",
    "kubeconfig_secrets",
    "owner_problem",
    "plan",
    "view_of",
]

CAPI_GROUP: Final = "cluster.x-k8s.io"
CAPI_CLUSTERS: Final = Resource(CAPI_GROUP, "v1beta1", "clusters", "Cluster")
CAPI_CLUSTER_NAME: Final = "cluster.x-k8s.io/cluster-name"


def capi_cluster_of(name: str, labels: Mapping[str, str]) -> str | None:
    """The Cluster API cluster whose kubeconfig Secret this is, or None for any other Secret."""
    cluster = labels.get(CAPI_CLUSTER_NAME)
    if not cluster or name != f"{cluster}-kubeconfig":
        return None
    return cluster


def kubeconfig_secrets(
    namespace: str, labels: Mapping[tuple[str, str], Mapping[str, str]]
) -> dict[str, str]:
    """The Cluster API kubeconfig Secrets of ``namespace`` among the Secrets whose labels the
    watches keep (``labels``, by namespace and name), each with its Cluster API cluster's name."""
    found: dict[str, str] = {}
    for (ns, name), kept in list(labels.items()):
        if ns != namespace:
            continue
        cluster = capi_cluster_of(name, kept)
        if cluster is not None:
            found[name] = cluster
    return found


@attrs.frozen
class SecretView:
    """One Cluster API kubeconfig Secret as the source sees it: never its data."""

    name: str
    cluster: str  # the Cluster API cluster's name, from its label
    problem: tuple[Reason, str] | None = None  # None: usable
    controller: OwnerRef | None = None  # its controller ownerReference, from its metadata


@attrs.frozen
class CapiView:
    """The Cluster API clusters of the namespace, if the manager may read them.

    ``labels`` has one entry per cluster that exists (``{}`` for one without labels): a Secret is
    imported only for one of them. ``uids`` has their uids where known; a Secret's controller
    must then carry the same, or it points at an earlier cluster of that name.
    """

    readable: bool
    labels: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    uids: Mapping[str, str] = attrs.field(factory=dict)
    #: Clusters whose metadata is over the bounds (:mod:`kokumi.core.limits`), with why: the
    #: manager kept no labels of them, so no selector can be judged on them.
    over: Mapping[str, str] = attrs.field(factory=dict)
    #: False when it is not readable because Cluster API is not installed (no CRD): then the
    #: fix is to install it, not to grant a permission, and the source says so.
    installed: bool = True


def view_of(
    readable: bool, clusters: Iterable[Mapping[str, Any]], *, installed: bool = True
) -> CapiView:
    """The view of a namespace's Cluster API ``clusters`` as the watch keeps them (metadata
    only; one over the bounds a stub, which is listed as existing but has no labels to judge)."""
    clusters = list(clusters)
    return CapiView(
        readable,
        {str(o["metadata"].get("name")): dict(o["metadata"].get("labels") or {}) for o in clusters},
        {str(o["metadata"].get("name")): str(o["metadata"].get("uid") or "") for o in clusters},
        {
            str(o["metadata"].get("name")): why
            for o in clusters
            if (why := limits.over_bounds(o)) is not None
        },
        installed,
    )


def owner_problem(secret: SecretView, capi: CapiView) -> tuple[Reason, str] | None:
    """Why ``secret`` is not Cluster API's own kubeconfig Secret of its cluster, or None if it is.

    Name and label are what anybody who may create Secrets can write; Cluster API also makes the
    cluster the Secret's controller (kind Cluster of ``cluster.x-k8s.io``, the cluster's name and
    uid). Whoever may not create Cluster API clusters cannot make that true for a cluster that is
    not there, and the Secret of one that is holds the name already. ``kokumi cluster import``
    asks the same. Only for a ``capi`` that is readable.
    """
    name = secret.cluster
    if name not in capi.labels:
        return (
            Reason.SECRET_NOT_OWNED,
            f"no Cluster API cluster {name} exists in this namespace: a ClusterSource imports "
            "only the kubeconfig Secret of a Cluster API cluster, which Cluster API makes its "
            f"controller; this one is imported once cluster {name} exists and controls it, "
            "else delete it",
        )
    uid = capi.uids.get(name, "")
    ref = secret.controller
    if ref is None:
        what = "it has no controller ownerReference"
    elif ref.kind != "Cluster" or not ref.api_version.startswith(f"{CAPI_GROUP}/"):
        what = (
            f"its controller is {quoted(ref.kind)} {quoted(ref.name)} of "
            f"{quoted(ref.api_version)}, not Cluster API's cluster {name}"
        )
    elif ref.name != name:
        what = f"its controller is Cluster API's cluster {quoted(ref.name)}, not {name}"
    elif uid and ref.uid != uid:
        what = (
            f"its controller ownerReference names Cluster API's cluster {name} with uid "
            f"{quoted(ref.uid)}, and the cluster {name} here has uid {uid}"
        )
    else:
        return None
    owner = f"apiVersion {CAPI_CLUSTERS.api_version}, kind Cluster, name {name}"
    owner += f", uid {uid}" if uid else ""
    return (
        Reason.SECRET_NOT_OWNED,
        f"{what}: a ClusterSource imports only the kubeconfig Secret Cluster API writes, whose "
        "controller is its cluster, since anybody who may create Secrets can name and label "
        f"one; if this is cluster {name}'s, set that ownerReference ({owner}, controller true), "
        "else delete it",
    )


def plan(
    source: ClusterSource,
    secrets: Iterable[SecretView],
    capi: CapiView,
    existing: Mapping[str, Existing],
    *,
    secrets_listable: bool | None = True,
    not_listable_message: str = "",
) -> Plan:
    """The writes that make the namespace's Clusters what the source says, and its findings.

    ``secrets_listable`` is False when the manager may not list Secrets there (None: not known
    yet); then, and while the manager may not read Cluster API's clusters (which every import
    needs, to tell Cluster API's Secrets from others), the plan writes nothing: a missing
    permission must not delete Clusters.
    """
    mine = mine_of(source, existing)
    kept_all = tuple(sorted(mine))
    waiting = waiting_on(secrets_listable, not_listable_message)
    if waiting is not None:
        return Plan(kept=kept_all, blocked=waiting)
    if not capi.readable:
        over = (
            ""
            if source.selector.selects_everything
            else f", and spec.selector {source.selector} is over their labels"
        )
        return Plan(
            kept=kept_all, blocked=(Reason.CLUSTER_API_NOT_READABLE, _unreadable(capi, over))
        )
    candidates = []
    for secret in secrets:
        too_large = capi.over.get(secret.cluster)
        if too_large is not None:
            # Listed, never made nor re-labelled: a Cluster made before stays as it is (its
            # labels as last written), as for a Secret a bad rotation broke.
            why = (
                Reason.OBJECT_TOO_LARGE,
                f"its Cluster API cluster {secret.cluster}: {too_large}",
            )
            held = mine.get(secret.cluster)
            as_is = dict(held.labels) if held is not None else {}
            candidates.append(Candidate(secret.name, secret.cluster, as_is, why, None))
            continue
        labels = capi.labels.get(secret.cluster, {})
        if not source.selector.matches(labels):
            continue
        # Not Cluster API's: as a Secret that stops matching, its Cluster (if ours) goes.
        unowned = owner_problem(secret, capi)
        candidates.append(
            Candidate(secret.name, secret.cluster, labels, unowned or secret.problem, unowned)
        )
    return settle(source, candidates, existing, mine)


def _unreadable(capi: CapiView, over: str) -> str:
    """Why a source waits on Cluster API's clusters, and what ends the wait: a CRD to apply
    (the manager picks it up within seconds) or a permission to grant."""
    if not capi.installed:
        return (
            "Cluster API is not installed (no CRD clusters.cluster.x-k8s.io), and a Secret is "
            f"imported only for the Cluster API cluster that controls it{over}: its clusters "
            "are picked up within seconds of the CRD being applied; its Clusters stay as they "
            "are meanwhile"
        )
    return (
        "the manager may not read Cluster API's clusters, and imports a Secret only for the "
        f"Cluster API cluster that controls it{over}: grant it get, list and watch on "
        "clusters.cluster.x-k8s.io; its Clusters stay as they are meanwhile"
    )
