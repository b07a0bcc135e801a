"""Run the model tests again and again under distinct Hypothesis seeds; count passes and fails.

A test that fails some runs is a failing test, and "it passed on my machine" says nothing about
how often: this prints, for each model test, how many of N seeded runs passed and the seeds of
those that failed, so a failure can be replayed with ``--hypothesis-seed=SEED``.

``python tools/flake.py --runs 30 --jobs 2`` (``nox -s flake -- --runs 30``). Each run is a
separate pytest process at the test's CI settings (its own default example count), so a run
here is exactly a CI run of that test with a known seed. The seeds are ``first .. first+N-1``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TESTS = (
    "tests/test_model.py::test_the_manager_survives_faults_and_converges",
    "tests/test_model_shards.py::test_two_replicas_never_serve_one_cluster_and_converge",
)


def run_one(test: str, seed: int, logs: Path) -> tuple[str, int, bool, float]:
    started = time.monotonic()
    log = logs / f"{Path(test.split('::', maxsplit=1)[0]).stem}-{seed}.log"
    with log.open("wb") as out:
        code = subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                test,
                "-q",
                "-p",
                "no:cacheprovider",
                f"--hypothesis-seed={seed}",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )
    return test, seed, code == 0, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="seeded runs of each test")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one per core)")
    parser.add_argument("--logs", type=Path, default=ROOT / ".flake", help="one log per run")
    parser.add_argument("tests", nargs="*", default=list(TESTS), help="pytest node ids")
    args = parser.parse_args()
    args.logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    jobs = [(t, s) for t in args.tests for s in range(args.first, args.first + args.runs)]
    results: dict[str, list[tuple[int, bool, float]]] = {t: [] for t in args.tests}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for test, seed, passed, seconds in pool.map(lambda j: run_one(j[0], j[1], args.logs), jobs):
            results[test].append((seed, passed, seconds))
            word = "passed" if passed else "FAILED"
            print(f"{test} seed {seed}: {word} in {seconds:.0f} s", flush=True)
    print(f"\nflake: {args.runs} seeded runs of each test in {time.monotonic() - started:.0f} s")
    failed_any = False
    for test, rows in results.items():
        failed = [seed for seed, passed, _ in rows if not passed]
        times = sorted(seconds for _, _, seconds in rows)
        median = times[len(times) // 2] if times else 0.0
        print(
            f"{test}: {len(rows) - len(failed)} of {len(rows)} passed, median {median:.0f} s"
            + (f"; failing seeds {failed} (logs in {args.logs})" if failed else "")
        )
        failed_any = failed_any or bool(failed)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
