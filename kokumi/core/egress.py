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
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import attrs

__all__ = ["DEFAULT_DENY", "EgressPolicy", "Network", "parse_address"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_DENY: tuple[str, ...] = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")
"""Link-local IPv4 and IPv6 (where clouds serve instance metadata), and AWS's IPv6 metadata."""


def _network(text: str) -> Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a CIDR such as 10.0.0.0/8 or fd00::/8") from None


def parse_address(text: str) -> Address | None:
    """The IP address ``text`` spells (brackets and a zone allowed), or None for a host name."""
    text = text.strip("[]").partition("%")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@attrs.frozen
class EgressPolicy:
    """Which addresses the probe may connect to; see the module's docstring for the rule."""

    deny: tuple[Network, ...] = attrs.field(default=tuple(_network(cidr) for cidr in DEFAULT_DENY))
    allow: tuple[Network, ...] = ()

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
