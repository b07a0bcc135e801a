"""What the registry remembers: one record, and the few steps every section takes on it.

The registry is one actor (:class:`~kokumi.actors.registry.inbox.Registry`) that holds two
things: this :class:`Memory` (the table, the Secrets as last seen, what each Cluster claimed and
was told) and the writer of Argo CD's Secrets
(:class:`~kokumi.actors.registry.facts.Facts`), which is handed the same record. The waiting
order across replicas (:mod:`kokumi.core.registry.lines`) is pure functions over the record,
which they read as a :class:`~kokumi.core.registry.lines.Record`. Nothing is shared by
inheritance: a section reads what it is given, so a reader sees where each fact lives.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, ownership
from kokumi.core.registry.carry import Extras
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import Registration
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.objects import kept_form

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


def _always(_ref: ClusterRef, _uid: str) -> bool:
    return True


def _exists(_ref: ClusterRef) -> bool:
    return True


def _for_ever(_ref: ClusterRef) -> float | None:
    return math.inf


@attrs.define(eq=False)
class Memory:
    """Everything the registry knows; only the registry's own task reads or changes it."""

    table: ownership.Table = attrs.Factory(ownership.Table)
    connections: dict[ClusterRef, Connection] = attrs.Factory(dict)
    # What each claim carries beside its connection; only claims that carry something.
    extras: dict[ClusterRef, Extras] = attrs.Factory(dict)
    claims: dict[ClusterRef, str] = attrs.Factory(dict)  # the uid each claim was made for
    secrets: dict[str, dict[str, Any]] = attrs.Factory(dict)  # name -> as last seen or written
    named: dict[ClusterRef, set[str]] = attrs.Factory(dict)  # holder -> Secrets naming it
    # Cluster -> names of the Secrets whose waiting line records it: when a Cluster served here
    # stops wanting (or is gone), those lines are written at once, whoever holds them.
    recorded: dict[ClusterRef, set[str]] = attrs.Factory(dict)
    told: dict[ClusterRef, Registration] = attrs.Factory(dict)
    subscribers: dict[ClusterRef, tuple[str, Callable[[Registration], None]]] = attrs.Factory(dict)
    # Foreign Secrets that hold the name Kokumi would give a server, whatever server they
    # declare: their deletion frees that server.
    blocking_names: dict[str, str] = attrs.Factory(dict)
    # Foreign cluster Secrets as the watch shows them: name -> the server each declares.
    foreign_names: dict[str, str] = attrs.Factory(dict)
    retries: dict[str, Retry] = attrs.Factory(dict)
    # Handovers written but not yet told as an Event: (server, Argo CD's name before, previous
    # holder if known, holder).
    handovers: list[tuple[str, str, ClusterRef | None, ClusterRef]] = attrs.Factory(list)
    # Clusters whose connection leads where the egress policy refuses: (server, why).
    denied: dict[ClusterRef, tuple[str, str]] = attrs.Factory(dict)
    is_current: Liveness = _always
    exists: Callable[[ClusterRef], bool] = _exists
    serves: Serves = _for_ever
    sharded: bool = False
    # With shards: how long waiters wait for the first in line, served elsewhere, to create a
    # Secret deleted under it, before any of them may (the atomic create decides).
    grace: float = 30.0
    pending: dict[str, float] = attrs.Factory(dict)  # server -> end of that wait
    # The waiting order the last Secret of a server recorded, for the Secret created next.
    last_line: dict[str, tuple[ClusterRef, ...]] = attrs.Factory(dict)
    # Clusters served here that let go and have not wanted since: a Secret handed to one of
    # them by another replica meanwhile is passed on, never kept for it.
    let_go: set[ClusterRef] = attrs.Factory(set)

    def is_served(self, cluster: ClusterRef) -> bool:
        return self.serves(cluster) is not None

    def forget_claim(self, cluster: ClusterRef) -> None:
        """The claim of ``cluster`` is over: its uid, connection and extras go with it."""
        self.claims.pop(cluster, None)
        self.connections.pop(cluster, None)
        self.extras.pop(cluster, None)

    def disown(self, cluster: ClusterRef) -> set[str | None]:
        """Forget ``cluster``, served elsewhere now (see :class:`ownership.Disown`)."""
        self.forget_claim(cluster)
        self.told.pop(cluster, None)
        server = self.table.wanted_by(cluster)
        held = server is not None and self.table.holder(server) == cluster
        touched = self.step(ownership.Disown(cluster))
        if held and server is not None and argocd.secret_name(server) not in self.secrets:
            # It held the server here before its Secret was written (the write fenced or
            # refused): kept as the holder elsewhere, it would bar the line for good. Its
            # replica may still write the Secret; after the grace, the next in line here may.
            self.pending.setdefault(server, trio.current_time() + self.grace)
        return touched

    def step(self, event: ownership.Event) -> set[str | None]:
        """Apply one event to the table; the servers whose Secret or line it may change."""
        before = self.table
        self.table, effects = ownership.step(before, event)
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

    def remember(self, name: str, secret: Mapping[str, Any] | None) -> None:
        old = self.secrets.pop(name, None)
        if old is not None:
            holder = argocd.holder_of(old)
            if holder is not None:
                _unindex(self.named, holder, name)
            for waiter in handover.waiting_of(old):
                _unindex(self.recorded, waiter, name)
        if secret is not None and argocd.is_ours(secret):
            # As the watch keeps objects (a write's answer too): without managedFields, which
            # nothing here reads, and with keys and repeated values shared; times every server.
            self.secrets[name] = kept_form(secret)
            holder = argocd.holder_of(secret)
            if holder is not None:
                self.named.setdefault(holder, set()).add(name)
            for waiter in handover.waiting_of(secret):
                self.recorded.setdefault(waiter, set()).add(name)

    def lines_recording(self, cluster: ClusterRef) -> set[str | None]:
        """The servers whose Secret records ``cluster`` in its waiting line, as last seen."""
        return self.servers_of(self.recorded.get(cluster, ()))

    def servers_naming(self, cluster: ClusterRef) -> set[str | None]:
        """The servers whose Secret names ``cluster`` holder, as last seen."""
        return self.servers_of(self.named.get(cluster, ()))

    def servers_of(self, names: Iterable[str]) -> set[str | None]:
        return {argocd.server_of(self.secrets[name]) for name in names if name in self.secrets}

    def served(self, clusters: Iterable[ClusterRef]) -> tuple[ClusterRef, ...]:
        return tuple(c for c in clusters if self.serves(c) is not None)

    def server_named(self, name: str) -> str | None:
        """The server the Secret ``name`` declares, as last seen; read before forgetting it."""
        secret = self.secrets.get(name)
        return argocd.server_of(secret) if secret is not None else None


def _unindex(index: dict[ClusterRef, set[str]], cluster: ClusterRef, name: str) -> None:
    names = index.get(cluster)
    if names is not None:
        names.discard(name)
        if not names:
            del index[cluster]
