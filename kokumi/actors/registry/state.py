"""What the registry remembers, and the few steps every section of it takes.

The registry is one actor in four classes, each built on the one below so that calls only go
down: :class:`State` here, then the waiting order across replicas
(:class:`~kokumi.actors.registry.line.Line`), the table against the Secrets
(:class:`~kokumi.actors.registry.facts.Facts`) and serving the inbox
(:class:`~kokumi.actors.registry.inbox.Registry`). What more than one section needs lives here:
the memory itself, one step of the table, and the in-place write of a Secret.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.actors.metrics import Metrics
from kokumi.actors.writes import EventRecorder
from kokumi.core.cluster.egress import EgressPolicy
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, ownership
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import Registration
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import SECRETS, Client
from kokumi.objects import metadata_of, resource_version

log = logging.getLogger("kokumi.actors.registry")
"""One logger for every section: the registry's log lines read as they did in one module."""

Liveness = Callable[[ClusterRef, str], bool]
"""Whether ``uid`` is the Cluster object that exists now under that namespace and name."""

Serves = Callable[[ClusterRef], float | None]
"""Until when (Trio time) this replica may write for the Cluster; None: another replica serves it.

Without shards every Cluster is served for ever (``math.inf``). With shards it is the renew
deadline of the Lease of the Cluster's shard, so a write for a shard whose Lease was not renewed
in time ends when the shard's Cluster actors are cancelled, before another replica may take it.
"""


@attrs.define
class Retry:
    """A server whose Secret is out of step with the table: when to try again, and how it fails."""

    backoff: Backoff
    failures: FailureLog
    at: float = math.inf
    error: str | None = None  # the last failure, as the Clusters' status shows it


class State:
    def __init__(
        self,
        client: Client,
        namespace: str,
        metrics: Metrics | None = None,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 120.0,
        events: EventRecorder | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        self._client = client
        # Every write goes through this client, fenced at the moment it is sent: the Clusters
        # the write acts for (``_acting``, set for the length of one server's sync) must all
        # still be served here, and ``_may_write`` (a single leader's Lease) must still hold. A
        # check before the write leaves its awaits, a request slot's among them, for a Lease
        # to go; only this one is made with nothing between it and the request.
        self._acting: frozenset[ClusterRef] = frozenset()
        self._may_write: Callable[[], bool] = lambda: True
        self._writer = client.fenced(self._fence)
        # The probe's policy: a server the manager may not connect to, Argo CD may not either.
        self._egress = egress or EgressPolicy()
        # Clusters whose connection leads where the policy refuses: (server, why), for status.
        self._denied: dict[ClusterRef, tuple[str, str]] = {}
        self._namespace = namespace
        self._metrics = metrics or Metrics()
        self._events = events
        self._backoff = (backoff_initial, backoff_max)
        self._table = ownership.Table()
        self._connections: dict[ClusterRef, Connection] = {}
        self._claims: dict[ClusterRef, str] = {}  # the uid each claim was made for
        self._secrets: dict[str, dict[str, Any]] = {}  # name -> Secret, as last seen or written
        self._named: dict[ClusterRef, set[str]] = {}  # holder -> names of Secrets naming it
        # Cluster -> names of the Secrets whose waiting line records it: when a Cluster served
        # here stops wanting (or is gone), those lines are written at once, whoever holds them.
        self._recorded: dict[ClusterRef, set[str]] = {}
        self._told: dict[ClusterRef, Registration] = {}
        self._subscribers: dict[ClusterRef, tuple[str, Callable[[Registration], None]]] = {}
        # Foreign Secrets that hold the name Kokumi would give a server, whatever server they
        # declare: their deletion frees that server.
        self._blocking_names: dict[str, str] = {}
        # Foreign cluster Secrets as the watch shows them: name -> the server each declares.
        self._foreign_names: dict[str, str] = {}
        self._retries: dict[str, Retry] = {}
        # Handovers written but not yet told as an Event: (server, Argo CD's name before,
        # previous holder if known, holder).
        self._handovers: list[tuple[str, str, ClusterRef | None, ClusterRef]] = []
        self._is_current: Liveness = lambda _ref, _uid: True
        self._exists: Callable[[ClusterRef], bool] = lambda _ref: True
        self._serves: Serves = lambda _ref: math.inf
        self._sharded = False
        # With shards: how long waiters wait for the first in line, served elsewhere, to create
        # a Secret deleted under it, before any of them may (the atomic create decides).
        self._grace = 30.0
        self._pending: dict[str, float] = {}  # server -> end of that wait
        # The waiting order the last Secret of a server recorded, for the Secret created next.
        self._last_line: dict[str, tuple[ClusterRef, ...]] = {}
        # Clusters served here that let go and have not wanted since: a Secret handed to one of
        # them by another replica meanwhile is passed on, never kept for it.
        self._let_go: set[ClusterRef] = set()

    def _fence(self) -> bool:
        return self._may_write() and all(self._serves(c) is not None for c in self._acting)

    def _is_served(self, cluster: ClusterRef) -> bool:
        return self._serves(cluster) is not None

    def _disown(self, cluster: ClusterRef) -> set[str | None]:
        """Forget ``cluster``, served elsewhere now (see :class:`ownership.Disown`)."""
        self._claims.pop(cluster, None)
        self._connections.pop(cluster, None)
        self._told.pop(cluster, None)
        server = self._table.wanted_by(cluster)
        held = server is not None and self._table.holder(server) == cluster
        touched = self._step(ownership.Disown(cluster))
        if held and server is not None and argocd.secret_name(server) not in self._secrets:
            # It held the server here before its Secret was written (the write fenced or
            # refused): kept as the holder elsewhere, it would bar the line for good. Its
            # replica may still write the Secret; after the grace, the next in line here may.
            self._pending.setdefault(server, trio.current_time() + self._grace)
        return touched

    def _step(self, event: ownership.Event) -> set[str | None]:
        """Apply one event to the table; the servers whose Secret or line it may change."""
        before = self._table
        self._table, effects = ownership.step(before, event)
        touched: set[str | None] = set()
        for effect in effects:
            touched.add(effect.server)
        match event:
            case (
                ownership.Want(server=server)
                | ownership.Foreign(server=server)
                | ownership.ForeignGone(server=server)
                | ownership.Remote(server=server)
                | ownership.RemoteGone(server=server)
                | ownership.Adopt(server=server)
            ):
                touched.add(server)
            case ownership.Release(cluster=cluster) | ownership.Disown(cluster=cluster):
                touched.add(before.wanted_by(cluster))
        return touched

    def _remember(self, name: str, secret: Mapping[str, Any] | None) -> None:
        old = self._secrets.pop(name, None)
        if old is not None:
            holder = argocd.holder_of(old)
            if holder is not None:
                _unindex(self._named, holder, name)
            for waiter in handover.waiting_of(old):
                _unindex(self._recorded, waiter, name)
        if secret is not None and argocd.is_ours(secret):
            self._secrets[name] = dict(secret)
            holder = argocd.holder_of(secret)
            if holder is not None:
                self._named.setdefault(holder, set()).add(name)
            for waiter in handover.waiting_of(secret):
                self._recorded.setdefault(waiter, set()).add(name)

    def _lines_recording(self, cluster: ClusterRef) -> set[str | None]:
        """The servers whose Secret records ``cluster`` in its waiting line, as last seen."""
        return self._servers_of(self._recorded.get(cluster, ()))

    def _servers_naming(self, cluster: ClusterRef) -> set[str | None]:
        """The servers whose Secret names ``cluster`` holder, as last seen."""
        return self._servers_of(self._named.get(cluster, ()))

    def _servers_of(self, names: Iterable[str]) -> set[str | None]:
        return {argocd.server_of(self._secrets[name]) for name in names if name in self._secrets}

    async def _replace(
        self, name: str, existing: Mapping[str, Any], desired: Mapping[str, Any]
    ) -> None:
        """Update the Secret in place (a handover never deletes): Argo CD never sees it vanish."""
        old_meta = metadata_of(existing)
        new_meta = metadata_of(desired)
        metadata = {
            **old_meta,
            "labels": {**(old_meta.get("labels") or {}), **(new_meta.get("labels") or {})},
            "annotations": dict(new_meta.get("annotations") or {}),
        }
        if not metadata["annotations"]:
            metadata.pop("annotations")
        metadata.pop("managedFields", None)
        body = {**desired, "metadata": metadata}
        try:
            replaced = await self._writer.replace(SECRETS, body, namespace=self._namespace)
        except errors.Conflict:
            # Somebody changed it meanwhile: read it again, and the retry starts from that.
            self._remember(name, await self._client.get(SECRETS, name, namespace=self._namespace))
            raise
        except errors.NotFound:
            self._remember(name, None)
            raise
        self._remember(name, replaced)
        self._metrics.registry_writes += 1


def _unindex(index: dict[ClusterRef, set[str]], cluster: ClusterRef, name: str) -> None:
    names = index.get(cluster)
    if names is not None:
        names.discard(name)
        if not names:
            del index[cluster]


def version_of(obj: Mapping[str, Any]) -> int:
    """etcd's resourceVersions are increasing integers; anything else sorts first."""
    value = resource_version(obj)
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1
