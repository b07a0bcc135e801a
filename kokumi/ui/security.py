"""Who may drive the UI, and what a page may do: sign-in, sessions, CSRF, headers, size limits.

Local mode is Jupyter's: the command prints a URL with a one-time token; whoever opens it first
gets a session cookie and the link is spent, so another local user, or a web page that guesses the
port, cannot act with the user's kubeconfig. The cookie is signed (itsdangerous), HttpOnly,
SameSite=Strict, and expires; the session behind it lives in this process only.

The cookie alone is not the session, though: browsers do not keep cookies apart by port (RFC 6265
section 8.5), so a server another local user runs on 127.0.0.1:OTHER receives it with every
request the user's browser makes there. The session's pages therefore live under a path of its
own, ``/s/<secret>/`` (:data:`SESSION_PATH`), which the sign-in redirects to and which no other
port is ever told: every response says ``Referrer-Policy: no-referrer``, and a log line shows the
path with the secret left out (:func:`shown_path`). A request needs both, the cookie and the path.

In a cluster (:class:`SealedSessions`) the session lives in the cookie itself, sealed with the key
the replicas share (:mod:`kokumi.core.sessioncookie`), so that any replica, and one started after
a restart, accepts it; the user's bearer token travels in it encrypted, never in clear.

SameSite alone does not stop a forged POST: another port of 127.0.0.1 is the same site (Argo CD's
CVE-2024-22424 was the subdomain form of that). Every unsafe request therefore needs both the
session's own CSRF token in the form and a browser's word that it came from this origin
(``Sec-Fetch-Site: same-origin``, or an ``Origin`` equal to ours). No refusal here names a token.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

import attrs
import trio
from itsdangerous import BadSignature, TimestampSigner
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from kokumi.core import sessioncookie
from kokumi.kube.identity import Identity

__all__ = [
    "COOKIE",
    "CSP",
    "MAX_BODY",
    "MAX_TOKEN",
    "Guard",
    "Limits",
    "SealedSessions",
    "Session",
    "Sessions",
    "cross_site_refusal",
    "shown_path",
]

log = logging.getLogger("kokumi.ui")

COOKIE: Final = "kokumi_session"
SESSION_PATH: Final = "/s"
"""Locally, a session's pages are under ``/s/<its secret>``: what the cookie alone cannot give."""
_SECRET_PATH: Final = re.compile(r"^/s/[^/]*")

MAX_BODY: Final = 1024 * 1024
"""The largest request body: the New Cluster form takes a kubeconfig of at most 512 KiB."""

MAX_TOKEN: Final = 16 * 1024
"""The longest bearer token the sign-in and New Cluster forms take (a cookie holds about 2,800
characters)."""

SESSION_SECONDS: Final = 12 * 3600
CLUSTER_SESSION_SECONDS: Final = 8 * 3600
"""In a cluster a session ends after a working day, or when its token expires if that is sooner."""

CSP: Final = (
    "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""No inline script and no script of anyone else's: the pages are plain forms and links, and the
one script, ``/static/live.js`` (the live status, which only the UI's own origin may feed), is a
file of ours, so no injected markup can run."""

HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@attrs.define
class Session:
    """One signed-in browser, as a request sees it.

    ``identity`` is whom the request's Kubernetes calls act for: None for local mode (the
    kubeconfig's user), the user's own token, or the user the authenticating proxy names.
    """

    csrf: str
    expires: float
    user: str = ""
    identity: Identity | None = None
    base: str = attrs.field(default="", repr=False)
    """The path the session's pages are under: ``/s/<secret>`` locally, ``""`` in a cluster."""
    namespaces: tuple[str, ...] = ()
    """The namespaces the user typed and may list Clusters in, the latest last: where the list
    looks when they may not list every namespace (:func:`sessioncookie.remembered`)."""
    sealed: sessioncookie.Sealed | None = attrs.field(default=None, repr=False)
    """In a cluster, what the cookie holds: what a changed session is sealed again from."""


@attrs.define
class Sessions:
    """The one-time sign-in token, and the sessions it was exchanged for.

    ``secure`` marks the cookie Secure (behind TLS). ``clock`` is monotonic time, for tests.
    """

    secure: bool = False
    lifetime: float = SESSION_SECONDS
    clock: Callable[[], float] = time.monotonic
    _sign_in: str | None = attrs.field(factory=lambda: secrets.token_urlsafe(32))
    _signer: TimestampSigner = attrs.field(
        factory=lambda: TimestampSigner(secrets.token_bytes(32), salt="kokumi-ui-session")
    )
    _sessions: dict[str, Session] = attrs.field(factory=dict)
    _misplaced: set[str] = attrs.field(factory=set)  # sessions whose cookie came without its path

    @property
    def sign_in_token(self) -> str:
        """The token of the printed URL, while it is unspent (read once, by the command)."""
        if self._sign_in is None:
            raise RuntimeError("the sign-in token was spent")
        return self._sign_in

    def exchange(self, token: str) -> tuple[str, Session] | None:
        """The signed cookie value of a new session for the one-time token, and the session (its
        ``base`` is where its pages are); None once spent."""
        if self._sign_in is None or not hmac.compare_digest(token.encode(), self._sign_in.encode()):
            return None
        self._sign_in = None
        session_id = secrets.token_urlsafe(32)
        session = Session(
            csrf=secrets.token_urlsafe(32),
            expires=self.clock() + self.lifetime,
            base=f"{SESSION_PATH}/{secrets.token_urlsafe(32)}",
        )
        self._sessions[session_id] = session
        return self._signer.sign(session_id).decode("ascii"), session

    def get(self, cookie: str | None, base: str) -> Session | None:
        """The session of ``cookie`` if the request came to its path ``base``, else None.

        The cookie is what any port of 127.0.0.1 receives; the path is what only this one does.
        """
        if not cookie:
            return None
        try:
            session_id = self._signer.unsign(cookie, max_age=int(self.lifetime)).decode("ascii")
        except BadSignature:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires <= self.clock():
            del self._sessions[session_id]
            return None
        if not hmac.compare_digest(session.base.encode(), base.encode()):
            if session_id in self._misplaced:
                return None  # said once: a server replaying the cookie must not fill the log
            self._misplaced.add(session_id)
            log.warning(
                "refused a request with a session's cookie but not its address (/s/…): opened "
                "without it, or the cookie replayed by another server on this host"
            )
            return None
        return session

    def end(self, cookie: str | None) -> sessioncookie.Sealed | None:
        """Forget the session of ``cookie``: kept here only, nobody else is to be told."""
        if not cookie:
            return None
        try:
            session_id = self._signer.unsign(cookie).decode("ascii")
        except BadSignature:
            return None
        self._sessions.pop(session_id, None)
        return None

    def cookie_header(self, value: str, *, secure: bool = False) -> str:
        return _cookie(value, int(self.lifetime), self.secure or secure)

    def updated(self, session: Session, *, secure: bool = False) -> str | None:
        """The cookie of a session whose namespaces changed: none, it is kept here."""
        return None

    def csrf_ok(self, session: Session, given: str) -> bool:
        return hmac.compare_digest(session.csrf.encode(), given.encode())


def _cookie(value: str, max_age: int, secure: bool) -> str:
    return f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}" + (
        "; Secure" if secure else ""
    )


def clear_cookie(*, secure: bool = False) -> str:
    return _cookie("", 0, secure)


@attrs.define
class SealedSessions:
    """Sessions in their cookies, sealed with the key the UI keeps in a Secret (in a cluster).

    Nothing is kept here but the sign-outs made at this replica (``signed_out``: one entry per
    user, the sessions of that user issued until then, :class:`sessioncookie.SignedOut`), and
    ``elsewhere``: those made at any replica, as the UI last read them from the hub
    (:class:`kokumi.ui.incluster.SignOuts`), so that a cookie copied before its user signed out
    is refused at every replica, not only at the one that answered. ``secure`` marks every
    cookie Secure; without it a cookie is Secure when its request came over TLS (or a proxy
    says so). ``clock`` is wall-clock time, which the replicas share.
    """

    keys: sessioncookie.Keys
    lifetime: float = CLUSTER_SESSION_SECONDS
    secure: bool = False
    clock: Callable[[], float] = time.time
    signed_out: sessioncookie.SignedOut = attrs.field(factory=sessioncookie.SignedOut)
    elsewhere: sessioncookie.SignedOut = attrs.field(factory=sessioncookie.SignedOut)
    _issued: int = 0

    def start(
        self, user: str, *, token: str | None = None, groups: Sequence[str] = ()
    ) -> tuple[str, Session]:
        """A new session's cookie value; it ends no later than the token says it expires."""
        now = self.clock()
        expires = int(now + self.lifetime)
        if token is not None:
            until = sessioncookie.token_expiry(token)
            if until is not None:
                expires = min(expires, until)
        # Each session its own millisecond: a sign-out ends the sessions issued until the
        # signed-out one, and one signed in right after it must not share its stamp.
        self._issued = max(int(now * 1000), self._issued + 1)
        sealed = sessioncookie.Sealed(
            secrets.token_urlsafe(16), expires, user, tuple(groups), token, issued=self._issued
        )
        value = self.keys.seal(sealed, secrets.token_bytes(sessioncookie.NONCE_BYTES))
        return value, self._session(sealed)

    def get(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        now = self.clock()
        sealed = self.keys.open(cookie, now)
        if sealed is None or self.signed_out.refuses(sealed) or self.elsewhere.refuses(sealed):
            return None
        return self._session(sealed)

    def _session(self, sealed: sessioncookie.Sealed) -> Session:
        identity = None if sealed.token is None else Identity(token=sealed.token)
        return Session(
            csrf=self.keys.csrf(sealed.session_id),
            expires=float(sealed.expires),
            user=sealed.user,
            identity=identity,
            namespaces=sealed.namespaces,
            sealed=sealed,
        )

    def updated(self, session: Session, *, secure: bool = False) -> str | None:
        """The ``Set-Cookie`` of ``session`` sealed again with its namespaces (the same id, so
        the same CSRF token); the oldest are forgotten until the cookie fits a browser's."""
        if session.sealed is None:
            return None
        namespaces = session.namespaces
        while True:
            sealed = attrs.evolve(session.sealed, namespaces=namespaces)
            value = self.keys.seal(sealed, secrets.token_bytes(sessioncookie.NONCE_BYTES))
            if len(value) <= sessioncookie.MAX_COOKIE or not namespaces:
                return self.cookie_header(value, secure=secure)
            namespaces = namespaces[1:]

    def end(self, cookie: str | None) -> sessioncookie.Sealed | None:
        """End the session of ``cookie`` here, with every older one of its user's; the session,
        for the other replicas to be told of."""
        now = self.clock()
        sealed = self.keys.open(cookie or "", now)
        if sealed is None:
            return None
        ended = self.signed_out.with_sign_out(sealed, now, self.lifetime)
        if ended is not None:
            self.signed_out = ended
        return sealed

    def cookie_header(self, value: str, *, secure: bool = False) -> str:
        sealed = self.keys.open(value, self.clock())
        max_age = max(0, int(sealed.expires - self.clock())) if sealed is not None else 0
        return _cookie(value, max_age, self.secure or secure)

    def csrf_ok(self, session: Session, given: str) -> bool:
        return hmac.compare_digest(session.csrf.encode(), given.encode())


def shown_path(path: str) -> str:
    """``path`` as a log line may show it: a session's secret path as ``/s/…``."""
    return _SECRET_PATH.sub(f"{SESSION_PATH}/…", path, count=1)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def cross_site_refusal(scope: Scope) -> str | None:
    """Why an unsafe request is refused as cross-site, or None: the browser's own word first.

    ``Sec-Fetch-Site`` is what every current browser sends; ``Origin`` is the fallback. A request
    with neither comes from no browser (a script of the user's own) and still needs the token.
    """
    site = _header(scope, b"sec-fetch-site")
    if site is not None:
        if site in ("same-origin", "none"):
            return None
        return f"the request came from another site (Sec-Fetch-Site: {site[:20]})"
    origin = _header(scope, b"origin")
    if origin is None:
        return None
    host = _header(scope, b"host") or ""
    scheme = scope.get("scheme", "http")
    if origin != f"{scheme}://{host}":
        return "the request came from another origin than this page's"
    return None


@attrs.frozen
class Limits:
    """How much and how slowly a client may send: what one connection may hold of the server.

    Before a session is known a POST /signin body is read, so anybody can open connections and
    send bodies slowly; each held its connection for as long as it liked. ``idle_seconds`` is
    Hypercorn's keep-alive timeout: a connection whose request head has not arrived that long
    after it opened (or after its last answer) is closed. ``read_seconds`` is Hypercorn's
    ``read_timeout``: a connection that sends nothing for that long mid-request is closed (a
    response being worked on is still sent). ``body_seconds`` bounds a body's whole arrival,
    however it trickles in: past it the request is answered 408 and its connection closed. The
    sizes are the largest bodies: the sign-in form's (a token, 16 KiB), and any other's.
    """

    idle_seconds: int = 5
    read_seconds: int = 10
    body_seconds: float = 30.0
    max_body: int = MAX_BODY
    max_sign_in_body: int = 32 * 1024


@attrs.define
class Guard:
    """Outermost ASGI middleware: the security headers on every response, the body limits.

    Cross-site checks happen here too, before any handler or form parser runs: a forged POST
    never reaches the code that talks to the cluster. The body's size and time limits apply
    while the app reads it, as :class:`Limits` says.
    """

    app: ASGIApp
    limits: Limits = attrs.field(factory=Limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        gone = False  # the client went away, or fell silent for read_seconds, mid-request

        async def send_with_headers(message: Message) -> None:
            if gone:
                # Nobody to answer. Starlette answers the ClientDisconnect its body reader
                # raises with "500 Internal Server Error" before it reaches the except below,
                # and a connection Hypercorn closes for its read timeout is still open for a
                # moment: every client that fell silent mid-body was told the server failed.
                return
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        method, path = scope["method"], shown_path(scope["path"])
        if method not in ("GET", "HEAD", "OPTIONS"):
            refusal = cross_site_refusal(scope)
            if refusal is not None:
                log.warning("refused %s %s: %s", method, path, refusal)
                await _plain(send_with_headers, 403, f"Refused: {refusal}.")
                return
        sign_in = scope["path"] == "/signin"
        limit = self.limits.max_sign_in_body if sign_in else self.limits.max_body
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _plain(send_with_headers, 413, _too_large(limit, sign_in))
            return
        received = 0
        complete = False
        deadline = trio.current_time() + self.limits.body_seconds

        async def heard() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        async def limited() -> Message:
            nonlocal received, complete
            if complete:
                return await heard()
            with trio.move_on_at(deadline):
                message = await heard()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    complete = True
                received += len(message.get("body", b""))
                if received > limit:
                    # Raised into the form parser: Starlette answers it, as it would a handler's.
                    raise HTTPException(413, _too_large(limit, sign_in))
                return message
            log.warning(
                "refused %s %s: its body took longer than %g s to arrive",
                method, path, self.limits.body_seconds,
            )  # fmt: skip
            raise HTTPException(
                408,
                f"Refused: the request's body took longer than {self.limits.body_seconds:g} s "
                "to arrive: send it again over a faster connection.",
                headers={"connection": "close"},
            )

        try:
            await self.app(scope, limited, send_with_headers)
        except ClientDisconnect:
            # The client went away or fell silent for read_seconds mid-body: nobody to answer.
            log.info("%s %s: the connection closed before the request's body arrived", method, path)


def _too_large(limit: int, sign_in: bool) -> str:
    said = (
        f"a bearer token is at most {MAX_TOKEN // 1024} KiB"
        if sign_in
        else "the New Cluster form takes a kubeconfig of at most 512 KiB"
    )
    return f"Refused: the request is larger than {limit // 1024} KiB: {said}."


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
