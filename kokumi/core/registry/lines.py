"""Who holds and who waits, across replicas: what a Secret says is taken into the table.

With shards, a server's holder and waiters may be served by several replicas; the one line they all
share is the one its Secret records (:mod:`kokumi.core.registry.handover` spells it, and
:mod:`kokumi.core.registry.registrar` decides each write of it). These functions of the registry's
memory (a :class:`Record`: the table, the Secrets as last seen, what each Cluster claimed) classify
each Secret (a holder served here, or elsewhere), adopt the Secrets of a shard taken, say which of
its Clusters' places this replica may speak for (only once it knows where they stand), find the
lines that still record Clusters that let go or are gone, and give the planner its view. No I/O:
the registry actor (:mod:`kokumi.actors.registry`) keeps the memory and does the writes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Set
from typing import Any, Protocol

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, ownership, registrar
from kokumi.core.registry.carry import NO_EXTRAS, Extras
from kokumi.core.registry.ownership import ClusterRef
from kokumi.objects import name_of, resource_version

__all__ = ["Record", "adopt", "classify", "knows", "newer", "stale_lines", "version_of", "view"]


class Record(Protocol):
    """What the line reads of the registry's memory, and the one step it takes on it.

    The registry actor's ``Memory`` is one; only the registry's own task reads or changes it, so
    these functions run between two of its awaits and see it whole.
    """

    @property
    def table(self) -> ownership.Table: ...
    @property
    def secrets(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def connections(self) -> Mapping[ClusterRef, Connection]: ...
    @property
    def extras(self) -> Mapping[ClusterRef, Extras]: ...
    @property
    def claims(self) -> Mapping[ClusterRef, str]: ...
    @property
    def recorded(self) -> Mapping[ClusterRef, Set[str]]: ...
    @property
    def let_go(self) -> Set[ClusterRef]: ...
    @property
    def pending(self) -> MutableMapping[str, float]: ...
    @property
    def last_line(self) -> Mapping[str, tuple[ClusterRef, ...]]: ...
    @property
    def sharded(self) -> bool: ...
    @property
    def serves(self) -> Callable[[ClusterRef], float | None]: ...
    @property
    def exists(self) -> Callable[[ClusterRef], bool]: ...
    @property
    def is_current(self) -> Callable[[ClusterRef, str], bool]: ...

    def is_served(self, cluster: ClusterRef) -> bool: ...
    def served(self, clusters: Iterable[ClusterRef]) -> tuple[ClusterRef, ...]: ...
    def lines_recording(self, cluster: ClusterRef) -> set[str | None]: ...
    def step(self, event: ownership.Event) -> set[str | None]: ...


def version_of(obj: Mapping[str, Any]) -> int:
    """etcd's resourceVersions are increasing integers; anything else sorts first."""
    value = resource_version(obj)
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1


def knows(m: Record, cluster: ClusterRef) -> bool:
    """Whether this registry may say where ``cluster`` stands in a line: it serves it and its
    actor has said what it wants since, or it does not exist (a shard just taken: its actor has
    not spoken yet, so a Cluster the Secret records keeps its place until then; a Cluster
    deleted while its shard moved has no actor to speak for it ever again)."""
    return m.is_served(cluster) and (
        m.table.wanted_by(cluster) is not None or cluster in m.let_go or not m.exists(cluster)
    )


def classify(m: Record, name: str, *, fresh: bool = False) -> set[str | None]:
    """Tell the table whether the Secret ``name`` registers a Cluster served here or not.

    ``fresh``: the Secret names a holder the registry had not seen it name. With shards that
    happens when this replica took the holder's shard before its watch brought the Secret: the
    Secret is the fact, and the table adopts it rather than overwrite it.
    """
    secret = m.secrets.get(name)
    server = argocd.server_of(secret) if secret is not None else None
    holder = argocd.holder_of(secret) if secret is not None else None
    if server is None or holder is None or argocd.secret_name(server) != name:
        return set()
    remote = m.table.remote(server)
    m.pending.pop(server, None)
    if m.serves(holder) is None:
        if remote != holder:
            return m.step(ownership.Remote(server, holder))
    elif (remote is not None or (fresh and m.sharded)) and m.table.holder(server) != holder:
        assert secret is not None
        return adopt(m, server, holder, secret)
    return set()


def adopt(m: Record, server: str, holder: ClusterRef, secret: Mapping[str, Any]) -> set[str | None]:
    """Take in a Secret naming a Cluster served here, with the waiters it records whose actors
    have not told this registry what they want (those that have are in the table already, or
    let go). A holder that let go since passes the server on at once.

    The table may have the holder at another server only because a Secret as last seen put it
    there: this replica took its shard back before its watch brought the news that the Cluster
    moved (that Secret deleted or handed on, this one written). Adopt would take this Secret for
    a move cut short and pass the server on, though the holder never let go of it. Unless the
    holder's actor said where it stands, that place stands only if another Secret names it
    holder there and was written after this one, as at a restart (``ownership.seed``); a place
    in a line, or one no Secret backs, gives way first.
    """
    touched: set[str | None] = set()
    elsewhere = m.table.wanted_by(holder)
    if elsewhere not in (None, server) and holder not in m.claims:
        assert elsewhere is not None
        seen = m.secrets.get(argocd.secret_name(elsewhere))
        if (
            seen is None
            or argocd.holder_of(seen) != holder
            or version_of(seen) < version_of(secret)
        ):
            touched |= m.step(ownership.Release(holder))
    waiting = tuple(
        c
        for c in handover.waiting_of(secret)
        if m.is_served(c) and c not in m.claims and c not in m.let_go and m.exists(c)
    )
    recorded = m.served(handover.waiting_of(secret))
    touched |= m.step(ownership.Adopt(server, holder, waiting, recorded))
    if holder in m.let_go or not m.exists(holder):
        # Let go since, or handed the Secret after it was deleted (a waiter carries no
        # finalizer, and the replica that handed over may not have known): passed on.
        touched |= m.step(ownership.Release(holder))
    return touched


def stale_lines(m: Record) -> set[str | None]:
    """The servers whose recorded line names a Cluster served here that let go or is gone.

    Its replica is the only one that may take it out of the line, and a Cluster deleted (or let
    go) while its shard moved between replicas has nobody to do that unless the replica that
    takes the shard does, at once.
    """
    touched: set[str | None] = set()
    for cluster in list(m.recorded):
        if m.is_served(cluster) and (cluster in m.let_go or not m.exists(cluster)):
            touched |= m.lines_recording(cluster)
    return touched


def newer(m: Record, secret: Mapping[str, Any]) -> bool:
    """Whether a watched Secret is newer than what the registry wrote or saw last.

    The watch may bring an event older than the registry's own write (the create's ADDED after
    the replace that followed it): comparing against it would cost a 409 and a retry.
    """
    known = m.secrets.get(name_of(secret))
    if known is None:
        return True
    return version_of(secret) > version_of(known)


def view(m: Record, namespace: str, server: str) -> registrar.View:
    """What the registry knows of ``server``, for its plan."""
    holder = m.table.holder(server)
    claim = m.claims.get(holder) if holder is not None else None
    return registrar.View(
        server=server,
        table=m.table,
        secret=m.secrets.get(argocd.secret_name(server)),
        connection=m.connections.get(holder) if holder is not None else None,
        claim_current=holder is None or claim is None or m.is_current(holder, claim),
        namespace=namespace,
        sharded=m.sharded,
        served=m.is_served,
        knows=functools.partial(knows, m),
        exists=m.exists,
        last_line=m.last_line.get(server, ()),
        extras=m.extras.get(holder, NO_EXTRAS) if holder is not None else NO_EXTRAS,
    )
