"""Where the probe may connect: a kubeconfig must not open the way into the manager's own network.

Whoever may create a Cluster and a Secret chooses the server the manager connects to, from inside
its pod. Most destinations only cost the author a failed check, but some answer anything that asks
from the pod's network: the cloud's instance metadata service (169.254.169.254, and on AWS also
fd00:ec2::254) hands out the node's credentials, and other link-local services trust their
neighbours. The probe refuses those by default, before any connection, and says why.

The rule is one table of CIDRs, each allowed or denied; the most specific match decides, and on a
tie ``allow`` wins, so ``--probe-allow-cidr 169.254.0.0/16`` lifts the default and
``--probe-deny-cidr 0.0.0.0/0 --probe-deny-cidr ::/0 --probe-allow-cidr 10.20.0.0/16`` keeps the
probe inside one network. An address no entry matches is allowed. IPv4-mapped IPv6 addresses
(``::ffff:169.254.169.254``) are judged as the IPv4 address they carry.

Pure: no I/O. The probe applies it to every address it resolves a host to, and connects to that
same address, so a name cannot resolve to one address for the guard and another for the socket.

The same policy guards the registry: Argo CD's pods connect to the server of every cluster Secret
Kokumi writes, with the credential in it, so a server the probe may not reach is never
registered either. :func:`judge` is the one judge, and its verdict the one message: of a server
or proxy URL whose host is an address (the probe before it connects, the registry before it
registers), and of each address a host name resolves to (the probe, as it connects; the Cluster
actor releases a Cluster whose check found a name resolving to one).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

import attrs

from kokumi.core.reasons import Reason

__all__ = [
    "DEFAULT_DENY",
    "METADATA",
    "EgressPolicy",
    "Network",
    "denied",
    "embedded_ipv4",
    "judge",
    "parse_address",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# How many answers of _url_refusal a policy keeps: a fleet's servers, with room to spare; past it
# the memory starts again (a server that is renamed leaves its old answer behind).
_REMEMBERED = 1 << 16

DEFAULT_DENY: tuple[str, ...] = (
    "169.254.0.0/16",  # link-local: AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Hetzner...
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::254/128",  # AWS's IPv6 instance metadata
    "fd20:ce::254/128",  # Google Cloud's IPv6 metadata server
    "fd00:c1::a9fe:a9fe/128",  # Oracle Cloud's IPv6 instance metadata
    "100.100.100.200/32",  # Alibaba Cloud's instance metadata
    "168.63.129.16/32",  # Azure's WireServer (extension configuration and certificates)
)
"""Link-local IPv4 and IPv6, where most clouds serve instance metadata, and the metadata (and
similar) addresses of the clouds that serve them elsewhere. docs in deploy/README.md."""

METADATA: frozenset[str] = frozenset(DEFAULT_DENY[2:])
"""The default denials that are a cloud's service rather than link-local, for messages."""


def _network(text: str) -> Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a CIDR such as 10.0.0.0/8 or fd00::/8") from None


def parse_address(text: str) -> Address | None:
    """The IP address ``text`` spells as the resolver reads it, or None for a host name.

    Brackets and a zone are allowed. An IPv4 address is read as ``inet_aton`` (which
    ``getaddrinfo`` and most proxies use) reads it: ``2852039166``, ``0xa9fea9fe``,
    ``0251.0376.0251.0376`` and ``169.254.43518`` are all 169.254.169.254, and a trailing dot
    changes nothing. Otherwise such a host would go to a proxy as a "name" the proxy resolves
    to the metadata address, unjudged.
    """
    text = text.strip("[]").partition("%")[0]
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1]
    address: Address | None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        address = _inet_aton(text)
    if address is None:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 in the forms inet_aton accepts: 1 to 4 parts, each decimal, octal (0...) or hex
    (0x...), the last filling the bytes left."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        lowered = part.lower()
        try:
            if lowered.startswith("0x"):
                number = int(lowered[2:], 16) if 2 < len(lowered) <= 10 else -1
            elif len(part) > 1 and part.startswith("0"):
                number = int(part, 8) if part.isdigit() and len(part) <= 12 else -1
            elif part.isdigit() and part.isascii() and len(part) <= 10:
                number = int(part)
            else:
                return None
        except ValueError:
            return None
        if number < 0:
            return None
        numbers.append(number)
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    value = last
    for index, number in enumerate(head):
        value |= number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, where a translator or tunnel would take it:
    IPv4-mapped and -compatible (::a.b.c.d), NAT64 (64:ff9b::/96 and the local 64:ff9b:1::/48,
    the last 32 bits), 6to4 (2002::/16, bits 16 to 48) and Teredo (its server and client)."""
    found: list[ipaddress.IPv4Address] = []
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in _COMPATIBLE and int(address) > 1:
        found.append(low)
    if any(address in network for network in _NAT64):
        found.append(low)
    if address in _SIX_TO_FOUR and address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return tuple(found)


@attrs.frozen
class _Refused:
    """Where a URL leads that the policy refuses: its host, the address it spells, the network."""

    host: str
    address: str
    network: Network


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


@attrs.frozen
class EgressPolicy:
    """Which addresses the probe may connect to; see the module's docstring for the rule."""

    deny: tuple[Network, ...] = attrs.field(default=tuple(_network(cidr) for cidr in DEFAULT_DENY))
    allow: tuple[Network, ...] = ()
    # What _url_refusal said for each tuple of URLs: every check and every claim asks it of the
    # same server, and the answer depends on the URLs and the policy alone.
    _said: dict[tuple[str | None, ...], _Refused | None] = attrs.field(
        factory=dict, init=False, eq=False, hash=False, repr=False
    )

    @classmethod
    def from_cidrs(cls, *, deny: Iterable[str] = (), allow: Iterable[str] = ()) -> EgressPolicy:
        """The default denials plus ``deny``, and ``allow``; ValueError names a bad CIDR."""
        return cls(
            deny=(*cls().deny, *(_network(c) for c in deny)),
            allow=tuple(_network(c) for c in allow),
        )

    def refusal(self, address: Address | str) -> Network | None:
        """The denied network that refuses ``address``, or None when the probe may connect."""
        if isinstance(address, str):
            parsed = parse_address(address)
            if parsed is None:
                raise ValueError(f"{address!r} is not an IP address")
            address = parsed
        elif isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if isinstance(address, ipaddress.IPv6Address):
            # Judged as each IPv4 address it carries too: a NAT64 gateway or a 6to4 relay
            # takes 64:ff9b::a9fe:a9fe to 169.254.169.254.
            for carried in embedded_ipv4(address):
                refused = self._judge(carried)
                if refused is not None:
                    return refused
        return self._judge(address)

    def _judge(self, address: Address) -> Network | None:
        best: tuple[int, bool, Network] | None = None
        for allowed, networks in ((False, self.deny), (True, self.allow)):
            for network in networks:
                if address.version == network.version and address in network:
                    candidate = (network.prefixlen, allowed, network)
                    if best is None or candidate[:2] > best[:2]:
                        best = candidate
        if best is None or best[1]:
            return None
        return best[2]

    def _url_refusal(self, *urls: str | None) -> _Refused | None:
        """The first of ``urls`` (a server, a proxy) whose host is an address the policy refuses.

        A host name is not resolved here (no I/O): the probe resolves it and judges every address.
        """
        said = self._said
        if urls in said:
            return said[urls]
        if len(said) >= _REMEMBERED:
            said.clear()
        said[urls] = refused = self._first_refused(urls)
        return refused

    def _first_refused(self, urls: tuple[str | None, ...]) -> _Refused | None:
        for url in urls:
            host = _host(url) if url else None
            address = parse_address(host) if host else None
            if host is None or address is None:
                continue
            network = self.refusal(address)
            if network is not None:
                return _Refused(host, str(address), network)
        return None


def judge(
    policy: EgressPolicy,
    server: str,
    proxy_url: str | None = None,
    *,
    address: str | None = None,
) -> tuple[Reason, str] | None:
    """The ``EgressDenied`` verdict (reason and message) on a connection ``policy`` refuses, or
    None when it may be made.

    Without ``address``, ``server`` and ``proxy_url`` are URLs, judged by the address their host
    spells; a host name is not resolved here (no I/O), so it passes. With ``address``, ``server``
    is a host as the connection names it and ``address`` one it resolved to (or spells).
    """
    if address is None:
        refused = policy._url_refusal(server, proxy_url)
        if refused is None:
            return None
        return denied(refused.host, refused.address, refused.network)
    network = policy.refusal(address)
    if network is None:
        return None
    return denied(server, address, network)


def denied(host: str, address: str, network: Network) -> tuple[Reason, str]:
    """The verdict's words: where ``host`` leads, and why the manager does not connect there."""
    where = (
        f"{address} is in {network}"
        if host == address
        else f"{host} resolves to {address}, in {network}"
    )
    return Reason.EGRESS_DENIED, (
        f"{where}, where the manager does not connect ({_why(network)}): use the API"
        " server's routable address, or allow it with kokumi manager --probe-allow-cidr"
    )


def _why(network: Network) -> str:
    if network.is_link_local:
        return "link-local, where clouds serve instance metadata and credentials"
    if str(network) in METADATA:
        return "a cloud's instance metadata address, which serves credentials"
    return "denied by --probe-deny-cidr"
