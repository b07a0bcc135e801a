"""The server registry: the only writer of Secrets in Argo CD's namespace.

It serialises every claim on a server through the pure first-come table (``kokumi.ownership``)
and performs the table's effects against the API server, which is the second guard: the Secret is
named after the server and ``create`` is atomic, so ``AlreadyExists`` means somebody holds it, and
its labels say who. It keeps no memory a crash could lose: on start the table is rebuilt from the
Secrets found, so a restart with nothing changed writes nothing.

Requests come through a bounded channel with a one-shot reply channel each; news for Clusters other
than the asker (a waiter that just took a server over) goes out through callbacks that never block,
because a Cluster actor may at that very moment be waiting for the registry.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from kokumi import argocd, ownership
from kokumi.actors.cluster import NOT_REGISTERED, Registration
from kokumi.actors.context import Metrics
from kokumi.kube import errors
from kokumi.kube.client import SECRETS, Client
from kokumi.kube.watch import Resync, WatchEvent, watch
from kokumi.kubeconfig import Connection
from kokumi.ownership import ClusterRef

__all__ = ["Registry"]

log = logging.getLogger(__name__)

CLUSTER_SECRETS = f"{argocd.LABEL_SECRET_TYPE}=cluster"


@attrs.frozen
class _Want:
    cluster: ClusterRef
    connection: Connection = attrs.field(repr=False)
    reply: trio.MemorySendChannel[Registration]
    claimant: object = None


@attrs.frozen
class _Release:
    cluster: ClusterRef
    reply: trio.MemorySendChannel[Registration]
    claimant: object = None


@attrs.frozen
class _Prune:
    existing: frozenset[ClusterRef]
    reply: trio.MemorySendChannel[Registration]


_Request = _Want | _Release | _Prune


class Registry:
    def __init__(self, client: Client, namespace: str, metrics: Metrics | None = None) -> None:
        self._client = client
        self._namespace = namespace
        self._metrics = metrics or Metrics()
        self._table = ownership.Table()
        self._connections: dict[ClusterRef, Connection] = {}
        self._secrets: dict[str, dict[str, Any]] = {}  # name -> Secret, as last seen or written
        self._results: dict[ClusterRef, Registration] = {}
        self._subscribers: dict[ClusterRef, Callable[[Registration], None]] = {}
        self._claimants: dict[ClusterRef, object] = {}
        # Foreign Secrets that hold the name Kokumi would give a server, whatever server they
        # declare: their deletion frees that server.
        self._blocking_names: dict[str, str] = {}
        # Foreign cluster Secrets as the watch shows them: name -> the server each declares.
        self._foreign_names: dict[str, str] = {}
        self._lock = trio.Lock()
        self._inbox_send, self._inbox = trio.open_memory_channel[_Request](64)

    # --- what Cluster actors call -------------------------------------------------------------

    def subscribe(self, cluster: ClusterRef, notify: Callable[[Registration], None]) -> None:
        self._subscribers[cluster] = notify

    def unsubscribe(
        self, cluster: ClusterRef, notify: Callable[[Registration], None] | None = None
    ) -> None:
        """Forget ``notify`` (or whoever listens for ``cluster``); a newer listener stays."""
        if notify is None or self._subscribers.get(cluster) == notify:
            self._subscribers.pop(cluster, None)

    async def want(
        self, cluster: ClusterRef, connection: Connection, claimant: object = None
    ) -> Registration:
        """Claim the connection's server for ``cluster``; the answer says whether it holds it.

        ``claimant`` tells apart two actors of one name (a Cluster deleted and created again):
        a late release of the old one must not let go of the new one's claim.
        """
        return await self._ask(lambda reply: _Want(cluster, connection, reply, claimant))

    async def release(self, cluster: ClusterRef, claimant: object = None) -> None:
        await self._ask(lambda reply: _Release(cluster, reply, claimant))

    async def prune(self, existing: Iterable[ClusterRef]) -> None:
        """Let go of holders whose Cluster no longer exists (deleted while we were down)."""
        await self._ask(lambda reply: _Prune(frozenset(existing), reply))

    async def _ask(
        self, make: Callable[[trio.MemorySendChannel[Registration]], _Request]
    ) -> Registration:
        reply_send, reply_receive = trio.open_memory_channel[Registration](1)
        await self._inbox_send.send(make(reply_send))
        async with reply_receive:
            return await reply_receive.receive()

    # --- the actor ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild from Argo CD's Secrets, then serve requests and follow foreign Secrets."""
        send, receive = trio.open_memory_channel[WatchEvent | Resync](64)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: watch(
                    self._client,
                    SECRETS,
                    send,
                    namespace=self._namespace,
                    label_selector=CLUSTER_SECRETS,
                    task_status=task_status,
                )
            )
            first = await receive.receive()
            assert isinstance(first, Resync)
            async with self._lock:
                await self._rebuild(first.objects)
            nursery.start_soon(self._follow, receive)
            task_status.started()
            async for request in self._inbox:
                async with self._lock:
                    try:
                        result = await self._serve(request)
                    except errors.KubeError as exc:
                        # The table stands; the asker's next want retries the write.
                        result = self._failed(request, exc)
                    except Exception as exc:
                        # A bug costs one request, never the manager.
                        log.exception("registry: unexpected error")
                        result = self._failed(request, exc)
                # The asker may have been cancelled meanwhile (the manager stopping): its
                # answer then has nobody to go to, and the registry goes on.
                with contextlib.suppress(trio.BrokenResourceError):
                    request.reply.send_nowait(result)

    def _failed(self, request: _Request, exc: Exception) -> Registration:
        """The answer to a request whose writes failed: the Cluster says so, with the fix."""
        if isinstance(exc, errors.KubeError):
            log.warning("registry: %s", exc)
        if isinstance(exc, errors.Forbidden):
            message = (
                f"Kokumi may not write cluster Secrets in namespace {self._namespace}: bind the "
                f"ClusterRole kokumi-argocd-cluster-registrar there (the last document of "
                f"install.yaml, applied after Argo CD)"
            )
        else:
            message = (
                f"registering with Argo CD failed ({type(exc).__name__}); "
                "Kokumi retries at the next check"
            )
        server = None
        if isinstance(request, _Want):
            server = ownership.normalise_server(request.connection.server)
        return Registration(
            holding=False, server=server, conflict=message, reason="RegistrationFailed"
        )

    async def _serve(self, request: _Request) -> Registration:
        match request:
            case _Want(cluster=cluster, connection=connection, claimant=claimant):
                self._connections[cluster] = connection
                self._claimants[cluster] = claimant
                server = ownership.normalise_server(connection.server)
                # A holder's want is answered with WriteSecret again: that is how the Secret
                # follows a changed kubeconfig (and costs nothing when nothing changed).
                await self._step(ownership.Want(cluster, server))
                return self._results.get(cluster, NOT_REGISTERED)
            case _Release(cluster=cluster, claimant=claimant):
                if self._claimants.get(cluster, claimant) is not claimant:
                    return NOT_REGISTERED  # the claim is a newer actor's, not the caller's
                self._claimants.pop(cluster, None)
                if self._table.wanted_by(cluster) is not None:
                    await self._step(ownership.Release(cluster))
                self._connections.pop(cluster, None)
                self._results.pop(cluster, None)
                return NOT_REGISTERED
            case _Prune(existing=existing):
                for cluster in {c for c in self._table.holders().values() if c not in existing}:
                    await self._step(ownership.Release(cluster))
                return NOT_REGISTERED
        raise AssertionError(request)  # pragma: no cover

    # --- effects ------------------------------------------------------------------------------

    async def _step(self, event: ownership.Event) -> None:
        self._table, effects = ownership.step(self._table, event)
        for effect in effects:
            await self._perform(effect)

    async def _perform(self, effect: ownership.Effect) -> None:
        match effect:
            case ownership.WriteSecret(server=server, holder=holder):
                await self._ensure(server, holder)
            case ownership.DeleteSecret(server=server):
                await self._delete(server)
            case ownership.Holding(cluster=cluster, server=server):
                self._tell(cluster, Registration(holding=True, server=server))
            case ownership.Conflict(cluster=cluster, server=server, message=message):
                self._tell(cluster, Registration(holding=False, server=server, conflict=message))

    def _tell(self, cluster: ClusterRef, registration: Registration) -> None:
        self._results[cluster] = registration
        notify = self._subscribers.get(cluster)
        if notify is not None:
            notify(registration)

    async def _ensure(self, server: str, holder: ClusterRef) -> None:
        """Make the server's Secret register ``holder``: create it, or update it in place."""
        if self._table.holder(server) != holder:
            return  # a later effect of the same step moved the server on
        connection = self._connections.get(holder)
        if connection is None:
            return  # seeded from a Secret; the holder's actor will bring its connection
        desired = argocd.cluster_secret(connection, holder, self._namespace)
        name = desired["metadata"]["name"]
        existing = self._secrets.get(name)
        if existing is None:
            try:
                created = await self._client.create(SECRETS, desired, namespace=self._namespace)
            except errors.AlreadyExists:
                existing = await self._client.get(SECRETS, name, namespace=self._namespace)
            else:
                self._secrets[name] = created
                self._metrics.registry_writes += 1
                log.info("registered %s with Argo CD as Secret %s", holder, name)
                return
        if not argocd.is_ours(existing):
            # Not Kokumi's: never touched; the server is out of reach while it stands.
            self._secrets.pop(name, None)
            self._blocking_names[name] = server
            await self._step(ownership.Foreign(server, name))
            return
        if _same(existing, desired):
            return
        body = {
            **desired,
            "metadata": {
                **existing.get("metadata", {}),
                "labels": {
                    **(existing.get("metadata", {}).get("labels") or {}),
                    **desired["metadata"]["labels"],
                },
            },
        }
        body["metadata"].pop("managedFields", None)
        try:
            replaced = await self._client.replace(SECRETS, body, namespace=self._namespace)
        except errors.Conflict:
            # Somebody changed it meanwhile: read it again and let the next want retry.
            self._secrets[name] = await self._client.get(SECRETS, name, namespace=self._namespace)
            raise
        except errors.NotFound:
            self._secrets.pop(name, None)
            await self._ensure(server, holder)
            return
        self._secrets[name] = replaced
        self._metrics.registry_writes += 1
        log.info("Secret %s now registers %s", name, holder)

    async def _delete(self, server: str) -> None:
        await self._delete_named(argocd.secret_name(server))

    async def _delete_named(self, name: str) -> None:
        existing = self._secrets.get(name)
        if existing is None or not argocd.is_ours(existing):
            return
        meta = existing.get("metadata", {})
        try:
            # Only the version we know is ours: a Secret changed meanwhile is left alone.
            await self._client.delete(
                SECRETS,
                name,
                namespace=self._namespace,
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            )
        except errors.NotFound:
            pass
        except errors.Conflict:
            log.warning("Secret %s changed hands while being deleted; left alone", name)
        self._secrets.pop(name, None)
        self._metrics.registry_writes += 1
        log.info("deleted Secret %s: nobody holds its server any more", name)

    # --- what the API server says ------------------------------------------------------------

    async def _rebuild(self, secrets: Iterable[Mapping[str, Any]]) -> None:
        holders: dict[str, ClusterRef] = {}
        foreign: list[tuple[str, str]] = []
        for secret in secrets:
            name = secret.get("metadata", {}).get("name", "")
            server = argocd.server_of(secret)
            holder = argocd.holder_of(secret)
            if holder is not None and server is not None and argocd.secret_name(server) == name:
                holders[server] = holder
                self._secrets[name] = dict(secret)
            elif argocd.is_ours(secret):
                # Ours, but naming no holder or not named after its server: nothing can hold it,
                # so it would block its server for ever. It goes.
                self._secrets[name] = dict(secret)
                await self._delete_named(name)
            elif server is not None:
                foreign.append((server, name))
        self._table, effects = ownership.seed(holders)
        for effect in effects:
            await self._perform(effect)
        for server, name in foreign:
            self._foreign_names[name] = server
            await self._step(ownership.Foreign(server, name))

    async def _follow(self, receive: trio.MemoryReceiveChannel[WatchEvent | Resync]) -> None:
        """Foreign Secrets come and go; ours are noted, so updates start from the newest."""
        async for event in receive:
            async with self._lock:
                try:
                    await self._note(event)
                except errors.KubeError as exc:
                    log.warning("registry: following Argo CD's Secrets: %s", exc)

    async def _note(self, event: WatchEvent | Resync) -> None:
        known = self._foreign_names
        if isinstance(event, Resync):
            objects = event.objects
            gone = (set(known) | set(self._blocking_names)) - {_name(o) for o in objects}
        elif event.type == "DELETED":
            objects, gone = (), {_name(event.object)}
        else:
            objects, gone = (event.object,), set()
        for name in gone:
            self._secrets.pop(name, None)
            for server in (known.pop(name, None), self._blocking_names.pop(name, None)):
                if server is not None:
                    await self._step(ownership.ForeignGone(server, name))
        for secret in objects:
            name = _name(secret)
            server = argocd.server_of(secret)
            if argocd.is_ours(secret):
                self._secrets[name] = dict(secret)
                continue
            # Relabelled away from us, or never ours: not ours to delete either.
            self._secrets.pop(name, None)
            previous = known.get(name)
            if previous is not None and previous != server:
                known.pop(name)
                await self._step(ownership.ForeignGone(previous, name))
            if server is not None:
                known[name] = server
                await self._step(ownership.Foreign(server, name))


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _same(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    labels = existing.get("metadata", {}).get("labels") or {}
    wanted = desired["metadata"]["labels"]
    return (
        all(labels.get(k) == v for k, v in wanted.items())
        and (existing.get("data") or {}) == desired["data"]
        and existing.get("type", "Opaque") == desired["type"]
    )
