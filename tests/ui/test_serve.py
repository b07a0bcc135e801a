"""The UI behind Hypercorn, as ``kokumi ui`` serves it: what slow and unfinished requests hold.

A token-mode UI reads a ``POST /signin`` body before it knows who sends it, so anybody may open
connections and send bodies as slowly as they like. Here many do, over real sockets, against
short limits: a body that stops, a body that trickles, a head that trickles. Every one of them
is closed by the server, and the server answers others meanwhile. The hub is a fake that
answers 404: nothing here gets as far as asking it.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from kokumi.core.sessioncookie import Keys
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.testing.controlplane import CertificateAuthority
from kokumi.ui.pages import UI
from kokumi.ui.security import Limits, SealedSessions
from kokumi.ui.serve import serve_app
from tests.support.cli import kokumi, one_error_line

LIMITS = Limits(idle_seconds=1, read_seconds=4, body_seconds=6)
"""Short limits. The clients below share the server's event loop, so a stall of that loop (a
collection, a busy machine) silences them too: a trickle every 0.1 s keeps within
``read_seconds`` through stalls of up to 3.9 s. (With 1 s and 0.25 s, one of 0.75 s made a
trickling client look silent to the server, which closed it for its read timeout; with 2 s and
0.1 s, one trickling client of twenty was closed so, without its 408, once in a run of the
whole suite, at 98 % of its 1,450 tests, and never in 26 runs of this file alone, 12 of them
beside three busy processes; an empty answer is what the read timeout gives, so most likely
a stall of 1.9 s in a process grown that large, not reproduced.)"""
DRIP = 0.1
WAIT = 15.0
"""How long a connection is watched before it counts as held open: far above the limits."""

SIGN_IN = (
    b"POST /signin HTTP/1.1\r\nHost: 127.0.0.1\r\nSec-Fetch-Site: same-origin\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\ntoken="
)


def _not_found(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})


@asynccontextmanager
async def serving(limits: Limits, tls: tuple[str, str] | None = None) -> AsyncIterator[int]:
    """A token-mode UI on a free port of 127.0.0.1, with ``limits`` (over TLS with ``tls``, a
    certificate and key file); its port."""
    config = Config(server="https://hub.invalid:6443", namespace="platform")
    async with (
        Client(config, transport=httpx.MockTransport(_not_found)) as hub,
        trio.open_nursery() as nursery,
    ):
        ui = UI(hub, SealedSessions(Keys(bytes(range(32)))), limits=limits)
        url: str = await nursery.start(functools.partial(serve_app, ui, "127.0.0.1:0", tls=tls))
        yield int(url.rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


@attrs.define
class Held:
    """One connection: what it sent first, what it drips after, whether the server closed it."""

    first: bytes
    drip: bytes = b""
    closed: bool = False
    answer: bytes = b""

    async def run(self, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(self.first)
            with trio.move_on_after(WAIT):
                async with trio.open_nursery() as nursery:
                    if self.drip:
                        nursery.start_soon(self._dripping, stream)
                    try:
                        while chunk := await stream.receive_some(65536):
                            self.answer += chunk
                    except trio.BrokenResourceError:
                        pass  # reset by the server: closed all the same
                    self.closed = True
                    nursery.cancel_scope.cancel()

    async def _dripping(self, stream: trio.SocketStream) -> None:
        try:
            while True:
                await trio.sleep(DRIP)  # well inside read_seconds: only the body deadline helps
                await stream.send_all(self.drip)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def test_unfinished_and_trickling_requests_are_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    stopped = [Held(SIGN_IN + b"abc") for _ in range(20)]
    trickling = [Held(SIGN_IN, drip=b"a") for _ in range(20)]
    heads = [Held(b"POST /signin HTTP/1.1\r\nHost: 127.0.0.1\r\n", drip=b"X-A: b\r\n")
             for _ in range(10)]  # fmt: skip
    async with serving(LIMITS) as port, trio.open_nursery() as nursery:
        for held in (*stopped, *trickling, *heads):
            nursery.start_soon(held.run, port)
        await trio.sleep(0.5)
        # All fifty are open now, and the server answers another client meanwhile.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as other:
            assert (await other.get("/healthz")).text == "ok"
    open_ = [h for h in (*stopped, *trickling, *heads) if not h.closed]
    assert open_ == [], f"{len(open_)} of 50 connections still open after {WAIT:g} s"
    # What the server logged, with any traceback: why a connection got another answer.
    said = [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        + (logging.Formatter().formatException(r.exc_info) if r.exc_info else "")
        for r in caplog.records
    ]
    for held in trickling:
        assert held.answer.startswith(b"HTTP/1.1 408 "), (held.answer[:200], said)
        assert held.answer.endswith(
            b"Refused: the request's body took longer than 6 s to arrive: send it again over a "
            b"faster connection."
        )
    # A client that fell silent mid-body is closed, not told that the server failed (Starlette
    # answered the disconnect "500 Internal Server Error" while the socket was still open).
    assert [held.answer[:40] for held in stopped if held.answer] == [], said
    # A client gone mid-body is no error of the server's: no traceback in its log.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_sign_in_body_over_its_limit_is_refused_before_it_is_read() -> None:
    async with (
        serving(LIMITS) as port,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
    ):
        refused = await client.post(
            "/signin",
            content=b"token=" + b"t" * LIMITS.max_sign_in_body,
            headers={"Sec-Fetch-Site": "same-origin",
                     "Content-Type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
    assert refused.status_code == 413
    assert refused.text == (
        "Refused: the request is larger than 32 KiB: a bearer token is at most 16 KiB."
    )


async def test_silent_and_unfinished_tls_handshakes_are_closed_within_the_idle_limit(
    tmp_path: Path,
) -> None:
    # Hypercorn's own bound on a TLS handshake is 60 s, far past WAIT: these would stay open.
    authority = CertificateAuthority.create("kokumi-ui-test-ca")
    cert, key = authority.issue("kokumi-ui", server_names=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    silent = [Held(b"") for _ in range(20)]
    # The first bytes of a ClientHello (a TLS record header), and then nothing.
    started = [Held(b"\x16\x03\x01\x02\x00\x01") for _ in range(10)]
    verified = ssl.create_default_context(cadata=authority.pem.decode())
    tls = (str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    async with serving(LIMITS, tls) as port, trio.open_nursery() as nursery:
        for held in (*silent, *started):
            nursery.start_soon(held.run, port)
        await trio.sleep(0.5)
        # The server finishes other handshakes meanwhile, and answers over them.
        async with httpx.AsyncClient(
            base_url=f"https://127.0.0.1:{port}", verify=verified
        ) as other:
            assert (await other.get("/healthz")).text == "ok"
    open_ = [h for h in (*silent, *started) if not h.closed]
    assert open_ == [], f"{len(open_)} of 30 handshakes still open after {WAIT:g} s"
    assert [held.answer for held in silent if held.answer] == []


def test_namespaces_that_no_namespace_can_have_are_refused_before_anything_starts() -> None:
    for flags in (["--in-cluster"], []):
        run = kokumi("ui", *flags, "--namespaces", "team-a, Team_B")
        line = one_error_line(run)
        assert line.startswith('kokumi: --namespaces: namespace "Team_B" is not a DNS label')
