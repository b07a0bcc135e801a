"""A fleet of Clusters on the hub, with the statuses a manager would have written, for the UI's
list and overview tests; and the UI in local mode against it, its hub requests counted.

No manager runs: each Cluster's status is written once through the status subresource, as the
manager writes it, so that the pages have reasons to count and filter and nothing changes them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import trio

from kokumi.core import api
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.testing.controlplane import APIServer
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI
from kokumi.ui.security import Sessions

ORIGIN = "http://127.0.0.1:8765"


@attrs.frozen
class Member:
    """One Cluster of the fleet: where, its labels, and its Ready reason (None: not checked)."""

    namespace: str
    name: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    reason: str | None = "Ready"
    version: str = "v1.36.3"


def status_of(member: Member) -> dict[str, Any]:
    if member.reason is None:
        return {}
    return {
        "server": f"https://{member.name}.{member.namespace}.fleet.example:6443",
        "kubernetesVersion": member.version,
        "conditions": [
            {"type": "Ready", "status": "True" if member.reason == "Ready" else "False",
             "reason": member.reason, "message": f"as the manager says ({member.reason})",
             "lastTransitionTime": "2026-12-01T11:00:00Z"}
        ],
    }  # fmt: skip


async def make_fleet(admin: Client, members: Sequence[Member]) -> None:
    """Create each Cluster (connection InCluster: no Secret) and write its status."""
    limiter = trio.CapacityLimiter(16)

    async def one(member: Member) -> None:
        async with limiter:
            body = {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": member.name, "labels": dict(member.labels)},
                "spec": {"connection": "InCluster"},
            }
            await admin.create(api.CLUSTERS, body, namespace=member.namespace)
            status = status_of(member)
            if status:
                await admin.patch_merge(
                    api.CLUSTERS, member.name, {"status": status}, namespace=member.namespace,
                    subresource="status",
                )  # fmt: skip

    async with trio.open_nursery() as nursery:
        for member in members:
            nursery.start_soon(one, member)


@attrs.define
class Requests:
    """The hub requests a page view sent (an observer of the UI's client)."""

    verbs: list[str] = attrs.field(factory=list)

    def request(self, verb: str, code: str) -> None:
        self.verbs.append(verb)

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass


@attrs.define
class LocalUI:
    """``kokumi ui`` as the hub's admin, signed in; a browser (httpx) on the session's pages."""

    ui: UI
    browser: httpx.AsyncClient
    requests: Requests

    @property
    def base(self) -> str:
        """The session's path, which every link of its pages starts with."""
        return self.browser.base_url.path.rstrip("/")

    async def view(self, path: str) -> tuple[str, int]:
        """The page's text and how many hub requests it took."""
        before = len(self.requests.verbs)
        response = await self.browser.get(path)
        assert response.status_code == 200, response.text[:2000]
        return response.text, len(self.requests.verbs) - before


@asynccontextmanager
async def local_ui(hub: APIServer) -> AsyncIterator[LocalUI]:
    requests = Requests()
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        client.observer = requests
        sessions = Sessions()
        ui = UI(client, sessions)
        transport = httpx.ASGITransport(app=create_app(ui))
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as browser:
            signed = await browser.get(f"/signin?token={sessions.sign_in_token}")
            base = signed.headers["location"].removesuffix("/clusters")
            browser.base_url = httpx.URL(ORIGIN + base)
            yield LocalUI(ui, browser, requests)


_ROW = re.compile(r'<tr id="cluster-[^"]*"[^>]*>\s*<td><a href="[^"]*/clusters/([^/"]+)/([^/"]+)">')


def listed(page: str) -> list[str]:
    """The Clusters' names in a list page's rows, in their order."""
    return [m.group(2) for m in _ROW.finditer(page)]


def count_line(page: str) -> str:
    """The list's line on how many there are and which are shown, as text."""
    found = re.search(r'<p class="muted" id="count">(.*?)</p>', page, re.S)
    assert found is not None, page[:2000]
    return re.sub(r"<[^>]+>", "", found.group(1)).split(" · ")[0]


async def make_source(admin: Client, namespace: str, name: str) -> None:
    """A ClusterSource with the status a manager writes when it made two Clusters and could not
    use one Secret of six it matched (listed) and three more (counted in ``more``)."""
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "ClusterSource",
        "metadata": {"name": name},
        "spec": {"from": "ClusterAPI"},
    }
    await admin.create(CLUSTER_SOURCES, body, namespace=namespace)
    status = {
        "observedGeneration": 1, "matched": 6, "made": 2, "notUsable": 4, "conflicts": 0,
        "notImported": [
            {"secret": "broken-kubeconfig", "cluster": "broken", "reason": "InvalidKubeconfig",
             "message": "the kubeconfig has no current context: set current-context"},
        ],
        "more": 3,
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "NotAllImported",
             "message": "4 of 6 matched Secrets have no Cluster: see status.notImported",
             "lastTransitionTime": "2026-12-01T11:00:00Z", "observedGeneration": 1}
        ],
    }  # fmt: skip
    await admin.patch_merge(
        CLUSTER_SOURCES, name, {"status": status}, namespace=namespace, subresource="status"
    )
