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
import base64
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support import strategies as s
from tests.support.fakeapi import FakeApi
from tests.support.standin import put_environment

NS = "fleet"


async def _ready(
    connection: Connection,
    *,
    timeout: float,  # noqa: ASYNC109 - the check's signature
    egress: object = None,
) -> Outcome:
    await trio.sleep(0.01)
    return Outcome(True, Reason.READY, "reachable", connection.server, "v1.36.3")


async def _own(client: Client, *, timeout: float) -> Outcome:  # noqa: ASYNC109
    return Outcome(True, Reason.READY, "reachable", IN_CLUSTER_SERVER, "v1.36.3")


def _fleet(n: int) -> FakeApi:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS))
    put_environment(fake, NS)
    ca = s.b64(s.ca_pem())
    for i in range(n):
        server = f"https://10.{i // 62_500}.{(i // 250) % 250}.{i % 250 + 1}:6443"
        kubeconfig = s.kubeconfig(
            cluster={"server": server, "certificate-authority-data": ca},
            user={"token": f"token-{i}"},
        )
        value = base64.b64encode(s.dump(kubeconfig).encode()).decode()
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"kc{i}", "namespace": NS},
                "data": {"value": value},
            }
        )
        fake.put(
            {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": f"c{i}", "namespace": NS},
                "spec": {
                    "connection": "Kubeconfig",
                    "kubeconfig": {"secretRef": {"name": f"kc{i}"}},
                },
            }
        )
    return fake


async def measure(n: int, rounds: int, profile: bool) -> list[float]:
    fake = _fleet(n)
    figures: list[float] = []
    config = Config(server="https://hub.example:6443")
    async with Client(config, transport=fake, max_retries=0) as client:
        options = Options(namespace="kokumi", argocd_namespace="argocd")
        manager = Manager(client, options, check=_ready, check_own=_own)
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
