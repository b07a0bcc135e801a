"""Which Cluster holds which server: first come, first served, with a queue behind the holder.

Argo CD keeps one credential per server, so Kokumi registers one Cluster per server. The first
Cluster to want a server holds it; the others wait in the order they came, and the first of them
takes the server over in the very step in which the holder lets go. Keeping this a pure function of
``(table, event)`` lets the registry actor stay a thin loop that performs the effects, and lets a
test replay tens of thousands of events without a cluster.

A server is keyed by its normalised URL everywhere, because Argo CD trims trailing slashes itself:
two spellings of one server must meet in one line and in one Secret. The table's terms (the
Cluster's identity, the server's spelling, the events and effects) live in
:mod:`kokumi.core.registry.terms` and are re-exported here, where every caller reads them.
"""

from __future__ import annotations

import math
import unicodedata
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, Generic, TypeVar, cast

import attrs

from kokumi.core.registry.terms import (
    IN_CLUSTER_SERVER,
    Adopt,
    ClusterRef,
    DeleteSecret,
    Disown,
    Effect,
    Event,
    Foreign,
    ForeignGone,
    Holding,
    Release,
    Remote,
    RemoteGone,
    ServerTaken,
    Want,
    WriteSecret,
    is_argocd_own,
    normalise_server,
)

__all__ = [
    "IN_CLUSTER_SERVER",
    "is_argocd_own",
    "Adopt",
    "Disown",
    "Remote",
    "RemoteGone",
    "ClusterRef",
    "ServerTaken",
    "DeleteSecret",
    "Effect",
    "Event",
    "Foreign",
    "ForeignGone",
    "Holding",
    "Release",
    "Table",
    "Want",
    "WriteSecret",
    "normalise_server",
    "seed",
    "step",
]


# The table

_K = TypeVar("_K")
_V = TypeVar("_V")
_GONE: Final = object()  # a key deleted since the base, in a _Layers' changes
_ABSENT: Final = object()


class _Layers(Mapping[_K, _V], Generic[_K, _V]):
    """A mapping that no step changes once made: a base shared with the tables before it, and
    the changes since (a deleted key maps to ``_GONE``).

    A step that changed one key used to copy the whole mapping, so each new Cluster's want cost
    time in proportion to the fleet, and onboarding a fleet was quadratic (81 µs a want at
    10,000 Clusters against 12 µs at 1,000). A step now copies only the changes, which fold
    into a new base once there are more of them than the square root of its size: a step costs
    O(√n). Iteration is a dict's: the base's order with a changed key in its place, then the
    keys added since, a key deleted and added again among them.
    """

    __slots__ = ("_base", "_changes", "_moved", "_size")

    def __init__(
        self,
        base: dict[_K, _V] | None = None,
        changes: dict[_K, object] | None = None,
        moved: set[_K] | None = None,
        size: int | None = None,
    ) -> None:
        self._base: dict[_K, _V] = {} if base is None else base
        self._changes: dict[_K, object] = {} if changes is None else changes
        #: Keys of the base deleted and added again: they iterate among the added ones.
        self._moved: set[_K] = set() if moved is None else moved
        self._size = len(self._base) if size is None else size

    @classmethod
    def of(cls, mapping: Mapping[_K, _V]) -> _Layers[_K, _V]:
        """A copy of ``mapping`` for one step to change (``mapping`` itself stays as it is)."""
        if not isinstance(mapping, _Layers):
            return cls(dict(mapping))
        changes, moved = mapping._changes, mapping._moved
        if len(changes) <= max(64, math.isqrt(len(mapping._base))):
            return cls(mapping._base, dict(changes), set(moved), mapping._size)
        base = dict(mapping._base)
        added: list[tuple[_K, _V]] = []
        for key, value in changes.items():
            if value is _GONE or key in moved:
                base.pop(key, None)
            if value is _GONE:
                continue
            if key in moved or key not in mapping._base:
                added.append((key, cast(_V, value)))
            else:
                base[key] = cast(_V, value)
        base.update(added)
        return cls(base)

    def __getitem__(self, key: _K) -> _V:
        value = self._changes.get(key, _ABSENT)
        if value is _ABSENT:
            return self._base[key]
        if value is _GONE:
            raise KeyError(key)
        return cast(_V, value)

    def __contains__(self, key: object) -> bool:
        value = self._changes.get(cast(_K, key), _ABSENT)
        if value is _ABSENT:
            return key in self._base
        return value is not _GONE

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[_K]:
        changes, base, moved = self._changes, self._base, self._moved
        for key in base:
            if key not in moved and changes.get(key, _ABSENT) is not _GONE:
                yield key
        for key, value in changes.items():
            if value is not _GONE and (key in moved or key not in base):
                yield key

    def __setitem__(self, key: _K, value: _V) -> None:
        if key not in self:
            self._size += 1
            if key in self._base:
                # Deleted since, and added again: it goes last, as in a dict.
                del self._changes[key]
                self._moved.add(key)
        self._changes[key] = value

    def __delitem__(self, key: _K) -> None:
        if key not in self:
            raise KeyError(key)
        self._size -= 1
        self._changes.pop(key, None)
        if key in self._base:
            self._changes[key] = _GONE
            self._moved.discard(key)

    def pop(self, key: _K) -> _V:
        value = self[key]
        del self[key]
        return value


@attrs.frozen(unsafe_hash=False)
class Table:
    """Who holds and who waits for each server.

    Every server has a *line*: the Clusters that want it, in the order they came. The first of
    the line holds the server unless a foreign Secret blocks it; then the whole line waits, and
    its first takes the server once the last foreign Secret is gone. A line, rather than a holder
    plus a queue, makes "the earliest waiter takes over" a matter of dropping the head.

    The mappings are never changed after construction; ``step`` builds a new Table.
    """

    _lines: Mapping[str, tuple[ClusterRef, ...]] = attrs.field(factory=dict)
    _foreign: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    _wants: Mapping[ClusterRef, str] = attrs.field(factory=dict)
    _remote: Mapping[str, ClusterRef] = attrs.field(factory=dict)

    def holder(self, server: str) -> ClusterRef | None:
        """The Cluster whose Secret registers ``server``, if any, among those served here."""
        server = normalise_server(server)
        line = self._lines.get(server, ())
        if not line or server in self._foreign or server in self._remote:
            return None
        return line[0]

    def waiting(self, server: str) -> tuple[ClusterRef, ...]:
        """The Clusters waiting for ``server``, the next holder first."""
        server = normalise_server(server)
        line = self._lines.get(server, ())
        if server in self._foreign or server in self._remote:
            return line
        return line[1:]

    def remote(self, server: str) -> ClusterRef | None:
        """The holder of ``server`` when it is a Cluster another replica serves."""
        return self._remote.get(normalise_server(server))

    def remotes(self) -> dict[str, ClusterRef]:
        """Every server held by a Cluster another replica serves, and that holder."""
        return dict(self._remote)

    def wanted_by(self, cluster: ClusterRef) -> str | None:
        """The one server ``cluster`` holds, waits for, or was refused."""
        return self._wants.get(cluster)

    def held_by(self, cluster: ClusterRef) -> str | None:
        """The server ``cluster`` holds, if it holds one."""
        server = self._wants.get(cluster)
        if server is not None and self.holder(server) == cluster:
            return server
        return None

    def wanting(self) -> tuple[ClusterRef, ...]:
        """Every Cluster that holds, waits for, or was refused a server."""
        return tuple(self._wants)

    def holders(self) -> dict[str, ClusterRef]:
        """Every held server and its holder: exactly the Secrets Kokumi should have in Argo CD."""
        return {
            server: line[0]
            for server, line in sorted(self._lines.items())
            if line and server not in self._foreign and server not in self._remote
        }

    def foreign(self, server: str) -> tuple[str, ...]:
        """The names of the Secrets Kokumi did not write that block ``server``."""
        return self._foreign.get(normalise_server(server), ())

    def message(self, server: str) -> str:
        """Why a Cluster that wants ``server`` and does not hold it cannot register it."""
        server = normalise_server(server)
        shown = _shown(server)
        if is_argocd_own(server):
            return (
                f"server {shown} is the cluster Argo CD runs in, reached with its own connection; "
                "a registration would replace that connection for every Application: "
                "use connection: InCluster"
            )
        names = self._foreign.get(server)
        if names:
            return (
                f"server {shown} is already registered with Argo CD by Secret {_shown(names[0])}, "
                "which Kokumi did not write and leaves alone; "
                "this Cluster registers it once that Secret is gone"
            )
        holder = self.holder(server) or self._remote.get(server)
        if holder is not None:
            return (
                f"server {shown} is held by Cluster {_shown(str(holder))}; "
                "this Cluster takes it over once that Cluster lets go of it"
            )
        return f"server {shown} is free"


def _shown(text: str) -> str:
    """A value fit for a one-line message: no credentials in a URL, no control characters."""
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:
        parts = None
    if parts is not None and parts.scheme and "@" in parts.netloc:
        host = parts.netloc.rsplit("@", 1)[1]
        text = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return "".join("\N{REPLACEMENT CHARACTER}" if _unprintable(char) else char for char in text)


def _unprintable(char: str) -> bool:
    return char != " " and unicodedata.category(char)[0] in "CZ"


class _Draft:
    """A Table being changed for the length of one step, collecting the effects in order.

    Copy on write: a mapping of the table is copied only when the step changes it, and then
    only its layer of changes (:class:`_Layers`). Most steps are a Cluster wanting the server it
    already holds, and copying the whole table for those made each one cost time in proportion
    to the fleet; so did every new Cluster's want while a fleet onboards.
    """

    def __init__(self, table: Table) -> None:
        self.lines = table._lines
        self.foreign = table._foreign
        self.wants = table._wants
        self.remote = table._remote
        # The copies this step changes, made on its first change of each mapping.
        self._lines_copy: _Layers[str, tuple[ClusterRef, ...]] | None = None
        self._foreign_copy: _Layers[str, tuple[str, ...]] | None = None
        self._wants_copy: _Layers[ClusterRef, str] | None = None
        self._remote_copy: _Layers[str, ClusterRef] | None = None
        self.effects: list[Effect] = []

    def _lines(self) -> _Layers[str, tuple[ClusterRef, ...]]:
        if self._lines_copy is None:
            self.lines = self._lines_copy = _Layers.of(self.lines)
        return self._lines_copy

    def _foreign(self) -> _Layers[str, tuple[str, ...]]:
        if self._foreign_copy is None:
            self.foreign = self._foreign_copy = _Layers.of(self.foreign)
        return self._foreign_copy

    def _wants(self) -> _Layers[ClusterRef, str]:
        if self._wants_copy is None:
            self.wants = self._wants_copy = _Layers.of(self.wants)
        return self._wants_copy

    def _remote(self) -> _Layers[str, ClusterRef]:
        if self._remote_copy is None:
            self.remote = self._remote_copy = _Layers.of(self.remote)
        return self._remote_copy

    def table(self) -> Table:
        return Table(lines=self.lines, foreign=self.foreign, wants=self.wants, remote=self.remote)

    def holder(self, server: str) -> ClusterRef | None:
        line = self.lines.get(server, ())
        if not line or server in self.foreign or server in self.remote:
            return None
        return line[0]

    def message(self, server: str) -> str:
        return self.table().message(server)

    def tell(self, cluster: ClusterRef, server: str) -> None:
        if self.holder(server) == cluster:
            self.effects.append(WriteSecret(server, cluster))
            self.effects.append(Holding(cluster, server))
        else:
            self.effects.append(ServerTaken(cluster, server, self.message(server)))

    def tell_waiting(self, server: str) -> None:
        """Conflict messages name whoever blocks the server; when that changes, they must too."""
        table = self.table()
        message = table.message(server)
        for cluster in table.waiting(server):
            self.effects.append(ServerTaken(cluster, server, message))

    def take_over(self, server: str) -> None:
        holder = self.holder(server)
        if holder is None:
            return
        self.effects.append(WriteSecret(server, holder))
        self.effects.append(Holding(holder, server))
        self.tell_waiting(server)

    def leave(self, cluster: ClusterRef) -> None:
        if cluster not in self.wants:
            return
        server = self._wants().pop(cluster)
        if is_argocd_own(server):
            return
        held = self.holder(server) == cluster
        line = tuple(other for other in self.lines[server] if other != cluster)
        if line:
            self._lines()[server] = line
        else:
            del self._lines()[server]
        if not held:
            return
        if self.holder(server) is None:
            self.effects.append(DeleteSecret(server))
        else:
            self.take_over(server)

    def want(self, cluster: ClusterRef, server: str) -> None:
        if self.wants.get(cluster) != server:
            self.leave(cluster)
            self._wants()[cluster] = server
            if not is_argocd_own(server):
                self._lines()[server] = (*self.lines.get(server, ()), cluster)
        self.tell(cluster, server)

    def add_foreign(self, server: str, secret_name: str) -> None:
        names = self.foreign.get(server, ())
        if secret_name in names:
            return
        holder = self.holder(server)
        self._foreign()[server] = (*names, secret_name)
        if holder is not None:
            self.effects.append(DeleteSecret(server))
            self.tell_waiting(server)

    def remove_foreign(self, server: str, secret_name: str | None) -> None:
        names = self.foreign.get(server, ())
        remaining = () if secret_name is None else tuple(n for n in names if n != secret_name)
        if remaining == names:
            return
        if remaining:
            self._foreign()[server] = remaining
            if remaining[0] != names[0]:
                self.tell_waiting(server)
        else:
            del self._foreign()[server]
            self.take_over(server)

    def forget(self, cluster: ClusterRef) -> str | None:
        """Take ``cluster`` out of the table without a word: the server it wanted, if any."""
        if cluster not in self.wants:
            return None
        server = self._wants().pop(cluster)
        if is_argocd_own(server):
            return None
        line = tuple(other for other in self.lines[server] if other != cluster)
        if line:
            self._lines()[server] = line
        else:
            del self._lines()[server]
        return server

    def add_remote(self, server: str, holder: ClusterRef) -> None:
        if self.remote.get(server) == holder:
            return
        self.forget(holder)  # served elsewhere now: not ours to queue
        self._remote()[server] = holder
        self.tell_waiting(server)

    def remove_remote(self, server: str) -> None:
        if server not in self.remote:
            return
        del self._remote()[server]
        if server in self.foreign:
            self.tell_waiting(server)
        else:
            self.take_over(server)

    def adopt(
        self,
        server: str,
        holder: ClusterRef,
        waiting: tuple[ClusterRef, ...],
        recorded: tuple[ClusterRef, ...] | None = None,
    ) -> None:
        if self.wants.get(holder, server) != server:
            # The Cluster wants another server here already: this Secret is a move cut short.
            if server in self.remote:
                del self._remote()[server]
            if self.lines.get(server):
                self.take_over(server)
            elif server not in self.foreign:
                self.effects.append(DeleteSecret(server))
            return
        if server in self.remote:
            del self._remote()[server]
        current = tuple(c for c in self.lines.get(server, ()) if c != holder)
        queued = tuple(dict.fromkeys(c for c in waiting if c != holder and c not in self.wants))
        rank = {c: n for n, c in enumerate(waiting if recorded is None else recorded)}
        members = sorted(dict.fromkeys((*queued, *current)), key=lambda c: rank.get(c, len(rank)))
        self._lines()[server] = (holder, *members)
        for cluster in (holder, *queued):
            self._wants()[cluster] = server
        if server in self.foreign:
            self.tell_waiting(server)
        else:
            self.take_over(server)

    def disown(self, cluster: ClusterRef) -> None:
        server = self.wants.get(cluster)
        if server is None:
            return
        held = self.holder(server) == cluster
        self.forget(cluster)
        if held:
            self._remote()[server] = cluster


def step(table: Table, event: Event) -> tuple[Table, tuple[Effect, ...]]:
    """Apply one event; return the new table and what the registry must do, in that order.

    Pure and deterministic: equal tables and events give equal results, which lets the registry
    retry a step after a failed write and lets a test compare runs.
    """
    draft = _Draft(table)
    match event:
        case Want(cluster=cluster, server=server):
            draft.want(cluster, server)
        case Release(cluster=cluster):
            draft.leave(cluster)
        case Foreign(server=server, secret_name=secret_name):
            draft.add_foreign(server, secret_name)
        case ForeignGone(server=server, secret_name=secret_name):
            draft.remove_foreign(server, secret_name)
        case Remote(server=server, holder=holder):
            draft.add_remote(server, holder)
        case RemoteGone(server=server):
            draft.remove_remote(server)
        case Adopt(server=server, holder=holder, waiting=waiting, recorded=recorded):
            draft.adopt(server, holder, waiting, recorded)
        case Disown(cluster=cluster):
            draft.disown(cluster)
    return draft.table(), tuple(draft.effects)


def seed(
    holders: Mapping[str, ClusterRef],
    waiting: Mapping[str, Sequence[ClusterRef]] | None = None,
    written: Mapping[str, int] | None = None,
) -> tuple[Table, tuple[Effect, ...]]:
    """Rebuild the table from the holders that Kokumi's Secrets name, and say which Secrets must go.

    The registry keeps no memory that a crash could lose; the Secrets are the memory. A Cluster
    found on several servers (a move interrupted half way: the new server's Secret written, the
    old one's delete refused) keeps the server whose Secret was written last, by ``written``
    (each server's Secret's resourceVersion), since that is where it was moving to; without it,
    or on a tie, the first in sorted order. The others, and a Secret for the in-cluster server,
    which is never Kokumi's to keep, are deleted. Foreign Secrets are fed in afterwards as
    :class:`Foreign` events, which step a holder back where one blocks it.

    ``waiting`` is each server's waiting order as its Secret recorded it: the line is rebuilt
    behind the holder, so that a holder that lets go right after a restart hands over to the
    Cluster that waited first. A Cluster that holds a server, or already waits for another, is
    not queued again (it wants one server only).
    """
    rank = {normalise_server(s): n for s, n in (written or {}).items()}
    lines: dict[str, tuple[ClusterRef, ...]] = {}
    wants: dict[ClusterRef, str] = {}
    effects: list[Effect] = []
    seen: set[str] = set()
    for server, cluster in sorted((normalise_server(s), c) for s, c in holders.items()):
        # Two spellings of one server name one Secret: the first decides what becomes of it.
        if server in seen:
            continue
        seen.add(server)
        if is_argocd_own(server):
            effects.append(DeleteSecret(server))
            continue
        kept = wants.get(cluster)
        if kept is not None and rank.get(server, 0) <= rank.get(kept, 0):
            effects.append(DeleteSecret(server))
            continue
        if kept is not None:
            effects.append(DeleteSecret(kept))
            del lines[kept]
        lines[server] = (cluster,)
        wants[cluster] = server
    for server, queue in sorted((normalise_server(s), q) for s, q in (waiting or {}).items()):
        if server not in lines:
            continue
        for cluster in queue:
            if cluster not in wants:
                lines[server] = (*lines[server], cluster)
                wants[cluster] = server
    return Table(lines=lines, wants=wants), tuple(effects)
