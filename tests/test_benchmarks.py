"""The model benchmark still runs on this tree.

``benchmarks/fleet/bench_model.py`` drives ten real Managers on the in-process fake with a
stand-in for the probe; when the probe's signature grew (the least-privilege question's
``cluster_wide``), the stand-in refused every check and the benchmark waited for ever for a
fleet that could not get Ready, unnoticed until the next figures were wanted. Its smallest run
takes seconds, so the suite runs it: the figures stay in benchmarks/README.md, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_model_benchmark_onboards_and_checks_a_small_fleet() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet" / "bench_model.py"), "--one",
         "--clusters", "40", "--minutes", "2"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "unexpected error" not in run.stderr, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    figures = result["replicas_figures"]
    assert len(figures) == 10
    # Every replica served its shard, and the fleet was checked about once a minute in the two
    # steady minutes (40 Clusters, each every 60-66 s: 36-40 a minute; a broken check makes 0).
    assert sorted(shard for f in figures.values() for shard in f["shards"]) == list(range(10))
    assert sum(f["checks_per_min"] for f in figures.values()) >= 30
