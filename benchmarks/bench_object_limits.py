"""The manager's memory with Clusters whose labels fill what the hub accepts of one object.

Run: ``.venv/bin/python benchmarks/bench_object_limits.py [--clusters 30] [--labels 45000]
[--before /path/to/another/checkout]``. It starts its own control plane (nothing else may share
it while it runs), installs the CRDs and not the admission policies (the policy
``kokumi-object-limits`` would refuse these objects at the door: this measures the manager where
it is off, or for objects that predate it), and makes ``--clusters`` Clusters of ``--labels``
labels each, one at a time (each write costs the hub seconds of CPU: 90,000 labels of the same
shape were refused with a 504 on the loaded machine the figures come from). 45,000 labels and
the managedFields the hub keeps of them make an object of 1.35 MB, near etcd's 1.5 MiB.

Then, one after the other on the same objects, ``kokumi manager`` from ``--before`` (another
checkout's code, on ``PYTHONPATH``: the code before a change) and from this checkout, 150 s
each; its RSS is sampled every 0.2 s from /proc. Printed: the objects' size as the hub serves
them, each manager's peak RSS and its RSS at the end, and the Clusters' Ready reasons after it
ran (read from the hub's table view, which leaves the objects there), as a Markdown table. The
Clusters are InCluster, so the manager outside a pod reports them not Ready: what is measured is
what it keeps of them, not their checks.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane

REPO = Path(__file__).resolve().parent.parent
RUN = 150.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _http(hub: APIServer) -> httpx.Client:
    """A plain client as the hub's admin: the objects are made and read without Kokumi's code."""
    return httpx.Client(
        base_url=hub.url, verify=hub.ssl_context("kokumi-admin", ["system:masters"]), timeout=60
    )


def _make(hub: APIServer, namespace: str, count: int, labels: int) -> int:
    """``count`` Clusters of ``labels`` labels each, managedFields stripped; the size of one.

    One at a time: a write of so many labels costs the hub seconds of CPU, and one that takes
    longer than the hub's timeout is refused (504), as 90,000 labels were on a loaded machine.
    """
    body_labels = {f"l{i:05d}": "vvvv" for i in range(labels)}
    path = f"/apis/delivery.kokumi.dev/v1alpha1/namespaces/{namespace}/clusters"

    def one(index: int) -> None:
        body: dict[str, Any] = {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": f"big-{index:02d}", "labels": body_labels, "managedFields": [{}]},
            "spec": {"connection": "InCluster"},
        }
        with _http(hub) as http:
            for _ in range(3):
                answer = http.post(path, json=body)
                if answer.status_code < 300 or answer.status_code == 409:
                    return
            raise SystemExit(f"the hub refused Cluster {index}: {answer.text[:300]}")

    with _http(hub) as http:
        http.post("/api/v1/namespaces", json={"metadata": {"name": namespace}}).raise_for_status()
    for index in range(count):
        one(index)
    with _http(hub) as http:
        return len(http.get(f"{path}/big-00").content)


def _reasons(hub: APIServer, namespace: str) -> str:
    """The Clusters' Ready reasons, counted, from the hub's table (the objects stay there)."""
    table = "application/json;as=Table;g=meta.k8s.io;v=v1"
    try:
        with _http(hub) as http:
            answer = http.get(
                f"/apis/delivery.kokumi.dev/v1alpha1/namespaces/{namespace}/clusters",
                params={"includeObject": "None"},
                headers={"Accept": table},
            )
            answer.raise_for_status()
            listed = answer.json()
    except httpx.HTTPError as exc:
        return f"(not read: {type(exc).__name__})"
    column = [c["name"] for c in listed["columnDefinitions"]].index("Reason")
    counted = collections.Counter(row["cells"][column] or "none" for row in listed["rows"])
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counted.items()))


def _run(hub: APIServer, code: Path, namespace: str) -> tuple[float, float]:
    """``kokumi manager`` from ``code`` for ``RUN`` seconds: its peak RSS and its RSS at the end."""
    own = f"kokumi-{uuid.uuid4().hex[:6]}"
    with _http(hub) as http:
        http.post("/api/v1/namespaces", json={"metadata": {"name": own}}).raise_for_status()
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [
        sys.executable,
        "-m",
        "kokumi",
        "manager",
        f"--kubeconfig={hub.admin_kubeconfig}",
        f"--namespace={own}",
        "--no-in-cluster",
        # One manager alone: a Lease renewal that waits behind writes of these objects on a
        # loaded hub would end it, and what is measured is its memory, not its leadership.
        "--no-leader-elect",
    ]
    log = Path(hub.workdir) / f"manager-{own}.log"
    process = subprocess.Popen(
        command, env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=log.open("wb")
    )
    peak = end = 0.0
    try:
        began = time.monotonic()
        while time.monotonic() - began < RUN:
            time.sleep(0.2)
            if process.poll() is not None:
                raise SystemExit(f"the manager ended: {log.read_text()[-2000:]}")
            end = _rss_mb(process.pid)
            peak = max(peak, end)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    return peak, end


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=30)
    parser.add_argument("--labels", type=int, default=45_000)
    parser.add_argument(
        "--before", type=Path, required=True, help="a checkout of the tree to compare with"
    )
    args = parser.parse_args()
    with ControlPlane.start() as plane:
        hub = plane.hub
        run_kubectl(
            hub.admin_kubeconfig,
            "apply",
            "--server-side",
            *(
                arg
                for crd in sorted((REPO / "deploy/crds").glob("*.yaml"))
                for arg in ("-f", str(crd))
            ),
        )
        run_kubectl(
            hub.admin_kubeconfig,
            "wait",
            "--for=condition=Established",
            "crd/clusters.delivery.kokumi.dev",
            "crd/environments.delivery.kokumi.dev",
            "crd/clustersources.delivery.kokumi.dev",
        )
        namespace = f"big-{uuid.uuid4().hex[:6]}"
        size = _make(hub, namespace, args.clusters, args.labels)
        print(
            f"{args.clusters} Clusters of {args.labels:,} labels, {size / 1e6:.2f} MB each as "
            f"the hub serves it; load average {os.getloadavg()[0]:.1f}"
        )
        print("| code | peak RSS | RSS at the end | the Clusters' Ready reasons then |")
        print("|---|---:|---:|---|")
        for label, code in (("before", args.before), ("after", REPO)):
            peak, end = _run(hub, code, namespace)
            print(f"| {label} | {peak:.0f} MiB | {end:.0f} MiB | {_reasons(hub, namespace)} |")


if __name__ == "__main__":
    main()
