"""``/healthz``, ``/readyz`` and ``/metrics`` on one port, served by h11 on ``trio.serve_tcp``.

Why not an ASGI server such as hypercorn's Trio worker: three GET endpoints for the kubelet and
Prometheus need no routing, streaming, HTTP/2 or lifespan protocol, and h11 is already installed
as httpx's (httpcore's) HTTP/1.1 engine, so the whole server is this page with no new
dependency. It runs in the manager's own Trio loop, which is the point of ``/healthz``: an answer
proves the loop is turning. Each connection gets one request and is closed, under a deadline,
so a slow or silent client cannot hold anything: its request head must arrive within
:data:`HEAD_TIMEOUT`, the whole exchange within :data:`CONNECTION_TIMEOUT`. At most
:data:`MAX_CONNECTIONS` are served at once, and no more are accepted meanwhile (the rest wait in the
kernel's backlog): a flood of connections that never finish their headers cannot take the file
descriptors the checks and watches need.

``/metrics`` is rendered by ``prometheus_client`` from the manager's own figures (the format is
the library's, text or OpenMetrics as the scraper's ``Accept`` asks). The figures are taken on the
loop, a few milliseconds, and rendered in a worker thread, one scrape at a time: at 10,000
Clusters rendering takes 300 to 600 ms, which on the loop was the longest step of the manager's
steady state (checks in flight time out falsely while the loop stands still).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
from collections.abc import Callable

import h11
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

__all__ = ["serve"]

log = logging.getLogger(__name__)

#: Seconds a client has to send its request and read the answer.
CONNECTION_TIMEOUT = 10.0
#: Seconds a client has to send its request's head (the kubelet and Prometheus take milliseconds).
HEAD_TIMEOUT = 2.0
#: Connections served at once; the kubelet and a scraper or two need a handful.
MAX_CONNECTIONS = 32
MAX_REQUEST_BYTES = 16 * 1024

Readiness = Callable[[], tuple[bool, str]]
#: The figures to serve, taken at the moment of the scrape: :meth:`Metrics.exposition`, say.
Exposition = Callable[[], CollectorRegistry]


async def serve(
    port: int,
    exposition: Exposition,
    readiness: Readiness,
    host: str | None = None,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``nursery.start`` hands back the port bound (``port=0``: any)."""
    rendering = trio.CapacityLimiter(1)  # a client that scrapes in a loop gets no more threads
    slots = trio.Semaphore(MAX_CONNECTIONS)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(CONNECTION_TIMEOUT):
                # A client that went away or spoke nonsense gets no answer.
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError
                ):
                    await _one_request(stream, exposition, readiness, rendering)
        finally:
            # Closed whatever happens, cancellation included, as trio.serve_listeners does.
            await trio.aclose_forcefully(stream)
            slots.release()

    async def accept(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                await slots.acquire()  # no slot: the connection waits in the kernel, not here
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    # Out of descriptors or a connection reset before it was accepted: the
                    # listener stays, as trio.serve_listeners keeps it.
                    slots.release()
                    log.debug("health: accept failed: %s", exc)
                    await trio.sleep(0.1)
                    continue
                except BaseException:
                    slots.release()
                    raise
                nursery.start_soon(handle, stream)

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(port, host=host)
        for listener in listeners:
            nursery.start_soon(accept, listener, nursery)
        bound = listeners[0].socket.getsockname()[1]
        log.info("health and metrics on port %d: /healthz /readyz /metrics", bound)
        task_status.started(bound)


async def _one_request(
    stream: trio.SocketStream,
    exposition: Exposition,
    readiness: Readiness,
    rendering: trio.CapacityLimiter,
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
    request: h11.Request | None = None
    head_by = trio.current_time() + HEAD_TIMEOUT
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if request is None:
                with trio.move_on_at(head_by):
                    data = await stream.receive_some(MAX_REQUEST_BYTES)
                    conn.receive_data(data)
                    continue
                return  # no request head in time: the slot goes to somebody else
            data = await stream.receive_some(MAX_REQUEST_BYTES)
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = event
            continue
        if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if request is None:
        return
    status, content_type, body, zipped = await _answer(request, exposition, readiness, rendering)
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    if zipped:
        headers.append(("Content-Encoding", "gzip"))
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
    if request.method != b"HEAD":
        await stream.send_all(conn.send(h11.Data(data=body)))
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def _answer(
    request: h11.Request,
    exposition: Exposition,
    readiness: Readiness,
    rendering: trio.CapacityLimiter,
) -> tuple[int, str, bytes, bool]:
    """Status, content type, body, and whether the body is gzipped."""
    text = "text/plain; charset=utf-8"
    if request.method not in (b"GET", b"HEAD"):
        return 405, text, b"only GET and HEAD\n", False
    path = request.target.split(b"?", 1)[0]
    if path == b"/healthz":
        return 200, text, b"ok\n", False
    if path == b"/readyz":
        ready, why = readiness()
        return (200 if ready else 503), text, f"{why}\n".encode(), False
    if path == b"/metrics":
        said = {name: value.decode("latin-1") for name, value in request.headers}
        encoder, content_type = choose_encoder(said.get(b"accept", ""))
        # Prometheus asks for gzip: at 10,000 Clusters the page is 5 MB, gzipped 0.2 MB.
        zipped = gzip_accepted(said.get(b"accept-encoding", ""))

        def render(registry: CollectorRegistry) -> bytes:
            page = encoder(registry)
            return gzip.compress(page, compresslevel=6) if zipped else page

        # A scrape given up (the client gone, the deadline passed) leaves its thread to finish
        # alone; the limiter stays held until it does.
        body = await trio.to_thread.run_sync(
            render, exposition(), abandon_on_cancel=True, limiter=rendering
        )
        return 200, content_type, body, zipped
    return 404, text, b"not found: try /healthz, /readyz or /metrics\n", False
