"""The hub client's pool keeps its connections: writes beside watches reuse them.

httpcore's own pool compared ``max_keepalive_connections`` with every connection it held, watch
streams included, so with a dozen watches open each write closed its connection once answered
and the next one handshook with the API server anew (a connection a write).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import pytest
import trio

from kokumi.kube import CONFIG_MAPS, NAMESPACES, Client, Config, start_watch
from kokumi.kube.transport import Transport
from kokumi.testing.controlplane import APIServer


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """The connections httpcore opens while the test runs, one entry each."""
    seen: list[object] = []
    connect = httpcore.AsyncHTTPConnection._connect

    async def counted(conn: Any, request: Any) -> Any:
        seen.append(conn)
        return await connect(conn, request)

    monkeypatch.setattr(httpcore.AsyncHTTPConnection, "_connect", counted)
    yield seen


async def test_writes_beside_watches_reuse_their_connections(
    hub: APIServer, namespace: str, opened: list[object]
) -> None:
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    quiet = f"{namespace}-quiet"
    async with Client(config) as client:
        await client.create(NAMESPACES, {"metadata": {"name": quiet}})
        try:
            for index in range(20):
                body = {"metadata": {"name": f"cm-{index}"}, "data": {"n": "0"}}
                await client.create(CONFIG_MAPS, body, namespace=namespace)
            async with trio.open_nursery() as nursery:
                for _ in range(12):  # more streams than httpcore's 20 kept, with the writes
                    events = await start_watch(nursery, client, CONFIG_MAPS, namespace=quiet)
                    nursery.start_soon(_drain, events)
                before = len(opened)

                async def writes(worker: int) -> None:
                    for index in range(worker, 600, 32):
                        patch = {"data": {"n": str(index)}}
                        await client.patch_merge(
                            CONFIG_MAPS, f"cm-{index % 20}", patch, namespace=namespace
                        )

                async with trio.open_nursery() as workers:
                    for worker in range(32):
                        workers.start_soon(writes, worker)
                nursery.cancel_scope.cancel()
        finally:
            await client.delete(NAMESPACES, quiet)
    # At most one connection a request in flight (32), and no handshake a write: httpcore's own
    # pass opened about one a write (nearly 600) here.
    assert len(opened) - before <= 32


async def _drain(events: trio.MemoryReceiveChannel[Any]) -> None:
    async for _ in events:
        pass


class _Server:
    """Plain HTTP/1.1 with keep-alive, closing each connection ``close_after`` seconds after its
    first answer, as a server's idle timeout does."""

    def __init__(self, close_after: float) -> None:
        self.close_after = close_after
        self.accepted = 0
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self._one, listeners, handler_nursery=nursery)

    async def _one(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        async with stream:
            answered = False
            with trio.move_on_after(60) as scope:
                buffer = b""
                while True:
                    data = await stream.receive_some(4096)
                    if not data:
                        return
                    buffer += data
                    while b"\r\n\r\n" in buffer:
                        _, buffer = buffer.split(b"\r\n\r\n", 1)
                        body = b"{}"
                        await stream.send_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                        )
                        if not answered:
                            answered = True
                            scope.deadline = trio.current_time() + self.close_after


async def test_a_connection_the_server_closed_while_idle_is_not_handed_out() -> None:
    server = _Server(close_after=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        url = f"http://127.0.0.1:{server.port}"
        async with Client(Config(server=url), max_retries=0) as client:
            await client.get(NAMESPACES, "a")
            await trio.sleep(0.3)  # the server has closed it; no sweep is due yet
            await client.get(NAMESPACES, "b")  # a reused dead connection would fail here
        assert server.accepted == 2
        nursery.cancel_scope.cancel()


async def test_idle_connections_beyond_those_kept_are_closed() -> None:
    server = _Server(close_after=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        transport = Transport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=2), keep=True
        )
        async with httpx.AsyncClient(transport=transport) as http:
            async with trio.open_nursery() as requests:
                for _ in range(6):
                    requests.start_soon(http.get, f"http://127.0.0.1:{server.port}/")
            assert server.accepted == 6
            assert len(transport.connections) == 2
            for _ in range(4):  # the two kept serve what comes next, one after the other
                await http.get(f"http://127.0.0.1:{server.port}/")
            assert server.accepted == 6
        nursery.cancel_scope.cancel()
