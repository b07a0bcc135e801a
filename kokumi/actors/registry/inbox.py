"""Serving the inbox: the registry's public face, and the one loop that takes its requests.

Requests, and the news of the registry's own Secret watch, come through one bounded inbox with a
one-shot reply channel each, served in the order they came, so that only this task reads or
changes the table and the Secrets the registry keeps. Claims that wait together are served as
one: each takes its step of the table in its turn (first come, first served), then the Secrets
of every server they touched are written, several at once (``Facts.settle``), then each is
answered. One at a time, every new Cluster's claim waited for its own Secret's create.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi.actors.metrics import Metrics
from kokumi.actors.registry import news
from kokumi.actors.registry.facts import Facts
from kokumi.actors.registry.state import Liveness, Memory, Serves, log
from kokumi.actors.writes import EventRecorder
from kokumi.core.cluster.egress import EgressPolicy, judge
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, lines, ownership
from kokumi.core.registry.carry import NO_EXTRAS, Extras
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import Registration
from kokumi.kube.client import Client
from kokumi.kube.resources import SECRETS
from kokumi.kube.watch import Resync, WatchEvent, start_watch

__all__ = ["Registry"]

CLUSTER_SECRETS = f"{argocd.LABEL_SECRET_TYPE}=cluster"

WANTS_AT_ONCE = 64
"""The most claims served as one: those waiting in the inbox (its size)."""


@attrs.frozen
class _Want:
    cluster: ClusterRef
    uid: str
    connection: Connection = attrs.field(repr=False)
    reply: trio.MemorySendChannel[Any]
    extras: Extras = NO_EXTRAS


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


class Registry:
    """The actor: it holds the registry's memory and its writer, and serves one request at a
    time, so that only its task reads or changes either."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        metrics: Metrics | None = None,
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 120.0,
        events: EventRecorder | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._memory = Memory()
        self._facts = Facts(
            self._memory,
            client,
            namespace,
            metrics or Metrics(),
            backoff=(backoff_initial, backoff_max),
            events=events,
        )
        # The probe's policy: a server the manager may not connect to, Argo CD may not either.
        self._egress = egress or EgressPolicy()
        self._reshard_wanted = trio.Event()
        self._inbox_send, self._inbox = trio.open_memory_channel[_Request](64)

    def follow_liveness(
        self, is_current: Liveness, exists: Callable[[ClusterRef], bool] | None = None
    ) -> None:
        """Let the registry ask which Cluster object is the live one, and whether a Cluster of
        that name exists at all (the dispatcher's watch knows both)."""
        self._memory.is_current = is_current
        if exists is not None:
            self._memory.exists = exists

    def follow_shards(self, serves: Serves, grace: float = 30.0) -> None:
        """Act only for the Clusters ``serves`` names (the shards this replica holds).

        ``grace``: when a Secret whose line puts another replica's Cluster first is deleted,
        how long this replica's waiters leave it to that replica to create the Secret before
        they may (a dead replica's Cluster wants again once its shard has moved, within a
        lease duration).
        """
        self._memory.serves = serves
        self._memory.sharded = True
        self._memory.grace = grace

    def fence_writes(self, may_write: Callable[[], bool]) -> None:
        """Send a write only while ``may_write()`` says so, checked as it goes out (a single
        leader's Lease: a replica that lost it while a write waited sends nothing)."""
        self._facts.may_write = may_write

    async def reshard(self) -> None:
        """The shards served here changed: adopt or disown Secrets and claims; wait till done."""
        await self._ask(_Reshard)

    def reshard_soon(self) -> None:
        """As :meth:`reshard`, without waiting (from a scope being cancelled)."""
        self._reshard_wanted.set()

    def out_of_step(self) -> frozenset[str]:
        """Servers whose Secret the registry knows to differ from its table, and retries."""
        return frozenset(self._memory.retries)

    # --- what Cluster actors call -----------------------------------------------------------------

    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None:
        """Send ``cluster``'s registration to ``notify``: the only way a Cluster learns it.

        A new listener (a Cluster created again under its name) starts from nothing told, so
        its first answer reaches it even when it equals what its predecessor was told.
        """
        self._memory.subscribers[cluster] = (uid, notify)
        self._memory.told.pop(cluster, None)

    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None:
        """Forget the listener of ``uid``; a newer Cluster's listener of the same name stays."""
        current = self._memory.subscribers.get(cluster)
        if current is not None and current[0] == uid:
            del self._memory.subscribers[cluster]

    async def want(
        self,
        cluster: ClusterRef,
        uid: str,
        connection: Connection,
        extras: Extras = NO_EXTRAS,
    ) -> None:
        """Claim the connection's server for ``cluster``, carrying ``extras`` on its Secret.

        Returns once the registry has served the claim; by then the answer (holding, waiting,
        or why not) has gone to the Cluster's listener, the same path as the news of a handover,
        so there is one place where a Cluster takes in its registration.
        """
        await self._ask(lambda r: _Want(cluster, uid, connection, r, extras))

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

    def _repeats(
        self, cluster: ClusterRef, uid: str, connection: Connection, extras: Extras
    ) -> bool:
        """Whether this claim is the last one served for ``cluster`` again, its server in step."""
        server = ownership.normalise_server(connection.server)
        return (
            self._memory.claims.get(cluster) == uid
            and self._memory.connections.get(cluster) == connection
            and self._memory.extras.get(cluster, NO_EXTRAS) == extras
            and self._memory.table.wanted_by(cluster) == server
            and server not in self._memory.retries
            and server not in self._memory.pending
            and cluster not in self._memory.denied
        )

    async def _ask(self, make: Callable[[trio.MemorySendChannel[Any]], _Request]) -> Any:
        reply_send, reply_receive = trio.open_memory_channel[Any](1)
        await self._inbox_send.send(make(reply_send))
        async with reply_receive:
            return await reply_receive.receive()

    # --- the actor --------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild from Argo CD's Secrets, then serve requests, watch news and retries in turn."""
        async with trio.open_nursery() as nursery:
            receive = await start_watch(
                nursery,
                self._client,
                SECRETS,
                namespace=self._namespace,
                label_selector=CLUSTER_SECRETS,
            )
            first = await receive.receive()
            assert isinstance(first, Resync)
            await self._guarded(self._rebuild(first.objects))
            nursery.start_soon(self._forward, receive)
            nursery.start_soon(self._forward_reshards)
            task_status.started()
            held: _Request | None = None  # taken from the inbox after a run of claims
            while True:
                request: _Request | None = held
                held = None
                if request is None:
                    with trio.move_on_at(self._next_retry()):
                        request = await self._inbox.receive()
                if request is None:
                    await self._guarded(self._retry_due())
                    continue
                if not isinstance(request, _Want):
                    _answer(request, await self._guarded(self._serve(request)))
                    continue
                wants = [request]
                while len(wants) < WANTS_AT_ONCE:
                    try:
                        more = self._inbox.receive_nowait()
                    except trio.WouldBlock:
                        break
                    if not isinstance(more, _Want):
                        held = more  # served next, after these: the order stays
                        break
                    wants.append(more)
                await self._guarded(self._serve_wants(wants))
                for want in wants:
                    _answer(want, None)

    async def _rebuild(self, secrets: Iterable[Mapping[str, Any]]) -> None:
        # Seeded holders have no connection yet: nothing is written for them until they want.
        await self._facts.settle(await news.rebuild(self._memory, self._facts, secrets))

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
            min((r.at for r in self._memory.retries.values()), default=math.inf),
            min(self._memory.pending.values(), default=math.inf),
        )

    async def _retry_due(self) -> None:
        now = trio.current_time()
        due: set[str | None] = {server for server, r in self._memory.retries.items() if r.at <= now}
        for server in [s for s, at in self._memory.pending.items() if at <= now]:
            del self._memory.pending[server]
            if self._memory.table.remote(server) is not None and not self._memory.secrets.get(
                argocd.secret_name(server)
            ):
                # The first in line, served elsewhere, never took it: the next ones may now.
                log.info("registry: nobody took %s in time; the next in line may", server)
                due |= self._memory.step(ownership.RemoteGone(server))
        await self._facts.settle(due)

    async def _serve_wants(self, wants: list[_Want]) -> None:
        """Each claim's step of the table in turn, then every server touched written, then each
        Cluster told (whatever it was told before: it asked)."""
        touched: set[str | None] = set()
        asked: list[ClusterRef] = []
        for want in wants:
            if self._memory.is_current(want.cluster, want.uid):  # else it wants nothing
                touched |= self._want(want.cluster, want.uid, want.connection, want.extras)
                asked.append(want.cluster)
        if touched:
            await self._facts.settle(touched)
        for cluster in asked:
            self._facts.tell(cluster, asked=True)

    def _want(
        self, cluster: ClusterRef, uid: str, connection: Connection, extras: Extras
    ) -> set[str | None]:
        """Take a claim's step of the table; the servers whose Secrets it touched."""
        if self._repeats(cluster, uid, connection, extras):
            # Every check claims again; the same claim on a server in step has nothing to
            # write. What changes a Secret or a line (a watch event, a release, a reshard)
            # writes it then, not at the holder's next claim.
            return set()
        denied = judge(self._egress, connection.server, connection.proxy_url)
        if denied is not None:
            # Argo CD's pods would connect there with the Cluster's credential: never
            # registered, and a registration it had is released.
            _, message = denied
            server = ownership.normalise_server(connection.server)
            self._memory.denied[cluster] = (server, message)
            self._memory.forget_claim(cluster)
            before = self._memory.table.wanted_by(cluster)
            return self._memory.step(ownership.Release(cluster)) | {before}
        self._memory.denied.pop(cluster, None)
        self._memory.claims[cluster] = uid
        self._memory.connections[cluster] = connection
        if extras:
            self._memory.extras[cluster] = extras
        else:
            self._memory.extras.pop(cluster, None)
        self._memory.let_go.discard(cluster)
        before = self._memory.table.wanted_by(cluster)
        server = ownership.normalise_server(connection.server)
        # A line of another server that records it loses it now, not at its holder's next
        # claim (a Cluster wants one server).
        recorded: set[str | None] = set()
        if self._memory.sharded:
            recorded = self._memory.lines_recording(cluster) - {server}
        return self._memory.step(ownership.Want(cluster, server)) | {before} | recorded

    async def _serve(self, request: _Release | _Prune | _Note | _Reshard) -> Any:
        """Every request but a claim (claims are served together: :meth:`_serve_wants`)."""
        match request:
            case _Release(cluster=cluster, uid=uid):
                claim = self._memory.claims.get(cluster)
                if claim is not None and claim != uid and self._memory.is_current(cluster, claim):
                    # The claim is a newer Cluster's of the same name: not the caller's to drop.
                    return True
                self._memory.forget_claim(cluster)
                self._memory.denied.pop(cluster, None)
                recorded = set()
                if self._memory.sharded:
                    self._memory.let_go.add(cluster)
                    # Every line that records it, even one this table never had it in (a
                    # server held by another replica's Cluster): written now, for it. And every
                    # Secret that names it holder, adopted into this table or not: the release
                    # is done only once none does.
                    recorded = self._memory.lines_recording(cluster) | self._memory.servers_naming(
                        cluster
                    )
                before = self._memory.table.wanted_by(cluster)
                await self._facts.settle(
                    self._memory.step(ownership.Release(cluster)) | {before} | recorded
                )
                self._facts.tell(cluster, asked=True)
                return self._facts.released(cluster)
            case _Prune(existing=existing):
                gone = {c for c in self._memory.table.wanting() if c not in existing}
                for cluster in [c for c in self._memory.denied if c not in existing]:
                    del self._memory.denied[cluster]
                touched: set[str | None] = set()
                for cluster in sorted(gone):
                    self._memory.forget_claim(cluster)
                    touched |= self._memory.step(ownership.Release(cluster))
                touched |= lines.stale_lines(self._memory)
                await self._facts.settle(touched)
                return None
            case _Note(event=event):
                await self._facts.settle(
                    await news.note(self._memory, self._client, self._namespace, event)
                )
                return None
            case _Reshard():
                await self._facts.settle(await news.reshard(self._memory))
                return None
        raise AssertionError(request)  # pragma: no cover


def _answer(request: _Request, result: Any) -> None:
    if request.reply is not None:
        # The asker may have been cancelled meanwhile (the manager stopping): its answer then
        # has nobody to go to, and the registry goes on.
        with contextlib.suppress(trio.BrokenResourceError):
            request.reply.send_nowait(result)
