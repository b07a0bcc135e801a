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
  installed, a source reports ``ClusterAPINotReadable`` and changes nothing;
- the Clusters, through the dispatcher's store, which tells it of every change.

Each change marks its namespace; one loop takes the marked namespaces in turn and makes each
source's Clusters what its plan (:mod:`kokumi.core.sources.plan`) says, then writes its status
if it differs. A quiet fleet plans nothing and writes nothing; after a restart the plan finds every
Cluster as it should be, and the status byte-identical. A refused write, and a Secret whose read
was refused or failed (reported ``SecretNotReadable``), are retried for their namespace with
backoff (1 s doubling up to 2 min), a write's error logged once per change of error.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
import trio

from kokumi.actors.parsing import off_loop
from kokumi.actors.secretreads import SecretReads
from kokumi.actors.writes import replace_status
from kokumi.core import api, limits
from kokumi.core.reasons import Reason
from kokumi.core.secretaccess import not_listable_message, not_readable_message
from kokumi.core.sources import bounds, clusterapi, secretplan, secretsource, vcluster
from kokumi.core.sources.clusterapi import CAPI_CLUSTER_NAME, CAPI_CLUSTERS, CapiView, SecretView
from kokumi.core.sources.plan import (
    Existing,
    Plan,
    cluster_body,
    controller_of,
    existing_of,
    kubeconfig_problem,
)
from kokumi.core.sources.secretplan import Labelled, plan_secrets
from kokumi.core.sources.secretsource import Shape
from kokumi.core.sources.spec import (
    CAPI_KEY,
    CLUSTER_SOURCES,
    ClusterSource,
    SourceInvalid,
    parse_source,
)
from kokumi.core.sources.status import SourceStatus, status_of, status_patch
from kokumi.core.text import one_line
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import Client
from kokumi.kube.paths import resource_path
from kokumi.kube.watch import Resync, Store, WatchEvent, watch
from kokumi.kube.wire import METADATA_LIST
from kokumi.objects import Resource

__all__ = ["KEEP_LABELS", "SecretsView", "SourcesActor"]

log = logging.getLogger(__name__)

KEEP_LABELS = frozenset({CAPI_CLUSTER_NAME})
"""The Secret labels the sources need the Secret watches to keep."""

Key = tuple[str, str]
Contexts = tuple[tuple[str, tuple[Reason, str] | None], ...]
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
    contexts: tuple[tuple[str, tuple[Reason, str] | None], ...] = ()
    #: With contexts All: the contexts past the manager's bound (counted, never judged).
    beyond: int = 0


class SourcesActor:
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
        self._batch = batch
        self._bounds = limits if limits is not None else bounds.Bounds()
        self.sources = Store()
        self.capi = Store()
        self.capi_readable: bool | None = None  # None: not known yet
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
        await self._follow_listed(
            CAPI_CLUSTERS,
            None,
            self.capi,
            "capi_readable",
            "Cluster API's clusters",
            "ClusterAPINotReadable",
        )

    async def _follow_vcluster_services(self) -> None:
        """Watch vcluster's Services (labelled ``app: vcluster``), which tell vcluster's
        ``vc-<name>`` Secrets from planted ones; until they can be listed say they cannot."""
        await self._follow_listed(
            vcluster.SERVICES,
            vcluster.SERVICE_SELECTOR,
            self.vcluster_services,
            "vcluster_readable",
            "vcluster's Services",
            "VClusterNotReadable",
        )

    async def _follow_listed(
        self,
        resource: Resource,
        label_selector: str | None,
        store: Store,
        readable: Literal["capi_readable", "vcluster_readable"],
        what: str,
        reported: str,
    ) -> None:
        """Watch ``resource`` (metadata only) once it can be listed, into ``store``; until then
        ``readable`` is False and the sources that need it report ``reported``."""
        delay = 0.0
        said: str | None = None
        params = {"limit": "1"}
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            try:
                await self._client.request(
                    "GET", resource_path(resource), params=params, accept=METADATA_LIST
                )
                break
            except (errors.Forbidden, errors.NotFound) as exc:
                text = "not installed" if isinstance(exc, errors.NotFound) else "forbidden"
                if said != text:
                    # Not installed is a normal state (no Cluster API here); forbidden is a choice
                    # somebody made, or a mistake: worth a warning.
                    log.log(
                        logging.INFO if text == "not installed" else logging.WARNING,
                        "cannot read %s (%s): ClusterSources that need them report %s and"
                        " change nothing; retrying with backoff",
                        what,
                        text,
                        reported,
                    )
                    said = text
                if getattr(self, readable) is not False:
                    setattr(self, readable, False)
                    self.changed(None)
            except errors.KubeError as exc:
                if said != type(exc).__name__:
                    log.warning("cannot list %s: %s; retrying", what, exc)
                    said = type(exc).__name__
            delay = min(self._capi_backoff_max, max(1.0, delay * 2))
            await trio.sleep(delay / 2 + random.uniform(0, delay / 2))  # noqa: S311 (jitter)
        if said is not None:
            log.info("may read %s now", what)
        send, receive = trio.open_memory_channel[WatchEvent | Resync](64)
        assert self._nursery is not None
        await self._nursery.start(
            functools.partial(
                watch,
                self._client,
                resource,
                send,
                store=store,
                metadata_only=True,
                label_selector=label_selector,
                # Whoever may create them writes their metadata: kept within the bounds, as
                # the sources' own (a Service or a Cluster API cluster of 90,000 labels is a
                # stub here).
                form=limits.kept,
            )
        )
        async for event in receive:
            if isinstance(event, Resync):
                setattr(self, readable, True)
                self.changed(None)
            else:
                self.changed(str(event.object.get("metadata", {}).get("namespace", "")))

    # --- one namespace --------------------------------------------------------------------------

    async def _reconcile(self, namespace: str) -> None:
        listable = self._secrets.listable(namespace)
        if listable is None or not self.writes():
            return  # not known yet: a restart must not write a passing state
        self.passes += 1
        self._unread.discard(namespace)
        views: list[SecretView] | None = None  # Cluster API's, read once for all its sources
        capis = self.capi.in_namespace(namespace)
        capi = CapiView(
            bool(self.capi_readable),
            {
                str(o["metadata"].get("name")): dict(o["metadata"].get("labels") or {})
                for o in capis
            },
            {str(o["metadata"].get("name")): str(o["metadata"].get("uid") or "") for o in capis},
            {
                str(o["metadata"].get("name")): why
                for o in capis
                if (why := limits.over_bounds(o)) is not None
            },
        )
        clusters = self._clusters.named_in_namespace(namespace)
        existing = {name: existing_of(obj) for name, obj in clusters.items()}
        message = not_listable_message(namespace, self._secrets.username(), self._own_namespace)
        failed_any = False
        for obj in sorted(self.sources.in_namespace(namespace), key=_name):
            source = _source_of(obj)
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
                failed = await self._write(source, decided, clusters)
            status = status_of(source, decided, failed)
            failed_any |= bool(failed)
            failed_any |= not await self._write_status(obj, status)
        if namespace in self._behind:
            self._behind.discard(namespace)
            failed_any = True
        self._schedule_retry(namespace, failed_any or namespace in self._unread)

    async def _secret_views(self, namespace: str) -> list[SecretView]:
        """The namespace's Cluster API kubeconfig Secrets, each read once per new version."""
        found: dict[str, str] = {}
        for (ns, name), labels in list(self._secrets.labels.items()):
            if ns != namespace:
                continue
            cluster = clusterapi.capi_cluster_of(name, labels)
            if cluster is not None:
                found[name] = cluster
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
        named: dict[str, Mapping[str, str]] = {}
        unnamed: list[Labelled] = []
        for (ns, name), labels in list(self._secrets.labels.items()):
            if ns != namespace:
                continue
            cluster = secretsource.cluster_name(shape, name, labels)
            if isinstance(cluster, str):
                named[name] = labels
            elif cluster is not None:
                unnamed.append(Labelled(name, labels))
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
            read = await self._read(namespace, name, shape)
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

    async def _read(
        self, namespace: str, name: str, shape: Shape | None
    ) -> tuple[tuple[Reason, str] | None, Contexts, int] | Literal[False]:
        """The Secret's verdict (None: usable) and, with contexts All, each context's (the first
        by name, and how many more); or False when it is gone. Its data dies here, read in a
        worker thread: it is anybody's text (kokumi/actors/parsing.py)."""
        try:
            secret = await self._reads.get(namespace, name)
        except errors.NotFound:
            return False
        except errors.Forbidden:
            refused = not_readable_message(
                name, namespace, self._secrets.username(), self._own_namespace
            )
            return (Reason.SECRET_NOT_READABLE, refused), (), 0
        except errors.KubeError as exc:
            failed = f"reading Secret {name} failed ({type(exc).__name__}); Kokumi retries"
            return (Reason.SECRET_NOT_READABLE, failed), (), 0
        if shape is not None and shape.all_contexts:
            limit = self._bounds.contexts_per_secret
            return await off_loop(
                functools.partial(secretplan.judge_contexts, secret, shape, limit)
            )
        problem = await off_loop(functools.partial(kubeconfig_problem, secret, shape))
        return problem, (), 0

    async def _write(
        self,
        source: ClusterSource,
        decided: Plan,
        clusters: Mapping[str, dict[str, Any]],
    ) -> dict[str, str]:
        failed: dict[str, str] = {}
        ns = source.namespace
        # Creates side by side, a few at a time: a thousand new Secrets are a thousand POSTs.
        try:
            async with trio.open_nursery() as nursery:
                for desired in decided.create:
                    body = cluster_body(source, desired)
                    nursery.start_soon(
                        self._attempt, source, desired.name, "create", failed,
                        functools.partial(self.writer.create, api.CLUSTERS, body, namespace=ns),
                    )  # fmt: skip
        except* errors.Fenced as fenced:
            # Refused at their send, one or several: the pass stops once, as for one write (the
            # group itself went past `run`'s handler and ended the manager).
            raise errors.Fenced("creates not sent: this replica may not write now") from fenced
        for desired in decided.update:
            body = cluster_body(source, desired)
            kept = clusters.get(desired.name, {})
            if limits.over_bounds(kept) is not None:
                # Labels past the bounds were not kept, so they cannot be named to drop them:
                # the source's labels replace them all, in one conditional write.
                version = _version(clusters, desired.name)
                operations: list[dict[str, Any]] = [
                    {"op": "add", "path": "/metadata/labels", "value": dict(desired.labels)},
                    {"op": "add", "path": "/spec", "value": body["spec"]},
                ]
                if version is not None:
                    operations.insert(
                        0, {"op": "test", "path": "/metadata/resourceVersion", "value": version}
                    )
                await self._attempt(
                    source, desired.name, "update", failed,
                    functools.partial(
                        self.writer.patch_json, api.CLUSTERS, desired.name, operations,
                        namespace=ns,
                    ),
                )  # fmt: skip
                continue
            old = kept.get("metadata", {}).get("labels") or {}
            labels: dict[str, str | None] = {k: None for k in old if k not in desired.labels}
            labels.update(desired.labels)
            patch = {
                "metadata": {"labels": labels, "resourceVersion": _version(clusters, desired.name)},
                "spec": body["spec"],
            }
            await self._attempt(
                source, desired.name, "update", failed,
                functools.partial(
                    self.writer.patch_merge, api.CLUSTERS, desired.name, patch, namespace=ns
                ),
            )  # fmt: skip
        for name in decided.delete:
            uid = str(clusters.get(name, {}).get("metadata", {}).get("uid", "")) or None
            await self._attempt(
                source, name, "delete", failed,
                functools.partial(self.writer.delete, api.CLUSTERS, name, namespace=ns, uid=uid),
            )  # fmt: skip
        return failed

    async def _attempt(
        self,
        source: ClusterSource,
        cluster: str,
        verb: str,
        failed: dict[str, str],
        call: Callable[[], Awaitable[object]],
    ) -> None:
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
        log.info("ClusterSource %s/%s: %sd %s", source.namespace, source.name, verb[:-1], where)

    async def _write_status(self, obj: dict[str, Any], status: SourceStatus) -> bool:
        """Write the status if it differs; whether it is as it should be now."""
        meta = obj.get("metadata", {})
        patch = status_patch(obj.get("status"), status, api.now_rfc3339())
        if patch is None:
            return True
        try:
            await replace_status(
                self.writer,
                CLUSTER_SOURCES,
                str(meta.get("name")),
                str(meta.get("namespace")),
                str(meta.get("uid") or ""),
                patch,
            )
        except errors.Fenced:
            raise
        except errors.KubeError as exc:
            log.warning(
                "ClusterSource %s/%s: status write failed (%s); retrying",
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
            return False
        return True

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


def _source_of(obj: Mapping[str, Any]) -> ClusterSource | SourceInvalid:
    """The source as its plan reads it; one over the bounds of tenant metadata (kept as a stub,
    see :mod:`kokumi.core.limits`) plans nothing and says so in its Ready condition."""
    why = limits.over_bounds(obj)
    if why is None:
        return parse_source(obj)
    meta = obj.get("metadata", {})
    generation = meta.get("generation")
    return SourceInvalid(
        str(meta.get("name", "")),
        str(meta.get("namespace", "")),
        str(meta.get("uid", "")),
        generation if isinstance(generation, int) else 0,
        Reason.OBJECT_TOO_LARGE,
        why,
    )


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _version(clusters: Mapping[str, dict[str, Any]], name: str) -> str | None:
    version = clusters.get(name, {}).get("metadata", {}).get("resourceVersion")
    return version if isinstance(version, str) else None
