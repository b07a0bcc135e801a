"""Live status: a watch on the hub, as the signed-in user, fed to the page as Server-Sent Events.

The list and a Cluster's page are whole without script (they reload every
:data:`~kokumi.ui.pages.REFRESH` seconds inside ``<noscript>``); with script, ``/static/live.js``
opens ``/clusters/live?c=NAMESPACE/NAME&...`` for the Clusters the page shows and writes each
change into their cells. The stream is a page of the session like any other (through
``signed_in``), so every request it makes acts as the user, under their RBAC.

What one open page costs the hub: one ``limit=1`` list per watched namespace to learn the
collection's resourceVersion (never the Clusters themselves: no synthetic ADDED for each of
10,000), then one watch per namespace shown (at most :data:`MAX_WATCHES`; more, and one watch
of every namespace). Each response of the stream lasts a few seconds (see :class:`LiveStream`),
so a watch is one request per watched namespace every few seconds, each resumed from the
version the last one read (the event id the browser sends back), listed again only when that
version is gone (410). The events sent carry only what a row shows (Ready, reason, message,
server, version), never a Secret, a token or a kubeconfig.

Where the stream cannot be kept it tells the script so, and the script falls back to the
reload: ``fallback`` (the user may not watch there, too many live pages, the hub failing) or
``reload`` (the session ended or the API server no longer accepts the user's token: the next
page load is the sign-in).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

import attrs
import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from kokumi.core import api, clusterview
from kokumi.kube.client import Client
from kokumi.kube.errors import Forbidden, Gone, KubeError, Unauthorized, error_from_status
from kokumi.kube.paths import resource_path
from kokumi.ui.security import Session
from kokumi.workspace import newcluster

__all__ = [
    "MAX_SHOWN",
    "MAX_WATCHES",
    "PER_PROCESS",
    "PER_SESSION",
    "PER_USER",
    "Streams",
    "event_of",
    "live_url",
    "parse_shown",
    "live_response",
    "resumed",
    "sse",
    "watch_scopes",
]

log = logging.getLogger("kokumi.ui")

MAX_SHOWN: Final = 2 * clusterview.PAGE_SIZE
"""Clusters one stream follows: a page of the list shows :data:`~clusterview.PAGE_SIZE`."""

MAX_WATCHES: Final = 3
"""Namespaces watched one by one for a page; a page showing more is served by one watch of
every namespace (a list sorted by namespace shows one or two on a page)."""

PER_SESSION: Final = 4
"""Live pages a session keeps open at once: a fifth closes the oldest, which is most likely a
tab navigated away from whose connection has not been noticed closing yet."""

PER_USER: Final = 8
"""Live pages one user keeps open at once, all their sessions together (sessions are free to
make: signing in again with the same token is one more): a ninth closes their oldest. So one
user holds at most an eighth of :data:`PER_PROCESS`, however many times they sign in."""

PER_PROCESS: Final = 64
"""Live pages the process serves at once, across users: beyond them a page reloads instead,
so that viewers cannot hold an unbounded number of watches open on the hub."""

WATCH_SECONDS: Final = 60
"""The API server's bound on one watch request, which the response it feeds ends well before."""

SESSION_CHECK: Final = 5.0
"""Seconds between checks that the stream's session is still signed in and unexpired."""

FAILURES: Final = 3
"""Failed watch requests in a row after which the page falls back to reloading."""


# --- the pure part: which Clusters, watched where, and what is sent --------------------------


def parse_shown(values: Sequence[str]) -> list[tuple[str, str]] | str:
    """The ``namespace/name`` pairs a page asks to follow, or why they are refused (one line)."""
    if not values:
        return "name the Clusters to follow, as ?c=NAMESPACE/NAME"
    if len(values) > MAX_SHOWN:
        return f"a live page follows at most {MAX_SHOWN} Clusters"
    shown: dict[tuple[str, str], None] = {}
    for value in values:
        namespace, slash, name = value.partition("/")
        try:
            if not slash:
                raise newcluster.Refused(f"{value!r} is not NAMESPACE/NAME")
            newcluster.check_namespace(namespace)
            newcluster.check_object_name("Cluster", name, 253)
        except newcluster.Refused as refused:
            return str(refused)
        shown[(namespace, name)] = None
    return list(shown)


def watch_scopes(shown: Sequence[tuple[str, str]]) -> list[tuple[str | None, str | None]]:
    """The watches that see every shown Cluster, as (namespace or None for all, field selector):
    one Cluster's page watches that Cluster alone."""
    namespaces = list(dict.fromkeys(namespace for namespace, _ in shown))
    if len(shown) == 1:
        namespace, name = shown[0]
        return [(namespace, f"metadata.name={name}")]
    if len(namespaces) > MAX_WATCHES:
        return [(None, None)]
    return [(namespace, None) for namespace in namespaces]


def event_of(cluster: Mapping[str, Any], now: datetime.datetime) -> dict[str, str]:
    """What a row shows of one Cluster's status, and no more: a Cluster holds no credential, and
    this sends only its status fields. Not its age: written once per change it would go stale
    beside the others' ages, which the page wrote together."""
    row = clusterview.row(cluster, now)
    return {
        "key": f"{row.namespace}/{row.name}",
        "ready": row.ready,
        "reason": row.reason,
        "message": row.message,
        "server": row.server,
        "version": row.version,
    }


def sse(event: str, data: Mapping[str, str]) -> bytes:
    """One Server-Sent Event; JSON on one line, so no field of it can start another event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def live_url(base: str, rows: Sequence[clusterview.Row]) -> str:
    """The stream for the Clusters a page shows ("" when it shows none)."""
    if not rows:
        return ""
    return f"{base}/clusters/live?" + urlencode([("c", f"{r.namespace}/{r.name}") for r in rows])


# --- the streams a process keeps open ---------------------------------------------------------


@attrs.define
class Streams:
    """The open live pages, by user and session: bounded per session and per user (the oldest
    closes) and in all.

    The user is the name the session signed in as, not the session: sessions cost nothing to
    make, so a bound per session alone let one user with sixteen sign-ins take every slot.
    """

    per_session: int = PER_SESSION
    per_user: int = PER_USER
    per_process: int = PER_PROCESS
    _open: dict[str, list[tuple[str, trio.CancelScope]]] = attrs.field(factory=dict, repr=False)

    @property
    def count(self) -> int:
        return sum(len(scopes) for scopes in self._open.values())

    def open(self, user: str, session: str) -> trio.CancelScope | None:
        """A scope for a new stream of ``user``'s ``session``, or None when the process serves
        enough. The session's oldest closes first when it has its share, else the user's."""
        theirs = self._open.setdefault(user, [])
        while (mine := [i for i, (s, _) in enumerate(theirs) if s == session]) and len(
            mine
        ) >= self.per_session:
            theirs.pop(mine[0])[1].cancel()
        while theirs and len(theirs) >= self.per_user:
            theirs.pop(0)[1].cancel()
        if self.count >= self.per_process:
            if not theirs:
                del self._open[user]
            return None
        scope = trio.CancelScope()
        theirs.append((session, scope))
        return scope

    def close(self, user: str, session: str, scope: trio.CancelScope) -> None:
        theirs = self._open.get(user, [])
        if (session, scope) in theirs:
            theirs.remove((session, scope))
        if not theirs:
            self._open.pop(user, None)


# --- the route --------------------------------------------------------------------------------


async def version_of(hub: Client, namespace: str | None, field_selector: str | None) -> str:
    """The collection's current resourceVersion, from a list of at most one Cluster."""
    params = {"limit": "1"}
    if field_selector:
        params["fieldSelector"] = field_selector
    listed = await hub.request("GET", resource_path(api.CLUSTERS, namespace=namespace),
                               params=params)  # fmt: skip
    return str((listed.get("metadata") or {}).get("resourceVersion") or "")


def refusal(event: str, reason: str) -> Response:
    """A stream of one event: the script stops following and reloads as it says."""
    return Response(sse(event, {"reason": reason}), media_type="text/event-stream")


Message = tuple[str, dict[str, str], int, str]
"""What a watch hands the writer: an event (``""``: none, only a newer version), its data, which
watch it came from and the version it was read at."""


class LiveStream(StreamingResponse):
    """One response of the stream: the watches' events for ``lifetime`` seconds, then its end.

    Hypercorn closes a connection whose client sends nothing for ``Limits.read_seconds`` (so that
    no client holds one by falling silent mid-request), and an EventSource sends nothing once it
    has asked. Each response therefore ends before that, with the version each watch had read as
    the event id; the browser asks again at once with it as ``Last-Event-ID``, and the watches
    resume from there: no list, and no change missed between two responses.
    """

    def __init__(
        self, hub: Client, shown: frozenset[tuple[str, str]],
        scopes: list[tuple[str | None, str | None, str]], alive: Callable[[], Awaitable[bool]],
        slot: trio.CancelScope, done: Callable[[], None], clock: Callable[[], datetime.datetime],
        lifetime: float = 8.0,
    ) -> None:  # fmt: skip
        headers = {"x-accel-buffering": "no"}  # the Guard adds no-store to every response
        super().__init__((), media_type="text/event-stream", headers=headers)
        self.hub, self.shown, self.scopes, self.alive = hub, shown, scopes, alive
        self.slot, self.done, self.clock, self.lifetime = slot, done, clock, lifetime
        self.written = [version for _, _, version in scopes]

    @property
    def last_id(self) -> str:
        return ",".join(self.written)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        events, received = trio.open_memory_channel[Message](64)
        try:
            with self.slot:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._disconnected, receive, nursery.cancel_scope)
                    nursery.start_soon(self._session, events.clone())
                    for index, (namespace, selector, version) in enumerate(self.scopes):
                        nursery.start_soon(self._follow, index, namespace, selector, version,
                                           events.clone())  # fmt: skip
                    # Ask again half a second after this response ends, with the last id.
                    await self._body(send, f"retry: 500\nid: {self.last_id}\n\n".encode())
                    await self._write(received, send)
                    nursery.cancel_scope.cancel()
        finally:
            self.done()
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # the page went away: nothing to end
                log.debug("live status: the page went away")

    @staticmethod
    async def _body(send: Send, body: bytes) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _write(self, received: trio.MemoryReceiveChannel[Message], send: Send) -> None:
        with trio.move_on_after(self.lifetime):
            while True:
                event, data, index, version = await received.receive()
                if index >= 0:
                    self.written[index] = version
                if not event:
                    continue
                await self._body(send, f"id: {self.last_id}\n".encode() + sse(event, data))
                if event in ("fallback", "reload"):
                    return
        await self._body(send, f"id: {self.last_id}\n\n".encode())

    @staticmethod
    async def _disconnected(receive: Receive, everything: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        everything.cancel()

    async def _session(self, out: trio.MemorySendChannel[Message]) -> None:
        while True:
            await trio.sleep(SESSION_CHECK)
            if not await self.alive():
                await out.send(("reload", {"reason": "the session ended"}, -1, ""))
                return

    async def _follow(
        self, index: int, namespace: str | None, selector: str | None, version: str,
        out: trio.MemorySendChannel[Message],
    ) -> None:  # fmt: skip
        """One watch, resumed from its last version when it ends and listed again when that
        version is gone; a 401 or 403 ends it with the event that says so."""
        path = resource_path(api.CLUSTERS, namespace=namespace)
        failures = 0
        while True:
            try:
                if not version:
                    version = await version_of(self.hub, namespace, selector)
                    await out.send(("", {}, index, version))
                version = await self._watch(index, path, selector, version, out)
                failures = 0
            except Gone:
                version = ""
            except Unauthorized:
                said = {"reason": "the API server no longer accepts you"}
                await out.send(("reload", said, -1, ""))
                return
            except Forbidden:
                await out.send(("fallback", {"reason": "you may not watch Clusters there"}, -1, ""))
                return
            except KubeError as exc:
                failures += 1
                log.info("live status: watch %s failed (%s)", path, exc)
                if failures >= FAILURES:
                    said = {"reason": "the hub does not answer the watch"}
                    await out.send(("fallback", said, -1, ""))
                    return
                await trio.sleep(2.0**failures)

    async def _watch(
        self, index: int, path: str, selector: str | None, version: str,
        out: trio.MemorySendChannel[Message],
    ) -> str:  # fmt: skip
        params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(WATCH_SECONDS)}  # fmt: skip
        if selector:
            params["fieldSelector"] = selector
        with trio.move_on_after(WATCH_SECONDS + 15):
            async with self.hub.stream("GET", path, params=params) as response:
                pending = b""
                async for chunk in response.aiter_bytes():
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if line.strip():
                            version = await self._forward(index, path, line, version, out)
        return version

    async def _forward(
        self, index: int, path: str, line: bytes, version: str,
        out: trio.MemorySendChannel[Message],
    ) -> str:  # fmt: skip
        """Hand on one line of the watch, if it is about a shown Cluster; its version always."""
        try:
            raw = json.loads(line)
            kind, obj = raw["type"], raw["object"]
        except (ValueError, KeyError, TypeError):
            raise Gone(410, "Invalid", f"watch {path}: an event is not JSON") from None
        if not isinstance(obj, dict):
            raise Gone(410, "Invalid", f"watch {path}: an event without an object")
        if kind == "ERROR":
            code = obj.get("code")
            raise error_from_status(code if isinstance(code, int) else 500, obj,
                                    context=f"watch {path}")  # fmt: skip
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or version)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if key not in self.shown or kind not in ("ADDED", "MODIFIED", "DELETED"):
            await out.send(("", {}, index, version))
        elif kind == "DELETED":
            await out.send(("gone", {"key": f"{key[0]}/{key[1]}"}, index, version))
        else:
            await out.send(("status", event_of(obj, self.clock()), index, version))
        return version


def resumed(last_event_id: str, scopes: int) -> list[str] | None:
    """The versions a reconnecting page read last (its ``Last-Event-ID``), one per watch; None
    when they are not that (a first connection, or an id of anything else)."""
    versions = last_event_id.split(",")
    if len(versions) != scopes or not all(v.isdigit() and len(v) <= 20 for v in versions):
        return None
    return versions


async def live_response(
    request: Request, session: Session, hub: Client, *, streams: Streams, owner: str,
    alive: Callable[[], Awaitable[bool]], clock: Callable[[], datetime.datetime],
    lifetime: float,
) -> Response:  # fmt: skip
    """The stream for ``?c=`` of ``request``: resumed from its ``Last-Event-ID``, else after a
    first list of each watched namespace as the user. A 401 for the user's own token is raised,
    for ``signed_in`` to end the session as on any page; a 403 or a failing hub answers one
    ``fallback`` event."""
    shown = parse_shown(request.query_params.getlist("c"))
    if isinstance(shown, str):
        return Response(f"Refused: {shown}.", status_code=400, media_type="text/plain")
    wanted = watch_scopes(shown)
    versions = resumed(request.headers.get("last-event-id", ""), len(wanted))
    scopes = []
    try:
        for index, (namespace, selector) in enumerate(wanted):
            version = versions[index] if versions else await version_of(hub, namespace, selector)
            scopes.append((namespace, selector, version))
    except Unauthorized:
        if session.identity is not None and session.identity.token is not None:
            raise
        return refusal("fallback", "the API server does not accept the UI's credentials")
    except Forbidden:
        return refusal("fallback", "you may not list Clusters there")
    except KubeError as exc:
        log.info("live status: cannot start a watch (%s)", exc)
        return refusal("fallback", "the hub does not answer")
    slot = streams.open(session.user, owner)
    if slot is None:
        log.info("live status: %d live pages open already; this one reloads", streams.count)
        return refusal("fallback", "too many live pages are open")
    done = functools.partial(streams.close, session.user, owner, slot)
    return LiveStream(hub, frozenset(shown), scopes, alive, slot, done, clock, lifetime)
