"""Which Environments select which Clusters, and each Environment's targets.

Selection drives the registry: a Kubeconfig Cluster is registered while at least one Environment
of its namespace that deploys through Argo CD selects it. The actor recomputes one namespace at a
time, whenever a Cluster or an Environment of it changes, and writes an Environment's status only
when it differs from what the object says.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from kokumi import api, selectors
from kokumi.actors.context import Metrics, write_status
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.watch import Store
from kokumi.status import LISTED, environment_status, observed_environment_status

__all__ = ["LISTED", "EnvironmentsActor", "environment_status"]

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
        self._written: dict[tuple[str, str], api.EnvironmentStatus] = {}
        self._parsed: dict[str, dict[str, tuple[str, api.Cluster | api.Invalid]]] = {}
        #: Until when this replica may write Environments' status (None: another one does;
        #: with shards, the holder of shard 0, under that Lease's renew deadline).
        self.writes_until: Callable[[], float | None] = lambda: math.inf

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
            status = environment_status(environment, clusters, now=api.now_rfc3339())
            await self._write(environment, status)

    async def _write(
        self, environment: api.Environment | api.Invalid, status: api.EnvironmentStatus
    ) -> None:
        meta = environment.metadata
        key = (meta.namespace, meta.name)
        unchanged = (observed_environment_status(environment), self._written.get(key))
        until = self.writes_until()
        if until is None:
            return
        written = False
        with trio.move_on_at(until):
            written = await write_status(
                self._client, api.ENVIRONMENTS, meta, status, unchanged=unchanged
            )
        if not written:
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
