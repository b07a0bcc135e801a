"""Sealed session cookies, per-request identities and the proxy's name, without a server.

A sealed cookie opens to exactly what was sealed, with the key it was sealed with, before it
expires, and to nothing else: not with one bit changed, not with another key. An Identity puts
exactly the headers the API server reads on a request, and refuses what a header cannot carry.
"""

from __future__ import annotations

import base64
import json
import time

import attrs
import httpx
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from kokumi.core import sessioncookie
from kokumi.core.sessioncookie import (
    Keys,
    Sealed,
    remembered,
    service_account_namespace,
    token_expiry,
)
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.kube.errors import ConfigError
from kokumi.kube.identity import Identity
from kokumi.kube.resources import SECRETS
from kokumi.testing import canary
from kokumi.testing.controlplane import CertificateAuthority
from kokumi.ui.app import create_app
from kokumi.ui.incluster import (
    KEY_NAMESPACE,
    KEY_SECRET,
    SIGN_OUTS_SECONDS,
    ProxyTrust,
    SignOuts,
    session_key,
)
from kokumi.ui.pages import UI, end_session, still_signed_in
from kokumi.ui.security import COOKIE, SealedSessions
from tests.support.fakeapi import FakeApi

KEY = bytes(range(32))
NONCE = b"\x01" * sessioncookie.NONCE_BYTES
names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
sessions = st.builds(
    Sealed,
    session_id=names,
    expires=st.integers(min_value=1, max_value=2**40),
    user=names,
    groups=st.lists(names, max_size=4).map(tuple),
    token=st.none() | names,
    namespaces=st.lists(names, max_size=sessioncookie.MAX_REMEMBERED).map(tuple),
    issued=st.integers(min_value=0, max_value=2**50),
)


@given(sessions)
def test_a_sealed_session_opens_to_itself_until_it_expires(session: Sealed) -> None:
    keys = Keys(KEY)
    cookie = keys.seal(session, NONCE)
    assert keys.open(cookie, session.expires - 1) == session
    assert keys.open(cookie, session.expires) is None
    assert Keys(bytes(reversed(KEY))).open(cookie, 0) is None
    with_canary = attrs.evolve(session, token=canary.token())
    assert canary.found(keys.seal(with_canary, NONCE)) == []


@given(sessions, st.data())
def test_a_changed_cookie_opens_to_nothing(session: Sealed, data: st.DataObject) -> None:
    keys = Keys(KEY)
    raw = bytearray(base64.urlsafe_b64decode(keys.seal(session, NONCE) + "=="))
    index = data.draw(st.integers(0, len(raw) - 1))
    raw[index] ^= data.draw(st.integers(1, 255))
    forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    assert keys.open(forged, 0) is None


@given(st.text(max_size=200))
def test_any_text_as_a_cookie_opens_to_nothing(text: str) -> None:
    assert Keys(KEY).open(text, 0) is None


def test_the_csrf_token_is_the_sessions_on_every_replica_and_needs_the_key() -> None:
    assert Keys(KEY).csrf("s1") == Keys(KEY).csrf("s1")
    assert Keys(KEY).csrf("s1") != Keys(KEY).csrf("s2")
    assert Keys(KEY).csrf("s1") != Keys(bytes(reversed(KEY))).csrf("s1")
    with pytest.raises(ValueError, match="needs 32"):
        Keys(b"short")


def _jwt(claims: object) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.signature"


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (_jwt({"exp": 1900000000}), 1900000000),
        (_jwt({"exp": "soon"}), None),
        (_jwt({"exp": True}), None),
        (_jwt(["exp"]), None),
        ("not.a-jwt.at all", None),
        ("opaque-token", None),
    ],
)
def test_a_tokens_expiry_is_read_from_its_claims_when_it_has_one(
    token: str, expected: int | None
) -> None:
    assert token_expiry(token) == expected


def test_a_session_ends_with_its_token_and_signing_out_ends_it_here() -> None:
    now = [1_000_000.0]
    store = SealedSessions(Keys(KEY), lifetime=8 * 3600, clock=lambda: now[0])
    cookie, session = store.start("alice", token=_jwt({"exp": 1_000_600}))
    assert session.expires == 1_000_600
    assert "Max-Age=600;" in store.cookie_header(cookie) + ";"
    assert store.cookie_header(cookie, secure=True).endswith("; Secure")
    assert store.get(cookie) is not None
    store.end(cookie)
    assert store.get(cookie) is None
    long_lived, _ = store.start("bob")
    now[0] += 8 * 3600
    assert store.get(long_lived) is None


def test_an_identity_sends_a_token_of_its_own_or_impersonates() -> None:
    secret = canary.token()
    own = Identity(token=secret)
    assert own.headers() == [("Authorization", f"Bearer {secret}")]
    assert secret not in repr(own)
    # An identity provider's ID token with its claims is longer than a ServiceAccount's.
    assert Identity(token="e" * 2500).headers() == [("Authorization", f"Bearer {'e' * 2500}")]
    assert Identity(user="bob", groups=("a", "b")).headers() == [
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "a"),
        ("Impersonate-Group", "b"),
    ]
    for refused in (
        {},
        {"token": secret, "user": "bob"},
        {"groups": ("a",), "token": secret},
        {"user": "bob\r\nX-Evil: 1"},
        {"user": "bob", "groups": ("",)},
        {"token": f"{secret}\n"},
        {"token": "x" * (16 * 1024 + 1)},
    ):
        with pytest.raises(ConfigError) as error:
            Identity(**refused)
        assert canary.found(str(error.value)) == []


async def test_each_request_carries_its_identity_and_not_the_connections_token() -> None:
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={"kind": "Status"})

    config = Config(server="https://hub.invalid", token=StaticToken("the-uis-own"))
    async with Client(config, transport=httpx.MockTransport(answer)) as client:
        await client.acting_as(Identity(token="users-own")).request("GET", "/version")
        await client.acting_as(Identity(user="bob", groups=("g1", "g2"))).request("GET", "/x")
        await client.request("GET", "/version")
        assert client.identity is None
    own, impersonated, plain = seen
    assert own.get_list("authorization") == ["Bearer users-own"]
    assert impersonated.get_list("authorization") == ["Bearer the-uis-own"]
    assert impersonated["impersonate-user"] == "bob"
    assert impersonated.get_list("impersonate-group") == ["g1", "g2"]
    assert plain.get_list("authorization") == ["Bearer the-uis-own"]
    assert "impersonate-user" not in plain


async def test_a_users_token_is_refused_over_a_client_certificate_connection() -> None:
    authority = CertificateAuthority.create("test")
    cert, key = authority.issue("kokumi-ui")
    config = Config(server="https://hub.invalid", client_certificate=cert, client_key=key)
    async with Client(config) as client:
        with pytest.raises(ConfigError, match="the API server would act as the certificate's"):
            client.acting_as(Identity(token="users-own"))
        assert client.acting_as(Identity(user="bob")).identity == Identity(user="bob")


def test_the_trusted_proxy_is_named_by_address() -> None:
    trust = ProxyTrust.parse(["127.0.0.1", "10.0.0.0/8"], "X-Forwarded-User", "X-Forwarded-Groups")
    assert [str(n) for n in trust.networks] == ["127.0.0.1/32", "10.0.0.0/8"]
    with pytest.raises(ValueError, match="is not an address or CIDR"):
        ProxyTrust.parse(["proxy.example"], "X-Forwarded-User", "X-Forwarded-Groups")


async def test_a_request_naming_two_users_through_the_proxy_is_refused() -> None:
    """A proxy that adds its X-Forwarded-User beside the client's copy instead of replacing it:
    the UI used the first, which may be the client's. Now the request is refused, unasked."""
    asked: list[httpx.Request] = []

    def hub(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json={"kind": "ClusterList", "items": []})

    trust = ProxyTrust.parse(["10.1.2.3"], "X-Forwarded-User", "X-Forwarded-Groups")
    config = Config(server="https://hub.invalid", token=StaticToken("the-uis-own"))
    async with Client(config, transport=httpx.MockTransport(hub)) as account:
        ui = UI(account, SealedSessions(Keys(KEY)), proxy=trust)
        transport = httpx.ASGITransport(app=create_app(ui), client=("10.1.2.3", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://ui.example") as browser:
            two = [("X-Forwarded-User", "mallory"), ("X-Forwarded-User", "alice")]
            form = {"namespace": "platform", "name": "forged", "how": "incluster"}
            for refused in (
                await browser.get("/clusters", headers=two),
                await browser.post(
                    "/clusters/new", data=form, headers=[*two, ("Sec-Fetch-Site", "same-origin")]
                ),
            ):
                assert refused.status_code == 400
                assert refused.text == (
                    "Refused: the request carries 2 X-Forwarded-User headers, so whom it is for "
                    "is not known: the authenticating proxy must remove every X-Forwarded-User "
                    "and X-Forwarded-Groups the client sent and set one of its own."
                )
                assert "set-cookie" not in refused.headers
            assert asked == []
            one = await browser.get("/clusters", headers={"X-Forwarded-User": "alice"})
            assert one.status_code == 200
    assert [r.headers["impersonate-user"] for r in asked] == ["alice"]


@given(st.lists(st.sampled_from("abcdefghijkl"), max_size=30))
def test_a_session_remembers_the_latest_namespaces_typed_and_no_more(typed: list[str]) -> None:
    kept: tuple[str, ...] = ()
    for namespace in typed:
        kept = remembered(kept, namespace)
        assert kept[-1] == namespace
    assert len(kept) == len(set(kept)) <= sessioncookie.MAX_REMEMBERED
    latest = list(dict.fromkeys(reversed(typed)))[: sessioncookie.MAX_REMEMBERED]
    assert kept == tuple(reversed(latest))


def test_a_service_accounts_namespace_is_read_from_its_username_only() -> None:
    assert service_account_namespace("system:serviceaccount:team-a:alice") == "team-a"
    for other in ("alice", "system:serviceaccount:team-a", "system:serviceaccounts:team-a",
                  "system:serviceaccount::alice", "system:serviceaccount:a:b:c",
                  "oidc:system:serviceaccount:a"):  # fmt: skip
        assert service_account_namespace(other) is None


def test_remembered_namespaces_are_sealed_again_the_oldest_dropped_to_fit_a_cookie() -> None:
    store = SealedSessions(Keys(KEY))
    cookie, session = store.start("alice", token="t" * 2700)
    session.namespaces = tuple(f"{'n' * 60}-{i}" for i in range(sessioncookie.MAX_REMEMBERED))
    header = store.updated(session)
    assert header is not None
    value = header.split(";")[0].split("=", 1)[1]
    assert len(value) <= sessioncookie.MAX_COOKIE
    again = store.get(value)
    assert again is not None and again.csrf == session.csrf
    assert 0 < len(again.namespaces) < sessioncookie.MAX_REMEMBERED
    assert again.namespaces == session.namespaces[-len(again.namespaces) :]
    assert store.get(cookie) is not None  # the old cookie is the same session, still valid


@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 50)), max_size=40),
    st.integers(1, 5),
)
def test_a_sign_out_is_never_forgotten_while_its_session_lives_and_the_list_stays_bounded(
    outs: list[tuple[str, int]], most: int
) -> None:
    """Sign-outs of up to eight users, one second apart, at most ``most`` users kept one by one:
    every session signed out (and each older one of its user's) stays refused while it could
    still be used, and the list never holds more than ``most`` users."""
    lifetime = 1000.0
    signed_out = sessioncookie.SignedOut()
    ended: list[Sealed] = []
    for second, (user, issued_at) in enumerate(outs):
        now = 10_000.0 + second
        session = Sealed(
            f"s{second}", int(now + lifetime), user, issued=int(now * 1000) - issued_at
        )
        signed_out = signed_out.with_sign_out(session, now, lifetime, most) or signed_out
        ended.append(session)
        assert len(signed_out.users) <= most
        assert all(signed_out.refuses(s) for s in ended)
        # A session of the same user issued after the sign-out is not refused by it (only, past
        # ``most`` users, by the time the oldest were folded into, which is older).
        later = Sealed("later", int(now + lifetime), user, issued=int(now * 1000) + 1)
        assert not signed_out.refuses(later)
    again = sessioncookie.SignedOut.of(signed_out.text())
    assert again.users == signed_out.users and again.before == signed_out.before


def test_sign_outs_keep_one_entry_per_user_and_drop_it_once_its_sessions_expired() -> None:
    signed_out = sessioncookie.SignedOut()
    for i in range(4000):
        session = Sealed(f"s{i}", 2000 + i, "mallory", issued=(1000 + i) * 1000)
        signed_out = signed_out.with_sign_out(session, 1000.0 + i, 3600.0) or signed_out
    assert list(signed_out.users.values()) == [4999 * 1000 + 1]
    assert "mallory" not in signed_out.text() and len(signed_out.text()) < 80
    # Already signed out: nothing to write.
    assert signed_out.with_sign_out(Sealed("s0", 2000, "mallory", issued=1), 5000.0, 3600.0) is None
    # Every session it covers has expired: the next sign-out drops it.
    alice = Sealed("a", 20_000, "alice", issued=9000 * 1000)
    after = signed_out.with_sign_out(alice, 9000.0, 3600.0)
    assert after is not None and list(after.users) == [sessioncookie.user_key("alice")]
    # An older replica's list is honoured until its cookies expire, then dropped.
    old = sessioncookie.SignedOut.of(None, b'{"old": 9500, "older": 8000}')
    assert old.refuses(Sealed("old", 9500, "bob")) and not old.refuses(Sealed("new", 9500, "bob"))
    assert old.with_sign_out(alice, 9000.0, 3600.0).legacy == {"old": 9500}  # type: ignore[union-attr]


def test_a_signed_out_list_that_is_not_one_refuses_nothing_more() -> None:
    for text in (None, b"", b"[1]", b"not json", b'"x"'):
        assert sessioncookie.ended_of(text) == {}
    assert sessioncookie.ended_of(b'{"a": 5, "b": "5", "c": true, "d": 1.5}') == {"a": 5}


def test_a_session_signed_out_elsewhere_is_refused_here() -> None:
    store = SealedSessions(Keys(KEY))
    cookie, _ = store.start("alice")
    other = SealedSessions(Keys(KEY))
    assert other.get(cookie) is not None
    ended = store.end(cookie)
    assert ended is not None and store.get(cookie) is None
    other.elsewhere = store.signed_out
    assert other.get(cookie) is None
    # As is every older session of the same user's, and no newer one, nor another user's.
    newer, _ = store.start("alice")
    bob, _ = store.start("bob")
    assert other.get(newer) is not None and other.get(bob) is not None


async def test_a_victims_sign_out_outlasts_4000_sign_outs_of_another_user_at_every_replica(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two replicas sharing the session key's Secret on an in-process hub: alice signs out at
    the first, then mallory signs in and out 4,000 times there. Alice's cookie, put back at the
    second, is refused, and the Secret stays a few KiB (a bounded list of session ids, which
    dropped those expiring soonest, forgot her and grew to about 200 KiB)."""
    hub = FakeApi(namespaces=("default", KEY_NAMESPACE))
    async with Client(Config(server="https://hub.invalid"), transport=hub) as account:
        keys = Keys(await session_key(account))
        now = [time.time()]  # the replicas' wall clock, a second a cycle (sessions last 8 h)

        def clock() -> float:
            return now[0]

        first = UI(
            account, SealedSessions(keys, clock=clock), sign_outs=SignOuts(account, clock=clock)
        )
        second = UI(
            account, SealedSessions(keys, clock=clock), sign_outs=SignOuts(account, clock=clock)
        )
        assert isinstance(first.sessions, SealedSessions)
        victim, _ = first.sessions.start("system:serviceaccount:team:alice", token="alice")
        assert await still_signed_in(second, _request(victim))
        await end_session(first, _request(victim))
        for _ in range(4000):
            now[0] += 1.0
            cookie, _ = first.sessions.start("system:serviceaccount:team:mallory", token="m")
            await end_session(first, _request(cookie))
            assert not await still_signed_in(first, _request(cookie))
        await trio.sleep(SIGN_OUTS_SECONDS)  # the second's copy is read again
        assert not await still_signed_in(second, _request(victim))
        assert not await still_signed_in(first, _request(victim))
        secret = await account.get(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
        assert len(json.dumps(secret["data"])) < 1024
        # A new session of alice's after her sign-out is honoured at both.
        again, _ = first.sessions.start("system:serviceaccount:team:alice", token="alice")
        assert await still_signed_in(second, _request(again))


def _request(cookie: str) -> Request:
    return Request({"type": "http", "headers": [(b"cookie", f"{COOKIE}={cookie}".encode())]})
