"""Which Environments select which Clusters, and each Environment's targets.

Selection drives the registry: a Kubeconfig Cluster is registered while at least one Environment
of its namespace that deploys through Argo CD selects it. The actor recomputes one namespace at a
time, whenever a Cluster or an Environment of it changes, and writes an Environment's status only
when it differs from what the object says, and at most once every :data:`STATUS_PACE` seconds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

from kokumi.actors.metrics import Metrics
from kokumi.actors.pace import Pace
from kokumi.actors.writes import write_status
from kokumi.core import api
from kokumi.core.environments import selectors
from kokumi.core.environments.selection import Entry, NamespaceIndex
from kokumi.core.environments.status import (
    LISTED,
    environment_status,
    observed_environment_status,
    selection_status,
)
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.watch import Store

__all__ = ["LISTED", "STATUS_PACE", "EnvironmentsActor", "environment_status"]

log = logging.getLogger(__name__)

STATUS_PACE = 1.0
"""Seconds at least between two status writes of one Environment.

Its counts change with every Cluster that becomes Ready or registered: while 10,000 Clusters
onboarded, the one Environment selecting them all was written 6,727 times, a write for every
second Cluster, each on the hub's two cores beside the Clusters' own. A change that comes
sooner is written when the second is up, with whatever the namespace says then; the selection
itself (which drives the registry) is never held back.
"""


class EnvironmentsActor:
    """Owns the selection per namespace; tells Cluster actors which Environments select them.

    ``select`` is called with (namespace, name, the names of the Environments that select it,
    sorted; none: not selected) and must not block: it sets a slot in a Cluster actor's mailbox.
    """

    def __init__(
        self,
        client: Client,
        clusters: Store,
        environments: Store,
        select: Callable[[str, str, tuple[str, ...]], None],
        metrics: Metrics,
        parse: Callable[[dict[str, Any]], api.Cluster | api.Invalid] = api.parse_cluster,
    ) -> None:
        self._client = client
        # How a watched Cluster becomes typed: the dispatcher's hands over its actor's Cluster
        # when it is of the same version, so that the index and the actor share one object.
        self._parse = parse
        #: The client of its status writes: with shards, fenced by shard 0's Lease.
        self.writer = client
        self._metrics = metrics
        self._clusters = clusters
        self._environments = environments
        self._select = select
        self._dirty: dict[str, _Work] = {}
        self._wake = trio.Event()
        self._written: dict[tuple[str, str], api.EnvironmentStatus] = {}
        # When each Environment's status was last written, and the namespaces whose statuses
        # wait for their STATUS_PACE to pass: due then.
        self._wrote_at: dict[tuple[str, str], float] = {}
        self._held: dict[str, float] = {}
        #: Until when this replica may write Environments' status (None: another one does;
        #: with shards, the holder of shard 0, under that Lease's renew deadline).
        self.writes_until: Callable[[], float | None] = lambda: math.inf
        # Per namespace: the selection index, and per Cluster the object (and resourceVersion)
        # the index last took in, so that a pass looks again only at what the watch changed.
        self._index: dict[str, NamespaceIndex] = {}
        self._known: dict[str, dict[str, tuple[dict[str, Any], str]]] = {}
        self._environment_objects: dict[
            str, dict[str, tuple[dict[str, Any], api.Environment | api.Invalid]]
        ] = {}

    def changed(self, namespace: str, name: str | None = None) -> None:
        """Something in ``namespace`` changed: recompute it soon. Never blocks.

        ``name`` names the Cluster that changed: only it is looked at again, and its actor is
        told its selection again (its actor may be new). Without a name, every Cluster of the
        namespace is compared with what the index saw (a relist) and told its selection.
        """
        if name is not None:
            self._dirty.setdefault(namespace, _Work()).names.add(name)
        else:
            # A relist: a namespace whose Clusters all went meanwhile is in no event, so every
            # namespace the index knows is compared too (by object identity: cheap).
            for each in {namespace, *self._known}:
                self._dirty.setdefault(each, _Work()).scan = True
        self._wake.set()

    def environments_changed(self, namespace: str) -> None:
        """An Environment of ``namespace`` changed; its Clusters did not. Never blocks."""
        self._dirty.setdefault(namespace, _Work())
        self._wake.set()

    def selected(self, namespace: str) -> set[str]:
        """Names of the Clusters of ``namespace`` an Environment selected at the last pass."""
        index = self._index.get(namespace)
        return set() if index is None else index.selected_names()

    async def run(self) -> None:
        while True:
            with trio.move_on_at(min(self._held.values(), default=math.inf)):
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            for namespace, due in list(self._held.items()):
                if due <= now:
                    del self._held[namespace]
                    self._dirty.setdefault(namespace, _Work())
            dirty, self._dirty = self._dirty, {}
            failed: dict[str, _Work] = {}
            for namespace in sorted(dirty):
                try:
                    await self._reconcile(namespace, dirty[namespace])
                except errors.Fenced:
                    # Shard 0 went while the write waited: whoever serves it now computes
                    # every namespace; a retry here finds it no longer writes, and stops.
                    failed[namespace] = _Work()
                except errors.KubeError as exc:
                    log.warning("Environments of %s: %s; retrying", namespace, exc)
                    failed[namespace] = _Work()
                except Exception:
                    # A bug costs one namespace a retry, never the manager: the retry compares
                    # every Cluster again, so nothing half-done is kept.
                    log.exception("Environments of %s: unexpected error; retrying", namespace)
                    self._index.pop(namespace, None)
                    self._known.pop(namespace, None)
                    self._environment_objects.pop(namespace, None)
                    failed[namespace] = _Work(scan=True)
            if failed:
                # Only a failed write waits before its retry; changes that came in during the
                # pass have set the wake-up already and are handled at once.
                await trio.sleep(1)
                for namespace, work in failed.items():
                    self._dirty.setdefault(namespace, _Work()).merge(work)
                self._wake.set()

    def _environments_of(self, namespace: str) -> list[api.Environment | api.Invalid]:
        """The Environments of ``namespace``, each parsed once per object the watch brought."""
        known = self._environment_objects.get(namespace, {})
        now: dict[str, tuple[dict[str, Any], api.Environment | api.Invalid]] = {}
        for name, obj in self._environments.named_in_namespace(namespace).items():
            seen = known.get(name)
            now[name] = (
                seen
                if seen is not None and seen[0] is obj
                else (
                    obj,
                    api.parse_environment(obj),
                )
            )
        if now:
            self._environment_objects[namespace] = now
        else:
            self._environment_objects.pop(namespace, None)
        return [parsed for _, parsed in now.values()]

    async def _reconcile(self, namespace: str, work: _Work) -> None:
        """Bring the namespace's index up to date with the watches, tell the Cluster actors whose
        selection may have changed, and write the Environments' statuses.

        The index changes only here, in this one task, so the statuses read one consistent state
        even though the work checkpoints every few milliseconds (``Pace``) to let the checks run.
        """
        index = self._index.get(namespace)
        if index is None:
            # A namespace new to the index (or after a failure) is taken in whole, whatever
            # changed: an Environment's event may come before its Clusters' first events.
            index = self._index[namespace] = NamespaceIndex()
            work.scan = True
        pace = Pace()
        # Both watches' objects are read here, at one instant, before the first checkpoint.
        environments = self._environments_of(namespace)
        known = self._known.setdefault(namespace, {})
        if work.scan:
            objects = self._clusters.named_in_namespace(namespace)
            names: Iterable[str] = [
                name
                for name in {*objects, *known}
                if objects.get(name) is not known.get(name, (None,))[0]
            ]
        else:
            names = sorted(work.names)
            objects = {name: o for name in names if (o := self._clusters.get(namespace, name))}
        selectors_now: dict[str, selectors.Selector] = {}
        for environment in environments:
            if isinstance(environment, api.Environment):
                selector = selectors.parse(environment.spec.cluster_selector)
                if isinstance(selector, selectors.Selector):
                    selectors_now[environment.metadata.name] = selector
        for name in index.environments():
            if name not in selectors_now:
                index.drop_environment(name)
        for name, selector in selectors_now.items():
            if index.selector(name) != selector:
                for _ in index.set_environment(name, selector):
                    await pace.tick()

        for name in names:
            obj = objects.get(name)
            if obj is None:
                known.pop(name, None)
                index.remove(name)
                continue
            version = str(obj.get("metadata", {}).get("resourceVersion", ""))
            seen = known.get(name)
            known[name] = (obj, version)
            if seen is not None and version and seen[1] == version:
                continue  # the same version again (a relist): nothing to parse
            cluster = self._parse(obj)
            if isinstance(cluster, api.Cluster):
                index.put(Entry.of(cluster))
            else:
                index.remove(name)
            await pace.tick()
        if not known:
            del self._known[namespace]

        tell = set(index.entries) if work.scan else (index.touched | work.names)
        index.touched = set()
        for name in sorted(tell):
            if name in index.entries:
                self._select(namespace, name, index.selecting(name))
                await pace.tick()

        for environment in environments:
            if self._paced(environment):
                continue
            chosen = selectors_now.get(environment.metadata.name)
            now = api.now_rfc3339()
            if chosen is None or not isinstance(environment, api.Environment):
                status = environment_status(environment, [], now=now)
            else:
                summary = index.summary(environment.metadata.name, LISTED)
                status = selection_status(environment, chosen, summary, now=now)
            await self._write(environment, status)
        if not index.entries and not selectors_now:
            del self._index[namespace]

    def _paced(self, environment: api.Environment | api.Invalid) -> bool:
        """Whether the status of ``environment`` was written less than a second ago.

        Its figures then wait, and the namespace is computed again when the second is up (with
        whatever has come meanwhile). They are not even computed now: while a fleet onboards,
        every Cluster's events make a pass, and a status built on each of them to be thrown
        away was a twentieth of the manager's CPU.
        """
        meta = environment.metadata
        due = self._wrote_at.get((meta.namespace, meta.name), -math.inf) + STATUS_PACE
        if trio.current_time() >= due:
            return False
        self._held[meta.namespace] = min(self._held.get(meta.namespace, math.inf), due)
        return True

    async def _write(
        self, environment: api.Environment | api.Invalid, status: api.EnvironmentStatus
    ) -> None:
        meta = environment.metadata
        key = (meta.namespace, meta.name)
        unchanged = (observed_environment_status(environment), self._written.get(key))
        until = self.writes_until()
        if until is None:
            return
        if status in unchanged:
            return
        now = trio.current_time()
        written = False
        with trio.move_on_at(until):
            written = await write_status(
                self.writer, api.ENVIRONMENTS, meta, status, unchanged=unchanged
            )
        if not written:
            return
        self._wrote_at[key] = now
        self._written[key] = status
        self._metrics.environment_status_writes += 1


@attrs.define
class _Work:
    """What changed in one namespace since its last pass."""

    scan: bool = False  # compare every Cluster with the index (after a relist)
    names: set[str] = attrs.field(factory=set)  # Clusters the watch changed

    def merge(self, other: _Work) -> None:
        self.scan = self.scan or other.scan
        self.names |= other.names
