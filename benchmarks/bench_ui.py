"""How long the Clusters page takes to render for 1,000 and 10,000 Clusters, from memory.

What the server spends once the API server has answered: the rows of
:func:`kokumi.core.clusterview.row` and the autoescaped Jinja2 template, as ``GET /clusters`` does
it (through ``kokumi.ui.pages._page``), without the list request itself. Best of five rounds.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from kokumi.core import clusterview
from kokumi.ui.pages import _page
from kokumi.ui.security import Session

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
REASONS = ("Ready", "Unreachable", "ClusterConflict", "CredentialRejected")


def cluster(i: int) -> dict[str, Any]:
    reason = REASONS[i % len(REASONS)]
    return {
        "metadata": {
            "name": f"cluster-{i:05d}",
            "namespace": f"team-{i % 40:02d}",
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {"fleet": "edge", "region": f"r{i % 7}", "tier": "prod"},
        },
        "spec": {
            "connection": "Kubeconfig",
            "kubeconfig": {"secretRef": {"name": f"c{i}-kubeconfig"}},
        },
        "status": {
            "server": f"https://cluster-{i:05d}.fleet.example:6443",
            "kubernetesVersion": "v1.36.3",
            "conditions": [
                {"type": "Ready", "status": "True" if reason == "Ready" else "False",
                 "reason": reason, "message": f"the API server answers ({reason})",
                 "lastTransitionTime": "2026-12-01T11:00:00Z"}
            ],
        },
    }  # fmt: skip


def best(fn: Any, rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    session = Session(csrf="x" * 43, expires=0)
    print("| Clusters | rows | template | page total | bytes | per Cluster |")
    print("|---:|---:|---:|---:|---:|---:|")
    base = 0.0
    for count in (1_000, 10_000):
        items = [cluster(i) for i in range(count)]
        rows_time = best(lambda items=items: [clusterview.row(c, NOW) for c in items])
        rows = sorted((clusterview.row(c, NOW) for c in items), key=lambda r: (r.namespace, r.name))

        def render(rows: list[clusterview.Row] = rows) -> Any:
            return _page(
                "clusters.html",
                {"title": "Clusters", "session": session, "rows": rows, "namespace": "",
                 "selector": "", "reason": "", "reasons": list(REASONS), "scope": "all",
                 "error": "", "refresh": 10, "checking": clusterview.CHECKING},
            )  # fmt: skip

        page_time = best(render)
        size = len(render().body)
        total = rows_time + page_time
        base = base or total / count
        print(
            f"| {count:,} | {rows_time * 1e3:.0f} ms | {page_time * 1e3:.0f} ms | "
            f"{total * 1e3:.0f} ms | {size / 1e6:.1f} MB | {total / count * 1e6:.0f} µs "
            f"({total / count / base:.2f}x) |"
        )


if __name__ == "__main__":
    main()
