"""The hub client leaves no socket to the garbage collector when a request is cancelled.

A server that accepts TCP and never answers the TLS handshake holds a request in the middle of
it; the request is cancelled there, as a manager that stops cancels its watches and requests.

:mod:`kokumi.kube.backend` reaches under httpx into httpcore's pool (pyproject.toml pins httpcore
to the range tested): the last test takes each kind of pool httpx makes through every private
attribute the module uses, so an httpcore that moves one fails here, without a cluster.
"""

from __future__ import annotations

import gc
import socket
import warnings

import httpx
import pytest
import trio

from kokumi.kube import backend
from kokumi.kube.client import NAMESPACES, Client
from kokumi.kube.config import Config


async def test_a_request_cancelled_in_its_tls_handshake_closes_its_socket() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes TCP; nobody ever speaks TLS
        port = listener.getsockname()[1]
        async with Client(Config(server=f"https://127.0.0.1:{port}"), max_retries=0) as client:
            for _ in range(3):
                with trio.move_on_after(0.2) as scope:
                    await client.get(NAMESPACES, "default")
                assert scope.cancelled_caught
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


async def _serve_ok(listener: trio.SocketListener) -> None:
    """Answer every request of every connection ``ok``, keeping the connection open."""

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            while True:
                received = b""
                while b"\r\n\r\n" not in received:
                    data = await stream.receive_some()
                    if not data:
                        return
                    received += data
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    await trio.serve_listeners(answer, [listener])


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "http-proxy"])
async def test_the_private_parts_of_httpcore_the_backend_uses_are_where_it_reaches(
    through_proxy: bool,
) -> None:
    """``install`` and ``keep_connections`` refuse at once a pool without the attributes they
    replace; the pass itself reads more of them as requests come and go. Both run here, each
    request through the backend and the pass, on each kind of pool httpx makes (an HTTP
    proxy's pool is its own class; the server here answers as the proxy too)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    here = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    transport = httpx.AsyncHTTPTransport(proxy=here if through_proxy else None)
    admitted: list[tuple[str, str]] = []
    installed = backend.install(transport, admit=lambda *judged: admitted.append(judged))
    backend.keep_connections(transport)
    pool = transport._pool
    url = "http://kokumi.invalid" if through_proxy else here
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_ok, listeners[0])
        async with httpx.AsyncClient(transport=transport) as client:
            answers = [await client.get(f"{url}/{n}") for n in range(3)]
        nursery.cancel_scope.cancel()
    assert [a.text for a in answers] == ["ok"] * 3
    assert pool._network_backend is installed
    assert isinstance(pool, backend._KeptConnections)
    assert admitted == [("127.0.0.1", "127.0.0.1")]  # one connection, kept for all three
