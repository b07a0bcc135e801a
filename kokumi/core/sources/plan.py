"""The rules every kind of ClusterSource shares: the Clusters it keeps, the plan that settles them.

Each kind of source makes its candidates (Cluster API's in :mod:`kokumi.core.sources.clusterapi`,
a ``from: Secrets`` or ``VCluster`` source's in :mod:`kokumi.core.sources.secretplan`); here is
what happens to them, the same for every kind:

- a Cluster is made only for a Secret the manager can use (:func:`kubeconfig_problem`, the
  Cluster's own check); one the source made already stays while its Secret is matched, even if
  a rotation broke it (its own status says so, and its registration follows the Cluster's own
  rules), so that a bad rotation never deletes it;
- a Cluster of that name that is not the source's is never touched: a conflict, reported;
- two Secrets (or contexts) that name one Cluster: the one it was made from keeps it;
- the Cluster carries the source's labels and the mark ``delivery.kokumi.dev/cluster-source``,
  and the source's ``spec.scope`` as its own; its controller ownerReference names the source;
- while the source cannot tell what matches (the manager may not list the Secrets), nothing is
  created or deleted, as through an outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from kokumi.core import api, limits
from kokumi.core.kubeconfig.connection import Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.reasons import Reason
from kokumi.core.sources.secretsource import Shape
from kokumi.core.sources.spec import (
    CAPI_KEY,
    KIND,
    OWN_PREFIX,
    SOURCE_LABEL,
    ClusterSource,
    source_of,
)
from kokumi.objects import metadata_of, secret_data, secret_keys

__all__ = [
    "Candidate",
    "Desired",
    "Existing",
    "NotImported",
    "OwnerRef",
    "Plan",
    "cluster_body",
    "cluster_patch",
    "controller_of",
    "existing_of",
    "kubeconfig_problem",
    "mine_of",
    "settle",
    "waiting_on",
]


# --- Secrets ------------------------------------------------------------------------------------


def kubeconfig_problem(
    secret: Mapping[str, Any], shape: Shape | None = None
) -> tuple[Reason, str] | None:
    """Why the manager cannot use a kubeconfig Secret, or None when it can.

    The same check as a Cluster's own (``parse``), so that the source never makes a
    Cluster that would only report ``InvalidKubeconfig``; ``kokumi cluster import`` uses it too.
    ``shape`` is a ``from: Secrets`` source's (None: Cluster API's, key ``value``).
    """
    key = CAPI_KEY if shape is None else shape.key
    text = secret_data(secret, key)
    if text is None:
        keys = ", ".join(secret_keys(secret)) or "none"
        if shape is None:
            hint = "Cluster API writes the kubeconfig there once the cluster's control plane is up"
        elif shape.tool:
            hint = f"{shape.tool} writes the kubeconfig there once the cluster is up"
        else:
            hint = "put the kubeconfig there, or set spec.key to the key that holds it"
        return (
            Reason.SECRET_KEY_NOT_FOUND,
            f"it has no key {key} (its keys: {keys}): {hint}",
        )
    checked = parse(text)
    if isinstance(checked, Refusal):
        return Reason.INVALID_KUBECONFIG, checked.message
    return None


@attrs.frozen
class OwnerRef:
    """An object's controller ownerReference: what controls it."""

    api_version: str
    kind: str
    name: str
    uid: str


def controller_of(references: object) -> OwnerRef | None:
    """The controller among ``metadata.ownerReferences`` (the API server allows one), or None."""
    if not isinstance(references, list | tuple):
        return None
    for ref in references:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return OwnerRef(
                str(ref.get("apiVersion", "")),
                str(ref.get("kind", "")),
                str(ref.get("name", "")),
                str(ref.get("uid", "")),
            )
    return None


# --- Clusters -----------------------------------------------------------------------------------


@attrs.frozen
class Existing:
    """A Cluster that exists, as far as the source's rules need it."""

    name: str
    owner: tuple[str, str] | None  # (name, uid) of its controlling ClusterSource
    labels: Mapping[str, str]
    secret: str | None  # the Secret a Kubeconfig Cluster reads, else None
    key: str = CAPI_KEY  # and its key
    context: str | None = None  # and the context it reads (None: the current one)
    scope: api.Scope | None = None  # its spec.scope, as the Cluster's parser reads it


def existing_of(obj: Mapping[str, Any]) -> Existing:
    meta = metadata_of(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    ref = ((spec.get("kubeconfig") or {}).get("secretRef")) or {}
    secret = None
    if spec.get("connection") == "Kubeconfig":
        secret = ref.get("name")
    key = ref.get("key", CAPI_KEY)
    context = (spec.get("kubeconfig") or {}).get("context")
    labels = meta.get("labels") or {}
    return Existing(
        str(meta.get("name", "")),
        source_of(obj),
        {str(k): str(v) for k, v in labels.items()},
        secret if isinstance(secret, str) else None,
        key if isinstance(key, str) else "",
        context if isinstance(context, str) else None,
        _scope_of(spec.get("scope")),
    )


def _scope_of(found: object) -> api.Scope | None:
    """A Cluster's scope for comparing with the source's: one that cannot be read is one an
    update rewrites, so it reads as no scope at all (a source with a scope then differs)."""
    if not isinstance(found, Mapping):
        return None
    namespaces = found.get("namespaces")
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        return None
    return api.Scope(tuple(namespaces), found.get("clusterResources") is True)


@attrs.frozen
class Desired:
    """The Cluster the source keeps for one Secret."""

    name: str
    secret: str
    labels: Mapping[str, str]
    key: str = CAPI_KEY
    context: str | None = None
    scope: api.Scope | None = None


def _desired(
    source: ClusterSource,
    secret: str,
    cluster: str,
    own: Mapping[str, str],
    context: str | None = None,
) -> Desired:
    """``own``: the Cluster API cluster's labels, or the Secret's own for a Secrets source."""
    labels = {k: v for k, v in own.items() if not k.startswith(OWN_PREFIX)}
    labels.update(source.labels)
    labels[SOURCE_LABEL] = source.name
    return Desired(cluster, secret, labels, source.key, context, source.scope)


def _description(source: ClusterSource, desired: Desired) -> str:
    if source.shape is None:
        return f"Cluster API cluster {desired.name}, from ClusterSource {source.name}"
    if source.shape.tool:
        return f"{source.shape.tool} {desired.name}, from ClusterSource {source.name}"
    if desired.context is not None:
        return (
            f"context {desired.context} of kubeconfig Secret {desired.secret}, from ClusterSource "
            f"{source.name}"
        )
    return f"kubeconfig Secret {desired.secret}, from ClusterSource {source.name}"


def cluster_body(source: ClusterSource, desired: Desired) -> dict[str, Any]:
    """The Cluster object for ``desired``: what a create sends and an update restores."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {
            "name": desired.name,
            "namespace": source.namespace,
            "labels": dict(desired.labels),
            "ownerReferences": [
                {
                    "apiVersion": api.API_VERSION,
                    "kind": KIND,
                    "name": source.name,
                    "uid": source.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "connection": "Kubeconfig",
            "kubeconfig": {
                "secretRef": {"name": desired.secret, "key": desired.key},
                **({"context": desired.context} if desired.context is not None else {}),
            },
            "description": _description(source, desired),
            **({"scope": _scope_written(desired.scope)} if desired.scope is not None else {}),
        },
    }


def _scope_written(scope: api.Scope) -> dict[str, Any]:
    """``spec.scope`` as the CRD holds it: ``clusterResources`` only when true."""
    written: dict[str, Any] = {"namespaces": list(scope.namespaces)}
    if scope.cluster_resources:
        written["clusterResources"] = True
    return written


def cluster_patch(
    source: ClusterSource, desired: Desired, kept: Mapping[str, Any]
) -> list[dict[str, Any]] | dict[str, Any]:
    """How an update restores ``desired`` over the Cluster as the store keeps it (``kept``):
    a JSON patch (a list of operations) or a merge patch (a map), each conditional on the
    resourceVersion kept, so that a Cluster changed meanwhile is refused rather than overwritten.

    A merge patch names the labels to drop; one over the bounds of tenant metadata is kept as a
    stub, whose labels were not kept and so cannot be named: the source's labels replace them
    all, in one JSON patch.
    """
    spec = cluster_body(source, desired)["spec"]
    version = metadata_of(kept).get("resourceVersion")
    version = version if isinstance(version, str) else None
    if limits.over_bounds(kept) is not None:
        operations: list[dict[str, Any]] = [
            {"op": "add", "path": "/metadata/labels", "value": dict(desired.labels)},
            {"op": "add", "path": "/spec", "value": spec},
        ]
        if version is not None:
            operations.insert(
                0, {"op": "test", "path": "/metadata/resourceVersion", "value": version}
            )
        return operations
    old = metadata_of(kept).get("labels") or {}
    labels: dict[str, str | None] = {k: None for k in old if k not in desired.labels}
    labels.update(desired.labels)
    kept_spec = kept.get("spec")
    kept_scope = kept_spec.get("scope") if isinstance(kept_spec, Mapping) else None
    if kept_scope is not None and desired.scope is None:
        spec["scope"] = None  # a scope the source no longer sets, or one written by hand, goes
    elif (
        isinstance(kept_scope, Mapping)
        and "clusterResources" in kept_scope
        and desired.scope is not None
        and not desired.scope.cluster_resources
    ):
        spec["scope"] = {**spec["scope"], "clusterResources": None}
    return {"metadata": {"labels": labels, "resourceVersion": version}, "spec": spec}


# --- the plan and the status --------------------------------------------------------------------


@attrs.frozen
class NotImported:
    """A matched Secret that no Cluster of the source uses as it should, and why."""

    secret: str
    cluster: str
    reason: Reason
    message: str

    def to_json(self) -> dict[str, str]:
        return {
            "secret": self.secret,
            "cluster": self.cluster,
            "reason": str(self.reason),
            "message": self.message,
        }


@attrs.frozen
class Plan:
    """What the source writes, and what its status says before the writes' own outcome."""

    create: tuple[Desired, ...] = ()
    update: tuple[Desired, ...] = ()
    delete: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # the source's Clusters that stay as they are
    matched: int = 0
    not_imported: tuple[NotImported, ...] = ()
    blocked: tuple[Reason, str] | None = None  # the source cannot decide: nothing changes
    #: The manager's bounds that cut what the source would make (kokumi.core.sources.bounds):
    #: each bound's Reason and one line for the Ready condition, the first one's Reason shown.
    bounded: tuple[tuple[Reason, str], ...] = ()


def mine_of(source: ClusterSource, existing: Mapping[str, Existing]) -> dict[str, Existing]:
    return {n: e for n, e in existing.items() if e.owner is not None and e.owner[1] == source.uid}


def waiting_on(listable: bool | None, not_listable_message: str) -> tuple[Reason, str] | None:
    if listable is None:
        return (
            Reason.SECRET_NOT_READABLE,
            "the manager has not listed the Secrets of this namespace yet; its Clusters stay as "
            "they are meanwhile",
        )
    if not listable:
        return Reason.SECRET_NOT_READABLE, not_listable_message
    return None


@attrs.frozen
class Candidate:
    """A matched Secret, before the Clusters that exist are looked at."""

    secret: str
    cluster: str
    labels: Mapping[str, str]  # what the Cluster carries of its own
    problem: tuple[Reason, str] | None  # not usable (now)
    refused: tuple[Reason, str] | None  # not to be imported at all: no Cluster, and ours goes
    context: str | None = None  # with contexts All: the context the Cluster reads


def settle(
    source: ClusterSource,
    candidates: Iterable[Candidate],
    existing: Mapping[str, Existing],
    mine: Mapping[str, Existing],
) -> Plan:
    """The writes and findings for the matched Secrets: the rules every kind of source shares.

    Two Secrets (or contexts) that name one Cluster: the one the source's Cluster was made from
    keeps it while it still matches and names it, and the other waits, listed; first by name
    decides only a name no Cluster of the source holds yet. Else anybody who may write a
    Secret that sorts first could take over a registered Cluster, and every Environment's
    deployments with it. Once the holder goes or stops matching, the next takes the Cluster
    over in place (an update, not a delete and a create).
    """
    create: list[Desired] = []
    update: list[Desired] = []
    kept: list[str] = []
    problems: list[NotImported] = []
    wanted: dict[str, str] = {}  # Cluster -> the Secret that has it
    ordered = sorted(candidates, key=lambda c: (c.secret, c.context or ""))
    holders: dict[str, Candidate] = {}  # Cluster -> the candidate it was made from
    for candidate in ordered:
        made = mine.get(candidate.cluster)
        if (
            candidate.refused is None
            and made is not None
            and (made.secret, made.context) == (candidate.secret, candidate.context)
        ):
            holders.setdefault(candidate.cluster, candidate)
    claimed = dict(holders)  # Cluster -> the candidate that has the name
    matched = 0
    for secret in ordered:
        matched += 1
        if secret.refused is not None:
            problems.append(NotImported(secret.secret, secret.cluster, *secret.refused))
            continue
        target = _desired(source, secret.secret, secret.cluster, secret.labels, secret.context)
        there = existing.get(secret.cluster)
        first = claimed.setdefault(secret.cluster, secret)
        if first is not secret:
            problems.append(
                NotImported(
                    secret.secret,
                    secret.cluster,
                    Reason.CLUSTER_CONFLICT,
                    _waits(first, secret),
                )
            )
            continue
        if there is not None and secret.cluster not in mine:
            problems.append(NotImported(secret.secret, secret.cluster, *_conflict(there)))
            continue
        if secret.problem is not None:
            problems.append(NotImported(secret.secret, secret.cluster, *secret.problem))
            if there is None:
                continue
        wanted[secret.cluster] = secret.secret
        if there is None:
            create.append(target)
        elif (
            there.secret != target.secret
            or there.key != target.key
            or there.context != target.context
            or dict(there.labels) != dict(target.labels)
            or there.scope != target.scope
        ):
            update.append(target)
        else:
            kept.append(target.name)
    delete = tuple(sorted(set(mine) - set(wanted)))
    return Plan(tuple(create), tuple(update), delete, tuple(kept), matched, tuple(problems), None)


def _named(candidate: Candidate) -> str:
    if candidate.context is None:
        return f"Secret {candidate.secret}"
    return f"context {candidate.context} of Secret {candidate.secret}"


def _waits(first: Candidate, other: Candidate) -> str:
    """Why ``other`` has no Cluster: ``first`` names it too and has it. Names, never data.

    The same words before the Cluster is made and after, so that the status does not change
    when nothing but the create happened.
    """
    fix = (
        "rename one of the contexts"
        if other.context is not None
        else "rename one of them, or change spec.naming"
    )
    return (
        f"{_named(first)} of this source has Cluster {other.cluster}, made from it (or first by "
        f"name while none was made), and keeps it while it matches: {_named(other)} names it "
        f"too and waits until {_named(first)} goes or stops matching; {fix}"
    )


def _conflict(there: Existing) -> tuple[Reason, str]:
    who = (
        f"ClusterSource {there.owner[0]} made it"
        if there.owner is not None
        else "it was not made by this ClusterSource"
    )
    return (
        Reason.CLUSTER_CONFLICT,
        f"a Cluster {there.name} exists and {who}: the source leaves it alone; delete or rename it "
        "to let this ClusterSource keep one for the Secret",
    )
