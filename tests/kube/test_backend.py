"""The hub client leaves no socket to the garbage collector when a request is cancelled.

A server that accepts TCP and never answers the TLS handshake holds a request in the middle of
it; the request is cancelled there, as a manager that stops cancels its watches and requests.

:class:`kokumi.kube.transport.Transport` builds httpcore's pool with the backend through public
arguments, and overrides one private part of it, the pool's pass over its connections
(pyproject.toml pins httpcore to the range tested): the last test takes each kind of pool
through that pass and fails when a request no longer goes through it, so an httpcore that moves
it fails here, without a cluster.
"""

from __future__ import annotations

import gc
import socket
import warnings
from typing import Any

import httpcore
import httpx
import pytest
import trio

from kokumi.kube import backend, transport
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import NAMESPACES


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
async def test_the_private_pass_of_httpcore_the_transport_overrides_is_where_it_reaches(
    through_proxy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request of a pool that keeps its connections goes through Kokumi's pass, and
    through the backend given to the pool, on each kind of pool (an HTTP proxy's pool is its own
    class; the server here answers as the proxy too). An httpcore that renamed the pass would
    run its own instead, and nothing here would count it."""
    passes: list[object] = []
    hook = "_assign_requests_to_connections"
    kept_pass = vars(transport._Kept)[hook]  # Kokumi's own, not one inherited from httpcore

    def counted(pool: transport._Kept) -> list[Any]:
        passes.append(pool)
        result: list[Any] = kept_pass(pool)
        return result

    monkeypatch.setattr(transport._Kept, hook, counted)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    here = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    admitted: list[tuple[str, str]] = []
    sockets = backend.Backend(admit=lambda *judged: admitted.append(judged))
    kept = transport.Transport(proxy=here if through_proxy else None, backend=sockets, keep=True)
    url = "http://kokumi.invalid" if through_proxy else here
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_ok, listeners[0])
        async with httpx.AsyncClient(transport=kept) as client:
            answers = [await client.get(f"{url}/{n}") for n in range(3)]
        nursery.cancel_scope.cancel()
    assert [a.text for a in answers] == ["ok"] * 3
    assert len(passes) >= 6  # as each request starts and as each ends
    assert admitted == [("127.0.0.1", "127.0.0.1")]  # one connection, kept for all three


def test_a_pool_without_the_pass_it_overrides_refuses_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(httpcore.AsyncConnectionPool, "_assign_requests_to_connections")
    with pytest.raises(RuntimeError, match="httpcore changed"):
        transport.Transport(keep=True)
