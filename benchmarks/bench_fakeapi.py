"""Requests per second of the in-process API fake (tests/support/fakeapi.py) the model test runs on.

Two figures for a create + get + merge-patch loop on ConfigMaps: through ``kokumi.kube.Client``
(what the manager pays per request in the model test, httpx included), and the fake's own
``handle_async_request`` with the requests built beforehand (what the fake costs by itself).
Best of five rounds of 1,000 loops each. Run from the repository root:
``.venv/bin/python benchmarks/bench_fakeapi.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kokumi.kube import CONFIG_MAPS, Client, Config
from kokumi.kube.paths import resource_path
from tests.support.fakeapi import FakeApi

LOOPS = 1000
ROUNDS = 5
NS = "default"


async def through_client() -> float:
    fake = FakeApi()
    async with Client(Config(server="https://fake.invalid"), transport=fake) as client:
        start = time.perf_counter()
        for i in range(LOOPS):
            body = {"metadata": {"name": f"c{i}", "labels": {"app": "bench"}}, "data": {"a": "1"}}
            await client.create(CONFIG_MAPS, body, namespace=NS)
            await client.get(CONFIG_MAPS, f"c{i}", namespace=NS)
            await client.patch_merge(CONFIG_MAPS, f"c{i}", {"data": {"a": "2"}}, namespace=NS)
        return 3 * LOOPS / (time.perf_counter() - start)


async def fake_alone() -> float:
    fake = FakeApi()
    base = "https://fake.invalid" + resource_path(CONFIG_MAPS, namespace=NS)
    requests = []
    for i in range(LOOPS):
        body = {"metadata": {"name": f"c{i}", "labels": {"app": "bench"}}, "data": {"a": "1"}}
        patch = json.dumps({"data": {"a": "2"}}).encode()
        requests += [
            httpx.Request("POST", base, content=json.dumps(body).encode()),
            httpx.Request("GET", f"{base}/c{i}"),
            httpx.Request(
                "PATCH",
                f"{base}/c{i}",
                content=patch,
                headers={"Content-Type": "application/merge-patch+json"},
            ),
        ]
    start = time.perf_counter()
    for request in requests:
        response = await fake.handle_async_request(request)
        assert response.status_code < 300, response.status_code
        await response.aread()
    return len(requests) / (time.perf_counter() - start)


async def main() -> None:
    client = max([await through_client() for _ in range(ROUNDS)])
    alone = max([await fake_alone() for _ in range(ROUNDS)])
    print(f"create+get+patch through kokumi.kube.Client: {client:,.0f} requests/s")
    print(f"create+get+patch, the fake alone:            {alone:,.0f} requests/s")


if __name__ == "__main__":
    trio.run(main)
