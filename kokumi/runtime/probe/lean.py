"""The lean path: a check's HTTP/1.1 requests on a blocking socket, in a worker thread.

Without a proxy (nearly every check) this is how the probe asks: Python's ``ssl`` and a plain
socket, the answers read by h11 as they arrive, so that a check costs about what its handshake
costs, half of what it costs through httpx's async client. The host is resolved on Trio and every
address judged by the egress policy before the thread connects to it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import h11
import httpx
import outcome
import trio

from kokumi.core.cluster import diagnosis
from kokumi.core.cluster.egress import EgressPolicy, judge, parse_address
from kokumi.core.cluster.schedule import CHECK_SLOTS
from kokumi.core.cluster.status import Outcome
from kokumi.core.reasons import Reason
from kokumi.runtime.probe.questions import (
    ACCESS_REVIEW,
    ACCESS_REVIEW_PATH,
    CLUSTER_WIDE,
    MAX_ANSWER,
    MAX_HEAD,
    REVIEW,
    REVIEW_PATH,
    Budget,
    Outcomes,
    Overlong,
    Question,
    Refused,
    phrase,
)

_MAX_INTERIM = 8
"""1xx answers skipped before the real one; a server that sends more is not answering."""

_THREADS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("kokumi_probe_threads")
_THREAD_LIMIT = 2 * CHECK_SLOTS
"""Worker threads of lean checks at once: the eight check slots, and as many again for the
manager's own check and checks abandoned at their deadline (each ends at once: its socket is shut
down). A limiter of their own, so that checks never wait for other users of Trio's threads."""

_REVIEW_BODY = json.dumps(REVIEW, separators=(",", ":")).encode()
_ACCESS_REVIEW_BODY = json.dumps(ACCESS_REVIEW, separators=(",", ":")).encode()
_CLUSTER_WIDE_BODY = json.dumps(CLUSTER_WIDE, separators=(",", ":")).encode()


def _threads() -> trio.CapacityLimiter:
    """The lean checks' limiter, one per Trio run (a limiter belongs to the run that made it)."""
    try:
        return _THREADS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(_THREAD_LIMIT)
        _THREADS.set(limiter)
        return limiter


_T = TypeVar("_T")

_GATHER = 0.005
"""Seconds a check's answer waits in its thread for the answers of the checks begun with it
(:class:`_Handback`)."""

_HANDBACKS: trio.lowlevel.RunVar[_Handback] = trio.lowlevel.RunVar("kokumi_probe_handback")


class _Job:
    """One check in a worker thread: who waits for its answer, and whether anyone still does."""

    __slots__ = ("abandoned", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.abandoned = False


class _Handback:
    """The worker threads' answers, handed back to the event loop a few at a time.

    ``trio.to_thread.run_sync`` hands each answer back on its own: a wake-up of the loop per
    check, which at 166 checks a second costs more of the loop's CPU than the answer's own
    handling (a pass of the run loop over cold caches). The checks that the actors' timers
    start together (:mod:`kokumi.actors.alarms` rings them a tick at a time) end within a few
    milliseconds of each other, so the first answer waits :data:`_GATHER` in its thread for the
    others, and one wake-up takes them all. A check's answer comes that much later; its time
    and its budget are counted in the thread, as before. The wait is part of the thread's work,
    not of its delivery: Trio's thread cache counts a thread as free while it delivers, and a
    next check handed to it would wait behind the sleep.
    """

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._lock = threading.Lock()
        self._answers: list[tuple[_Job, outcome.Outcome[Any]]] = []
        self._limiter = _threads()

    def work(self, job: _Job, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """In the worker thread: ``fn(*args)``, then its answer handed back with the others'."""
        answer = outcome.capture(fn, *args)
        with self._lock:
            self._answers.append((job, answer))
            first = len(self._answers) == 1
        if not first:
            return  # the first of the batch hands it back
        time.sleep(_GATHER)
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._hand_back)

    def _hand_back(self) -> None:
        with self._lock:
            answers, self._answers = self._answers, []
        for job, answer in answers:
            self._limiter.release_on_behalf_of(job)
            if not job.abandoned:
                trio.lowlevel.reschedule(job.task, answer)


def _handback() -> _Handback:
    try:
        return _HANDBACKS.get()
    except LookupError:
        handback = _Handback()
        _HANDBACKS.set(handback)
        return handback


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a worker thread, as ``trio.to_thread.run_sync(abandon_on_cancel=True)``
    runs it (a cancel abandons the thread, which must end on its own: the caller shuts its
    socket down), but its answer handed back with others (:class:`_Handback`)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    job = _Job(trio.lowlevel.current_task())
    handback = _handback()
    await _threads().acquire_on_behalf_of(job)
    try:
        trio.lowlevel.start_thread_soon(
            functools.partial(handback.work, job, fn, args), outcome.Outcome.unwrap
        )
    except BaseException:
        _threads().release_on_behalf_of(job)
        raise

    def abandon(_: Any) -> trio.lowlevel.Abort:
        job.abandoned = True
        return trio.lowlevel.Abort.SUCCEEDED

    answer: _T = await trio.lowlevel.wait_task_rescheduled(abandon)
    return answer


async def lean_check(
    question: Question,
    outcomes: Outcomes,
    context: ssl.SSLContext,
    base: httpx.URL,
    tls_server_name: str | None,
    egress: EgressPolicy | None,
    started: float,
) -> Outcome:
    """The check as :func:`ask` asks it, without httpx: what a check costs is then mostly the
    handshake's cryptography.

    Here, on Trio: a host name is resolved and every address it resolves to judged by
    ``egress`` (as the guard does for httpx; an address the URL spells was judged with the URL,
    by the same policy, before this is called), and one socket per address is made through
    Trio's socket factory. The
    worker thread then connects to the judged addresses only (never resolving again: no DNS
    rebinding), handshakes, asks and closes: the connect bounded by what is left of the check's
    budget, the rest on a blocking socket (see :class:`_Wire`). If the check's deadline fires
    first, the thread is abandoned and its
    socket shut down, which wakes it at once; the thread closes the socket as it leaves.

    Public for :mod:`~kokumi.runtime.probe.checks`, which chooses the path of each check.
    """
    host = base.raw_host.decode("ascii")  # IDNA-encoded, as httpcore resolves and names it
    port = base.port or (443 if base.scheme == "https" else 80)
    numeric = _numeric_targets(host, port)
    if numeric is not None:
        targets = numeric
    else:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        targets = tuple(dict.fromkeys((info[0], info[4]) for info in infos))
    if egress is not None and numeric is None:
        # Each address a name resolves to (an address the URL spells was judged with the URL).
        for _, sockaddr in targets:
            verdict = judge(egress, host, address=str(sockaddr[0]))
            if verdict is not None:
                raise Refused(verdict)
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
        return await _in_thread(_lean_ask, wire, question, outcomes)
    except BaseException:
        line.abandon()
        raise


def _numeric_targets(host: str, port: int) -> tuple[tuple[int, Any], ...] | None:
    """Where ``host`` connects (family, socket address) if it spells an address, as
    ``getaddrinfo`` answers for a numeric host; None for a name, which is resolved.

    Made here rather than asked of ``getaddrinfo``: the call, on the event loop at every check,
    let the check threads take the GIL each time, for an answer known in advance.
    """
    literal = parse_address(host)
    if literal is None:
        return None
    if literal.version == 4:
        return ((socket.AF_INET, (str(literal), port)),)
    return ((socket.AF_INET6, (str(literal), port, 0, 0)),)


def _request_head(question: Question, base: httpx.URL) -> tuple[bytes, list[tuple[bytes, bytes]]]:
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
    answer here is read within its :class:`Budget` of bytes, reads and parser events, whatever
    the server sends and however it cuts it up.

    Once connected the socket blocks, with no timeout of its own: a socket with a timeout
    polls before every read and write and takes the GIL back twice, 5-11 % of a check's CPU
    (``benchmarks/README.md``). The deadline is Trio's: it shuts the socket down, which wakes
    the thread at once, and between reads and writes :meth:`time_left` ends a check whose
    budget is spent. The connect keeps its timeout (a shutdown does not wake a connect).
    """

    line: _Line
    context: ssl.SSLContext | None
    server_hostname: str
    head: tuple[bytes, list[tuple[bytes, bytes]]]
    deadline: float
    redial: tuple[int, Any] | None = None
    sock: socket.socket | None = None
    http: h11.Connection | None = None
    budget: Budget = attrs.Factory(Budget)

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
        sock.settimeout(None)  # from here on, Trio's shutdown at the deadline wakes it
        if self.context is not None:
            tls = self.context.wrap_socket(
                sock, server_hostname=self.server_hostname, do_handshake_on_connect=False
            )
            self.line.adopt(tls)
            self.time_left()
            tls.do_handshake()
            sock = tls
        return sock

    def send(self, method: bytes, path: bytes, body: bytes | None) -> tuple[int, bytes]:
        """Status and body, on this check's connection (a new one when the last answer did not
        leave it usable); :class:`Overlong` when the answer is over its budget."""
        if self.sock is None or self.http is None:
            self.sock = self.connect()
            self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_ANSWER)
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
        self.time_left()
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
        budget = self.budget
        budget.start()
        interim = 0
        status: int | None = None
        content = bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                http.receive_data(self.receive())
                continue
            budget.event()
            if isinstance(event, h11.InformationalResponse):
                interim += 1
                if interim > _MAX_INTERIM:
                    raise diagnosis.NoHTTPAnswer()
            elif isinstance(event, h11.Response):
                if budget.received - len(http.trailing_data[0]) > MAX_HEAD:
                    raise diagnosis.NoHTTPAnswer()
                status = event.status_code
                budget.head = False
            elif isinstance(event, h11.Data):
                content += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert status is not None
                reusable = http.our_state is h11.DONE and http.their_state is h11.DONE
                if reusable:
                    http.start_next_cycle()
                return status, bytes(content), reusable
            else:  # closed, or paused by a protocol switch: no answer either way
                raise diagnosis.NoHTTPAnswer()

    def receive(self) -> bytes:
        """The next bytes the server sent, as many as the answer's budget has room for; empty
        at the end of the stream."""
        assert self.sock is not None
        self.time_left()
        data = self.sock.recv(self.budget.room(65536))
        self.budget.took(len(data))
        return data


def _lean_ask(wire: _Wire, question: Question, outcomes: Outcomes) -> Outcome:
    """:func:`ask`, in the worker thread, on :class:`_Wire`; every socket closed at the end."""
    said = {"has_credential": question.has_credential, "own": outcomes.own}
    what = "GET /version"
    try:
        status, body = wire.send(b"GET", b"/version", None)
        version = diagnosis.version_answer(status, phrase(status), body, **said)
        if isinstance(version, tuple):
            return outcomes.of(version)
        outcomes.version = version

        what = "POST selfsubjectreviews"
        status, body = wire.send(b"POST", REVIEW_PATH.encode(), _REVIEW_BODY)
        if status == 404:  # before Kubernetes 1.28
            what = "POST selfsubjectaccessreviews"
            status, body = wire.send(b"POST", ACCESS_REVIEW_PATH.encode(), _ACCESS_REVIEW_BODY)
        verdict = diagnosis.review_answer(status, phrase(status), body, **said)
        if verdict[0] is not Reason.READY or not question.cluster_wide:
            return outcomes.of(verdict)

        what = "POST selfsubjectaccessreviews"
        status, body = wire.send(b"POST", ACCESS_REVIEW_PATH.encode(), _CLUSTER_WIDE_BODY)
        return outcomes.of(
            diagnosis.cluster_wide_answer(status, phrase(status), body, ready=verdict, **said)
        )
    except Overlong as overlong:
        return outcomes.of(overlong.verdict(what))
    finally:
        wire.line.close()
