"""Many writes at once beside the watches: what each costs the manager and the API server.

Run: ``.venv/bin/python benchmarks/bench_hub_requests.py [--requests 3000] [--watches 12]``. It
starts its own control plane (nothing else may share it while it runs) and prints a Markdown
table.

Onboarding is this shape: the Cluster actors' finalizers and statuses and the registry's Secrets,
32 requests in flight (``Client``'s ``max_requests``), while the manager's watches hold their
streams open. Each round opens ``--watches`` watches of a quiet namespace's ConfigMaps, then 32
workers send ``--requests`` merge patches of ConfigMaps between them. Side by side in one run,
rounds interleaved:

- ``this client``: ``Client`` as it is: requests and watches in one httpx pool that keeps 20
  connections. httpcore counts every connection of its pool, watches and busy ones included,
  against those 20, so once more than 20 are open each connection is closed as soon as its
  answer is read, and the next request opens (and handshakes) another.
- ``one pool, every connection kept``: the same pool keeping any number, so that requests reuse
  their connections.
- ``requests on a pool of their own, 32 kept``: the watches on another client; the requests' pool
  keeps as many connections as requests may be in flight.

For each: writes a second, the client process's CPU per write, the API server's CPU per write
(its process's), and the connections the pools opened (TLS handshakes with the hub).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpcore
import httpx
import trio

from kokumi.kube import CONFIG_MAPS, NAMESPACES, Client, Config, Resync, WatchEvent, start_watch
from kokumi.kube.transport import Transport
from kokumi.testing.controlplane import APIServer, ControlPlane

WORKERS = 32
OBJECTS = 200


def _cpu_of(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drain(events: trio.MemoryReceiveChannel[WatchEvent | Resync]) -> None:
    async for _ in events:
        pass


class _Connections:
    """Counts the connections httpcore's pools open, by wrapping the one method that opens them."""

    def __init__(self) -> None:
        self.opened = 0
        self._connect = httpcore.AsyncHTTPConnection._connect

    def __enter__(self) -> _Connections:
        connect = self._connect

        async def counted(conn: Any, request: Any) -> Any:
            self.opened += 1
            return await connect(conn, request)

        httpcore.AsyncHTTPConnection._connect = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        httpcore.AsyncHTTPConnection._connect = self._connect  # type: ignore[method-assign]


def _pool(config: Config, keep: int | None) -> httpx.AsyncBaseTransport:
    """A transport as ``Client`` makes its own, but with httpcore's own pass over its
    connections, keeping ``keep`` idle connections (None: all)."""
    return Transport(
        ssl_context=config.ssl_context(),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=keep),
    )


async def _round(
    hub: APIServer,
    make: Callable[[Config], httpx.AsyncBaseTransport] | None,
    requests: int,
    watches: int,
    separate: bool = False,
) -> dict[str, float]:
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    transport = make(config) if make is not None else None
    apiserver = hub.apiserver.popen
    assert apiserver is not None
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(config, transport=transport))
        watcher = await stack.enter_async_context(Client(config)) if separate else client
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        for index in range(OBJECTS):
            body = {"metadata": {"name": f"cm-{index}"}, "data": {"n": "0"}}
            await client.create(CONFIG_MAPS, body, namespace=namespace)
        quiet = f"{namespace}-quiet"
        await client.create(NAMESPACES, {"metadata": {"name": quiet}})
        async with trio.open_nursery() as nursery:
            # Watches of a namespace nothing changes: their connections are what counts here,
            # not decoding their events.
            for _ in range(watches):
                events = await start_watch(nursery, watcher, CONFIG_MAPS, namespace=quiet)
                nursery.start_soon(_drain, events)
            send, receive = trio.open_memory_channel[int](requests)
            for index in range(requests):
                send.send_nowait(index)
            send.close()

            async def worker() -> None:
                async for index in receive:
                    patch = {"data": {"n": str(index)}}
                    await client.patch_merge(
                        CONFIG_MAPS, f"cm-{index % OBJECTS}", patch, namespace=namespace
                    )

            with _Connections() as connections:
                cpu, hub_cpu, began = (
                    time.process_time(),
                    _cpu_of(apiserver.pid),
                    time.perf_counter(),
                )
                async with trio.open_nursery() as workers:
                    for _ in range(WORKERS):
                        workers.start_soon(worker)
                wall = time.perf_counter() - began
                cpu = time.process_time() - cpu
                hub_cpu = _cpu_of(apiserver.pid) - hub_cpu
            nursery.cancel_scope.cancel()
        await client.delete(NAMESPACES, namespace)
        await client.delete(NAMESPACES, quiet)
    return {
        "per_s": requests / wall,
        "cpu_ms": cpu / requests * 1000,
        "hub_cpu_ms": hub_cpu / requests * 1000,
        "opened": connections.opened,
    }


async def bench(hub: APIServer, requests: int, watches: int, rounds: int) -> list[str]:
    variants: list[tuple[str, Callable[[Config], httpx.AsyncBaseTransport] | None, bool]] = [
        ("this client", None, False),
        ("httpcore's own pass, 20 kept (the client before)", lambda c: _pool(c, 20), False),
        ("one pool, every connection kept", lambda c: _pool(c, None), False),
        ("requests on a pool of their own, 32 kept", lambda c: _pool(c, 32), True),
    ]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    for _ in range(rounds):  # interleaved, so that both see the same machine
        for name, make, separate in variants:
            results[name].append(await _round(hub, make, requests, watches, separate))
    rows = [
        f"| {WORKERS} writes in flight, {watches} watches, {requests} writes a round "
        "| writes/s | client CPU per write | API server CPU per write | connections opened |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, found in results.items():

        def median(key: str, found: list[dict[str, float]] = found) -> float:
            return sorted(r[key] for r in found)[len(found) // 2]

        rows.append(
            f"| {name} | {median('per_s'):.0f} | {median('cpu_ms'):.2f} ms "
            f"| {median('hub_cpu_ms'):.2f} ms | {median('opened'):.0f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--watches", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each, interleaved")
    args = parser.parse_args()
    with ControlPlane.start() as plane:
        rows = trio.run(bench, plane.hub, args.requests, args.watches, args.rounds)
    print(
        f"\nkube-apiserver {plane.hub.version}, {os.cpu_count()} cores; medians of {args.rounds}\n"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
