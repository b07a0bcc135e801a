"""Who holds and who waits, across replicas: what a Secret says is taken into the table.

With shards, a server's holder and waiters may be served by several replicas; the one line they all
share is the one its Secret records (:mod:`kokumi.core.registry.handover` spells it, and
:mod:`kokumi.core.registry.registrar` decides each write of it). This section classifies each Secret
(a holder served here, or elsewhere), adopts the Secrets of a shard taken, says which of its
Clusters' places this replica may speak for (only once it knows where they stand), finds the lines
that still record Clusters that let go or are gone, and tells a new holder that Argo CD's name for
its server changed. No I/O but that Event: the writes are the next section's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kokumi.actors.registry.state import State, version_of
from kokumi.core.api import CLUSTERS, Meta
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd, handover, ownership
from kokumi.core.registry.ownership import ClusterRef
from kokumi.objects import name_of

HANDOVER_REASON = Reason.ARGOCD_NAME_CHANGED
"""The Event on a Cluster that took a server over: Argo CD's name for the cluster changed."""


class Line(State):
    def _knows(self, cluster: ClusterRef) -> bool:
        """Whether this registry may say where ``cluster`` stands in a line: it serves it and
        its actor has said what it wants since, or it does not exist (a shard just taken: its
        actor has not spoken yet, so a Cluster the Secret records keeps its place until then;
        a Cluster deleted while its shard moved has no actor to speak for it ever again)."""
        return self._is_served(cluster) and (
            self._table.wanted_by(cluster) is not None
            or cluster in self._let_go
            or not self._exists(cluster)
        )

    async def _record_handover(
        self, server: str, was: str, previous: ClusterRef | None, holder: ClusterRef
    ) -> None:
        """Tell the new holder's readers that Argo CD's name for the server changed with it:
        the Secret stayed, but Applications that target the old name lose their cluster.

        ``previous`` is None when another replica handed the Secret over: only the name that
        Argo CD knew is left of the old holder then.
        """
        uid = self._claims.get(holder)
        if self._events is None or uid is None:
            return
        new = argocd.cluster_name(holder, server)
        source = f" from {previous}" if previous is not None else ""
        await self._events.record(
            CLUSTERS,
            Meta(name=holder.name, namespace=holder.namespace, uid=uid),
            reason=HANDOVER_REASON,
            message=(
                f"took over server {server}{source}: Argo CD now names it {new} "
                f"(was {was}); target it by server, not by name (see docs/argocd.md)"
            ),
            warning=True,
        )

    def _classify(self, name: str, *, fresh: bool = False) -> set[str | None]:
        """Tell the table whether the Secret ``name`` registers a Cluster served here or not.

        ``fresh``: the Secret names a holder the registry had not seen it name. With shards that
        happens when this replica took the holder's shard before its watch brought the Secret:
        the Secret is the fact, and the table adopts it rather than overwrite it.
        """
        secret = self._secrets.get(name)
        server = argocd.server_of(secret) if secret is not None else None
        holder = argocd.holder_of(secret) if secret is not None else None
        if server is None or holder is None or argocd.secret_name(server) != name:
            return set()
        remote = self._table.remote(server)
        self._pending.pop(server, None)
        if self._serves(holder) is None:
            if remote != holder:
                return self._step(ownership.Remote(server, holder))
        elif (remote is not None or (fresh and self._sharded)) and self._table.holder(
            server
        ) != holder:
            assert secret is not None
            return self._adopt(server, holder, secret)
        return set()

    def _adopt(self, server: str, holder: ClusterRef, secret: Mapping[str, Any]) -> set[str | None]:
        """Take in a Secret naming a Cluster served here, with the waiters it records whose
        actors have not told this registry what they want (those that have are in the table
        already, or let go). A holder that let go since passes the server on at once.

        The table may have the holder at another server only because a Secret as last seen put
        it there: this replica took its shard back before its watch brought the news that the
        Cluster moved (that Secret deleted or handed on, this one written). Adopt would take
        this Secret for a move cut short and pass the server on, though the holder never let go
        of it. Unless the holder's actor said where it stands, that place stands only if
        another Secret names it holder there and was written after this one, as at a restart
        (``ownership.seed``); a place in a line, or one no Secret backs, gives way first.
        """
        touched: set[str | None] = set()
        elsewhere = self._table.wanted_by(holder)
        if elsewhere not in (None, server) and holder not in self._claims:
            assert elsewhere is not None
            seen = self._secrets.get(argocd.secret_name(elsewhere))
            if (
                seen is None
                or argocd.holder_of(seen) != holder
                or version_of(seen) < version_of(secret)
            ):
                touched |= self._step(ownership.Release(holder))
        waiting = tuple(
            c
            for c in handover.waiting_of(secret)
            if self._is_served(c)
            and c not in self._claims
            and c not in self._let_go
            and self._exists(c)
        )
        recorded = self._served(handover.waiting_of(secret))
        touched |= self._step(ownership.Adopt(server, holder, waiting, recorded))
        if holder in self._let_go or not self._exists(holder):
            # Let go since, or handed the Secret after it was deleted (a waiter carries no
            # finalizer, and the replica that handed over may not have known): passed on.
            touched |= self._step(ownership.Release(holder))
        return touched

    def _stale_lines(self) -> set[str | None]:
        """The servers whose recorded line names a Cluster served here that let go or is gone.

        Its replica is the only one that may take it out of the line, and a Cluster deleted
        (or let go) while its shard moved between replicas has nobody to do that unless the
        replica that takes the shard does, at once.
        """
        touched: set[str | None] = set()
        for cluster in list(self._recorded):
            if self._is_served(cluster) and (cluster in self._let_go or not self._exists(cluster)):
                touched |= self._lines_recording(cluster)
        return touched

    def _served(self, clusters: Iterable[ClusterRef]) -> tuple[ClusterRef, ...]:
        return tuple(c for c in clusters if self._serves(c) is not None)

    def _server_named(self, name: str) -> str | None:
        """The server the Secret ``name`` declares, as last seen; read before forgetting it."""
        secret = self._secrets.get(name)
        return argocd.server_of(secret) if secret is not None else None

    def _newer(self, secret: Mapping[str, Any]) -> bool:
        """Whether a watched Secret is newer than what the registry wrote or saw last.

        The watch may bring an event older than the registry's own write (the create's ADDED
        after the replace that followed it): comparing against it would cost a 409 and a retry.
        """
        known = self._secrets.get(name_of(secret))
        if known is None:
            return True
        return version_of(secret) > version_of(known)
