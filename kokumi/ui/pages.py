"""What every page shares: the UI's state, the session check, the templates.

Server-rendered HTML (Jinja2, autoescaped) that needs no script, so the Content-Security-Policy
forbids every script but the UI's own live status (:mod:`kokumi.ui.live`). A refusal is one line
under the field it is about; a kubeconfig, a token or a key is never put back into a page, not
even into the form after a failed attempt. Every page but the sign-in's goes through
:func:`signed_in`, which finds the session, checks the CSRF token of an unsafe request, and
hands the page the client that acts as the session's user; a page whose calls the API server
answers 401 for the user's own token ends the session instead, back at the sign-in with one
line, since every other page would be refused too. Apart from the routes so that the Clusters'
and the Environments' pages share it without knowing each other.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import importlib.resources
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import jinja2
import trio
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from kokumi.core import clusterview, sessioncookie
from kokumi.core.registry import argocd
from kokumi.kube.client import Client
from kokumi.kube.errors import Unauthorized
from kokumi.kube.observer import Observer
from kokumi.ui.incluster import ProxyRefusal, ProxyTrust, SignOuts
from kokumi.ui.security import (
    COOKIE,
    SESSION_PATH,
    Limits,
    SealedSessions,
    Session,
    Sessions,
    clear_cookie,
    shown_path,
)
from kokumi.workspace import newcluster

__all__ = [
    "FILES",
    "LISTS",
    "LISTS_PER_USER",
    "LIST_BYTES",
    "LIST_BYTES_PER_USER",
    "LIST_TTL",
    "PARSERS",
    "REFRESH",
    "UI",
    "Listed",
    "Lists",
    "error_page",
    "listed_namespace",
    "named",
    "page",
    "row_bytes",
    "secure",
    "signed_in",
    "signin_page",
    "still_signed_in",
]

log = logging.getLogger("kokumi.ui")

REFRESH: Final = 10
"""Seconds between reloads of the list and a Cluster's page: a check runs about once a minute."""

PARSERS: Final = 1
"""New Cluster forms whose credentials are read at once, each in a worker thread. The reader is
mostly Python, so a second thread would add no speed under the GIL, only take more of it from
the event loop that serves every other page."""

LIST_TTL: Final = 30.0
"""Seconds a session's list of every Cluster is reused for a sorted, filtered or later page.

Sorting by a column or filtering by a status needs every Cluster, and at 10,000 Clusters that is
20 requests and a second of decoding: reading them again on each 10 s reload of each viewer
would cost the hub more than the manager's own checks. A Cluster's status changes at most once a
check, about once a minute, so half a minute old is as fresh as the status it shows; the page
says how old. The first page in the API's order never comes from here: it is one request of
:data:`~kokumi.core.clusterview.PAGE_SIZE` Clusters, as fresh as the hub."""

LISTS: Final = 64
"""Lists kept at once, across sessions: the least recently used is dropped first."""

LIST_BYTES: Final = 128 * 1024 * 1024
"""Bytes of rows kept at once, across users, as :func:`row_bytes` counts them (10,000 ordinary
Clusters count 15 MB; their rows take about 5 MB, since strings that rows share are counted for
each): eight viewers of a 10,000-Cluster fleet, and a bound on the memory however many sign in
and however large their Clusters' labels are."""

LISTS_PER_USER: Final = 8
"""Lists one user keeps at once, however many sessions they sign in with: their least recently
used is dropped first, so one user cannot push everyone else's lists out."""

LIST_BYTES_PER_USER: Final = 32 * 1024 * 1024
"""Bytes of rows one user keeps at once, all their sessions together: two lists of a
10,000-Cluster fleet. A list larger than this alone is shown and not kept (the next page reads
it again): 31 Clusters of 90,000 labels each count 490 MB."""

_ROW_ORDERS: Final = 2 * 6 * 8
"""Per row, the sorted copies a kept list may grow (:meth:`Listed.ordered`: each of the six
columns both ways, a pointer each): counted when the list is kept, not when they are made."""

FILES = importlib.resources.files("kokumi.ui")
"""The UI's package data: the templates here, the static files the app serves."""
_ENV: Final = jinja2.Environment(
    loader=jinja2.FunctionLoader(lambda name: (FILES / "templates" / name).read_text("utf-8")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)

Handler = Callable[[Request, Session, Client], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def row_bytes(row: clusterview.Row) -> int:
    """What keeping ``row`` costs in memory, in bytes, counted once when its list is kept.

    Each string's own size as Python reports it (a label's key and value, a message), the
    tuples holding them, the row, and the sorted copies its list may grow; a string two rows
    share (``True``, a reason) is counted for each, so the count errs high. Tenants write the
    labels, so this is what grows without bound: 90,000 labels make one row of about 16 MB.
    """
    size = sys.getsizeof(row) + _ROW_ORDERS + sys.getsizeof(row.labels)
    for field in (row.name, row.namespace, row.connection, row.server, row.version, row.ready,
                  row.reason, row.message, row.age, row.description, row.created):  # fmt: skip
        size += sys.getsizeof(field)
    for pair in row.labels:
        size += sys.getsizeof(pair) + sys.getsizeof(pair[0]) + sys.getsizeof(pair[1])
    return size


@attrs.frozen
class Listed:
    """The rows of every Cluster one session listed with one namespace and selector, and when,
    and what they cost (:func:`row_bytes`)."""

    rows: tuple[clusterview.Row, ...]
    scope: str
    at: float
    looked: tuple[str, ...] = ()
    size: int = 0
    user: str = ""
    orders: dict[tuple[str, bool], list[clusterview.Row]] = attrs.field(factory=dict, eq=False)

    def ordered(self, sort: str, descending: bool) -> list[clusterview.Row]:
        """Sorted once per order while the list is kept: a reload or the next page sorts nothing."""
        key = (sort, descending)
        if key not in self.orders:
            self.orders[key] = clusterview.ordered(self.rows, sort, descending)
        return self.orders[key]


@attrs.define
class Lists:
    """Each session's recent lists of Clusters, never shared: RBAC decides what each user sees.

    A list is keyed by a digest of the session (its CSRF token, its own) and of whom its requests
    act for, so that no other session, and no other user behind the same session, is answered
    from it; a write by the session (New Cluster, an edit, a delete) forgets its lists, so that
    it sees what it did at once.

    What is kept is bounded in bytes (:func:`row_bytes`, counted once as a list is kept) and in
    lists, per user (the name the session signed in as, whatever the number of its sessions)
    and in all; past a bound the least recently used goes first, the user's own before anyone
    else's. A list over a user's whole share is not kept at all. Never an error: a page whose
    list was dropped reads it again.
    """

    ttl: float = LIST_TTL
    size: int = LISTS
    bytes: int = LIST_BYTES
    per_user: int = LISTS_PER_USER
    bytes_per_user: int = LIST_BYTES_PER_USER
    clock: Callable[[], float] = time.monotonic
    _kept: collections.OrderedDict[tuple[str, str, str, tuple[str, ...]], Listed] = attrs.field(
        factory=collections.OrderedDict, repr=False
    )

    @staticmethod
    def owner(session: Session) -> str:
        identity = session.identity
        parts = [session.csrf, session.user]
        if identity is not None:
            parts += [identity.token or "", identity.user or "", *identity.groups]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    @property
    def held(self) -> int:
        """Bytes of rows kept now, as :func:`row_bytes` counts them."""
        return sum(listed.size for listed in self._kept.values())

    def held_by(self, user: str) -> int:
        return sum(listed.size for listed in self._kept.values() if listed.user == user)

    def get(
        self, session: Session, namespace: str, selector: str, known: Sequence[str] = ()
    ) -> Listed | None:
        """The session's list, if recent: one read of every namespace first, else one read
        where ``known`` said to look (see :meth:`put`)."""
        for key in {
            (self.owner(session), namespace, selector, k): None for k in ((), tuple(known))
        }:
            found = self._kept.get(key)
            if found is None or self.clock() - found.at >= self.ttl:
                self._kept.pop(key, None)
                continue
            self._kept.move_to_end(key)
            return found
        return None

    def put(
        self, session: Session, namespace: str, selector: str, rows: list[clusterview.Row],
        scope: str, known: Sequence[str] = (), looked: Sequence[str] = (),
    ) -> Listed:  # fmt: skip
        """Keep a list, read in ``looked`` (nothing: wherever the user may list), within the
        bounds. A list read where ``known`` said to look (the namespaces of a user who may not
        list them all, which grow as they type one) is kept for those only; any other for every
        ``known``. The list is returned to show whether or not it could be kept."""
        now = self.clock()
        for key in [k for k, kept in self._kept.items() if now - kept.at >= self.ttl]:
            del self._kept[key]  # expired: nobody is answered from it again
        size = sum(row_bytes(row) for row in rows)
        listed = Listed(tuple(rows), scope, now, tuple(looked), size, session.user)
        key = (self.owner(session), namespace, selector, tuple(known) if looked else ())
        self._kept.pop(key, None)
        self._kept[key] = listed
        user = session.user
        while True:  # the user's own least recently used first, the new list last
            theirs = [k for k, kept in self._kept.items() if kept.user == user]
            if not theirs or (
                len(theirs) <= self.per_user and self.held_by(user) <= self.bytes_per_user
            ):
                break
            del self._kept[theirs[0]]
        while len(self._kept) > self.size or self.held > self.bytes:
            self._kept.popitem(last=False)
        return listed

    def forget(self, session: Session) -> None:
        owner = self.owner(session)
        for key in [k for k in self._kept if k[0] == owner]:
            del self._kept[key]


@attrs.define
class UI:
    """What the pages need: the connection to the hub, the sessions, Argo CD's namespace.

    Locally ``hub`` is the user's own connection and ``sessions`` the one-time link's. In a
    cluster ``sessions`` are :class:`SealedSessions`, and ``hub`` is the connection each request
    acts through as its user: without credentials of its own when users sign in with a token,
    the UI's ServiceAccount (which impersonates) when ``proxy`` names an authenticating proxy.
    ``limits`` bound what a connection may send (the server and the app read them both);
    ``parsers`` is how many New Cluster forms' credentials are read at once. ``namespaces`` are
    the operator's (``--namespaces``): where a user who may not list every namespace is looked
    for, beside their ServiceAccount's own and the ones they typed (:func:`known_namespaces`).
    ``sign_outs``, in a cluster, is where the replicas tell each other of sessions signed out.
    """

    hub: Client
    sessions: Sessions | SealedSessions
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    proxy: ProxyTrust | None = None
    limits: Limits = attrs.field(factory=Limits)
    parsers: trio.CapacityLimiter = attrs.field(
        factory=lambda: trio.CapacityLimiter(PARSERS), repr=False
    )
    namespaces: tuple[str, ...] = ()
    sign_outs: SignOuts | None = None
    lists: Lists = attrs.field(factory=Lists, repr=False)

    def __attrs_post_init__(self) -> None:
        # Every request the pages make, as whichever user: never a write in Argo CD's
        # namespace (the manager's alone, under its admission policy), whatever a user may.
        self.hub = self.hub.read_only_in(
            self.argocd_namespace, newcluster.argocd_only(self.argocd_namespace)
        )

    @property
    def mode(self) -> str:
        """``local``, ``token`` (in a cluster, bearer sign-in) or ``proxy``."""
        if isinstance(self.sessions, Sessions):
            return "local"
        return "token" if self.proxy is None else "proxy"

    def client_for(self, session: Session) -> Client:
        return self.hub if session.identity is None else self.hub.acting_as(session.identity)

    def known_namespaces(self, session: Session) -> list[str]:
        """Where to look for the user's Clusters when they may list neither every namespace nor
        the Namespaces: their ServiceAccount's own, the operator's, the ones they typed (the
        latest first), and locally the kubeconfig's. Each is tried as the user: RBAC decides."""
        found = [sessioncookie.service_account_namespace(session.user) or ""]
        found += [*self.namespaces, *reversed(session.namespaces)]
        if self.mode == "local":
            found.append(self.hub.namespace)
        return list(dict.fromkeys(n for n in found if n))


# --- sessions ---------------------------------------------------------------------------------


def secure(request: Request) -> bool:
    """Whether the browser reached us over TLS: directly, or through a proxy that says so. The
    app's sign-in and sign-out set their cookies by it too."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _refused(text: str, status: int) -> Response:
    return PlainTextResponse(text, status_code=status)


def signin_page(ui: UI, *, status: int = 401, **context: Any) -> HTMLResponse:
    """The sign-in, as the app's route shows it and as a page without a session falls back to."""
    return page(
        "signin.html",
        {"title": "Sign in", "session": None, "mode": ui.mode, "message": "", **context},
        status=status,
    )


def _proxy_session(ui: UI, request: Request) -> tuple[Session, str | None] | Response:
    """The proxy's user for this request, and their session (a new one when the user changed)."""
    assert ui.proxy is not None and isinstance(ui.sessions, SealedSessions)
    identity = ui.proxy.identity(request)
    if isinstance(identity, ProxyRefusal):
        path = shown_path(request.url.path)
        log.warning("refused %s %s: %s", request.method, path, identity.message)
        return _refused(identity.message + ".", identity.status)
    assert identity.user is not None
    session = ui.sessions.get(request.cookies.get(COOKIE))
    fresh = None
    if session is None or session.user != identity.user:
        cookie, session = ui.sessions.start(identity.user, groups=identity.groups)
        fresh = ui.sessions.cookie_header(cookie, secure=secure(request))
    return attrs.evolve(session, identity=identity), fresh


def signed_in(ui: UI, handler: Handler) -> Endpoint:
    """``handler`` as a route of the session's (module docstring): every page module wraps its
    routes in it, so none of them reaches the hub but as the signed-in user."""

    async def endpoint(request: Request) -> Response:
        fresh = None
        await _heed_sign_outs(ui)
        if ui.proxy is not None:
            found = _proxy_session(ui, request)
            if isinstance(found, Response):
                return found
            session, fresh = found
        else:
            cookie = request.cookies.get(COOKIE)
            if isinstance(ui.sessions, Sessions):
                key = request.path_params.get("key")
                base = f"{SESSION_PATH}/{key}" if isinstance(key, str) else ""
                looked_up = ui.sessions.get(cookie, base)
            else:
                looked_up = ui.sessions.get(cookie)
            if looked_up is None:
                return signin_page(ui)
            session = looked_up
        hub = ui.client_for(session)
        refused = _Refusals(hub.observer)
        if session.identity is not None and session.identity.token is not None:
            # The user's own token: a 401 means the API server stopped accepting it.
            hub.observer = refused
        looked_in = session.namespaces
        try:
            response = await _handle(ui, handler, request, session, hub)
        except Unauthorized:
            if not refused.unauthorized:
                raise
            return await _token_refused(ui, request, session)
        if refused.unauthorized:
            return await _token_refused(ui, request, session)
        if session.namespaces != looked_in:
            fresh = ui.sessions.updated(session, secure=secure(request)) or fresh
        if fresh is not None:
            response.headers.append("set-cookie", fresh)
        return response

    return endpoint


async def still_signed_in(ui: UI, request: Request) -> bool:
    """Whether ``request``'s session is still signed in, unexpired and not signed out at any
    replica: asked again and again by a page that stays open (the live status's stream)."""
    cookie = request.cookies.get(COOKIE)
    if isinstance(ui.sessions, Sessions):
        key = request.path_params.get("key")
        return (
            ui.sessions.get(cookie, f"{SESSION_PATH}/{key}" if isinstance(key, str) else "")
            is not None
        )
    await _heed_sign_outs(ui)
    return ui.sessions.get(cookie) is not None


async def _handle(
    ui: UI, handler: Handler, request: Request, session: Session, hub: Client
) -> Response:
    """``handler``'s answer; a POST's form parsed once, here, and its CSRF token checked."""
    if request.method != "POST":
        return await handler(request, session, hub)
    # Parsed once, here, with its limits; the handler's request.form() returns it.
    form = await request.form(max_files=1, max_fields=40)
    try:
        given = form.get("csrf")
        if not isinstance(given, str) or not ui.sessions.csrf_ok(session, given):
            log.warning(
                "refused %s %s: no valid CSRF token", request.method, shown_path(request.url.path)
            )
            return _refused(
                "Refused: the form is not from this session: reload the page and try again.", 403
            )
        return await handler(request, session, hub)
    finally:
        await form.close()


@attrs.define
class _Refusals:
    """The observer of one request's calls as its user: whether the API server answered 401."""

    inner: Observer
    unauthorized: bool = False

    def request(self, verb: str, code: str) -> None:
        if code == "401":
            self.unauthorized = True
        self.inner.request(verb, code)

    def watch_restarted(self, resource: str, reason: str) -> None:
        self.inner.watch_restarted(resource, reason)


REVOKED_LINE: Final = (
    "Signed out: the API server no longer accepts your token (it expired or was revoked). Sign "
    "in again with a new one, e.g. from kubectl create token NAME -n NAMESPACE --duration=8h."
)


async def end_session(ui: UI, request: Request) -> None:
    """End the session of ``request``'s cookie (signing out, or a token no longer accepted), at
    every replica."""
    ended = ui.sessions.end(request.cookies.get(COOKIE))
    if ended is not None and ui.sign_outs is not None:
        await ui.sign_outs.add(ended, ui.sessions.lifetime)


async def _heed_sign_outs(ui: UI) -> None:
    """The sessions signed out at other replicas, as recently read as :class:`SignOuts` keeps
    them, before a cookie is believed."""
    if ui.sign_outs is not None and isinstance(ui.sessions, SealedSessions):
        ui.sessions.elsewhere = await ui.sign_outs.ended()


async def _token_refused(ui: UI, request: Request, session: Session) -> Response:
    """The sign-in page, in one line, for a session whose token the API server refused: the
    session ends and its cookie is cleared, rather than every page saying Unauthorized."""
    await end_session(ui, request)
    log.warning("ended the session of %s: the API server no longer accepts its token", session.user)
    response = signin_page(ui, status=401, message=REVOKED_LINE)
    response.headers.append("set-cookie", clear_cookie(secure=secure(request)))
    return response


# --- shared by the pages ----------------------------------------------------------------------


def named(kind: str, handler: Handler, limit: int = 253) -> Handler:
    """``handler`` of a route that names one object: a namespace or a name that no object can
    have (``..``, ``.``, ``Upper``) is a 404 page, never a segment of a request's path, where a
    dot-segment would name another resource than the one asked for."""

    async def named(request: Request, session: Session, hub: Client) -> Response:
        try:
            newcluster.check_namespace(request.path_params["namespace"])
            newcluster.check_object_name(kind, request.path_params["name"], limit)
        except newcluster.Refused as refused:
            return error_page(session, refused, status=404)
        return await handler(request, session, hub)

    return named


def listed_namespace(session: Session, namespace: str) -> HTMLResponse | None:
    """The 400 page for a ``?namespace=`` that no namespace can have; None for a good one."""
    try:
        if namespace:
            newcluster.check_namespace(namespace)
    except newcluster.Refused as refused:
        return error_page(session, refused, status=400)
    return None


def page(template: str, context: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    """``template`` rendered with what every page's layout needs (the session's CSRF token, the
    base path); every page module renders through it."""
    context = {"refresh": 0, "csrf": "", "base": "", "live": "", "now": "", **context}
    session = context.get("session")
    if isinstance(session, Session):
        context["csrf"] = session.csrf
        context["base"] = session.base
    return HTMLResponse(_ENV.get_template(template).render(**context), status_code=status)


def error_page(session: Session, refused: newcluster.Refused, *, status: int = 502) -> HTMLResponse:
    """The page of one refusal's line, the same on every page module's route."""
    return page(
        "error.html", {"title": "Refused", "session": session, "message": str(refused)},
        status=status,
    )  # fmt: skip
