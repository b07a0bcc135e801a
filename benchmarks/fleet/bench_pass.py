"""The Environments actor's passes over one namespace of 1,000 / 3,000 / 10,000 Clusters, no server.

Run as ``.venv/bin/python benchmarks/fleet/bench_pass.py <checkout>``: the checkout's kokumi is
imported, so two checkouts (before and after a change) compare on one machine.

One Environment selects all, 5 % of the Clusters are not Ready. Each pass runs in Trio with an
instrument that times every task step, as in the fleet benchmark: "pass" is the whole pass,
"step" the longest time it held the event loop without a checkpoint. Three passes:

- one Cluster changed (its status, say), as after every Cluster event: median of 5;
- the first pass after the initial list (every Cluster new), as when the manager starts;
- the Environment's selector changed, so that every Cluster is matched again.

The status write goes to a stand-in client that answers at once.
"""

import gc
import inspect
import statistics
import sys
import time

import trio

sys.path.insert(0, sys.argv[1])
from kokumi.actors.environments import EnvironmentsActor
from kokumi.actors.metrics import Metrics
from kokumi.core import api
from kokumi.kube.watch import Store


def cluster(i, ready, version=None):
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {
            "name": f"c{i:05d}",
            "namespace": "fleet",
            "uid": f"u{i}",
            "resourceVersion": str(version or 1000 + i),
            "generation": 1,
            "labels": {"fleet": "bench"},
        },
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": f"c{i:05d}"}}},
        "status": {
            "server": f"https://127.20.{i // 250}.{i % 250}:6443",
            "kubernetesVersion": "v1.36.3",
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "Ready" if ready else "Unreachable",
                    "message": "ok"
                    if ready
                    else "timed out after 10 s: did not answer in time; check firewalls",
                    "lastTransitionTime": "2026-11-30T12:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        },
    }


def environment(labels, version):
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Environment",
        "metadata": {
            "name": "all",
            "namespace": "fleet",
            "uid": "e",
            "generation": 1,
            "resourceVersion": str(version),
        },
        "spec": {"clusterSelector": {"matchLabels": labels}},
    }


class Client:
    async def patch_merge(self, *args, **kwargs):
        await trio.lowlevel.checkpoint()  # a write awaits the network
        return {}


class Steps(trio.abc.Instrument):
    def __init__(self):
        self.longest = 0.0
        self._began = time.perf_counter()
        self.gc_longest = 0.0
        gc.callbacks.append(self.collected)

    def collected(self, phase, info):
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif info["generation"] == 2:
            self.gc_longest = max(self.gc_longest, time.perf_counter() - self._gc_began)

    def before_task_step(self, task):
        self._began = time.perf_counter()

    def after_task_step(self, task):
        self.longest = max(self.longest, time.perf_counter() - self._began)


def put(store, obj):
    key = ("fleet", obj["metadata"]["name"])
    store._objects[key] = obj
    if hasattr(store, "_by_namespace"):
        store._by_namespace.setdefault("fleet", {})[key[1]] = obj


async def timed(actor, steps, name=None):
    """One pass; (whole pass, longest step) in ms."""
    if "work" in inspect.signature(actor._reconcile).parameters:
        actor.changed("fleet", name)
        args = ("fleet", actor._dirty.pop("fleet"))
    else:  # a checkout from before the index: every pass recomputes the namespace
        args = ("fleet",)
    await trio.lowlevel.checkpoint()
    steps.longest = steps.gc_longest = 0.0
    began = time.perf_counter()
    async with trio.open_nursery() as nursery:  # the pass in a task of its own, as in the actor
        nursery.start_soon(actor._reconcile, *args)
    return (
        (time.perf_counter() - began) * 1000,
        steps.longest * 1000,
        steps.gc_longest * 1000,
    )


async def bench(n, steps):
    clusters, envs = Store(), Store()
    clusters._replace(tuple(cluster(i, i % 20 != 0) for i in range(n)))
    envs._replace((environment({"fleet": "bench"}, 5),))
    actor = EnvironmentsActor(Client(), clusters, envs, lambda *a: None, Metrics())
    first = await timed(actor, steps)
    one = []
    for round in range(6):
        # one Cluster changed per pass, as during onboarding or when a finding changes
        obj = cluster(round, round % 2 == 0, version=10**6 + round)
        put(clusters, obj)
        one.append(await timed(actor, steps, obj["metadata"]["name"]))
    envs._replace((environment({"fleet": "bench", "tier": "x"}, 6),))
    if hasattr(actor, "environments_changed"):
        actor.environments_changed("fleet")
    selector = await timed(actor, steps)
    print(
        f"N={n}: one Cluster changed {statistics.median(p[0] for p in one[1:]):.1f} ms"
        f" (longest step {max(p[1] for p in one[1:]):.1f});"
        f" first pass {first[0]:.0f} ms (longest step {first[1]:.0f}, full GC {first[2]:.0f});"
        f" selector changed {selector[0]:.0f} ms (longest step {selector[1]:.0f},"
        f" full GC {selector[2]:.0f})",
        flush=True,
    )


async def main():
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    for n in (1000, 3000, 10000):
        await bench(n, steps)


trio.run(main)
