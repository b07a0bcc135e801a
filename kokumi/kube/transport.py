"""Kokumi's own httpx transport: httpcore's pool built through its public constructors.

httpx's ``AsyncHTTPTransport`` builds httpcore's pool itself and takes no network backend, so a
caller that needs one (:mod:`kokumi.kube.backend`: closing a cancelled handshake's socket,
judging addresses, tracking and metering sockets) had to reach into the pool it built. Here the
pool is built directly, the backend given as httpcore's ``network_backend``, and requests and
answers cross between httpx and httpcore as httpx's own transport carries them.

The one private part of httpcore Kokumi still touches is the hub client's pass over its
connections (:data:`SWEEP`, the ``keep`` argument): httpcore's pool decides which connection a
request takes in a private method, and no argument changes how. That pass lives here alone;
httpcore is pinned in pyproject.toml to the range tested, the pool checks at construction that
what it overrides is still there, and tests/kube/test_backend.py fails when a request no longer
goes through it.
"""

from __future__ import annotations

import importlib.util
import ssl
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import httpcore
import httpx

from .backend import Backend

__all__ = ["LIMITS", "SWEEP", "Transport"]

LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
"""httpx's own default limits, for a transport built without any."""

SWEEP = 1.0
"""Seconds between two looks at every idle connection of a pool that keeps its connections (has
the server closed it, has it been idle too long). A connection is also looked at when a request
is about to reuse it, so a closed one is never handed out."""

_PROXY_SCHEMES = ("http", "https")
_SOCKS_SCHEMES = ("socks5", "socks5h")


class Transport(httpx.AsyncBaseTransport):
    """An httpx transport over httpcore's pool, direct or through a proxy, opening every
    connection through ``backend`` (a :class:`~kokumi.kube.backend.Backend` of its own when
    none is given, which closes a cancelled handshake's socket).

    ``ssl_context`` decides what is trusted and which client certificate is presented (None:
    httpcore's default, for plain HTTP); nothing is read from the environment. ``proxy``: a
    proxy URL (http, https, socks5, socks5h), its user and password the proxy's credentials;
    an unknown scheme raises ``ValueError``, SOCKS without ``socksio`` installed
    ``ImportError``, as httpx's transport does. ``keep``: the pool keeps its idle connections
    by the pass described at :meth:`_Kept._assign_requests_to_connections` (the hub client's).
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        proxy: str | None = None,
        limits: httpx.Limits = LIMITS,
        backend: Backend | None = None,
        keep: bool = False,
    ) -> None:
        self.backend = backend if backend is not None else Backend()
        shared: dict[str, Any] = {
            "ssl_context": ssl_context,
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "network_backend": self.backend,
        }
        self._pool: httpcore.AsyncConnectionPool
        if proxy is None:
            kind = _KeptPool if keep else httpcore.AsyncConnectionPool
            self._pool = kind(**shared)
            return
        via = httpx.Proxy(proxy)  # a user and password in the URL become its credentials
        url = httpcore.URL(
            scheme=via.url.raw_scheme,
            host=via.url.raw_host,
            port=via.url.port,
            target=via.url.raw_path,
        )
        if via.url.scheme in _PROXY_SCHEMES:
            http_proxy = _KeptHTTPProxy if keep else httpcore.AsyncHTTPProxy
            self._pool = http_proxy(
                proxy_url=url,
                proxy_auth=via.raw_auth,
                proxy_headers=via.headers.raw,
                proxy_ssl_context=via.ssl_context,
                **shared,
            )
        elif via.url.scheme in _SOCKS_SCHEMES:
            if importlib.util.find_spec("socksio") is None:  # httpcore would say so late
                raise ImportError(
                    "a SOCKS proxy needs the 'socksio' package (pip install httpx[socks])"
                )
            socks_proxy = _KeptSOCKSProxy if keep else httpcore.AsyncSOCKSProxy
            self._pool = socks_proxy(proxy_url=url, proxy_auth=via.raw_auth, **shared)
        else:  # httpx.Proxy refuses any other scheme
            raise ValueError(f"Unknown scheme for proxy URL {via.url!r}")

    @property
    def connections(self) -> list[httpcore.AsyncConnectionInterface]:
        """The pool's connections now, busy and idle (httpcore's own list, copied)."""
        return self._pool.connections

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        content = request.stream
        if not isinstance(content, httpx.AsyncByteStream):
            raise TypeError("an async transport sends an async request body")
        sent = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=content,
            extensions=request.extensions,
        )
        try:
            answer = await self._pool.handle_async_request(sent)
        except _HTTPCORE_ERRORS as exc:
            raise _as_httpx(exc) from exc
        body = answer.stream
        if not isinstance(body, AsyncIterable):
            raise TypeError("httpcore's async pool answered with a sync body")
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(body),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        try:
            await self._pool.aclose()
        except _HTTPCORE_ERRORS as exc:
            raise _as_httpx(exc) from exc


_HTTPX_OF: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.ProxyError: httpx.ProxyError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
}
"""httpcore's failures and httpx's names for them: callers catch httpx's only. Anything else
(a caller's own refusal raised by its backend, a cancellation) passes through as it is."""

_HTTPCORE_ERRORS = tuple(_HTTPX_OF)


def _as_httpx(exc: Exception) -> httpx.TransportError:
    """httpx's exception for ``exc``: the one of its nearest class (a ``ConnectTimeout`` is
    httpx's ``ConnectTimeout``, not merely a ``TimeoutException``), with its message."""
    for kind in type(exc).__mro__:
        if kind in _HTTPX_OF:
            return _HTTPX_OF[kind](str(exc))
    raise AssertionError(f"not an httpcore failure: {type(exc).__name__}")  # pragma: no cover


class _Body(httpx.AsyncByteStream):
    """An answer's body as httpcore streams it, its failures under httpx's names."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Chunks(self._chunks.__aiter__())

    async def aclose(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()


class _Chunks:
    """One pass over a body (an iterator object, not a generator: nothing is left for the
    garbage collector to finalize when the reader stops early)."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._chunks.__anext__()
        except _HTTPCORE_ERRORS as exc:
            raise _as_httpx(exc) from exc


_HOOK = "_assign_requests_to_connections"
"""The name of httpcore's private pass that :class:`_Kept` overrides."""


class _Kept(httpcore.AsyncConnectionPool):
    """httpcore's pool with Kokumi's pass over its connections (mixed in before a proxy's pool
    class, so that a proxy's pool keeps its way of opening connections).

    The pass is the one private hook: it overrides httpcore's ``_assign_requests_to_connections``
    and reads the pool's ``_connections`` and ``_requests`` (and each request's ``connection``,
    ``request``, ``is_queued`` and ``assign_to_connection``), checked here at construction.
    """

    _swept_at = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        parts = ("_connections", "_requests")
        if _HOOK not in vars(httpcore.AsyncConnectionPool) or not all(
            hasattr(self, part) for part in parts
        ):
            raise RuntimeError("httpcore changed: its pool has no pass over connections to replace")
        # httpcore's own reading of the limits (None: no limit; never more kept than allowed).
        most = kwargs.get("max_connections")
        kept = kwargs.get("max_keepalive_connections")
        self._most_connections: int = sys.maxsize if most is None else most
        self._kept_connections: int = min(
            self._most_connections, sys.maxsize if kept is None else kept
        )

    def _assign_requests_to_connections(self) -> list[Any]:
        """Hand queued requests their connections, and return the connections to close.

        httpcore 1.0.9's pass compares ``max_keepalive_connections`` with all the pool's
        connections, busy ones and watch streams included, so once more are open than it may
        keep idle it closes each connection as soon as its answer is read and the next request
        handshakes anew (32 writes in flight beside a dozen watches opened a connection per
        write); and for every idle connection it polls the socket and counts the connections
        again, which costs the idle connections squared. This pass counts the idle ones only,
        polls an idle connection when a request is about to take it (the rest once a
        :data:`SWEEP`), skips connections already handed to a request that has not started on
        them, and reuses the last used first, so that surplus ones reach their keep-alive
        expiry and close. What it keeps, opens and closes is otherwise httpcore's rule:
        ``max_connections``, ``max_keepalive_connections``, ``keepalive_expiry``.
        """
        connections: list[Any] = self._connections
        closing: list[Any] = []
        now = time.monotonic()
        sweep = now - self._swept_at >= SWEEP
        if sweep:
            self._swept_at = now
        # Connections handed to a request that has not yet started on them still say idle.
        taken = {id(r.connection) for r in self._requests if r.connection is not None}
        idle: list[Any] = []
        for connection in list(connections):
            if connection.is_closed():
                connections.remove(connection)
            elif id(connection) in taken or not connection.is_idle():
                continue
            elif sweep and connection.has_expired():
                connections.remove(connection)
                closing.append(connection)
            else:
                idle.append(connection)
        for pool_request in self._requests:
            if not pool_request.is_queued():
                continue
            origin = pool_request.request.url.origin
            found = None
            at = len(idle)
            while found is None and at:
                at -= 1  # the last used first
                connection = idle[at]
                if not connection.can_handle_request(origin) or not connection.is_available():
                    continue
                del idle[at]
                if connection.has_expired():
                    connections.remove(connection)
                    closing.append(connection)
                else:
                    found = connection
            if found is not None:
                connections.remove(found)
                connections.append(found)  # the last used goes last
            elif len(connections) < self._most_connections:
                found = self.create_connection(origin)
                connections.append(found)
            elif idle:
                oldest = idle.pop(0)
                connections.remove(oldest)
                closing.append(oldest)
                found = self.create_connection(origin)
                connections.append(found)
            else:
                continue  # waits for a connection to come free
            pool_request.assign_to_connection(found)
        while len(idle) > self._kept_connections:
            oldest = idle.pop(0)
            connections.remove(oldest)
            closing.append(oldest)
        return closing


class _KeptPool(_Kept):
    """A direct pool that keeps its connections."""


class _KeptHTTPProxy(_Kept, httpcore.AsyncHTTPProxy):
    """An HTTP(S) proxy's pool that keeps its connections."""


class _KeptSOCKSProxy(_Kept, httpcore.AsyncSOCKSProxy):
    """A SOCKS proxy's pool that keeps its connections."""
