"""The probe's egress guard: which addresses it refuses, and that it refuses them before connecting.

The policy is pure and tested as such. The probe is run for real, with Trio's own hooks for the
socket factory and the host name resolver in place: they see every socket the probe would open
and every name it would resolve, so "no connection attempt" is observed, not assumed.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import given

from kokumi.cmd import root as cli
from kokumi.core.cluster.egress import DEFAULT_DENY, EgressPolicy, parse_address
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.runtime.probe.checks import check

METADATA = "169.254.169.254"


# --- the policy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        METADATA,
        "169.254.0.1",
        "fd00:ec2::254",
        "fe80::1",
        "::ffff:169.254.169.254",
        "[fe80::1%eth0]",
    ],
)
def test_default_refuses_link_local_and_metadata(address: str) -> None:
    assert EgressPolicy().refusal(address) is not None


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.1", "192.168.1.10", "::1", "2001:db8::1", "fd00:ec2::253"]
)
def test_default_allows_everything_else(address: str) -> None:
    assert EgressPolicy().refusal(address) is None


@given(st.ip_addresses(v=4))
def test_default_refuses_an_ipv4_address_exactly_when_it_is_link_local(
    address: ipaddress.IPv4Address,
) -> None:
    refused = EgressPolicy().refusal(address)
    assert (refused is not None) == (address in ipaddress.ip_network("169.254.0.0/16"))
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert EgressPolicy().refusal(mapped) == refused


def test_the_most_specific_cidr_decides_and_allow_wins_a_tie() -> None:
    policy = EgressPolicy.from_cidrs(deny=["10.0.0.0/8"], allow=["10.20.0.0/16", "169.254.7.0/24"])
    assert str(policy.refusal("10.1.2.3")) == "10.0.0.0/8"
    assert policy.refusal("10.20.0.5") is None
    assert policy.refusal("169.254.7.7") is None  # carved out of the default
    assert str(policy.refusal(METADATA)) == "169.254.0.0/16"  # the rest of it stays denied
    lifted = EgressPolicy.from_cidrs(allow=["169.254.0.0/16"])
    assert lifted.refusal(METADATA) is None
    only = EgressPolicy.from_cidrs(deny=["0.0.0.0/0", "::/0"], allow=["10.20.0.0/16"])
    assert only.refusal("10.20.1.1") is None
    assert only.refusal("8.8.8.8") is not None
    assert only.refusal("2001:db8::1") is not None


def test_a_bad_cidr_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape("'10.0.0.0/33' is not a CIDR")):
        EgressPolicy.from_cidrs(deny=["10.0.0.0/33"])
    assert parse_address("spoke.example") is None
    assert DEFAULT_DENY == (
        "169.254.0.0/16",
        "fe80::/10",
        "fd00:ec2::254/128",
        "fd20:ce::254/128",
        "fd00:c1::a9fe:a9fe/128",
        "100.100.100.200/32",
        "168.63.129.16/32",
    )


def test_manager_refuses_a_bad_cidr_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    code = cli.main(["manager", "--kubeconfig", str(kubeconfig), "--probe-allow-cidr", "nope"])
    assert code == 2
    assert "'nope' is not a CIDR such as 10.0.0.0/8" in capsys.readouterr().err


# --- spellings: as the resolver reads them --------------------------------------------------

SPELLINGS = [
    "2852039166",  # one decimal number
    "0xa9fea9fe",  # one hexadecimal number
    "0251.0376.0251.0376",  # octal parts
    "169.254.43518",  # the last part fills the bytes left
    "0xa9.0xfe.0xa9.0xfe",
    "169.254.169.254.",  # a trailing dot
    "64:ff9b::a9fe:a9fe",  # NAT64
    "64:ff9b:1::a9fe:a9fe",  # local-use NAT64
    "2002:a9fe:a9fe::1",  # 6to4
    "::169.254.169.254",  # IPv4-compatible
    "::ffff:169.254.169.254",  # IPv4-mapped
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254 (obfuscated)
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_metadata_address_is_refused(spelling: str) -> None:
    refused = EgressPolicy().refusal(spelling)
    assert refused == ipaddress.ip_network("169.254.0.0/16"), spelling


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("100.100.100.200", "Alibaba Cloud"),
        ("fd20:ce::254", "Google Cloud, IPv6"),
        ("fd00:c1::a9fe:a9fe", "Oracle Cloud, IPv6"),
        ("168.63.129.16", "Azure WireServer"),
        ("fd00:ec2::254", "AWS, IPv6"),
    ],
)
def test_other_clouds_metadata_addresses_are_refused_by_default(address: str, why: str) -> None:
    assert EgressPolicy().refusal(address) is not None, why


def test_a_hex_prefix_without_digits_is_no_address() -> None:
    """inet_aton refuses ``0x`` alone, so such a host is a name, as the resolver reads it."""
    for text in ("0x", "0X", "1.0x", "0x.1"):
        assert parse_address(text) is None, text
    assert parse_address("0x1") == ipaddress.IPv4Address("0.0.0.1")


@given(st.text(alphabet="0123456789xXabcdef.", min_size=1, max_size=20))
def test_an_ipv4_spelling_reads_as_the_c_library_reads_it(text: str) -> None:
    """The C library's inet_aton is what getaddrinfo, and proxies in C, take a host for."""
    try:
        packed = socket.inet_aton(text)
    except OSError:
        parsed = parse_address(text)
        # Only a trailing dot, which Kokumi reads more broadly than inet_aton, may differ.
        assert parsed is None or text.endswith("."), text
        return
    assert parse_address(text) == ipaddress.IPv4Address(packed), text


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_in_any_ipv6_wrapping_is_judged_as_itself(
    address: ipaddress.IPv4Address,
) -> None:
    link_local = address in ipaddress.ip_network("169.254.0.0/16")
    value = int(address)
    for wrapped in (
        ipaddress.IPv6Address((0x64FF9B << 96) | value),
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | 1),
        ipaddress.IPv6Address(f"::ffff:{address}"),
    ):
        assert (EgressPolicy().refusal(wrapped) is not None) == link_local, wrapped


# --- the probe, watched by Trio's socket and resolver hooks ----------------------------------


class Sockets(trio.abc.SocketFactory):
    """Counts every socket the probe opens; refuses each at once (no network in tests)."""

    def __init__(self) -> None:
        self.opened: list[tuple[int, int]] = []

    def socket(self, family: int | None = None, type: int | None = None, proto: int = 0) -> Any:
        self.opened.append((family or 0, type or 0))
        raise OSError(errno.ENETUNREACH, "Network is unreachable")


class Resolver(trio.abc.HostnameResolver):
    """Resolves every name to one address, and remembers what it was asked."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked: list[str] = []

    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, *args: Any, **kwargs: Any
    ) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        self.asked.append(name)
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (self.address, int(port or 443)))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise NotImplementedError


@pytest.fixture
async def sockets() -> AsyncIterator[Sockets]:
    """The hooks live in the test's own Trio run, so nothing else sees them."""
    factory = Sockets()
    trio.socket.set_custom_socket_factory(factory)
    yield factory


def connection(server: str, proxy_url: str | None = None) -> Connection:
    return Connection(
        server=server,
        token="a-token-that-never-leaves",  # never sent: refused first
        proxy_url=proxy_url,
    )


async def test_a_metadata_server_ends_in_egress_denied_without_a_connection_attempt(
    sockets: Sockets,
) -> None:
    resolver = Resolver("127.0.0.1")
    trio.socket.set_custom_hostname_resolver(resolver)
    finding = await check(connection(f"https://{METADATA}"), timeout=5)
    assert finding.reason is Reason.EGRESS_DENIED
    assert finding.message == (
        "169.254.169.254 is in 169.254.0.0/16, where the manager does not connect (link-local,"
        " where clouds serve instance metadata and credentials): use the API server's routable"
        " address, or allow it with kokumi manager --probe-allow-cidr"
    )
    assert sockets.opened == [] and resolver.asked == []
    assert "a-token-that-never-leaves" not in repr(finding)


async def test_a_name_that_resolves_to_metadata_is_refused_before_a_socket(
    sockets: Sockets,
) -> None:
    resolver = Resolver("fd00:ec2::254")
    trio.socket.set_custom_hostname_resolver(resolver)
    finding = await check(connection("https://spoke.example:6443"), timeout=5)
    assert finding.reason is Reason.EGRESS_DENIED
    assert finding.message.startswith(
        "spoke.example resolves to fd00:ec2::254, in fd00:ec2::254/128, where the manager does"
        " not connect (a cloud's instance metadata address, which serves credentials)"
    )
    assert resolver.asked == ["spoke.example"]
    assert sockets.opened == []


async def test_a_proxy_at_a_metadata_address_is_refused_too(sockets: Sockets) -> None:
    proxied = connection("https://spoke.example:6443", proxy_url=f"http://{METADATA}:3128")
    finding = await check(proxied, timeout=5)
    assert finding.reason is Reason.EGRESS_DENIED
    assert finding.message.startswith("169.254.169.254 is in 169.254.0.0/16")
    assert sockets.opened == []


async def test_a_deny_cidr_refuses_and_says_which_flag(sockets: Sockets) -> None:
    trio.socket.set_custom_hostname_resolver(Resolver("10.1.2.3"))
    policy = EgressPolicy.from_cidrs(deny=["10.0.0.0/8"])
    finding = await check(connection("https://spoke.example:6443"), timeout=5, egress=policy)
    assert finding.reason is Reason.EGRESS_DENIED
    assert "in 10.0.0.0/8, where the manager does not connect (denied by --probe-deny-cidr)" in (
        finding.message
    )
    assert sockets.opened == []


async def test_an_allowed_address_is_connected_to_the_address_judged(sockets: Sockets) -> None:
    """Allowing the range lets the probe try: the socket factory sees the attempt."""
    resolver = Resolver(METADATA)
    trio.socket.set_custom_hostname_resolver(resolver)
    policy = EgressPolicy.from_cidrs(allow=["169.254.0.0/16"])
    finding = await check(connection("https://spoke.example:6443"), timeout=5, egress=policy)
    assert finding.reason is Reason.UNREACHABLE
    assert resolver.asked == ["spoke.example"]  # resolved once, by the guard
    assert sockets.opened == [(socket.AF_INET, socket.SOCK_STREAM)]


@pytest.mark.parametrize("proxy", [None, "http://proxy.example:3128"])
@pytest.mark.parametrize("spelling", SPELLINGS)
async def test_each_spelling_is_egress_denied_with_and_without_a_proxy(
    sockets: Sockets, spelling: str, proxy: str | None
) -> None:
    """Behind a proxy the host goes to the proxy as text, which the proxy resolves: so it is
    judged as the resolver would read it, before the proxy or a socket is asked anything."""
    resolver = Resolver("10.0.0.1")
    trio.socket.set_custom_hostname_resolver(resolver)
    host = f"[{spelling}]" if ":" in spelling else spelling
    finding = await check(connection(f"https://{host}:6443", proxy_url=proxy), timeout=5)
    assert finding.reason is Reason.EGRESS_DENIED, finding.message
    assert "169.254.0.0/16" in finding.message
    assert sockets.opened == [] and resolver.asked == []
