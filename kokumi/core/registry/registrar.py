"""The registry's decisions: what to write for one server's Secret, and what a Cluster is told.

The registry actor keeps the facts (the first-come table, Argo CD's Secrets as the API server last
showed or accepted them, the Clusters' claims and connections, which Clusters this replica
serves) and carries out what this module decides from them: one :func:`plan` per server, one
:func:`told` per Cluster. Deciding here, purely, is what lets a property test hold the rules to
the spec across tables, Secrets and replica layouts that a model test reaches only by chance,
and keeps the actor a loop that writes, reads back and asks again.

A plan is one step. The actor carries it out and plans again from what the API server said
(a create that finds the Secret taken, a replace that conflicts), until the plan is
:class:`Keep`: applying a plan's write to the Secret it was made from and planning again gives
:class:`Keep` or a step towards it, never the same write twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd, handover, ownership
from kokumi.core.registry.carry import NO_EXTRAS, Extras
from kokumi.core.registry.ownership import ClusterRef, is_argocd_own
from kokumi.core.registry.registration import Registration
from kokumi.objects import secret_data

__all__ = [
    "Create",
    "Delete",
    "HandOver",
    "Keep",
    "Plan",
    "Replace",
    "Step",
    "View",
    "first_elsewhere",
    "line_to_record",
    "plan",
    "same",
    "same_data",
    "told",
]

Served = Callable[[ClusterRef], bool]


@attrs.frozen
class View:
    """What the registry knows of one server, as the inputs of its plan.

    ``secret``: Kokumi's Secret under the server's name, as last seen or written (None: none).
    ``connection``: the table holder's connection, if its actor has claimed since a restart.
    ``claim_current``: whether the holder's claim was made by the Cluster object alive now.
    ``sharded``: several replicas share the Clusters; ``served`` says which are this one's, and
    ``knows`` which of those have said what they want (or no longer exist); ``exists`` whether
    a Cluster of that name exists at all (a deleted one is never handed a Secret).
    ``last_line``: the line the server's last Secret recorded, for the Secret created next.
    ``extras``: what the holder's claim carries beside its connection (labels, Environments,
    scope): written with it, in the same write.
    """

    server: str
    table: ownership.Table
    secret: Mapping[str, Any] | None = attrs.field(default=None, repr=False)
    connection: Connection | None = attrs.field(default=None, repr=False)
    claim_current: bool = True
    namespace: str = "argocd"
    sharded: bool = False
    served: Served = lambda _cluster: True
    knows: Served = lambda _cluster: True
    exists: Served = lambda _cluster: True
    last_line: tuple[ClusterRef, ...] = ()
    extras: Extras = attrs.field(default=NO_EXTRAS, repr=False)

    @property
    def holder(self) -> ClusterRef | None:
        return self.table.holder(self.server)


# --- what a plan says ------------------------------------------------------------------------


@attrs.frozen
class Keep:
    """The Secret is as it should be, or this replica has nothing to write for it."""


@attrs.frozen
class Create:
    """No Secret yet: create this one (the API server's atomic create decides a race)."""

    body: dict[str, Any] = attrs.field(repr=False)


@attrs.frozen
class Replace:
    """Update the Secret in place to ``body``: a new connection or line for ``holder`` (None: a
    line kept for the Clusters in it), or a handover to it from ``previous``.

    ``announce``: Argo CD's name for the server changes with this write (a handover, or the
    first copy of its connection by the replica of a Cluster another replica handed the Secret
    to), and the new holder hears so in an Event; ``was`` is the name Argo CD knew.
    """

    existing: Mapping[str, Any] = attrs.field(repr=False)
    body: dict[str, Any] = attrs.field(repr=False)
    holder: ClusterRef | None = None
    previous: ClusterRef | None = None
    was: str = ""
    announce: bool = False


@attrs.frozen
class HandOver:
    """The holder let go and the first in line is ``to``, another replica's Cluster: relabel
    the Secret in place to name it (the line behind it recorded); then the table learns that
    the server is held elsewhere (``ownership.Remote``)."""

    existing: Mapping[str, Any] = attrs.field(repr=False)
    body: dict[str, Any] = attrs.field(repr=False)
    to: ClusterRef


@attrs.frozen
class Delete:
    """Nobody here or elsewhere holds or waits for the server: the Secret goes."""

    existing: Mapping[str, Any] = attrs.field(repr=False)


@attrs.frozen
class Step:
    """No write yet: the table must take ``event`` first (a claim of an object that is gone, a
    line the Secret orders otherwise), and the server be planned again."""

    event: ownership.Event


Plan: TypeAlias = Keep | Create | Replace | HandOver | Delete | Step


# --- the plan ----------------------------------------------------------------------------------


def plan(view: View) -> Plan:
    """The one next write (or table step) that brings the server's Secret in step."""
    server, table, existing = view.server, view.table, view.secret
    if table.remote(server) is not None:
        return _join(view)
    holder = view.holder
    if holder is None:
        if existing is None:
            return Keep()
        first = first_elsewhere(view, None)
        if first is not None:
            return _hand_over(view, existing, first)
        return Delete(existing)
    if not view.claim_current:
        # The object that made the claim is gone (deleted, perhaps made again under its name
        # while its actor was busy, which then stays silent): the claim goes with it, and the
        # server to the next in line, never on the old object's connection.
        return Step(ownership.Release(holder))
    waiting = line_to_record(view, holder)
    if view.connection is None:
        # Seeded from a Secret after a restart, or handed to a waiter the registry has not heard
        # from since: only the waiting order can be kept up to date meanwhile.
        if existing is not None and argocd.holder_of(existing) == holder:
            return _keep_waiting(existing, waiting)
        return Keep()
    desired = handover.with_waiting(
        argocd.cluster_secret(view.connection, holder, view.namespace, view.extras), waiting
    )
    if existing is None:
        return Create(desired)
    if same(existing, desired):
        return Keep()
    previous = argocd.holder_of(existing)
    if previous is not None and previous != holder:
        first = first_elsewhere(view, holder)
        if first is not None:
            return _hand_over(view, existing, first)
        first = _first_here(view, holder)
        if first is not None:
            # This table heard of its waiters in another order than the Secret records (a
            # shard taken lately): the Secret's order decides who comes next.
            recorded = tuple(c for c in handover.waiting_of(existing) if view.served(c))
            return Step(ownership.Adopt(server, first, (), recorded))
    named = secret_data(existing, "name")
    was = (named or b"").decode("utf-8", "replace")
    if previous is not None and previous != holder:
        return Replace(existing, desired, holder, previous, was, announce=True)
    # Another replica handed this Cluster the Secret, relabelled, and it is this write that
    # gives Argo CD the new name: the other replica could not say so.
    renamed = bool(named) and named != secret_data(desired, "name")
    return Replace(existing, desired, holder, None, was, announce=renamed)


def line_to_record(view: View, holder: ClusterRef) -> tuple[ClusterRef, ...]:
    """The waiting order for the server's Secret: the table's, or with shards, the order the
    Secret records with this replica's waiters in their places."""
    local = view.table.waiting(view.server)
    if not view.sharded:
        return local
    recorded = handover.waiting_of(view.secret) if view.secret else view.last_line
    line = handover.merged_line(recorded, local, view.knows)
    return tuple(c for c in line if c != holder)


def _join(view: View) -> Plan:
    """A server held elsewhere: keep this replica's waiters' places on its Secret."""
    existing = view.secret
    if existing is None or not view.sharded:
        return Keep()
    holder = argocd.holder_of(existing)
    line = handover.merged_line(
        handover.waiting_of(existing), view.table.waiting(view.server), view.knows
    )
    return _keep_waiting(existing, tuple(c for c in line if c != holder))


def _keep_waiting(existing: Mapping[str, Any], waiting: tuple[ClusterRef, ...]) -> Plan:
    if handover.waiting_of(existing) == waiting:
        return Keep()
    return Replace(existing, handover.with_waiting(existing, waiting))


def _hand_over(view: View, existing: Mapping[str, Any], first: ClusterRef) -> HandOver:
    """Relabelled to name ``first``, with the line behind it as this replica would record it:
    its own Clusters that let go leave, those that wait keep their places or join at the end
    (one write, not a handover and then a line)."""
    local = (*([view.holder] if view.holder else []), *view.table.waiting(view.server))
    line = handover.merged_line(handover.waiting_of(existing), local, view.knows)
    body = handover.with_waiting(handover.handed_to(existing, first), ())
    previous = argocd.holder_of(existing)
    return HandOver(
        existing,
        handover.with_waiting(body, [c for c in line if c not in (previous, first)]),
        first,
    )


def first_elsewhere(view: View, holder: ClusterRef | None) -> ClusterRef | None:
    """The first waiter, if it is another replica's and comes before ``holder`` (the next
    holder in this table, None if there is none here)."""
    existing = view.secret
    if not view.sharded or existing is None or view.table.foreign(view.server):
        return None
    local = (*([holder] if holder else []), *view.table.waiting(view.server))
    recorded = tuple(c for c in handover.waiting_of(existing) if view.exists(c))
    first = handover.first_waiting(recorded, argocd.holder_of(existing), local, view.served)
    return first if first is not None and not view.served(first) else None


def _first_here(view: View, holder: ClusterRef) -> ClusterRef | None:
    """The first recorded waiter when it is another of this replica's than ``holder``."""
    existing = view.secret
    if not view.sharded or existing is None:
        return None
    local = (holder, *view.table.waiting(view.server))
    recorded = tuple(c for c in handover.waiting_of(existing) if view.exists(c))
    first = handover.first_waiting(recorded, argocd.holder_of(existing), local, view.served)
    return first if first is not None and first != holder and first in local else None


# --- what a Cluster is told ------------------------------------------------------------------


def told(
    cluster: ClusterRef,
    table: ownership.Table,
    secret_of: Callable[[str], Mapping[str, Any] | None],
    *,
    named: bool,
    connection: Connection | None,
    retry_error: str | None = None,
    denied: tuple[str, str] | None = None,
    extras: Extras = NO_EXTRAS,
) -> Registration:
    """What ``cluster`` is told, from the table and the Secrets as the API server has them.

    ``named``: some Secret of Kokumi's names it (what its finalizer guards); ``secret_of`` the
    Secret under a server's name as last seen; ``retry_error`` why its server's last write
    failed; ``denied`` the server and message of an egress refusal; ``extras`` what its claim
    carries (a scope Argo CD does not have yet is a registration not in step either).
    """
    server = table.wanted_by(cluster)
    if server is None:
        if denied is not None:
            return Registration(named, denied[0], denied[1], Reason.EGRESS_DENIED)
        return Registration(holding=named)
    if is_argocd_own(server) or table.holder(server) != cluster:
        return Registration(named, server, table.message(server), Reason.CLUSTER_CONFLICT)
    secret = secret_of(argocd.secret_name(server))
    registers = secret is not None and argocd.holder_of(secret) == cluster
    if (
        registers
        and secret is not None
        and (connection is None or same_data(secret, connection, cluster, extras))
    ):
        # What Argo CD has is this Cluster's current connection; a pending change of the
        # waiting order alone is no concern of its status.
        return Registration(holding=True, server=server)
    if retry_error is not None:
        return Registration(named, server, retry_error, Reason.REGISTRATION_FAILED)
    if registers:
        return Registration(holding=True, server=server)
    # Handed over to a Cluster whose kubeconfig the registry has not seen since a restart: its
    # next check brings it, and the Secret is written then.
    message = (
        f"server {server} is handed to this Cluster; Kokumi copies its kubeconfig to Argo CD "
        "at its next check"
    )
    return Registration(named, server, message, Reason.REGISTRATION_PENDING)


# --- comparing Secrets -------------------------------------------------------------------------


def same_data(
    secret: Mapping[str, Any],
    connection: Connection,
    holder: ClusterRef,
    extras: Extras = NO_EXTRAS,
) -> bool:
    """Whether the Secret carries ``holder``'s ``connection`` (and scope) as Argo CD reads it."""
    desired = argocd.cluster_secret(connection, holder, extras=extras)
    found: bool = (secret.get("data") or {}) == desired["data"]
    return found


def _in_step(found: Mapping[str, Any], wanted: Mapping[str, Any], keys: set[str]) -> bool:
    return all(found.get(k) == wanted.get(k) for k in keys)


def same(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing ``desired`` would change nothing Kokumi owns of ``existing``: its four
    labels, its line, its data, and the extras either carries (what ``existing`` carried and
    ``desired`` does not is a change: :func:`argocd.updated` removes it)."""
    metadata = existing.get("metadata")
    labels = (metadata.get("labels") if isinstance(metadata, Mapping) else None) or {}
    annotations = (metadata.get("annotations") if isinstance(metadata, Mapping) else None) or {}
    wanted = desired["metadata"]["labels"]
    wanted_annotations = desired["metadata"].get("annotations") or {}
    annotation_keys = set(wanted_annotations) | argocd.carried_annotation_keys(existing)
    annotation_keys.discard(handover.ANNOTATION_WAITING)  # compared as a line, below
    return (
        _in_step(labels, wanted, set(wanted) | argocd.carried_label_keys(existing))
        and _in_step(annotations, wanted_annotations, annotation_keys)
        and handover.waiting_of(existing) == handover.waiting_of(desired)
        and (existing.get("data") or {}) == desired["data"]
        and existing.get("type", "Opaque") == desired["type"]
    )
