"""``/metrics`` at 10,000 Clusters: the page's size, and the time to take and render it.

Run from the repository root: ``python benchmarks/bench_metrics.py [CLUSTERS]``. It fills the
manager's :class:`~kokumi.actors.metrics.Metrics` as the Cluster watch does (one relist of
CLUSTERS Clusters, a fifth of them not Ready with a Ready history, half holding a registration,
each with a server and a version), then takes the figures as a scrape does on the event loop
(:meth:`Metrics.exposition`) and renders them as the worker thread does (``generate_latest``).
Figures are printed as Markdown rows for benchmarks/README.md; nothing is asserted.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from typing import Any

from prometheus_client.exposition import generate_latest

from kokumi.actors.metrics import Metrics, clusters_log
from kokumi.core import api
from kokumi.kube.watch import Resync, WatchEvent

ROUNDS = 5


def cluster(i: int, *, ready: bool) -> dict[str, Any]:
    reason = "Ready" if ready else ("Unreachable", "Forbidden", "ClusterConflict")[i % 3]
    return {
        "metadata": {
            "namespace": f"team-{i % 100}",
            "name": f"cluster-{i:05d}",
            "finalizers": [api.FINALIZER] if i % 2 else [],
        },
        "status": {
            "server": f"https://cluster-{i:05d}.team-{i % 100}.example.com:6443",
            "kubernetesVersion": f"v1.3{i % 4}.{i % 7}",
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": reason}
            ],
        },
    }


def main(clusters: int) -> None:
    clusters_log.setLevel(logging.ERROR)  # a line per Ready change: 2,000 of them here
    now = [0.0]
    metrics = Metrics(clock=lambda: now[0])
    metrics.leader.set(1)
    metrics.clusters_seen(Resync(tuple(cluster(i, ready=True) for i in range(clusters))))
    for i in range(0, clusters, 5):  # a fifth went down a minute later
        now[0] = 60.0
        metrics.clusters_seen(WatchEvent("MODIFIED", cluster(i, ready=False)))
    now[0] = 600.0
    take, render, sizes = [], [], []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        snapshot = metrics.exposition()
        took = time.perf_counter()
        page = generate_latest(snapshot)
        done = time.perf_counter()
        take.append((took - began) * 1000)
        render.append((done - took) * 1000)
        sizes.append(len(page))
    text = page.decode()
    per_family: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            per_family[name] = per_family.get(name, 0) + len(line) + 1
    print("| Clusters | page | series | take (loop) | render (thread) |")
    print("| --- | --- | --- | --- | --- |")
    lines = sum(1 for line in text.splitlines() if not line.startswith("#"))
    print(
        f"| {clusters:,} | {sizes[-1] / 1e6:.2f} MB | {lines:,} |"
        f" {statistics.median(take):.0f} ms | {statistics.median(render):.0f} ms |"
    )
    print()
    print("| family | bytes |")
    print("| --- | --- |")
    for name, size in sorted(per_family.items(), key=lambda kv: -kv[1])[:8]:
        print(f"| `{name}` | {size / 1e6:.2f} MB |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
