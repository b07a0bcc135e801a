"""Ten replicas with ``--shards 10`` over N Clusters on the in-process API fake, no spokes.

Run from the repository root: ``PYTHONPATH=. python benchmarks/fleet/bench_model.py --clusters
10000 30000 100000`` (each N in a process of its own, one after the other, so that each one's
memory is its own). What it shows: whether a replica's own work (dispatching its Clusters'
checks, the registry, the status writes) grows with the fleet's N or only with its share.

Each N runs in one Trio run on a ``MockClock`` that jumps whenever every task waits, so virtual
minutes pass as fast as the CPU allows and no figure depends on the machine's load but the wall
times: the fake hub (``tests/support/fakeapi.py``, with the Lease, Secret, Cluster and
Environment kinds) seeded with N Clusters of one kubeconfig Secret each, a thousand to a
namespace, one Environment per namespace selecting all; then ten real ``Manager``s, each with
its own client to the fake, ``Sharding(shards=10, max_shards=1)``, and a stand-in check that
answers Ready after 20 ms (virtual) with no connection, as the model test's does. Work handed to
worker threads runs in the calling task (as in the model test), so each replica's CPU is the
CPU of its tasks: a Trio instrument charges every task step's thread CPU to the replica whose
task (or whose task's ancestors) ran it; the fake's own work for a request runs in the
requesting task and is charged with it.

Phases, in virtual time: onboarding (from the replicas' start until every Cluster is Ready and
registered with Argo CD: N status writes, N Argo CD Secrets, the finalizers, the Environments'
status), then ``--minutes`` steady minutes. Printed per N: wall seconds of each phase, each
replica's Clusters, checks and CPU (per check, per minute), the hub requests by verb, and the
process's RSS (the fake's objects, then with the ten replicas, whose watch caches each hold the
whole fleet).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kokumi.core import api  # noqa: E402
from kokumi.core.cluster.status import Outcome  # noqa: E402
from kokumi.core.fleet.leader import Timing  # noqa: E402
from kokumi.core.fleet.shards import Sharding  # noqa: E402
from kokumi.core.reasons import Reason  # noqa: E402
from kokumi.kube.client import Client  # noqa: E402
from kokumi.kube.config import Config  # noqa: E402
from kokumi.manager import Manager  # noqa: E402
from kokumi.runtime.options import Options  # noqa: E402
from tests.support.fakeapi import CAPI_CLUSTERS, DEFAULT_KINDS, FakeApi, Kind  # noqa: E402

OWN, ARGO = "kokumi", "argocd"
HUB = "https://hub.invalid"
PER_NAMESPACE = 1000
CHECK_SECONDS = 0.02


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def kubeconfig(index: int) -> str:
    server = f"https://10.{index // 65536}.{(index // 256) % 256}.{index % 256}:6443"
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "s", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "s", "context": {"cluster": "s", "user": "u"}}],
            "current-context": "s",
        }
    )


class ByReplica(trio.abc.Instrument):
    """Each task step's thread CPU, charged to the replica whose task tree ran it."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.by_name: dict[tuple[str, str], float] = defaultdict(float)
        self.owner: dict[trio.lowlevel.Task, str] = {}
        self._began = 0.0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith("replica-"):
            self.owner[task] = task.name
            return
        nursery = task.parent_nursery
        parent = nursery.parent_task if nursery is not None else None
        self.owner[task] = self.owner.get(parent, "other") if parent is not None else "other"

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.owner.pop(task, None)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        spent = time.thread_time() - self._began
        owner = self.owner.get(task, "other")
        self.cpu[owner] += spent
        # What kind of work: the task's name without its numbers (the actor or loop it is).
        kind = "".join(c for c in task.name.rsplit(".", 1)[-1] if not c.isdigit())[:60]
        self.by_name[(owner, kind)] += spent


async def inline_thread(fn: Any, *args: Any, **_kwargs: Any) -> Any:
    """``trio.to_thread.run_sync`` in the task itself: its CPU is the replica's, and the mock
    clock never jumps while a thread works."""
    await trio.lowlevel.checkpoint()
    return fn(*args)


def seed(fake: FakeApi, n: int) -> list[str]:
    namespaces = [f"team-{k:03d}" for k in range((n + PER_NAMESPACE - 1) // PER_NAMESPACE)]
    for ns in namespaces:
        fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        fake.put(
            {
                "apiVersion": api.API_VERSION,
                "kind": "Environment",
                "metadata": {"name": "all", "namespace": ns},
                "spec": {"clusterSelector": {"matchLabels": {"fleet": "model"}}},
            }
        )
    for i in range(n):
        ns, name = namespaces[i // PER_NAMESPACE], f"c{i:06d}"
        value = base64.b64encode(kubeconfig(i).encode()).decode()
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": ns},
                "data": {"value": value},
            }
        )
        fake.put(
            {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": ns, "labels": {"fleet": "model"}},
                "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": name}}},
            }
        )
    fake.compact()
    return namespaces


def count_done(fake: FakeApi) -> tuple[int, int]:
    """Clusters Ready, and Argo CD Secrets (read from the fake's store, no request)."""
    ready = 0
    for obj in fake._objects[api.CLUSTERS.plural + "." + api.CLUSTERS.group].values():
        for condition in (obj.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "Ready" and condition.get("reason") == "Ready":
                ready += 1
    registered = sum(1 for key in fake._objects["secrets"] if key[0] == ARGO)
    return ready, registered


async def one(n: int, replicas: int, shards: int, minutes: float) -> dict[str, Any]:
    out: dict[str, Any] = {"clusters": n, "replicas": replicas, "shards": shards}
    started = time.perf_counter()
    fake = FakeApi(
        # Cluster API's clusters and Services served (none of either), so that the
        # ClusterSources actor's watches of them wait instead of retrying a 404.
        kinds=(*DEFAULT_KINDS, CAPI_CLUSTERS, Kind("", "v1", "services", "Service")),
        namespaces=("default", "kube-system", OWN, ARGO),
        history=max(1000, 4 * n),
    )
    seed(fake, n)
    out["seed_wall_s"] = time.perf_counter() - started
    out["rss_fake_mb"] = rss_mb()
    instrument = ByReplica()
    trio.lowlevel.add_instrument(instrument)
    checks: Counter[str] = Counter()
    requests: Counter[str] = Counter()

    class Transport(httpx.AsyncBaseTransport):
        def __init__(self, name: str) -> None:
            self.name = name

        async def handle_async_request(self, request: Any) -> Any:
            requests[f"{self.name} {request.method}"] += 1
            return await fake.handle_async_request(request)

    def make_check(name: str) -> Any:
        async def check(
            connection: Any,
            *,
            timeout: float,  # noqa: ASYNC109 - the probe's signature
            egress: object = None,
            cluster_wide: bool = True,
        ) -> Outcome:
            checks[name] += 1
            await trio.sleep(CHECK_SECONDS)
            return Outcome(True, Reason.READY, "reachable", connection.server, "v1.36.3")

        return check

    async def check_own(client: Client, *, timeout: float) -> Outcome:  # noqa: ASYNC109
        return Outcome(True, Reason.READY, "reachable", "https://kubernetes.default.svc", "v")

    managers: dict[str, Manager] = {}
    async with trio.open_nursery() as nursery:
        for k in range(replicas):
            name = f"replica-{k}"
            client = Client(
                Config(server=HUB),
                transport=Transport(name),
                max_retries=0,
                field_manager=f"kokumi-{k}",
                user_agent=f"kokumi-{k}",
            )
            options = Options(
                namespace=OWN,
                argocd_namespace=ARGO,
                field_manager=f"kokumi-{k}",
                keep_in_cluster=False,
                sharding=Sharding(name, shards, -(-shards // replicas), Timing()),
            )
            manager = Manager(client, options, check=make_check(name), check_own=check_own)
            managers[name] = manager
            nursery.start_soon(manager.run, name=name)
        began, wall = trio.current_time(), time.perf_counter()
        last = 0.0
        while True:
            await trio.sleep(5)
            ready, registered = count_done(fake)
            if ready >= n and registered >= n:
                break
            if time.perf_counter() - last > 30:
                print(f"  N={n}: {ready} Ready, {registered} registered,"
                      f" {trio.current_time() - began:.0f} s virtual,"
                      f" {time.perf_counter() - wall:.0f} s wall, RSS {rss_mb():.0f} MB",
                      file=sys.stderr, flush=True)  # fmt: skip
                last = time.perf_counter()
        out["onboard_virtual_s"] = trio.current_time() - began
        out["onboard_wall_s"] = time.perf_counter() - wall
        out["rss_onboarded_mb"] = rss_mb()
        onboard_cpu = dict(instrument.cpu)
        onboard_requests = dict(requests)
        # A minute to settle (the first minute's checks spread the fleet), then the window.
        await trio.sleep(60)
        cpu0, checks0, requests0 = dict(instrument.cpu), dict(checks), dict(requests)
        by_name0 = dict(instrument.by_name)
        began, wall = trio.current_time(), time.perf_counter()
        await trio.sleep(minutes * 60)
        window = trio.current_time() - began
        out["steady_wall_s"] = time.perf_counter() - wall
        out["steady_virtual_s"] = window
        out["rss_steady_mb"] = rss_mb()
        per: dict[str, Any] = {}
        for name, manager in managers.items():
            cpu = instrument.cpu[name] - cpu0.get(name, 0.0)
            done = checks[name] - checks0.get(name, 0)
            held = sorted(s for s, e in manager.shard_electors.items() if e.state.leading)
            per[name] = {
                "shards": held,
                "onboard_cpu_s": onboard_cpu.get(name, 0.0),
                "onboard_requests": sum(
                    v for k, v in onboard_requests.items() if k.startswith(name + " ")
                ),
                "checks_per_min": done / window * 60,
                "cpu_s_per_min": cpu / window * 60,
                "cpu_ms_per_check": cpu / done * 1000 if done else float("nan"),
                "requests_per_min": {
                    k.split(" ", 1)[1]: (v - requests0.get(k, 0)) / window * 60
                    for k, v in requests.items()
                    if k.startswith(name + " ") and v - requests0.get(k, 0)
                },
            }
        out["replicas_figures"] = per
        out["other_cpu_s_per_min"] = (
            (instrument.cpu["other"] - cpu0.get("other", 0.0)) / window * 60
        )
        kinds: Counter[str] = Counter()
        for (owner, kind), value in instrument.by_name.items():
            if owner.startswith("replica-"):
                kinds[kind] += value - by_name0.get((owner, kind), 0.0)
        out["steady_cpu_by_task_s_per_min"] = {k: v / window * 60 for k, v in kinds.most_common(8)}
        nursery.cancel_scope.cancel()
    return out


def summary(r: dict[str, Any]) -> str:
    per = r["replicas_figures"].values()
    cpu_check = [p["cpu_ms_per_check"] for p in per]
    cpu_min = [p["cpu_s_per_min"] for p in per]
    clusters_each = r["clusters"] / r["replicas"]
    onboard = [p["onboard_cpu_s"] for p in per]
    return (
        f"| {r['clusters']:,} | {clusters_each:,.0f} |"
        f" {statistics.fmean(onboard) / clusters_each * 1000:.2f} ms"
        f" ({min(onboard):.0f}-{max(onboard):.0f} s) |"
        f" {statistics.fmean(cpu_check):.3f} ms ({min(cpu_check):.3f}-{max(cpu_check):.3f}) |"
        f" {statistics.fmean(cpu_min) / clusters_each * 1000:.2f} s |"
        f" {statistics.fmean(p['checks_per_min'] for p in per):,.0f} |"
        f" {r['rss_fake_mb']:.0f} / {r['rss_steady_mb']:.0f} MB"
        f" ({(r['rss_steady_mb'] - r['rss_fake_mb']) / r['replicas'] / r['clusters'] * 1e3:.1f}"
        f" KB per Cluster per replica) |"
        f" {r['onboard_wall_s']:.0f} / {r['steady_wall_s']:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[10000, 30000, 100000])
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=3.0, help="steady virtual minutes")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if args.one:
        trio.to_thread.run_sync = inline_thread  # type: ignore[assignment]
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(one, args.clusters[0], args.replicas, args.shards, args.minutes,
                          clock=clock)  # fmt: skip
        result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result), flush=True)
        return
    results = []
    print(
        "| N | Clusters per replica | onboarding CPU per Cluster, replica mean (range) |"
        " steady CPU per check, replica mean (range) | steady CPU a minute per 1,000 served |"
        " checks a minute per replica | RSS: the fake alone / with the replicas |"
        " wall: onboarding / steady |\n|---:|---:|---|---|---:|---:|---|---|",
        flush=True,
    )
    for n in args.clusters:
        child = subprocess.run(
            [sys.executable, __file__, "--one", "--clusters", str(n), "--replicas",
             str(args.replicas), "--shards", str(args.shards), "--minutes", str(args.minutes)],
            capture_output=False, stdout=subprocess.PIPE, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        if child.returncode != 0:
            print(f"| {n:,} | did not finish (exit {child.returncode}) |", flush=True)
            continue
        result = json.loads(child.stdout.strip().splitlines()[-1])
        results.append(result)
        print(summary(result), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
