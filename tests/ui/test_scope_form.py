"""The New Cluster form's Argo CD namespaces and cluster-scoped box, against the real hub: httpx on
the ASGI app, signed in as the hub's admin. A scope the manager would refuse is said beside the
field in one line and nothing is created; a good one is the Cluster's spec.scope, and the
Cluster's page shows it."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from kokumi.core import api
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import NotFound
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI
from kokumi.ui.security import Sessions
from tests.ui.test_app import ORIGIN, SAME_ORIGIN, signed_in


@pytest.fixture
async def form_on_hub(hub: APIServer) -> AsyncIterator[tuple[Client, httpx.AsyncClient, str]]:
    sessions = Sessions()
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        app = create_app(UI(client, sessions))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=ORIGIN
        ) as browser:
            csrf = await signed_in(sessions, browser)
            yield client, browser, csrf


def form(
    csrf: str, namespace: str, name: str, spoke: Registration, **fields: str
) -> dict[str, str]:
    return {
        "csrf": csrf, "namespace": namespace, "name": name, "how": "token",
        "server": spoke.server, "ca": spoke.ca_pem.decode(), "token": spoke.token, **fields,
    }  # fmt: skip


def field_error(page: str) -> str:
    marker = 'id="scope-error" role="alert">'
    start = page.index(marker) + len(marker)
    return html.unescape(page[start : page.index("</p>", start)])


async def test_the_form_writes_spec_scope_and_the_page_shows_it(
    crds: object,
    namespace: str,
    spoke_kubeconfig: Registration,
    form_on_hub: tuple[Client, httpx.AsyncClient, str],
) -> None:
    client, browser, csrf = form_on_hub
    page = await browser.get(f"/clusters/new?namespace={namespace}")
    assert 'name="scope_namespaces"' in page.text and 'name="cluster_resources"' in page.text
    assert "may not list everything cluster-wide" in page.text
    posted = form(csrf, namespace, "team-a", spoke_kubeconfig,
                  scope_namespaces="team-a, team-a-jobs", cluster_resources="true")  # fmt: skip
    created = await browser.post("/clusters/new", data=posted, headers=SAME_ORIGIN)
    assert created.status_code == 303, created.text
    made: dict[str, Any] = await client.get(api.CLUSTERS, "team-a", namespace=namespace)
    assert made["spec"]["scope"] == {
        "namespaces": ["team-a", "team-a-jobs"],
        "clusterResources": True,
    }
    shown = await browser.get(f"/clusters/{namespace}/team-a")
    assert (
        '<dt>Argo CD scope</dt><dd class="scope">namespaces team-a, team-a-jobs, and '
        "cluster-scoped resources</dd>" in shown.text
    )

    plain = form(csrf, namespace, "plain", spoke_kubeconfig)
    assert (await browser.post("/clusters/new", data=plain, headers=SAME_ORIGIN)).status_code == 303
    made = await client.get(api.CLUSTERS, "plain", namespace=namespace)
    assert "scope" not in made["spec"]
    shown = await browser.get(f"/clusters/{namespace}/plain")
    assert '<dd class="scope">cluster-wide</dd>' in shown.text


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"scope_namespaces": "Team-A"},
         "Argo CD namespaces has 'Team-A', not a namespace name: use lower-case letters, digits "
         "and '-', at most 63"),
        ({"cluster_resources": "true"},
         "cluster-scoped resources needs Argo CD namespaces: name the namespaces or remove "
         "clusterResources"),
        ({"scope_namespaces": "a a"}, "Argo CD namespaces names a namespace twice: list each once"),
        ({"scope_namespaces": "a", "how": "incluster"},
         "Argo CD namespaces is set on an InCluster Cluster: Kokumi registers nothing for the "
         "cluster it runs in; leave Argo CD namespaces empty"),
    ],
    ids=["not-a-name", "cluster-resources-alone", "twice", "in-cluster"],
)  # fmt: skip
async def test_a_bad_scope_is_said_beside_the_field_and_nothing_is_created(
    crds: object,
    namespace: str,
    spoke_kubeconfig: Registration,
    form_on_hub: tuple[Client, httpx.AsyncClient, str],
    fields: dict[str, str],
    said: str,
) -> None:
    client, browser, csrf = form_on_hub
    posted = form(csrf, namespace, "bad", spoke_kubeconfig, **fields)
    refused = await browser.post("/clusters/new", data=posted, headers=SAME_ORIGIN)
    assert refused.status_code == 422
    assert field_error(refused.text) == said
    # What was typed stays in the form, to be corrected.
    if "scope_namespaces" in fields:
        assert f'value="{fields["scope_namespaces"]}"' in refused.text
    if "cluster_resources" in fields:
        assert 'name="cluster_resources" value="true" checked' in refused.text
    with pytest.raises(NotFound):
        await client.get(api.CLUSTERS, "bad", namespace=namespace)
