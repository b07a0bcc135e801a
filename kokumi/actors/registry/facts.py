"""The table against the Secrets: make Argo CD's Secrets agree with the table, and say so.

The table is the intent; the Secrets, as the API server last showed or accepted them, are the
facts. This section writes a server's Secret until it is in step (retrying what the API server
refuses), takes in what the Secret watch shows, and computes from both what each Cluster is told.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.actors.pace import Pace
from kokumi.actors.registry.line import Line
from kokumi.actors.registry.state import Retry, log, version_of
from kokumi.core.registry import argocd, handover, ownership, registrar
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import NOT_REGISTERED, Registration
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import SECRETS
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.objects import metadata_of, name_of


class Facts(Line):
    # --- what a Cluster is told, and the writes ---------------------------------------------------

    def _registration(self, cluster: ClusterRef) -> Registration:
        """What ``cluster`` is told, from the table and the Secrets as the API server has them."""
        server = self._table.wanted_by(cluster)
        retry = self._retries.get(server) if server is not None else None
        return registrar.told(
            cluster,
            self._table,
            self._secrets.get,
            named=bool(self._named.get(cluster)),
            connection=self._connections.get(cluster),
            retry_error=retry.error if retry is not None else None,
            denied=self._denied.get(cluster),
        )

    def _released(self, cluster: ClusterRef) -> bool:
        return self._table.wanted_by(cluster) is None and not self._named.get(cluster)

    async def _settle(self, servers: Iterable[str | None]) -> None:
        """Bring each server's Secret in step with the table, then tell whoever it concerns."""
        pending = {s for s in servers if s is not None}
        concerned: set[ClusterRef] = set()
        # Each server once, and up to 1,000 more rounds for servers that others touch again.
        rounds, limit = 0, len(pending) + 1000
        pace = Pace()
        while pending:
            await pace.tick()
            server = pending.pop()
            concerned |= self._line(server)
            concerned |= self._holders_named(server)
            more = await self._sync(server)
            pending |= more
            rounds += 1
            if rounds > limit:  # pragma: no cover - a bug in the table, not a reason to spin
                log.error("registry: settling did not converge; retrying later")
                break
        for cluster in concerned:
            await pace.tick()
            self._tell(cluster)
        # Events only after every Cluster concerned knows: an Event is a courtesy, and a slow
        # hub must not leave the old holder believing it still holds the server meanwhile.
        while self._handovers:
            server, was, previous, holder = self._handovers.pop(0)
            until = self._serves(holder)
            if until is None:
                continue  # another replica serves the holder now: not ours to write about
            with trio.move_on_at(until):
                await self._record_handover(server, was, previous, holder)

    def _line(self, server: str) -> set[ClusterRef]:
        holder = self._table.holder(server)
        line = set(self._table.waiting(server))
        if holder is not None:
            line.add(holder)
        return line

    def _holders_named(self, server: str) -> set[ClusterRef]:
        secret = self._secrets.get(argocd.secret_name(server))
        holder = argocd.holder_of(secret) if secret is not None else None
        return {holder} if holder is not None else set()

    def _tell(self, cluster: ClusterRef, *, asked: bool = False) -> None:
        """Send ``cluster`` its registration if it changed, or whenever it asked."""
        registration = self._registration(cluster)
        if self._told.get(cluster) == registration and not asked:
            return
        self._told[cluster] = registration
        if registration == NOT_REGISTERED:
            del self._told[cluster]
        subscriber = self._subscribers.get(cluster)
        if subscriber is not None:
            subscriber[1](registration)

    async def _sync(self, server: str) -> set[str]:
        """One attempt to put the server's Secret in step; the servers a foreign find touched.
        A refused or failed write leaves the server in ``_retries``; a success removes it."""
        deadline = self._deadline(server)
        if deadline is None:
            # Another replica serves this server's holder: nothing here to write, nor retry.
            self._retries.pop(server, None)
            return set()
        until, self._acting = deadline
        name = argocd.secret_name(server)
        try:
            with trio.move_on_at(until) as scope:
                before = self._secrets.get(name)
                try:
                    touched = await self._write(server)
                except errors.Conflict:
                    # Changed by somebody meanwhile and read again: one more try from that version.
                    news: set[str | None] = set()
                    if self._sharded:
                        # Perhaps by another replica: what the Secret says now is the fact.
                        after = self._secrets.get(name)
                        fresh = (before is None) != (after is None) or (
                            before is not None
                            and after is not None
                            and argocd.holder_of(before) != argocd.holder_of(after)
                        )
                        news = self._classify(name, fresh=fresh)
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
            self._acting = frozenset()
        retry = self._retries.pop(server, None)
        if retry is not None:
            retry.failures.recovered()
        return touched

    def _deadline(self, server: str) -> tuple[float, frozenset[ClusterRef]] | None:
        """Until when the registry may write ``server``'s Secret, and the Clusters the write
        acts for (each must still be served when it is sent); None: not this replica's.

        A server held elsewhere is never written here; otherwise the write acts for the holder
        in the table and for the Cluster the Secret names now, and must end by both deadlines.
        """
        secret = self._secrets.get(argocd.secret_name(server))
        if self._table.remote(server) is not None:
            if not self._sharded or secret is None:
                return None
            # Only this replica's waiters' places in the line are written, for them.
            acting: set[ClusterRef | None] = set(self._table.waiting(server))
            acting |= {c for c in handover.waiting_of(secret) if self._is_served(c)}
            if not acting:
                return None
        else:
            acting = {self._table.holder(server), argocd.holder_of(secret) if secret else None}
        until = math.inf
        clusters = frozenset(c for c in acting if c is not None)
        for cluster in clusters:
            served = self._serves(cluster)
            if served is None:
                return None
            until = min(until, served)
        return until, clusters

    def _fenced(self, server: str) -> None:
        """Try the server again after a pause, without a word: see ``_sync``."""
        retry = self._retries.get(server)
        if retry is None:
            retry = self._retries[server] = Retry(
                Backoff(*self._backoff), FailureLog(log, f"registry: Secret for {server}")
            )
        retry.at = trio.current_time() + retry.backoff.next()

    def _failed(self, server: str, exc: errors.KubeError) -> None:
        retry = self._retries.get(server)
        if retry is None:
            retry = self._retries[server] = Retry(
                Backoff(*self._backoff), FailureLog(log, f"registry: Secret for {server}")
            )
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

    def _view(self, server: str) -> registrar.View:
        """What the registry knows of ``server``, for its plan."""
        holder = self._table.holder(server)
        claim = self._claims.get(holder) if holder is not None else None
        return registrar.View(
            server=server,
            table=self._table,
            secret=self._secrets.get(argocd.secret_name(server)),
            connection=self._connections.get(holder) if holder is not None else None,
            claim_current=holder is None or claim is None or self._is_current(holder, claim),
            namespace=self._namespace,
            sharded=self._sharded,
            served=self._is_served,
            knows=self._knows,
            exists=self._exists,
            last_line=self._last_line.get(server, ()),
        )

    async def _write(self, server: str) -> set[str]:
        """Carry out the server's plan: one write, or one step of the table; the servers to
        plan again (this one too when the API server's answer or the step calls for it)."""
        name = argocd.secret_name(server)
        match registrar.plan(self._view(server)):
            case registrar.Keep():
                return set()
            case registrar.Step(event=event):
                if isinstance(event, ownership.Release):
                    self._claims.pop(event.cluster, None)
                    self._connections.pop(event.cluster, None)
                return {s for s in self._step(event) if s is not None} | {server}
            case registrar.HandOver(existing=existing, body=body, to=first):
                # That replica's watch sees its Cluster named and copies its kubeconfig in, as
                # after a restart; this replica's waiters wait behind it.
                await self._replace(name, existing, body)
                log.info(
                    "Secret %s handed to %s, first in line, served by another replica", name, first
                )
                return {s for s in self._step(ownership.Remote(server, first)) if s}
            case registrar.Delete(existing=existing):
                await self._delete(name, existing)
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
                        self._handovers.append((server, was, previous, holder))
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
            self._remember(name, found)
            other = argocd.holder_of(found)
            self._pending.pop(server, None)
            if other is not None and self._serves(other) is None:
                # Another replica's Cluster created it first: the API server decided.
                return {s for s in self._step(ownership.Remote(server, other)) if s}
            if self._sharded and other is not None and other != holder:
                # A Secret this registry had not seen names a Cluster of a shard it took
                # lately: that Cluster holds the server, whatever this table thought.
                return {s for s in self._adopt(server, other, found) if s}
            return {server}  # planned again from the Secret found
        self._remember(name, created)
        self._last_line.pop(server, None)
        self._metrics.registry_writes += 1
        log.info("registered %s with Argo CD as Secret %s", holder, name)
        return set()

    def _found_foreign(self, server: str, name: str) -> set[str]:
        """A Secret Kokumi did not write holds the server's name: never touched, and it blocks."""
        self._remember(name, None)
        self._blocking_names[name] = server
        return {s for s in self._step(ownership.Foreign(server, name)) if s is not None}

    async def _delete(self, name: str, existing: Mapping[str, Any]) -> None:
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
            self._remember(name, None)
            return
        except errors.Conflict:
            try:
                found = await self._client.get(SECRETS, name, namespace=self._namespace)
            except errors.NotFound:
                self._remember(name, None)
                return
            self._remember(name, found if argocd.is_ours(found) else None)
            raise
        self._remember(name, None)
        self._metrics.registry_writes += 1
        log.info("deleted Secret %s: nobody holds its server any more", name)

    # --- what the API server says -----------------------------------------------------------------

    async def _rebuild(self, secrets: Iterable[Mapping[str, Any]]) -> None:
        holders: dict[str, ClusterRef] = {}
        waiting: dict[str, tuple[ClusterRef, ...]] = {}
        written: dict[str, int] = {}
        foreign: list[tuple[str, str]] = []
        remote: list[tuple[str, ClusterRef]] = []
        strays: list[str] = []
        pace = Pace()  # nothing else reads the Secrets or the table before the first list is in
        for secret in secrets:
            await pace.tick()
            name = name_of(secret)
            server = argocd.server_of(secret)
            holder = argocd.holder_of(secret)
            if holder is not None and server is not None and argocd.secret_name(server) == name:
                self._remember(name, secret)
                if self._serves(holder) is None:
                    remote.append((server, holder))
                    continue
                holders[server] = holder
                waiting[server] = self._served(handover.waiting_of(secret))
                written[server] = version_of(secret)
            elif argocd.is_ours(secret):
                # Ours, but naming no holder or not named after its server: nothing can hold it,
                # so it would block its server for ever. It goes (retried like any write).
                self._remember(name, secret)
                strays.append(name)
            elif server is not None:
                foreign.append((server, name))
        self._table, effects = ownership.seed(holders, waiting, written)
        touched: set[str | None] = {e.server for e in effects}
        for server, holder in remote:
            await pace.tick()
            touched |= self._step(ownership.Remote(server, holder))
        for server, name in foreign:
            await pace.tick()
            self._foreign_names[name] = server
            touched |= self._step(ownership.Foreign(server, name))
        for name in strays:
            with contextlib.suppress(errors.KubeError):
                # A failure is found again at the next restart; it blocks nothing meanwhile,
                # since no server is named after it.
                await self._delete(name, self._secrets[name])
        # Seeded holders have no connection yet: nothing is written for them until they want.
        await self._settle(touched)

    async def _note(self, event: WatchEvent | Resync) -> set[str | None]:
        known = self._foreign_names
        touched: set[str | None] = set()
        if isinstance(event, Resync):
            objects = event.objects
            present = {name_of(o) for o in objects}
            gone = set(known) - present
            for name in set(self._blocking_names) - present:
                # A Secret without the cluster label is invisible to this watch: only a read
                # says whether it is gone.
                try:
                    found = await self._client.get(SECRETS, name, namespace=self._namespace)
                except errors.NotFound:
                    gone.add(name)
                    continue
                except errors.KubeError as exc:
                    log.info("registry: cannot check Secret %s: %s", name, exc)
                    continue
                if argocd.is_ours(found):
                    gone.add(name)
            for name in set(self._secrets) - present:
                touched |= self._forget(name)
            for held in self._table.remotes():
                name = argocd.secret_name(held)
                if name not in present and name not in self._secrets and held not in self._pending:
                    gone.add(name)
        elif event.type == "DELETED":
            objects, gone = (), {name_of(event.object)}
        else:
            objects, gone = (event.object,), set()
        for name in gone:
            if name in self._secrets:
                touched |= self._forget(name)
            else:
                # Held elsewhere, by a Secret this registry never saw itself (a shard it gave
                # up): gone now, the server is free here too.
                for held in self._table.remotes():
                    if argocd.secret_name(held) == name:
                        touched |= self._step(ownership.RemoteGone(held))
            for server in (known.pop(name, None), self._blocking_names.pop(name, None)):
                if server is not None:
                    touched |= self._step(ownership.ForeignGone(server, name))
        pace = Pace()  # between two ticks other tasks run, but only this one reads the table
        for secret in objects:
            await pace.tick()
            name = name_of(secret)
            server = argocd.server_of(secret)
            if argocd.is_ours(secret):
                if self._newer(secret):
                    before = self._secrets.get(name)
                    touched.add(self._server_named(name))
                    self._remember(name, secret)
                    touched.add(self._server_named(name))
                    fresh = before is None or argocd.holder_of(before) != argocd.holder_of(secret)
                    touched |= self._classify(name, fresh=fresh)
                continue
            # Relabelled away from us, or never ours: not ours to delete either.
            if name in self._secrets:
                touched |= self._forget(name)
            previous = known.get(name)
            if previous is not None and previous != server:
                known.pop(name)
                touched |= self._step(ownership.ForeignGone(previous, name))
            if server is not None:
                known[name] = server
                touched |= self._step(ownership.Foreign(server, name))
        return touched

    def _forget(self, name: str) -> set[str | None]:
        """The Secret ``name`` is gone (or no longer ours); a server held elsewhere is free."""
        server = self._server_named(name)
        secret = self._secrets.get(name)
        self._remember(name, None)
        touched: set[str | None] = {server}
        if (
            server is not None
            and secret is not None
            and argocd.secret_name(server) == name  # a stray that declares it says nothing
            and self._table.remote(server) is not None
        ):
            previous = argocd.holder_of(secret)
            self._last_line[server] = tuple(c for c in handover.waiting_of(secret) if c != previous)
            gone = attrs.evolve(self._view(server), secret=secret)
            first = registrar.first_elsewhere(gone, None)
            if first is not None and argocd.is_ours(secret):
                # Another replica's Cluster came first: it creates the Secret; ours wait.
                self._pending[server] = trio.current_time() + self._grace
                touched |= self._step(ownership.Remote(server, first))
            else:
                touched |= self._step(ownership.RemoteGone(server))
        return touched

    async def _reshard(self) -> set[str | None]:
        """Disown the claims of Clusters served elsewhere now, classify every Secret again, in
        slices (at 10,000 Secrets one step here took 3.3 s); only this task reads the table and
        the Secrets, and a change of shards meanwhile asks for another reshard after this one."""
        touched: set[str | None] = set()
        pace = Pace()
        # The actors of a shard taken say afresh what they want; those of a shard lost, nothing.
        self._let_go = {c for c in self._let_go if self._is_served(c)}
        for cluster in self._table.wanting():
            await pace.tick()
            if self._serves(cluster) is None:
                touched |= self._disown(cluster)
        # A Cluster named by several Secrets as last seen (a move this registry has not seen
        # finish) is adopted where it was written last, as after a restart.
        newest: dict[ClusterRef, str] = {}
        for name, secret in list(self._secrets.items()):
            await pace.tick()
            holder = argocd.holder_of(secret)
            if holder is None:
                continue
            kept = newest.get(holder)
            if kept is None or version_of(secret) > version_of(self._secrets[kept]):
                newest[holder] = name
        for name in list(self._secrets):
            await pace.tick()
            if name not in self._secrets:
                continue
            holder = argocd.holder_of(self._secrets[name])
            if holder is not None and newest.get(holder) != name and self._is_served(holder):
                continue
            touched |= self._classify(name)
        return touched | self._stale_lines()
