"""What one hostile New Cluster form costs the UI's event loop, and every other user with it.

The form's kubeconfig is tenant input: anybody who may open the form (in token mode, anybody with
a valid token) can paste a document chosen to be slow to read. This posts one such form, a YAML
flow list of tiny scalars as large as the body limit allows (the most parser events per byte),
through the real app on Trio, while a ticker on the same loop measures how long it is kept from
running. Run from the repository root:

    .venv/bin/python benchmarks/bench_ui_hostile_form.py [SIZE ...]

For each size: the longest the loop was stalled, the CPU of the loop's thread and of the whole
process while the POST was answered, the POST's wall time and its status. The worst of three.
"""

from __future__ import annotations

import platform
import sys
import time

import httpx
import trio

from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.ui.app import create_app
from kokumi.ui.pages import UI
from kokumi.ui.security import Sessions

ORIGIN = "http://127.0.0.1:8765"
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin", "Origin": ORIGIN}


def flow_list(size: int) -> bytes:
    """``[a,a,...,a]`` of ``size`` bytes: one parser event every two bytes."""
    count = (size - 1) // 2
    return b"[" + b"a," * (count - 1) + b"a]"


def _not_found(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "code": 404})


async def one(size: int) -> tuple[float, float, float, float, int]:
    config = Config(server="https://hub.invalid:6443", token=StaticToken("x"), namespace="p")
    sessions = Sessions()
    async with Client(config, transport=httpx.MockTransport(_not_found)) as hub:
        app = create_app(UI(hub, sessions))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as browser:
            signed = await browser.get(f"/signin?token={sessions.sign_in_token}")
            base = signed.headers["location"].removesuffix("/clusters")
            page = await browser.get(f"{base}/clusters/new")
            marker = 'name="csrf" value="'
            start = page.text.index(marker) + len(marker)
            csrf = page.text[start : page.text.index('"', start)]
            stall = 0.0
            done = trio.Event()

            async def ticker() -> None:
                nonlocal stall
                while not done.is_set():
                    before = time.perf_counter()
                    await trio.sleep(0.005)
                    stall = max(stall, time.perf_counter() - before - 0.005)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                await trio.sleep(0.05)
                loop_cpu, cpu, wall = time.thread_time(), time.process_time(), time.perf_counter()
                response = await browser.post(
                    f"{base}/clusters/new",
                    data={"csrf": csrf, "namespace": "p", "name": "spoke", "how": "kubeconfig"},
                    files={"kubeconfig_file": ("config", flow_list(size), "text/yaml")},
                    headers=SAME_ORIGIN,
                )
                loop_cpu = time.thread_time() - loop_cpu
                cpu = time.process_time() - cpu
                wall = time.perf_counter() - wall
                done.set()
    return stall, loop_cpu, cpu, wall, response.status_code


async def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [1_000_000, 250_000]
    print(f"Python {platform.python_version()}, {platform.machine()}")
    print("| YAML | loop stalled | loop thread CPU | process CPU | POST wall | status |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        runs = [await one(size) for _ in range(3)]
        stall, loop_cpu, cpu, wall, status = (max(r[i] for r in runs) for i in range(5))
        print(
            f"| {size / 1e6:.2f} MB | {stall:.2f} s | {loop_cpu:.2f} s | {cpu:.2f} s "
            f"| {wall:.2f} s | {status} |"
        )


if __name__ == "__main__":
    trio.run(main)
