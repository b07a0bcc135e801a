"""The rules of a ClusterSource that follows labelled kubeconfig Secrets (``from: Secrets``).

Cluster API is one tool of many that leaves a cluster's kubeconfig in a Secret; vcluster,
Crossplane's providers, Kamaji, k0smotron and teams themselves write others, each of its own
shape. A ``from: Secrets`` source names the shape instead of Kokumi knowing it: which Secrets
(``secretSelector``, over the Secrets' own labels), which key holds the kubeconfig (``key``,
default ``value``) and how the Cluster is named (``naming``: from a label, from the Secret's name
with a prefix or suffix trimmed, or the Secret's name). ``from: VCluster`` is one such shape with a
name: the Secret ``vc-<name>`` labelled ``app: vcluster`` and ``vcluster-name: <name>``, key
``config``, and goes through the same rules.

Pure functions only, so that Hypothesis holds them without a server; the plan and the status that
use them are :mod:`kokumi.core.sources.plan`'s and :mod:`kokumi.core.sources.status`'s, shared
with Cluster API's sources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from kokumi.core.environments import selectors
from kokumi.core.reasons import Reason
from kokumi.core.text import quoted

__all__ = [
    "DEFAULT_KEY",
    "FROM_SECRETS",
    "FROM_VCLUSTER",
    "MAX_CLUSTER_NAME",
    "VCLUSTER_APP",
    "VCLUSTER_KEY",
    "VCLUSTER_NAME_LABEL",
    "Naming",
    "Shape",
    "cluster_name",
    "context_cluster",
    "name_problem",
    "parse_shape",
    "vcluster_shape",
]

FROM_SECRETS: Final = "Secrets"
FROM_VCLUSTER: Final = "VCluster"
DEFAULT_KEY: Final = "value"
VCLUSTER_APP: Final = "vcluster"
VCLUSTER_NAME_LABEL: Final = "vcluster-name"
VCLUSTER_KEY: Final = "config"
VCLUSTER_PREFIX: Final = "vc-"
CURRENT: Final = "Current"
ALL: Final = "All"
MAX_CLUSTER_NAME: Final = 63
"""A Cluster's name is a DNS subdomain of at most 63 characters (the Cluster CRD's own rule)."""

_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


@attrs.frozen
class Naming:
    """How a matched Secret names its Cluster: ``label`` wins; else its name, trimmed."""

    label: str | None = None
    trim_prefix: str = ""
    trim_suffix: str = ""

    def __str__(self) -> str:
        if self.label is not None:
            return f"the value of its label {self.label}"
        trims = [f"without the prefix {self.trim_prefix}"] if self.trim_prefix else []
        trims += [f"without the suffix {self.trim_suffix}"] if self.trim_suffix else []
        return "its name" + (" " + " and ".join(trims) if trims else "")


@attrs.frozen
class Shape:
    """Which Secrets a source takes, where their kubeconfig is, and how each names its Cluster.

    ``required`` are labels a Secret must carry with these values, on top of ``selector``;
    ``exact_name`` (a preset's) requires the Secret's name to be the prefix and the Cluster's
    name, as vcluster writes ``vc-<name>``: a label alone is what anybody who may write Secrets
    can set on any Secret, and the name ties the Secret to the one the tool writes.
    """

    selector: selectors.Selector
    key: str = DEFAULT_KEY
    naming: Naming = Naming()
    required: Mapping[str, str] = attrs.field(factory=dict)
    exact_name: str | None = None  # "vc-": the Secret must be named vc-<cluster>
    tool: str = ""  # who writes such Secrets, for messages: "vcluster"
    all_contexts: bool = False  # contexts All: one Cluster per context, named after it

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a Secret with ``labels`` is one of the source's (its name aside)."""
        if any(labels.get(k) != v for k, v in self.required.items()):
            return False
        if self.exact_name is not None and self.naming.label not in labels:
            return False
        return self.selector.matches(labels)

    def describe(self) -> str:
        """The Secrets it takes, in a few words, for a status message."""
        if self.tool:
            return f"{self.tool} kubeconfig Secrets"
        return "kubeconfig Secrets"

    def none_matched(self) -> str:
        """The Ready message of a source that matches no Secret (yet)."""
        if self.tool:
            return (
                f"no {self.tool} kubeconfig Secret of this namespace matches: Clusters appear "
                f"here as {self.tool} writes {self.exact_name}<name> Secrets"
            )
        return (
            f"no Secret of this namespace matches spec.secretSelector {self.selector}: Clusters "
            "appear here as Secrets with those labels are written"
        )


def vcluster_shape(selector: selectors.Selector) -> Shape:
    """``from: VCluster``: the Secret vcluster writes for each virtual cluster.

    vcluster names it ``vc-<name>`` in the vcluster's namespace, labels it ``app: vcluster`` and
    ``vcluster-name: <name>``, and puts the kubeconfig under ``config``. ``selector`` narrows it.
    """
    return Shape(
        selector,
        VCLUSTER_KEY,
        Naming(label=VCLUSTER_NAME_LABEL),
        {"app": VCLUSTER_APP},
        VCLUSTER_PREFIX,
        "vcluster",
    )


def parse_shape(origin: object, spec: Mapping[str, Any]) -> Shape | tuple[Reason, str]:
    """The Secrets a ``from: Secrets`` or ``from: VCluster`` source takes, or why it cannot be."""
    raw = spec.get("secretSelector")
    if origin == FROM_VCLUSTER:
        for field in ("key", "naming", "contexts"):
            if field in spec:
                return (
                    Reason.INVALID_SPEC,
                    f"spec.{field} is vcluster's own with from: VCluster (key config, named "
                    "after the label vcluster-name): remove it, or use from: Secrets",
                )
        narrowed = selectors.parse(raw if raw is not None else {}, "spec.secretSelector")
        if isinstance(narrowed, selectors.SelectorError):
            return Reason.INVALID_SELECTOR, narrowed.message
        return vcluster_shape(narrowed)
    if raw is None or raw == {}:
        return (
            Reason.INVALID_SELECTOR,
            "spec.secretSelector is required with from: Secrets and must select something: "
            "the labels of the kubeconfig Secrets to follow, such as {matchLabels: "
            "{kokumi.dev/kubeconfig: 'true'}}; a source of every Secret would take tokens and "
            "certificates too",
        )
    selector = selectors.parse(raw, "spec.secretSelector")
    if isinstance(selector, selectors.SelectorError):
        return Reason.INVALID_SELECTOR, selector.message
    key = spec.get("key", DEFAULT_KEY)
    if not isinstance(key, str) or not _KEY.fullmatch(key) or len(key) > 253:
        return (
            Reason.INVALID_SPEC,
            f"spec.key {key!r} is not a Secret key: write the key that holds the kubeconfig, "
            "letters, digits, '-', '_' and '.', such as kubeconfig",
        )
    naming = _naming(spec.get("naming", {}))
    if isinstance(naming, str):
        return Reason.INVALID_SPEC, naming
    contexts = spec.get("contexts", CURRENT)
    if contexts not in (CURRENT, ALL):
        return (
            Reason.INVALID_SPEC,
            f"spec.contexts {contexts!r} is not Current or All: Current reads the kubeconfig's "
            "current context, All makes one Cluster per context",
        )
    if contexts == ALL and "naming" in spec:
        return (
            Reason.INVALID_SPEC,
            "spec.naming is for contexts Current: with contexts All each Cluster is named after "
            "its context; remove spec.naming",
        )
    return Shape(selector, key, naming, all_contexts=contexts == ALL)


def _naming(raw: object) -> Naming | str:
    if not isinstance(raw, Mapping) or not all(
        isinstance(raw.get(f, ""), str) for f in ("label", "trimPrefix", "trimSuffix")
    ):
        return "spec.naming must be {label: <key>} or {trimPrefix: <text>, trimSuffix: <text>}"
    label = raw.get("label")
    if label is not None and ("trimPrefix" in raw or "trimSuffix" in raw):
        return (
            "spec.naming.label names the Cluster after a label, and trimPrefix and trimSuffix "
            "after the Secret's name: set one or the other"
        )
    if label == "":
        return "spec.naming.label is empty: write the label whose value names the Cluster"
    return Naming(label, str(raw.get("trimPrefix", "")), str(raw.get("trimSuffix", "")))


def cluster_name(
    shape: Shape, secret: str, labels: Mapping[str, str]
) -> str | tuple[Reason, str] | None:
    """The Cluster a Secret of the namespace would be, why it cannot be one, or None: not matched.

    A Secret the shape matches whose name makes no Cluster name (a missing label, a name that is
    not a DNS subdomain of at most 63 characters, another name than the preset's) gets a reason
    and a message that says how to fix it, never a Cluster.
    """
    if not shape.matches(labels):
        return None
    naming = shape.naming
    if naming.label is not None:
        name = labels.get(naming.label)
        if not name:
            return (
                Reason.INVALID_CLUSTER_NAME,
                f"it has no label {naming.label}, which names its Cluster (spec.naming.label): "
                f"label it {naming.label}=<cluster>, or name Clusters otherwise in spec.naming",
            )
        if shape.exact_name is not None and secret != f"{shape.exact_name}{name}":
            # Only the Secret the tool writes: another with the same labels is somebody else's.
            return None
    else:
        name = secret
        if naming.trim_prefix and name.startswith(naming.trim_prefix):
            name = name[len(naming.trim_prefix) :]
        if naming.trim_suffix and name.endswith(naming.trim_suffix):
            name = name[: -len(naming.trim_suffix)]
    problem = name_problem(name)
    if problem is not None:
        return (
            Reason.INVALID_CLUSTER_NAME,
            f"its Cluster would be named {quoted(name)}, from {naming}, and {problem}: "
            "rename the Secret or change spec.naming",
        )
    return name


def context_cluster(context: str) -> str | tuple[Reason, str]:
    """With contexts All: the Cluster a context is, named after it, or why it cannot be one."""
    problem = name_problem(context)
    if problem is None:
        return context
    return (
        Reason.INVALID_CLUSTER_NAME,
        f"its context {quoted(context)} would name a Cluster, and {problem}: rename the context "
        "(kubectl config rename-context), or use contexts Current",
    )


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Cluster, or None when it can."""
    if not name:
        return "that is empty"
    if len(name) > MAX_CLUSTER_NAME:
        return f"that is longer than {MAX_CLUSTER_NAME} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(name):
        return (
            "a Cluster's name is lower-case alphanumeric characters, '-' and '.', starting and "
            "ending with an alphanumeric character"
        )
    return None
