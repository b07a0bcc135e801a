"""One check of one cluster connection: can Kokumi reach it, and does it accept the credential?

The check is all I/O and no policy: it asks the API server two questions and hands what it finds
to :mod:`kokumi.core.diagnosis`, a pure module that decides which Reason a failure or an answer
is and what its one-line message says; the :class:`Outcome` carries them into the Cluster's Ready
condition. When to check, how often and what to do with the answer is the Cluster actor's.

Two requests, over one connection:

1. ``GET /version`` proves the server is a Kubernetes API server and says what it runs. It is
   often readable anonymously, so it proves nothing about the credential.
2. ``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` proves the credential: every
   authenticated user may create one (the built-in ``system:basic-user`` role), it changes nothing,
   and it says who the server thinks we are. Servers older than Kubernetes 1.28 lack it, so a 404
   falls back to a ``SelfSubjectAccessReview``, which every version since 1.6 has.

A 401 from either means the credential is refused (``Unauthorized``), and so does a review that
says we are ``system:anonymous``. A 403 on the review means the credential authenticates but its
user may not do even what every user may: somebody removed ``system:basic-user`` or bound the user
nothing at all. Such a credential cannot deploy anything, so it is not Ready: the reason is
``Forbidden``, and the message says to bind the user a role.

Nothing here raises for a network, TLS or HTTP problem: everything becomes an Outcome.
Credentials never enter an Outcome, a log line or an exception text; messages name hosts, ports
and reasons only.

Two ways to ask, one answer. Without a proxy (nearly every check) the two requests go on a
blocking socket with Python's ``ssl`` in a worker thread (:func:`_lean_check`), their answers read
by h11 as they arrive (linear time, bounded bytes: the thread holds the GIL while it parses, so a
slow parse of a hostile answer would stall every other check): a check then costs about what its
handshake costs, half of what it cost through httpx's async client. Behind a
``proxy-url`` the check goes through httpx, which speaks CONNECT and SOCKS. Both paths hand the
same exceptions and answers to the same diagnosis, and tests/test_probe_lean.py holds them to
the same Outcome for every broken and hostile server it has.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import h11
import httpx
import trio

from kokumi.core import diagnosis
from kokumi.core.egress import EgressPolicy, judge, parse_address
from kokumi.core.kubeconfig import Connection
from kokumi.core.reasons import Reason
from kokumi.core.schedule import CHECK_SLOTS, CHECK_TIMEOUT
from kokumi.core.status import Outcome
from kokumi.kube import backend
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import ConfigError
from kokumi.kube.tls import ssl_context

__all__ = ["check", "check_client", "check_config"]

log = logging.getLogger(__name__)

_MAX_BODY = 1 << 20
"""Answers to our two questions are a few hundred bytes; a server that sends more is cut off."""

_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_ACCESS_REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}},
}


async def check(
    connection: Connection,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
    egress: EgressPolicy | None = None,
) -> Outcome:
    """Check ``connection`` within ``timeout`` seconds, all included: DNS, TLS, both requests.

    The budget is a parameter, not the caller's cancel scope, because it is part of the answer:
    running out of it is an Outcome ("timed out after 10 s"), never a cancellation.

    The TLS settings are honoured as kubectl and Argo CD honour them: the CA (else the system's
    CAs), ``tls-server-name`` for SNI and verification, ``insecure-skip-tls-verify``, the client
    certificate and key, and ``proxy-url``. Nothing comes from the environment (no
    ``HTTPS_PROXY``, no ``.netrc``): the kubeconfig is the whole truth, as for the manager's own
    connection. Behind an HTTP(S) proxy the TLS server name is not sent, because httpx's tunnel
    always uses the URL's host; SOCKS proxies need httpx's ``socks`` extra.

    ``egress`` (default: :class:`EgressPolicy`'s, which refuses link-local and metadata addresses)
    is applied where the probe connects: to the server's literal address before anything else,
    and to every address a host name resolves to, before a socket is opened to it. A proxy's own
    address is judged the same way; a host name behind a proxy is resolved by the proxy, out of
    the probe's sight, which is what the example NetworkPolicy in deploy/optional is for.
    """
    return await _check(
        _Outcomes(connection.server, timeout, own=False),
        egress=egress or _DEFAULT_EGRESS,
        token=connection.token,
        client_certificate=connection.client_certificate,
        client_key=connection.client_key,
        certificate_authority=connection.certificate_authority,
        tls_server_name=connection.tls_server_name,
        insecure_skip_tls_verify=connection.insecure_skip_tls_verify,
        proxy_url=connection.proxy_url,
    )


async def check_client(
    client: Client,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
) -> Outcome:
    """Check the cluster the manager runs in, through the connection ``client`` is configured with.

    Shorthand for :func:`check_config` with ``client.config``.
    """
    return await check_config(client.config, timeout=timeout)


async def check_config(
    config: Config,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
) -> Outcome:
    """Check the manager's own connection (the cluster Kokumi runs in) as :func:`check` does.

    Same two questions and reasons, so an InCluster Cluster reads like any other; the messages
    point at the manager's credential instead of a kubeconfig Secret. Pass ``client.config`` of
    the shared :class:`kokumi.kube.Client`. The check opens a connection of its own rather than
    borrowing the client's pool: it must prove that a new connection works, not that an old one
    still does. A rotating token that the server refuses is re-read once, as the client does.
    """
    outcomes = _Outcomes(config.server, timeout, own=True)
    with trio.move_on_after(timeout):
        provider = config.token
        try:
            token = await provider.token() if provider is not None else None
        except ConfigError as exc:
            return outcomes.of(diagnosis.unreadable_token(str(exc)))
        while True:
            outcome = await _check(
                outcomes,
                token=token,
                client_certificate=config.client_certificate,
                client_key=config.client_key,
                certificate_authority=config.certificate_authority,
                tls_server_name=config.tls_server_name,
                insecure_skip_tls_verify=config.insecure_skip_tls_verify,
                proxy_url=config.proxy_url,
            )
            if not diagnosis.credential_refused(outcome.reason) or provider is None:
                return outcome
            token = await provider.refresh()
            if token is None:
                return outcome
            provider = None  # one re-read, as the client does
    return outcomes.timed_out()


async def _check(
    outcomes: _Outcomes,
    *,
    token: str | None,
    client_certificate: bytes | None,
    client_key: bytes | None,
    certificate_authority: bytes | None,
    tls_server_name: str | None,
    insecure_skip_tls_verify: bool,
    proxy_url: str | None,
    egress: EgressPolicy | None = None,
) -> Outcome:
    outcomes.version = None
    if egress is not None:
        # A literal address, in any spelling the resolver reads, is judged before anything
        # else, the server's and the proxy's: no proxy, DNS or socket sees it (and Argo CD
        # is never lent it either: the registry asks the same question).
        literal = judge(egress, outcomes.server, proxy_url)
        if literal is not None:
            return outcomes.of(literal)
    try:
        base = httpx.URL(outcomes.server.rstrip("/"))
    except httpx.InvalidURL:
        return outcomes.of(diagnosis.invalid_url())
    if base.scheme not in ("https", "http") or not base.host:
        return outcomes.of(diagnosis.not_http_url())
    try:
        context = _contexts.get(
            certificate_authority, client_certificate, client_key, insecure_skip_tls_verify
        )
    except ConfigError as exc:
        return outcomes.of(diagnosis.invalid_tls_material(str(exc), own=outcomes.own))
    if token and not all("!" <= char <= "~" for char in token):
        # httpx would raise, quoting the offending character.
        return outcomes.of(diagnosis.bad_token())
    headers = {"Accept": "application/json", "User-Agent": "kokumi-probe"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    extensions = {"sni_hostname": tls_server_name} if tls_server_name else {}
    question = _Question(
        base, headers, extensions, has_credential=bool(token) or bool(client_certificate)
    )
    started = trio.current_time()
    with trio.move_on_after(outcomes.timeout):
        if proxy_url is None and _LEAN:
            try:
                outcome = await _lean_check(
                    question, outcomes, context, base, tls_server_name, egress, started
                )
            except _Refused as refused:
                outcome = outcomes.of(refused.verdict)
            except (OSError, diagnosis.NoHTTPAnswer) as exc:
                outcome = _from_failure(
                    exc, outcomes, base, tls_server_name, proxy_url, certificate_authority
                )
            return _logged(outcome, outcomes, started)
        try:
            transport = httpx.AsyncHTTPTransport(
                verify=context, proxy=proxy_url or None, trust_env=False
            )
            client = httpx.AsyncClient(
                transport=transport,
                trust_env=False,  # no proxy, CA bundle or .netrc from the environment
                timeout=outcomes.timeout,
                follow_redirects=False,
            )
        except ImportError:
            return outcomes.of(diagnosis.no_socks_support())
        except ValueError:
            return outcomes.of(diagnosis.unknown_proxy_scheme())
        # Every address judged where the pool connects (the server's, or the proxy's), and every
        # socket closed at the end, even when the deadline fires mid-handshake or mid-read.
        sockets = backend.install(
            transport, admit=_admission(egress) if egress is not None else None, track=True
        )
        try:
            async with client:
                outcome = await _ask(client, question, outcomes)
        except _Refused as refused:
            outcome = outcomes.of(refused.verdict)
        except (httpx.HTTPError, OSError, trio.BrokenResourceError) as exc:
            outcome = _from_failure(
                exc, outcomes, base, tls_server_name, proxy_url, certificate_authority
            )
        finally:
            await sockets.close_all()
        return _logged(outcome, outcomes, started)
    return outcomes.timed_out()


class _ContextCache:
    """TLS client contexts by their material, least recently used first out.

    Building one costs about a millisecond of OpenSSL (more than the rest of a check's own code)
    and the material only changes with the kubeconfig Secret, so a steady fleet reuses them. The
    context only holds what to trust and what to present; every check still opens a new
    connection and handshakes anew, so it still proves the server and the credential. About
    18 KB each: the bound keeps a fleet of distinct CAs under about 75 MB.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._contexts: collections.OrderedDict[
            tuple[bytes | None, bytes | None, bytes | None, bool], ssl.SSLContext
        ] = collections.OrderedDict()

    def get(
        self,
        certificate_authority: bytes | None,
        client_certificate: bytes | None,
        client_key: bytes | None,
        insecure_skip_tls_verify: bool,
    ) -> ssl.SSLContext:
        key = (certificate_authority, client_certificate, client_key, insecure_skip_tls_verify)
        context = self._contexts.get(key)
        if context is not None:
            self._contexts.move_to_end(key)
            return context
        context = ssl_context(
            certificate_authority, client_certificate, client_key, insecure_skip_tls_verify
        )  # raises ConfigError: no entry
        self._contexts[key] = context
        if len(self._contexts) > self._size:
            self._contexts.popitem(last=False)
        return context


_contexts = _ContextCache(4096)


def _logged(outcome: Outcome, outcomes: _Outcomes, started: float) -> Outcome:
    """The outcome, logged at debug with the check's time, whichever path found it."""
    log.debug(
        "checked %s in %.0f ms: %s",
        outcomes.server,
        (trio.current_time() - started) * 1000,
        outcome.reason,
    )
    return outcome


@attrs.frozen
class _Question:
    base: httpx.URL
    headers: Mapping[str, str]
    extensions: Mapping[str, Any]
    has_credential: bool


@attrs.define
class _Outcomes:
    """Builds the Outcomes of one check; remembers the version once ``/version`` told it.

    ``own`` is true for the manager's own connection, whose credential is fixed elsewhere than
    in a kubeconfig Secret.
    """

    server: str
    timeout: float
    own: bool
    version: str | None = None

    def of(self, verdict: diagnosis.Verdict) -> Outcome:
        reason, message = verdict
        return Outcome(reason is Reason.READY, reason, message, self.server, self.version)

    def timed_out(self) -> Outcome:
        return self.of(diagnosis.timed_out(self.timeout, _host_port(httpx.URL(self.server))))


async def _ask(client: httpx.AsyncClient, question: _Question, outcomes: _Outcomes) -> Outcome:
    """Ask both questions; what each answer means is the diagnosis's."""
    said = {"has_credential": question.has_credential, "own": outcomes.own}
    status, body = await _send(client, "GET", "/version", question)
    version = diagnosis.version_answer(status, _phrase(status), body, **said)
    if isinstance(version, tuple):
        return outcomes.of(version)
    outcomes.version = version

    status, body = await _send(client, "POST", _REVIEW_PATH, question, _REVIEW)
    if status == 404:  # before Kubernetes 1.28
        status, body = await _send(client, "POST", _ACCESS_REVIEW_PATH, question, _ACCESS_REVIEW)
    return outcomes.of(diagnosis.review_answer(status, _phrase(status), body, **said))


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    question: _Question,
    body: Mapping[str, Any] | None = None,
) -> tuple[int, bytes]:
    """Status and (at most ``_MAX_BODY`` of the) body; the server URL's own path is kept."""
    url = question.base.copy_with(raw_path=question.base.raw_path.rstrip(b"/") + path.encode())
    request = client.build_request(
        method,
        url,
        headers=question.headers,
        json=body,
        extensions=dict(question.extensions),
    )
    response = await client.send(request, stream=True)
    try:
        content = b""
        async for chunk in response.aiter_bytes():
            content += chunk
            if len(content) > _MAX_BODY:
                break
        return response.status_code, content
    finally:
        await response.aclose()


def _from_failure(
    exc: BaseException,
    outcomes: _Outcomes,
    base: httpx.URL,
    tls_server_name: str | None,
    proxy_url: str | None,
    certificate_authority: bytes | None,
) -> Outcome:
    """Map a failed request to an Outcome: :mod:`kokumi.core.diagnosis` decides, from plain
    values."""
    proxy = httpx.URL(proxy_url) if proxy_url else None
    verdict = diagnosis.from_failure(
        [_marker(cause) for cause in diagnosis.chain(exc)],
        failed=type(exc).__name__,
        where=_host_port(base),
        host=base.host,
        proxy=_host_port(proxy) if proxy is not None else "",
        proxy_host=proxy.host if proxy is not None else "",
        tls_server_name=tls_server_name,
        certificate_authority=certificate_authority,
        timeout=outcomes.timeout,
    )
    return outcomes.of(verdict)


def _marker(cause: BaseException) -> BaseException:
    """httpx's and Trio's exceptions as the diagnosis knows them; the standard library's as is."""
    if isinstance(cause, httpx.ProxyError):
        return diagnosis.ProxyRefused(str(cause))
    if isinstance(cause, httpx.TimeoutException | trio.TooSlowError):
        return diagnosis.TimedOut()
    if isinstance(cause, httpx.RemoteProtocolError):
        return diagnosis.NoHTTPAnswer()
    return cause


def _host_port(url: httpx.URL) -> str:
    """``host:port`` only: a URL may carry user info, which must not reach a message."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{host}:{port}"


def _phrase(status: int) -> str:
    return httpx.codes.get_reason_phrase(status)


# --- the egress guard, where the probe resolves and connects -------------------------------------


class _Refused(Exception):
    """A connection the egress policy refuses, with its verdict; no credential, only where."""

    def __init__(self, verdict: diagnosis.Verdict) -> None:
        super().__init__(verdict[1])
        self.verdict = verdict


def _admission(egress: EgressPolicy) -> Callable[[str, str], None]:
    """The egress policy as the backend asks it, for each address a host resolves to."""

    def admit(host: str, address: str) -> None:
        verdict = judge(egress, host, address=address)
        if verdict is not None:
            raise _Refused(verdict)

    return admit


# --- the lean path: two HTTP/1.1 requests on a blocking socket, in a worker thread ---------------

# The policy of a check that names none: one instance, so that its answers are remembered.
_DEFAULT_EGRESS = EgressPolicy()
_LEAN = True
"""Checks without a proxy take the lean path; false sends every check through httpx (tests
compare the two)."""

_MAX_HEAD = 16 * 1024
"""An answer's heads, every interim answer's included, together: as much as h11 (under httpx)
allows one head. More is no answer."""

_MAX_INTERIM = 8
"""1xx answers skipped before the real one; a server that sends more is not answering."""

_THREADS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("kokumi_probe_threads")
_THREAD_LIMIT = 2 * CHECK_SLOTS
"""Worker threads of lean checks at once: the eight check slots, and as many again for the
manager's own check and checks abandoned at their deadline (each ends at once: its socket is shut
down). A limiter of their own, so that checks never wait for other users of Trio's threads."""

_REVIEW_BODY = json.dumps(_REVIEW, separators=(",", ":")).encode()
_ACCESS_REVIEW_BODY = json.dumps(_ACCESS_REVIEW, separators=(",", ":")).encode()


def _threads() -> trio.CapacityLimiter:
    """The lean checks' limiter, one per Trio run (a limiter belongs to the run that made it)."""
    try:
        return _THREADS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(_THREAD_LIMIT)
        _THREADS.set(limiter)
        return limiter


async def _lean_check(
    question: _Question,
    outcomes: _Outcomes,
    context: ssl.SSLContext,
    base: httpx.URL,
    tls_server_name: str | None,
    egress: EgressPolicy | None,
    started: float,
) -> Outcome:
    """The check as :func:`_ask` asks it, without httpx: what a check costs is then mostly the
    handshake's cryptography.

    Here, on Trio: the host is resolved and every address judged by ``egress`` (as the guard
    does for httpx), and one socket per address is made through Trio's socket factory. The
    worker thread then connects to the judged addresses only (never resolving again: no DNS
    rebinding), handshakes, asks and closes, with every socket operation's timeout what is left
    of the check's budget. If the check's deadline fires first, the thread is abandoned and its
    socket shut down, which wakes it at once; the thread closes the socket as it leaves.
    """
    host = base.raw_host.decode("ascii")  # IDNA-encoded, as httpcore resolves and names it
    port = base.port or (443 if base.scheme == "https" else 80)
    literal = parse_address(host)
    if literal is not None:
        infos = socket.getaddrinfo(
            str(literal), port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    else:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    targets = list(dict.fromkeys((info[0], info[4]) for info in infos))
    if egress is not None:
        for _, sockaddr in targets:
            verdict = judge(egress, host, address=str(sockaddr[0]))
            if verdict is not None:
                raise _Refused(verdict)
    line = _Line()
    failure: OSError | None = None
    try:
        for family, sockaddr in targets:
            try:
                made = trio.socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                failure = exc
                continue
            line.spare.append(
                (socket.socket(family, socket.SOCK_STREAM, fileno=made.detach()), sockaddr)
            )
        if not line.spare:
            assert failure is not None  # getaddrinfo answers at least one address, or raises
            raise failure
        wire = _Wire(
            line,
            context if base.scheme == "https" else None,
            tls_server_name or host,
            _request_head(question, base),
            time.monotonic() + started + outcomes.timeout - trio.current_time(),
        )
        return await trio.to_thread.run_sync(
            _lean_ask, wire, question, outcomes, abandon_on_cancel=True, limiter=_threads()
        )
    except BaseException:
        line.abandon()
        raise


def _request_head(question: _Question, base: httpx.URL) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """What comes before the request target, and the headers: the same headers httpx sends,
    but no ``Accept-Encoding`` (the answers are small; nothing to decompress)."""
    host = base.netloc.split(b"@")[-1]
    fields = [(b"Host", host)]
    fields += [
        (name.encode("ascii"), value.encode("ascii")) for name, value in question.headers.items()
    ]
    return base.raw_path.rstrip(b"/"), fields


class _Line:
    """The sockets of one lean check, shared by the worker thread and Trio under one lock.

    The thread owns the sockets and closes them; Trio, abandoning the thread at the deadline,
    only shuts the one in use down (closing a descriptor another thread waits on is not safe)
    and closes those the thread has not taken yet.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spare: list[tuple[socket.socket, Any]] = []
        self.current: socket.socket | None = None
        self.over = False

    def take(self) -> tuple[socket.socket, Any] | None:
        with self.lock:
            if self.over:
                raise TimeoutError("the check was abandoned")
            if not self.spare:
                return None
            sock, sockaddr = self.spare.pop(0)
            self.current = sock
            return sock, sockaddr

    def adopt(self, sock: socket.socket) -> None:
        """``sock`` is now the one in use (a TLS socket takes over its plain socket's descriptor,
        or a new socket for a second connection)."""
        with self.lock:
            if self.over:
                sock.close()
                raise TimeoutError("the check was abandoned")
            self.current = sock

    def drop(self) -> None:
        with self.lock:
            if self.current is not None:
                self.current.close()
                self.current = None

    def close(self) -> None:
        """The thread's last word: every socket closed, whatever happened."""
        with self.lock:
            self.over = True
            for sock, _ in self.spare:
                sock.close()
            self.spare.clear()
            if self.current is not None:
                self.current.close()
                self.current = None

    def abandon(self) -> None:
        """Trio's word at the deadline (or before the thread ran): wake the thread, close what
        it does not hold."""
        with self.lock:
            self.over = True
            for sock, _ in self.spare:
                sock.close()
            self.spare.clear()
            if self.current is not None:
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self.current, socket.SHUT_RDWR)


@attrs.define
class _Wire:
    """One lean check's connection: where to, how, and by when (``deadline``, on
    ``time.monotonic``).

    The answers are read by h11, the HTTP/1.1 parser under httpx, a server's bytes fed to it as
    they come: it works in time linear in what it is fed (a hand-written parser's regex once
    spent 0.9 s of CPU, with the GIL held, on one header line padded with spaces), and every
    check here reads a bounded amount, whatever the server sends.
    """

    line: _Line
    context: ssl.SSLContext | None
    server_hostname: str
    head: tuple[bytes, list[tuple[bytes, bytes]]]
    deadline: float
    redial: tuple[int, Any] | None = None
    sock: socket.socket | None = None
    http: h11.Connection | None = None

    def time_left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the check's budget is spent")
        return left

    def connect(self) -> socket.socket:
        """A connected (TLS) socket: the judged addresses in turn the first time, the one that
        answered after that."""
        if self.redial is not None:
            family, sockaddr = self.redial
            sock = socket.socket(family, socket.SOCK_STREAM)
            self.line.adopt(sock)
            targets = [(sock, sockaddr)]
        else:
            targets = []
        failure: OSError | None = None
        while True:
            taken = targets.pop() if targets else self.line.take()
            if taken is None:
                assert failure is not None
                raise failure
            sock, sockaddr = taken
            try:
                sock.settimeout(self.time_left())
                sock.connect(sockaddr)
            except OSError as exc:
                failure = exc
                self.line.drop()
                if self.redial is not None:
                    raise
                continue
            break
        self.redial = (sock.family, sockaddr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.context is not None:
            tls = self.context.wrap_socket(
                sock, server_hostname=self.server_hostname, do_handshake_on_connect=False
            )
            self.line.adopt(tls)
            tls.settimeout(self.time_left())
            tls.do_handshake()
            sock = tls
        return sock

    def send(self, method: bytes, path: bytes, body: bytes | None) -> tuple[int, bytes]:
        """Status and (at most ``_MAX_BODY`` of the) body, on this check's connection (a new one
        when the last answer did not leave it usable)."""
        if self.sock is None or self.http is None:
            self.sock = self.connect()
            self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        prefix, fields = self.head
        if body is not None:
            fields = [
                *fields,
                (b"Content-Type", b"application/json"),
                (b"Content-Length", b"%d" % len(body)),
            ]
        http = self.http
        request = http.send(h11.Request(method=method, target=prefix + path, headers=fields))
        if body is not None:
            request += http.send(h11.Data(data=body))
        request += http.send(h11.EndOfMessage())
        self.sock.settimeout(self.time_left())
        self.sock.sendall(request)
        try:
            status, content, reusable = self.answer(http)
        except h11.RemoteProtocolError as exc:
            raise diagnosis.NoHTTPAnswer() from exc
        if not reusable:
            self.line.drop()
            self.sock = self.http = None
        return status, content

    def answer(self, http: h11.Connection) -> tuple[int, bytes, bool]:
        """The answer to the request just sent: its status, body, and whether the connection
        may carry the next request."""
        fed = 0  # bytes received for this answer
        interim = 0
        status: int | None = None
        content = bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                if status is None and fed > _MAX_HEAD:
                    raise diagnosis.NoHTTPAnswer()  # all of it heads, and more than one may be
                data = self.receive()
                fed += len(data)
                http.receive_data(data)
            elif isinstance(event, h11.InformationalResponse):
                interim += 1
                if interim > _MAX_INTERIM:
                    raise diagnosis.NoHTTPAnswer()
            elif isinstance(event, h11.Response):
                if fed - len(http.trailing_data[0]) > _MAX_HEAD:
                    raise diagnosis.NoHTTPAnswer()
                status = event.status_code
            elif isinstance(event, h11.Data):
                content += event.data
                if len(content) > _MAX_BODY:
                    assert status is not None
                    return status, bytes(content[: _MAX_BODY + 1]), False
            elif isinstance(event, h11.EndOfMessage):
                assert status is not None
                reusable = http.our_state is h11.DONE and http.their_state is h11.DONE
                if reusable:
                    http.start_next_cycle()
                return status, bytes(content), reusable
            else:  # closed, or paused by a protocol switch: no answer either way
                raise diagnosis.NoHTTPAnswer()

    def receive(self) -> bytes:
        """The next bytes the server sent; empty at the end of the stream."""
        assert self.sock is not None
        self.sock.settimeout(self.time_left())
        return self.sock.recv(65536)


def _lean_ask(wire: _Wire, question: _Question, outcomes: _Outcomes) -> Outcome:
    """:func:`_ask`, in the worker thread, on :class:`_Wire`; every socket closed at the end."""
    try:
        said = {"has_credential": question.has_credential, "own": outcomes.own}
        status, body = wire.send(b"GET", b"/version", None)
        version = diagnosis.version_answer(status, _phrase(status), body, **said)
        if isinstance(version, tuple):
            return outcomes.of(version)
        outcomes.version = version

        status, body = wire.send(b"POST", _REVIEW_PATH.encode(), _REVIEW_BODY)
        if status == 404:  # before Kubernetes 1.28
            status, body = wire.send(b"POST", _ACCESS_REVIEW_PATH.encode(), _ACCESS_REVIEW_BODY)
        return outcomes.of(diagnosis.review_answer(status, _phrase(status), body, **said))
    finally:
        wire.line.close()
