"""The ClusterSources actor: keeps one Cluster per kubeconfig Secret a source matches.

A source follows Cluster API's Secrets (``from: ClusterAPI``), or labelled Secrets of any tool
(``from: Secrets``, and the preset ``from: VCluster``): the same loop, the same writes, the same
rules (:mod:`kokumi.core.sources`), over what the Secret watches keep.

It follows, with watches only (never a periodic list):

- the ClusterSources, in a watch of its own (they are few and small);
- the Secrets, through the dispatcher's per-namespace metadata watches (:mod:`secretwatch`): a
  source holds its namespace as a Kubeconfig Cluster does, and the watches keep the labels and
  ownerReferences of Cluster API's Secrets. Whether a matched Secret's kubeconfig is usable needs
  its data: one read per new resourceVersion, through the Clusters' own reads (a GET each, or
  a paged list when many wait, :mod:`secretreads`), and only the verdict is kept (never the
  data);
- the Cluster API clusters (``clusters.cluster.x-k8s.io``, metadata only: their names, uids and
  labels), cluster-wide, once the manager may list them: a Secret is imported only while its
  cluster exists and controls it. While the manager may not list them, or Cluster API is not
  installed, a source reports ``ClusterAPINotReadable`` and changes nothing; a missing Cluster
  API is asked for again every few seconds, so that clusters are picked up within seconds of
  their CRD being applied;
- the Clusters, through the dispatcher's store, which tells it of every change.

Each change marks its namespace; one loop takes the marked namespaces in turn and makes each
source's Clusters what its plan (:mod:`kokumi.core.sources.plan`) says, then writes its status
if it differs. A quiet fleet plans nothing and writes nothing; after a restart the plan finds every
Cluster as it should be, and the status byte-identical. A refused write, and a Secret whose read
was refused or failed (reported ``SecretNotReadable``), are retried for their namespace with
backoff (1 s doubling up to 2 min), a write's error logged once per change of error.

The actor keeps its mailbox, its loop and what the outcomes change (the verdicts kept, the
namespaces to pass again, the errors logged); what it decides is the core's, and its reads
(:mod:`kokumi.actors.sourcereads`) and writes (:mod:`kokumi.actors.sourcewrites`) are functions
apart, which depend only on what they are given and what the API server answers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from kokumi.actors.secretreads import SecretReads
from kokumi.actors.sourcereads import Contexts, follow_listed, read_verdict
from kokumi.actors.sourcewrites import write_clusters, write_status
from kokumi.core import limits
from kokumi.core.reasons import Reason
from kokumi.core.secretaccess import not_listable_message
from kokumi.core.sources import bounds, clusterapi, secretsource, vcluster
from kokumi.core.sources.clusterapi import CAPI_CLUSTER_NAME, CAPI_CLUSTERS, SecretView
from kokumi.core.sources.plan import Existing, controller_of, existing_of
from kokumi.core.sources.secretplan import Labelled, matched_secrets, plan_secrets
from kokumi.core.sources.secretsource import Shape
from kokumi.core.sources.spec import CAPI_KEY, CLUSTER_SOURCES, ClusterSource, kept_source
from kokumi.core.sources.status import status_of
from kokumi.core.text import one_line
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import Client
from kokumi.kube.watch import Resync, Store, WatchEvent, watch

__all__ = ["KEEP_LABELS", "SecretsView", "SourcesActor"]

log = logging.getLogger(__name__)

KEEP_LABELS = frozenset({CAPI_CLUSTER_NAME})
"""The Secret labels the sources need the Secret watches to keep."""

Key = tuple[str, str]
VerdictKey = tuple[str, str, str, str]  # namespace, name, key, tool: a verdict depends on all


@attrs.frozen
class SecretsView:
    """What the actor reads of the dispatcher's Secret watches, as plain callables and maps.

    Keeps the actors independent: the dispatcher, which owns the watches, hands these over.
    """

    hold: Callable[[str, str | None], None]
    labels: Mapping[Key, Mapping[str, str]]
    owners: Mapping[Key, Sequence[Mapping[str, Any]]]  # their ownerReferences
    versions: Mapping[Key, str]
    listable: Callable[[str], bool | None]
    username: Callable[[], str | None]


@attrs.define
class _Verdict:
    version: str
    problem: tuple[Reason, str] | None
    #: With contexts All: each context's verdict; names and verdicts only, never the data.
    contexts: Contexts = ()
    #: With contexts All: the contexts past the manager's bound (counted, never judged).
    beyond: int = 0


#: The words of the log line a write of a source's Cluster ends in.
_DONE = {"create": "created", "update": "updated", "delete": "deleted"}


class SourcesActor:
    """Every ClusterSource of the manager, in one task: news marks a namespace, and one loop
    passes the marked namespaces in turn, so that a burst of news costs one pass of each."""

    def __init__(
        self,
        client: Client,
        clusters: Store,
        secrets: SecretsView,
        reads: SecretReads,
        *,
        own_namespace: str = "kokumi",
        backoff_initial: float = 1.0,
        backoff_max: float = 120.0,
        capi_backoff_max: float = 300.0,
        capi_missing_max: float = 5.0,
        batch: float = 0.1,
        limits: bounds.Bounds | None = None,
    ) -> None:
        self._client = client
        #: The client of its writes: with shards, fenced by shard 0's Lease.
        self.writer = client
        self._clusters = clusters
        self._secrets = secrets
        self._reads = reads
        self._own_namespace = own_namespace
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._capi_backoff_max = capi_backoff_max
        self._capi_missing_max = capi_missing_max
        self._batch = batch
        self._bounds = limits if limits is not None else bounds.Bounds()
        self.sources = Store()
        self.capi = Store()
        self.capi_readable: bool | None = None  # None: not known yet
        self.capi_installed = True  # False: no CRD clusters.cluster.x-k8s.io (a 404)
        self.vcluster_services = Store()
        self.vcluster_readable: bool | None = None  # None: not known yet
        self._verdicts: dict[VerdictKey, _Verdict] = {}
        self._dirty: set[str] = set()
        self._wake = trio.Event()
        self._retry: dict[str, Backoff] = {}
        #: Namespaces where a pass found a Secret it could not read: passed again with backoff,
        #: since neither a transient refusal's end nor a new RoleBinding changes the Secret.
        self._unread: set[str] = set()
        #: Namespaces whose last pass had a write refused as stale (see _attempt).
        self._behind: set[str] = set()
        self._clusters_seen: dict[Key, Existing] = {}
        self._writes = trio.CapacityLimiter(8)  # Cluster writes in flight
        self._failures: dict[tuple[str, str], FailureLog] = {}
        self._held: dict[str, str] = {}  # source uid -> namespace
        self._nursery: trio.Nursery | None = None
        #: Whether this replica writes now: with shards, only the one serving shard 0 does.
        self.writes: Callable[[], bool] = lambda: True
        self.passes = 0  # reconciles of one namespace, for tests and benchmarks

    # --- news -----------------------------------------------------------------------------------

    def changed(self, namespace: str | None) -> None:
        """Something in ``namespace`` changed (None: anywhere): its sources look again."""
        if namespace is None:
            self._dirty.update(self._held.values())
        elif namespace in self._held.values():
            self._dirty.add(namespace)
        else:
            return
        self._wake.set()

    def cluster_changed(self, obj: Mapping[str, Any], deleted: bool) -> None:
        """A Cluster changed: its namespace's sources look again only if what they read of it
        (name, controlling source, labels, Secret) changed; a status write changes none of it."""
        meta = obj.get("metadata", {})
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        seen = None if deleted else existing_of(obj)
        if self._clusters_seen.get(key) == seen:
            return
        if seen is None:
            self._clusters_seen.pop(key, None)
        else:
            self._clusters_seen[key] = seen
        self.changed(key[0])

    def clusters_listed(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """The Clusters' watch listed again: what the sources read of each starts afresh."""
        self._clusters_seen = {}
        for obj in objects:
            meta = obj.get("metadata", {})
            key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            self._clusters_seen[key] = existing_of(obj)
        self.changed(None)

    def secret_changed(self, key: Key) -> None:
        if key[0] in self._held.values():
            self.changed(key[0])

    # --- the loop -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            send, receive = trio.open_memory_channel[WatchEvent | Resync](64)
            await nursery.start(
                functools.partial(
                    watch, self._client, CLUSTER_SOURCES, send, store=self.sources, form=limits.kept
                )
            )
            nursery.start_soon(self._follow_sources, receive)
            nursery.start_soon(self._follow_capi)
            nursery.start_soon(self._follow_vcluster_services)
            task_status.started()
            while True:
                await self._wake.wait()
                # A burst (a thousand Secrets written, their Clusters made and checked) is
                # taken in one pass per tenth of a second, not one pass of the namespace per
                # event: that was a pass of all N Secrets for each of N events.
                await trio.sleep(self._batch)
                self._wake = trio.Event()
                while self._dirty:
                    namespace = min(self._dirty)
                    self._dirty.discard(namespace)
                    try:
                        await self._reconcile(namespace)
                    except errors.Fenced:
                        # Shard 0 went while a write waited: the replica that serves it now
                        # plans every namespace; the retry here finds it no longer writes.
                        self._schedule_retry(namespace, True)

    async def _follow_sources(
        self, receive: trio.MemoryReceiveChannel[WatchEvent | Resync]
    ) -> None:
        async for event in receive:
            objects = event.objects if isinstance(event, Resync) else (event.object,)
            if isinstance(event, Resync):
                present = {str(o["metadata"].get("uid")) for o in objects}
                for uid in set(self._held) - present:
                    self._release(uid)
            for obj in objects:
                meta = obj.get("metadata", {})
                uid, namespace = str(meta.get("uid", "")), str(meta.get("namespace", ""))
                if not isinstance(event, Resync) and event.type == "DELETED":
                    # Its Clusters are the garbage collector's: their ownerReference names it.
                    self._release(uid)
                    continue
                if self._held.get(uid) != namespace:
                    self._held[uid] = namespace
                    self._secrets.hold(f"clustersource:{uid}", namespace)
                self.changed(namespace)

    def _release(self, uid: str) -> None:
        namespace = self._held.pop(uid, None)
        self._secrets.hold(f"clustersource:{uid}", None)
        if namespace is not None and namespace not in self._held.values():
            for key in [k for k in self._verdicts if k[0] == namespace]:
                del self._verdicts[key]

    async def _follow_capi(self) -> None:
        """Watch Cluster API's clusters once they can be listed; until then say they cannot."""
        assert self._nursery is not None
        await follow_listed(
            self._client,
            self._nursery,
            CAPI_CLUSTERS,
            None,
            self.capi,
            what="Cluster API's clusters",
            reported="ClusterAPINotReadable",
            backoff_max=self._capi_backoff_max,
            missing_max=self._capi_missing_max,
            readable=functools.partial(setattr, self, "capi_readable"),
            changed=self.changed,
            installed=functools.partial(setattr, self, "capi_installed"),
        )

    async def _follow_vcluster_services(self) -> None:
        """Watch vcluster's Services (labelled ``app: vcluster``), which tell vcluster's
        ``vc-<name>`` Secrets from planted ones; until they can be listed say they cannot."""
        assert self._nursery is not None
        await follow_listed(
            self._client,
            self._nursery,
            vcluster.SERVICES,
            vcluster.SERVICE_SELECTOR,
            self.vcluster_services,
            what="vcluster's Services",
            reported="VClusterNotReadable",
            backoff_max=self._capi_backoff_max,
            missing_max=self._capi_missing_max,
            readable=functools.partial(setattr, self, "vcluster_readable"),
            changed=self.changed,
        )

    # --- one namespace --------------------------------------------------------------------------

    async def _reconcile(self, namespace: str) -> None:
        listable = self._secrets.listable(namespace)
        if listable is None or not self.writes():
            return  # not known yet: a restart must not write a passing state
        self.passes += 1
        self._unread.discard(namespace)
        views: list[SecretView] | None = None  # Cluster API's, read once for all its sources
        capi = clusterapi.view_of(
            bool(self.capi_readable),
            self.capi.in_namespace(namespace),
            installed=self.capi_installed,
        )
        clusters = self._clusters.named_in_namespace(namespace)
        existing = {name: existing_of(obj) for name, obj in clusters.items()}
        message = not_listable_message(namespace, self._secrets.username(), self._own_namespace)
        failed_any = False
        for obj in sorted(self.sources.in_namespace(namespace), key=_name):
            source = kept_source(obj)
            decided = None
            failed: dict[str, str] = {}
            if isinstance(source, ClusterSource):
                if source.shape is not None:
                    vclusters = None
                    if source.shape.tool == secretsource.VCLUSTER_APP:
                        if self.vcluster_readable is None:
                            continue  # not known yet: a restart must not write a passing state
                        vclusters = vcluster.view_of(
                            self.vcluster_readable,
                            [o["metadata"] for o in self.vcluster_services.in_namespace(namespace)],
                        )
                    decided = plan_secrets(
                        source,
                        await self._labelled(namespace, source.shape),
                        existing,
                        secrets_listable=listable,
                        not_listable_message=message,
                        vclusters=vclusters,
                    )
                elif self.capi_readable is None:
                    continue  # not known yet: a restart must not write a passing state
                else:
                    if views is None:
                        views = await self._secret_views(namespace)
                    decided = clusterapi.plan(
                        source,
                        views,
                        capi,
                        existing,
                        secrets_listable=listable,
                        not_listable_message=message,
                    )
                decided = bounds.cap_clusters(decided, self._bounds.clusters_per_source)
                attempt = functools.partial(self._attempt, source, failed)
                await write_clusters(self.writer, source, decided, clusters, attempt)
            status = status_of(source, decided, failed)
            failed_any |= bool(failed)
            failed_any |= not await write_status(self.writer, obj, status)
        if namespace in self._behind:
            self._behind.discard(namespace)
            failed_any = True
        self._schedule_retry(namespace, failed_any or namespace in self._unread)

    async def _secret_views(self, namespace: str) -> list[SecretView]:
        """The namespace's Cluster API kubeconfig Secrets, each read once per new version."""
        found = clusterapi.kubeconfig_secrets(namespace, self._secrets.labels)
        verdicts = await self._verdicts_of(namespace, found, None)
        views = []
        for name, verdict in verdicts.items():
            controller = controller_of(self._secrets.owners.get((namespace, name)))
            views.append(SecretView(name, found[name], verdict.problem, controller))
        return views

    async def _labelled(self, namespace: str, shape: Shape) -> list[Labelled]:
        """The namespace's Secrets ``shape`` matches, those that name a Cluster with a verdict.

        A matched Secret whose name makes no Cluster name needs no read: it gets no Cluster.
        """
        named, unnamed = matched_secrets(shape, namespace, self._secrets.labels)
        verdicts = await self._verdicts_of(namespace, named, shape)
        owners = self._secrets.owners
        return unnamed + [
            Labelled(
                n,
                named[n],
                verdict.problem,
                verdict.contexts,
                beyond=verdict.beyond,
                owners=vcluster.owners_of(owners.get((namespace, n))),
            )
            for n, verdict in verdicts.items()
        ]

    async def _verdicts_of(
        self, namespace: str, names: Iterable[str], shape: Shape | None
    ) -> dict[str, _Verdict]:
        """Each Secret's verdict, read once per new version (those gone meanwhile left out).

        The reads run side by side, as many as the manager's reads let (eight GETs, shared with
        the Clusters' own reads, or one list for many): 1,000 new Secrets one after another
        held the first pass for tens of seconds.
        """
        where = (
            (CAPI_KEY, "")
            if shape is None
            else (shape.key, f"{shape.tool}/{'all' if shape.all_contexts else 'current'}")
        )
        found: dict[str, _Verdict | None] = {}
        for name in names:
            version = self._secrets.versions.get((namespace, name), "")
            verdict = self._verdicts.get((namespace, name, *where))
            found[name] = verdict if verdict and verdict.version == version else None

        async def read(name: str) -> None:
            version = self._secrets.versions.get((namespace, name), "")
            read = await read_verdict(
                self._reads,
                namespace,
                name,
                shape,
                username=self._secrets.username,
                own_namespace=self._own_namespace,
                contexts_limit=self._bounds.contexts_per_secret,
            )
            if read is False:
                del found[name]  # deleted meanwhile: the watch says so next
                return
            problem, contexts, beyond = read
            verdict = _Verdict(version, problem, contexts, beyond)
            if problem is None or problem[0] is not Reason.SECRET_NOT_READABLE:
                self._verdicts[(namespace, name, *where)] = verdict
            else:
                self._unread.add(namespace)
            found[name] = verdict

        async with trio.open_nursery() as nursery:
            for name, verdict in list(found.items()):
                if verdict is None:
                    nursery.start_soon(read, name)
        result = {}
        for name, verdict in found.items():
            assert verdict is not None
            result[name] = verdict
        return result

    async def _attempt(
        self,
        source: ClusterSource,
        failed: dict[str, str],
        cluster: str,
        verb: str,
        call: Callable[[], Awaitable[object]],
    ) -> None:
        """Make one of a pass's writes, a few at a time, and take its outcome: a failure into
        ``failed`` (for the source's status) and the log once per change of error; a write
        refused as stale marks the namespace to pass again."""
        where = f"Cluster {source.namespace}/{cluster}"
        failures = self._failures.setdefault(
            (source.namespace, cluster),
            FailureLog(log, f"ClusterSource {source.namespace}/{source.name}: {verb} {where}"),
        )
        try:
            async with self._writes:
                await call()
        except (errors.AlreadyExists, errors.NotFound, errors.Conflict):
            # The store is behind the server: its watch brings what is there, and the next
            # pass plans from it. Not a failure to report, but a pass again after the backoff:
            # a conflict is not always news on its way (a write may be refused as stale when
            # the store has it all), and a Cluster a user edited would stay as they left it.
            self._behind.add(source.namespace)
            return
        except errors.Fenced:
            raise  # this replica stopped writing: the whole pass stops (see run)
        except errors.KubeError as exc:
            failures.failed(exc)
            failed[cluster] = one_line(f"{verb} of {where} failed ({exc}); Kokumi retries")
            return
        failures.recovered()
        log.info("ClusterSource %s/%s: %s %s", source.namespace, source.name, _DONE[verb], where)

    def _schedule_retry(self, namespace: str, failed: bool) -> None:
        if not failed:
            self._retry.pop(namespace, None)
            return
        backoff = self._retry.setdefault(
            namespace, Backoff(self._backoff_initial, self._backoff_max)
        )
        delay = backoff.next()
        assert self._nursery is not None
        self._nursery.start_soon(self._again_after, namespace, delay)

    async def _again_after(self, namespace: str, delay: float) -> None:
        await trio.sleep(delay)
        self.changed(namespace)


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))
