"""The waiting order across replicas: a server's line as its Secret records it, and handovers.

With shards, a server's waiters may be served by several replicas; the one line they all share
is the one its Secret records (:mod:`kokumi.core.handover` spells it). This section keeps this
replica's waiters' places in it, finds who comes next when the holder lets go, hands the Secret
to another replica's Cluster in place, and tells a new holder that Argo CD's name for its server
changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kokumi.actors.registry.state import State, log
from kokumi.core import argocd, handover, ownership
from kokumi.core.api import CLUSTERS, Meta
from kokumi.core.ownership import ClusterRef
from kokumi.core.reasons import Reason

HANDOVER_REASON = Reason.ARGOCD_NAME_CHANGED
"""The Event on a Cluster that took a server over: Argo CD's name for the cluster changed."""


class Line(State):
    def _knows(self, cluster: ClusterRef) -> bool:
        """Whether this registry may say where ``cluster`` stands in a line: it serves it and
        its actor has said what it wants since (a shard just taken: not yet, so a Cluster the
        Secret records keeps its place until its actor speaks)."""
        return self._is_served(cluster) and (
            self._table.wanted_by(cluster) is not None or cluster in self._let_go
        )

    def _to_record(
        self, server: str, existing: Mapping[str, Any] | None, holder: ClusterRef
    ) -> tuple[ClusterRef, ...]:
        """The waiting order for the server's Secret: this table's, or with shards, the order
        the Secret records with this replica's waiters in their places."""
        local = self._table.waiting(server)
        if not self._sharded:
            return local
        recorded = handover.waiting_of(existing) if existing else self._last_line.get(server, ())
        line = handover.merged_line(recorded, local, self._knows)
        return tuple(c for c in line if c != holder)

    def _first_elsewhere(
        self, existing: Mapping[str, Any], holder: ClusterRef | None
    ) -> ClusterRef | None:
        """The first waiter, if it is another replica's and comes before ``holder`` (the next
        holder in this table, None if there is none here)."""
        server = argocd.server_of(existing)
        if not self._sharded or (server is not None and self._table.foreign(server)):
            return None
        local = (*([holder] if holder else []), *(self._table.waiting(server) if server else ()))
        first = handover.first_waiting(
            handover.waiting_of(existing), argocd.holder_of(existing), local, self._is_served
        )
        return first if first is not None and not self._is_served(first) else None

    def _first_here(self, existing: Mapping[str, Any], holder: ClusterRef) -> ClusterRef | None:
        """The first recorded waiter when it is another of this replica's than ``holder``."""
        if not self._sharded:
            return None
        server = argocd.server_of(existing)
        local = (holder, *(self._table.waiting(server) if server else ()))
        first = handover.first_waiting(
            handover.waiting_of(existing), argocd.holder_of(existing), local, self._is_served
        )
        return first if first is not None and first != holder and first in local else None

    async def _hand_over_elsewhere(
        self, server: str, name: str, existing: Mapping[str, Any], first: ClusterRef
    ) -> set[str]:
        """The holder let go and the first in line is another replica's Cluster: hand the
        Secret to it in place, at the version read (relabelled to name it, the rest of the line
        recorded), so Argo CD never sees the cluster vanish. That replica's watch sees its
        Cluster named and copies its kubeconfig in, as after a restart; this replica's waiters
        wait behind it."""
        await self._replace(name, existing, handover.handed_to(existing, first))
        log.info("Secret %s handed to %s, first in line, served by another replica", name, first)
        return {s for s in self._step(ownership.Remote(server, first)) if s}

    async def _join(self, server: str, name: str) -> set[str]:
        """A server held elsewhere: keep this replica's waiters' places on its Secret, with a
        write guarded by the resourceVersion read (another replica may be writing too)."""
        existing = self._secrets.get(name)
        if existing is None or not self._sharded:
            return set()
        holder = argocd.holder_of(existing)
        line = handover.merged_line(
            handover.waiting_of(existing), self._table.waiting(server), self._knows
        )
        await self._keep_waiting(name, existing, tuple(c for c in line if c != holder))
        return set()

    async def _keep_waiting(
        self, name: str, existing: Mapping[str, Any], waiting: tuple[ClusterRef, ...]
    ) -> None:
        if handover.waiting_of(existing) == waiting:
            return
        await self._replace(name, existing, handover.with_waiting(existing, waiting))

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
