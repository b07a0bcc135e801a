"""Every connection a check opens is closed when the check ends, whatever ended it (no server).

A check's deadline is a Trio cancel scope that may fire in the middle of a TLS handshake; the
connection must not outlive it, or a few hanging spokes hold sockets open without bound while
the limit of eight checks looks respected.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from functools import partial

import pytest
import trio

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.runtime.probe.checks import check


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Without the collector, only an explicit close closes a socket: the leak cannot hide."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_a_check_that_times_out_closes_its_connection(no_gc: None) -> None:
    accepted = 0
    closed = 0
    all_closed = trio.Event()

    async def hold(stream: trio.SocketStream) -> None:
        """Accept, read the ClientHello, never answer; count the client's close."""
        nonlocal accepted, closed
        accepted += 1
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        closed += 1
        if closed == accepted:
            all_closed.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        connection = Connection(
            server=f"https://127.0.0.1:{port}", token="t", insecure_skip_tls_verify=True
        )
        findings = []

        async def one() -> None:
            findings.append(await check(connection, timeout=2.0))

        async with trio.open_nursery() as checks:
            for _ in range(9):
                checks.start_soon(one)
        assert [f.reason for f in findings] == [Reason.UNREACHABLE] * 9
        assert all(f.message.startswith("timed out after 2 s") for f in findings)
        with trio.move_on_after(5):
            await all_closed.wait()
        assert accepted >= 1
        assert closed == accepted, f"{accepted - closed} of {accepted} connections left open"
        nursery.cancel_scope.cancel()
