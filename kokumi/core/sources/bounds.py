"""How much one ClusterSource may make: the manager's bounds on contexts and Clusters.

Whoever may create a ClusterSource and a Secret chooses how many Clusters the manager makes,
checks and registers: one 46 KiB Secret of 1,000 contexts made 1,000 Clusters. The operator
sets the bounds (manager flags, not fields a tenant could raise); a source that reaches one
says so in its status, keeps the first by name, and never loses a Cluster it has for it.
Pure functions, for Hypothesis.
"""

from __future__ import annotations

from typing import Final

import attrs

from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import NotImported, Plan

__all__ = [
    "MAX_CLUSTERS_PER_SOURCE",
    "MAX_CONTEXTS_PER_SECRET",
    "Bounds",
    "cap_clusters",
    "contexts_cut",
]

MAX_CONTEXTS_PER_SECRET: Final = 100
"""Contexts of one Secret that become Clusters with ``contexts: All``: a fleet's kubeconfig of
a few dozen clusters fits; a Secret of thousands is somebody's mistake or a hostile one."""

MAX_CLUSTERS_PER_SOURCE: Final = 1000
"""Clusters one ClusterSource keeps: a thousand Cluster API clusters in one namespace, which the
fleet benchmark onboards in about a minute; past it, more sources or a raised bound."""

CONTEXTS_FLAG: Final = "--max-contexts-per-secret"
CLUSTERS_FLAG: Final = "--max-clusters-per-source"


@attrs.frozen
class Bounds:
    """The manager's bounds on what one source makes (docs/clustersource.md)."""

    # At least 1: a bound of 0 would keep nothing, which deleting the source does.
    contexts_per_secret: int = attrs.field(
        default=MAX_CONTEXTS_PER_SECRET, validator=attrs.validators.ge(1)
    )
    clusters_per_source: int = attrs.field(
        default=MAX_CLUSTERS_PER_SOURCE, validator=attrs.validators.ge(1)
    )


def contexts_cut(secret: str, judged: int, beyond: int) -> NotImported:
    """A Secret of more contexts than a Secret may make Clusters of: its line in the status."""
    return NotImported(
        secret,
        "",
        Reason.TOO_MANY_CONTEXTS,
        f"it has {judged + beyond:,} contexts and the manager makes Clusters of the first "
        f"{judged:,} by name ({CONTEXTS_FLAG}); the other {beyond:,} have none, and Clusters "
        f"made of them before stay: split the kubeconfig into Secrets of at most {judged:,} "
        "contexts",
    )


def contexts_line(cut: int, limit: int) -> tuple[Reason, str]:
    """The Ready condition's line when ``cut`` Secrets have more contexts than ``limit``."""
    return (
        Reason.TOO_MANY_CONTEXTS,
        f"{cut:,} matched Secret{'s' if cut != 1 else ''} ha{'ve' if cut != 1 else 's'} more "
        f"than {limit:,} contexts ({CONTEXTS_FLAG}), and only the first {limit:,} of each by "
        "name have Clusters",
    )


def cap_clusters(decided: Plan, limit: int) -> Plan:
    """``decided`` with at most ``limit`` Clusters of the source: existing ones all stay (a
    bound never deletes), and of the new ones the first by Secret and context are made; the rest
    are listed as ``TooManyClusters`` and made once there is room.

    The order is the plan's own (by Secret name, then context), so the same Secrets keep their
    Clusters pass after pass.
    """
    if decided.blocked is not None:
        return decided
    staying = len(decided.kept) + len(decided.update)
    room = max(0, limit - staying)
    if len(decided.create) <= room:
        return decided
    ordered = sorted(decided.create, key=lambda d: (d.secret, d.context or "", d.name))
    made, waiting = ordered[:room], ordered[room:]
    entries = tuple(
        NotImported(
            desired.secret,
            desired.name,
            Reason.TOO_MANY_CLUSTERS,
            f"the source keeps {staying + len(made):,} Clusters, as many as one ClusterSource "
            f"may ({CLUSTERS_FLAG} {limit:,}): this one is made once there is room, first by "
            "Secret name",
        )
        for desired in waiting
    )
    line = (
        Reason.TOO_MANY_CLUSTERS,
        f"{len(waiting):,} {'Cluster is' if len(waiting) == 1 else 'Clusters are'} not made: "
        f"one ClusterSource keeps at most {limit:,} "
        f"({CLUSTERS_FLAG}), the first by Secret name, and none is deleted for it; narrow "
        "spec.secretSelector or spec.selector, or split the Secrets among sources",
    )
    return attrs.evolve(
        decided,
        create=tuple(made),
        not_imported=decided.not_imported + entries,
        bounded=(*decided.bounded, line),
    )
