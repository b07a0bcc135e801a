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
policy of deploy/ui/ does). The same Secret keeps the sessions signed out (:class:`SignOuts`), so
that a sign-out at one replica is honoured at every other without a grant more.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import trio
from starlette.requests import Request

from kokumi.core import sessioncookie
from kokumi.kube.client import Client
from kokumi.kube.errors import AlreadyExists, ConfigError, Conflict, KubeError, NotFound
from kokumi.kube.identity import Identity
from kokumi.kube.resources import SECRETS
from kokumi.objects import Resource

__all__ = [
    "KEY_NAMESPACE",
    "KEY_SECRET",
    "SELF_SUBJECT_REVIEWS",
    "ProxyRefusal",
    "ProxyTrust",
    "SessionKeyError",
    "SignOuts",
    "Who",
    "session_key",
    "who_is",
]

log = logging.getLogger("kokumi.ui")

KEY_NAMESPACE: Final = "kokumi-signing"
KEY_SECRET: Final = "kokumi-clusters-ui-session"  # noqa: S105 - a name, not its value
KEY_FIELD: Final = "key"
SIGNED_OUT_FIELD: Final = "signedOut"
"""Where the sign-outs are kept (:class:`~kokumi.core.sessioncookie.SignedOut`), beside the key."""
ENDED_FIELD: Final = "ended"
"""Where replicas before ``signedOut`` kept a list of session ids: read until it empties."""
SIGN_OUTS_SECONDS: Final = 1.0
"""How long a replica trusts its copy of the signed-out sessions before it reads them again."""

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
    return _field(secret, KEY_FIELD)


@attrs.define
class SignOuts:
    """The sessions signed out at any replica, kept beside the session key, in its Secret.

    Sessions live in their cookies, so a sign-out at one replica alone would leave a copy of the
    cookie working at the others until it expired. Each sign-out is written into the Secret's
    ``data.signedOut`` as "the sessions of this user issued until now"
    (:class:`~kokumi.core.sessioncookie.SignedOut`): one entry per user, however often they sign
    in and out, at most :data:`~kokumi.core.sessioncookie.MAX_SIGNED_OUT_USERS` of them (then
    the oldest are folded into one time before which every session is out), so the Secret stays
    a few KiB and no sign-out is ever dropped for another. It is written with the
    resourceVersion it was read at, so that two replicas signing out at once both keep theirs;
    a sign-out the Secret already covers writes nothing, and sign-outs that arrive while one is
    written go together in the next write, so a replica writes at most one at a time.

    Each replica reads it again when its copy is older than ``seconds``, on the next request
    that needs it: a signed-out cookie is refused everywhere within about that long. One that
    cannot be read keeps the last one read (and says so once in the log): the pages themselves
    need the hub anyway.
    """

    own: Client
    namespace: str = KEY_NAMESPACE
    name: str = KEY_SECRET
    seconds: float = SIGN_OUTS_SECONDS
    clock: Callable[[], float] = time.time
    _ended: sessioncookie.SignedOut = attrs.field(factory=sessioncookie.SignedOut)
    _read_at: float = -math.inf
    _failing: bool = False
    _lock: trio.Lock = attrs.field(factory=trio.Lock)
    _writing: trio.Lock = attrs.field(factory=trio.Lock)
    _pending: list[sessioncookie.Sealed] = attrs.field(factory=list)
    written: int = 0
    """Bytes of Secret written so far (its ``data``, as sent): what sign-outs cost the hub and
    every replica that reads them."""

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    async def ended(self) -> sessioncookie.SignedOut:
        """The signed-out sessions, read again if the copy is older than ``seconds``."""
        if trio.current_time() - self._read_at < self.seconds:
            return self._ended
        async with self._lock:
            if trio.current_time() - self._read_at >= self.seconds:
                try:
                    secret = await self.own.get(SECRETS, self.name, namespace=self.namespace)
                except KubeError as exc:
                    self._said(f"cannot read the sessions signed out from {self.where}: {exc}")
                else:
                    self._ended = _signed_out(secret)
                    self._failing = False
                self._read_at = trio.current_time()
        return self._ended

    async def add(self, session: sessioncookie.Sealed, lifetime: float) -> bool:
        """Tell every replica that ``session``, and its user's older sessions, are signed out;
        False if it could not (said in the log: the replica that answered has ended it anyway).
        ``lifetime`` is how long a session lasts: an entry is dropped once all it covers expired.
        """
        self._pending.append(session)
        async with self._writing:
            if not any(each is session for each in self._pending):
                return True  # written with another sign-out while this one waited
            for _ in range(5):
                batch = list(self._pending)
                try:
                    secret = await self.own.get(SECRETS, self.name, namespace=self.namespace)
                    current = _signed_out(secret)
                    ended = current
                    for each in batch:
                        ended = ended.with_sign_out(each, self.clock(), lifetime) or ended
                    if ended is current:  # covered already: nothing to write
                        self._done(batch, current)
                        return True
                    data = {**(secret.get("data") or {}), SIGNED_OUT_FIELD: _b64(
                        ended.text().encode()
                    )}  # fmt: skip
                    data.pop(ENDED_FIELD, None)
                    if ended.legacy:
                        data[ENDED_FIELD] = _b64(json.dumps(ended.legacy).encode())
                    body = {**secret, "data": data}
                    await self.own.replace(SECRETS, body, namespace=self.namespace)
                except Conflict:
                    continue
                except KubeError as exc:
                    self._done([session], None)  # the others waiting try again for themselves
                    log.warning(
                        "a sign-out is not shared with the other replicas: cannot write it into "
                        "%s: %s: apply deploy/ui/ (its Role lets the UI update that Secret)",
                        self.where, exc,
                    )  # fmt: skip
                    return False
                self.written += sum(len(k) + len(v) for k, v in data.items())
                self._done(batch, ended)
                return True
            self._done([session], None)
            log.warning(
                "a sign-out is not shared: %s kept changing while it was written", self.where
            )
            return False

    def _done(
        self, batch: list[sessioncookie.Sealed], ended: sessioncookie.SignedOut | None
    ) -> None:
        self._pending = [p for p in self._pending if not any(p is b for b in batch)]
        if ended is not None:
            self._ended, self._read_at = ended, trio.current_time()

    def _said(self, line: str) -> None:
        if not self._failing:
            log.warning("%s: the last list read is used meanwhile", line)
        self._failing = True


def _signed_out(secret: dict[str, Any]) -> sessioncookie.SignedOut:
    return sessioncookie.SignedOut.of(_field(secret, SIGNED_OUT_FIELD), _field(secret, ENDED_FIELD))


def _field(secret: dict[str, Any], field: str) -> bytes | None:
    value = (secret.get("data") or {}).get(field)
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
