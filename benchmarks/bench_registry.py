"""The server registry: the pure table's pace, and handover on a real hub.

Run from the repository root: ``.venv/bin/python benchmarks/bench_registry.py``. It starts its own
control plane (hub + spoke), registers the spoke as the spec's steps do, and runs the manager
in-process. Figures are printed as Markdown rows for benchmarks/README.md.
"""

from __future__ import annotations

import logging
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

from kokumi.core import api
from kokumi.core.registry import argocd, ownership
from kokumi.core.registry.ownership import ClusterRef
from kokumi.testing.controlplane import ControlPlane

# The tests' helpers register the spoke and drive a manager exactly as the tests do.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kokumi.testing import run_kubectl
from kokumi.testing.spoke import register
from tests.support.manager import Workspace, manager, wait_for, workspace

CLUSTERS = 20
HANDOVERS = 10


def bench_table(events: int = 200_000) -> float:
    """Events per second through ``ownership.step`` over a busy random fleet."""
    rng = random.Random(7)
    clusters = [ClusterRef(f"ns-{i % 40}", f"c-{i}") for i in range(400)]
    servers = [f"https://server-{i}.example:6443" for i in range(100)]
    stream: list[ownership.Event] = []
    for _ in range(events):
        roll = rng.random()
        if roll < 0.6:
            stream.append(ownership.Want(rng.choice(clusters), rng.choice(servers)))
        elif roll < 0.95:
            stream.append(ownership.Release(rng.choice(clusters)))
        elif roll < 0.98:
            stream.append(ownership.Foreign(rng.choice(servers), "hand-made"))
        else:
            stream.append(ownership.ForeignGone(rng.choice(servers)))
    table = ownership.Table()
    started = time.perf_counter()
    for event in stream:
        table, _ = ownership.step(table, event)
    return events / (time.perf_counter() - started)


async def _holder(ws: Workspace) -> tuple[str, str] | None:
    secrets = await ws.argocd_secrets()
    if len(secrets) != 1:
        return None
    labels = secrets[0]["metadata"]["labels"]
    return labels[argocd.LABEL_CLUSTER_NAMESPACE], labels[argocd.LABEL_CLUSTER]


async def bench_handover(plane: ControlPlane, kubeconfig: str) -> dict[str, Any]:
    hub = plane.hub
    async with workspace(hub) as ws:
        namespaces = [await ws.namespace() for _ in range(CLUSTERS)]
        for ns in namespaces:
            await ws.kubeconfig_secret(ns, "spoke-kubeconfig", kubeconfig)
            await ws.environment(ns, "edge", {"fleet": "edge"})
        started = trio.current_time()
        async with manager(hub, ws.options(keep_in_cluster=False)) as running:
            # One by one, so that "first come" has a well-defined order.
            for ns in namespaces:
                await ws.cluster(ns, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})  # noqa: S106 - a Secret's name
            await wait_for(lambda: _holder(ws), lambda h: h is not None, "a holder", 60)
            first = trio.current_time() - started
            await wait_for(
                lambda: ws.client.list(api.CLUSTERS, label_selector="fleet=edge"),
                lambda listing: (
                    sum(
                        1
                        for c in listing["items"]
                        if c["metadata"]["namespace"] in namespaces
                        and (c.get("status", {}).get("conditions") or [{}])[0].get("reason")
                        == "ClusterConflict"
                    )
                    == CLUSTERS - 1
                ),
                "every Cluster but the holder waiting",
                120,
            )
            settled = trio.current_time() - started
            uid = (await ws.argocd_secrets())[0]["metadata"]["uid"]
            latencies = []
            for _ in range(HANDOVERS):
                holder = await _holder(ws)
                assert holder is not None
                gone = trio.current_time()
                await ws.client.delete(api.CLUSTERS, holder[1], namespace=holder[0])
                await wait_for(
                    lambda: _holder(ws),
                    lambda h, old=holder: h is not None and h != old,
                    "the next holder",
                    60,
                )
                latencies.append(trio.current_time() - gone)
            assert (await ws.argocd_secrets())[0]["metadata"]["uid"] == uid, "in place"
            writes = running.metrics.registry_writes
            await ws.cleanup()
    return {
        "first": first,
        "settled": settled,
        "median": statistics.median(latencies),
        "max": max(latencies),
        "writes": writes,
    }


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    rate = bench_table()
    print(f"| ownership.step, 200,000 random events over 400 Clusters | {rate:,.0f} events/s |")
    with ControlPlane.start() as plane:
        crds = str(Path(__file__).resolve().parent.parent / "deploy" / "crds")
        run_kubectl(plane.hub, "apply", "--server-side", "-f", crds)
        run_kubectl(plane.hub, "wait", "--for=condition=Established", "crd", "--all")
        registration = register(plane.spoke, run_kubectl)
        result = trio.run(bench_handover, plane, registration.kubeconfig)
    print(f"| {CLUSTERS} Clusters for one server: first registration | {result['first']:.2f} s |")
    settled = result["settled"]
    print(
        f"| {CLUSTERS} Clusters: one holds, the others report ClusterConflict | {settled:.2f} s |"
    )
    print(
        f"| handover after the holder's deletion, median of {HANDOVERS} "
        f"| {result['median'] * 1000:.0f} ms |"
    )
    print(f"| handover, slowest of {HANDOVERS} | {result['max'] * 1000:.0f} ms |")
    print(f"| registry writes for all of it | {result['writes']} |")


if __name__ == "__main__":
    main()
