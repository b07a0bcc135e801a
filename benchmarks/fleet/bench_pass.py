"""One Environments pass over one namespace, at 1,000 / 3,000 / 10,000 Clusters, no server.

Run as ``.venv/bin/python benchmarks/fleet/bench_pass.py <checkout>``: the checkout's kokumi is
imported, so two checkouts (before and after a change) compare on one machine.
"""

import statistics
import sys
import time

sys.path.insert(0, sys.argv[1])
from kokumi import api
from kokumi.actors.context import Metrics
from kokumi.actors.environments import EnvironmentsActor
from kokumi.kube.watch import Store


def cluster(i, ready):
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {
            "name": f"c{i:05d}",
            "namespace": "fleet",
            "uid": f"u{i}",
            "resourceVersion": str(1000 + i),
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


env = {
    "apiVersion": api.API_VERSION,
    "kind": "Environment",
    "metadata": {
        "name": "all",
        "namespace": "fleet",
        "uid": "e",
        "generation": 1,
        "resourceVersion": "5",
    },
    "spec": {"clusterSelector": {"matchLabels": {"fleet": "bench"}}},
}
for n in (1000, 3000, 10000):
    clusters, envs = Store(), Store()
    clusters._replace(tuple(cluster(i, i % 20 != 0) for i in range(n)))
    envs._replace((env,))
    try:
        actor = EnvironmentsActor(None, clusters, envs, lambda *a: None, Metrics())
    except TypeError:  # a checkout from before Metrics kept every counter
        actor = EnvironmentsActor(None, clusters, envs, lambda *a: None)
    times = []
    for round in range(5):
        # one Cluster changed per pass, as during onboarding
        obj = cluster(round, True)
        obj["metadata"]["resourceVersion"] = str(10**6 + round)
        clusters._objects[("fleet", obj["metadata"]["name"])] = obj
        if hasattr(clusters, "_by_namespace"):
            clusters._by_namespace["fleet"][obj["metadata"]["name"]] = obj
        t = time.perf_counter()
        cs = actor._clusters_of("fleet")
        chosen = actor.selected("fleet")
        for e in actor._environments_of("fleet"):
            if hasattr(actor, "_status"):
                actor._status(e, cs)
            else:
                from kokumi.actors.environments import environment_status

                environment_status(e, cs)
        times.append(time.perf_counter() - t)
    print(f"N={n}: one pass {statistics.median(times[1:]) * 1000:.0f} ms (median of 4)")
