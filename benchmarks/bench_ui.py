"""What a page view of ``kokumi ui`` costs for 1,000 and 10,000 Clusters: bytes, time, hub requests.

Two parts. First, the render alone, from Clusters in memory: the rows of
:func:`kokumi.core.clusterview.row` and the autoescaped Jinja2 template of the whole list, as
``GET /clusters`` rendered it before the list was paged. Then whole page views through the real
app (httpx's ASGI transport, the UI on Trio, signed in with the one-time link) against a hub in
memory that answers list requests as the API server does: items in key order (namespace, name),
pages of ``limit`` with a ``continue`` token and ``remainingItemCount``. Its answers are encoded
once and kept, so the time is the UI's (the client's JSON decoding included), not the fake
hub's. Each view is timed cold (a new app, so no cache of the UI's own helps it) and warm (best
of five repeats in one session), and its hub requests are counted.

Run from the repository root, for the tree on ``PYTHONPATH`` first (to compare an older tree
side by side with this one, export it with ``git archive`` and put it first)::

    .venv/bin/python benchmarks/bench_ui.py [--counts 1000,10000] [--views ...]

A view the tree does not have (a 404) is reported as such.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import trio

import kokumi
from kokumi.core import clusterview
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI, page
from kokumi.ui.security import Session, Sessions

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
REASONS = ("Ready", "Unreachable", "ClusterConflict", "CredentialRejected")
ORIGIN = "http://127.0.0.1:8765"
VIEWS = (
    "/clusters",
    "/clusters?page=2",
    "/clusters?sort=reason",
    "/clusters?reason=Unreachable",
    "/overview",
)


def cluster(i: int) -> dict[str, Any]:
    reason = REASONS[i % len(REASONS)]
    return {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {
            "name": f"cluster-{i:05d}",
            "namespace": f"team-{i % 40:02d}",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "generation": 1,
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {"fleet": "edge", "region": f"r{i % 7}", "tier": "prod"},
        },
        "spec": {
            "connection": "Kubeconfig",
            "kubeconfig": {"secretRef": {"name": f"c{i}-kubeconfig"}},
        },
        "status": {
            "observedGeneration": 1,
            "server": f"https://cluster-{i:05d}.fleet.example:6443",
            "kubernetesVersion": "v1.36.3",
            "conditions": [
                {"type": "Ready", "status": "True" if reason == "Ready" else "False",
                 "reason": reason, "message": f"the API server answers ({reason})",
                 "lastTransitionTime": "2026-12-01T11:00:00Z", "observedGeneration": 1}
            ],
        },
    }  # fmt: skip


class Hub:
    """List requests answered from memory, in the API server's order, each answer encoded once."""

    def __init__(self, count: int) -> None:
        items = sorted(
            (cluster(i) for i in range(count)),
            key=lambda c: (c["metadata"]["namespace"], c["metadata"]["name"]),
        )
        self.items = items
        self.requests = 0
        self._answers: dict[str, bytes] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        key = str(request.url)
        if key not in self._answers:
            self._answers[key] = json.dumps(self._answer(request)).encode()
        return httpx.Response(
            200, content=self._answers[key], headers={"content-type": "application/json"}
        )

    def _answer(self, request: httpx.Request) -> dict[str, Any]:
        url = urlsplit(str(request.url))
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        resource = parts[-1]
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        if resource != "clusters":
            return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                    "items": []}  # fmt: skip
        items = [c for c in self.items if namespace in (None, c["metadata"]["namespace"])]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0) or len(items)
        page = items[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": "20000"}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
            if "labelSelector" not in params:
                metadata["remainingItemCount"] = len(items) - start - limit
        return {"kind": "ClusterList", "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "metadata": metadata, "items": page}  # fmt: skip


def best(fn: Callable[[], Any], rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def render_alone(counts: list[int]) -> None:
    """The whole list rendered from memory, as the unpaged page was (a baseline for any tree)."""
    session = Session(csrf="x" * 43, expires=0)
    print("| Clusters | rows | template (every row) | page total | bytes |")
    print("|---:|---:|---:|---:|---:|")
    for count in counts:
        items = [cluster(i) for i in range(count)]
        rows_time = best(lambda items=items: [clusterview.row(c, NOW) for c in items])
        rows = sorted((clusterview.row(c, NOW) for c in items), key=lambda r: (r.namespace, r.name))

        def render(rows: list[clusterview.Row] = rows) -> Any:
            # Every row on one page, in any tree: the context of the paged template too.
            paged: dict[str, Any] = {}
            if hasattr(clusterview, "Window"):
                paged = {"shown": clusterview.Window(tuple(rows), len(rows), 1, 1, len(rows)),
                         "q": clusterview.Query(), "readies": clusterview.READIES,
                         "sorts": clusterview.SORTS, "age": None}  # fmt: skip
            return page(
                "clusters.html",
                {"title": "Clusters", "session": session, "rows": rows, "namespace": "",
                 "selector": "", "reason": "", "reasons": list(REASONS), "scope": "all",
                 "error": "", "refresh": 10, "checking": clusterview.CHECKING, **paged},
            )  # fmt: skip

        try:
            page_time = best(render)
            size = len(render().body)
        except Exception as exc:  # the template takes another context in this tree
            print(f"| {count:,} | {rows_time * 1e3:.0f} ms | ({type(exc).__name__}) | | |")
            continue
        total = rows_time + page_time
        print(
            f"| {count:,} | {rows_time * 1e3:.0f} ms | {page_time * 1e3:.0f} ms | "
            f"{total * 1e3:.0f} ms | {size / 1e6:.2f} MB |"
        )


async def _signed_in(hub: Hub) -> tuple[httpx.AsyncClient, Client]:
    config = Config(server="https://hub.invalid:6443", token=StaticToken("x"), namespace="p")
    client = Client(config, transport=httpx.MockTransport(hub))
    sessions = Sessions()
    app = create_app(UI(client, sessions, clock=lambda: NOW))
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ORIGIN)
    signed = await browser.get(f"/signin?token={sessions.sign_in_token}")
    base = signed.headers["location"].removesuffix("/clusters")
    browser.base_url = httpx.URL(ORIGIN + base)
    return browser, client


async def _view(browser: httpx.AsyncClient, hub: Hub, path: str) -> tuple[float, int, int, int]:
    before = hub.requests
    started = time.perf_counter()
    response = await browser.get(path)
    took = time.perf_counter() - started
    return took, len(response.content), hub.requests - before, response.status_code


async def page_views(counts: list[int], views: list[str]) -> None:
    print("| Clusters | view | bytes | cold | hub requests (cold) | warm | hub requests (warm) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for count in counts:
        hub = Hub(count)
        for path in views:
            browser, client = await _signed_in(hub)
            try:
                cold, size, cold_requests, status = await _view(browser, hub, path)
                if status != 200:
                    print(f"| {count:,} | `{path}` | ({status}) | | | | |")
                    continue
                warm, warm_requests = float("inf"), 0
                for _ in range(5):
                    took, _, requests, _ = await _view(browser, hub, path)
                    if took < warm:
                        warm, warm_requests = took, requests
            finally:
                await browser.aclose()
                await client.aclose()
            print(
                f"| {count:,} | `{path}` | {size / 1e3:,.0f} kB | {cold * 1e3:,.0f} ms | "
                f"{cold_requests} | {warm * 1e3:,.1f} ms | {warm_requests} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--views", nargs="*", default=list(VIEWS))
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print(f"kokumi from {kokumi.__file__}")
    render_alone(counts)
    print()
    trio.run(page_views, counts, args.views)


if __name__ == "__main__":
    main()
