"""kokumi.kube.watch against the real hub: order, restarts, 410s and dead streams lose nothing.

The only thing between the watcher and the apiserver is, in some tests, a TCP proxy on loopback
that can stop forwarding (a dead stream) or turn connections away (a network cut).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import trio

from kokumi.kube import (
    CONFIG_MAPS,
    SECRETS,
    Client,
    Config,
    Resource,
    Resync,
    Store,
    WatchEvent,
    watch,
)
from kokumi.testing.controlplane import APIServer

# --- helpers ------------------------------------------------------------------------------


@attrs.define
class View:
    """What a consumer knows, folded from the events and resyncs, and the log of what came."""

    objects: dict[str, dict[str, Any]] = attrs.Factory(dict)
    log: list[tuple[str, str]] = attrs.Factory(list)
    resyncs: list[frozenset[str]] = attrs.Factory(list)

    def apply(self, item: WatchEvent | Resync) -> None:
        if isinstance(item, Resync):
            self.objects = {o["metadata"]["name"]: o for o in item.objects}
            self.resyncs.append(frozenset(self.objects))
            self.log.append(("RESYNC", ",".join(sorted(self.objects))))
            return
        name = item.object["metadata"]["name"]
        self.log.append((item.type, name))
        if item.type == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = item.object

    def versions(self) -> dict[str, str]:
        return {n: o["metadata"]["resourceVersion"] for n, o in self.objects.items()}


@contextlib.asynccontextmanager
async def watching(
    client: Client,
    resource: Resource,
    namespace: str,
    **options: Any,
) -> AsyncIterator[View]:
    """Run a watcher and a consumer folding its output; both end with the block."""
    view = View()
    send, receive = trio.open_memory_channel[WatchEvent | Resync](0)

    async def consume() -> None:
        async for item in receive:
            view.apply(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await nursery.start(
            lambda task_status: watch(
                client, resource, send, namespace=namespace, task_status=task_status, **options
            )
        )
        yield view
        nursery.cancel_scope.cancel()


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], within: float = 20.0, step: float = 0.02
) -> None:
    with trio.fail_after(within):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await trio.sleep(step)


async def server_versions(client: Client, namespace: str) -> dict[str, str]:
    listed = await client.list(CONFIG_MAPS, namespace=namespace, label_selector="app=watched")
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed["items"]}


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "watched"}},
        "data": data,
    }


def admin(hub: APIServer, server: str | None = None) -> Client:
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    if server is not None:
        config = attrs.evolve(config, server=server)
    return Client(config)


@attrs.define
class StallProxy:
    """A loopback TCP proxy to the apiserver that can go silent or refuse, on command."""

    upstream_port: int
    port: int = 0
    connections: int = 0
    refusing: bool = False
    _gates: list[list[bool]] = attrs.Factory(list)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    def stall(self) -> None:
        """Every open connection stops forwarding, in both directions, for good."""
        for gate in self._gates:
            gate[0] = True

    async def _handle(self, downstream: trio.SocketStream) -> None:
        if self.refusing:
            await downstream.aclose()
            return
        self.connections += 1
        gate = [False]
        self._gates.append(gate)
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
        except OSError:
            await downstream.aclose()
            return
        async with downstream, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, downstream, upstream, gate, nursery.cancel_scope)
            nursery.start_soon(self._pump, upstream, downstream, gate, nursery.cancel_scope)

    @staticmethod
    async def _pump(
        source: trio.SocketStream,
        sink: trio.SocketStream,
        gate: list[bool],
        scope: trio.CancelScope,
    ) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            async for data in source:
                if gate[0]:
                    await trio.sleep_forever()
                await sink.send_all(data)
        if not gate[0]:
            scope.cancel()


@contextlib.asynccontextmanager
async def proxy_to(hub: APIServer) -> AsyncIterator[StallProxy]:
    proxy = StallProxy(hub.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        yield proxy
        nursery.cancel_scope.cancel()


FAST = {"backoff_initial": 0.1, "backoff_max": 1.0}


@attrs.define
class Recorder:
    """A kube Client observer that remembers what it was told."""

    requests: list[tuple[str, str]] = attrs.field(factory=list)
    restarts: list[tuple[str, str]] = attrs.field(factory=list)

    def request(self, verb: str, code: str) -> None:
        self.requests.append((verb, code))

    def watch_restarted(self, resource: str, reason: str) -> None:
        self.restarts.append((resource, reason))


# --- tests --------------------------------------------------------------------------------


async def test_watch_sees_changes_in_order(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        await client.create(CONFIG_MAPS, configmap("before", namespace))
        other = configmap("unwatched", namespace)
        other["metadata"]["labels"] = {"app": "other"}
        store = Store()
        async with watching(
            client, CONFIG_MAPS, namespace, label_selector="app=watched", store=store
        ) as view:
            # `start` returned: the first list is in the store already.
            assert store.synced
            assert store.get(namespace, "before") is not None
            await eventually(lambda: view.resyncs == [frozenset({"before"})])
            await client.create(CONFIG_MAPS, other)
            created = await client.create(CONFIG_MAPS, configmap("a", namespace, v="1"))
            modified = await client.patch_merge(
                CONFIG_MAPS, "a", {"data": {"v": "2"}}, namespace=namespace
            )
            await client.delete(CONFIG_MAPS, "a", namespace=namespace)
            await client.patch_merge(
                CONFIG_MAPS, "before", {"data": {"v": "3"}}, namespace=namespace
            )
            await eventually(lambda: ("MODIFIED", "before") in view.log)

            assert view.log == [
                ("RESYNC", "before"),
                ("ADDED", "a"),
                ("MODIFIED", "a"),
                ("DELETED", "a"),
                ("MODIFIED", "before"),
            ]
            assert view.objects["before"]["data"] == {"v": "3"}
            assert view.versions() == await server_versions(client, namespace)
            assert store.get(namespace, "a") is None
            assert store.get(namespace, "before") == view.objects["before"]
            assert created["metadata"]["resourceVersion"] < modified["metadata"]["resourceVersion"]
            # The server keeps who wrote what; the store, listed and watched, keeps none of it.
            assert created["metadata"]["managedFields"]
            assert all("managedFields" not in o["metadata"] for o in view.objects.values())
            assert "managedFields" not in (store.get(namespace, "before") or {})["metadata"]
            # The objects a store keeps, each decoded from its own event, share their keys and
            # repeated values (kokumi.objects.kept_form): the decoded copies are gone.
            await client.create(CONFIG_MAPS, configmap("b", namespace))
            await eventually(lambda: store.get(namespace, "b") is not None)
            kept_before, kept_b = store.get(namespace, "before"), store.get(namespace, "b")
            assert kept_before is not None and kept_b is not None
            assert next(iter(kept_before["metadata"])) is next(iter(kept_b["metadata"]))
            assert kept_before["metadata"]["labels"]["app"] is kept_b["metadata"]["labels"]["app"]


async def test_metadata_only_watch_never_holds_secret_data(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        secret = {"metadata": {"name": "first", "namespace": namespace}, "stringData": {"k": "s3"}}
        await client.create(SECRETS, secret)
        async with watching(client, SECRETS, namespace, metadata_only=True) as view:
            await eventually(lambda: "first" in view.objects)
            secret["metadata"]["name"] = "second"
            await client.create(SECRETS, secret)
            await eventually(lambda: ("ADDED", "second") in view.log)
        for obj in view.objects.values():
            assert obj["kind"] == "PartialObjectMetadata"
            assert "data" not in obj
            assert "stringData" not in obj
            assert obj["metadata"]["uid"]


async def test_watch_resumes_across_server_side_timeouts_without_relisting(
    hub: APIServer, namespace: str
) -> None:
    """Each watch request ends after 2 s; the next resumes from the version, so no Resync."""
    async with (
        admin(hub) as client,
        watching(client, CONFIG_MAPS, namespace, timeout_seconds=2, **FAST) as view,
    ):
        for i in range(4):
            await client.create(CONFIG_MAPS, configmap(f"cm-{i}", namespace))
            await trio.sleep(1.5)
        await eventually(lambda: len(view.objects) == 4)
        assert view.log == [("RESYNC", "")] + [("ADDED", f"cm-{i}") for i in range(4)]


async def test_watch_survives_an_apiserver_restart(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        for name in ("a", "b"):
            await client.create(CONFIG_MAPS, configmap(name, namespace))
        async with watching(client, CONFIG_MAPS, namespace, **FAST) as view:
            await eventually(lambda: set(view.objects) == {"a", "b"})
            await trio.to_thread.run_sync(hub.restart)
            # Changes right away, while the watcher is still reconnecting.
            await client.delete(CONFIG_MAPS, "a", namespace=namespace)
            await client.patch_merge(CONFIG_MAPS, "b", {"data": {"v": "2"}}, namespace=namespace)
            await client.create(CONFIG_MAPS, configmap("c", namespace))

            async def caught_up() -> bool:
                return view.versions() == await server_versions(client, namespace)

            await eventually(caught_up, within=30, step=0.1)
            assert view.objects["b"]["data"] == {"v": "2"}
            # And it is live again: a later change arrives as an event.
            await client.create(CONFIG_MAPS, configmap("d", namespace))
            await eventually(lambda: view.log[-1] == ("ADDED", "d"))


async def test_gone_relists_and_the_resync_reports_a_deletion_missed_meanwhile(
    hub: APIServer, namespace: str
) -> None:
    async with admin(hub) as client:
        for name in ("doomed", "kept"):
            await client.create(CONFIG_MAPS, configmap(name, namespace))
        async with (
            proxy_to(hub) as proxy,
            admin(hub, f"https://127.0.0.1:{proxy.port}") as blind,
            watching(blind, CONFIG_MAPS, namespace, inactivity_timeout=2, **FAST) as view,
        ):
            blind.observer = seen = Recorder()
            await eventually(lambda: set(view.objects) == {"doomed", "kept"})
            # Cut the watcher off, then change things it cannot see.
            proxy.refusing = True
            proxy.stall()
            await client.delete(CONFIG_MAPS, "doomed", namespace=namespace)
            await client.patch_merge(CONFIG_MAPS, "kept", {"data": {"v": "2"}}, namespace=namespace)
            # A restarted apiserver keeps no history from before: resuming gives 410.
            await trio.to_thread.run_sync(hub.restart)
            proxy.refusing = False

            await eventually(lambda: len(view.resyncs) == 2, within=30)
            assert view.resyncs[1] == frozenset({"kept"})
            assert ("DELETED", "doomed") not in view.log
            assert view.objects["kept"]["data"] == {"v": "2"}
            assert view.versions() == await server_versions(client, namespace)
            # The client's observer heard of the 410 and of the requests, with their codes.
            assert ("configmaps", "gone") in seen.restarts
            assert ("GET", "200") in seen.requests
            assert ("WATCH", "200") in seen.requests


async def test_a_silent_stream_is_dropped_and_resumed(hub: APIServer, namespace: str) -> None:
    async with (
        admin(hub) as client,
        proxy_to(hub) as proxy,
        admin(hub, f"https://127.0.0.1:{proxy.port}") as via,
        watching(via, CONFIG_MAPS, namespace, inactivity_timeout=3, **FAST) as view,
    ):
        await client.create(CONFIG_MAPS, configmap("x", namespace))
        await eventually(lambda: "x" in view.objects)
        connections = proxy.connections
        proxy.stall()  # the TCP connection stays open, but nothing comes through
        stalled_at = trio.current_time()
        await client.create(CONFIG_MAPS, configmap("y", namespace))
        await eventually(lambda: "y" in view.objects, within=15)
        waited = trio.current_time() - stalled_at
        assert 2.9 <= waited < 10, waited
        assert proxy.connections > connections
        # Resumed from the version it had: no relist, and y arrived exactly once.
        assert view.log == [("RESYNC", ""), ("ADDED", "x"), ("ADDED", "y")]
