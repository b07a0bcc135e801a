"""Which Environments select which Clusters, and each Environment's targets.

Selection drives the registry: a Kubeconfig Cluster is registered while at least one Environment
of its namespace that deploys through Argo CD selects it. The actor recomputes one namespace at a
time, whenever a Cluster or an Environment of it changes, and writes an Environment's status only
when it differs from what the object says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from kokumi import api, selectors, targets
from kokumi.actors.context import Metrics, write_status
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.watch import Store
from kokumi.reasons import Reason

__all__ = ["LISTED", "EnvironmentsActor", "environment_status"]

LISTED = 50
"""At most this many Clusters that do not deploy are named in an Environment's status.

The status must stay far under the API server's object limit (about 1.5 MB) however many Clusters
are selected, and a rewrite must stay cheap: every Cluster's own Ready condition has the detail,
so the Environment counts and names only the first few by name of those that do not deploy."""

log = logging.getLogger(__name__)


class EnvironmentsActor:
    """Owns the selection per namespace; tells Cluster actors whether they are selected.

    ``select`` is called with (namespace, name, selected) and must not block: it sets a flag in a
    Cluster actor's mailbox.
    """

    def __init__(
        self,
        client: Client,
        clusters: Store,
        environments: Store,
        select: Callable[[str, str, bool], None],
        metrics: Metrics,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._clusters = clusters
        self._environments = environments
        self._select = select
        self._dirty: set[str] = set()
        self._wake = trio.Event()
        self._written: dict[tuple[str, str], dict[str, Any]] = {}
        self._parsed: dict[str, dict[str, tuple[str, api.Cluster | api.Invalid]]] = {}

    def changed(self, namespace: str) -> None:
        """Something in ``namespace`` changed: recompute it soon. Never blocks."""
        self._dirty.add(namespace)
        self._wake.set()

    def selected(self, namespace: str) -> set[str]:
        """Names of the Clusters of ``namespace`` that an Argo CD Environment selects now."""
        return _chosen(self._clusters_of(namespace), self._environments_of(namespace))

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            dirty, self._dirty = self._dirty, set()
            failed: set[str] = set()
            for namespace in sorted(dirty):
                try:
                    await self._reconcile(namespace)
                except errors.KubeError as exc:
                    log.warning("Environments of %s: %s; retrying", namespace, exc)
                    failed.add(namespace)
                except Exception:
                    # A bug costs one namespace a retry, never the manager.
                    log.exception("Environments of %s: unexpected error; retrying", namespace)
                    failed.add(namespace)
            if failed:
                # Only a failed write waits before its retry; changes that came in during the
                # pass have set the wake-up already and are handled at once.
                await trio.sleep(1)
                self._dirty |= failed
                self._wake.set()

    def _clusters_of(self, namespace: str) -> list[api.Cluster]:
        """The valid Clusters of ``namespace`` by name; each parsed once per resourceVersion.

        A pass over one namespace runs after every change there, so onboarding N Clusters makes
        about N passes: parsing all N each time made that quadratic, with the event loop blocked
        for the whole pass (half a second at 10,000 Clusters).
        """
        known = self._parsed.get(namespace, {})
        parsed: dict[str, tuple[str, api.Cluster | api.Invalid]] = {}
        for obj in self._clusters.in_namespace(namespace):
            meta = obj.get("metadata", {})
            name, version = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
            seen = known.get(name)
            if seen is None or seen[0] != version or not version:
                seen = (version, api.parse_cluster(obj))
            parsed[name] = seen
        if parsed:
            self._parsed[namespace] = parsed
        else:
            self._parsed.pop(namespace, None)
        return sorted(
            (c for _, c in parsed.values() if isinstance(c, api.Cluster)),
            key=lambda c: c.metadata.name,
        )

    def _environments_of(self, namespace: str) -> list[api.Environment | api.Invalid]:
        return [api.parse_environment(o) for o in self._environments.in_namespace(namespace)]

    async def _reconcile(self, namespace: str) -> None:
        clusters = self._clusters_of(namespace)
        environments = self._environments_of(namespace)
        chosen = _chosen(clusters, environments)
        for cluster in clusters:
            self._select(namespace, cluster.metadata.name, cluster.metadata.name in chosen)
        for environment in environments:
            await self._write(environment, environment_status(environment, clusters))

    async def _write(
        self, environment: api.Environment | api.Invalid, status: dict[str, Any]
    ) -> None:
        meta = environment.metadata
        key = (meta.namespace, meta.name)
        status_now = _status_of(environment)
        observed = None if status_now == api.EnvironmentStatus() else _observed(status_now)
        unchanged = (observed, self._written.get(key))
        if not await write_status(
            self._client, api.ENVIRONMENTS, meta, status, unchanged=unchanged
        ):
            return
        self._written[key] = status
        self._metrics.environment_status_writes += 1


def _chosen(
    clusters: list[api.Cluster], environments: list[api.Environment | api.Invalid]
) -> set[str]:
    """Names of ``clusters`` that at least one valid Environment of theirs selects."""
    chosen: set[str] = set()
    for environment in environments:
        if isinstance(environment, api.Invalid):
            continue
        selector = selectors.parse(environment.spec.cluster_selector)
        if isinstance(selector, selectors.Selector):
            chosen.update(c.metadata.name for c in clusters if selector.matches(c.metadata.labels))
    return chosen


def environment_status(
    environment: api.Environment | api.Invalid,
    clusters: list[api.Cluster],
    *,
    listed: int = LISTED,
) -> dict[str, Any]:
    """The status ``environment`` should have, given the Clusters of its namespace (by name).

    Bounded whatever the fleet: counts of the selected and deploying Clusters, and the first
    ``listed`` by name of those that do not deploy with why, plus how many more there are.
    Clusters that deploy are not listed: their number says it, and each Cluster's own Ready
    condition is what a reader looks at for one Cluster.
    """
    generation = environment.metadata.generation
    old = _status_of(environment).conditions
    if isinstance(environment, api.Invalid):
        condition = api.Condition("Ready", "False", Reason.INVALID_SPEC, environment.message)
        return _body(generation, api.set_condition(old, _gen(condition, generation)), [])
    selector = selectors.parse(environment.spec.cluster_selector)
    if isinstance(selector, selectors.SelectorError):
        condition = api.Condition("Ready", "False", Reason.INVALID_SELECTOR, selector.message)
        return _body(generation, api.set_condition(old, _gen(condition, generation)), [])
    selected = [c for c in clusters if selector.matches(c.metadata.labels)]
    found = targets.targets([targets.selected_cluster(c) for c in selected])
    held = [
        (t, cluster)
        for t, cluster in zip(found, selected, strict=True)
        if not isinstance(t, targets.Deploy)
    ]
    rows = [
        {
            "name": t.cluster,
            "target": t.reason,
            "reason": _reason(t, cluster),
            "message": t.message,
        }
        for t, cluster in held[:listed]
    ]
    deploying = len(selected) - len(held)
    more = len(held) - len(rows)
    if not selected:
        condition = api.Condition(
            "Ready",
            "False",
            Reason.NO_CLUSTERS,
            f"no Cluster of namespace {environment.metadata.namespace} matches the selector "
            f"{selector}: label Clusters to match, or change spec.clusterSelector",
        )
    elif deploying == 0:
        where = (
            f"the first {len(rows)} in status.clusters, and {more} more"
            if more
            else ("see status.clusters")
        )
        condition = api.Condition(
            "Ready",
            "False",
            Reason.NO_CLUSTER_READY,
            f"none of the {len(selected)} selected Clusters can be deployed to; {where}",
        )
    else:
        condition = api.Condition(
            "Ready",
            "True",
            Reason.READY,
            f"{deploying} of {len(selected)} selected Clusters deploy",
        )
    body = _body(generation, api.set_condition(old, _gen(condition, generation)), rows)
    body["selected"] = len(selected)
    body["deploying"] = deploying
    body["more"] = more
    return body


def _gen(condition: api.Condition, generation: int) -> api.Condition:
    return api.Condition(
        condition.type,
        condition.status,
        condition.reason,
        condition.message,
        observed_generation=generation,
    )


def _body(
    generation: int, conditions: tuple[api.Condition, ...], rows: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "observedGeneration": generation,
        "conditions": [api.converter.unstructure(c) for c in conditions],
        "selected": 0,
        "deploying": 0,
        "clusters": rows,
        "more": 0,
    }


def _status_of(environment: api.Environment | api.Invalid) -> api.EnvironmentStatus:
    """The status the object has; an invalid one's too, so its transition time is kept."""
    if isinstance(environment, api.Environment):
        return environment.status
    status = environment.status
    return status if isinstance(status, api.EnvironmentStatus) else api.EnvironmentStatus()


def _observed(status: api.EnvironmentStatus) -> dict[str, Any]:
    return {
        "observedGeneration": status.observed_generation,
        "conditions": [api.converter.unstructure(c) for c in status.conditions],
        "selected": status.selected,
        "deploying": status.deploying,
        "clusters": [
            {"name": t.name, "target": t.target, "reason": t.reason, "message": t.message}
            for t in status.clusters
        ],
        "more": status.more,
    }


def _reason(target: targets.Target, cluster: api.Cluster) -> str:
    """The Cluster's own reason where it is held (so a reader sees why), else the target's."""
    if isinstance(target, targets.ClusterNotReady):
        ready = cluster.ready
        return ready.reason if ready is not None else Reason.NOT_CHECKED
    return target.reason
