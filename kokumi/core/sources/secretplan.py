"""How a ``from: Secrets`` source's Secrets become candidates for its plan, contexts and all.

The plan's shared rules (conflicts, rotations, deletions) are :mod:`kokumi.core.sources.plan`'s,
the status :mod:`kokumi.core.sources.status`'s; the shapes (which Secrets, their key, the Clusters'
names) :mod:`kokumi.core.sources.secretsource`'s. Here: what the actor read of each matched Secret
(:class:`Labelled`, with each context's verdict when the source takes every context) and the plan
over it. Pure functions, for Hypothesis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from kokumi.core.kubeconfig.connection import Refusal
from kokumi.core.kubeconfig.reader import read_contexts
from kokumi.core.reasons import Reason
from kokumi.core.sources import bounds, secretsource, vcluster
from kokumi.core.sources.plan import (
    Candidate,
    Existing,
    OwnerRef,
    Plan,
    kubeconfig_problem,
    mine_of,
    settle,
    waiting_on,
)
from kokumi.core.sources.secretsource import Shape
from kokumi.core.sources.spec import ClusterSource
from kokumi.objects import secret_data

__all__ = ["Labelled", "context_verdicts", "judge_contexts", "matched_secrets", "plan_secrets"]

Verdicts = tuple[tuple[str, tuple[Reason, str] | None], ...]


@attrs.frozen
class Labelled:
    """A Secret of the namespace as a ``from: Secrets`` source sees it: name, labels, verdict.

    ``problem`` is the verdict on its kubeconfig under the source's key (None: usable); the
    actor reads only the Secrets the source's shape matches.
    """

    name: str
    labels: Mapping[str, str]
    problem: tuple[Reason, str] | None = None
    #: With contexts All: each context's verdict (``problem`` is then the Secret's as a whole),
    #: of the first ``--max-contexts-per-secret`` by name.
    contexts: Verdicts = ()
    #: With contexts All: how many contexts past those the Secret has (none judged, no Cluster).
    beyond: int = attrs.field(default=0, kw_only=True)
    #: Its ownerReferences, all of them (vcluster's is no controller reference).
    owners: tuple[OwnerRef, ...] = attrs.field(default=(), kw_only=True)


def matched_secrets(
    shape: Shape, namespace: str, labels: Mapping[tuple[str, str], Mapping[str, str]]
) -> tuple[dict[str, Mapping[str, str]], list[Labelled]]:
    """The Secrets of ``namespace`` that ``shape`` matches, among those whose labels the watches
    keep (``labels``, by namespace and name): those that name a Cluster, by name with their
    labels, which need a verdict; and those whose name makes no Cluster name, already
    :class:`Labelled` with why, which need no read: they get no Cluster.
    """
    named: dict[str, Mapping[str, str]] = {}
    unnamed: list[Labelled] = []
    for (ns, name), kept in list(labels.items()):
        if ns != namespace:
            continue
        cluster = secretsource.cluster_name(shape, name, kept)
        if isinstance(cluster, str):
            named[name] = kept
        elif cluster is not None:
            unnamed.append(Labelled(name, kept))
    return named, unnamed


def plan_secrets(
    source: ClusterSource,
    secrets: Iterable[Labelled],
    existing: Mapping[str, Existing],
    *,
    secrets_listable: bool | None = True,
    not_listable_message: str = "",
    vclusters: vcluster.VClusterView | None = None,
) -> Plan:
    """:func:`plan` for a ``from: Secrets`` or ``from: VCluster`` source.

    The same rules as Cluster API's, over the Secrets' own labels: a Secret the shape matches
    keeps a Cluster named as ``spec.naming`` says, with the Secret's labels and the source's; a
    Secret that stops matching takes its Cluster with it; while the Secrets cannot be listed
    nothing is created or deleted. Two Secrets that name the same Cluster: the one the
    Cluster was made from keeps it, the other waits as a conflict (:func:`settle`).
    """
    assert source.shape is not None
    mine = mine_of(source, existing)
    waiting = waiting_on(secrets_listable, not_listable_message)
    if waiting is not None:
        return Plan(kept=tuple(sorted(mine)), blocked=waiting)
    from_vcluster = source.shape.tool == secretsource.VCLUSTER_APP
    if from_vcluster and (vclusters is None or not vclusters.readable):
        return Plan(kept=tuple(sorted(mine)), blocked=_VCLUSTERS_NOT_READABLE)
    candidates = []
    cut: list[Labelled] = []  # Secrets of more contexts than the manager makes Clusters of
    for secret in secrets:
        named = secretsource.cluster_name(source.shape, secret.name, secret.labels)
        if named is None:
            continue
        if isinstance(named, tuple):
            candidates.append(Candidate(secret.name, "", secret.labels, named, named))
        elif source.shape.all_contexts:
            candidates += _per_context(secret, mine)
            if secret.problem is None and secret.beyond > 0:
                cut.append(secret)
        else:
            # Not vcluster's own: as a Secret that stops matching, its Cluster (if ours) goes.
            refused = (
                vcluster.problem(secret.name, named, secret.owners, vclusters)
                if from_vcluster and vclusters is not None
                else None
            )
            candidates.append(
                Candidate(secret.name, named, secret.labels, refused or secret.problem, refused)
            )
    decided = settle(source, candidates, existing, mine)
    if not cut:
        return decided
    listed = tuple(bounds.contexts_cut(s.name, len(s.contexts), s.beyond) for s in cut)
    limit = max(len(s.contexts) for s in cut)
    return attrs.evolve(
        decided,
        not_imported=decided.not_imported + listed,
        bounded=(bounds.contexts_line(len(cut), limit), *decided.bounded),
    )


_VCLUSTERS_NOT_READABLE = (
    Reason.VCLUSTER_NOT_READABLE,
    "the manager may not list Services (labelled app: vcluster), and imports a vc-<name> "
    "Secret only while vcluster's Service <name> is in its namespace: grant it list and watch "
    "on services; its Clusters stay as they are meanwhile",
)


def _per_context(secret: Labelled, mine: Mapping[str, Existing]) -> list[Candidate]:
    """With contexts All: a candidate per context of the Secret, named after it.

    A Secret that cannot be read as a whole (its key gone, its YAML broken by a rotation) tells
    no contexts: the Clusters the source made of it stay, each with the Secret's problem, as a
    bad rotation never deletes a Cluster; a context removed from a good kubeconfig takes its
    Cluster with it.
    """
    if secret.problem is not None:
        kept = [
            Candidate(secret.name, e.name, secret.labels, secret.problem, None, e.context)
            for e in mine.values()
            if e.secret == secret.name and e.context is not None
        ]
        return kept or [Candidate(secret.name, "", secret.labels, secret.problem, secret.problem)]
    found = []
    if secret.beyond:
        # Past the bound nothing was judged: a Cluster the source made of a context there
        # (under a higher bound, or of a context since moved past it) stays as it is.
        judged = {context for context, _ in secret.contexts}
        found += [
            Candidate(secret.name, e.name, secret.labels, None, None, e.context)
            for e in mine.values()
            if e.secret == secret.name and e.context is not None and e.context not in judged
        ]
    for context, problem in secret.contexts:
        named = secretsource.context_cluster(context)
        if isinstance(named, tuple):
            found.append(Candidate(secret.name, "", secret.labels, named, named, context))
        else:
            found.append(Candidate(secret.name, named, secret.labels, problem, None, context))
    return found


def context_verdicts(
    secret: Mapping[str, Any], shape: Shape
) -> tuple[tuple[Reason, str] | None, Verdicts]:
    """With contexts All: why the Secret as a whole cannot be read, or each context's verdict.

    Each context is held to the same check as a Cluster's own, read with that context.
    """
    problem, verdicts, _ = judge_contexts(secret, shape)
    return problem, verdicts


def judge_contexts(
    secret: Mapping[str, Any], shape: Shape, limit: int | None = None
) -> tuple[tuple[Reason, str] | None, Verdicts, int]:
    """:func:`context_verdicts` of the first ``limit`` contexts by name, and how many more the
    Secret has: from one read of the kubeconfig, whatever the number of its contexts."""
    text = secret_data(secret, shape.key)
    if text is None:
        return kubeconfig_problem(secret, shape), (), 0
    read = read_contexts(text, limit)
    if read.total == 0:
        if read.refusal is not None:
            return (Reason.INVALID_KUBECONFIG, read.refusal.message), (), 0
        return (
            (
                Reason.INVALID_KUBECONFIG,
                "the kubeconfig has no contexts: with contexts All each context is a Cluster",
            ),
            (),
            0,
        )
    verdicts = tuple(
        (name, (Reason.INVALID_KUBECONFIG, v.message) if isinstance(v, Refusal) else None)
        for name, v in read.verdicts
    )
    return None, verdicts, read.total - len(verdicts)
