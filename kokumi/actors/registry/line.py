"""The waiting order across replicas: which Clusters' places this replica may speak for, and
the Event that tells a new holder Argo CD's name for its server changed.

With shards, a server's waiters may be served by several replicas; the one line they all share
is the one its Secret records (:mod:`kokumi.core.handover` spells it, and
:mod:`kokumi.core.registrar` decides each write of it). A replica speaks only for its own
Clusters' places, and only once it knows where they stand.
"""

from __future__ import annotations

from kokumi.actors.registry.state import State
from kokumi.core import argocd
from kokumi.core.api import CLUSTERS, Meta
from kokumi.core.ownership import ClusterRef
from kokumi.core.reasons import Reason

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
