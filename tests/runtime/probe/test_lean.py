"""The probe's lean path (two HTTP/1.1 requests on a blocking socket) against hostile servers.

Every server here is a real local TLS server that answers as a broken or hostile API server would:
garbage for a status line, headers without end, a body without end, one byte a second, a chunked
answer, a connection closed after each answer. Each check runs twice, on the lean path and through
httpx (the path it replaced, still taken behind a proxy), and both must find exactly the same:
the messages users read may not depend on which path a check took. The lean path must also stay
inside its budget and read a bounded amount, whatever the server sends.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import h11
import httpx
import hypothesis.strategies as st
import pytest
import trio
from httpcore._backends.trio import TrioStream
from hypothesis import given

from kokumi.core.cluster import findings
from kokumi.core.cluster.egress import parse_address
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.runtime.probe import checks, lean
from kokumi.runtime.probe.checks import check
from kokumi.testing import canary
from kokumi.testing.controlplane import CertificateAuthority
from tests.runtime.probe.test_checks import connect_proxy
from tests.support.spoke_answers import ACCESS_REVIEW_PATH, access_review, both

TOKEN = canary.token("lean")
VERSION = b'{"major":"1","minor":"36","gitVersion":"v1.36.0-lean"}'
REVIEW = json.dumps(
    {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "status": {"userInfo": {"username": "lean-user"}},
    }
).encode()


ALLOWED = access_review(allowed=True)


def answer_of(path: str) -> tuple[bytes, str]:
    """What a healthy API server answers at ``path`` of the check's: body and status."""
    if path == "/version":
        return VERSION, "200 OK"
    if path == ACCESS_REVIEW_PATH:
        return ALLOWED, "201 Created"
    return REVIEW, "201 Created"


def healthy(path: str) -> bytes:
    """A healthy API server's whole answer at ``path``."""
    body, status = answer_of(path)
    return response(status, body)


@attrs.define
class Seen:
    """What the server saw: connections accepted and closed by the client, requests, bytes sent."""

    accepted: int = 0
    closed: int = 0
    requests: list[str] = attrs.Factory(list)
    sent: int = 0
    all_closed: trio.Event = attrs.Factory(trio.Event)


class Peer:
    """One accepted TLS connection, read as HTTP/1.1 requests."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream], seen: Seen) -> None:
        self.stream = stream
        self.seen = seen
        self.buffer = b""
        self.last_body = b""

    async def request(self) -> tuple[str, str, dict[str, str]] | None:
        while b"\r\n\r\n" not in self.buffer:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        first, *lines = head.decode("latin-1").split("\r\n")
        method, path, _ = first.split(" ", 2)
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self.buffer += await self.stream.receive_some(65536)
        self.last_body, self.buffer = self.buffer[:length], self.buffer[length:]
        self.seen.requests.append(f"{method} {path}")
        return method, path, headers

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)
        self.seen.sent += len(data)


Handler = Callable[[Peer], Awaitable[None]]
Serve = Callable[[Handler], Awaitable[tuple[str, Seen]]]


@attrs.frozen
class Pki:
    ca: bytes
    server: ssl.SSLContext


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    authority = CertificateAuthority.create("kokumi-lean-ca")
    cert, key = authority.issue("lean-server", server_names=["127.0.0.1", "spoke.test"])
    chain = Path(tmp_path_factory.mktemp("lean")) / "server.pem"
    chain.write_bytes(cert + key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    return Pki(authority.pem, context)


@pytest.fixture(params=["lean", "httpx"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(checks, "_LEAN", request.param == "lean")
    yield request.param


@pytest.fixture
async def serve(pki: Pki) -> AsyncIterator[Serve]:
    """Start a TLS server running ``handler`` on each connection; its URL and what it saw."""
    async with trio.open_nursery() as nursery:

        async def start(handler: Handler) -> tuple[str, Seen]:
            seen = Seen()

            async def on_connection(stream: trio.SSLStream[trio.SocketStream]) -> None:
                seen.accepted += 1
                try:
                    await handler(Peer(stream, seen))
                    # Then wait for the client to close, counting it.
                    while await stream.receive_some(65536):
                        pass
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                finally:
                    seen.closed += 1
                    if seen.closed == seen.accepted:
                        seen.all_closed.set()
                    await trio.aclose_forcefully(stream)

            listeners = await nursery.start(
                functools.partial(
                    trio.serve_ssl_over_tcp,
                    on_connection,
                    0,
                    pki.server,
                    host="127.0.0.1",
                    https_compatible=True,
                )
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            return f"https://127.0.0.1:{port}", seen

        yield start
        nursery.cancel_scope.cancel()


def connection(pki: Pki, server: str) -> Connection:
    return Connection(server=server, token=TOKEN, certificate_authority=pki.ca)


def response(status: str, body: bytes, *extra: str) -> bytes:
    headers = "".join(f"{line}\r\n" for line in extra)
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def kubernetes(
    peer: Peer, *, close: bool = False, chunked: bool = False, extra: str | None = None
) -> None:
    """A healthy API server, as far as the check asks it (``extra``: one more header line)."""
    while (asked := await peer.request()) is not None:
        _, path, headers = asked
        assert headers["authorization"] == f"Bearer {TOKEN}"
        body, status = answer_of(path)
        if chunked:
            pieces = [body[:7], body[7:]]
            chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces)
            await peer.send(
                f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                + chunks
                + b"0\r\nX-Trailer: yes\r\n\r\n"
            )
        else:
            lines = [*(["Connection: close"] if close else []), *([extra] if extra else [])]
            await peer.send(response(status, body, *lines))
        if close:
            return


def ready(server: str) -> Outcome:
    return Outcome(
        ok=True,
        reason=Reason.READY,
        message="the API server answers and accepts the credential as lean-user",
        server=server,
        kubernetes_version="v1.36.0-lean",
    )


CPU_PER_CHECK = 0.5
"""Seconds of CPU one check may cost here, the test server's own side included. An honest check
costs a few milliseconds; a header line padded with 15,000 spaces cost the lean path's old
regex parser 0.9 s a line, with the GIL held, which stopped every other check of the manager."""


async def checked(pki: Pki, server: str, timeout: float = 10.0) -> Outcome:
    """The check's Outcome, held to :data:`CPU_PER_CHECK` whatever the server sends."""
    cpu = time.process_time()
    finding = await check(connection(pki, server), timeout=timeout)
    spent = time.process_time() - cpu
    assert spent < CPU_PER_CHECK, f"the check cost {spent:.2f} s of CPU"
    assert canary.found(repr(finding)) == []
    return finding


# --- answers that are fine, in less common forms ---------------------------------------------


async def test_a_healthy_server_is_ready(pki: Pki, serve: Serve, path: str) -> None:
    server, seen = await serve(kubernetes)
    assert await checked(pki, server) == ready(server)
    assert seen.requests == [
        "GET /version",
        "POST /apis/authentication.k8s.io/v1/selfsubjectreviews",
        f"POST {ACCESS_REVIEW_PATH}",
    ]
    assert seen.accepted == 1  # every question on one connection
    with trio.fail_after(5):
        await seen.all_closed.wait()


async def test_chunked_answers_with_extensions_and_trailers_are_read(
    pki: Pki, serve: Serve, path: str
) -> None:
    server, _ = await serve(functools.partial(kubernetes, chunked=True))
    assert await checked(pki, server) == ready(server)


async def test_a_server_that_closes_after_each_answer_gets_a_new_connection(
    pki: Pki, serve: Serve, path: str
) -> None:
    server, seen = await serve(functools.partial(kubernetes, close=True))
    assert await checked(pki, server) == ready(server)
    assert seen.accepted == 3
    with trio.fail_after(5):
        await seen.all_closed.wait()


async def test_interim_answers_are_skipped(pki: Pki, serve: Serve, path: str) -> None:
    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            body, status = answer_of(asked[1])
            await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n" + response(status, body))

    server, _ = await serve(handler)
    assert await checked(pki, server) == ready(server)


async def test_an_http_1_0_answer_without_a_length_ends_with_the_connection(
    pki: Pki, serve: Serve, path: str
) -> None:
    async def handler(peer: Peer) -> None:
        asked = await peer.request()
        assert asked is not None
        body, _ = answer_of(asked[1])
        await peer.send(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
        await peer.stream.aclose()

    server, seen = await serve(handler)
    assert await checked(pki, server) == ready(server)
    assert seen.accepted == 3


async def test_a_server_without_selfsubjectreviews_gets_the_access_review(
    pki: Pki, serve: Serve, path: str
) -> None:
    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] == "/version":
                await peer.send(response("200 OK", VERSION))
            elif "selfsubjectreviews" in asked[1]:
                await peer.send(response("404 Not Found", b"{}"))
            else:
                await peer.send(response("201 Created", b'{"status":{"allowed":true}}'))

    server, seen = await serve(handler)
    finding = await checked(pki, server)
    assert finding.message == "the API server answers and accepts the credential"
    assert seen.requests[-1] == "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


async def test_a_server_error_says_the_servers_own_sentence(
    pki: Pki, serve: Serve, path: str
) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        status = b'{"kind":"Status","message":"etcd is\\n  down"}'
        await peer.send(response("503 Service Unavailable", status))

    server, _ = await serve(handler)
    finding = await checked(pki, server)
    assert finding.reason is Reason.SERVER_ERROR
    assert finding.message == (
        "the API server failed GET /version with 503 Service Unavailable (etcd is down); look at"
        " the API server's health and load"
    )


# --- the third question: may the credential list cluster-wide? --------------------------------


def answering_access(status: str, body: bytes, *extra: str) -> Handler:
    """A healthy API server but for its answer to the SelfSubjectAccessReview."""

    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] == ACCESS_REVIEW_PATH:
                await peer.send(response(status, body, *extra))
            else:
                await peer.send(healthy(asked[1]))

    return handler


NAMESPACES_REQUIRED = (
    "the credential may not list every resource cluster-wide, which Argo CD does unless told"
    " which namespaces to use: set spec.scope.namespaces to the namespaces Argo CD may use there,"
    " or grant the credential list and watch on all resources cluster-wide"
)


async def test_a_credential_that_may_not_list_cluster_wide_needs_namespaces(
    pki: Pki, serve: Serve, path: str
) -> None:
    server, seen = await serve(answering_access("201 Created", access_review(allowed=False)))
    finding = await checked(pki, server)
    assert finding == Outcome(
        False, Reason.NAMESPACES_REQUIRED, NAMESPACES_REQUIRED, server, "v1.36.0-lean"
    )
    assert seen.requests[-1] == f"POST {ACCESS_REVIEW_PATH}"
    assert seen.accepted == 1


async def test_the_question_is_exactly_list_of_everything_in_no_namespace(
    pki: Pki, serve: Serve, path: str
) -> None:
    bodies: list[Any] = []

    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] == ACCESS_REVIEW_PATH:
                bodies.append(json.loads(peer.last_body))
            await peer.send(healthy(asked[1]))

    server, _ = await serve(handler)
    assert await checked(pki, server) == ready(server)
    assert bodies == [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "list", "group": "*", "resource": "*"}},
        }
    ]


async def test_a_cluster_with_namespaces_is_not_asked(pki: Pki, serve: Serve, path: str) -> None:
    server, seen = await serve(answering_access("201 Created", access_review(allowed=False)))
    finding = await check(connection(pki, server), cluster_wide=False)
    assert finding == ready(server)
    assert seen.requests == [
        "GET /version",
        "POST /apis/authentication.k8s.io/v1/selfsubjectreviews",
    ]


async def test_a_refused_credential_is_not_asked_further(pki: Pki, serve: Serve, path: str) -> None:
    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] == "/version":
                await peer.send(response("200 OK", VERSION))
            else:
                await peer.send(response("403 Forbidden", b'{"kind":"Status"}'))

    server, seen = await serve(handler)
    finding = await checked(pki, server)
    assert finding.reason is Reason.FORBIDDEN
    assert f"POST {ACCESS_REVIEW_PATH}" not in seen.requests


WHAT = "POST selfsubjectaccessreviews"
NOT_KUBERNETES = "this is not a Kubernetes API server; check the server URL and its path"


@pytest.mark.parametrize(
    ("status", "body", "reason", "message"),
    [
        ("201 Created", b"<html>not json</html>", Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("201 Created", b'[{"status":{"allowed":true}}]', Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("201 Created", b'{"status":{"allowed":"true"}}', Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("201 Created", b'{"status":{"allowed":1}}', Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("201 Created", b'{"status":{"denied":true}}', Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("201 Created", b"", Reason.SERVER_ERROR,
         f"{WHAT} answered without status.allowed: {NOT_KUBERNETES}"),
        ("403 Forbidden", b'{"kind":"Status","code":403}', Reason.FORBIDDEN,
         "the credential authenticates, but its user may not create a SelfSubjectAccessReview"
         " (403), which every user may: bind it the roles Argo CD needs there (cluster-admin,"
         " or less)"),
        ("401 Unauthorized", b"{}", Reason.UNAUTHORIZED,
         "the API server refuses the credential (401): the token is invalid or expired, or the"
         " client certificate is not signed by a CA it trusts; write a current credential into"
         " the kubeconfig Secret"),
        ("500 Internal Server Error", b'{"kind":"Status","message":"webhook\\n down"}',
         Reason.SERVER_ERROR,
         f"the API server failed {WHAT} with 500 Internal Server Error (webhook down); look at"
         " the API server's health and load"),
        ("404 Not Found", b"{}", Reason.SERVER_ERROR,
         f"{WHAT} answered 404 Not Found: {NOT_KUBERNETES}"),
        ("299 Odd", b'{"status":{"allowed":true}}', Reason.READY,
         "the API server answers and accepts the credential as lean-user"),
    ],
    ids=[
        "not-json", "a-list", "allowed-a-string", "allowed-a-number", "no-allowed", "empty",
        "forbidden", "unauthorized", "server-error", "not-found", "odd-2xx",
    ],
)  # fmt: skip
async def test_an_odd_answer_to_the_access_review_is_a_clear_outcome(
    pki: Pki, serve: Serve, path: str, status: str, body: bytes, reason: Reason, message: str
) -> None:
    """Whatever the server says to the third question, the check ends in one Outcome, the same
    on both paths; nothing but a boolean ``status.allowed`` is taken for an answer, and never
    anything for a yes that is not ``true``."""
    server, _ = await serve(answering_access(status, body))
    finding = await checked(pki, server)
    assert (finding.reason, finding.message) == (reason, message)
    assert finding.kubernetes_version == "v1.36.0-lean"


async def test_a_huge_access_review_is_cut_off(pki: Pki, serve: Serve, path: str) -> None:
    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] != ACCESS_REVIEW_PATH:
                await peer.send(healthy(asked[1]))
                continue
            await peer.send(b"HTTP/1.1 201 Created\r\nContent-Length: 100000000\r\n\r\n")
            while True:
                await peer.send(b'{"status":{"allowed":true}}' * 100)

    server, seen = await serve(handler)
    finding = await checked(pki, server)
    assert finding.reason is Reason.SERVER_ERROR
    assert finding.message == f"{WHAT} answered with more than 64 KiB: {NOT_KUBERNETES}"
    with trio.fail_after(5):
        await seen.all_closed.wait()
    assert seen.sent < 16 << 20


async def test_an_access_review_in_tiny_pieces_ends_the_check(
    pki: Pki, serve: Serve, path: str, wire: Wire
) -> None:
    async def handler(peer: Peer) -> None:
        for _ in range(2):
            asked = await peer.request()
            assert asked is not None
            await peer.send(healthy(asked[1]))
        await trickle(
            peer,
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n",
            forever(b"1\r\n \r\n"),
        )

    server, _ = await serve(handler)
    finding = await check(connection(pki, server))
    assert finding.message == f"{WHAT} answered in more than 64 reads: {NOT_KUBERNETES}"
    assert finding.kubernetes_version == "v1.36.0-lean"


async def test_a_server_that_closes_before_the_access_review_is_asked_again(
    pki: Pki, serve: Serve, path: str
) -> None:
    """Closed after the review's answer: the third question goes on a new connection."""

    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            body, status = answer_of(asked[1])
            last = asked[1] != "/version" and asked[1] != ACCESS_REVIEW_PATH
            await peer.send(response(status, body, *(["Connection: close"] if last else [])))
            if last:
                return

    server, seen = await serve(handler)
    assert await checked(pki, server) == ready(server)
    assert seen.accepted == 2


async def test_a_yes_is_kept_for_the_connection_and_a_no_never(
    pki: Pki, serve: Serve, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady Ready Cluster does not ask at every check; one that is not allowed does, so a
    binding granted on the spoke shows at the next check; a binding taken away shows once the
    yes is older than findings.CLUSTER_WIDE_KEPT."""
    allowed = [True]

    async def handler(peer: Peer) -> None:
        while (asked := await peer.request()) is not None:
            if asked[1] == ACCESS_REVIEW_PATH:
                await peer.send(response("201 Created", access_review(allowed=allowed[0])))
            else:
                await peer.send(healthy(asked[1]))

    server, seen = await serve(handler)
    asked = f"POST {ACCESS_REVIEW_PATH}"
    assert await checked(pki, server) == ready(server)
    assert seen.requests.count(asked) == 1
    allowed[0] = False  # the ClusterRoleBinding taken away on the spoke
    assert await checked(pki, server) == ready(server)  # the yes is kept
    assert seen.requests.count(asked) == 1
    other = attrs.evolve(connection(pki, server), token=canary.token("another-credential"))
    assert (await check(other)).reason is Reason.NAMESPACES_REQUIRED  # another credential asks
    monkeypatch.setattr(findings, "CLUSTER_WIDE_KEPT", 0.0)
    assert (await checked(pki, server)).reason is Reason.NAMESPACES_REQUIRED
    monkeypatch.undo()
    assert (await checked(pki, server)).reason is Reason.NAMESPACES_REQUIRED  # a no is not kept
    assert seen.requests.count(asked) == 4
    allowed[0] = True  # granted again: Ready at the next check
    assert await checked(pki, server) == ready(server)
    assert seen.requests.count(asked) == 5


# --- hostile servers -------------------------------------------------------------------------


NO_ANSWER = (
    "closed the connection without an HTTP answer: check that the server URL points at the API"
    " server"
)


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 2OO OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut short",
        b"",
    ],
    ids=[
        "not-http",
        "bad-status",
        "bad-header",
        "bad-length",
        "two-lengths",
        "unknown-coding",
        "bad-chunk",
        "short-body",
        "closed-at-once",
    ],
)
async def test_garbage_is_no_http_answer(pki: Pki, serve: Serve, path: str, answer: bytes) -> None:
    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(answer)
        await peer.stream.aclose()

    server, _ = await serve(handler)
    finding = await checked(pki, server)
    assert finding.reason is Reason.UNREACHABLE
    assert finding.message == f"{server.removeprefix('https://')} {NO_ANSWER}"


async def endless(peer: Peer, head: bytes, piece: bytes, pause: float = 0.0) -> None:
    await peer.request()
    await peer.send(head)
    while True:
        await peer.send(piece)
        if pause:
            await trio.sleep(pause)


@pytest.mark.parametrize(
    ("head", "piece"),
    [
        (b"HTTP/1.1 200 OK\r\n", b"X-Filler: " + b"a" * 1000 + b"\r\n"),
        (b"HTTP/1.1 200 OK\r\nX-Long: ", b"b" * 4096),
    ],
    ids=["many-headers", "one-endless-header"],
)
async def test_headers_without_end_are_cut_off(
    pki: Pki, serve: Serve, path: str, head: bytes, piece: bytes
) -> None:
    server, seen = await serve(functools.partial(endless, head=head, piece=piece))
    finding = await checked(pki, server)
    assert finding.message == f"{server.removeprefix('https://')} {NO_ANSWER}"
    with trio.fail_after(5):
        await seen.all_closed.wait()
    assert seen.sent < 16 << 20  # what the kernel's buffers took, not what the server offered


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
OVERLONG = "this is not a Kubernetes API server; check the server URL and its path"


@pytest.mark.parametrize(
    ("head", "piece"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n", b"x" * 4096),
        (b"HTTP/1.1 200 OK\r\n\r\n", b"x" * 4096),
        (CHUNKED, b"1000\r\n" + b"x" * 4096 + b"\r\n"),
        (CHUNKED, b"1" * 4096),
    ],
    ids=["huge-length", "until-closed", "chunked", "endless-chunk-size"],
)
async def test_a_body_without_end_is_cut_off(
    pki: Pki, serve: Serve, path: str, head: bytes, piece: bytes
) -> None:
    server, seen = await serve(functools.partial(endless, head=head, piece=piece))
    finding = await checked(pki, server)
    assert finding.reason is Reason.SERVER_ERROR
    assert finding.message == f"GET /version answered with more than 64 KiB: {OVERLONG}"
    with trio.fail_after(5):
        await seen.all_closed.wait()
    assert seen.sent < 16 << 20


@pytest.mark.parametrize(
    ("head", "piece"),
    [
        (b"HTTP/1.1 200 OK\r\n", b"X"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"x"),
    ],
    ids=["slow-headers", "slow-body"],
)
async def test_a_slow_loris_times_out_within_the_budget(
    pki: Pki, serve: Serve, path: str, head: bytes, piece: bytes
) -> None:
    server, seen = await serve(functools.partial(endless, head=head, piece=piece, pause=0.05))
    started = time.monotonic()
    finding = await checked(pki, server, timeout=1.0)
    elapsed = time.monotonic() - started
    assert finding.message.startswith("timed out after 1 s: 127.0.0.1:")
    assert 1.0 <= elapsed < 3.0
    with trio.fail_after(5):
        await seen.all_closed.wait()


PAD = b"X-Pad: x" + b" " * 15_000 + b"y"


async def test_a_header_padded_with_spaces_costs_no_more_than_any_other(
    pki: Pki, serve: Serve, path: str
) -> None:
    """A long run of spaces between two other characters of a header value: a parser that
    backtracks spends quadratic time on it (with the GIL held, in the lean path's thread)."""
    server, _ = await serve(functools.partial(kubernetes, extra=PAD.decode()))
    assert await checked(pki, server) == ready(server)


@pytest.mark.parametrize(
    ("interim", "count"),
    [
        # Each interim head alone is small; together they are more than a head may be.
        (b"HTTP/1.1 100 Continue\r\nX-Pad: " + b"p" * 2_500 + b"\r\n\r\n", 7),
        (b"HTTP/1.1 103 Early Hints\r\n\r\n", 9),
    ],
    ids=["heads-too-big-together", "too-many"],
)
async def test_interim_heads_are_bounded_together(
    pki: Pki, serve: Serve, interim: bytes, count: int
) -> None:
    """The lean path caps the bytes of every head of an answer together and the number of
    interim answers: a server cannot keep a check reading heads until its deadline. (httpx,
    behind a proxy, takes any number of interim answers until the check's deadline.)"""

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(interim * count + response("200 OK", VERSION))

    server, seen = await serve(handler)
    finding = await checked(pki, server)
    assert finding.message == f"{server.removeprefix('https://')} {NO_ANSWER}"
    with trio.fail_after(5):
        await seen.all_closed.wait()


READS, ANSWER_BYTES, EVENTS = 64, 64 * 1024, 256
"""An answer's bounds, as docs/operations.md gives them: reads of the socket, bytes on the wire,
parser events."""


@attrs.define
class Wire:
    """What a check read, counted at the primitives both paths read with, whatever bounds the
    probe itself keeps: reads of the TLS socket (the lean path's ``SSLSocket.recv``, httpcore's
    ``TrioStream.read``), their bytes, and h11's events (both paths parse with h11)."""

    reads: int = 0
    received: int = 0
    events: int = 0


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    counted = Wire()
    recv, read, next_event = ssl.SSLSocket.recv, TrioStream.read, h11.Connection.next_event

    def counted_recv(sock: ssl.SSLSocket, size: int = 1024, flags: int = 0) -> bytes:
        data = recv(sock, size, flags)
        counted.reads += 1
        counted.received += len(data)
        return data

    async def counted_read(stream: TrioStream, size: int, timeout: float | None = None) -> bytes:
        data = await read(stream, size, timeout)
        counted.reads += 1
        counted.received += len(data)
        return data

    def counted_event(http: h11.Connection) -> Any:
        event = next_event(http)
        if event is not h11.NEED_DATA:
            counted.events += 1
        return event

    monkeypatch.setattr(ssl.SSLSocket, "recv", counted_recv)
    monkeypatch.setattr(TrioStream, "read", counted_read)
    monkeypatch.setattr(h11.Connection, "next_event", counted_event)
    return counted


def one_byte_chunks(peer_sends: int) -> bytes:
    """``peer_sends`` chunks of one byte each: a JSON object's first byte, then spaces."""
    return b"1\r\n{\r\n" + b"1\r\n \r\n" * (peer_sends - 1)


async def trickle(
    peer: Peer, head: bytes, pieces: Callable[[], Iterable[bytes]], pause: float = 0.0
) -> None:
    """Answer ``GET /version`` with ``head``, then each piece as a write of its own (a TLS record
    of its own: the client's socket reads one at a time)."""
    await peer.request()
    await peer.send(head)
    for piece in pieces():
        await peer.send(piece)
        if pause:
            await trio.sleep(pause)


def forever(piece: bytes) -> Callable[[], Iterable[bytes]]:
    return functools.partial(itertools.repeat, piece)


LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"


@pytest.mark.parametrize(
    ("handler", "how"),
    [
        (
            functools.partial(trickle, head=CHUNKED, pieces=forever(b"1\r\n \r\n")),
            "in more than 64 reads",
        ),
        (functools.partial(trickle, head=LENGTH, pieces=forever(b" ")), "in more than 64 reads"),
        (
            functools.partial(trickle, head=b"HTTP/1.1 200 OK\r\nX-Slow: ", pieces=forever(b"s")),
            "in more than 64 reads",
        ),
        (
            functools.partial(trickle, head=CHUNKED, pieces=lambda: [one_byte_chunks(50_000)]),
            "in more than 256 parts",
        ),
        (
            functools.partial(trickle, head=LENGTH, pieces=forever(b" "), pause=0.005),
            "in more than 64 reads",
        ),
    ],
    ids=[
        "1-byte-chunks",
        "1-byte-writes-of-a-length",
        "1-byte-writes-of-a-head",
        "1-byte-chunks-at-once",
        "endless-trickle",
    ],
)
async def test_an_answer_in_tiny_pieces_ends_the_check_within_its_bounds(
    pki: Pki, serve: Serve, path: str, wire: Wire, handler: Handler, how: str
) -> None:
    """A server that cuts its answer into pieces of a byte costs a read, a wake-up and a parse a
    byte: the answer's reads, bytes on the wire (framing included) and parser events are
    bounded, and the check ends at the first bound it reaches, long before its deadline, with
    the same Outcome on both paths."""
    server, seen = await serve(handler)
    finding = await check(connection(pki, server))
    assert canary.found(repr(finding)) == []
    assert finding.reason is Reason.SERVER_ERROR
    assert finding.message == f"GET /version answered {how}: {OVERLONG}"
    assert wire.reads <= READS
    assert wire.received <= ANSWER_BYTES
    assert wire.events <= EVENTS + 1
    with trio.fail_after(5):
        await seen.all_closed.wait()


async def test_a_review_in_tiny_pieces_ends_the_check_and_keeps_the_version(
    pki: Pki, serve: Serve, path: str, wire: Wire
) -> None:
    """Each answer has a budget of its own: the second question's is as bounded as the first's."""

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(response("200 OK", VERSION))
        await trickle(
            peer,
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n",
            forever(b"1\r\n \r\n"),
        )

    server, _ = await serve(handler)
    finding = await check(connection(pki, server))
    assert finding.reason is Reason.SERVER_ERROR
    assert finding.message == f"POST selfsubjectreviews answered in more than 64 reads: {OVERLONG}"
    assert finding.kubernetes_version == "v1.36.0-lean"
    assert wire.reads <= READS + 2  # the first answer's one or two, then the bound


async def test_an_answer_in_tiny_pieces_through_a_proxy_is_bounded_alike(
    pki: Pki, serve: Serve, wire: Wire
) -> None:
    """Behind a proxy-url the check reads through httpx, on the event loop, a wake-up a read:
    the proxy's answer and the server's are read within the same budget."""
    server, _ = await serve(functools.partial(trickle, head=CHUNKED, pieces=forever(b"1\r\n \r\n")))
    tunnels: list[str] = []

    async def proxy(stream: trio.SocketStream) -> None:
        await connect_proxy(stream, tunnels, refuse=False)

    async with trio.open_nursery() as nursery:
        port = await tcp_server(nursery, proxy)
        behind = attrs.evolve(
            connection(pki, server), proxy_url=canary.proxy_url(f"127.0.0.1:{port}")
        )
        finding = await check(behind)
        nursery.cancel_scope.cancel()
    assert tunnels == [f"CONNECT {server.removeprefix('https://')}"]
    assert canary.found(repr(finding)) == []
    assert finding.message == f"GET /version answered in more than 64 reads: {OVERLONG}"
    assert wire.reads <= READS


# --- the lean path itself --------------------------------------------------------------------


async def test_the_lean_path_needs_no_httpx_client(
    pki: Pki, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the check went through httpx")

    monkeypatch.setattr(httpx, "AsyncClient", refuse)
    server, _ = await serve(kubernetes)
    assert await checked(pki, server) == ready(server)


async def test_a_cancelled_check_closes_its_socket_and_its_thread_ends(
    pki: Pki, serve: Serve
) -> None:
    """The caller's own cancellation, in the middle of a read: the worker thread is abandoned,
    but its socket is shut down at once, so the thread ends and closes it."""
    answered = trio.Event()

    async def handler(peer: Peer) -> None:
        await peer.request()
        answered.set()  # and never answer: the server waits for the client to close

    threads = threading.active_count()
    server, seen = await serve(handler)
    with trio.move_on_after(0.5) as scope:
        await check(connection(pki, server), timeout=60)
    assert scope.cancelled_caught and answered.is_set()
    with trio.fail_after(5):
        await seen.all_closed.wait()
    for _ in range(100):
        if threading.active_count() <= threads + 1:  # Trio's thread cache may keep one idle
            break
        await trio.sleep(0.05)
    assert threading.active_count() <= threads + 1


async def test_a_check_ends_at_its_deadline_whatever_its_thread_does(
    pki: Pki, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker thread stuck past the deadline in something no socket timeout reaches: the
    check still ends at its deadline (and gives back its slot), and says it timed out."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(*args: object) -> Outcome:
        entered.set()
        release.wait(10)
        raise TimeoutError("released")

    monkeypatch.setattr(lean, "_lean_ask", stuck)
    server, _ = await serve(kubernetes)
    started = time.monotonic()
    finding = await check(connection(pki, server), timeout=1.0)
    elapsed = time.monotonic() - started
    release.set()
    assert entered.is_set()
    assert finding.message.startswith("timed out after 1 s: 127.0.0.1:")
    assert 1.0 <= elapsed < 3.0


async def test_hanging_checks_use_a_bounded_number_of_threads(pki: Pki, serve: Serve) -> None:
    async def handler(peer: Peer) -> None:
        await trio.sleep_forever()

    server, _ = await serve(handler)
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, threading.active_count())
            await trio.sleep(0.01)

    before = threading.active_count()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        async with trio.open_nursery() as checks:
            for _ in range(40):
                checks.start_soon(functools.partial(check, connection(pki, server), timeout=1.0))
        nursery.cancel_scope.cancel()
    assert most - before <= lean._THREAD_LIMIT


# --- the same Outcome on both paths, for what fails before HTTP -------------------------------


async def tcp_server(
    nursery: trio.Nursery, handler: Callable[[trio.SocketStream], Awaitable[None]]
) -> int:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def test_tls_verification_failures_read_the_same(pki: Pki, serve: Serve) -> None:
    server, _ = await serve(kubernetes)
    foreign = CertificateAuthority.create("kokumi-lean-foreign").pem
    wrong_ca = await both(attrs.evolve(connection(pki, server), certificate_authority=foreign))
    assert wrong_ca.reason is Reason.TLS_ERROR
    assert "not signed by the configured CA" in wrong_ca.message
    wrong_name = await both(attrs.evolve(connection(pki, server), tls_server_name="other.test"))
    assert "not valid for the TLS server name other.test" in wrong_name.message
    no_ca = await both(attrs.evolve(connection(pki, server), certificate_authority=None))
    assert "no CA is configured" in no_ca.message
    skipped = await both(
        attrs.evolve(
            connection(pki, server), certificate_authority=None, insecure_skip_tls_verify=True
        )
    )
    assert skipped.ok


async def test_a_name_that_resolves_to_several_addresses_tries_each(
    pki: Pki, serve: Serve, path: str
) -> None:
    """The first address refuses (nothing listens on 127.0.0.2 there), the second answers."""
    server, _ = await serve(kubernetes)
    port = int(server.rsplit(":", 1)[1])
    trio.socket.set_custom_hostname_resolver(Resolver(["127.0.0.2", "127.0.0.1"]))
    finding = await check(connection(pki, f"https://spoke.test:{port}"), timeout=5)
    assert finding.ok, finding


class Resolver(trio.abc.HostnameResolver):
    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, *args: object, **kwargs: object
    ) -> list[tuple[Any, ...]]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 443)))
            for address in self.addresses
        ]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise NotImplementedError


@pytest.mark.parametrize(
    ("how", "reason", "says"),
    [
        ("plain-http", Reason.TLS_ERROR, "does not speak TLS"),
        ("closed", Reason.TLS_ERROR, "failed (unexpected eof while reading)"),
        ("reset", Reason.UNREACHABLE, "connection reset by peer"),
    ],
)
async def test_failures_before_tls_read_the_same(
    pki: Pki, how: str, reason: Reason, says: str
) -> None:
    """Each server reads the ClientHello first, so what the client sees is not a race."""

    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        if how == "plain-http":
            await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        elif how == "reset":
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        port = await tcp_server(nursery, handler)
        finding = await both(connection(pki, f"https://127.0.0.1:{port}"))
        nursery.cancel_scope.cancel()
    assert finding.reason is reason
    assert says in finding.message


async def test_a_handshake_that_never_ends_ends_at_the_deadline_with_its_thread(
    pki: Pki,
) -> None:
    """A server that takes the connection and reads the ClientHello but never answers: the
    thread waits in the handshake on a socket with no timeout of its own, and the deadline's
    shutdown must wake it, so that the check ends on time and the thread and socket with it."""
    closed = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        while await stream.receive_some(65536):
            pass  # until the client goes
        closed.set()

    threads = threading.active_count()
    async with trio.open_nursery() as nursery:
        port = await tcp_server(nursery, handler)
        started = time.monotonic()
        finding = await check(connection(pki, f"https://127.0.0.1:{port}"), timeout=1.0)
        elapsed = time.monotonic() - started
        with trio.fail_after(5):
            await closed.wait()
        nursery.cancel_scope.cancel()
    assert finding.message.startswith(f"timed out after 1 s: 127.0.0.1:{port}")
    assert 1.0 <= elapsed < 3.0
    for _ in range(100):
        if threading.active_count() <= threads + 1:  # Trio's thread cache may keep one idle
            break
        await trio.sleep(0.05)
    assert threading.active_count() <= threads + 1


async def test_a_refused_port_reads_the_same(pki: Pki) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    finding = await both(connection(pki, f"https://127.0.0.1:{port}"))
    assert finding.message.startswith(f"connection refused by 127.0.0.1:{port}")


# --- what a check does on the event loop -------------------------------------------------------


@given(st.ip_addresses(), st.integers(1, 65535))
def test_an_address_connects_where_getaddrinfo_says_a_numeric_host_does(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
) -> None:
    host = str(address)
    literal = parse_address(host)
    assert literal is not None
    infos = socket.getaddrinfo(
        str(literal), port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
    )
    assert lean._numeric_targets(host, port) == tuple(
        dict.fromkeys((info[0], info[4]) for info in infos)
    )


@pytest.mark.parametrize("host", ["0x0a141e28", "10.20.7720", "[::ffff:10.20.30.40]"])
def test_every_spelling_of_an_address_connects_to_it(host: str) -> None:
    assert lean._numeric_targets(host, 6443) == ((socket.AF_INET, ("10.20.30.40", 6443)),)


def test_a_name_is_left_to_the_resolver() -> None:
    assert lean._numeric_targets("spoke.example", 6443) is None


# The edges of "visible ASCII" and their neighbours, often enough to meet: a space, DEL, tab, NUL,
# the first and last visible characters, and beyond ASCII.
_EDGES = st.sampled_from([" ", "!", "~", "\x7f", "\t", "\x00", "\x80", "é", "a", "Z", "0", "-"])


@given(st.text(_EDGES) | st.text(st.characters(max_codepoint=0x7F)) | st.text())
def test_a_token_is_header_safe_exactly_when_each_character_is_visible_ascii(token: str) -> None:
    assert checks._header_safe(token) == all("!" <= char <= "~" for char in token)
