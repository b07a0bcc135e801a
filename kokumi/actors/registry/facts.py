"""The server registry: the only writer of Secrets in Argo CD's namespace.

It serialises every claim on a server through the pure first-come table (``kokumi.core.ownership``)
and then makes Argo CD's Secrets agree with that table. The table is the intent; the Secrets, as the
API server last showed or accepted them, are the facts; and what a Cluster is told is computed from
both, never from the intent alone:

- a Cluster *holds* a server only while a Secret of Kokumi's names it (so "holding" means "a
  credential of mine is in Argo CD", which is what its finalizer guards);
- a release is *done* only when no Secret names the Cluster any more;
- a write the API server refuses or never answers leaves the server out of step, and the registry
  retries it with capped, jittered backoff until it is in step, logging each change of error once.

The API server is the second guard: the Secret is named after the server and ``create`` is atomic,
so ``AlreadyExists`` means somebody holds it, and its labels say who. The registry keeps no memory a
crash could lose: on start the table is rebuilt from the Secrets found, their waiting order from the
annotation :data:`kokumi.core.argocd.ANNOTATION_WAITING`, so a restart with nothing changed writes
nothing and hands over in the same order as before.

Requests, and the news of the registry's own Secret watch, come through one bounded inbox with a
one-shot reply channel each. News for Clusters other than the asker (a waiter that just took a
server over) goes out through callbacks that never block, because a Cluster actor may at that very
moment be waiting for the registry. Every request carries the uid of the Cluster object it acts
for: a late message from a Cluster that was deleted (and perhaps created again under its name)
never acts for its successor.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.actors.context import EventRecorder, Metrics
from kokumi.actors.pace import Pace
from kokumi.core import argocd, ownership, shards
from kokumi.core.api import CLUSTERS, Meta
from kokumi.core.kubeconfig import Connection
from kokumi.core.ownership import IN_CLUSTER_SERVER, ClusterRef
from kokumi.core.reasons import Reason
from kokumi.core.registration import NOT_REGISTERED, Registration
from kokumi.kube import errors
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.client import SECRETS, Client
from kokumi.kube.objects import secret_data
from kokumi.kube.watch import Resync, WatchEvent, watch

__all__ = ["NOT_REGISTERED", "Registration", "Registry"]

log = logging.getLogger("kokumi.actors.registry")  # one logger for the package, as before

CLUSTER_SECRETS = f"{argocd.LABEL_SECRET_TYPE}=cluster"

HANDOVER_REASON = Reason.ARGOCD_NAME_CHANGED
"""The Event on a Cluster that took a server over: Argo CD's name for the cluster changed."""


Liveness = Callable[[ClusterRef, str], bool]
"""Whether ``uid`` is the Cluster object that exists now under that namespace and name."""

Serves = Callable[[ClusterRef], float | None]
"""Until when (Trio time) this replica may write for the Cluster; None: another replica serves it.

Without shards every Cluster is served for ever (``math.inf``). With shards it is the renew
deadline of the Lease of the Cluster's shard, so a write for a shard whose Lease was not renewed
in time ends when the shard's Cluster actors are cancelled, before another replica may take it.
"""


@attrs.frozen
class _Want:
    cluster: ClusterRef
    uid: str
    connection: Connection = attrs.field(repr=False)
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class _Release:
    cluster: ClusterRef
    uid: str
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class _Prune:
    existing: frozenset[ClusterRef]
    reply: trio.MemorySendChannel[Any]


@attrs.frozen
class _Reshard:
    reply: trio.MemorySendChannel[Any] | None = None


@attrs.frozen
class _Note:
    event: WatchEvent | Resync
    reply: trio.MemorySendChannel[Any] | None = None


_Request = _Want | _Release | _Prune | _Note | _Reshard


@attrs.define
class _Retry:
    """A server whose Secret is out of step with the table: when to try again, and how it fails."""

    backoff: Backoff
    failures: FailureLog
    at: float = math.inf
    error: str | None = None  # the last failure, as the Clusters' status shows it


class Registry:
    def __init__(
        self,
        client: Client,
        namespace: str,
        metrics: Metrics | None = None,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 120.0,
        events: EventRecorder | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._metrics = metrics or Metrics()
        self._events = events
        self._backoff = (backoff_initial, backoff_max)
        self._table = ownership.Table()
        self._connections: dict[ClusterRef, Connection] = {}
        self._claims: dict[ClusterRef, str] = {}  # the uid each claim was made for
        self._secrets: dict[str, dict[str, Any]] = {}  # name -> Secret, as last seen or written
        self._named: dict[ClusterRef, set[str]] = {}  # holder -> names of Secrets naming it
        self._told: dict[ClusterRef, Registration] = {}
        self._subscribers: dict[ClusterRef, tuple[str, Callable[[Registration], None]]] = {}
        # Foreign Secrets that hold the name Kokumi would give a server, whatever server they
        # declare: their deletion frees that server.
        self._blocking_names: dict[str, str] = {}
        # Foreign cluster Secrets as the watch shows them: name -> the server each declares.
        self._foreign_names: dict[str, str] = {}
        self._retries: dict[str, _Retry] = {}
        # Handovers written but not yet told as an Event: (server, Argo CD's name before,
        # previous holder if known, holder).
        self._handovers: list[tuple[str, str, ClusterRef | None, ClusterRef]] = []
        self._is_current: Liveness = lambda _ref, _uid: True
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
        self._reshard_wanted = trio.Event()
        self._inbox_send, self._inbox = trio.open_memory_channel[_Request](64)

    def follow_liveness(self, is_current: Liveness) -> None:
        """Let the registry ask which Cluster object is the live one (the dispatcher knows)."""
        self._is_current = is_current

    def follow_shards(self, serves: Serves, grace: float = 30.0) -> None:
        """Act only for the Clusters ``serves`` names (the shards this replica holds).

        ``grace``: when a Secret whose line puts another replica's Cluster first is deleted,
        how long this replica's waiters leave it to that replica to create the Secret before
        they may (a dead replica's Cluster wants again once its shard has moved, within a
        lease duration).
        """
        self._serves = serves
        self._sharded = True
        self._grace = grace

    def _is_served(self, cluster: ClusterRef) -> bool:
        return self._serves(cluster) is not None

    def _knows(self, cluster: ClusterRef) -> bool:
        """Whether this registry may say where ``cluster`` stands in a line: it serves it and
        its actor has said what it wants since (a shard just taken: not yet, so a Cluster the
        Secret records keeps its place until its actor speaks)."""
        return self._is_served(cluster) and (
            self._table.wanted_by(cluster) is not None or cluster in self._let_go
        )

    async def reshard(self) -> None:
        """The shards served here changed: adopt or disown Secrets and claims; wait till done."""
        await self._ask(_Reshard)

    def reshard_soon(self) -> None:
        """As :meth:`reshard`, without waiting (from a scope being cancelled)."""
        self._reshard_wanted.set()

    def out_of_step(self) -> frozenset[str]:
        """Servers whose Secret the registry knows to differ from its table, and retries."""
        return frozenset(self._retries)

    # --- what Cluster actors call -------------------------------------------------------------

    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None:
        """Send ``cluster``'s registration to ``notify``: the only way a Cluster learns it.

        A new listener (a Cluster created again under its name) starts from nothing told, so
        its first answer reaches it even when it equals what its predecessor was told.
        """
        self._subscribers[cluster] = (uid, notify)
        self._told.pop(cluster, None)

    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None:
        """Forget the listener of ``uid``; a newer Cluster's listener of the same name stays."""
        current = self._subscribers.get(cluster)
        if current is not None and current[0] == uid:
            del self._subscribers[cluster]

    async def want(self, cluster: ClusterRef, uid: str, connection: Connection) -> None:
        """Claim the connection's server for ``cluster``.

        Returns once the registry has served the claim; by then the answer (holding, waiting,
        or why not) has gone to the Cluster's listener, the same path as the news of a handover,
        so there is one place where a Cluster takes in its registration.
        """
        await self._ask(lambda r: _Want(cluster, uid, connection, r))

    async def release(self, cluster: ClusterRef, uid: str) -> bool:
        """Let go of whatever ``cluster`` holds or waits for; whether that is done.

        Done means the API server has it: no Secret of Kokumi's names the Cluster any more. Until
        then the Cluster keeps its finalizer and asks again; the registry retries meanwhile. The
        registration itself goes to the listener, as for :meth:`want`; ``False`` also when the
        registry could not serve the request, so a finalizer never goes on a guess.
        """
        done: bool = await self._ask(lambda r: _Release(cluster, uid, r))
        return done

    async def prune(self, existing: Iterable[ClusterRef]) -> None:
        """Let go of claims whose Cluster no longer exists (deleted while we were down)."""
        await self._ask(lambda r: _Prune(frozenset(existing), r))

    async def _ask(self, make: Callable[[trio.MemorySendChannel[Any]], _Request]) -> Any:
        reply_send, reply_receive = trio.open_memory_channel[Any](1)
        await self._inbox_send.send(make(reply_send))
        async with reply_receive:
            return await reply_receive.receive()

    # --- the actor ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild from Argo CD's Secrets, then serve requests, watch news and retries in turn."""
        send, receive = trio.open_memory_channel[WatchEvent | Resync](64)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    watch,
                    self._client,
                    SECRETS,
                    send,
                    namespace=self._namespace,
                    label_selector=CLUSTER_SECRETS,
                )
            )
            first = await receive.receive()
            assert isinstance(first, Resync)
            await self._guarded(self._rebuild(first.objects))
            nursery.start_soon(self._forward, receive)
            nursery.start_soon(self._forward_reshards)
            task_status.started()
            while True:
                request: _Request | None = None
                with trio.move_on_at(self._next_retry()):
                    request = await self._inbox.receive()
                if request is None:
                    await self._guarded(self._retry_due())
                    continue
                result = await self._guarded(self._serve(request))
                if request.reply is not None:
                    # The asker may have been cancelled meanwhile (the manager stopping): its
                    # answer then has nobody to go to, and the registry goes on.
                    with contextlib.suppress(trio.BrokenResourceError):
                        request.reply.send_nowait(result)

    async def _forward(self, receive: trio.MemoryReceiveChannel[WatchEvent | Resync]) -> None:
        """The Secret watch feeds the same inbox as the Clusters: one order for everything."""
        async for event in receive:
            await self._inbox_send.send(_Note(event))

    async def _forward_reshards(self) -> None:
        while True:
            await self._reshard_wanted.wait()
            self._reshard_wanted = trio.Event()
            await self._inbox_send.send(_Reshard())

    async def _guarded(self, work: Any) -> Any:
        try:
            return await work
        except Exception:
            # A bug costs one request, never the manager; the table and the facts still stand,
            # and every server left out of step is retried.
            log.exception("registry: unexpected error")
            return None

    def _next_retry(self) -> float:
        return min(
            min((r.at for r in self._retries.values()), default=math.inf),
            min(self._pending.values(), default=math.inf),
        )

    async def _retry_due(self) -> None:
        now = trio.current_time()
        due: set[str | None] = {server for server, r in self._retries.items() if r.at <= now}
        for server in [s for s, at in self._pending.items() if at <= now]:
            del self._pending[server]
            if self._table.remote(server) is not None and not self._secrets.get(
                argocd.secret_name(server)
            ):
                # The first in line, served elsewhere, never took it: the next ones may now.
                log.info("registry: nobody took %s in time; the next in line may", server)
                due |= self._step(ownership.RemoteGone(server))
        await self._settle(due)

    async def _serve(self, request: _Request) -> Any:
        match request:
            case _Want(cluster=cluster, uid=uid, connection=connection):
                if not self._is_current(cluster, uid):
                    return None  # a Cluster that no longer exists wants nothing
                self._claims[cluster] = uid
                self._connections[cluster] = connection
                self._let_go.discard(cluster)
                before = self._table.wanted_by(cluster)
                server = ownership.normalise_server(connection.server)
                await self._settle(self._step(ownership.Want(cluster, server)) | {before})
                self._tell(cluster, asked=True)
                return None
            case _Release(cluster=cluster, uid=uid):
                claim = self._claims.get(cluster)
                if claim is not None and claim != uid and self._is_current(cluster, claim):
                    # The claim is a newer Cluster's of the same name: not the caller's to drop.
                    return True
                self._claims.pop(cluster, None)
                self._connections.pop(cluster, None)
                if self._sharded:
                    self._let_go.add(cluster)
                before = self._table.wanted_by(cluster)
                await self._settle(self._step(ownership.Release(cluster)) | {before})
                self._tell(cluster, asked=True)
                return self._released(cluster)
            case _Prune(existing=existing):
                gone = {c for c in self._table.wanting() if c not in existing}
                touched: set[str | None] = set()
                for cluster in sorted(gone):
                    self._claims.pop(cluster, None)
                    self._connections.pop(cluster, None)
                    touched |= self._step(ownership.Release(cluster))
                await self._settle(touched)
                return None
            case _Note(event=event):
                await self._settle(await self._note(event))
                return None
            case _Reshard():
                await self._settle(await self._reshard())
                return None
        raise AssertionError(request)  # pragma: no cover

    # --- the table and the facts --------------------------------------------------------------

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

    def _registration(self, cluster: ClusterRef) -> Registration:
        """What ``cluster`` is told, from the table and the Secrets as the API server has them."""
        server = self._table.wanted_by(cluster)
        named = bool(self._named.get(cluster))
        if server is None:
            return Registration(holding=named)
        if server == IN_CLUSTER_SERVER or self._table.holder(server) != cluster:
            return Registration(named, server, self._table.message(server), Reason.CLUSTER_CONFLICT)
        secret = self._secrets.get(argocd.secret_name(server))
        registers = secret is not None and argocd.holder_of(secret) == cluster
        connection = self._connections.get(cluster)
        if (
            registers
            and secret is not None
            and (connection is None or _same_data(secret, connection, cluster))
        ):
            # What Argo CD has is this Cluster's current connection; a pending change of the
            # waiting order alone is no concern of its status.
            return Registration(holding=True, server=server)
        retry = self._retries.get(server)
        if retry is not None and retry.error is not None:
            return Registration(named, server, retry.error, Reason.REGISTRATION_FAILED)
        if registers:
            return Registration(holding=True, server=server)
        # Handed over to a Cluster whose kubeconfig the registry has not seen since a restart:
        # its next check brings it, and the Secret is written then.
        message = (
            f"server {server} is handed to this Cluster; Kokumi copies its kubeconfig to Argo CD "
            "at its next check"
        )
        return Registration(named, server, message, Reason.REGISTRATION_PENDING)

    def _released(self, cluster: ClusterRef) -> bool:
        return self._table.wanted_by(cluster) is None and not self._named.get(cluster)

    def _remember(self, name: str, secret: Mapping[str, Any] | None) -> None:
        old = self._secrets.pop(name, None)
        if old is not None:
            holder = argocd.holder_of(old)
            if holder is not None:
                self._named.get(holder, set()).discard(name)
                if not self._named.get(holder):
                    self._named.pop(holder, None)
        if secret is not None and argocd.is_ours(secret):
            self._secrets[name] = dict(secret)
            holder = argocd.holder_of(secret)
            if holder is not None:
                self._named.setdefault(holder, set()).add(name)

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

        A refused or failed write leaves the server in ``_retries`` with its next attempt; a
        success removes it.
        """
        until = self._deadline(server)
        if until is None:
            # Another replica serves this server's holder: nothing here to write, nor retry.
            self._retries.pop(server, None)
            return set()
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
                raise errors.KubeError("the shard's Lease was not renewed in time")
        except errors.KubeError as exc:
            self._failed(server, exc)
            return set()
        retry = self._retries.pop(server, None)
        if retry is not None:
            retry.failures.recovered()
        return touched

    def _deadline(self, server: str) -> float | None:
        """Until when the registry may write ``server``'s Secret; None: not this replica's.

        A server held elsewhere is never written here; otherwise the write acts for the holder
        in the table and for the Cluster the Secret names now, and must end by both deadlines.
        """
        secret = self._secrets.get(argocd.secret_name(server))
        if self._table.remote(server) is not None:
            if not self._sharded or secret is None:
                return None
            # Only this replica's waiters' places in the line are written, for them.
            acting: set[ClusterRef | None] = set(self._table.waiting(server))
            acting |= {c for c in argocd.waiting_of(secret) if self._is_served(c)}
            if not acting:
                return None
        else:
            acting = {self._table.holder(server), argocd.holder_of(secret) if secret else None}
        until = math.inf
        for cluster in acting - {None}:
            assert cluster is not None
            served = self._serves(cluster)
            if served is None:
                return None
            until = min(until, served)
        return until

    def _failed(self, server: str, exc: errors.KubeError) -> None:
        retry = self._retries.get(server)
        if retry is None:
            retry = self._retries[server] = _Retry(
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

    async def _write(self, server: str) -> set[str]:
        name = argocd.secret_name(server)
        holder = self._table.holder(server)
        existing = self._secrets.get(name)
        if self._table.remote(server) is not None:
            return await self._join(server, name)
        if holder is None:
            if existing is not None:
                first = self._first_elsewhere(existing, None)
                if first is not None:
                    return await self._hand_over_elsewhere(server, name, existing, first)
                await self._delete(name, existing)
            return set()
        claim = self._claims.get(holder)
        if claim is not None and not self._is_current(holder, claim):
            # The object that made this claim is gone (deleted, perhaps created again under its
            # name while its actor was busy, which then stays silent): the claim goes with it,
            # and the server to the next in line, never on the old object's connection.
            self._claims.pop(holder, None)
            self._connections.pop(holder, None)
            touched = self._step(ownership.Release(holder))
            return {s for s in touched if s is not None} | {server}
        connection = self._connections.get(holder)
        waiting = self._to_record(server, existing, holder)
        if connection is None:
            # Seeded from a Secret after a restart, or handed to a waiter the registry has not
            # heard from since: only the waiting order can be kept up to date meanwhile.
            if existing is not None and argocd.holder_of(existing) == holder:
                await self._keep_waiting(name, existing, waiting)
            return set()
        desired = argocd.cluster_secret(connection, holder, self._namespace, waiting)
        if existing is None:
            try:
                created = await self._client.create(SECRETS, desired, namespace=self._namespace)
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
                existing = self._secrets[name]
            else:
                self._remember(name, created)
                self._last_line.pop(server, None)
                self._metrics.registry_writes += 1
                log.info("registered %s with Argo CD as Secret %s", holder, name)
                return set()
        if _same(existing, desired):
            return set()
        previous = argocd.holder_of(existing)
        if previous is not None and previous != holder:
            first = self._first_elsewhere(existing, holder)
            if first is not None:
                return await self._hand_over_elsewhere(server, name, existing, first)
            first = self._first_here(existing, holder)
            if first is not None:
                # This table heard of its waiters in another order than the Secret records
                # (a shard taken lately): the Secret's order decides who comes next.
                recorded = self._served(argocd.waiting_of(existing))
                adopted = self._step(ownership.Adopt(server, first, (), recorded))
                return {s for s in adopted if s is not None} | {server}
        await self._replace(name, existing, desired)
        log.info("Secret %s now registers %s", name, holder)
        named = secret_data(existing, "name")
        was = (named or b"").decode("utf-8", "replace")
        if previous is not None and previous != holder:
            self._handovers.append((server, was, previous, holder))
        elif named and named != secret_data(desired, "name"):
            # Another replica handed this Cluster the Secret, relabelled, and it is this write
            # that gives Argo CD the new name: the other replica could not say so.
            self._handovers.append((server, was, None, holder))
        return set()

    # --- the waiting order across replicas (shards) ---------------------------------------------

    def _to_record(
        self, server: str, existing: Mapping[str, Any] | None, holder: ClusterRef
    ) -> tuple[ClusterRef, ...]:
        """The waiting order for the server's Secret: this table's, or with shards, the order
        the Secret records with this replica's waiters in their places."""
        local = self._table.waiting(server)
        if not self._sharded:
            return local
        recorded = argocd.waiting_of(existing) if existing else self._last_line.get(server, ())
        line = shards.merged_line(recorded, local, self._knows)
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
        first = shards.first_waiting(
            argocd.waiting_of(existing), argocd.holder_of(existing), local, self._is_served
        )
        return first if first is not None and not self._is_served(first) else None

    def _first_here(self, existing: Mapping[str, Any], holder: ClusterRef) -> ClusterRef | None:
        """The first recorded waiter when it is another of this replica's than ``holder``."""
        if not self._sharded:
            return None
        server = argocd.server_of(existing)
        local = (holder, *(self._table.waiting(server) if server else ()))
        first = shards.first_waiting(
            argocd.waiting_of(existing), argocd.holder_of(existing), local, self._is_served
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
        previous = argocd.holder_of(existing)
        line = tuple(c for c in argocd.waiting_of(existing) if c not in (previous, first))
        metadata = dict(existing.get("metadata") or {})
        labels = {
            **(metadata.get("labels") or {}),
            argocd.LABEL_CLUSTER: first.name,
            argocd.LABEL_CLUSTER_NAMESPACE: first.namespace,
        }
        annotations = dict(metadata.get("annotations") or {})
        annotations.pop(argocd.ANNOTATION_WAITING, None)
        if line:
            annotations[argocd.ANNOTATION_WAITING] = ",".join(str(c) for c in line)
        desired = {
            **existing,
            "metadata": {**metadata, "labels": labels, "annotations": annotations},
        }
        await self._replace(name, existing, desired)
        log.info("Secret %s handed to %s, first in line, served by another replica", name, first)
        return {s for s in self._step(ownership.Remote(server, first)) if s}

    async def _join(self, server: str, name: str) -> set[str]:
        """A server held elsewhere: keep this replica's waiters' places on its Secret, with a
        write guarded by the resourceVersion read (another replica may be writing too)."""
        existing = self._secrets.get(name)
        if existing is None or not self._sharded:
            return set()
        holder = argocd.holder_of(existing)
        line = shards.merged_line(
            argocd.waiting_of(existing), self._table.waiting(server), self._knows
        )
        await self._keep_waiting(name, existing, tuple(c for c in line if c != holder))
        return set()

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

    def _found_foreign(self, server: str, name: str) -> set[str]:
        """A Secret Kokumi did not write holds the server's name: never touched, and it blocks."""
        self._remember(name, None)
        self._blocking_names[name] = server
        return {s for s in self._step(ownership.Foreign(server, name)) if s is not None}

    async def _keep_waiting(
        self, name: str, existing: Mapping[str, Any], waiting: tuple[ClusterRef, ...]
    ) -> None:
        if argocd.waiting_of(existing) == waiting:
            return
        metadata = dict(existing.get("metadata") or {})
        annotations = dict(metadata.get("annotations") or {})
        if waiting:
            annotations[argocd.ANNOTATION_WAITING] = ",".join(str(c) for c in waiting)
        else:
            annotations.pop(argocd.ANNOTATION_WAITING, None)
        await self._replace(
            name, existing, {**existing, "metadata": {**metadata, "annotations": annotations}}
        )

    async def _replace(
        self, name: str, existing: Mapping[str, Any], desired: Mapping[str, Any]
    ) -> None:
        """Update the Secret in place (a handover never deletes): Argo CD never sees it vanish."""
        old_meta = existing.get("metadata") or {}
        new_meta = desired.get("metadata") or {}
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
            replaced = await self._client.replace(SECRETS, body, namespace=self._namespace)
        except errors.Conflict:
            # Somebody changed it meanwhile: read it again, and the retry starts from that.
            self._remember(name, await self._client.get(SECRETS, name, namespace=self._namespace))
            raise
        except errors.NotFound:
            self._remember(name, None)
            raise
        self._remember(name, replaced)
        self._metrics.registry_writes += 1

    async def _delete(self, name: str, existing: Mapping[str, Any]) -> None:
        meta = existing.get("metadata") or {}
        try:
            # Only the version we know is ours: a Secret changed meanwhile is read again first.
            await self._client.delete(
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

    # --- what the API server says ------------------------------------------------------------

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
            name = _name(secret)
            server = argocd.server_of(secret)
            holder = argocd.holder_of(secret)
            if holder is not None and server is not None and argocd.secret_name(server) == name:
                self._remember(name, secret)
                if self._serves(holder) is None:
                    remote.append((server, holder))
                    continue
                holders[server] = holder
                waiting[server] = self._served(argocd.waiting_of(secret))
                written[server] = _version(secret)
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
            present = {_name(o) for o in objects}
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
            objects, gone = (), {_name(event.object)}
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
            name = _name(secret)
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
        if server is not None and secret is not None and self._table.remote(server) is not None:
            previous = argocd.holder_of(secret)
            self._last_line[server] = tuple(c for c in argocd.waiting_of(secret) if c != previous)
            first = self._first_elsewhere(secret, None)
            if first is not None and argocd.is_ours(secret):
                # Another replica's Cluster came first: it creates the Secret; ours wait.
                self._pending[server] = trio.current_time() + self._grace
                touched |= self._step(ownership.Remote(server, first))
            else:
                touched |= self._step(ownership.RemoteGone(server))
        return touched

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
        already, or let go). A holder that let go since passes the server on at once."""
        waiting = tuple(
            c
            for c in argocd.waiting_of(secret)
            if self._is_served(c) and c not in self._claims and c not in self._let_go
        )
        recorded = self._served(argocd.waiting_of(secret))
        touched = self._step(ownership.Adopt(server, holder, waiting, recorded))
        if holder in self._let_go:
            touched |= self._step(ownership.Release(holder))
        return touched

    async def _reshard(self) -> set[str | None]:
        """Disown the claims of Clusters served elsewhere now, classify every Secret again.

        In slices: at 10,000 Secrets, a replica taking its shard after a restart spent 3.3 s
        here in one step. Only this task reads the table and the Secrets; a change of shards
        meanwhile asks for another reshard, which comes after this one.
        """
        touched: set[str | None] = set()
        pace = Pace()
        # The actors of a shard taken say afresh what they want; those of a shard lost, nothing.
        self._let_go = {c for c in self._let_go if self._is_served(c)}
        for cluster in self._table.wanting():
            await pace.tick()
            if self._serves(cluster) is None:
                self._claims.pop(cluster, None)
                self._connections.pop(cluster, None)
                self._told.pop(cluster, None)
                touched |= self._step(ownership.Disown(cluster))
        # A Cluster named by several Secrets as last seen (a move this registry has not seen
        # finish) is adopted where it was written last, as after a restart.
        newest: dict[ClusterRef, str] = {}
        for name, secret in list(self._secrets.items()):
            await pace.tick()
            holder = argocd.holder_of(secret)
            if holder is None:
                continue
            kept = newest.get(holder)
            if kept is None or _version(secret) > _version(self._secrets[kept]):
                newest[holder] = name
        for name in list(self._secrets):
            await pace.tick()
            if name not in self._secrets:
                continue
            holder = argocd.holder_of(self._secrets[name])
            if holder is not None and newest.get(holder) != name and self._is_served(holder):
                continue
            touched |= self._classify(name)
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
        known = self._secrets.get(_name(secret))
        if known is None:
            return True
        return _version(secret) > _version(known)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _version(obj: Mapping[str, Any]) -> int:
    """etcd's resourceVersions are increasing integers; anything else sorts first."""
    value = obj.get("metadata", {}).get("resourceVersion")
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _same_data(secret: Mapping[str, Any], connection: Connection, holder: ClusterRef) -> bool:
    desired = argocd.cluster_secret(connection, holder)
    same: bool = (secret.get("data") or {}) == desired["data"]
    return same


def _same(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    labels = existing.get("metadata", {}).get("labels") or {}
    wanted = desired["metadata"]["labels"]
    return (
        all(labels.get(k) == v for k, v in wanted.items())
        and argocd.waiting_of(existing) == argocd.waiting_of(desired)
        and (existing.get("data") or {}) == desired["data"]
        and existing.get("type", "Opaque") == desired["type"]
    )
