"""The table against the Secrets: make Argo CD's Secrets agree with the table, and say so.

The table is the intent; the Secrets, as the API server last showed or accepted them, are the
facts. :class:`Facts` writes a server's Secret until it is in step (retrying what the API server
refuses), takes in what the Secret watch shows, and computes from both what each Cluster is told.
It is handed the registry's :class:`~kokumi.actors.registry.state.Memory` and owns the I/O: the
client, the fence every write is sent through, the Events of a handover.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from kokumi.actors.metrics import Metrics
from kokumi.actors.pace import Pace
from kokumi.actors.registry.state import Memory, Retry, log
from kokumi.actors.writes import EventRecorder
from kokumi.core.api import CLUSTERS, Meta
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd, handover, lines, ownership, registrar
from kokumi.core.registry.carry import NO_EXTRAS
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import NOT_REGISTERED, Registration
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import Client
from kokumi.kube.resources import SECRETS
from kokumi.objects import metadata_of

HANDOVER_REASON = Reason.ARGOCD_NAME_CHANGED
"""The Event on a Cluster that took a server over: Argo CD's name for the cluster changed."""

SYNCS_AT_ONCE = 8
"""Servers whose Secrets one settling writes at a time. One at a time, each new Cluster's claim
waited for its Secret's create: while 10,000 Clusters onboarded the registry registered 10-15
a second while the hub was busy (a create took 70 ms) and 40-60 after, and every Cluster's
first status waited for it. Each server's Secret still has one writer at a time."""


class Facts:
    def __init__(
        self,
        memory: Memory,
        client: Client,
        namespace: str,
        metrics: Metrics,
        *,
        backoff: tuple[float, float],
        events: EventRecorder | None,
    ) -> None:
        self._m = memory
        self._client = client
        self._namespace = namespace
        self.metrics = metrics
        self._backoff = backoff
        self._events = events
        # Every write goes through this client, fenced at the moment it is sent: the Clusters
        # the write acts for (``_acting``, set for the length of one server's sync, in the task
        # that syncs it: several servers are synced at once) must all still be served here, and
        # ``may_write`` (a single leader's Lease) must still hold. A check before the write
        # leaves its awaits, a request slot's among them, for a Lease to go; only this one is
        # made with nothing between it and the request.
        self._acting: contextvars.ContextVar[frozenset[ClusterRef]] = contextvars.ContextVar(
            "acting", default=frozenset()
        )
        self.may_write: Callable[[], bool] = lambda: True
        self._writer = client.fenced(self._fence)

    def _fence(self) -> bool:
        acting = self._acting.get()
        return self.may_write() and all(self._m.serves(c) is not None for c in acting)

    # --- what a Cluster is told, and the writes ---------------------------------------------------

    def _registration(self, cluster: ClusterRef) -> Registration:
        """What ``cluster`` is told, from the table and the Secrets as the API server has them."""
        server = self._m.table.wanted_by(cluster)
        retry = self._m.retries.get(server) if server is not None else None
        return registrar.told(
            cluster,
            self._m.table,
            self._m.secrets.get,
            named=bool(self._m.named.get(cluster)),
            connection=self._m.connections.get(cluster),
            retry_error=retry.error if retry is not None else None,
            denied=self._m.denied.get(cluster),
            extras=self._m.extras.get(cluster, NO_EXTRAS),
        )

    def released(self, cluster: ClusterRef) -> bool:
        return self._m.table.wanted_by(cluster) is None and not self._m.named.get(cluster)

    async def settle(self, servers: Iterable[str | None]) -> None:
        """Bring each server's Secret in step with the table, then tell whoever it concerns.

        Up to :data:`SYNCS_AT_ONCE` servers are synced together, each by one task at a time: a
        server touched again while its sync runs is synced once more after it. The table
        changes only between awaits, so each sync plans from the table as it is then.
        """
        pending = {s for s in servers if s is not None}
        concerned: set[ClusterRef] = set()
        # Each server once, and up to 1,000 more rounds for servers that others touch again.
        rounds, limit = 0, len(pending) + 1000
        pace = Pace()
        running: set[str] = set()
        finished_send, finished = trio.open_memory_channel[tuple[str, set[str]]](math.inf)

        async def sync(server: str) -> None:
            more: set[str] = set()
            try:
                more = await self._sync(server)
            finally:
                finished_send.send_nowait((server, more))

        async with trio.open_nursery() as nursery:
            while pending or running:
                for server in sorted(pending - running):
                    if len(running) >= SYNCS_AT_ONCE or rounds > limit:
                        break
                    await pace.tick()
                    pending.discard(server)
                    concerned |= self._in_line(server)
                    concerned |= self._holders_named(server)
                    running.add(server)
                    rounds += 1
                    nursery.start_soon(sync, server)
                if not running:  # pragma: no cover - a bug in the table, not a reason to spin
                    log.error("registry: settling did not converge; retrying later")
                    break
                server, more = await finished.receive()
                running.discard(server)
                pending |= more
        for cluster in concerned:
            await pace.tick()
            self.tell(cluster)
        # Events only after every Cluster concerned knows: an Event is a courtesy, and a slow
        # hub must not leave the old holder believing it still holds the server meanwhile.
        while self._m.handovers:
            server, was, previous, holder = self._m.handovers.pop(0)
            until = self._m.serves(holder)
            if until is None:
                continue  # another replica serves the holder now: not ours to write about
            with trio.move_on_at(until):
                await self._record_handover(server, was, previous, holder)

    def _in_line(self, server: str) -> set[ClusterRef]:
        holder = self._m.table.holder(server)
        members = set(self._m.table.waiting(server))
        if holder is not None:
            members.add(holder)
        return members

    def _holders_named(self, server: str) -> set[ClusterRef]:
        secret = self._m.secrets.get(argocd.secret_name(server))
        holder = argocd.holder_of(secret) if secret is not None else None
        return {holder} if holder is not None else set()

    def tell(self, cluster: ClusterRef, *, asked: bool = False) -> None:
        """Send ``cluster`` its registration if it changed, or whenever it asked."""
        registration = self._registration(cluster)
        if self._m.told.get(cluster) == registration and not asked:
            return
        self._m.told[cluster] = registration
        if registration == NOT_REGISTERED:
            del self._m.told[cluster]
        subscriber = self._m.subscribers.get(cluster)
        if subscriber is not None:
            subscriber[1](registration)

    async def _sync(self, server: str) -> set[str]:
        """One attempt to put the server's Secret in step; the servers a foreign find touched.
        A refused or failed write leaves the server in ``_retries``; a success removes it."""
        deadline = self._deadline(server)
        if deadline is None:
            acting = self._acting_for(server)
            if acting and all(c in self._m.claims for c in acting):
                # Every Cluster it acts for claimed it here and was not disowned: their shard's
                # Lease is late in its renewal (still held, past its renew deadline). A renewal
                # brings no reshard, and their next claim is skipped as the same one on a
                # server in step, so the write waits here for the renewal, or for the reshard
                # that disowns them if the Lease is lost.
                self._fenced(server)
                return set()
            # Another replica serves this server's holder: nothing here to write, nor retry.
            self._m.retries.pop(server, None)
            return set()
        until, acting = deadline
        token = self._acting.set(acting)
        name = argocd.secret_name(server)
        try:
            with trio.move_on_at(until) as scope:
                before = self._m.secrets.get(name)
                try:
                    touched = await self._write(server)
                except errors.Conflict:
                    # Changed by somebody meanwhile and read again: one more try from that version.
                    news: set[str | None] = set()
                    if self._m.sharded:
                        # Perhaps by another replica: what the Secret says now is the fact.
                        after = self._m.secrets.get(name)
                        fresh = (before is None) != (after is None) or (
                            before is not None
                            and after is not None
                            and argocd.holder_of(before) != argocd.holder_of(after)
                        )
                        news = lines.classify(self._m, name, fresh=fresh)
                    touched = await self._write(server)
                    touched |= {s for s in news if s is not None and s != server}
            if scope.cancelled_caught:
                raise errors.Fenced("the shard's Lease was not renewed in time")
        except errors.Fenced:
            # A shard went while the write waited: nothing was sent. Not a failure to log or
            # show: the reshard that follows hands the server to whoever serves it now.
            self._fenced(server)
            return set()
        except errors.KubeError as exc:
            self._failed(server, exc)
            return set()
        finally:
            self._acting.reset(token)
        retry = self._m.retries.pop(server, None)
        if retry is not None:
            retry.failures.recovered()
        return touched

    def _acting_for(self, server: str) -> frozenset[ClusterRef] | None:
        """The Clusters a write of ``server``'s Secret acts for; None: nothing to write here.

        A server held elsewhere is never written here, but for this replica's waiters' places
        in its line; otherwise the write acts for the holder in the table and for the Cluster
        the Secret names now.
        """
        secret = self._m.secrets.get(argocd.secret_name(server))
        if self._m.table.remote(server) is not None:
            if not self._m.sharded or secret is None:
                return None
            # Only this replica's waiters' places in the line are written, for them.
            acting: set[ClusterRef | None] = set(self._m.table.waiting(server))
            acting |= {c for c in handover.waiting_of(secret) if self._m.is_served(c)}
            if not acting:
                return None
        else:
            acting = {self._m.table.holder(server), argocd.holder_of(secret) if secret else None}
        return frozenset(c for c in acting if c is not None)

    def _deadline(self, server: str) -> tuple[float, frozenset[ClusterRef]] | None:
        """Until when the registry may write ``server``'s Secret, and the Clusters the write
        acts for (each must still be served when it is sent, so the write ends by the earliest
        of their deadlines); None: not this replica's, or not this moment."""
        clusters = self._acting_for(server)
        if clusters is None:
            return None
        until = math.inf
        for cluster in clusters:
            served = self._m.serves(cluster)
            if served is None:
                return None
            until = min(until, served)
        return until, clusters

    def _retry_of(self, server: str) -> Retry:
        """The server's retry, made on its first failure (its backoff and log start there)."""
        retry = self._m.retries.get(server)
        if retry is None:
            retry = self._m.retries[server] = Retry(
                Backoff(*self._backoff), FailureLog(log, f"registry: Secret for {server}")
            )
        return retry

    def _fenced(self, server: str) -> None:
        """Try the server again after a pause, without a word: see ``_sync``."""
        retry = self._retry_of(server)
        retry.at = trio.current_time() + retry.backoff.next()

    def _failed(self, server: str, exc: errors.KubeError) -> None:
        retry = self._retry_of(server)
        delay = retry.backoff.next()
        retry.at = trio.current_time() + delay
        retry.failures.failed(exc, retry_in=delay)
        if isinstance(exc, errors.Forbidden):
            retry.error = (
                f"Kokumi may not write cluster Secrets in namespace {self._namespace}: bind the "
                f"ClusterRole kokumi-argocd-cluster-registrar there (the last document of "
                f"install.yaml, applied after Argo CD); Kokumi retries"
            )
        else:
            retry.error = (
                f"registering with Argo CD failed ({type(exc).__name__}, HTTP "
                f"{getattr(exc, 'code', None) or 'none'}); Kokumi retries"
            )

    async def _write(self, server: str) -> set[str]:
        """Carry out the server's plan: one write, or one step of the table; the servers to
        plan again (this one too when the API server's answer or the step calls for it)."""
        name = argocd.secret_name(server)
        match registrar.plan(lines.view(self._m, self._namespace, server)):
            case registrar.Keep():
                return set()
            case registrar.Step(event=event):
                if isinstance(event, ownership.Release):
                    self._m.forget_claim(event.cluster)
                return {s for s in self._m.step(event) if s is not None} | {server}
            case registrar.HandOver(existing=existing, body=body, to=first):
                # That replica's watch sees its Cluster named and copies its kubeconfig in, as
                # after a restart; this replica's waiters wait behind it.
                await self._replace(name, existing, body)
                log.info(
                    "Secret %s handed to %s, first in line, served by another replica", name, first
                )
                return {s for s in self._m.step(ownership.Remote(server, first)) if s}
            case registrar.Delete(existing=existing):
                await self.delete(name, existing)
                return set()
            case registrar.Create(body=body):
                return await self._create(server, name, body)
            case registrar.Replace(
                existing=existing,
                body=body,
                holder=holder,
                previous=previous,
                was=was,
                announce=announce,
            ):
                await self._replace(name, existing, body)
                if holder is not None:
                    log.info("Secret %s now registers %s", name, holder)
                    if announce:
                        self._m.handovers.append((server, was, previous, holder))
                return set()
        raise AssertionError(server)  # pragma: no cover

    async def _create(self, server: str, name: str, desired: dict[str, Any]) -> set[str]:
        holder = argocd.holder_of(desired)
        try:
            created = await self._writer.create(SECRETS, desired, namespace=self._namespace)
        except errors.AlreadyExists:
            found = await self._client.get(SECRETS, name, namespace=self._namespace)
            if not argocd.is_ours(found):
                return self._found_foreign(server, name)
            self._m.remember(name, found)
            other = argocd.holder_of(found)
            self._m.pending.pop(server, None)
            if other is not None and self._m.serves(other) is None:
                # Another replica's Cluster created it first: the API server decided.
                return {s for s in self._m.step(ownership.Remote(server, other)) if s}
            if self._m.sharded and other is not None and other != holder:
                # A Secret this registry had not seen names a Cluster of a shard it took
                # lately: that Cluster holds the server, whatever this table thought.
                return {s for s in lines.adopt(self._m, server, other, found) if s}
            return {server}  # planned again from the Secret found
        self._m.remember(name, created)
        self._m.last_line.pop(server, None)
        self.metrics.registry_writes += 1
        log.info("registered %s with Argo CD as Secret %s", holder, name)
        return set()

    def _found_foreign(self, server: str, name: str) -> set[str]:
        """A Secret Kokumi did not write holds the server's name: never touched, and it blocks."""
        self._m.remember(name, None)
        self._m.blocking_names[name] = server
        return {s for s in self._m.step(ownership.Foreign(server, name)) if s is not None}

    async def delete(self, name: str, existing: Mapping[str, Any]) -> None:
        meta = metadata_of(existing)
        try:
            # Only the version we know is ours: a Secret changed meanwhile is read again first.
            await self._writer.delete(
                SECRETS,
                name,
                namespace=self._namespace,
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            )
        except errors.NotFound:
            self._m.remember(name, None)
            return
        except errors.Conflict:
            try:
                found = await self._client.get(SECRETS, name, namespace=self._namespace)
            except errors.NotFound:
                self._m.remember(name, None)
                return
            self._m.remember(name, found if argocd.is_ours(found) else None)
            raise
        self._m.remember(name, None)
        self.metrics.registry_writes += 1
        log.info("deleted Secret %s: nobody holds its server any more", name)

    async def _replace(
        self, name: str, existing: Mapping[str, Any], desired: Mapping[str, Any]
    ) -> None:
        """Update the Secret in place (a handover never deletes): Argo CD never sees it vanish."""
        body = argocd.updated(existing, desired)
        try:
            replaced = await self._writer.replace(SECRETS, body, namespace=self._namespace)
        except errors.Conflict:
            # Somebody changed it meanwhile: read it again, and the retry starts from that.
            self._m.remember(name, await self._client.get(SECRETS, name, namespace=self._namespace))
            raise
        except errors.NotFound:
            self._m.remember(name, None)
            raise
        self._m.remember(name, replaced)
        self.metrics.registry_writes += 1

    async def _record_handover(
        self, server: str, was: str, previous: ClusterRef | None, holder: ClusterRef
    ) -> None:
        """Tell the new holder's readers that Argo CD's name for the server changed with it:
        the Secret stayed, but Applications that target the old name lose their cluster.

        ``previous`` is None when another replica handed the Secret over: only the name that
        Argo CD knew is left of the old holder then.
        """
        uid = self._m.claims.get(holder)
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
