"""Live status: what a stream follows and sends (pure), and the stream against the real hub.

The hub tests serve the UI over HTTP (Hypercorn, as ``kokumi ui`` does): an ASGI transport in
memory answers only once a response is complete, and a live stream lasts seconds. A status
change written to the hub arrives as an event, for the signed-in user (by token, locally, or the
trusted proxy's, impersonated) and under their RBAC, also between two responses (resumed from
the last event id); a user who may not list or watch there gets the one event that tells the
script to fall back to reloading; no token crosses the stream; it needs a session (locally under
the session's secret path too), a forged write to it is refused by the Guard, and signing out
or a revoked token ends it.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import clusterview
from kokumi.kube.config import Config
from kokumi.kube.errors import Gone
from kokumi.testing import Kubectl, canary
from kokumi.testing.controlplane import APIServer
from kokumi.ui import live
from kokumi.ui.incluster import ProxyTrust
from kokumi.ui.pages import REVOKED_LINE
from kokumi.ui.security import COOKIE
from kokumi.ui.serve import serve_in_cluster, serve_ui
from tests.support.deploy import apply, ensure_namespace, wait_until
from tests.support.ui import UI_FILES, install_ui_account, refused_by_the_hub, user

SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}
FRESH = httpx.Limits(max_keepalive_connections=0)
"""A connection per request: the server closes one idle for 5 s, which a browser notices and
httpx, reusing it after a wait, would not."""
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{connection: InCluster, description: "a <b>bold</b> one"}}
"""


# --- the pure part ----------------------------------------------------------------------------


def test_the_shown_clusters_are_namespace_slash_name_once_each_and_bounded() -> None:
    assert live.parse_shown(["a/x", "b/y", "a/x"]) == [("a", "x"), ("b", "y")]
    for wrong, said in (
        ([], "name the Clusters to follow"),
        (["x"], "is not NAMESPACE/NAME"),
        (["../x"], "namespace"),
        (["a/.."], "Cluster"),
        (["a/b/c"], "Cluster"),
        ([f"a/n{i}" for i in range(live.MAX_SHOWN + 1)], f"at most {live.MAX_SHOWN}"),
    ):
        refused = live.parse_shown(wrong)
        assert isinstance(refused, str) and said in refused, (wrong, refused)
        assert "\n" not in refused


def test_a_page_watches_its_cluster_or_its_namespaces_or_all_of_them() -> None:
    assert live.watch_scopes([("a", "x")]) == [("a", "metadata.name=x")]
    assert live.watch_scopes([("a", "x"), ("a", "y"), ("b", "z")]) == [("a", None), ("b", None)]
    many = [(f"n{i}", "x") for i in range(live.MAX_WATCHES + 1)]
    assert live.watch_scopes(many) == [(None, None)]


def test_an_event_carries_what_the_row_shows_and_nothing_else() -> None:
    secret = canary.token("in-a-cluster")
    cluster = {
        "metadata": {"name": "edge", "namespace": "team",
                     "creationTimestamp": "2026-12-01T11:00:00Z", "annotations": {"note": secret},
                     "labels": {"k": secret}},
        "spec": {"connection": "Kubeconfig", "description": secret,
                 "kubeconfig": {"secretRef": {"name": secret}}},
        "status": {"server": "https://10.0.0.1:6443", "kubernetesVersion": "v1.31.2",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                   "message": "connected\nfine"}]},
    }  # fmt: skip
    event = live.event_of(cluster, NOW)
    assert event == {"key": "team/edge", "ready": "True", "reason": "Ready",
                     "message": "connected fine", "server": "https://10.0.0.1:6443",
                     "version": "v1.31.2"}  # fmt: skip
    assert canary.found(json.dumps(event)) == []


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=40), max_size=4))
def test_an_event_is_one_event_whatever_its_text(data: dict[str, str]) -> None:
    raw = live.sse("status", data).decode()
    assert raw.startswith("event: status\ndata: ") and raw.endswith("\n\n")
    assert raw.count("\n") == 3
    assert json.loads(raw.split("data: ", 1)[1]) == data


async def test_live_pages_are_bounded_per_session_the_oldest_closing_and_in_all() -> None:
    streams = live.Streams(per_session=2, per_process=3)
    first, second = streams.open("alice", "a"), streams.open("alice", "a")
    assert first is not None and second is not None
    third = streams.open("alice", "a")
    assert first.cancel_called and not second.cancel_called and third is not None
    assert streams.open("bob", "b") is not None and streams.count == 3
    assert streams.open("carol", "c") is None and streams.count == 3
    streams.close("alice", "a", second)
    assert streams.open("carol", "c") is not None
    assert live.live_url("/s/k", []) == ""


async def test_one_user_signed_in_many_times_holds_at_most_their_share_of_live_pages() -> None:
    streams = live.Streams()
    # Sixteen sessions of one token, four pages each: all 64 slots, were they kept by session.
    opened = [streams.open("mallory", f"session-{i}") for i in range(16) for _ in range(4)]
    held = [scope for scope in opened if scope is not None and not scope.cancel_called]
    assert len(held) == streams.count == live.PER_USER
    assert held == opened[-live.PER_USER :]  # the user's oldest closed, the newest kept
    # Everyone else still gets theirs.
    others = [streams.open(f"user-{i}", "s") for i in range(live.PER_PROCESS - live.PER_USER)]
    assert all(scope is not None for scope in others)
    assert streams.count == live.PER_PROCESS


def _stream(alive: Callable[[], Awaitable[bool]], lifetime: float = 8.0) -> live.LiveStream:
    # Reading a line, or a session ending, asks the hub nothing: no hub is given.
    return live.LiveStream(
        None,  # type: ignore[arg-type]
        frozenset({("team", "edge")}), [], alive, trio.CancelScope(), lambda: None, lambda: NOW,
        lifetime,
    )  # fmt: skip


async def test_a_watch_line_sends_only_the_shown_and_a_gone_version_is_listed_again() -> None:
    stream = _stream(_never)
    send, received = trio.open_memory_channel[live.Message](8)

    def line(kind: str, name: str, version: str, **extra: object) -> bytes:
        meta = {"name": name, "namespace": "team", "resourceVersion": version}
        return json.dumps({"type": kind, "object": {"metadata": meta, **extra}}).encode()

    path = "/apis/delivery.kokumi.dev/v1alpha1/namespaces/team/clusters"
    assert await stream._forward(0, path, line("MODIFIED", "other", "5"), "4", send) == "5"
    assert await stream._forward(0, path, line("BOOKMARK", "", "6"), "5", send) == "6"
    assert await stream._forward(0, path, line("MODIFIED", "edge", "7"), "6", send) == "7"
    assert await stream._forward(0, path, line("DELETED", "edge", "8"), "7", send) == "8"
    # Every line moves the version on, only a shown Cluster's is an event.
    assert received.receive_nowait() == ("", {}, 0, "5")
    assert received.receive_nowait() == ("", {}, 0, "6")
    kind, data, index, version = received.receive_nowait()
    assert (kind, data["key"], data["reason"], index, version) == (
        "status", "team/edge", clusterview.CHECKING, 0, "7"
    )  # fmt: skip
    assert received.receive_nowait() == ("gone", {"key": "team/edge"}, 0, "8")
    with pytest.raises(trio.WouldBlock):
        received.receive_nowait()
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                           "message": "too old resource version"}}  # fmt: skip
    with pytest.raises(Gone):
        await stream._forward(0, path, json.dumps(expired).encode(), "8", send)
    with pytest.raises(Gone):
        await stream._forward(0, path, b"not json", "8", send)


def test_a_reconnecting_page_resumes_from_its_versions_and_nothing_else() -> None:
    assert live.resumed("12,40", 2) == ["12", "40"]
    for wrong in ("", "12", "12,40,41", "12,x", "12,", "1" * 21 + ",2", "12;40"):
        assert live.resumed(wrong, 2) is None, wrong


async def _run(stream: live.LiveStream) -> bytes:
    """The whole response, from an ASGI server that never hears of a disconnect."""
    body = b""

    async def receive() -> dict[str, object]:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(message: MutableMapping[str, object]) -> None:
        nonlocal body
        chunk = message.get("body", b"")
        assert isinstance(chunk, bytes)
        body += chunk

    await stream({"type": "http"}, receive, send)
    return body


async def test_a_response_ends_with_its_versions_and_a_session_ending_says_reload(
    autojump_clock: trio.abc.Clock,
) -> None:
    ended = await _run(_stream(_never, lifetime=60))
    assert ended == b"retry: 500\nid: \n\n" + b"id: \n" + live.sse(
        "reload", {"reason": "the session ended"}
    )

    async def always() -> bool:
        return True

    # Signed in all along: the response ends after its lifetime, with the versions as its id.
    assert await _run(_stream(always, lifetime=8)) == b"retry: 500\nid: \n\nid: \n\n"


async def _never() -> bool:
    return False


# --- against the hub --------------------------------------------------------------------------


def _cluster(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> None:
    kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name=name, namespace=namespace))


def _ready(
    kubectl: Kubectl, hub: APIServer, namespace: str, name: str, *, ready: str = "True",
    reason: str = "Ready",
) -> None:  # fmt: skip
    """What the manager writes after a check: Ready (True when it passed), the server, the
    version."""
    status = {"status": {"server": "https://10.9.8.7:6443", "kubernetesVersion": "v1.31.4",
              "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                              "message": "connected as system:serviceaccount:kube-system:x",
                              "lastTransitionTime": "2026-12-01T12:00:00Z"}]}}  # fmt: skip
    kubectl(hub, "-n", namespace, "patch", "kcl", name, "--subresource=status", "--type=merge",
            "-p", json.dumps(status))  # fmt: skip


class Events:
    """The events of one open stream, read as they arrive; every byte kept."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.raw = ""
        self.last_id = ""
        self._lines = response.aiter_lines()

    async def rest(self) -> list[str]:
        """The kinds of the events left, until the response ends."""
        kinds = []
        try:
            while True:
                kinds.append((await self.next())[0])
        except AssertionError:
            return kinds

    async def next(self) -> tuple[str, dict[str, str]]:
        kind, data = "", ""
        async for line in self._lines:
            self.raw += line + "\n"
            if line.startswith("id: ") or line == "id:":
                self.last_id = line.removeprefix("id:").strip()
            elif line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
            elif not line and kind:
                return kind, json.loads(data)
        raise AssertionError(f"the stream ended; it said: {self.raw!r}")


@asynccontextmanager
async def in_cluster(hub: APIServer) -> AsyncIterator[httpx.AsyncClient]:
    """``kokumi ui --in-cluster`` on a port, and a browser (httpx) that talks to it."""
    own = install_ui_account(hub)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(functools.partial(serve_in_cluster, own, bind="127.0.0.1:0"))
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=FRESH) as browser:
            yield browser
        nursery.cancel_scope.cancel()


async def _sign_in(browser: httpx.AsyncClient, bearer: str) -> str:
    signed = await browser.post("/signin", data={"token": bearer}, headers=SAME_ORIGIN)
    assert signed.status_code == 303, signed.text
    page = await browser.get("/clusters")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


async def test_a_status_change_arrives_as_the_user_resumed_across_responses_until_sign_out(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    alice = user(hub, namespace, "alice", "get,list,watch")
    _cluster(kubectl, hub, namespace, "edge")
    _cluster(kubectl, hub, namespace, "other")
    raw = ""
    async with in_cluster(hub) as browser:
        csrf = await _sign_in(browser, alice)
        page = await browser.get(f"/clusters?namespace={namespace}")
        stream = re.search(r'data-live="([^"]+)"', page.text)
        assert stream is not None
        url = stream.group(1).replace("&amp;", "&")
        assert url == f"/clusters/live?c={namespace}%2Fedge&c={namespace}%2Fother"
        with trio.fail_after(60):
            async with browser.stream("GET", url) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.headers["cache-control"] == "no-store"
                events = Events(response)
                _ready(kubectl, hub, namespace, "edge")
                # The first event is the change: no ADDED for each Cluster on connect.
                kind, data = await events.next()
                assert (kind, data["key"], data["ready"], data["reason"]) == (
                    "status", f"{namespace}/edge", "True", "Ready"
                )  # fmt: skip
                assert data["server"] == "https://10.9.8.7:6443" and data["version"] == "v1.31.4"
                assert set(data) == {"key", "ready", "reason", "message", "server", "version"}
                assert await events.rest() == []  # the response ends, before the read timeout
            raw += events.raw
            # Changed between two responses: the next, resumed from the last id, brings it.
            _ready(kubectl, hub, namespace, "other", ready="False", reason="Unreachable")
            resume = {"Last-Event-ID": events.last_id}
            async with browser.stream("GET", url, headers=resume) as response:
                events = Events(response)
                kind, data = await events.next()
                assert (kind, data["key"], data["reason"]) == (
                    "status", f"{namespace}/other", "Unreachable"
                )  # fmt: skip
                # Signed out in another tab: the stream says reload, or has ended by then.
                out = await browser.post("/signout", data={"csrf": csrf}, headers=SAME_ORIGIN)
                assert out.status_code == 200
                assert await events.rest() in ([], ["reload"])
            raw += events.raw
            # Asked again, as the browser does: the session is gone, the sign-in page answers.
            again = await browser.get(url, headers={"Last-Event-ID": events.last_id})
            assert again.status_code == 401 and "text/html" in again.headers["content-type"]
    for text in (raw, page.text):
        assert alice not in text and alice.split(".")[1] not in text
    assert "kubeconfig" not in raw.lower() and "secret" not in raw.lower()


async def test_a_user_who_may_not_list_there_is_told_to_fall_back_and_rules_still_hold(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    elsewhere = f"{namespace}-b"
    ensure_namespace(hub, elsewhere)
    _cluster(kubectl, hub, elsewhere, "theirs")
    bob = user(hub, namespace, "bob", "get,list")  # may list here, not there, and not watch
    _cluster(kubectl, hub, namespace, "mine")
    async with in_cluster(hub) as browser:
        sessionless = await browser.get(f"/clusters/live?c={elsewhere}/theirs")
        assert sessionless.status_code == 401 and "text/event-stream" not in sessionless.text
        await _sign_in(browser, bob)
        refused = await browser.get(f"/clusters/live?c={elsewhere}/theirs")
        assert refused.status_code == 200
        assert (
            refused.text
            == live.sse("fallback", {"reason": "you may not list Clusters there"}).decode()
        )
        # Allowed to list, not to watch: the watch's 403 says the same, in its own words.
        with trio.fail_after(60):
            async with browser.stream("GET", f"/clusters/live?c={namespace}/mine") as response:
                kind, data = await Events(response).next()
        assert (kind, data) == ("fallback", {"reason": "you may not watch Clusters there"})
        # A write to it is a write: refused cross-site before any handler, and never allowed.
        forged = await browser.post(f"/clusters/live?c={namespace}/mine",
                                    headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
        assert forged.status_code == 403 and "Refused" in forged.text
        wrong = await browser.get("/clusters/live?c=../secrets")
        assert wrong.status_code == 400 and wrong.text.startswith("Refused: ")
        nothing = await browser.get("/clusters/live")
        assert nothing.status_code == 400


async def test_locally_the_stream_is_under_the_sessions_secret_path(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    _cluster(kubectl, hub, namespace, "edge")
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(functools.partial(serve_ui, config))
        async with httpx.AsyncClient(base_url=running.url, timeout=30, limits=FRESH) as browser:
            signed = await browser.get(running.sign_in_url.removeprefix(running.url))
            base = signed.headers["location"].removesuffix("/clusters")
            path = f"/clusters/live?c={namespace}/edge"
            assert (await browser.get(path)).status_code == 401  # the cookie alone: no
            with trio.fail_after(60):
                async with browser.stream("GET", base + path) as response:
                    assert response.status_code == 200
                    events = Events(response)
                    _ready(kubectl, hub, namespace, "edge")
                    kind, data = await events.next()
            assert (kind, data["key"], data["ready"]) == ("status", f"{namespace}/edge", "True")
        nursery.cancel_scope.cancel()


async def test_behind_the_trusted_proxy_the_stream_watches_as_the_proxys_user(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    own = install_ui_account(hub)
    apply(hub, UI_FILES / "optional" / "impersonate.yaml")
    _cluster(kubectl, hub, namespace, "edge")
    kubectl(hub, "-n", namespace, "create", "role", "bob", "--verb=get,list,watch",
            "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
    kubectl(hub, "-n", namespace, "create", "rolebinding", "bob", "--role=bob", "--user=bob")

    def impersonating() -> bool | None:
        can = kubectl(hub, "auth", "can-i", "watch", "clusters.delivery.kokumi.dev", "-n",
                      namespace, "--as=bob", check=False)  # fmt: skip
        return True if can.stdout.strip() == "yes" else None

    wait_until(impersonating, "bob may watch Clusters")
    proxy = ProxyTrust.parse(["127.0.0.1"], "X-Forwarded-User", "X-Forwarded-Groups")
    url = f"/clusters/live?c={namespace}/edge"
    async with trio.open_nursery() as nursery:
        served = functools.partial(serve_in_cluster, own, bind="127.0.0.1:0", proxy=proxy)
        base = await nursery.start(served)
        async with httpx.AsyncClient(base_url=base, timeout=30, limits=FRESH) as browser:
            as_bob = {"X-Forwarded-User": "bob"}
            assert (await browser.get("/clusters", headers=as_bob)).status_code == 200
            with trio.fail_after(60):
                async with browser.stream("GET", url, headers=as_bob) as response:
                    assert response.status_code == 200
                    events = Events(response)
                    _ready(kubectl, hub, namespace, "edge")
                    kind, data = await events.next()
            assert (kind, data["key"], data["ready"]) == ("status", f"{namespace}/edge", "True")
            # carol has no Role: her own RBAC applies, never the UI's account's.
            carol = await browser.get(url, headers={"X-Forwarded-User": "carol"})
            assert (
                carol.text
                == live.sse("fallback", {"reason": "you may not list Clusters there"}).decode()
            )
            # Without the proxy's word, nobody.
            browser.cookies.clear()
            assert (await browser.get(url)).status_code == 401
        nursery.cancel_scope.cancel()


async def test_a_token_revoked_mid_session_ends_the_stream_and_then_the_session(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    dora = user(hub, namespace, "dora", "get,list,watch")
    _cluster(kubectl, hub, namespace, "edge")
    url = f"/clusters/live?c={namespace}/edge"
    async with in_cluster(hub) as browser:
        await _sign_in(browser, dora)
        with trio.fail_after(60):
            async with browser.stream("GET", url) as response:
                events = Events(response)
                assert await events.rest() == []
        kubectl(hub, "-n", namespace, "delete", "serviceaccount", "dora")
        await refused_by_the_hub(hub, dora)
        # Resumed, as the browser does: the watch is refused, and the stream says reload.
        with trio.fail_after(60):
            resume = {"Last-Event-ID": events.last_id}
            async with browser.stream("GET", url, headers=resume) as response:
                assert response.status_code == 200
                kind, data = await Events(response).next()
        assert (kind, data) == ("reload", {"reason": "the API server no longer accepts you"})
        # A fresh one is refused at its first list: the session ends, back at the sign-in.
        fresh = await browser.get(url)
        assert fresh.status_code == 401 and REVOKED_LINE in fresh.text
        assert fresh.headers["set-cookie"].startswith(f"{COOKIE}=; ")
