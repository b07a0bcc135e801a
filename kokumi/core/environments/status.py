"""What an Environment's status should say, as typed values: counts, and the few it holds back.

Pure, as the Cluster's status is (``now=None`` reads the clock, the one impure input). The
Environments actor keeps, per namespace, the figures this needs up to date per changed Cluster
(:class:`Summary`); the status stays bounded however many Clusters an Environment selects, and an
actor writes it only when it differs from what the object says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from kokumi.core import api
from kokumi.core.environments import selectors, targets
from kokumi.core.reasons import Reason

__all__ = [
    "LISTED",
    "Summary",
    "environment_status",
    "observed_environment_status",
    "selection_status",
]

LISTED: Final = 50
"""At most this many Clusters that do not deploy are named in an Environment's status.

The status must stay far under the API server's object limit (about 1.5 MB) however many Clusters
are selected, and a rewrite must stay cheap: every Cluster's own Ready condition has the detail,
so the Environment counts and names only the first few by name of those that do not deploy."""


def environment_status(
    environment: api.Environment | api.Invalid,
    clusters: Sequence[api.Cluster],
    *,
    listed: int = LISTED,
    now: str | None = None,
) -> api.EnvironmentStatus:
    """The status ``environment`` should have, given the Clusters of its namespace (by name).

    Bounded whatever the fleet: counts of the selected and deploying Clusters, and the first
    ``listed`` by name of those that do not deploy with why, plus how many more there are.
    Clusters that deploy are not listed: their number says it, and each Cluster's own Ready
    condition is what a reader looks at for one Cluster.
    """
    generation = environment.metadata.generation
    old = _environment_status_of(environment).conditions

    def ready(status: api.ConditionStatus, reason: str, message: str) -> tuple[api.Condition, ...]:
        condition = api.Condition("Ready", status, reason, message, observed_generation=generation)
        return api.set_condition(old, condition, now)

    if isinstance(environment, api.Invalid):
        return api.EnvironmentStatus(
            observed_generation=generation,
            conditions=ready("False", environment.reason, environment.message),
        )
    selector = selectors.parse(environment.spec.cluster_selector)
    if isinstance(selector, selectors.SelectorError):
        return api.EnvironmentStatus(
            observed_generation=generation,
            conditions=ready("False", Reason.INVALID_SELECTOR, selector.message),
        )
    selected = [c for c in clusters if selector.matches(c.metadata.labels)]
    read = [targets.selected_cluster(c) for c in selected]
    held = [
        (target, cluster)
        for target, cluster in zip(targets.targets(read), read, strict=True)
        if not isinstance(target, targets.Deploy)
    ]
    summary = Summary(len(selected), len(selected) - len(held), held[:listed], len(held))
    return selection_status(environment, selector, summary, now=now)


@attrs.frozen
class Summary:
    """What an Environment's status says of the Clusters it selects.

    From the Clusters themselves (:func:`environment_status`) or from the Environments actor's
    index, which keeps these figures up to date per changed Cluster."""

    selected: int
    deploying: int
    held: Sequence[tuple[targets.Target, targets.SelectedCluster]]  # the first few by name
    held_total: int


def selection_status(
    environment: api.Environment,
    selector: selectors.Selector,
    summary: Summary,
    *,
    now: str | None = None,
) -> api.EnvironmentStatus:
    """The status of a valid ``environment`` whose selected Clusters ``summary`` sums up."""
    generation = environment.metadata.generation
    old = _environment_status_of(environment).conditions

    def ready(status: api.ConditionStatus, reason: str, message: str) -> tuple[api.Condition, ...]:
        condition = api.Condition("Ready", status, reason, message, observed_generation=generation)
        return api.set_condition(old, condition, now)

    rows = tuple(
        api.TargetStatus(
            name=target.cluster,
            target=target.reason,
            # The Cluster's own reason where it is held, so that a reader sees why.
            reason=cluster.reason if isinstance(target, targets.ClusterNotReady) else target.reason,
            message=target.message,
        )
        for target, cluster in summary.held
    )
    selected = summary.selected
    deploying = summary.deploying
    more = summary.held_total - len(rows)
    if not selected:
        conditions = ready(
            "False",
            Reason.NO_CLUSTERS,
            f"no Cluster of namespace {environment.metadata.namespace} matches the selector "
            f"{selector}: label Clusters to match, or change spec.clusterSelector",
        )
    elif deploying == 0:
        where = (
            f"the first {len(rows)} in status.clusters, and {more} more"
            if more
            else "see status.clusters"
        )
        conditions = ready(
            "False",
            Reason.NO_CLUSTER_READY,
            f"none of the {selected} selected Clusters can be deployed to; {where}",
        )
    else:
        conditions = ready(
            "True", Reason.READY, f"{deploying} of {selected} selected Clusters deploy"
        )
    return api.EnvironmentStatus(
        observed_generation=generation,
        conditions=conditions,
        selected=selected,
        deploying=deploying,
        clusters=rows,
        more=more,
    )


def observed_environment_status(
    environment: api.Environment | api.Invalid,
) -> api.EnvironmentStatus | None:
    """The status the object has, an invalid one's too; ``None`` when it has none yet."""
    status = _environment_status_of(environment)
    return None if status == api.EnvironmentStatus() else status


def _environment_status_of(environment: api.Environment | api.Invalid) -> api.EnvironmentStatus:
    """The status the object has; an invalid one's too, so its transition time is kept."""
    if isinstance(environment, api.Environment):
        return environment.status
    status = environment.status
    return status if isinstance(status, api.EnvironmentStatus) else api.EnvironmentStatus()
