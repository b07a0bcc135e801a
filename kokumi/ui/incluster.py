"""The UI in a cluster: who the user is, the shared session key, the trusted proxy.

Two ways to sign in, both acting as the user for every Kubernetes call:

- **A bearer token**, pasted once: a SelfSubjectReview made *with that token* says whom it
  names (and a wrong, expired or revoked one is refused by the API server itself). The token is
  then sent as the user's own on each of their requests; the UI's ServiceAccount never serves
  a page.
- **An authenticating proxy** in front (opt-in): it names the user and groups in request
  headers, and the UI's ServiceAccount passes them on as ``Impersonate-User`` and
  ``Impersonate-Group``. Such headers are believed from the named proxy only: anyone else who
  sends them is refused, since believing them would let any caller pick whom to act as.

The session key is a Secret in ``kokumi-signing``, the namespace the spec keeps signing keys in
and where nobody is granted Secret access: the UI's ServiceAccount may get and update that one
Secret by name and create Secrets there (RBAC cannot narrow a create to a name; the admission
policy of deploy/ui/ does).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import secrets
from collections.abc import Sequence
from typing import Any, Final

import attrs
from starlette.requests import Request

from kokumi.core import sessioncookie
from kokumi.kube.client import SECRETS, Client, Identity
from kokumi.kube.errors import AlreadyExists, ConfigError, Conflict, KubeError, NotFound
from kokumi.objects import Resource

__all__ = [
    "KEY_NAMESPACE",
    "KEY_SECRET",
    "SELF_SUBJECT_REVIEWS",
    "ProxyRefusal",
    "ProxyTrust",
    "SessionKeyError",
    "Who",
    "session_key",
    "who_is",
]

log = logging.getLogger("kokumi.ui")

KEY_NAMESPACE: Final = "kokumi-signing"
KEY_SECRET: Final = "kokumi-clusters-ui-session"  # noqa: S105 - a name, not its value
KEY_FIELD: Final = "key"

SELF_SUBJECT_REVIEWS: Final = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", namespaced=False
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class SessionKeyError(Exception):
    """The session key cannot be read or made: one line, saying which Secret and what to do."""


async def session_key(own: Client, namespace: str = KEY_NAMESPACE, name: str = KEY_SECRET) -> bytes:
    """The key every replica seals sessions with: read from its Secret, made there if missing.

    Replicas starting together race to create it; the loser reads the winner's. A Secret that
    exists without the key (applied empty, or its key deleted to sign everyone out) is filled.
    """
    where = f"Secret {namespace}/{name}"
    for _ in range(5):
        try:
            secret = await own.get(SECRETS, name, namespace=namespace)
        except NotFound:
            key = secrets.token_bytes(sessioncookie.KEY_BYTES)
            try:
                await own.create(SECRETS, _secret(name, namespace, key), namespace=namespace)
            except AlreadyExists:
                continue
            except KubeError as exc:
                raise SessionKeyError(
                    _refusal(f"cannot create the session key {where}", exc)
                ) from None
            log.info("made the session key %s", where)
            return key
        except KubeError as exc:
            raise SessionKeyError(_refusal(f"cannot read the session key {where}", exc)) from None
        stored = _key_of(secret)
        if stored:
            if len(stored) < sessioncookie.KEY_BYTES:
                raise SessionKeyError(
                    f"the session key in {where} is {len(stored)} bytes, not "
                    f"{sessioncookie.KEY_BYTES}: delete its data.{KEY_FIELD} to have one made"
                )
            return stored
        key = secrets.token_bytes(sessioncookie.KEY_BYTES)
        filled = {**secret, "data": {**(secret.get("data") or {}), KEY_FIELD: _b64(key)}}
        try:
            await own.replace(SECRETS, filled, namespace=namespace)
        except Conflict:
            continue
        except KubeError as exc:
            raise SessionKeyError(_refusal(f"cannot write the session key {where}", exc)) from None
        log.info("wrote a new session key into %s", where)
        return key
    raise SessionKeyError(f"the session key {where} kept changing while it was read: start again")


def _refusal(what: str, exc: KubeError) -> str:
    return (
        f"{what}: {exc}: apply deploy/ui/ (its Role lets the UI's ServiceAccount get, create "
        "and update that one Secret)"
    )


def _secret(name: str, namespace: str, key: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "kokumi-clusters-ui",
                "app.kubernetes.io/part-of": "kokumi",
            },
            "annotations": {
                "kubernetes.io/description": (
                    "The key the Kokumi Clusters UI seals its session cookies with. Whoever "
                    "reads it can forge any user's session: grant no one else access to it."
                )
            },
        },
        "data": {KEY_FIELD: _b64(key)},
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _key_of(secret: dict[str, Any]) -> bytes | None:
    value = (secret.get("data") or {}).get(KEY_FIELD)
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


@attrs.frozen
class Who:
    user: str
    groups: tuple[str, ...]


async def who_is(users: Client, token: str) -> Who:
    """Whom ``token`` names, asked with that token (a SelfSubjectReview): raises KubeError.

    ``users`` is the connection without credentials of its own; ConfigError for a token that
    cannot be sent in a header at all.
    """
    review = await users.acting_as(Identity(token=token)).create(
        SELF_SUBJECT_REVIEWS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    info = (review.get("status") or {}).get("userInfo") or {}
    groups = info.get("groups") or []
    return Who(str(info.get("username") or ""), tuple(str(g) for g in groups))


@attrs.frozen
class ProxyRefusal:
    """Why a request through the proxy is refused (one line) and the status to answer with."""

    message: str
    status: int = 403


@attrs.frozen
class ProxyTrust:
    """The authenticating proxy whose user and group headers the UI believes, and no one else's.

    ``networks`` names the proxy by the address its connections come from (the TCP peer, never a
    forwarded-for header): ``127.0.0.1/32`` for a proxy in the same pod, which is the safe way.
    Kubernetes' own identities (``system:…`` users and groups, such as ``system:masters``) are
    never passed on, whatever the proxy says: impersonating them is how a confused proxy would
    become cluster-admin.
    """

    networks: tuple[Network, ...]
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"

    @classmethod
    def parse(cls, names: Sequence[str], user_header: str, groups_header: str) -> ProxyTrust:
        networks = []
        for name in names:
            try:
                networks.append(ipaddress.ip_network(name.strip(), strict=False))
            except ValueError:
                raise ValueError(
                    f"--trusted-proxy {name!r} is not an address or CIDR: give the proxy's "
                    "address, e.g. 127.0.0.1 for a proxy in the same pod"
                ) from None
        return cls(tuple(networks), user_header, groups_header)

    def identity(self, request: Request) -> Identity | ProxyRefusal:
        """The user the proxy names for ``request``, or why the request is refused (one line)."""
        peer = request.client.host if request.client else ""
        named = self.user_header.lower() in request.headers
        if not self._trusted(peer):
            if named:
                return ProxyRefusal(
                    f"Refused: {peer or 'the caller'} is not the trusted proxy, so its "
                    f"{self.user_header} header is not believed"
                )
            return ProxyRefusal(
                f"Refused: this UI serves its users through their authenticating proxy only, "
                f"and {peer or 'the caller'} is not it"
            )
        users = request.headers.getlist(self.user_header)
        if len(users) > 1:
            # A proxy that adds its header beside the client's copy rather than replacing it:
            # which one is the user is anybody's guess, and the first may be the client's.
            return ProxyRefusal(
                f"Refused: the request carries {len(users)} {self.user_header} headers, so whom "
                f"it is for is not known: the authenticating proxy must remove every "
                f"{self.user_header} and {self.groups_header} the client sent and set one of its "
                "own",
                400,
            )
        user = users[0].strip() if users else ""
        if not user:
            return ProxyRefusal(
                f"Refused: the authenticating proxy named no user (no {self.user_header} "
                "header): configure it to pass the signed-in user on",
                401,
            )
        groups = [
            group.strip()
            for value in request.headers.getlist(self.groups_header)
            for group in value.split(",")
            if group.strip()
        ]
        for name in (user, *groups):
            if name.startswith("system:"):
                return ProxyRefusal(
                    "Refused: the proxy named a Kubernetes identity (system:…): the UI never "
                    "impersonates those"
                )
        try:
            return Identity(user=user, groups=tuple(groups))
        except ConfigError as exc:
            return ProxyRefusal(
                f"Refused: the proxy's {self.user_header} or {self.groups_header}: {exc}"
            )

    def _trusted(self, peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.networks)
