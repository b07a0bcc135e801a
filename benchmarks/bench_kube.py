"""kokumi.kube against kubectl on the same local hub: a 10,000-ConfigMap list and watch throughput.

Run: ``.venv/bin/python benchmarks/bench_kube.py [--objects 10000]``. It starts its own control
plane (nothing else may share it while it runs), prints a Markdown table, and stops everything.

What is measured, side by side in one run:

- list: the wall time to read every ConfigMap of one namespace; this client pages by 500 like
  kubectl does, and also reads them unpaged; kubectl runs ``get configmaps -o name`` (chunks of 500)
  and ``-o json``.
- watch: this client's watcher and ``kubectl get configmaps --watch -o name`` both follow the
  namespace; one DeleteCollection then produces a DELETED event per object. Throughput is events
  over the time from the first to the last event each of them saw. Both are bounded by how fast the
  server deletes, so the table says that rate too; the drain row then measures this client alone:
  its consumer stops reading during a second burst and the backlog it then takes in shows how
  fast it parses and delivers when the server is not the limit.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from kokumi.kube import CONFIG_MAPS, NAMESPACES, Client, Config, Resync, WatchEvent, watch
from kokumi.testing.controlplane import APIServer, ControlPlane

KUBECTL = str(Path(sys.executable).with_name("kubectl"))


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    began = time.perf_counter()
    await action()
    return time.perf_counter() - began


async def create_many(client: Client, namespace: str, count: int, workers: int = 32) -> float:
    send, receive = trio.open_memory_channel[int](count)
    for index in range(count):
        send.send_nowait(index)
    send.close()

    async def worker() -> None:
        async for index in receive:
            body = {
                "metadata": {"name": f"cm-{index:05d}", "labels": {"bench": "kube"}},
                "data": {"index": str(index), "payload": "x" * 64},
            }
            await client.create(CONFIG_MAPS, body, namespace=namespace)

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(workers):
            nursery.start_soon(worker)
    return time.perf_counter() - began


def kubectl_argv(hub: APIServer, *args: str) -> list[str]:
    return [KUBECTL, "--kubeconfig", str(hub.admin_kubeconfig), *args]


def kubectl_env(hub: APIServer) -> dict[str, str]:
    return {**os.environ, "KUBECACHEDIR": str(hub.workdir / ".kube-cache")}


async def kubectl_list(hub: APIServer, namespace: str, output: str, count: int) -> float:
    began = time.perf_counter()
    result = await trio.run_process(
        kubectl_argv(hub, "get", "configmaps", "-n", namespace, "-o", output),
        capture_stdout=True,
        capture_stderr=True,
        env=kubectl_env(hub),
    )
    elapsed = time.perf_counter() - began
    seen = result.stdout.count(b"cm-")
    assert seen >= count, f"kubectl listed {seen} of {count}"
    return elapsed


class Arrivals:
    """When the first and the last of the expected events arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first: float | None = None
        self.last = 0.0
        self.done = trio.Event()

    def begin(self) -> None:
        """Start the clock now rather than at the first event (for a backlog held back)."""
        self.first = time.perf_counter()

    def saw(self, n: int = 1) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.count += n
        if self.count >= self.expected and not self.done.is_set():
            self.last = now
            self.done.set()

    def rate(self) -> float:
        assert self.first is not None
        span = self.last - self.first
        return self.expected / span if span > 0 else float("inf")


async def bench(hub: APIServer, objects: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        created = await create_many(client, namespace, objects)
        rows.append((f"create {objects} ConfigMaps (32 concurrent requests)", f"{created:.1f} s"))

        # -- list ---------------------------------------------------------------------------
        async def paged() -> None:
            result = await client.list(CONFIG_MAPS, namespace=namespace, limit=500)
            assert len(result["items"]) == objects

        async def unpaged() -> None:
            result = await client.list(CONFIG_MAPS, namespace=namespace, limit=0)
            assert len(result["items"]) == objects

        ours_paged = [await timed(paged) for _ in range(3)]
        ours_unpaged = [await timed(unpaged) for _ in range(3)]
        theirs_name = [await kubectl_list(hub, namespace, "name", objects) for _ in range(3)]
        theirs_json = [await kubectl_list(hub, namespace, "json", objects) for _ in range(3)]
        for label, runs in (
            ("list: kokumi.kube, pages of 500", ours_paged),
            ("list: kokumi.kube, one request", ours_unpaged),
            ("list: kubectl get -o name (chunks of 500)", theirs_name),
            ("list: kubectl get -o json (chunks of 500)", theirs_json),
        ):
            rows.append((label, f"{statistics.median(runs):.2f} s (median of 3)"))

        # -- watch, side by side ------------------------------------------------------------
        ours = Arrivals(objects)
        theirs = Arrivals(objects)
        drain = Arrivals(objects)
        listed = Arrivals(objects)  # kubectl prints the initial list before it watches
        reading = trio.Event()
        reading.set()
        send, receive = trio.open_memory_channel[WatchEvent | Resync](0)

        async def consume() -> None:
            async for item in receive:
                if isinstance(item, WatchEvent):
                    (drain if ours.done.is_set() else ours).saw()
                    if not reading.is_set():
                        await reading.wait()

        async def follow_kubectl(stream: trio.abc.ReceiveStream) -> None:
            async for chunk in stream:
                lines = chunk.count(b"\n")
                if not listed.done.is_set():
                    take = min(lines, listed.expected - listed.count)
                    listed.saw(take)
                    lines -= take
                if lines:
                    theirs.saw(lines)

        async with trio.open_nursery() as nursery:
            argv = kubectl_argv(hub, "get", "configmaps", "-n", namespace, "--watch", "-o", "name")
            process: trio.Process = await nursery.start(
                functools.partial(
                    trio.run_process,
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    env=kubectl_env(hub),
                    check=False,
                )
            )
            assert process.stdout is not None
            nursery.start_soon(follow_kubectl, process.stdout)
            nursery.start_soon(consume)
            await nursery.start(
                lambda task_status: watch(
                    client, CONFIG_MAPS, send, namespace=namespace, task_status=task_status
                )
            )
            with trio.fail_after(120):
                await listed.done.wait()
            await trio.sleep(1)  # both are watching now

            burst = await timed(lambda: client.delete_collection(CONFIG_MAPS, namespace=namespace))
            with trio.fail_after(300):
                await ours.done.wait()
                await theirs.done.wait()
            rows.append(
                (
                    f"watch: server deletes {objects} (one DeleteCollection)",
                    f"{burst:.1f} s = {objects / burst:,.0f} deletions/s",
                )
            )
            rows.append(("watch: kokumi.kube, same burst", f"{ours.rate():,.0f} events/s"))
            rows.append(("watch: kubectl get --watch -o name", f"{theirs.rate():,.0f} events/s"))

            # -- this client alone, when the server is not the limit ------------------------
            reading = trio.Event()  # the consumer stalls on its next event
            await create_many(client, namespace, objects)
            await trio.sleep(1)
            drain.begin()
            reading.set()
            with trio.fail_after(300):
                await drain.done.wait()
            rows.append(
                (
                    f"watch: kokumi.kube drains a backlog of {objects} ADDED",
                    f"{drain.rate():,.0f} events/s",
                )
            )
            process.terminate()
            nursery.cancel_scope.cancel()
        await client.delete(NAMESPACES, namespace)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    with ControlPlane.start() as plane:
        began = time.perf_counter()
        rows = trio.run(bench, plane.hub, args.objects)
        total = time.perf_counter() - began
    print(f"\nkube-apiserver {plane.hub.version}, {os.cpu_count()} cores, run took {total:.0f} s\n")
    print("| measurement | result |")
    print("| --- | --- |")
    for label, value in rows:
        print(f"| {label} | {value} |")


if __name__ == "__main__":
    main()
