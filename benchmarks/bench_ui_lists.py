"""Bytes the UI keeps for one session after a page that lists Clusters with huge labels.

31 Clusters of 1.44 MB each (90,000 labels of 16 bytes of JSON apiece), as a tenant who may
create Clusters can write them, answered by a hub in memory (httpx's MockTransport, the same
answer encoded once). One local session views ``/clusters?reason=Unreachable``: a status filter
needs every Cluster, so the UI reads all 31 and keeps them for its session for 30 s (none is
Unreachable, so the page itself shows no row and renders in no time). Measured with
``tracemalloc``: the memory still allocated after the answer and a full collection, less what
was allocated before it, which is what the session's list holds (the hub's encoded answer is
made before the baseline). The tree's own count (``Lists.held``) is printed beside when it has
one.

Run from the repository root, for the tree on ``PYTHONPATH`` first (to compare an older tree,
export it with ``git archive`` and put it first)::

    PYTHONPATH=$PWD python3 benchmarks/bench_ui_lists.py [--clusters 31] [--labels 90000]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import tracemalloc
from typing import Any

import httpx
import trio

import kokumi
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI
from kokumi.ui.security import Sessions

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
ORIGIN = "http://127.0.0.1:8765"


def cluster(i: int, labels: int) -> dict[str, Any]:
    return {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {
            "name": f"huge-{i:02d}",
            "namespace": "team",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {f"l{j:05d}": "vvvv" for j in range(labels)},
        },
        "spec": {"connection": "Kubeconfig"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready",
                 "message": "the API server answers", "lastTransitionTime": "2026-12-01T11:00:00Z"}
            ]
        },
    }  # fmt: skip


async def measure(clusters: int, labels: int) -> None:
    items = [cluster(i, labels) for i in range(clusters)]
    each = len(json.dumps(items[0], separators=(",", ":")))
    answer = json.dumps(
        {"kind": "ClusterList", "apiVersion": "delivery.kokumi.dev/v1alpha1",
         "metadata": {"resourceVersion": "5000"}, "items": items}, separators=(",", ":"),
    ).encode()  # fmt: skip
    del items

    def hub(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    config = Config(server="https://hub.invalid:6443", token=StaticToken("x"), namespace="team")
    async with Client(config, transport=httpx.MockTransport(hub)) as client:
        sessions = Sessions()
        ui = UI(client, sessions, clock=lambda: NOW)
        transport = httpx.ASGITransport(app=create_app(ui))
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as browser:
            signed = await browser.get(f"/signin?token={sessions.sign_in_token}")
            base = signed.headers["location"].removesuffix("/clusters")
            await browser.get(f"{base}/clusters?reason=Unreachable&namespace=other")  # warm up
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            page = await browser.get(f"{base}/clusters?reason=Unreachable")
            assert page.status_code == 200, page.status_code
            del page
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
            peak = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.stop()
            counted = getattr(ui.lists, "held", None)
    print(f"tree: {kokumi.__file__}")
    print(f"{clusters} Clusters of {each / 1e6:.2f} MB ({labels:,} labels each), "
          f"{len(answer) / 1e6:.1f} MB listed")  # fmt: skip
    print(f"held by the session after the page: {held / 2**20:.1f} MiB "
          f"(peak during it {peak / 2**20:.0f} MiB)")  # fmt: skip
    if counted is not None:
        print(f"the UI's own count of its lists (Lists.held): {counted / 2**20:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=31)
    parser.add_argument("--labels", type=int, default=90_000)
    args = parser.parse_args()
    trio.run(measure, args.clusters, args.labels)


if __name__ == "__main__":
    main()
