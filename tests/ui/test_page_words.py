"""What the Clusters' pages say to a person, read from the pages the app serves (httpx against
the ASGI app, the hub a fake that answers as RBAC would for a user of one namespace): through
the authenticating proxy, where neither every namespace nor the Namespaces may be listed.

The pages as chromium draws them (one-line rows, ages that count on) are test_browser_words.py.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from kokumi.core import api
from kokumi.core.sessioncookie import Keys
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.ui.app import create_app
from kokumi.ui.incluster import ProxyTrust
from kokumi.ui.pages import UI
from kokumi.ui.security import SealedSessions

KEY = bytes(range(32))
CLUSTERS = "/apis/delivery.kokumi.dev/v1alpha1"
LONG = (
    "Secret edge-kubeconfig not found in namespace team-a: create it with the kubeconfig under "
    "key kubeconfig (kubectl create secret generic edge-kubeconfig -n team-a "
    "--from-file=kubeconfig=...)"
)


def _cluster(name: str, labels: dict[str, str], *, holding: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION, "kind": "Cluster",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, "uid": f"u-{name}",
                     "resourceVersion": "7", "generation": 1,
                     "creationTimestamp": "2026-12-01T12:00:00Z",
                     "finalizers": [api.FINALIZER] if holding else []},
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": f"{name}-kc"}}},
        "status": {"server": "https://10.9.8.7:6443", "observedGeneration": 1, "conditions": [
            {"type": "Ready", "status": "False", "reason": "SecretNotFound", "message": LONG,
             "lastTransitionTime": "2026-12-01T12:00:00Z"}]},
    }  # fmt: skip


TEAM = [_cluster("edge", {"env": "prod"}, holding=True), _cluster("core", {"env": "dev"})]


def _forbidden(what: str) -> httpx.Response:
    return httpx.Response(
        403,
        json={"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
              "message": f'{what} is forbidden: User "alice@example.com" cannot list resource '
                         f'"clusters" in API group "delivery.kokumi.dev" at the cluster scope'},
    )  # fmt: skip


def hub(request: httpx.Request) -> httpx.Response:
    """RBAC of a user with a Role in team-a only."""
    path = request.url.path
    if path == f"{CLUSTERS}/namespaces/team-a/clusters":
        selector = request.url.params.get("labelSelector", "")
        items = [
            c for c in TEAM if not selector or selector == "env=" + c["metadata"]["labels"]["env"]
        ]
        return httpx.Response(200, json={"kind": "ClusterList", "metadata": {}, "items": items})
    if path == f"{CLUSTERS}/namespaces/team-a/clusters/edge":
        return httpx.Response(200, json=TEAM[0])
    if path.startswith("/apis/delivery.kokumi.dev/v1alpha1/namespaces/team-a/"):
        return httpx.Response(200, json={"kind": "List", "metadata": {}, "items": []})
    if path == "/api/v1/namespaces/team-a/events":
        return httpx.Response(200, json={"kind": "EventList", "metadata": {}, "items": []})
    return _forbidden(path.rsplit("/", 1)[-1])


@pytest.fixture
async def browser() -> AsyncIterator[httpx.AsyncClient]:
    """A browser behind the trusted proxy, as alice@example.com, who is no ServiceAccount."""
    trust = ProxyTrust.parse(["10.1.2.3"], "X-Forwarded-User", "X-Forwarded-Groups")
    config = Config(server="https://hub.invalid", token=StaticToken("the-uis-own"))
    async with Client(config, transport=httpx.MockTransport(hub)) as account:
        ui = UI(account, SealedSessions(Keys(KEY)), proxy=trust)
        transport = httpx.ASGITransport(app=create_app(ui), client=("10.1.2.3", 5000))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://ui.example",
            headers={"X-Forwarded-User": "alice@example.com"},
        ) as client:  # fmt: skip
            yield client


def _text(page: httpx.Response) -> str:
    """The page's words, as a person reads them: tags dropped, spaces as one."""
    assert page.status_code == 200, page.text
    body = re.sub(r"<[^>]+>", " ", page.text.split("<main", 1)[-1])
    return re.sub(r"\s+", " ", html.unescape(body)).replace("\N{EN DASH}", "-")


async def test_a_proxy_user_with_nowhere_to_look_is_asked_for_their_namespace(
    browser: httpx.AsyncClient,
) -> None:
    first = _text(await browser.get("/clusters"))
    assert "0 in no namespace you may list" not in first
    assert "Which namespace are your Clusters in?" in first
    assert "Name the namespace your Clusters are in: alice@example.com may not list" in first
    assert "kokumi ui --namespaces" in first
    # Named once, the namespace is where the list looks from then on, said as one namespace.
    named = _text(await browser.get("/clusters?namespace=team-a"))
    assert "1-2 of 2 in namespace team-a" in named
    again = _text(await browser.get("/clusters"))
    assert "1-2 of 2 in namespace team-a ·" in again
    assert "namespaces team-a" not in again


async def test_a_forbidden_namespace_is_said_plainly(browser: httpx.AsyncClient) -> None:
    page = _text(await browser.get("/clusters?namespace=team-b"))
    assert (
        "You may not list Clusters in namespace team-b: your RBAC grants no list on "
        "clusters.delivery.kokumi.dev there." in page
    )
    assert "--user=alice@example.com" in page
    assert "is forbidden" not in page and "API group" not in page


async def test_a_narrowed_list_and_overview_say_they_are_narrowed(
    browser: httpx.AsyncClient,
) -> None:
    await browser.get("/clusters?namespace=team-a")
    listed = _text(await browser.get("/clusters?selector=env%3Dprod"))
    assert "1-1 of 1 matching env=prod in namespace team-a" in listed
    seen = _text(await browser.get("/overview?selector=env%3Dprod"))
    assert "1 Cluster matching env=prod in namespace team-a" in seen
    whole = _text(await browser.get("/overview"))
    assert "2 Clusters in namespace team-a" in whole


async def test_a_long_message_is_one_line_on_the_list_its_whole_text_its_title(
    browser: httpx.AsyncClient,
) -> None:
    page = await browser.get("/clusters?namespace=team-a")
    assert f'<div class="message" title="{html.escape(LONG)}">' in page.text


async def test_the_cluster_page_says_the_registration_its_status_tells_and_ages_count_on(
    browser: httpx.AsyncClient,
) -> None:
    page = await browser.get("/clusters/team-a/edge")
    words = _text(page)
    assert "Argo CD registration registered: Secret argocd/" in words
    assert "As the Cluster's status tells it" in words
    assert "unknown" not in words and "you may not list Secrets" not in words
    assert re.search(r'<body[^>]* data-now="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"', page.text)
    assert 'class="age" data-created="2026-12-01T12:00:00Z"' in page.text
    listed = await browser.get("/clusters?namespace=team-a")
    assert 'class="age" data-created="2026-12-01T12:00:00Z"' in listed.text
