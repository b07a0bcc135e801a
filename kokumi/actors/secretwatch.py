"""Secrets the manager follows: per namespace that holds Kubeconfig Clusters, or cluster-wide.

The manager needs to know when a kubeconfig Secret changes (a new version checks again at once),
and nothing else about Secrets, so it follows them as metadata only. Where it may do so is the
platform team's choice:

- ``namespace`` scope (the default): the manager may read Secrets only where the ClusterRole
  ``kokumi-manager-secrets`` is bound to it with a RoleBinding, namespace by namespace, as the spec
  grants the admin ``kokumi-cluster-credentials``. So a watch runs in each namespace that holds at
  least one Kubeconfig Cluster, starts with the first and stops with the last. Kokumi's own
  namespace and ``kokumi-signing`` hold signing keys and login Secrets, and stay unread.
- ``cluster`` scope: one watch of every Secret, for teams that bind ``kokumi-manager-secrets``
  cluster-wide and accept that the manager may then read every Secret of the cluster.

A namespace whose Secrets the manager may not list is not an error of the manager: the watch
there logs once, backs off (up to five minutes) and tries again, and the Clusters of that
namespace report ``SecretNotReadable`` with the RoleBinding that fixes it (their own read of the
Secret is what is refused). Once the binding exists, the first list wakes them.

The ClusterSources follow Secrets through these same watches (a source holds its namespace as a
Cluster does): they need the labels of Cluster API's kubeconfig Secrets, which the metadata
carries, so the watches keep the labels of the Secrets that carry a label of ``keep_labels`` (or,
with ``keep_labelled``, of every Secret that carries a label: a ``from: Secrets`` source selects
Secrets by labels of its author's choice), and their ownerReferences (a source imports only a
Secret its Cluster API cluster controls), and say when a namespace's Secrets have been listed
or refused (``on_listing``). What a source needs of the data (is the kubeconfig usable?) it reads
with one GET per new version of a matched Secret, as a Cluster reads its own: a full watch would
hold every Secret of the namespace in memory, kubeconfigs and all, to learn what one GET per
change tells.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, MutableMapping
from typing import Any

import attrs
import trio

from kokumi.core import limits
from kokumi.core.secretaccess import (
    MANAGER_SECRETS_ROLE,
    PROTECTED_NAMESPACES,
    SecretScope,
    binding_command,
    not_readable_message,
    subject_flag,
)
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.paths import resource_path
from kokumi.kube.resources import SECRETS
from kokumi.kube.watch import Resync, WatchEvent, start_watch
from kokumi.kube.wire import METADATA_LIST

__all__ = [
    "MANAGER_SECRETS_ROLE",
    "SecretWatches",
    "binding_command",
    "not_readable_message",
    "subject_flag",
    "who_am_i",
]

log = logging.getLogger(__name__)


Key = tuple[str, str]  # (namespace, name) of a Secret


async def who_am_i(client: Client) -> str | None:
    """The manager's own username, as the hub authenticates it; None if the hub will not say.

    Every authenticated identity may create a SelfSubjectReview, so this needs no RBAC; the name
    goes into the fix a ``SecretNotReadable`` message gives.
    """
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        review = await client.request(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", json=body
        )
    except errors.KubeError as exc:
        log.info("cannot tell the manager's own identity (%s); fixes name kokumi:kokumi", exc)
        return None
    username = (review.get("status") or {}).get("userInfo", {}).get("username")
    return username if isinstance(username, str) and username else None


@attrs.define
class _Watch:
    scope: trio.CancelScope
    holders: set[str] = attrs.field(factory=set)


class SecretWatches:
    """The Secret watches of one manager, and the versions they saw.

    ``versions`` maps (namespace, name) to the resourceVersion of every Secret followed; a Cluster
    actor compares it with the version its last check read. ``changed(key, first)`` is told of
    every Secret whose version changed; ``first`` is true for what a namespace's first list
    brings, when nobody can have been told of a change yet, so that a Cluster only compares
    versions instead of checking again for sure.
    """

    def __init__(
        self,
        client: Client,
        versions: MutableMapping[Key, str],
        changed: Callable[[Key, bool], None],
        *,
        scope: SecretScope = SecretScope.NAMESPACE,
        own_namespace: str = "kokumi",
        forbidden_backoff_max: float = 300.0,
        keep_labels: frozenset[str] = frozenset(),
        keep_labelled: bool = False,
        on_listing: Callable[[str | None], None] | None = None,
    ) -> None:
        self._client = client
        self._versions = versions
        self._changed = changed
        self.scope = scope
        self._own_namespace = own_namespace
        self._forbidden_backoff_max = forbidden_backoff_max
        self._watches: dict[str | None, _Watch] = {}
        self._held: dict[str, str] = {}  # holder -> the namespace it needs followed
        self._nursery: trio.Nursery | None = None
        self.username: str | None = None
        self._keep_labels = keep_labels
        self._keep_labelled = keep_labelled
        #: (namespace, name) -> labels, of the Secrets followed that carry a ``keep_labels`` key.
        self.labels: dict[Key, dict[str, str]] = {}
        #: (namespace, name) -> ownerReferences, of the same Secrets.
        self.owners: dict[Key, list[dict[str, Any]]] = {}
        self._listable: dict[str | None, bool] = {}
        self._on_listing = on_listing
        #: The Secrets followed whose metadata is over the bounds, each logged once.
        self.over_bounds: set[Key] = set()

    def listable(self, namespace: str) -> bool | None:
        """Whether Secrets of ``namespace`` have been listed (True), refused (False), or not yet."""
        if self.scope is SecretScope.CLUSTER:
            return self._listable.get(None)
        return self._listable.get(namespace)

    def _listing(self, namespace: str | None, listable: bool) -> None:
        self._listable[namespace] = listable
        if self._on_listing is not None:
            self._on_listing(namespace)

    @property
    def namespaces(self) -> frozenset[str | None]:
        """The namespaces followed now (``None``: every namespace)."""
        return frozenset(self._watches)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.username = await who_am_i(self._client)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.scope is SecretScope.CLUSTER:
                # Not awaited: Clusters check without it (each reads its Secret), and a refused
                # cluster-wide list must not hold the manager's start.
                self._watches[None] = _Watch(trio.CancelScope())
                nursery.start_soon(self._follow, None, self._watches[None].scope)
            task_status.started()
            await trio.sleep_forever()

    def hold(self, holder: str, namespace: str | None) -> None:
        """``holder`` (a Cluster's uid) needs the Secrets of ``namespace`` followed (None: none).

        Called on every change of a Cluster: a Cluster that stays a Kubeconfig Cluster of its
        namespace changes nothing, so an edit never restarts the namespace's watch.
        """
        old = self._held.pop(holder, None)
        if namespace is not None:
            self._held[holder] = namespace
        if old == namespace or self.scope is SecretScope.CLUSTER:
            return
        if namespace is not None:
            running = self._watches.get(namespace)
            if running is None:
                running = self._watches[namespace] = _Watch(trio.CancelScope())
                assert self._nursery is not None, "hold() before run() started"
                self._nursery.start_soon(self._follow, namespace, running.scope)
                log.debug("following Secrets in namespace %s", namespace)
            running.holders.add(holder)
        if old is not None:
            self._release(old, holder)

    def _release(self, namespace: str, holder: str) -> None:
        """The last holder of ``namespace`` gone: its watch stops, its versions are forgotten."""
        running = self._watches.get(namespace)
        if running is None:
            return
        running.holders.discard(holder)
        if not running.holders:
            del self._watches[namespace]
            running.scope.cancel()
            for key in [k for k in self._versions if k[0] == namespace]:
                del self._versions[key]
            for key in [k for k in self.labels if k[0] == namespace]:
                del self.labels[key]
                self.owners.pop(key, None)
            self.over_bounds -= {k for k in self.over_bounds if k[0] == namespace}
            self._listable.pop(namespace, None)
            log.debug("no longer following Secrets in namespace %s", namespace)

    async def _follow(self, namespace: str | None, scope: trio.CancelScope) -> None:
        with scope:
            await self._wait_until_listable(namespace)
            async with trio.open_nursery() as nursery:
                receive = await start_watch(
                    nursery,
                    self._client,
                    SECRETS,
                    namespace=namespace,
                    metadata_only=True,
                    # Labels within the bounds, no annotations (kubectl's last-applied copy of
                    # a Secret is all of it): see _keep.
                    form=limits.kept,
                    # A binding removed later shows as refused relists: retried (and logged) at
                    # most every two minutes. The Clusters' own reads report it.
                    backoff_max=120.0,
                )
                first = True
                async for event in receive:
                    self._apply(namespace, event, first)
                    if isinstance(event, Resync):
                        self._listing(namespace, True)
                    first = False

    async def _wait_until_listable(self, namespace: str | None) -> None:
        """Return once Secrets there can be listed; a refusal is logged once, then backed off.

        The watch itself would retry a refused list every 30 s and log each time; a missing
        RoleBinding is a lasting state the Clusters report, not news worth a line per retry.
        """
        delay = 0.0
        said: str | None = None
        where = f"namespace {namespace}" if namespace else "any namespace"
        while True:
            try:
                # One page of one object answers "may I list?" without reading them all.
                await self._client.request(
                    "GET",
                    resource_path(SECRETS, namespace=namespace),
                    params={"limit": "1"},
                    accept=METADATA_LIST,
                )
            except errors.Forbidden:
                text = "forbidden"
                if self._listable.get(namespace) is not False:
                    self._listing(namespace, False)
                if said != text:
                    if not namespace:
                        fix = (
                            f"bind {MANAGER_SECRETS_ROLE} cluster-wide, or use"
                            " --secrets-scope=namespace"
                        )
                    elif namespace == self._own_namespace or namespace in PROTECTED_NAMESPACES:
                        fix = "they move to a workspace of their own (never bind a role here)"
                    else:
                        fix = binding_command(namespace, self.username)
                    log.warning(
                        "may not list Secrets in %s; its Kubeconfig Clusters report"
                        " SecretNotReadable until: %s",
                        where,
                        fix,
                    )
                    said = text
            except errors.KubeError as exc:
                text = type(exc).__name__
                if said != text:
                    log.warning("cannot list Secrets in %s: %s; retrying", where, exc)
                    said = text
            else:
                if said is not None:
                    log.info("may list Secrets in %s now", where)
                return
            delay = min(self._forbidden_backoff_max, max(1.0, delay * 2))
            await trio.sleep(delay / 2 + random.uniform(0, delay / 2))  # noqa: S311 (jitter)

    def _apply(self, namespace: str | None, event: WatchEvent | Resync, first: bool) -> None:
        versions = self._versions
        if isinstance(event, Resync):
            fresh = {_key(o): _version(o) for o in event.objects}
            mine = {k for k in versions if namespace is None or k[0] == namespace}
            changed = {k for k in mine | set(fresh) if versions.get(k) != fresh.get(k)}
            for key in mine - set(fresh):
                del versions[key]
                self.over_bounds.discard(key)
            versions.update(fresh)
            if self._keep_labels or self._keep_labelled:
                for key in [k for k in self.labels if namespace is None or k[0] == namespace]:
                    del self.labels[key]
                    self.owners.pop(key, None)
                for obj in event.objects:
                    self._keep(_key(obj), obj)
        else:
            key = _key(event.object)
            if event.type == "DELETED":
                versions.pop(key, None)
                self.labels.pop(key, None)
                self.owners.pop(key, None)
                self.over_bounds.discard(key)
            else:
                versions[key] = _version(event.object)
                self._keep(key, event.object)
            changed = {key}
            first = False
        for key in changed:
            self._changed(key, first)

    def _keep(self, key: Key, obj: dict[str, Any]) -> None:
        """Keep the labels and owners a source reads; none of a Secret over the bounds.

        Such a Secret matches no source (its labels are not kept, so no selector sees them):
        logged once, with the fix, since a Secret has no status to say it in.
        """
        why = limits.over_bounds(obj)
        if why is not None:
            if key not in self.over_bounds and (self._keep_labels or self._keep_labelled):
                log.warning(
                    "Secret %s/%s is not read by any ClusterSource: %s", key[0], key[1], why
                )
            self.over_bounds.add(key)
            self.labels.pop(key, None)
            self.owners.pop(key, None)
            return
        self.over_bounds.discard(key)
        meta = obj.get("metadata", {})
        labels = meta.get("labels") or {}
        if (self._keep_labelled and labels) or self._keep_labels.intersection(labels):
            self.labels[key] = {str(k): str(v) for k, v in labels.items()}
            refs = meta.get("ownerReferences") or []
            self.owners[key] = [dict(r) for r in refs if isinstance(r, dict)]
        else:
            self.labels.pop(key, None)
            self.owners.pop(key, None)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _version(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))
