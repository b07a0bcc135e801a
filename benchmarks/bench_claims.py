"""The registry's cost of serving the minute's claims, alone on the in-process API fake.

Every check of every Cluster claims its server again. Run from the repository root:
``python benchmarks/bench_claims.py [--clusters 1000] [--rounds 5]``. It registers N Clusters
(one server each, half of them with a waiter behind), then times rounds of every Cluster
claiming again with the same connection, and prints the microseconds of CPU per claim served
and the writes those rounds made (there should be none). Put another tree first on PYTHONPATH
to time it side by side: the figures go in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.append(str(Path(__file__).resolve().parent.parent))

from kokumi.actors.registry import Registry
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from tests.support.fakeapi import FakeApi


async def measure(clusters: int, rounds: int) -> tuple[float, int]:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "fleet"))
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        registry = Registry(client, "argocd")
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            claims = []
            for index in range(clusters):
                server = f"https://10.1.{index // 250}.{index % 250 + 1}:6443"
                claims.append(
                    (ClusterRef("fleet", f"c{index:05d}"), Connection(server, token=f"h{index}"))
                )
                if index % 2 == 0:  # a waiter behind every other holder
                    claims.append(
                        (
                            ClusterRef("fleet", f"w{index:05d}"),
                            Connection(server, token=f"w{index}"),
                        )
                    )
            for ref, connection in claims:
                await registry.want(ref, f"uid-{ref.name}", connection)
            writes = registry._facts.metrics.registry_writes
            started = time.process_time()
            for _ in range(rounds):
                for ref, connection in claims:
                    await registry.want(ref, f"uid-{ref.name}", connection)
            spent = time.process_time() - started
            writes = registry._facts.metrics.registry_writes - writes
            nursery.cancel_scope.cancel()
    return spent / (rounds * len(claims)) * 1e6, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    micros, writes = trio.run(
        measure, args.clusters, args.rounds, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    print(
        f"| {args.clusters} holders + {args.clusters // 2} waiters | {micros:.0f} µs a claim | "
        f"{writes} writes |"
    )


if __name__ == "__main__":
    main()
