"""httpcore's network backend, as Kokumi's connections need it.

httpcore's pool (direct or through a proxy) asks its network backend for every connection it
opens, to the server or to a proxy. Two things need that moment:

- httpcore closes a half-made connection when an ``Exception`` interrupts its TLS handshake, not
  on cancellation: a request cancelled then (a manager stopping, a watch restarted, a check at its
  deadline) left its TCP socket to the garbage collector, reported as ``ResourceWarning: unclosed
  socket`` in whatever ran next. Every backend here closes it.
- A caller that judges where it may connect (the probe's egress policy) resolves the host here,
  hears every address, and the connection goes to an address it heard: a name that resolves
  differently a moment later (DNS rebinding) cannot slip past. The judge is the caller's
  ``admit`` callback, which raises the caller's own refusal, so this module knows no policy.

A caller whose deadline may fire mid-read (the probe) also has every socket tracked, to close them
all, shielded, when it is done: eight checks at a time then limit the open sockets. A caller that
reads from servers it does not trust (the probe again) has every read metered: a server that
answers a byte at a time would otherwise cost a read, a wake-up of the event loop and a parse per
byte, and httpcore bounds neither the reads nor the bytes of an answer.

A backend is httpcore's public interface (``httpcore.AsyncNetworkBackend``), handed to the pool
as it is built, by :class:`kokumi.kube.transport.Transport`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable
from typing import Any, Protocol

import httpcore
import trio

__all__ = ["Admit", "Backend", "Meter"]

Admit = Callable[[str, str], None]
"""``admit(host, address)``: returns when a connection to ``address`` (one that ``host`` names or
resolves to) may be opened, and raises the caller's refusal when it may not."""


class Meter(Protocol):
    """The caller's count of what is read, asked at every read of every stream a backend opened,
    TLS streams started on them included (so a proxy's answer, then the server's)."""

    def room(self, wanted: int) -> int:
        """How many of the ``wanted`` bytes the next read may ask for; raises the caller's own
        exception when no more may be read."""

    def took(self, size: int) -> None:
        """A read returned ``size`` bytes."""


class Backend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, closing cancelled handshakes, judging addresses when asked to,
    and remembering its sockets when asked to (see the module's docstring)."""

    def __init__(
        self,
        *,
        admit: Admit | None = None,
        track: bool = False,
        meter: Meter | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        """``admit``: judge every address before a socket is opened to it. ``track``: remember
        every socket, for :meth:`close_all`. ``meter``: count every read (:class:`Meter`).
        ``inner``: what opens the sockets (httpcore's Trio backend: Kokumi runs on Trio)."""
        self._inner = inner if inner is not None else httpcore.TrioBackend()
        self._admit = admit
        self._meter = meter
        self._streams: list[httpcore.AsyncNetworkStream] | None = [] if track else None

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._admit is None:
            stream = await self._inner.connect_tcp(
                host, port, timeout, local_address, socket_options
            )
        else:
            stream = await self._connect_admitted(
                self._admit, host, port, timeout, local_address, socket_options
            )
        return self._kept(_ClosingStream(stream, self._meter))

    async def _connect_admitted(
        self,
        admit: Admit,
        host: str,
        port: int,
        timeout: float | None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None,
        socket_options: Any,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve ``host``, admit every address, and connect to them in the resolver's order;
        the TLS server name is still the URL's host, since httpcore takes it from the request,
        not from this socket."""
        addresses = _literal(host)
        if addresses is None:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            admit(host, address)
        failure: OSError | httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (OSError, httpcore.ConnectError) as exc:
                failure = exc
        assert failure is not None  # getaddrinfo answers at least one address, or raises
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        if self._admit is not None:  # never asked for by a URL; no address to judge
            raise httpcore.ConnectError("a unix socket has no address to admit")
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return self._kept(_ClosingStream(stream, self._meter))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)

    def _kept(self, stream: httpcore.AsyncNetworkStream) -> httpcore.AsyncNetworkStream:
        if self._streams is not None:
            self._streams.append(stream)
        return stream

    async def close_all(self) -> None:
        """Close every socket this backend opened, even while its caller is being cancelled."""
        if not self._streams:
            return
        streams, self._streams = self._streams, []
        with trio.CancelScope(shield=True):
            for stream in streams:
                with contextlib.suppress(Exception):
                    await stream.aclose()


def _literal(host: str) -> list[str] | None:
    """``host`` as the one address it spells (brackets, a zone and a trailing dot left out, an
    IPv4-mapped IPv6 address as the IPv4 address it carries), or None for a name to resolve.

    The resolver reads the other spellings of an IPv4 address (``2852039166``, ``0xa9fea9fe``)
    as ``inet_aton`` does, and ``admit`` hears the address it read."""
    text = host.strip("[]").partition("%")[0]
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return [str(address.ipv4_mapped)]
    return [str(address)]


class _ClosingStream(httpcore.AsyncNetworkStream):
    """A TCP stream that closes itself when its TLS handshake is cancelled, and has its reads
    metered when its backend has a :class:`Meter` (then the TLS stream started on it too)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, meter: Meter | None = None) -> None:
        self._inner = inner
        self._meter = meter

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        meter = self._meter
        if meter is None:
            return await self._inner.read(max_bytes, timeout)
        data = await self._inner.read(meter.room(max_bytes), timeout)
        meter.took(len(data))
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
    ) -> httpcore.AsyncNetworkStream:
        try:
            tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._inner.aclose()
            raise
        return tls if self._meter is None else _ClosingStream(tls, self._meter)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)
