"""The hub client leaves no socket to the garbage collector when a request is cancelled.

A server that accepts TCP and never answers the TLS handshake holds a request in the middle of
it; the request is cancelled there, as a manager that stops cancels its watches and requests.
"""

from __future__ import annotations

import gc
import socket
import warnings

import trio

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
