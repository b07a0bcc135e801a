"""A ClusterSource's rules: which Secrets it takes, the Cluster it keeps for each, its status.

A ``ClusterSource`` (``from: ClusterAPI``) keeps one Cluster per Cluster API kubeconfig Secret of
its namespace that its selector matches. Everything it decides is here, as pure functions of what
the actor read (the source, the Secrets' metadata and verdicts, the Cluster API clusters' labels,
the Clusters that exist), so that Hypothesis can hold the rules without a server:

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
  API cluster's labels with the source's on top and the mark ``delivery.kokumi.dev/cluster-source``,
  and its controller ownerReference names the source: that reference, not the label, is what
  makes a Cluster the source's, since anybody who may create a Cluster may write a label;
- a Cluster of that name that is not the source's is never touched: a conflict, reported;
- a Cluster is made only for a Secret the manager can use; one the source made already stays
  while its Secret is matched, even if a rotation broke it (its own status says so, and its
  registration follows the Cluster's own rules), so that a bad rotation never deletes it;
- while the source cannot tell what matches or what is Cluster API's (the manager may not list
  the Secrets, or may not read Cluster API's clusters), nothing is created or deleted, as through
  an outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from kokumi.core import api
from kokumi.core.cluster import secretsource
from kokumi.core.cluster.secretsource import FROM_SECRETS, FROM_VCLUSTER, Shape
from kokumi.core.environments import selectors
from kokumi.core.kubeconfig.connection import Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.reasons import Reason
from kokumi.core.text import quoted
from kokumi.objects import Resource, metadata_of, secret_data, secret_keys

__all__ = [
    "CAPI_CLUSTERS",
    "CAPI_CLUSTER_NAME",
    "CAPI_GROUP",
    "CAPI_KEY",
    "CLUSTER_SOURCES",
    "KIND",
    "MAX_LISTED",
    "SOURCE_LABEL",
    "Candidate",
    "CapiView",
    "ClusterSource",
    "Desired",
    "Existing",
    "NotImported",
    "OwnerRef",
    "Plan",
    "SecretView",
    "SourceInvalid",
    "SourceStatus",
    "capi_cluster_of",
    "cluster_body",
    "controller_of",
    "existing_of",
    "kubeconfig_problem",
    "mine_of",
    "owner_problem",
    "parse_source",
    "plan",
    "settle",
    "source_of",
    "status_of",
    "status_patch",
    "waiting_on",
]

KIND: Final = "ClusterSource"
CLUSTER_SOURCES: Final = Resource(api.GROUP, api.VERSION, "clustersources", KIND)
CAPI_GROUP: Final = "cluster.x-k8s.io"
CAPI_CLUSTERS: Final = Resource(CAPI_GROUP, "v1beta1", "clusters", "Cluster")
CAPI_CLUSTER_NAME: Final = "cluster.x-k8s.io/cluster-name"
CAPI_KEY: Final = "value"
SOURCE_LABEL: Final = "delivery.kokumi.dev/cluster-source"
FROM_CLUSTER_API: Final = "ClusterAPI"
MAX_LISTED: Final = 50
"""``status.notImported`` lists this many Secrets at most (by name); ``more`` counts the rest."""

_OURS: Final = "delivery.kokumi.dev/"
_NOT_USABLE: Final = frozenset(
    {
        Reason.INVALID_KUBECONFIG,
        Reason.SECRET_KEY_NOT_FOUND,
        Reason.SECRET_NOT_READABLE,
        Reason.SECRET_NOT_OWNED,
        Reason.INVALID_CLUSTER_NAME,
    }
)


# --- the source ---------------------------------------------------------------------------------


@attrs.frozen
class ClusterSource:
    name: str
    namespace: str
    uid: str
    generation: int
    selector: selectors.Selector
    labels: Mapping[str, str]
    shape: Shape | None = None  # None: from ClusterAPI; else the Secrets it takes, and how

    @property
    def origin(self) -> str:
        """``spec.from``, as the source was read."""
        if self.shape is None:
            return FROM_CLUSTER_API
        return FROM_VCLUSTER if self.shape.tool == "vcluster" else FROM_SECRETS

    @property
    def key(self) -> str:
        """The Secret key that holds the kubeconfig."""
        return CAPI_KEY if self.shape is None else self.shape.key

    def noun(self) -> str:
        """The Secrets it matches, in a few words, for its status."""
        return "Cluster API kubeconfig Secrets" if self.shape is None else self.shape.describe()


@attrs.frozen
class SourceInvalid:
    """A ClusterSource that does not fit its schema: its status says why, and it makes nothing."""

    name: str
    namespace: str
    uid: str
    generation: int
    reason: Reason
    message: str


def parse_source(obj: Mapping[str, Any]) -> ClusterSource | SourceInvalid:
    """Read a ClusterSource; total, as the CRD validates but old objects can be anything."""
    meta = metadata_of(obj)
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    uid = str(meta.get("uid", ""))
    generation = meta.get("generation")
    gen = generation if isinstance(generation, int) else 0

    def invalid(reason: Reason, message: str) -> SourceInvalid:
        return SourceInvalid(name, namespace, uid, gen, reason, message)

    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return invalid(Reason.INVALID_SPEC, "spec is missing: set spec.from to ClusterAPI")
    origin = spec.get("from")
    if origin not in _ORIGINS:
        return invalid(
            Reason.INVALID_SPEC,
            f"spec.from {origin!r} is not supported: write ClusterAPI, Secrets or VCluster",
        )
    shape: Shape | None = None
    selector: selectors.Selector | selectors.SelectorError = selectors.EVERYTHING
    if origin == FROM_CLUSTER_API:
        for field in _SECRETS_FIELDS:
            if field in spec:
                return invalid(
                    Reason.INVALID_SPEC,
                    f"spec.{field} is for from: Secrets or VCluster: a ClusterAPI source takes "
                    "Cluster API's Secrets as Cluster API writes them; remove it",
                )
        selector = selectors.parse(spec.get("selector", {}), "spec.selector")
    else:
        if "selector" in spec:
            return invalid(
                Reason.INVALID_SPEC,
                "spec.selector is over Cluster API clusters' labels, for from: ClusterAPI; "
                "select the Secrets by their labels with spec.secretSelector",
            )
        parsed = secretsource.parse_shape(origin, spec)
        if isinstance(parsed, tuple):
            return invalid(*parsed)
        shape = parsed
    if isinstance(selector, selectors.SelectorError):
        return invalid(Reason.INVALID_SELECTOR, selector.message)
    labels = spec.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return invalid(
            Reason.INVALID_SPEC, "spec.labels must map label keys to strings, e.g. {fleet: edge}"
        )
    problem = _label_problem(labels)
    if problem is not None:
        return invalid(Reason.INVALID_SPEC, problem)
    return ClusterSource(name, namespace, uid, gen, selector, dict(labels), shape)


_ORIGINS: Final = frozenset({FROM_CLUSTER_API, FROM_SECRETS, FROM_VCLUSTER})
_SECRETS_FIELDS: Final = ("secretSelector", "key", "naming", "contexts")


def _label_problem(labels: Mapping[str, str]) -> str | None:
    """Why spec.labels cannot go on a Cluster, in the selector parser's own words; or None."""
    for key, value in sorted(labels.items()):
        if key.startswith(_OURS):
            return f"spec.labels.{key}: keys under {_OURS} are Kokumi's own: choose another prefix"
        checked = selectors.parse({"matchLabels": {key: value}}, "spec.labels")
        if isinstance(checked, selectors.SelectorError):
            return checked.message.replace("spec.labels.matchLabels", "spec.labels")
    return None


def source_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the ClusterSource that controls a Cluster, from its ownerReferences."""
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).startswith(f"{api.GROUP}/")
            and ref.get("controller") is True
        ):
            return str(ref.get("name", "")), str(ref.get("uid", ""))
    return None


# --- Secrets ------------------------------------------------------------------------------------


def capi_cluster_of(name: str, labels: Mapping[str, str]) -> str | None:
    """The Cluster API cluster whose kubeconfig Secret this is, or None for any other Secret."""
    cluster = labels.get(CAPI_CLUSTER_NAME)
    if not cluster or name != f"{cluster}-kubeconfig":
        return None
    return cluster


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
    )


@attrs.frozen
class Desired:
    """The Cluster the source keeps for one Secret."""

    name: str
    secret: str
    labels: Mapping[str, str]
    key: str = CAPI_KEY
    context: str | None = None


def _desired(
    source: ClusterSource,
    secret: str,
    cluster: str,
    own: Mapping[str, str],
    context: str | None = None,
) -> Desired:
    """``own``: the Cluster API cluster's labels, or the Secret's own for a Secrets source."""
    labels = {k: v for k, v in own.items() if not k.startswith(_OURS)}
    labels.update(source.labels)
    labels[SOURCE_LABEL] = source.name
    return Desired(cluster, secret, labels, source.key, context)


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
        },
    }


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
    #: The manager's bounds that cut what the source would make (kokumi.core.cluster.bounds):
    #: each bound's Reason and one line for the Ready condition, the first one's Reason shown.
    bounded: tuple[tuple[Reason, str], ...] = ()


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
            kept=kept_all,
            blocked=(
                Reason.CLUSTER_API_NOT_READABLE,
                "the manager may not read Cluster API's clusters (or Cluster API is not "
                "installed), and imports a Secret only for the Cluster API cluster that controls "
                f"it{over}: grant it get, list and watch on clusters.cluster.x-k8s.io; its "
                "Clusters stay as they are meanwhile",
            ),
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


@attrs.frozen
class SourceStatus:
    observed_generation: int
    ready: bool
    reason: Reason
    message: str
    matched: int = 0
    made: int = 0
    not_usable: int = 0
    conflicts: int = 0
    not_imported: tuple[NotImported, ...] = ()

    def to_json(self, last_transition_time: str) -> dict[str, Any]:
        listed = self.not_imported[:MAX_LISTED]
        status: dict[str, Any] = {
            "observedGeneration": self.observed_generation,
            "matched": self.matched,
            "made": self.made,
            "notUsable": self.not_usable,
            "conflicts": self.conflicts,
            "notImported": [entry.to_json() for entry in listed],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if self.ready else "False",
                    "reason": str(self.reason),
                    "message": self.message,
                    "lastTransitionTime": last_transition_time,
                    "observedGeneration": self.observed_generation,
                }
            ],
        }
        if len(self.not_imported) > MAX_LISTED:
            status["more"] = len(self.not_imported) - MAX_LISTED
        return status


def status_of(
    source: ClusterSource | SourceInvalid, decided: Plan | None, failed: Mapping[str, str]
) -> SourceStatus:
    """The status once the plan's writes are done; ``failed`` maps a Cluster to its refused write.

    A Cluster whose create failed is not made; one whose update or delete failed still is.
    """
    if isinstance(source, SourceInvalid):
        return SourceStatus(source.generation, False, source.reason, source.message)
    assert decided is not None
    generation = source.generation
    if decided.blocked is not None:
        reason, message = decided.blocked
        return SourceStatus(generation, False, reason, message, made=len(decided.kept))
    entries = list(decided.not_imported)
    for desired in (*decided.create, *decided.update):
        refused = failed.get(desired.name)
        if refused is not None:
            entries.append(
                NotImported(desired.secret, desired.name, Reason.CLUSTER_WRITE_FAILED, refused)
            )
    created = sum(1 for d in decided.create if d.name not in failed)
    gone = sum(1 for name in decided.delete if name not in failed)
    made = created + len(decided.update) + len(decided.kept) + len(decided.delete) - gone
    entries.sort(key=lambda e: (e.secret, e.reason))
    conflicts = sum(1 for e in entries if e.reason is Reason.CLUSTER_CONFLICT)
    not_usable = sum(1 for e in entries if e.reason in _NOT_USABLE)
    noun = source.noun()
    if not entries:
        message = (
            f"{decided.matched} {noun} matched, each with its Cluster"
            if decided.matched
            else (_NONE_CAPI if source.shape is None else source.shape.none_matched())
        )
        return SourceStatus(
            generation, True, Reason.READY, message, decided.matched, made, not_usable, conflicts
        )
    message = (
        f"{len(entries)} of {decided.matched} matched {noun} have no "
        f"usable Cluster of this source ({conflicts} in conflict, {not_usable} not usable): "
        "see status.notImported"
    )
    reason = Reason.NOT_ALL_IMPORTED
    if decided.bounded:
        # A bound that cuts comes first: it is the manager's, and no edit of one Secret helps.
        reason = decided.bounded[0][0]
        message = "; ".join([*(line for _, line in decided.bounded), message])
    return SourceStatus(
        generation,
        False,
        reason,
        message,
        decided.matched,
        made,
        not_usable,
        conflicts,
        tuple(entries),
    )


_NONE_CAPI: Final = (
    "no Cluster API kubeconfig Secret of this namespace matches: Clusters appear here as Cluster "
    "API writes <cluster>-kubeconfig Secrets"
)


def status_patch(current: object, new: SourceStatus, now: str) -> dict[str, Any] | None:
    """The status to write, or None when the object's status says this already.

    The Ready condition's transition time moves only when its status does, so a source whose
    findings did not change is byte-identical to what it has, and nothing is written.
    """
    old = current if isinstance(current, Mapping) else {}
    stamp = now
    for condition in old.get("conditions") or ():
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "Ready"
            and condition.get("status") == ("True" if new.ready else "False")
            and condition.get("lastTransitionTime")
        ):
            stamp = str(condition["lastTransitionTime"])
    wanted = new.to_json(stamp)
    if {k: old.get(k) for k in (*wanted, "more")} == {**{"more": None}, **wanted}:
        return None
    if "more" not in wanted and "more" in old:
        wanted["more"] = None  # null: left out of the status written
    return wanted
