"""The UI's guards, without a browser: httpx against the ASGI app, the hub a recording fake.

What a browser adds (cookies kept, forms posted from the page itself) is in test_browser.py;
here are the refusals a reviewer of Argo CD's CVEs would try first: a forged POST, a spent or
forged sign-in, an oversized body, and a credential echoed back after a failed validation.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import markupsafe
import pytest
import trio
import yaml

from kokumi.core import api
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.testing import canary
from kokumi.ui.app import create_app
from kokumi.ui.clusters import MAX_CA, MAX_KUBECONFIG
from kokumi.ui.pages import UI
from kokumi.ui.security import COOKIE, CSP, MAX_BODY, MAX_TOKEN, Sessions
from kokumi.workspace import newcluster

ORIGIN = "http://127.0.0.1:8765"


class Hub:
    """A hub that answers 404 to everything and remembers what it was asked."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(
            404,
            json={"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                  "message": "not found"},
        )  # fmt: skip


@pytest.fixture
async def fake_hub() -> AsyncIterator[tuple[Hub, Sessions, httpx.AsyncClient]]:
    hub = Hub()
    sessions = Sessions()
    config = Config(
        server="https://hub.invalid:6443",
        token=StaticToken(canary.token("hub")),
        namespace="platform",
    )
    async with Client(config, transport=httpx.MockTransport(hub)) as client:
        app = create_app(UI(client, sessions))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=ORIGIN
        ) as browser:
            yield hub, sessions, browser


async def signed_in(sessions: Sessions, browser: httpx.AsyncClient) -> str:
    """Sign in with the one-time link; the session's CSRF token, read from a page's form.

    The browser's base URL is then the session's own path, where the link sent it.
    """
    response = await browser.get(f"{ORIGIN}/signin?token={sessions.sign_in_token}")
    assert response.status_code == 303
    base = response.headers["location"].removesuffix("/clusters")
    assert SESSION_PAGES.fullmatch(base), base
    browser.base_url = httpx.URL(ORIGIN + base)
    page = await browser.get("/clusters/new")
    assert page.status_code == 200
    marker = 'name="csrf" value="'
    start = page.text.index(marker) + len(marker)
    return page.text[start : page.text.index('"', start)]


SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin", "Origin": ORIGIN}
SESSION_PAGES = re.compile(r"/s/[A-Za-z0-9_-]{43}")


async def test_the_sign_in_link_works_once_and_sets_a_strict_cookie(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    _, sessions, browser = fake_hub
    assert (await browser.get("/clusters")).status_code == 401
    assert (await browser.get("/signin?token=guessed")).status_code == 403
    token = sessions.sign_in_token
    first = await browser.get(f"/signin?token={token}")
    assert first.status_code == 303
    location = first.headers["location"]
    assert SESSION_PAGES.fullmatch(location.removesuffix("/clusters")), location
    assert first.headers["referrer-policy"] == "no-referrer"
    cookie = first.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"):
        assert attribute in cookie
    assert token not in cookie
    # The link is spent: a second browser (no cookie) cannot sign in with it again.
    second = httpx.AsyncClient(transport=browser._transport, base_url=ORIGIN)
    async with second:
        again = await second.get(f"/signin?token={token}")
        assert again.status_code == 403
        assert "used already" in again.text
        assert (await second.get("/clusters")).status_code == 401


async def test_a_forged_or_expired_session_cookie_is_refused(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    _, sessions, browser = fake_hub
    await signed_in(sessions, browser)
    value = browser.cookies[COOKIE]
    browser.cookies.set(COOKIE, value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
    assert (await browser.get("/clusters")).status_code == 401
    browser.cookies.set(COOKIE, value)
    assert (await browser.get("/clusters")).status_code == 200
    sessions.clock = lambda: 1e12  # long after the session's 12 hours
    assert (await browser.get("/clusters")).status_code == 401


async def test_every_response_carries_a_strict_csp_and_no_page_has_an_inline_script(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    _, sessions, browser = fake_hub
    await signed_in(sessions, browser)
    for path in ("/clusters", "/overview", "/clusters/new", "/environments", f"{ORIGIN}/signin",
                 f"{ORIGIN}/static/style.css", "/clusters/platform/nothing"):  # fmt: skip
        response = await browser.get(path)
        assert response.headers["content-security-policy"] == CSP
        assert "script-src 'self';" in CSP and "unsafe" not in CSP
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cache-control"] == "no-store"
        # The one script is our file: no inline script, no handler attribute.
        scripts = re.findall(r"<script[^>]*>(.*?)</script>", response.text, re.S)
        assert response.text.count("<script") == len(scripts) <= 1
        assert all(body == "" for body in scripts)
        if scripts:
            assert '<script src="/static/live.js" defer></script>' in response.text
        assert not re.search(r"\son[a-z]+=", response.text)
        assert "style=" not in response.text
    missing = await browser.get("/clusters/platform/nothing")
    assert missing.status_code == 404
    assert "no Cluster nothing in namespace platform" in missing.text


PAGES = (
    "/clusters",
    "/overview",
    "/clusters/new",
    "/environments",
    "/clusters/platform/spoke",
    "/clusters/platform/spoke/edit",
)


async def test_the_session_cookie_alone_gets_nothing_and_changes_nothing(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    """Another port of 127.0.0.1 receives the cookie (RFC 6265 section 8.5), never the
    session's path: a plain client replaying the cookie, with the form token read from the real
    session's page and no Origin or Sec-Fetch-Site, gets a sign-in page and no request reaches
    the hub; nor does the path without the cookie."""
    hub, sessions, browser = fake_hub
    caplog.set_level(logging.DEBUG)
    csrf = await signed_in(sessions, browser)
    base = browser.base_url.raw_path.decode().rstrip("/")
    hub.requests.clear()
    other = "/s/" + ("A" if base[3] != "A" else "B") + base[4:]
    replayed = {COOKIE: browser.cookies[COOKIE]}
    transport = browser._transport
    async with (
        httpx.AsyncClient(transport=transport, base_url=ORIGIN, cookies=replayed) as replay,
        httpx.AsyncClient(transport=transport, base_url=ORIGIN) as no_cookie,
    ):
        for client, prefixes in ((replay, ("", other, "/s/")), (no_cookie, (base,))):
            for prefix in prefixes:
                for path in PAGES:
                    page = await client.get(prefix + path)
                    assert page.status_code in (401, 404), (prefix, path)
                    assert csrf not in page.text
                    assert 'name="csrf"' not in page.text
                form = {"csrf": csrf, "namespace": "platform", "name": "forged", "how": "incluster"}
                posts = (
                    ("/clusters/new", form),
                    ("/clusters/platform/spoke/delete", {"csrf": csrf, "confirm": "spoke"}),
                    ("/clusters/platform/spoke/edit", {"csrf": csrf, "labels": "x=y"}),
                    ("/signout", {"csrf": csrf}),
                )
                for path, data in posts:
                    posted = await client.post(prefix + path, data=data)
                    assert posted.status_code in (401, 404), (prefix, path)
                    assert "set-cookie" not in posted.headers
    assert hub.requests == []
    # The session is untouched, in the browser that has both.
    assert (await browser.get("/clusters/new")).status_code == 200
    # The UI's own log lines (httpx's here are the test client's) name neither secret.
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("kokumi"))
    # Said once, however many requests replay the cookie: a replaying server fills no log.
    assert logged.count("a session's cookie but not its address") == 1
    assert base not in logged
    assert base[3:] not in logged
    assert replayed[COOKIE] not in logged


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9999"}, "another site"),
        ({"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, "another site"),
        ({"Origin": "http://127.0.0.1:9999"}, "another origin"),
    ],
)
async def test_a_cross_site_post_is_refused_before_it_reaches_the_hub(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient], headers: dict[str, str], said: str
) -> None:
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    form = {"csrf": csrf, "namespace": "platform", "name": "spoke", "how": "incluster"}
    response = await browser.post("/clusters/new", data=form, headers=headers)
    assert response.status_code == 403
    assert said in response.text
    assert hub.requests == []
    deleted = await browser.post(
        "/clusters/platform/spoke/delete", data={"csrf": csrf, "confirm": "spoke"}, headers=headers
    )
    assert deleted.status_code == 403
    assert hub.requests == []


async def test_a_post_without_the_sessions_token_is_refused(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    hub, sessions, browser = fake_hub
    await signed_in(sessions, browser)
    hub.requests.clear()
    form = {"namespace": "platform", "name": "spoke", "how": "incluster"}
    for given in ({}, {"csrf": "not-the-token"}):
        response = await browser.post("/clusters/new", data={**form, **given}, headers=SAME_ORIGIN)
        assert response.status_code == 403
        assert response.text.startswith("Refused: the form is not from this session")
    assert hub.requests == []
    # Logged with the session's path, not its secret.
    assert "refused POST /s/…/clusters/new: no valid CSRF token" in caplog.text
    assert browser.base_url.raw_path.decode().strip("/") not in caplog.text


async def test_a_body_over_the_limit_is_refused(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    big = {"csrf": csrf, "how": "kubeconfig", "kubeconfig": "x" * (MAX_BODY + 1)}
    response = await browser.post("/clusters/new", data=big, headers=SAME_ORIGIN)
    assert response.status_code == 413
    assert "larger than 1024 KiB" in response.text

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"k" * (MAX_BODY // 10)

    streamed = await browser.post(
        "/clusters/new",
        content=chunks(),
        headers={**SAME_ORIGIN, "content-type": "application/x-www-form-urlencoded"},
    )
    assert streamed.status_code == 413
    assert hub.requests == []


def kubeconfig(user: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "s", "cluster": {"server": "https://spoke.example:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "s", "context": {"cluster": "s", "user": "u"}}],
            "current-context": "s",
        }
    )


@pytest.mark.parametrize(
    ("form", "field", "said"),
    [
        (
            {"how": "kubeconfig", "kubeconfig": kubeconfig(
                {"token": canary.token(), "client-key": "/home/me/.kube/key.pem"})},
            "kubeconfig", "FilePath: ",
        ),
        (
            {"how": "kubeconfig", "kubeconfig": kubeconfig(
                {"exec": {"command": "aws", "args": [canary.token()]}})},
            "kubeconfig", "ExecPlugin: ",
        ),
        (
            {"how": "kubeconfig", "context": "nope", "kubeconfig": kubeconfig(
                {"token": canary.token()})},
            "context", "UnknownContext: ",
        ),
        (
            {"how": "token", "server": "spoke.example:6443", "token": canary.token()},
            "server", "the kubeconfig cannot be used: ",
        ),
        (
            {"how": "token", "server": "https://spoke.example", "token": canary.token(),
             "ca": f"-----BEGIN CERTIFICATE-----\n{canary.CANARY}\n-----END CERTIFICATE-----"},
            "server", "the kubeconfig cannot be used: ",
        ),
    ],
)  # fmt: skip
async def test_a_refused_credential_is_never_shown_again(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
    caplog: pytest.LogCaptureFixture,
    form: dict[str, str],
    field: str,
    said: str,
) -> None:
    hub, sessions, browser = fake_hub
    caplog.set_level(logging.DEBUG)
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    posted = {"csrf": csrf, "namespace": "platform", "name": "spoke", **form}
    response = await browser.post("/clusters/new", data=posted, headers=SAME_ORIGIN)
    assert response.status_code == 422
    assert f'id="{field}-error"' in response.text
    shown = response.text.split(f'id="{field}-error" role="alert">')[1].split("</p>")[0]
    assert said in shown
    assert "\n" not in shown
    assert canary.found(response.text) == []
    assert canary.found(caplog.text) == []
    assert 'name="token" type="password" autocomplete="new-password">' in response.text
    assert hub.requests == []


async def test_a_file_upload_is_read_like_a_paste(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    text = kubeconfig({"tokenFile": "/var/run/token"})
    response = await browser.post(
        "/clusters/new",
        data={"csrf": csrf, "namespace": "platform", "name": "spoke", "how": "kubeconfig"},
        files={"kubeconfig_file": ("config", text.encode(), "application/octet-stream")},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 422
    assert "FilePath: " in response.text
    assert "/var/run/token" not in response.text.split("</textarea>")[0].split("<textarea")[-1]
    assert hub.requests == []


def flow_list(size: int) -> bytes:
    """``[a,a,...]`` of exactly ``size`` bytes: the most YAML events per byte, slowest to read."""
    count = (size - 3) // 2
    return b"[" + b"a," * count + b"a" + b" " * (size - 3 - 2 * count) + b"]"


def error_of(page: str, field: str) -> str:
    return page.split(f'id="{field}-error" role="alert">')[1].split("</p>", maxsplit=1)[0]


async def test_a_hostile_kubeconfig_is_read_off_the_loop_while_other_pages_answer(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The largest kubeconfig the form takes, of the slowest kind, read by Kokumi's own reader
    in a worker thread: another page answers while it is being read. The reader's thread is held
    open until that page has answered, so the order is the test's, not the machine's speed."""
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()

    def general_loader(*args: object, **kwargs: object) -> None:
        raise AssertionError("a form's kubeconfig reached a general YAML loader")

    monkeypatch.setattr(yaml, "safe_load", general_loader)
    started, loop = trio.Event(), trio.lowlevel.current_trio_token()
    parsed, release = threading.Event(), threading.Event()
    examine = newcluster.examine_kubeconfig
    read: list[float] = []

    def held(text: str, context: str | None = None) -> Any:
        loop.run_sync_soon(started.set)
        reading = time.perf_counter()
        try:
            return examine(text, context)
        finally:
            read.append(time.perf_counter() - reading)
            release.wait(10)
            parsed.set()

    monkeypatch.setattr(newcluster, "examine_kubeconfig", held)
    hostile = flow_list(MAX_KUBECONFIG)
    assert len(hostile) == MAX_KUBECONFIG
    posted: list[httpx.Response] = []

    async def post() -> None:
        posted.append(
            await browser.post(
                "/clusters/new",
                data={"csrf": csrf, "namespace": "platform", "name": "spoke", "how": "kubeconfig"},
                files={"kubeconfig_file": ("config", hostile, "application/yaml")},
                headers=SAME_ORIGIN,
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(post)
        with trio.fail_after(30):
            await started.wait()
        began = time.perf_counter()
        page = await browser.get("/clusters")
        latency = time.perf_counter() - began
        answered_while_parsing = not parsed.is_set()
        listed = list(hub.requests)
        release.set()
    assert page.status_code == 200
    assert answered_while_parsing, "GET /clusters waited for the hostile form to be read"
    print(
        f"GET /clusters answered in {latency * 1000:.1f} ms while a hostile form was read "
        f"(the read itself: {read[0] * 1000:.0f} ms)"
    )
    (response,) = posted
    assert response.status_code == 422
    assert error_of(response.text, "kubeconfig").startswith(
        "TooComplex: the kubeconfig holds more than 100,000 YAML values"
    )
    # The page's list of Clusters, and nothing for the refused form.
    assert [(r.method, r.url.path) for r in listed] == [
        ("GET", f"/apis/{api.GROUP}/v1alpha1/clusters")
    ]
    assert hub.requests == listed


@pytest.mark.parametrize(
    ("form", "files", "field", "said"),
    [
        (
            {"how": "kubeconfig"},
            {"kubeconfig_file": ("config", flow_list(MAX_KUBECONFIG + 1), "application/yaml")},
            "kubeconfig", "the kubeconfig is larger than 512 KiB: keep only the context",
        ),
        (
            {"how": "kubeconfig", "kubeconfig": "é" * (MAX_KUBECONFIG // 2 + 1)},
            {"kubeconfig_file": ("", b"", "application/octet-stream")},  # multipart, no file
            "kubeconfig", "the kubeconfig is larger than 512 KiB: keep only the context",
        ),
        (
            {"how": "token", "server": "https://spoke.example", "token": "t" * (MAX_TOKEN + 1)},
            None, "token", "a bearer token is at most 16 KiB",
        ),
        (
            {"how": "token", "server": "https://spoke.example", "token": canary.token(),
             "ca": "c" * (MAX_CA + 1)},
            None, "server", "the certificate authority is at most 64 KiB of PEM",
        ),
    ],
)  # fmt: skip
async def test_a_credential_over_the_forms_limit_is_refused_unread(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
    form: dict[str, str],
    files: dict[str, tuple[str, bytes, str]] | None,
    field: str,
    said: str,
) -> None:
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)

    def unread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a credential over the form's limit was parsed")

    monkeypatch.setattr(newcluster, "examine_kubeconfig", unread)
    monkeypatch.setattr(newcluster, "kubeconfig_of_token", unread)
    response = await browser.post(
        "/clusters/new",
        data={"csrf": csrf, "namespace": "platform", "name": "spoke", **form},
        files=files,
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 422
    assert error_of(response.text, field).startswith(said)
    assert canary.found(response.text) == []
    assert hub.requests == []


NOT_A_NAMESPACE = 'namespace "{}" is not a DNS label, so no namespace has that name'
NOT_A_CLUSTER = 'Cluster name "{}" is not a DNS subdomain of at most 63 characters'
NOT_AN_ENVIRONMENT = 'Environment name "{}" is not a DNS subdomain of at most 253 characters'


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/clusters/team/%2E%2E", NOT_A_CLUSTER.format("..")),
        ("/clusters/team/%2E", NOT_A_CLUSTER.format(".")),
        ("/clusters/team/%2E%2E/edit", NOT_A_CLUSTER.format("..")),
        ("/clusters/team/%2E%2E/delete", NOT_A_CLUSTER.format("..")),
        ("/clusters/%2E%2E/spoke", NOT_A_NAMESPACE.format("..")),
        ("/clusters/%2E/spoke/edit", NOT_A_NAMESPACE.format(".")),
        ("/clusters/%2E%2E/spoke/delete", NOT_A_NAMESPACE.format("..")),
        ("/clusters/team.a/spoke", NOT_A_NAMESPACE.format("team.a")),
        ("/clusters/Team/spoke", NOT_A_NAMESPACE.format("Team")),
        ("/clusters/team/a..b", NOT_A_CLUSTER.format("a..b")),
        ("/clusters/team/" + "a" * 64, NOT_A_CLUSTER.format("a" * 64)),
        ("/environments/team/%2E%2E", NOT_AN_ENVIRONMENT.format("..")),
        ("/environments/%2E%2E/edge", NOT_A_NAMESPACE.format("..")),
    ],
)
async def test_a_name_no_object_can_have_is_refused_before_any_request(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient], path: str, said: str
) -> None:
    """``..`` and ``.`` would be dot-segments of the API path (``/clusters/team/%2E%2E`` was
    ``GET .../namespaces/team``): refused as no name at all, for every method, unasked."""
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    shown = str(markupsafe.escape(said))
    got = await browser.get(path)
    assert got.status_code == 404
    assert shown in got.text
    if path.endswith(("/edit", "/delete")):
        form = {"csrf": csrf, "confirm": "..", "labels": "a=b", "version": "1"}
        posted = await browser.post(path, data=form, headers=SAME_ORIGIN)
        assert posted.status_code == 404
        assert shown in posted.text
    assert hub.requests == []


async def test_a_namespace_no_namespace_can_have_is_refused_in_lists_and_the_form(
    fake_hub: tuple[Hub, Sessions, httpx.AsyncClient],
) -> None:
    hub, sessions, browser = fake_hub
    csrf = await signed_in(sessions, browser)
    hub.requests.clear()
    for path in ("/clusters?namespace=%2E%2E", "/environments?namespace=..&x=1"):
        listed = await browser.get(path)
        assert listed.status_code == 400
        assert str(markupsafe.escape(NOT_A_NAMESPACE.format(".."))) in listed.text
    form = {"csrf": csrf, "namespace": "..", "name": "spoke", "how": "incluster"}
    created = await browser.post("/clusters/new", data=form, headers=SAME_ORIGIN)
    assert created.status_code == 422
    assert error_of(created.text, "namespace").startswith(
        str(markupsafe.escape(NOT_A_NAMESPACE.format("..")))
    )
    assert hub.requests == []
    # A name with dots is a name Kubernetes allows: asked for, as it is.
    missing = await browser.get("/clusters/team/spoke.eu")
    assert missing.status_code == 404
    assert [r.url.path for r in hub.requests] == [
        f"/apis/{api.GROUP}/v1alpha1/namespaces/team/clusters/spoke.eu"
    ]


class WillingHub:
    """A hub that would take any write (as for a user bound cluster-admin), holding one Cluster
    argocd/spoke only for the pages that edit or delete it; it remembers what it was asked."""

    def __init__(self, existing: bool) -> None:
        self.existing = existing
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "GET":
            if self.existing and request.url.path.endswith("/clusters/spoke"):
                return httpx.Response(200, json={
                    "apiVersion": "delivery.kokumi.dev/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "spoke", "namespace": "argocd", "uid": "u",
                                 "resourceVersion": "1"},
                    "spec": {"connection": "InCluster"}})  # fmt: skip
            return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})
        body = json.loads(request.content or b"{}")
        body.setdefault("metadata", {}).update(uid="u", resourceVersion="2")
        return httpx.Response(201 if request.method == "POST" else 200, json=body)


@pytest.mark.parametrize(
    ("path", "form"),
    [
        (
            "/clusters/new",
            {"namespace": "argocd", "name": "spoke", "how": "kubeconfig",
             "kubeconfig": kubeconfig({"token": canary.token()})},
        ),
        ("/clusters/argocd/spoke/delete", {"confirm": "spoke"}),
        ("/clusters/argocd/spoke/edit",
         {"labels": "tier=gold", "description": "mine", "version": "1"}),
    ],
    ids=["new", "delete", "edit"],
)  # fmt: skip
async def test_no_page_writes_in_argocds_namespace(path: str, form: dict[str, str]) -> None:
    """Argo CD's namespace is written by the manager alone, under its admission policy: a user
    who may write there anyway (here, a hub that would take anything) is refused by the UI in
    one line that says where to put Clusters, and nothing but reads reaches the hub."""
    hub = WillingHub(existing=path != "/clusters/new")
    sessions = Sessions()
    config = Config(server="https://hub.invalid:6443", token=StaticToken(canary.token("hub")))
    async with (
        Client(config, transport=httpx.MockTransport(hub)) as client,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(UI(client, sessions))), base_url=ORIGIN
        ) as browser,
    ):
        csrf = await signed_in(sessions, browser)
        response = await browser.post(path, data={"csrf": csrf, **form}, headers=SAME_ORIGIN)
    assert [f"{r.method} {r.url.path}" for r in hub.requests if r.method != "GET"] == []
    assert response.status_code in (200, 422)  # the form again, with the refusal
    said = "namespace argocd is Argo CD&#39;s, where only Kokumi&#39;s manager writes"
    assert said in response.text, response.text
    assert canary.found(response.text) == []
