"""A web session kept whole in its cookie, sealed with a key every replica of the UI shares.

In a cluster the UI runs as several replicas behind one Service, and restarts: a session kept in
one process's memory would sign its user out at the next request another replica answers. So the
cookie carries the session itself, encrypted and authenticated with AES-GCM under a key the
replicas read from one Secret: a bearer token in it is never readable by the browser, by a proxy
that logs cookies, or by anyone without the key, and a cookie changed in one bit opens to nothing.
The CSRF token is derived from the session's id with a second key, so any replica can check it.

Pure: the caller supplies the time and the random nonce.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any, Final

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "KEY_BYTES",
    "MAX_COOKIE",
    "MAX_REMEMBERED",
    "MAX_SIGNED_OUT_USERS",
    "NONCE_BYTES",
    "Keys",
    "Sealed",
    "SignedOut",
    "ended_of",
    "remembered",
    "service_account_namespace",
    "token_expiry",
]

KEY_BYTES: Final = 32
"""The shared key's length: 256 random bits, from which the cookie and CSRF keys are derived."""

NONCE_BYTES: Final = 12
MAX_COOKIE: Final = 4000
"""The longest cookie value browsers keep for sure (RFC 6265 asks them for 4096 with the name)."""

MAX_REMEMBERED: Final = 8
"""The namespaces a session remembers its user typed, the latest last: enough for a team's few,
small enough for a cookie that also carries a token."""

MAX_SIGNED_OUT_USERS: Final = 1000
"""The users whose sign-outs are kept one by one (each one entry, whatever their number of
sign-outs: at most about 53 KiB in the session key's Secret, read by each replica about once a
second). Past it the oldest sign-outs are folded into one time before which every session is
signed out: more sessions end than asked, none that was signed out comes back."""

_AAD: Final = b"kokumi-ui-session/1"


@attrs.frozen
class Sealed:
    """What a session cookie holds: who, until when (Unix seconds), the user's token if any, the
    namespaces the user looked in (where to look again when they may not list them all), and
    when it was issued (Unix milliseconds; 0 in a cookie sealed before cookies said so): a
    sign-out ends its user's sessions issued until then (:class:`SignedOut`)."""

    session_id: str
    expires: int
    user: str
    groups: tuple[str, ...] = ()
    token: str | None = attrs.field(default=None, repr=False)
    namespaces: tuple[str, ...] = ()
    issued: int = 0


def _derive(master: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(master)


class Keys:
    """The cookie key and the CSRF key, both derived from the one shared key (HKDF-SHA256)."""

    def __init__(self, master: bytes) -> None:
        if len(master) < KEY_BYTES:
            raise ValueError(f"the session key is {len(master)} bytes: it needs {KEY_BYTES}")
        self._cookie = AESGCM(_derive(master, b"kokumi-ui cookie"))
        self._csrf = _derive(master, b"kokumi-ui csrf")

    def __repr__(self) -> str:
        return "Keys(...)"

    def seal(self, session: Sealed, nonce: bytes) -> str:
        """The cookie value: base64url of nonce + AES-GCM ciphertext of the session's JSON."""
        if len(nonce) != NONCE_BYTES:
            raise ValueError(f"a nonce is {NONCE_BYTES} bytes")
        payload = {
            "s": session.session_id,
            "e": session.expires,
            "u": session.user,
            "g": list(session.groups),
        }
        if session.token is not None:
            payload["t"] = session.token
        if session.namespaces:
            payload["n"] = list(session.namespaces)
        if session.issued:
            payload["i"] = session.issued
        plain = json.dumps(payload, separators=(",", ":")).encode()
        sealed = nonce + self._cookie.encrypt(nonce, plain, _AAD)
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def open(self, cookie: str, now: float) -> Sealed | None:
        """The session in ``cookie``, or None: not sealed with this key, changed, or expired."""
        try:
            raw = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
        except (binascii.Error, ValueError):
            return None
        if len(raw) <= NONCE_BYTES:
            return None
        try:
            plain = self._cookie.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _AAD)
        except InvalidTag:
            return None
        session = _session(plain)
        if session is None or session.expires <= now:
            return None
        return session

    def csrf(self, session_id: str) -> str:
        """The session's CSRF token: the same on every replica, unguessable without the key."""
        digest = hmac.new(self._csrf, session_id.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _session(plain: bytes) -> Sealed | None:
    try:
        data: Any = json.loads(plain)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    session_id, expires, user = data.get("s"), data.get("e"), data.get("u")
    groups, token, namespaces = data.get("g", []), data.get("t"), data.get("n", [])
    issued = data.get("i", 0)
    if not (isinstance(session_id, str) and isinstance(user, str)):
        return None
    if not isinstance(expires, int) or isinstance(expires, bool):
        return None
    if not (isinstance(groups, list) and all(isinstance(g, str) for g in groups)):
        return None
    if token is not None and not isinstance(token, str):
        return None
    if not (isinstance(namespaces, list) and all(isinstance(n, str) for n in namespaces)):
        return None
    if not isinstance(issued, int) or isinstance(issued, bool):
        return None
    return Sealed(session_id, expires, user, tuple(groups), token, tuple(namespaces), issued)


def remembered(namespaces: tuple[str, ...], namespace: str) -> tuple[str, ...]:
    """``namespaces`` with ``namespace`` as the latest, at most :data:`MAX_REMEMBERED` of them:
    the oldest is forgotten first."""
    kept = (*(n for n in namespaces if n != namespace), namespace)
    return kept[-MAX_REMEMBERED:]


def service_account_namespace(user: str) -> str | None:
    """The namespace of a ServiceAccount's username (``system:serviceaccount:NS:NAME``), else
    None: where a ServiceAccount's own objects usually are, and so where to look first."""
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[2] and parts[3]:
        return parts[2]
    return None


def token_expiry(token: str) -> int | None:
    """When a JSON Web Token says it expires (its ``exp``), unverified; None if it says nothing.

    Only ever used to end a session sooner: a session must not outlive its token, and the API
    server, which verifies the token, refuses it after that anyway.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, int | float) and not isinstance(exp, bool) and 0 < exp < 2**62:
        return int(exp)
    return None


def ended_of(text: str | bytes | None) -> dict[str, int]:
    """The signed-out sessions (id -> when its cookie expires) that replicas before
    :class:`SignedOut` wrote as JSON, still honoured until they expire; anything else in it is
    left out, so a hand-edited list refuses fewer cookies, never more."""
    if not text:
        return {}
    try:
        data: Any = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(sid): until
        for sid, until in data.items()
        if isinstance(until, int) and not isinstance(until, bool)
    }


def user_key(user: str) -> str:
    """How :class:`SignedOut` names a user: 128 bits of SHA-256 of the name, so that an entry is
    22 characters whatever the name's length (a proxy may name users by long strings) and the
    Secret lists no names."""
    digest = hashlib.sha256(user.encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@attrs.frozen
class SignedOut:
    """The sessions signed out, in constant space per user: "the sessions of user U issued
    before T" (``users``, by :func:`user_key`; T in Unix milliseconds), and ``before``, a time
    before which every session is signed out, whoever's (what the oldest entries are folded into
    when there are more than :data:`MAX_SIGNED_OUT_USERS` users).

    A sign-out ends the session of its cookie and every older one of the same user: however
    often a user signs in and out, they are one entry, and nobody's sign-out is ever dropped to
    make room for another's (a list of session ids, bounded, had to drop some: a victim's
    signed-out cookie came back after another user signed in and out 4,000 times). ``legacy``
    is the list of session ids older replicas wrote, honoured until those cookies expire.
    """

    users: dict[str, int] = attrs.field(factory=dict)
    before: int = 0
    legacy: dict[str, int] = attrs.field(factory=dict)

    def refuses(self, session: Sealed) -> bool:
        """Whether ``session`` was signed out: issued before its user's sign-out, or before
        ``before``, or named by an older replica's list."""
        if session.issued < self.before or session.session_id in self.legacy:
            return True
        return session.issued < self.users.get(user_key(session.user), 0)

    def with_sign_out(
        self, session: Sealed, now: float, lifetime: float, most: int = MAX_SIGNED_OUT_USERS
    ) -> SignedOut | None:
        """This with ``session`` and every older session of its user signed out; None when it
        already is (nothing to write). Entries whose sessions have all expired (``lifetime``
        seconds after T) are dropped; past ``most`` users the oldest are folded into
        ``before``, which ends more sessions than asked and never forgets one."""
        if self.refuses(session):
            return None
        now_ms, life_ms = int(now * 1000), int(lifetime * 1000)
        users = {u: t for u, t in self.users.items() if t + life_ms > now_ms}
        key = user_key(session.user)
        users[key] = max(users.get(key, 0), session.issued + 1)
        before = self.before if self.before + life_ms > now_ms else 0
        if len(users) > most:
            oldest = sorted(users.items(), key=lambda item: (item[1], item[0]))
            for user, at in oldest[: len(users) - most]:
                before = max(before, at)
                del users[user]
            users = {u: t for u, t in users.items() if t > before}
        legacy = {sid: until for sid, until in self.legacy.items() if until > now}
        return SignedOut(users, before, legacy)

    def text(self) -> str:
        """As the Secret keeps it: compact JSON, in a stable order (the legacy list apart)."""
        return json.dumps(
            {"before": self.before, "users": dict(sorted(self.users.items()))},
            separators=(",", ":"),
        )

    @classmethod
    def of(cls, text: str | bytes | None, legacy: str | bytes | None = None) -> SignedOut:
        """What a replica wrote (:meth:`text`), and an older replica's list; anything else in it
        is left out, so a hand-edited one refuses fewer cookies, never more."""
        old = ended_of(legacy)
        try:
            data: Any = json.loads(text) if text else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        users, before = data.get("users"), data.get("before")
        return cls(
            {
                str(user): at
                for user, at in (users.items() if isinstance(users, dict) else ())
                if isinstance(at, int) and not isinstance(at, bool)
            },
            before if isinstance(before, int) and not isinstance(before, bool) else 0,
            old,
        )
