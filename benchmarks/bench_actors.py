"""The event loop's CPU per steady check of the whole manager but the probe: actors, schedule,
check slots, status, registry, metrics.

Run: ``.venv/bin/python benchmarks/bench_actors.py [--clusters 2000] [--rounds 3] [--profile]``.
The real :class:`kokumi.manager.Manager` runs on the in-process API fake (tests/support/fakeapi.py)
under Trio's autojump clock, with N Kubeconfig Clusters (each with its own Secret and server)
selected by one Environment, and a check that answers Ready after 10 ms of simulated time. After
ten simulated minutes (onboarding and its settling), each round counts the checks of the next ten
minutes (the first re-reads of the kubeconfig Secrets, 10-20 minutes after the first, fall in
them) and the process's CPU time over them: everything here runs in the event loop's thread, so
that is the loop's work per check, the probe's own excluded (``bench_probe.py`` measures that).
Seconds of CPU, not of the machine's time: a run of 2,000 Clusters takes about 10 s a round.

``--profile`` prints the last round's 40 costliest functions (cProfile on CPU time; the profile
slows the run several times over, so its figure is not the one to quote).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster, put_environment

NS = "fleet"


def _fleet(n: int) -> FakeApi:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS))
    put_environment(fake, NS)
    for i in range(n):
        server = f"https://10.{i // 62_500}.{(i // 250) % 250}.{i % 250 + 1}:6443"
        put_cluster(fake, NS, f"c{i}", server)
    return fake


async def measure(n: int, rounds: int, profile: bool) -> list[float]:
    fake = _fleet(n)
    figures: list[float] = []
    config = Config(server="https://hub.example:6443")
    async with Client(config, transport=fake, max_retries=0) as client:
        options = Options(namespace="kokumi", argocd_namespace="argocd")
        spokes = StandInSpokes(latency=0.01)  # every spoke answers Ready after 10 ms
        manager = Manager(client, options, check=spokes.check, check_own=spokes.check_own)
        checks = manager.context.metrics.cluster_checks
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(600.0)
            for index in range(rounds):
                profiler = cProfile.Profile(time.process_time)
                if profile and index == rounds - 1:
                    profiler.enable()
                began, cpu = sum(checks.values()), time.process_time()
                await trio.sleep(600.0)
                done, cpu = sum(checks.values()) - began, time.process_time() - cpu
                profiler.disable()
                figures.append(cpu / done * 1000)
                print(f"round {index + 1}: {done} checks, {figures[-1]:.3f} ms of CPU a check")
            nursery.cancel_scope.cancel()
    if profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    clock = trio.testing.MockClock(autojump_threshold=0)
    figures = trio.run(measure, args.clusters, args.rounds, args.profile, clock=clock)
    print(
        f"{args.clusters} Clusters: the event loop's CPU per steady check, min"
        f" {min(figures):.3f} ms, median {statistics.median(figures):.3f} ms"
    )


if __name__ == "__main__":
    main()
