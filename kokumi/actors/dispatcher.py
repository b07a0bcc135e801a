"""The dispatcher: follows Clusters, Environments and Secrets, and owns uid -> Cluster actor.

Secrets are followed by :class:`SecretWatches`, per namespace that holds Kubeconfig Clusters.

It alone decides when a Cluster actor starts and ends, so no message can go to an actor that is
closing. With shards (``--shards``), it starts actors only for the Clusters of the shards this
replica holds, each shard's in a nursery of its own that :meth:`Dispatcher.serve_shard` runs inside
the shard's Lease: losing the Lease cancels exactly those actors.

Everything it tells an actor is a non-blocking mailbox call; the only awaits are for the watches
and the registry.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import trio

from kokumi.actors.cluster import ClusterActor
from kokumi.actors.context import Context
from kokumi.actors.environments import EnvironmentsActor
from kokumi.actors.pace import Pace
from kokumi.actors.registry import Registry
from kokumi.actors.secretwatch import SecretWatches
from kokumi.actors.sources import KEEP_LABELS, SecretsView, SourcesActor
from kokumi.core import api, limits
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.watch import Key, Resync, Store, WatchEvent, start_watch
from kokumi.objects import metadata_of

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

Events = trio.MemoryReceiveChannel[WatchEvent | Resync]


class Dispatcher:
    def __init__(self, context: Context, registry: Registry) -> None:
        self._context = context
        self._registry = registry
        self.clusters = Store()
        self.environments = Store()
        self._actors: dict[str, ClusterActor] = {}  # uid -> actor
        self._by_ref: dict[ClusterRef, str] = {}
        self._ending: dict[ClusterRef, ClusterActor] = {}  # stopped, still releasing
        self._by_secret: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        #: namespace -> the names of its Secrets that Clusters name (a list is told per namespace).
        self._secrets_in: defaultdict[str, set[str]] = defaultdict(set)
        self._selected: set[ClusterRef] = set()
        # shard -> the nursery its Cluster actors run in; without shards, shard 0 is everything.
        self._nurseries: dict[int, trio.Nursery] = {}
        sharding = context.options.sharding
        self._sharded = sharding is not None
        self._shard_of: Callable[[ClusterRef], int] = (
            (lambda ref: sharding.shard_of(ref.namespace, ref.name))
            if sharding is not None
            else (lambda _ref: 0)
        )
        self.environments_actor = EnvironmentsActor(
            context.client,
            self.clusters,
            self.environments,
            self._select,
            context.metrics,
            parse=self._parsed,
        )
        self._clusters_synced = trio.Event()
        self.secret_watches = SecretWatches(
            context.client,
            context.secret_versions,
            self._secret_changed,
            scope=context.options.secrets_scope,
            own_namespace=context.options.namespace,
            keep_labels=KEEP_LABELS,
            keep_labelled=True,
            on_listing=self._secrets_listed,
        )
        watches = self.secret_watches
        self.sources_actor = SourcesActor(
            context.client,
            self.clusters,
            SecretsView(
                hold=watches.hold,
                labels=watches.labels,
                owners=watches.owners,
                versions=context.secret_versions,
                listable=watches.listable,
                username=lambda: watches.username,
            ),
            context.secret_reads,
            own_namespace=context.options.namespace,
            backoff_initial=context.options.retry_initial,
            backoff_max=context.options.retry_max,
            limits=context.options.source_bounds,
        )
        registry.follow_liveness(self.is_current, self.exists)

    def is_current(self, ref: ClusterRef, uid: str) -> bool:
        """Whether ``uid`` is the Cluster object that exists now under ``ref``'s name.

        The registry asks before it acts on a message: a late message from a Cluster that was
        deleted (and perhaps created again) must not act for its successor. The Clusters watch
        says, not this replica's actors: while a shard's Lease changes hands within this
        replica (a renewal late, the Lease taken again) its actors are stopped and not yet
        started again, and a claim of a Cluster that never went was taken for a dead one's,
        released, and its Secret deleted under Argo CD.
        """
        found = self.clusters.get(ref.namespace, ref.name)
        return found is not None and metadata_of(found).get("uid") == uid

    def exists(self, ref: ClusterRef) -> bool:
        """Whether a Cluster of that name exists, as the Clusters watch shows it now; until its
        first list is in, every Cluster may (a line read at start keeps its waiters)."""
        return not self.clusters.synced or self.clusters.get(ref.namespace, ref.name) is not None

    @property
    def actors(self) -> list[ClusterActor]:
        return list(self._actors.values())

    async def wait_checked(self) -> None:
        """Return once every Cluster that exists now has been checked at least once."""
        await self._clusters_synced.wait()
        for actor in self.actors:
            await actor.checked.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        client = self._context.client
        async with trio.open_nursery() as nursery:
            if not self._sharded:
                self._nurseries[0] = nursery
            await nursery.start(self._context.secret_reads.run)
            await nursery.start(self.secret_watches.run)
            self._context.username = self.secret_watches.username
            watches: list[tuple[Any, Store | None, Callable[[Events], Any], bool]] = [
                (api.ENVIRONMENTS, self.environments, self._follow_environments, False),
                (api.CLUSTERS, self.clusters, self._follow_clusters, False),
            ]
            # A Cluster keeps the annotations its registration may carry, and no other.
            carried = self._context.options.carried_annotation()
            cluster_form = functools.partial(limits.kept, annotations=carried)
            for resource, store, follow, metadata_only in watches:
                # Kept as the limits say: an object over the bounds of tenant metadata is a
                # stub its actor reports ObjectTooLarge on, never 90,000 labels in memory.
                receive = await start_watch(
                    nursery,
                    client,
                    resource,
                    buffer=256,
                    store=store,
                    metadata_only=metadata_only,
                    form=cluster_form if resource == api.CLUSTERS else limits.kept,
                )
                nursery.start_soon(follow, receive)
            nursery.start_soon(self.environments_actor.run)
            await self._clusters_synced.wait()
            # After the Clusters' first list, so that its first plan finds them all.
            await nursery.start(self.sources_actor.run)
            task_status.started()

    # --- Clusters -----------------------------------------------------------------------------

    async def _follow_clusters(self, receive: Events) -> None:
        async for event in receive:
            self._context.metrics.clusters_seen(event)
            if isinstance(event, Resync):
                # The first list after a restart is the whole fleet: an actor started per
                # Cluster, ~0.4 ms each, so it is taken in slices. Events wait in the channel
                # meanwhile, and the Resync's objects are the truth they come after.
                pace = Pace()
                present = {_uid(o) for o in event.objects}
                for uid in set(self._actors) - present:
                    self._stop(uid)
                for obj in event.objects:
                    self._upsert(obj)
                    await pace.tick()
                if not self._clusters_synced.is_set():
                    refs = [_ref(o) for o in event.objects]
                    await self._registry.prune(refs)
                    self._clusters_synced.set()
                for namespace in {_ref(o).namespace for o in event.objects}:
                    self.environments_actor.changed(namespace)
                self.sources_actor.clusters_listed(event.objects)
                continue
            if event.type == "DELETED":
                self._stop(_uid(event.object))
            else:
                self._upsert(event.object)
            ref = _ref(event.object)
            self.environments_actor.changed(ref.namespace, ref.name)
            self.sources_actor.cluster_changed(event.object, event.type == "DELETED")

    def _parsed(self, obj: dict[str, Any]) -> api.Cluster | api.Invalid:
        """``obj`` typed: its actor's Cluster when that is of the same version, else parsed.

        The actor was told of the same event first (it is served here), so the Environments'
        index keeps the actor's object, not a second parse of each Cluster (10,000 fewer
        objects, and one parse less per event while a fleet onboards).
        """
        actor = self._actors.get(_uid(obj))
        if actor is not None:
            known = actor.cluster
            version = metadata_of(obj).get("resourceVersion")
            if version and known.metadata.resource_version == version:
                return known
        return self._context.options.parse_cluster(obj)

    def _upsert(self, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        cluster = self._context.options.parse_cluster(obj)
        running = self._actors.get(uid)
        if running is not None:
            self._index_secret(uid, running.cluster, cluster)
            running.update(cluster)
            return
        nursery = self._nurseries.get(self._shard_of(_ref(obj)))
        if nursery is None:
            return  # another replica serves this Cluster's shard
        actor = ClusterActor(self._context, cluster)
        ending = self._ending.pop(actor.ref, None)
        if ending is not None:
            ending.supersede()  # deleted and created again: the claims are the new actor's
        # Selection is left unknown: the Environments pass that this change triggers says it, so
        # a Cluster created again under an old name never starts out "selected" by its
        # predecessor's Environments.
        self._actors[uid] = actor
        self._by_ref[actor.ref] = uid
        self._index_secret(uid, None, cluster)
        nursery.start_soon(self._run_actor, uid, actor)

    async def _run_actor(self, uid: str, actor: ClusterActor) -> None:
        # An actor ends on its own after stop(), once it has released its server; the manager's
        # shutdown cancels the nursery. Nothing else ends an actor, so it needs no scope of its own.
        await actor.run()
        if self._ending.get(actor.ref) is actor:
            del self._ending[actor.ref]
        if self._actors.get(uid) is actor:
            del self._actors[uid]

    async def serve_shard(
        self, shard: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the Cluster actors of ``shard`` until cancelled (the shard's Lease body).

        The registry adopts the shard's Secrets first, so a holder's first claim finds its
        server held; on the way out the actors have stopped (the nursery is closed) before the
        registry disowns their claims, and this replica writes nothing for them any more.
        """
        await self._clusters_synced.wait()
        try:
            async with trio.open_nursery() as nursery:
                await self._registry.reshard()
                self._nurseries[shard] = nursery
                try:
                    await self._registry.prune([_ref(o) for o in self.clusters.values()])
                    # In slices (half the fleet's actors at 10,000 Clusters and two replicas
                    # took 500-600 ms in one step). Each Cluster is read from the watch's store
                    # when its turn comes: one deleted meanwhile is skipped, one changed is
                    # started as it is now, and events that come meanwhile find the shard's
                    # nursery and start or update their actors themselves.
                    # Soonest recorded due first: the actors of a taken shard start over
                    # seconds at 1,650 Clusters, and the Clusters due in those seconds were
                    # the ones a rolling upgrade made late.
                    keys = sorted(
                        (k for k in self.clusters if self._shard_of(_key_ref(k)) == shard),
                        key=self._recorded_due,
                    )
                    pace = Pace()
                    for namespace, name in keys:
                        await pace.tick()
                        obj = self.clusters.get(namespace, name)
                        if obj is not None:
                            self._upsert(obj)
                    for namespace in {namespace for namespace, _ in keys}:
                        self.environments_actor.changed(namespace or "")
                    log.info("serving shard %d: %d Clusters", shard, len(keys))
                    task_status.started()
                    await trio.sleep_forever()
                finally:
                    # At once, not once the actors have ended: a nursery waiting for its
                    # children takes no new actor that would outlive the Lease, and once they
                    # have ended it is closed before this task runs again (a Cluster event
                    # meanwhile found it and crashed the manager, at 10,000 Clusters). Only
                    # this nursery's entry: the shard may be served again already.
                    if self._nurseries.get(shard) is nursery:
                        del self._nurseries[shard]
        finally:
            for uid, actor in list(self._actors.items()):
                if self._shard_of(actor.ref) == shard:
                    self._forget(uid, actor)
            for ref in [r for r in self._ending if self._shard_of(r) == shard]:
                del self._ending[ref]
            self._registry.reshard_soon()
            log.info("stopped serving shard %d", shard)

    def _recorded_due(self, key: Key) -> float:
        """Where the Cluster ``key`` comes in a taken shard's start: by the due the last holder
        recorded for it; those it did not record last, in the store's order."""
        obj = self.clusters.get(*key)
        uid = str(obj.get("metadata", {}).get("uid", "")) if obj is not None else ""
        due = self._context.stop_record.due(uid)
        return math.inf if due is None else due

    def _forget(self, uid: str, actor: ClusterActor) -> None:
        del self._actors[uid]
        if self._by_ref.get(actor.ref) == uid:
            del self._by_ref[actor.ref]
        self._index_secret(uid, actor.cluster, None)

    def _stop(self, uid: str) -> None:
        actor = self._actors.pop(uid, None)
        if actor is None:
            return
        if self._by_ref.get(actor.ref) == uid:
            del self._by_ref[actor.ref]
        self._selected.discard(actor.ref)
        self._index_secret(uid, actor.cluster, None)
        # Let the actor release its server itself; it ends right after.
        actor.stop()
        self._ending[actor.ref] = actor

    def _index_secret(
        self,
        uid: str,
        old: api.Cluster | api.Invalid | None,
        new: api.Cluster | api.Invalid | None,
    ) -> None:
        for cluster, add in ((old, False), (new, True)):
            if isinstance(cluster, api.Cluster) and cluster.secret_ref is not None:
                key = (cluster.metadata.namespace, cluster.secret_ref.name)
                if add:
                    self._by_secret[key].add(uid)
                    self._secrets_in[key[0]].add(key[1])
                elif key in self._by_secret:
                    self._by_secret[key].discard(uid)
                    if not self._by_secret[key]:
                        del self._by_secret[key]
                        self._secrets_in[key[0]].discard(key[1])
                        if not self._secrets_in[key[0]]:
                            del self._secrets_in[key[0]]
        needs = new.metadata.namespace if isinstance(new, api.Cluster) and new.secret_ref else None
        self.secret_watches.hold(uid, needs)

    def _select(self, namespace: str, name: str, environments: tuple[str, ...]) -> None:
        ref = ClusterRef(namespace, name)
        if environments:
            self._selected.add(ref)
        else:
            self._selected.discard(ref)
        uid = self._by_ref.get(ref)
        if uid is not None and uid in self._actors:
            self._actors[uid].set_environments(environments)

    # --- Environments and Secrets -------------------------------------------------------------

    async def _follow_environments(self, receive: Events) -> None:
        async for event in receive:
            objects = event.objects if isinstance(event, Resync) else (event.object,)
            namespaces = {_ref(o).namespace for o in objects}
            if isinstance(event, Resync):
                # A deleted Environment's namespace must be recomputed too.
                namespaces |= {ref.namespace for ref in self._selected}
            for namespace in namespaces:
                self.environments_actor.environments_changed(namespace)

    def _secrets_listed(self, namespace: str | None) -> None:
        """A namespace's Secrets were listed or refused: its ClusterSources know it now, and
        the Clusters whose Secret the list did not hold learn that it is gone."""
        self.sources_actor.changed(namespace)
        if self.secret_watches.listable(namespace or "") is not True:
            return
        versions = self._context.secret_versions
        # That namespace's Secrets only: a thousand namespaces listed at a start must not each
        # walk every Secret of the fleet.
        listed = [namespace] if namespace is not None else list(self._secrets_in)
        for ns in listed:
            for name in self._secrets_in.get(ns, ()):
                if (ns, name) in versions:
                    continue
                for uid in self._by_secret.get((ns, name), ()):
                    actor = self._actors.get(uid)
                    if actor is not None:
                        actor.secret_gone()

    def _secret_changed(self, key: tuple[str, str], first: bool) -> None:
        """A followed Secret changed: the Clusters naming it check again (see SecretWatches),
        and the ClusterSources of its namespace look again."""
        self.sources_actor.secret_changed(key)
        for uid in self._by_secret.get(key, ()):
            actor = self._actors.get(uid)
            if actor is not None:
                if first:
                    actor.wake()
                else:
                    actor.secret_changed()


def _uid(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _key_ref(key: Key) -> ClusterRef:
    namespace, name = key
    return ClusterRef(namespace or "", name)


def _ref(obj: dict[str, Any]) -> ClusterRef:
    meta = obj.get("metadata", {})
    return ClusterRef(str(meta.get("namespace", "")), str(meta.get("name", "")))
