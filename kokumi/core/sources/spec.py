"""A ClusterSource as written: its spec read, the labels and scope it gives its Clusters, whose a
Cluster is.

``parse_source`` reads any ClusterSource (``from: ClusterAPI``, ``Secrets`` or ``VCluster``)
into a :class:`ClusterSource` or a :class:`SourceInvalid` that says what to fix; the shapes of
the Secrets sources are :mod:`kokumi.core.sources.secretsource`'s. A Cluster is a source's by its
controller ownerReference (:func:`source_of`), never by its label, which anybody may write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from kokumi.core import api, limits
from kokumi.core.environments import selectors
from kokumi.core.reasons import Reason
from kokumi.core.sources import secretsource
from kokumi.core.sources.secretsource import FROM_SECRETS, FROM_VCLUSTER, Shape
from kokumi.objects import Resource, metadata_of

__all__ = [
    "CAPI_KEY",
    "CLUSTER_SOURCES",
    "KIND",
    "OWN_PREFIX",
    "SOURCE_LABEL",
    "ClusterSource",
    "SourceInvalid",
    "kept_source",
    "parse_source",
    "source_of",
]

KIND: Final = "ClusterSource"
CLUSTER_SOURCES: Final = Resource(api.GROUP, api.VERSION, "clustersources", KIND)
CAPI_KEY: Final = "value"
"""The key Cluster API writes the kubeconfig under: a ``from: ClusterAPI`` source's key."""
SOURCE_LABEL: Final = "delivery.kokumi.dev/cluster-source"
FROM_CLUSTER_API: Final = "ClusterAPI"
OWN_PREFIX: Final = "delivery.kokumi.dev/"
"""Kokumi's own label keys: no source's spec.labels, and no label a Cluster copies, may use it."""


@attrs.frozen
class ClusterSource:
    name: str
    namespace: str
    uid: str
    generation: int
    selector: selectors.Selector
    labels: Mapping[str, str]
    shape: Shape | None = None  # None: from ClusterAPI; else the Secrets it takes, and how
    scope: api.Scope | None = None  # spec.scope, copied to every Cluster it makes

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
    scope = _scope(spec.get("scope"))
    if isinstance(scope, str):
        return invalid(Reason.INVALID_SPEC, scope)
    return ClusterSource(name, namespace, uid, gen, selector, dict(labels), shape, scope)


def kept_source(obj: Mapping[str, Any]) -> ClusterSource | SourceInvalid:
    """The source as its plan reads it from the actor's store, where one over the bounds of
    tenant metadata is kept as a stub (:mod:`kokumi.core.limits`): that one plans nothing and
    says so in its Ready condition, since its labels and spec were not kept to be read."""
    why = limits.over_bounds(obj)
    if why is None:
        return parse_source(obj)
    meta = metadata_of(obj)
    generation = meta.get("generation")
    return SourceInvalid(
        str(meta.get("name", "")),
        str(meta.get("namespace", "")),
        str(meta.get("uid", "")),
        generation if isinstance(generation, int) else 0,
        Reason.OBJECT_TOO_LARGE,
        why,
    )


_ORIGINS: Final = frozenset({FROM_CLUSTER_API, FROM_SECRETS, FROM_VCLUSTER})
_SECRETS_FIELDS: Final = ("secretSelector", "key", "naming", "contexts")


def _label_problem(labels: Mapping[str, str]) -> str | None:
    """Why spec.labels cannot go on a Cluster, in the selector parser's own words; or None."""
    for key, value in sorted(labels.items()):
        if key.startswith(OWN_PREFIX):
            return (
                f"spec.labels.{key}: keys under {OWN_PREFIX} are Kokumi's own: choose another "
                "prefix"
            )
        checked = selectors.parse({"matchLabels": {key: value}}, "spec.labels")
        if isinstance(checked, selectors.SelectorError):
            return checked.message.replace("spec.labels.matchLabels", "spec.labels")
    return None


def _scope(found: object) -> api.Scope | str | None:
    """``spec.scope`` as a Cluster's, read by the Cluster's own parser (the source's Clusters
    take it as written, so what it refuses, they would); or why not, naming the same field."""
    if found is None:
        return None
    would_be = {
        "metadata": {"name": "scope", "namespace": "scope"},
        "spec": {
            "connection": "Kubeconfig",
            "kubeconfig": {"secretRef": {"name": "scope"}},
            "scope": found,
        },
    }
    parsed = api.parse_cluster(would_be)
    if isinstance(parsed, api.Invalid):
        return parsed.message
    return parsed.spec.scope


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
