"""The fleet benchmark: N Clusters of fake spokes, the real hub, the manager as a process.

Run from the repository root: ``nox -s bench -- --clusters 1000`` (or
``.venv/bin/python benchmarks/fleet/run.py --clusters 1000``). See benchmarks/README.md for
what each figure means. Everything it starts (control plane, fleet, manager) it stops again.

Order of the run, and what each step measures:

1. The control plane (``kokumi.testing.controlplane``, binaries from the cache), the CRDs, and the
   fake fleet process (``fleet.py``): N spokes, each its own loopback address and server URL.
2. Baselines, with no manager running: a bare loop of checks with httpx (a new connection per
   check, as a check must prove a new connection works; one TLS context for all), eight at a
   time, for CPU per check; the floor of a check's CPU, three ways (``bare_openssl``); the
   hub's writes per minute while idle; and a bare loop that creates
   N Secrets, N objects of a Cluster's size and N status-sized patches (3N writes) with 32
   requests in flight, for the pace of the hub's writes.
3. Onboarding: the manager starts, then N kubeconfig Secrets and N Clusters are created, 32 at
   a time, with one Environment selecting all. Measured: time until every Cluster reports what
   its spoke deserves and every Cluster is registered with Argo CD; created -> Ready per Cluster.
4. Steady state over ``--window`` seconds: check gaps seen by the spokes, writes at the hub's
   /metrics, GETs of Secrets, the manager's CPU and RSS, the event loop's longest step.
5. With ``--silent-batch M``, silent onboarding: M more Clusters created at once whose spokes
   take the connection and never answer (as Cluster API's Secrets come before their API servers
   answer), and over ``--batch-window`` seconds from then the answering Clusters' check gaps
   beside the batch's first tries.
6. A restart with nothing changed: the same over ``--restart-window`` seconds, plus the peak
   RSS, the peak number of connections to the hub and Clusters that were not Ready meanwhile.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import itertools
import json
import math
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet import PORT, SERVER_NAME, TOKEN, address  # noqa: E402
from scale import (  # noqa: E402
    HubCost,
    by_replica,
    scrape,
    token_kubeconfig,
    two_checkers,
    two_writers,
)

from kokumi.core import api  # noqa: E402
from kokumi.core.registry import argocd  # noqa: E402
from kokumi.core.registry.carry import environment_label  # noqa: E402
from kokumi.core.sources.clusterapi import CAPI_CLUSTER_NAME, CAPI_CLUSTERS  # noqa: E402
from kokumi.core.sources.spec import CLUSTER_SOURCES  # noqa: E402
from kokumi.kube import errors  # noqa: E402
from kokumi.kube.client import Client  # noqa: E402
from kokumi.kube.config import Config  # noqa: E402
from kokumi.kube.resources import NAMESPACES, SECRETS  # noqa: E402
from kokumi.kube.watch import Resync, WatchEvent, watch  # noqa: E402
from kokumi.objects import Resource  # noqa: E402
from kokumi.testing import run_kubectl  # noqa: E402
from kokumi.testing.controlplane import ControlPlane  # noqa: E402
from tests.support.deploy import CAPI_CRD  # noqa: E402

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
FLEET_NS = "fleet"
TEAM_MARK = {"kokumi.dev/kubeconfig": "true"}
"""The label a from: Secrets run's Secrets carry, which its ClusterSource selects."""
OWN_NS = "kokumi-bench"
ENVIRONMENT_LABEL = environment_label("all")
"""The label the one Environment (``all``, selecting every Cluster) puts on each Argo CD Secret."""
ARGO_NS = "argocd"
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
EXPECTED = {
    "ok": "Ready",
    "slow": "Ready",
    "refusing": "Unreachable",
    "hanging": "Unreachable",
    "unauthorized": "Unauthorized",
}
CLK = os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def kubeconfig(index: int, ca_pem: bytes) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "spoke",
                    "cluster": {
                        "server": f"https://{address(index)}:{PORT}",
                        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                        "tls-server-name": SERVER_NAME,
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": TOKEN}}],
            "contexts": [{"name": "spoke", "context": {"cluster": "spoke", "user": "admin"}}],
            "current-context": "spoke",
        }
    )


# --- processes ----------------------------------------------------------------------------------


class Proc:
    """A child process with its CPU and RSS from /proc."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.popen = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
            env={**os.environ, **(env or {})},
            cwd=ROOT,
        )

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK

    def loop_cpu(self) -> float:
        """The CPU time of the process's main thread: the manager's event loop, without its
        check threads."""
        pid = self.popen.pid
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return math.nan

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                # As Kubernetes does: SIGKILL after terminationGracePeriodSeconds (30); the
                # manager hands over first (its early checks and its record of next checks).
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


# --- what the hub and the manager say -----------------------------------------------------------


class Hub:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.context = plane.hub.ssl_context("kokumi-admin", ["system:masters"])

    def metrics(self) -> dict[tuple[str, str, str], float]:
        """apiserver_request_total by (verb, resource, subresource)."""
        text = httpx.get(f"{self.plane.hub.url}/metrics", verify=self.context, timeout=30).text
        totals: dict[tuple[str, str, str], float] = defaultdict(float)
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            value = float(line.rsplit(" ", 1)[1])
            totals[
                (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            ] += value
        return totals

    def connections(self) -> int:
        """Established TCP connections to the hub's port (every client's, the runner's too)."""
        out = subprocess.run(
            ["ss", "-Htn", "state", "established", f"( dport = :{self.plane.hub.port} )"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return len(out.splitlines())


def writes(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]
) -> dict[str, float]:
    """Writes between two readings, by resource[/subresource], leases left out (the hub's own)."""
    out: dict[str, float] = defaultdict(float)
    for key, value in after.items():
        verb, res, sub = key
        if verb in WRITES and res in (
            "clusters",
            "environments",
            "secrets",
            "events",
            "clustersources",
        ):
            delta = value - before.get(key, 0.0)
            if delta:
                out[f"{verb} {res}{'/' + sub if sub else ''}"] += delta
    return dict(out)


def secret_gets(
    before: dict[tuple[str, str, str], float],
    after: dict[tuple[str, str, str], float],
    verb: str = "GET",
) -> float:
    key = (verb, "secrets", "")
    return after.get(key, 0.0) - before.get(key, 0.0)


def manager_metrics(port: int) -> list[str]:
    """The lines of one manager's ``/metrics``."""
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text.splitlines()


def manager_checks(port: int) -> float:
    for line in manager_metrics(port):
        if line.startswith("kokumi_checks_started_total "):
            return float(line.split()[1])
    return math.nan


def manager_shards(port: int) -> list[int]:
    """The shards one replica holds (``kokumi_shard_held{shard="i"} 1``)."""
    held = []
    for line in manager_metrics(port):
        if line.startswith('kokumi_shard_held{shard="') and float(line.rsplit(" ", 1)[1]) >= 1:
            held.append(int(line.split('"')[1]))
    return sorted(held)


def manager_leading(port: int) -> bool:
    """Whether the manager serves: it leads its Lease, or runs without one (``kokumi_leader``
    is 1 then too), or holds a shard."""
    for line in manager_metrics(port):
        if line.startswith(("kokumi_leader ", "kokumi_leader{")) and float(line.split()[-1]) >= 1:
            return True
    return False


def manager_reports(port: int) -> dict[str, float]:
    """What one manager's ``/metrics`` says of its fleet: Clusters by Ready reason (``reason:X``),
    checks waiting for a slot now (``waiting``, and by class ``waiting:answering``,
    ``waiting:silent``; a manager before the two classes has only the total) and checks holding
    a slot by class (``running:...``)."""
    found: dict[str, float] = {}
    for line in manager_metrics(port):
        if line.startswith("kokumi_checks_waiting "):
            found["waiting"] = float(line.split()[1])
        elif line.startswith(("kokumi_checks_waiting{", "kokumi_checks_running{")):
            what = "waiting" if "waiting" in line.split("{")[0] else "running"
            value = float(line.rsplit(" ", 1)[1])
            kind = line.split('"')[1]
            found[f"{what}:{kind}"] = value
            if what == "waiting":
                found["waiting"] = found.get("waiting", 0.0) + value
        elif line.startswith('kokumi_clusters{reason="'):
            reason = line.split('"')[1] or "unchecked"
            found[f"reason:{reason}"] = float(line.rsplit(" ", 1)[1])
    return found


def fleet_asked(control: int, since: float) -> dict[int, list[float]]:
    return fleet_asked_by(control, since)[0]


def fleet_asked_by(
    control: int, since: float
) -> tuple[dict[int, list[float]], dict[int, list[str]]]:
    """When each spoke was asked since ``since``, and by which source address (replica)."""
    body = httpx.get(f"http://127.0.0.1:{control}/stats", params={"since": str(since)}, timeout=60)
    data = body.json()
    asked = {int(k): v for k, v in data["asked"].items()}
    by = {int(k): v for k, v in data.get("by", {}).items()}
    return asked, by


def gaps_by_place(
    asked: dict[int, list[float]], kinds: list[str], restarted_at: float, width: float = 5.0
) -> list[list[float]]:
    """Each answering Cluster's gap across the restart, by when its next check was due relative
    to the restart (its last check before it plus a minute): ``[bin start, Clusters, gap p50,
    gap max, gaps over 70 s]`` per ``width`` seconds. It says which places a restart makes
    late: those that came while no manager ran, those the new one took in last, or those a
    herd of early checks held up."""
    bins: dict[int, list[float]] = {}
    for i, times in asked.items():
        if kinds[i] != "ok":
            continue
        before = [t for t in times if t < restarted_at]
        after = [t for t in times if t >= restarted_at]
        if not before or not after:
            continue
        a, b = max(before), min(after)
        bins.setdefault(math.floor((a + 60 - restarted_at) / width), []).append(b - a)
    return [
        [k * width, len(g), round(pct(g, 0.5), 1), round(max(g), 1), sum(x > 70 for x in g)]
        for k, g in sorted(bins.items())
    ]


def checks_per_second(asked: dict[int, list[float]], start: float, end: float) -> list[int]:
    """How many checks (of every spoke, answering or not) began in each whole second of
    ``[start, end)``, as the spokes saw them: the fleet's spread. Flat counts near N / 60 are
    checks spread over the minute; a second far above the others is a burst."""
    seconds = int(end - start)
    counts = [0] * seconds
    for times in asked.values():
        for t in times:
            k = math.floor(t - start)
            if 0 <= k < seconds:
                counts[k] += 1
    return counts


def loop_steps(workdir: Path, start: float, end: float) -> dict[str, float]:
    """The event loops' longest steps in [start, end] (every replica's): wall time, and the
    step's own CPU time."""
    wall: list[float] = []
    cpu: list[float] = []
    gc_pauses: list[float] = []
    slots: list[float] = []
    young: list[float] = []  # collections of the younger generations over 10 ms
    gc_cpu: list[float] = []  # the collector's own CPU time in each of those (not the OS's others)
    young_collected: list[int] = []  # what each slow young collection freed
    for path in sorted(workdir.glob("loop-*.jsonl")):
        for line in path.read_text().splitlines():
            item = json.loads(line)
            if item[0] == "slots":
                if start <= item[1] <= end:
                    slots.extend(item[2])
                continue
            if item[0] in ("list", "watch-listed", "heap"):  # read by hand
                continue
            if item[0] == "gc":
                if start <= item[1] <= end:
                    (gc_pauses if item[3] == 2 else young).append(item[2])
                    if len(item) > 4:
                        gc_cpu.append(item[4])
                        if item[3] != 2:
                            young_collected.append(item[5])
                continue
            if item[0] != "steps" and start <= item[0] <= end:
                wall.append(item[1])
                cpu.append(item[2] if len(item) > 2 else math.nan)
    pauses = gc_pauses + young
    return {
        # The collector's pauses the instrument saw (every full one, young ones over 10 ms), by
        # length: under 10 ms, 10-50, 50-100, 100-250, 250 ms and over.
        "gc_histogram": [
            sum(1 for s in pauses if low <= s < high)
            for low, high in itertools.pairwise((0.0, 0.01, 0.05, 0.1, 0.25, math.inf))
        ],
        # The same pauses by the collector's own CPU time: a pause long in wall time but short
        # in CPU is the OS running other processes, not the collector's work.
        "gc_cpu_histogram": [
            sum(1 for s in gc_cpu if low <= s < high)
            for low, high in itertools.pairwise((0.0, 0.01, 0.05, 0.1, 0.25, math.inf))
        ],
        "gc_young_collected_max": max(young_collected, default=0),
        "max_ms": max(wall, default=0.0) * 1000,
        "over_50ms": sum(1 for s in wall if s > 0.05),
        "cpu_max_ms": max(cpu, default=0.0) * 1000,
        "cpu_over_50ms": sum(1 for s in cpu if s > 0.05),
        "over_10ms": len(wall),
        "gc_full": len(gc_pauses),
        "gc_max_ms": max(gc_pauses, default=0.0) * 1000,
        "gc_young_slow": len(young),
        "gc_young_max_ms": max(young, default=0.0) * 1000,
        # A check slot held by a healthy spoke's check (the slow ones take 2 s, the hanging 10 s):
        # compare with the bare loop's, whose checks are all healthy.
        "slot_ok_p50_ms": pct([s for s in slots if s < 1.0], 0.5) * 1000,
        "slot_ok_mean_ms": statistics.fmean([s for s in slots if s < 1.0] or [math.nan]) * 1000,
        "slot_all_mean_ms": statistics.fmean(slots or [math.nan]) * 1000,
        "slots": len(slots),
        # Slots busy on average (8 at most): all checks, and those of healthy spokes only.
        "slots_busy": sum(slots) / (end - start),
        "slots_busy_ok": sum(s for s in slots if s < 1.0) / (end - start),
        # Checks that ran out their 10 s (a silent spoke's).
        "slots_busy_timed_out": sum(s for s in slots if s >= 9.5) / (end - start),
    }


class Clusters:
    """Follows the fleet's Clusters: when each was first Ready, and every Ready change."""

    def __init__(self) -> None:
        self.ready_at: dict[str, float] = {}
        self.reason: dict[str, str] = {}
        self.changes: list[tuple[float, str, str]] = []
        self.registered: set[str] = set()
        #: name -> [uid, the Ready condition's lastTransitionTime]: what a restart resumes from.
        self.anchors: dict[str, list[str]] = {}
        #: Argo CD Secret name -> every field manager its managedFields named (who wrote it).
        self.secret_managers: dict[str, set[str]] = defaultdict(set)
        #: Argo CD Secret name -> its uid; and each time one was deleted or made anew.
        self.secret_uid: dict[str, str] = {}
        self.secret_replaced: list[tuple[float, str, str]] = []
        #: Argo CD Secret name -> (carries the Cluster's ``fleet`` label, carries its
        #: Environment's label): what an ApplicationSet could select it by.
        self.secret_selectable: dict[str, tuple[bool, bool]] = {}

    def see_cluster(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        ready = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            None,
        )
        if ready is None:
            return
        reason = ready.get("reason", "")
        self.anchors[name] = [obj["metadata"].get("uid", ""), ready.get("lastTransitionTime", "")]
        if self.reason.get(name) != reason:
            self.changes.append((time.time(), name, reason))
            self.reason[name] = reason
        if reason == "Ready" and name not in self.ready_at:
            self.ready_at[name] = time.time()

    async def follow(self, client: Client, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel[WatchEvent | Resync](1000)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: watch(
                    client, api.CLUSTERS, send, namespace=FLEET_NS, task_status=task_status
                )
            )
            await nursery.start(
                lambda task_status: watch(
                    client,
                    SECRETS,
                    send,
                    namespace=ARGO_NS,
                    metadata_only=True,
                    managed_fields=True,
                    task_status=task_status,
                )
            )
            task_status.started()
            async for event in receive:
                objects = event.objects if isinstance(event, Resync) else (event.object,)
                for obj in objects:
                    if obj.get("kind") == "Cluster" or "spec" in obj:
                        self.see_cluster(obj)
                    else:
                        meta = obj["metadata"]
                        labels = meta.get("labels") or {}
                        name = labels.get(argocd.LABEL_CLUSTER) or meta["name"]
                        secret, uid = meta["name"], meta.get("uid", "")
                        for entry in meta.get("managedFields") or ():
                            self.secret_managers[secret].add(entry.get("manager", ""))
                        deleted = isinstance(event, WatchEvent) and event.type == "DELETED"
                        if deleted:
                            self.registered.discard(name)
                            self.secret_replaced.append((time.time(), "deleted", secret))
                        else:
                            self.registered.add(name)
                            self.secret_selectable[secret] = (
                                labels.get("fleet") == "bench",
                                labels.get(ENVIRONMENT_LABEL) == "true",
                            )
                            known = self.secret_uid.get(secret)
                            if known is not None and known != uid:
                                self.secret_replaced.append((time.time(), "new uid", secret))
                        self.secret_uid[secret] = uid


# --- baselines ----------------------------------------------------------------------------------


async def bare_checks(kinds: list[str], ca_pem: bytes, count: int) -> dict[str, float]:
    """A bare loop of httpx checks over the same fleet: the floor a check's CPU can reach."""
    import ssl  # noqa: PLC0415

    context = ssl.create_default_context(cadata=ca_pem.decode())
    healthy = [i for i, k in enumerate(kinds) if k == "ok"][:count]
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    limiter = trio.CapacityLimiter(8)
    failures = 0
    slots: list[float] = []

    async def one(index: int) -> None:
        nonlocal failures
        async with limiter:
            began = time.perf_counter()
            base = f"https://{address(index)}:{PORT}"
            ext = {"sni_hostname": SERVER_NAME}
            async with httpx.AsyncClient(verify=context, trust_env=False, timeout=10) as client:
                a = await client.get(f"{base}/version", headers=headers, extensions=ext)
                b = await client.post(
                    f"{base}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    headers=headers,
                    json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                    extensions=ext,
                )
                if a.status_code != 200 or b.status_code != 201:
                    failures += 1
            slots.append(time.perf_counter() - began)

    cpu, wall = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in healthy:
            nursery.start_soon(one, index)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "checks": len(healthy),
        "cpu_ms": cpu / len(healthy) * 1000,
        "per_s": len(healthy) / wall,
        "slot_p50_ms": pct(slots, 0.5) * 1000,
        "slot_mean_ms": statistics.fmean(slots) * 1000,
        "failures": failures,
    }


async def bare_writes(client: Client, n: int, ca_pem: bytes) -> float:
    """3N writes as onboarding needs them, with nothing else running: Secret, object, patch."""
    namespace = "bare"
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    limiter = trio.CapacityLimiter(32)
    filler = "x" * 900  # about a Cluster's size with its status

    async def one(index: int) -> None:
        async with limiter:
            data = {"value": base64.b64encode(kubeconfig(index, ca_pem).encode()).decode()}
            await client.create(
                SECRETS, {"metadata": {"name": f"s{index}"}, "data": data}, namespace=namespace
            )
            await client.create(
                CONFIGMAPS,
                {"metadata": {"name": f"c{index}"}, "data": {"spec": filler}},
                namespace=namespace,
            )
            await client.patch_merge(
                CONFIGMAPS, f"c{index}", {"data": {"status": filler}}, namespace=namespace
            )

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(n):
            nursery.start_soon(one, index)
    took = time.perf_counter() - started
    await client.delete(NAMESPACES, namespace)
    # The namespace controller deletes its 2N objects after the namespace's DELETE returns:
    # tens of seconds of the hub's work at N = 10,000, which went on while the next phase
    # (onboarding) was measured. Wait for it to end.
    with trio.move_on_after(900):
        while True:
            try:
                await client.get(NAMESPACES, namespace)
            except errors.NotFound:
                break
            await trio.sleep(1.0)
    return took


def bare_openssl(
    kinds: list[str],
    ca_pem: bytes,
    count: int,
    *,
    nodelay: bool = True,
    threads: int = 1,
    rate: float | None = None,
) -> dict[str, float]:
    """The floor of a check's CPU: Python's ``ssl`` on a blocking socket, with nothing between.

    Each check is what a check must be: a new TCP connection, a TLS handshake that verifies the
    server against the CA (the server name by SNI), ``GET /version`` and ``POST`` of a
    SelfSubjectReview as two HTTP/1.1 requests on that connection, both answers read to their
    Content-Length, the socket closed. The figure is the CPU time of the threads that make them:
    the handshake's cryptography and the kernel's socket work, no event loop, no HTTP library.

    Three ways to make them, each a floor of its own (``main_async`` measures all three):

    - ``nodelay=False``, one thread: the floor as measured until now. Without ``TCP_NODELAY``
      each check's first request waits for the ACK of the handshake's last flight, which the
      spoke delays 40 ms: one check every 44 ms, each on cold caches.
    - ``nodelay=True`` (as the lean check's sockets), one thread, as fast as it goes: the
      lowest the cryptography costs, every cache warm.
    - ``nodelay=True``, ``threads=8``, ``rate`` the manager's checks a second: the manager's
      shape (eight check slots, each a thread, about N/60 checks a second in all) without the
      manager.
    """
    import socket  # noqa: PLC0415
    import ssl  # noqa: PLC0415
    import threading  # noqa: PLC0415

    context = ssl.create_default_context(cadata=ca_pem.decode())
    healthy = [i for i, k in enumerate(kinds) if k == "ok"][:count]
    review = json.dumps(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    ).encode()
    head = f"Host: {SERVER_NAME}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: application/json\r\n"
    requests = (
        f"GET /version HTTP/1.1\r\n{head}\r\n".encode(),
        (
            f"POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1\r\n{head}"
            f"Content-Type: application/json\r\nContent-Length: {len(review)}\r\n\r\n"
        ).encode()
        + review,
    )
    cpu: list[float] = []
    failures: list[int] = []

    def answer(tls: ssl.SSLSocket) -> int:
        data = b""
        while b"\r\n\r\n" not in data:
            data += tls.recv(65536)
        top, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", top).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += tls.recv(65536)
        return int(top.split(b" ", 2)[1])

    def checks(indices: list[int], gap: float) -> None:
        began, failed = time.thread_time(), 0
        next_at = time.perf_counter()
        for index in indices:
            if gap:
                time.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += gap
            with socket.create_connection((address(index), PORT), timeout=10) as raw:
                if nodelay:
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls:
                    codes = []
                    for request in requests:
                        tls.sendall(request)
                        codes.append(answer(tls))
                    if codes != [200, 201]:
                        failed += 1
        cpu.append(time.thread_time() - began)
        failures.append(failed)

    gap = threads / rate if rate else 0.0
    workers = [
        threading.Thread(target=checks, args=(healthy[i::threads], gap)) for i in range(threads)
    ]
    wall = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - wall
    return {
        "checks": len(healthy),
        "cpu_ms": sum(cpu) / len(healthy) * 1000,
        "per_s": len(healthy) / wall,
        "failures": sum(failures),
    }


# --- the run ------------------------------------------------------------------------------------


class Managers:
    """The manager's replicas, measured as one: CPU, RSS and checks are their sums.

    One replica runs as one leader with no Lease (``--no-leader-elect``), or with ``lease`` as
    ``kokumi manager`` runs by default, the leader on its Lease; K replicas run with
    ``--shards S --max-shards ceil(S/K)`` (S is K unless ``shards`` says otherwise), so that each
    holds its share of the shard Leases and the fleet is split by the shards' hash, as a
    Deployment of K replicas would run them. Each replica binds its checks to a loopback source
    address of its own (``127.9.0.<n>``, its name in the figures) and writes with a field manager
    of its own (``kokumi-<n>``), so the spokes and the objects' managedFields say which replica
    checked and wrote what. ``kubeconfig`` is the hub identity they run as (the admin client
    certificate's kubeconfig, or a ServiceAccount token's).
    """

    started = 0  # replicas started in this run, for their source addresses
    extra: tuple[str, ...] = ()  # the run's own manager flags (--carry-labels), every replica

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        replicas: int,
        tag: str,
        *,
        lease: bool = False,
        shards: int | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        self.workdir, self.tag = workdir, tag
        self.kubeconfig = kubeconfig or plane.hub.admin_kubeconfig
        self.shards = shards or replicas
        if self.shards > 1:
            room = -(-self.shards // replicas)
            self.sharding = ["--shards", str(self.shards), "--max-shards", str(room)]
        else:
            self.sharding = [] if lease else ["--no-leader-elect"]
        self.ports: list[int] = []
        self.procs: list[Proc] = []
        self.names: list[str] = []
        for _ in range(replicas):
            self.add()

    def add(self) -> str:
        """One more replica (as a rolling upgrade's new pod); its name, its source address."""
        Managers.started += 1
        number = Managers.started
        name = f"127.9.0.{number}"
        # A free port chosen here may be taken by another process before the replica binds it
        # (a rolling upgrade's new replica died so on a shared machine): then another port.
        for attempt in range(5):
            port = health_port()
            suffix = f"-retry{attempt}" if attempt else ""
            proc = Proc(
                [
                    sys.executable,
                    str(Path(__file__).with_name("manager.py")),
                    "manager",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--namespace",
                    OWN_NS,
                    "--argocd-namespace",
                    ARGO_NS,
                    "--no-in-cluster",
                    *self.sharding,
                    *Managers.extra,
                    "--field-manager",
                    f"kokumi-{number}",
                    "--health-port",
                    str(port),
                ],
                self.workdir / f"manager-{self.tag}-{number}{suffix}.log",
                # This checkout's kokumi, also when the virtualenv's editable install points
                # elsewhere.
                env={
                    "KOKUMI_BENCH_LOOP": str(self.workdir / f"loop-{number}.jsonl"),
                    "KOKUMI_BENCH_SOURCE": name,
                    "PYTHONPATH": str(ROOT),
                },
            )
            if listening(proc, port):
                break
        else:
            raise SystemExit(f"no health port stayed free for manager {number} in five tries")
        self.ports.append(port)
        self.procs.append(proc)
        self.names.append(name)
        return name

    def remove(self, index: int) -> None:
        """Stop replica ``index`` as Kubernetes stops a pod (SIGTERM, SIGKILL after 30 s)."""
        proc = self.procs.pop(index)
        self.ports.pop(index)
        self.names.pop(index)
        proc.stop()

    async def wait(self) -> None:
        for port in self.ports:
            await wait_http(port)

    async def wait_leading(self) -> None:
        """Until every replica serves: the first start of a leader that creates its Lease holds
        it a renew deadline (10 s) before it leads, which onboarding must not count."""
        with trio.fail_after(120):
            while True:
                if all(manager_leading(port) for port in self.ports):
                    return
                await trio.sleep(0.5)

    def check_alive(self) -> None:
        """A replica that exited makes every later figure meaningless: stop the run."""
        for proc in self.procs:
            if proc.popen.poll() is not None:
                raise SystemExit(f"a manager exited ({proc.popen.returncode}): see {proc.log}")

    def cpu(self) -> float:
        return sum(proc.cpu() for proc in self.procs)

    def cpu_each(self) -> list[float]:
        return [proc.cpu() for proc in self.procs]

    def loop_cpu(self) -> float:
        return sum(proc.loop_cpu() for proc in self.procs)

    def rss_mb(self) -> float:
        return sum(proc.rss_mb() for proc in self.procs)

    def rss_each_mb(self) -> list[float]:
        return [proc.rss_mb() for proc in self.procs]

    def checks(self) -> float:
        return sum(manager_checks(port) for port in self.ports)

    def checks_each(self) -> list[float]:
        return [manager_checks(port) for port in self.ports]

    def shards_held(self) -> list[list[int]]:
        """The shards each replica holds now, from its ``kokumi_shard_held``."""
        return [manager_shards(port) for port in self.ports]

    def reports(self) -> dict[str, float]:
        """:func:`manager_reports` over the replicas: the checks waiting summed (each replica
        has its own slots), the Clusters by reason from the replica that counts most (each
        watches the whole fleet, whichever shards it serves)."""
        total: dict[str, float] = {}
        for port in self.ports:
            for key, value in manager_reports(port).items():
                summed = key.startswith(("waiting", "running"))
                combined = (lambda a, b: a + b) if summed else max
                total[key] = combined(total.get(key, 0.0), value)
        return total

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def health_port() -> int:
    """A port for a replica's health server, which binds every address: one outside the
    kernel's ephemeral range, free on every address now. ``free_port`` asks 127.0.0.1 alone, and
    with three replicas checking 10,000 spokes from addresses of their own (``127.9.0.N``) nearly
    every ephemeral port is some check connection's on one of them: a rolling upgrade's new
    replica found its port taken five times in five."""
    low, _ = (int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    families = [socket.AF_INET, socket.AF_INET6] if socket.has_ipv6 else [socket.AF_INET]
    for port in random.sample(range(10000, low), 200):
        with contextlib.ExitStack() as stack:
            try:
                for family in families:
                    sock = stack.enter_context(socket.socket(family))
                    if family == socket.AF_INET6:  # as the manager's listeners (Trio's) are
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(("" if family == socket.AF_INET else "::", port))
            except OSError:
                continue
            return port
    raise SystemExit("no free port under the ephemeral range for a health server")


def listening(proc: Proc, port: int, within: float = 120.0) -> bool:
    """Whether the manager bound its health port; False when another process had taken it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            if b"Address already in use" in proc.log.read_bytes():
                return False
            raise SystemExit(f"a manager exited ({proc.popen.returncode}): see {proc.log}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    raise SystemExit(f"a manager bound no health port in {within:.0f} s: see {proc.log}")


async def wait_http(port: int) -> None:
    with trio.fail_after(120):
        while True:
            try:
                await trio.to_thread.run_sync(
                    lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                )
                return
            except httpx.HTTPError:
                await trio.sleep(0.5)


class Sampler:
    """RSS and hub connections every half second while a phase runs."""

    def __init__(self, managers: Managers, hub: Hub) -> None:
        self.managers, self.hub = managers, hub
        self.rss: list[float] = []
        self.rss_each: list[float] = []
        self.per: dict[str, list[float]] = defaultdict(list)  # replica -> its RSS samples
        self.conns: list[int] = []

    async def run(self) -> None:
        while True:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                names = list(self.managers.names)
                each = self.managers.rss_each_mb()
                self.rss.append(sum(each))
                self.rss_each.append(max(each))
                for name, rss in zip(names, each, strict=True):
                    self.per[name].append(rss)
            self.conns.append(await trio.to_thread.run_sync(self.hub.connections))
            await trio.sleep(0.5)


async def steady(
    name: str,
    args: argparse.Namespace,
    managers: Managers,
    hub: Hub,
    control: int,
    kinds: list[str],
    workdir: Path,
    window: float,
    cost: HubCost | None = None,
) -> dict[str, Any]:
    """Figures over ``window`` seconds from now."""
    start, load0 = time.time(), load()
    m0, cpu0, checks0 = hub.metrics(), managers.cpu(), managers.checks()
    loop0 = managers.loop_cpu()
    names = list(managers.names)
    each0 = dict(zip(names, zip(managers.cpu_each(), managers.checks_each(), strict=True),
                     strict=True))  # fmt: skip
    h0 = cost.read() if cost else None
    sampler = Sampler(managers, hub)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        await trio.sleep(window)
        nursery.cancel_scope.cancel()
    managers.check_alive()
    end = time.time()
    m1, cpu1, checks1 = hub.metrics(), managers.cpu(), managers.checks()
    loop1 = managers.loop_cpu()
    each1 = dict(zip(managers.names, zip(managers.cpu_each(), managers.checks_each(), strict=True),
                     strict=True))  # fmt: skip
    h1 = cost.read() if cost else None
    held = dict(zip(managers.names, managers.shards_held(), strict=True))
    reports = managers.reports()
    # A gap counts when its second check falls in the window; its first may come before (a
    # silent spoke's by several minutes).
    asked, by = fleet_asked_by(control, start - 900)
    replicas = by_replica(asked, by, kinds, start, names)
    for replica, figures in replicas.items():
        if replica in each0 and replica in each1:
            cpu = each1[replica][0] - each0[replica][0]
            checked = each1[replica][1] - each0[replica][1]
            figures["checks"] = checked
            figures["cpu_ms_per_check"] = cpu / checked * 1000 if checked else math.nan
            figures["cpu_cores"] = cpu / (end - start)
        figures["shards"] = held.get(replica, [])
        rss = sampler.per.get(replica, [])
        figures["rss_mb_mean"] = statistics.fmean(rss) if rss else math.nan
        figures["rss_mb_max"] = max(rss, default=math.nan)
    gaps = [
        b - a
        for i, times in asked.items()
        if kinds[i] == "ok"
        for a, b in itertools.pairwise(times)
        if b >= start
    ]
    silent_gaps = [
        b - a
        for i, times in asked.items()
        if kinds[i] == "hanging"
        for a, b in itertools.pairwise(times)
        if b >= start
    ]
    silent_checked = sum(
        1
        for i, k in enumerate(kinds)
        if k == "hanging" and any(t >= start for t in asked.get(i, ()))
    )
    checked = sum(
        1 for i, k in enumerate(kinds) if k == "ok" and any(t >= start for t in asked.get(i, ()))
    )
    per_second = checks_per_second(asked, start, end)
    w = writes(m0, m1)
    checks = checks1 - checks0
    return {
        "phase": name,
        "window_s": round(end - start),
        "load": f"{load0} -> {load()}",
        "gap_p50": pct(gaps, 0.5),
        "gap_p99": pct(gaps, 0.99),
        "gap_max": max(gaps, default=math.nan),
        "gap_min": min(gaps, default=math.nan),
        "gaps_under_60s": sum(g < 60 for g in gaps),
        "gaps": len(gaps),
        "most_checks_in_a_second": max(per_second, default=0),
        "checks_in_a_second_p99": pct([float(c) for c in per_second], 0.99),
        "checks_in_a_second_mean": statistics.fmean(per_second) if per_second else math.nan,
        "ok_spokes_checked": f"{checked}/{kinds.count('ok')}",
        "silent_gap_p50": pct(silent_gaps, 0.5),
        "silent_gap_p99": pct(silent_gaps, 0.99),
        "silent_gap_max": max(silent_gaps, default=math.nan),
        "silent_spokes_checked": f"{silent_checked}/{kinds.count('hanging')}",
        "writes_per_min": sum(w.values()) / (end - start) * 60,
        "writes": w,
        "secret_gets_per_s": secret_gets(m0, m1) / (end - start),
        "secret_lists": secret_gets(m0, m1, "LIST"),
        "checks_per_s": checks / (end - start),
        "cpu_cores": (cpu1 - cpu0) / (end - start),
        "cpu_ms_per_check": (cpu1 - cpu0) / checks * 1000 if checks else math.nan,
        "loop_cpu_ms_per_check": (loop1 - loop0) / checks * 1000 if checks else math.nan,
        "rss_mb_mean": statistics.fmean(sampler.rss) if sampler.rss else math.nan,
        "rss_mb_max": max(sampler.rss, default=math.nan),
        "rss_mb_max_replica": max(sampler.rss_each, default=math.nan),
        "hub_connections_max": max(sampler.conns, default=0),
        "loop": loop_steps(workdir, start, end),
        "checks_waiting_end": reports.pop("waiting", math.nan),
        "slots_by_class_end": {
            k: reports.pop(k) for k in list(reports) if k.startswith(("waiting:", "running:"))
        },
        "clusters_by_reason_end": reports,
        "replicas": replicas,
        "checked_by_two": two_checkers(asked, by, start),
        **(hub_figures(HubCost.between(h0, h1), args.clusters) if h0 and h1 else {}),
        # Last, as it costs the managers CPU: each replica's /metrics as Prometheus scrapes it.
        "scrape": {
            name: scrape(port) for name, port in zip(managers.names, managers.ports, strict=True)
        },
    }


def hub_figures(spent: dict[str, float], clusters: int) -> dict[str, Any]:
    """The hub's cost over a steady window: CPU a minute per 1,000 Clusters, watch bytes a
    second."""
    minutes = spent["seconds"] / 60
    return {
        "hub": spent,
        "hub_cpu_s_per_min_per_1000": spent["hub_cpu_s"] / minutes / clusters * 1000,
        "apiserver_cpu_s_per_min_per_1000": spent["apiserver_cpu_s"] / minutes / clusters * 1000,
        "etcd_cpu_s_per_min_per_1000": spent["etcd_cpu_s"] / minutes / clusters * 1000,
        "watch_bytes_per_s": spent["watch_bytes"] / spent["seconds"],
    }


async def main_async(
    args: argparse.Namespace, plane: ControlPlane, workdir: Path
) -> dict[str, Any]:
    n = args.clusters
    hub = Hub(plane)
    result: dict[str, Any] = {"clusters": n, "replicas": args.replicas, "load_start": load()}
    fleet = Proc(
        [
            sys.executable,
            str(Path(__file__).with_name("fleet.py")),
            "--spokes",
            str(n),
            "--dir",
            str(workdir),
            "--slow",
            str(args.slow),
            "--hanging",
            str(args.hanging),
            "--refusing",
            str(args.refusing),
            "--unauthorized",
            str(args.unauthorized),
            "--extra-hanging",
            str(args.silent_batch),
        ],
        workdir / "fleet.log",
    )
    procs: list[Proc | Managers] = [fleet]
    try:
        assert fleet.popen.stdout is not None
        hello = json.loads(await trio.to_thread.run_sync(fleet.popen.stdout.readline))
        kinds: list[str] = hello["kinds"]
        control: int = hello["control"]
        result["kinds"] = hello["counts"]
        ca_pem = Path(hello["ca"]).read_bytes()  # noqa: ASYNC240 - once, small
        for ns in (FLEET_NS, OWN_NS, ARGO_NS):
            run_kubectl(plane.hub, "create", "namespace", ns)
        # Who the manager and the runner's writes are at the hub: ServiceAccount tokens, as in a
        # real hub (the default), or the admin client certificate (``--auth cert``).
        runner_kc = manager_kc = plane.hub.admin_kubeconfig
        if args.auth == "token":
            manager_kc = token_kubeconfig(plane, workdir, OWN_NS, "kokumi")
            runner_kc = token_kubeconfig(plane, workdir, OWN_NS, "bench-runner")
        result["auth"] = args.auth
        cost = HubCost(plane)
        async with Client(Config.from_kubeconfig(runner_kc)) as client:
            # Baselines, with no manager.
            result["bare_checks"] = await bare_checks(kinds, ca_pem, min(n, 1000))
            print("bare checks:", result["bare_checks"], flush=True)
            # Three floors (see bare_openssl); "bare_openssl" stays the one measured until now,
            # so that earlier runs' ratios compare.
            floors = {
                "bare_openssl": {"nodelay": False},
                "bare_openssl_nodelay": {},
                "bare_openssl_paced": {"threads": 8, "rate": n / 60},
            }
            for key, how in floors.items():
                result[key] = await trio.to_thread.run_sync(
                    functools.partial(bare_openssl, kinds, ca_pem, min(n, 1000), **how)
                )
                print(f"{key}:", result[key], flush=True)
            m0, t0, h0 = hub.metrics(), time.time(), cost.read()
            await trio.sleep(args.idle_window)
            idle = writes(m0, hub.metrics())
            result["bare_idle_writes_per_min"] = sum(idle.values()) / (time.time() - t0) * 60
            result["hub_idle"] = HubCost.between(h0, cost.read())
            h0 = cost.read()
            result["bare_writes_s"] = await bare_writes(client, n, ca_pem)
            # The bare writes' hub cost, their namespace's deletion included (as onboarding's
            # includes the manager's reads and watches).
            result["hub_bare_writes"] = HubCost.between(h0, cost.read())
            result["bare_writes_load"] = load()
            print("bare writes:", result["bare_writes_s"], "s", flush=True)

            # Onboarding.
            clusters = Clusters()
            manager = Managers(
                plane, workdir, args.replicas, "1", lease=args.lease, shards=args.shards,
                kubeconfig=manager_kc,
            )  # fmt: skip
            procs.append(manager)
            await manager.wait()
            await manager.wait_leading()
            async with trio.open_nursery() as nursery:
                await nursery.start(clusters.follow, client)
                await client.create(
                    api.ENVIRONMENTS,
                    {
                        "apiVersion": api.API_VERSION,
                        "kind": "Environment",
                        "metadata": {"name": "all", "namespace": FLEET_NS},
                        "spec": {"clusterSelector": {"matchLabels": {"fleet": "bench"}}},
                    },
                    namespace=FLEET_NS,
                )
                created: dict[str, float] = {}
                limiter = trio.CapacityLimiter(32)
                if args.sourced:
                    # One ClusterSource makes every Cluster: from Cluster API-shaped Secrets, or
                    # from a team's labelled ones (its kubeconfig under the key kubeconfig).
                    spec: dict[str, Any] = (
                        {"from": "ClusterAPI", "labels": {"fleet": "bench"}}
                        if args.sourced == "capi"
                        else {"from": "Secrets", "secretSelector": {"matchLabels": TEAM_MARK},
                              "key": "kubeconfig", "labels": {"fleet": "bench"}}
                    )  # fmt: skip
                    await client.create(
                        CLUSTER_SOURCES,
                        {
                            "apiVersion": api.API_VERSION,
                            "kind": "ClusterSource",
                            "metadata": {"name": args.sourced, "namespace": FLEET_NS},
                            "spec": spec,
                        },
                        namespace=FLEET_NS,
                    )

                async def create(index: int) -> None:
                    name = f"c{index:05d}"
                    if args.sourced == "secrets":
                        async with limiter:
                            # A team's Secret, named as its Cluster will be, labelled.
                            value = base64.b64encode(kubeconfig(index, ca_pem).encode()).decode()
                            team: dict[str, Any] = {"name": name, "labels": dict(TEAM_MARK)}
                            await client.create(
                                SECRETS, {"metadata": team, "data": {"kubeconfig": value}},
                                namespace=FLEET_NS,
                            )  # fmt: skip
                            created[name] = time.time()
                        return
                    if args.sourced:
                        async with limiter:
                            # As Cluster API makes them: the cluster, then its Secret, which it
                            # controls (a ClusterSource imports no other).
                            capi = await client.create(
                                CAPI_CLUSTERS,
                                {"apiVersion": CAPI_CLUSTERS.api_version, "kind": "Cluster",
                                 "metadata": {"name": name}, "spec": {}},
                                namespace=FLEET_NS,
                            )  # fmt: skip
                            value = base64.b64encode(kubeconfig(index, ca_pem).encode()).decode()
                            meta = {
                                "name": f"{name}-kubeconfig",
                                "labels": {CAPI_CLUSTER_NAME: name},
                                "ownerReferences": [
                                    {"apiVersion": CAPI_CLUSTERS.api_version, "kind": "Cluster",
                                     "name": name, "uid": capi["metadata"]["uid"],
                                     "controller": True, "blockOwnerDeletion": True}
                                ],
                            }  # fmt: skip
                            await client.create(
                                SECRETS, {"metadata": meta, "data": {"value": value}},
                                namespace=FLEET_NS,
                            )  # fmt: skip
                            created[name] = time.time()
                        return
                    async with limiter:
                        data = {
                            "value": base64.b64encode(kubeconfig(index, ca_pem).encode()).decode()
                        }
                        await client.create(
                            SECRETS, {"metadata": {"name": name}, "data": data}, namespace=FLEET_NS
                        )
                        await client.create(
                            api.CLUSTERS,
                            {
                                "apiVersion": api.API_VERSION,
                                "kind": "Cluster",
                                "metadata": {
                                    "name": name,
                                    "namespace": FLEET_NS,
                                    "labels": {"fleet": "bench"},
                                },
                                "spec": {
                                    "connection": "Kubeconfig",
                                    "kubeconfig": {"secretRef": {"name": name}},
                                },
                            },
                            namespace=FLEET_NS,
                        )
                        created[name] = time.time()

                sampler = Sampler(manager, hub)
                nursery.start_soon(sampler.run)
                began, load0, cpu0, m0 = time.time(), load(), manager.cpu(), hub.metrics()
                h0 = cost.read()
                async with trio.open_nursery() as creators:
                    for index in range(n):
                        creators.start_soon(create, index)
                result["create_s"] = time.time() - began
                names = [f"c{i:05d}" for i in range(n)]
                expected = {name: EXPECTED[kinds[i]] for i, name in enumerate(names)}
                last = 0.0
                with trio.move_on_after(args.onboard_timeout) as waited:
                    while True:
                        done = sum(1 for k, v in expected.items() if clusters.reason.get(k) == v)
                        reg = len(clusters.registered & set(names))
                        if done == n and reg == n:
                            break
                        manager.check_alive()
                        if time.time() - last > 15:
                            print(
                                f"  onboarding: {done}/{n} as expected, {reg}/{n} registered,"
                                f" load {load()}",
                                flush=True,
                            )
                            last = time.time()
                        await trio.sleep(0.5)
                settled = time.time()
                result["hub_onboarding"] = HubCost.between(h0, cost.read())
                result["onboard_timed_out"] = waited.cancelled_caught
                result["all_ready_s"] = settled - began
                result["onboard_load"] = f"{load0} -> {load()}"
                latencies = [
                    clusters.ready_at[k] - created[k]
                    for k in names
                    if k in clusters.ready_at and k in created
                ]
                result["ready_p50"] = pct(latencies, 0.5)
                result["ready_p99"] = pct(latencies, 0.99)
                m1 = hub.metrics()
                result["onboard_requests"] = {
                    f"{verb} {res}{'/' + sub if sub else ''}": value - m0.get((verb, res, sub), 0.0)
                    for (verb, res, sub), value in m1.items()
                    if value - m0.get((verb, res, sub), 0.0) > 0
                }
                result["onboard_all_writes"] = all_writes(m0, m1)
                result["onboard_writes_by"] = writes(m0, m1)
                result["onboard_writes"] = sum(result["onboard_writes_by"].values())
                result["onboard_secret_gets"] = secret_gets(m0, m1)
                result["onboard_secret_lists"] = secret_gets(m0, m1, "LIST")
                result["onboard_cpu_s"] = manager.cpu() - cpu0
                result["onboard_rss_max"] = max(sampler.rss, default=math.nan)
                result["onboard_rss_max_replica"] = max(sampler.rss_each, default=math.nan)
                result["onboard_loop"] = loop_steps(workdir, began, settled)
                result["argocd_writers"] = two_writers(clusters.secret_managers)
                selectable = clusters.secret_selectable.values()
                result["argocd_selectable"] = [
                    sum(1 for fleet, _ in selectable if fleet),
                    sum(1 for _, environment in selectable if environment),
                    len(selectable),
                ]
                env = await client.get(api.ENVIRONMENTS, "all", namespace=FLEET_NS)
                result["environment_status_bytes"] = len(json.dumps(env.get("status") or {}))
                print(
                    "onboarded:",
                    {
                        k: result[k]
                        for k in (
                            "all_ready_s",
                            "ready_p50",
                            "ready_p99",
                            "environment_status_bytes",
                        )
                    },
                    flush=True,
                )
                nursery.cancel_scope.cancel()

            # Steady state.
            await trio.sleep(args.settle)
            result["steady"] = await steady(
                "steady", args, manager, hub, control, kinds, workdir, args.window, cost
            )
            print("steady:", result["steady"], flush=True)
            result["objects"] = await object_bytes(client)
            print("objects:", result["objects"], flush=True)

            if args.rolling:
                result["rolling"] = await rolling(args, manager, hub, control, kinds, client, cost)
                print("rolling:", result["rolling"], flush=True)

            if args.silent_batch:
                # Silent onboarding: a batch of new Clusters whose spokes never answer, created
                # at once beside the answering ones, measured from that moment.
                batch = range(n, n + args.silent_batch)
                batch_start = time.time()

                async def make_batch() -> None:
                    async with trio.open_nursery() as creators:
                        for index in batch:
                            creators.start_soon(create, index)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(make_batch)
                    phase = await steady(
                        "silent onboarding", args, manager, hub, control, kinds, workdir,
                        args.batch_window,
                    )  # fmt: skip
                asked = fleet_asked(control, batch_start)
                tries = [min(asked[i]) - batch_start for i in batch if asked.get(i)]
                phase["batch"] = args.silent_batch
                phase["batch_tried"] = f"{len(tries)}/{args.silent_batch}"
                phase["batch_first_try_p50_s"] = pct(tries, 0.5)
                phase["batch_first_try_max_s"] = max(tries, default=math.nan)
                result["silent_onboarding"] = phase
                print("silent onboarding:", phase, flush=True)

            # A restart with nothing changed.
            if args.restart_window > 0:
                manager = await restart(
                    args, plane, workdir, manager, procs, hub, control, kinds, client, result,
                    manager_kc,
                )  # fmt: skip

            if args.compare_one and (args.replicas > 1 or manager.shards > 1):
                # One replica on the same tree, in the same run, beside the sharded ones.
                await trio.to_thread.run_sync(manager.stop)
                manager = Managers(plane, workdir, 1, "one", kubeconfig=manager_kc)
                procs.append(manager)
                await manager.wait()
                await manager.wait_leading()
                await trio.sleep(args.compare_settle)
                result["one_replica"] = await steady(
                    "one replica", args, manager, hub, control, kinds, workdir, args.window, cost
                )
                print("one replica:", result["one_replica"], flush=True)
    finally:
        for proc in reversed(procs):
            proc.stop()
    return result


def all_writes(
    before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float]
) -> dict[str, float]:
    """Every write between two readings, by resource[/subresource], Leases included."""
    out: dict[str, float] = defaultdict(float)
    for (verb, res, sub), value in after.items():
        delta = value - before.get((verb, res, sub), 0.0)
        if verb in WRITES and delta:
            out[f"{verb} {res}{'/' + sub if sub else ''}"] += delta
    return dict(out)


async def object_bytes(client: Client) -> dict[str, float]:
    """What the fleet keeps in the hub, as the API lists it (JSON, managedFields included):
    bytes and count by kind, and bytes per Cluster; etcd keeps Secrets as protobuf and custom
    resources as JSON, so this is an upper bound of the Secrets' share."""
    out: dict[str, float] = {}
    for label, kind, namespace in (
        ("clusters", api.CLUSTERS, FLEET_NS),
        ("kubeconfig_secrets", SECRETS, FLEET_NS),
        ("argocd_secrets", SECRETS, ARGO_NS),
        ("environments", api.ENVIRONMENTS, FLEET_NS),
    ):
        listing = await client.list(kind, namespace=namespace)
        items = listing.get("items", [])
        out[f"{label}_count"] = len(items)
        out[f"{label}_bytes"] = sum(len(json.dumps(item)) for item in items)
    clusters = out["clusters_count"] or math.nan
    out["bytes_per_cluster"] = sum(v for k, v in out.items() if k.endswith("_bytes")) / clusters
    return out


async def wait_ready(port: int, limit: float = 300.0) -> float:
    """Until a replica's ``/readyz`` answers 200 (its watches have listed everything, as the
    Deployment's readiness probe asks); the seconds it took."""
    began = time.time()
    with trio.fail_after(limit):
        while True:
            try:
                answer = await trio.to_thread.run_sync(
                    lambda: httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                )
                if answer.status_code == 200:
                    return time.time() - began
            except httpx.HTTPError:
                pass
            await trio.sleep(0.5)


async def rolling(
    args: argparse.Namespace,
    managers: Managers,
    hub: Hub,
    control: int,
    kinds: list[str],
    client: Client,
    cost: HubCost,
) -> dict[str, Any]:
    """A rolling upgrade at full load, as a Deployment's RollingUpdate with maxSurge 1 and
    maxUnavailable 0 does it: a new replica started, Ready, then the oldest stopped (SIGTERM),
    one at a time, until every replica is new; then ``--rolling-tail`` seconds more. Measured
    over it: every answering Cluster's check gaps, the writes beyond the Leases, Ready
    changes, Argo CD Secrets deleted or made anew, Clusters checked by two replicas within a
    minute, and the time each step took."""
    follow = Clusters()
    steps: list[dict[str, float]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(follow.follow, client)
        # The first list reaches ``follow`` after the watch started: until every Cluster is in.
        with trio.move_on_after(120):
            while len(follow.reason) < args.clusters:  # noqa: ASYNC110 - another task fills it
                await trio.sleep(0.2)
        before = dict(follow.reason)
        seen_changes = len(follow.changes)
        start, load0, m0, h0 = time.time(), load(), hub.metrics(), cost.read()
        old = list(managers.names)
        for _ in old:
            step_began = time.time()
            managers.add()
            await wait_http(managers.ports[-1])
            ready_s = await wait_ready(managers.ports[-1])
            stop_began = time.time()
            await trio.to_thread.run_sync(managers.remove, 0)
            stopped_s = time.time() - stop_began
            # Until every shard is held again (by the new replica, which has room for the old
            # one's shards).
            with trio.move_on_after(120) as waited:
                while True:
                    held = [s for each in managers.shards_held() for s in each]
                    if managers.shards <= 1 or sorted(held) == list(range(managers.shards)):
                        break
                    await trio.sleep(0.25)
            steps.append(
                {
                    "ready_s": ready_s,
                    "stop_s": stopped_s,
                    "all_shards_held_s": time.time() - stop_began,
                    "shards_timed_out": waited.cancelled_caught,
                    "step_s": time.time() - step_began,
                }
            )
            managers.check_alive()
        rolled = time.time()
        await trio.sleep(args.rolling_tail)
        end = time.time()
        m1, h1 = hub.metrics(), cost.read()
        nursery.cancel_scope.cancel()
    asked, by = fleet_asked_by(control, start - 900)
    gaps: list[float] = []
    worst: dict[int, float] = {}
    for i, times in asked.items():
        if kinds[i] != "ok":
            continue
        for a, b in itertools.pairwise(times):
            if b >= start:
                gaps.append(b - a)
                worst[i] = max(worst.get(i, 0.0), b - a)
    # A Cluster not checked since the roll began has a gap still open: counted at the end.
    for i, kind in enumerate(kinds[: args.clusters]):
        if kind == "ok":
            last = max(asked.get(i, [0.0]))
            if last < start:
                worst[i] = end - last
    every = all_writes(m0, m1)
    # A new replica's SelfSubjectReview is a POST that stores nothing: not a write.
    beyond = {k: v for k, v in every.items() if "leases" not in k and "reviews" not in k}
    flips = [c for c in follow.changes[seen_changes:] if c[0] >= start]
    left_ready = {name for _, name, reason in flips if before.get(name) == "Ready"}
    return {
        "window_s": round(end - start),
        "roll_s": round(rolled - start),
        "load": f"{load0} -> {load()}",
        "steps": steps,
        "gap_p50": pct(gaps, 0.5),
        "gap_p99": pct(gaps, 0.99),
        "gap_max": max(gaps, default=math.nan),
        "clusters_worst_gap_p99": pct(list(worst.values()), 0.99),
        "clusters_gap_over_70": sum(1 for g in worst.values() if g > 70),
        "writes_beyond_leases": beyond,
        "lease_writes": sum(v for k, v in every.items() if "leases" in k),
        "ready_changes": len(flips),
        "left_ready": len(left_ready),
        "registrations_replaced": [list(x) for x in follow.secret_replaced if x[0] >= start],
        "checked_by_two": two_checkers(asked, by, start),
        "argocd_writers": two_writers(follow.secret_managers),
        "hub": HubCost.between(h0, h1),
    }


async def restart(
    args: argparse.Namespace,
    plane: ControlPlane,
    workdir: Path,
    manager: Managers,
    procs: list[Proc | Managers],
    hub: Hub,
    control: int,
    kinds: list[str],
    client: Client,
    result: dict[str, Any],
    manager_kc: Path,
) -> Managers:
    """A restart of every replica with nothing changed; the new replicas."""
    clusters2 = Clusters()
    async with trio.open_nursery() as nursery:
        await nursery.start(clusters2.follow, client)
        before_restart = dict(clusters2.reason)
        (workdir / "anchors-before-restart.json").write_text(json.dumps(clusters2.anchors))
        stopping = time.time()
        await trio.to_thread.run_sync(manager.stop)
        restarted_at = time.time()
        manager = Managers(
            plane, workdir, args.replicas, "2", lease=args.lease, shards=args.shards,
            kubeconfig=manager_kc,
        )  # fmt: skip
        procs.append(manager)
        await manager.wait()
        result["restart"] = await steady(
            "restart",
            args,
            manager,
            hub,
            control,
            kinds,
            workdir,
            args.restart_window,
        )
        # One read of the spokes' asks, from before the restart (the gaps' first checks)
        asked_around = fleet_asked(control, restarted_at - 120)
        firsts = [
            min(after) - restarted_at
            for i, t in asked_around.items()
            if kinds[i] == "ok" and (after := [x for x in t if x >= restarted_at])
        ]
        result["restart"]["first_check_p50_s"] = pct(firsts, 0.5)
        result["restart"]["first_check_max_s"] = max(firsts, default=math.nan)
        result["restart"]["rechecked"] = f"{len(firsts)}/{kinds.count('ok')}"
        result["restart"]["gap_by_place"] = gaps_by_place(asked_around, kinds, restarted_at)
        (workdir / "restart-asked.json").write_text(
            json.dumps({"restarted_at": restarted_at, "asked": asked_around})
        )
        not_ready = {
            name
            for at, name, reason in clusters2.changes
            if at >= restarted_at and reason != "Ready" and before_restart.get(name) == "Ready"
        }
        result["restart"]["not_ready_meanwhile"] = len(not_ready)
        # From SIGTERM to the exit: the stop record's early checks and its one write.
        result["restart"]["stop_s"] = restarted_at - stopping
        nursery.cancel_scope.cancel()
    print("restart:", result["restart"], flush=True)
    return manager


def _cpu_steps(loop: dict[str, float]) -> str:
    if "cpu_max_ms" not in loop:
        return ""
    return (
        f"the steps' own CPU: longest {loop['cpu_max_ms']:.0f} ms, > 50 ms {loop['cpu_over_50ms']}"
    )


def report(r: dict[str, Any]) -> str:
    s, rs, bc = r["steady"], r.get("restart"), r["bare_checks"]
    floor = r.get("bare_openssl", {}).get("cpu_ms", math.nan)
    tight = r.get("bare_openssl_nodelay", {}).get("cpu_ms", math.nan)
    paced = r.get("bare_openssl_paced", {}).get("cpu_ms", math.nan)
    rows = [
        ("spokes by kind", ", ".join(f"{k} {v}" for k, v in r["kinds"].items() if v), ""),
        (
            "manager CPU / RSS max, onboarding",
            f"{r['onboard_cpu_s']:.0f} s / {r['onboard_rss_max']:.0f} MB",
            f"all replicas; the largest one's RSS max {r['onboard_rss_max_replica']:.0f} MB",
        ),
        (
            "all Ready + registered after creation",
            f"{r['all_ready_s']:.0f} s",
            f"bare 3N writes {r['bare_writes_s']:.0f} s:"
            f" {r['all_ready_s'] / r['bare_writes_s']:.1f}x (load {r['onboard_load']})",
        ),
        (
            "onboarding: writes per Cluster, by request",
            ", ".join(
                f"{key} {value / r['clusters']:.2f}"
                for key, value in sorted(r.get("onboard_writes_by", {}).items())
            ),
            "at the hub, the runner's creates of Secrets and Clusters included",
        ),
        (
            "Argo CD Secrets with the fleet label / the Environment's label",
            "{} / {} of {}".format(*r.get("argocd_selectable", ["?"] * 3)),
            "fleet carried only with --carry-labels fleet",
        ),
        (
            "onboarding: requests reading / listing Secrets",
            f"{r.get('onboard_secret_gets', math.nan):.0f} / "
            f"{r.get('onboard_secret_lists', math.nan):.0f}",
            "the manager's GETs of kubeconfigs; the lists include the Secret watches'",
        ),
        (
            "Cluster created -> Ready p50 / p99",
            f"{r['ready_p50']:.1f} / {r['ready_p99']:.1f} s",
            "",
        ),
        (
            "Environment status size (one selecting all)",
            f"{r['environment_status_bytes'] / 1000:.1f} KB",
            "",
        ),
        (
            "event loop: longest step / steps > 50 ms, onboarding",
            f"{r['onboard_loop']['max_ms']:.0f} ms / {r['onboard_loop']['over_50ms']}",
            _cpu_steps(r["onboard_loop"]),
        ),
    ]
    phases = [("steady", s)]
    if "silent_onboarding" in r:
        phases.append(("silent onboarding", r["silent_onboarding"]))
    if rs:
        phases.append(("after restart", rs))
    for label, p in phases:
        rows += [
            (
                f"check gap p50 / p99 / max, {label} ({p['window_s']} s window)",
                f"{p['gap_p50']:.1f} / {p['gap_p99']:.1f} / {p['gap_max']:.1f} s",
                f"healthy spokes checked {p['ok_spokes_checked']}; load {p['load']}",
            ),
            (
                f"check gap min / gaps under 60 s, {label}",
                f"{p['gap_min']:.1f} s / {p['gaps_under_60s']} of {p['gaps']}",
                "a gap counts from the start of one check to the start of the next",
            ),
            (
                f"checks in a second: most / p99 / mean, {label}",
                f"{p['most_checks_in_a_second']} / {p['checks_in_a_second_p99']:.0f}"
                f" / {p['checks_in_a_second_mean']:.1f}",
                "every spoke's checks, by the second they began in",
            ),
            (
                f"silent spokes' check gap p50 / p99 / max, {label}",
                f"{p['silent_gap_p50']:.1f} / {p['silent_gap_p99']:.1f}"
                f" / {p['silent_gap_max']:.1f} s",
                f"silent spokes checked {p['silent_spokes_checked']}; slots held by checks that"
                f" timed out {p['loop']['slots_busy_timed_out']:.1f} of 8",
            ),
            (
                f"writes per minute, {label}",
                f"{p['writes_per_min']:.1f}",
                f"idle hub {r['bare_idle_writes_per_min']:.1f}; {p['writes'] or 'none'}",
            ),
            (
                f"GETs of Secrets per second, {label}",
                f"{p['secret_gets_per_s']:.1f}",
                f"checks/s {p['checks_per_s']:.1f}; pages of Secrets listed"
                f" {p.get('secret_lists', 0):.0f}",
            ),
            (
                f"manager CPU per check, {label}",
                f"{p['cpu_ms_per_check']:.1f} ms",
                f"bare httpx check {bc['cpu_ms']:.1f} ms:"
                f" {p['cpu_ms_per_check'] / bc['cpu_ms']:.1f}x; bare OpenSSL floor"
                f" {floor:.2f} ms: {p['cpu_ms_per_check'] / floor:.2f}x (with TCP_NODELAY:"
                f" one thread {tight:.2f} ms, {p['cpu_ms_per_check'] / tight:.2f}x; eight"
                f" threads at the manager's pace {paced:.2f} ms,"
                f" {p['cpu_ms_per_check'] / paced:.2f}x)",
            ),
            (
                f"... of which the event loop's thread, {label}",
                f"{p.get('loop_cpu_ms_per_check', math.nan):.2f} ms",
                "the rest is the check threads'",
            ),
            (f"manager CPU, {label}", f"{p['cpu_cores']:.2f} cores", ""),
            (
                f"RSS mean / max, {label}",
                f"{p['rss_mb_mean']:.0f} / {p['rss_mb_max']:.0f} MB",
                f"all replicas; the largest one's max {p['rss_mb_max_replica']:.0f} MB",
            ),
            (
                f"event loop: longest step / steps > 50 ms, {label}",
                f"{p['loop']['max_ms']:.0f} ms / {p['loop']['over_50ms']}",
                _cpu_steps(p["loop"]),
            ),
            (
                f"checks per second / check slot held, healthy p50 / mean, {label}",
                f"{p['checks_per_s']:.1f} / {p['loop']['slot_ok_p50_ms']:.0f}"
                f" / {p['loop']['slot_ok_mean_ms']:.0f} ms",
                f"bare loop {bc['per_s']:.1f}/s, {bc['slot_p50_ms']:.0f} / {bc['slot_mean_ms']:.0f}"
                f" ms; all kinds mean {p['loop']['slot_all_mean_ms']:.0f} ms; slots busy"
                f" {p['loop']['slots_busy']:.1f} of 8, healthy {p['loop']['slots_busy_ok']:.1f};"
                f" full GCs {p['loop']['gc_full']}, longest {p['loop']['gc_max_ms']:.0f} ms;"
                f" young ones over 10 ms {p['loop']['gc_young_slow']},"
                f" longest {p['loop']['gc_young_max_ms']:.0f} ms",
            ),
            (
                f"collector pauses by length, {label}",
                " / ".join(str(c) for c in p["loop"]["gc_histogram"]),
                "< 10 ms (full ones only) / 10-50 / 50-100 / 100-250 / >= 250 ms",
            ),
            (
                f"collector pauses by own CPU, {label}",
                " / ".join(str(c) for c in p["loop"]["gc_cpu_histogram"]),
                "the same pauses by the collector's CPU time; most freed by a young one:"
                f" {p['loop']['gc_young_collected_max']} objects",
            ),
            (
                f"connections to the hub, peak, {label}",
                f"{p['hub_connections_max']}",
                "all clients of the hub",
            ),
            (
                f"/metrics at the end, {label}: checks waiting for a slot",
                f"{p['checks_waiting_end']:.0f}"
                + (
                    f" (answering {p['slots_by_class_end']['waiting:answering']:.0f},"
                    f" new {p['slots_by_class_end'].get('waiting:new', 0):.0f},"
                    f" silent {p['slots_by_class_end']['waiting:silent']:.0f}; slots held:"
                    f" answering {p['slots_by_class_end'].get('running:answering', 0):.0f},"
                    f" new {p['slots_by_class_end'].get('running:new', 0):.0f},"
                    f" silent {p['slots_by_class_end'].get('running:silent', 0):.0f})"
                    if "waiting:silent" in p.get("slots_by_class_end", {})
                    else ""
                ),
                "Clusters by Ready reason: "
                + ", ".join(
                    f"{k.removeprefix('reason:')} {v:.0f}"
                    for k, v in sorted(p["clusters_by_reason_end"].items())
                ),
            ),
        ]
    if "silent_onboarding" in r:
        b = r["silent_onboarding"]
        rows.append(
            (
                "silent onboarding: the batch's first try after creation p50 / max",
                f"{b['batch_first_try_p50_s']:.1f} / {b['batch_first_try_max_s']:.1f} s",
                f"{b['batch_tried']} of the batch tried in the {b['window_s']} s window",
            )
        )
    rows += (
        []
        if not rs
        else [
            (
                "restart: first check after restart p50 / max",
                f"{rs['first_check_p50_s']:.1f} / {rs['first_check_max_s']:.1f} s",
                f"rechecked {rs['rechecked']}",
            ),
            (
                "restart: Ready Clusters that were not Ready meanwhile",
                f"{rs['not_ready_meanwhile']}",
                "",
            ),
            (
                "restart: from SIGTERM to the exit (the stop record)",
                f"{rs.get('stop_s', math.nan):.1f} s",
                "",
            ),
        ]
    )
    replicas = r.get("replicas", 1)
    head = f"N = {r['clusters']}, {replicas} replica{'s' if replicas > 1 else ''}"
    lines = [f"| {head} | measured | beside |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + report_scale(r)


def _f(value: Any, digits: int = 1) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:,.{digits}f}")
    )


def report_scale(r: dict[str, Any]) -> str:
    """The figures beyond one process: each replica, the hub's cost, the scrape, the rolling
    upgrade and one replica beside the sharded ones."""
    out: list[str] = []
    n, s = r["clusters"], r["steady"]
    phases = [("steady", s)] + ([("one replica", r["one_replica"])] if "one_replica" in r else [])
    out += ["", "| replica | shards | Clusters | gap p50 / p99 / max | CPU / check | cores |"
            " RSS mean / max |", "|---|---|---:|---|---:|---:|---|"]  # fmt: skip
    for label, p in phases:
        for name, f in p.get("replicas", {}).items():
            out.append(
                f"| {label}: {name} | {','.join(map(str, f.get('shards', [])))} |"
                f" {f['clusters']} | {_f(f['gap_p50'])} / {_f(f['gap_p99'])} /"
                f" {_f(f['gap_max'])} s | {_f(f.get('cpu_ms_per_check'), 2)} ms |"
                f" {_f(f.get('cpu_cores'), 2)} | {_f(f.get('rss_mb_mean'), 0)} /"
                f" {_f(f.get('rss_mb_max'), 0)} MB |"
            )
        out.append(
            f"| {label}: all | | {p['ok_spokes_checked']} | {_f(p['gap_p50'])} /"
            f" {_f(p['gap_p99'])} / {_f(p['gap_max'])} s | {_f(p['cpu_ms_per_check'], 2)} ms |"
            f" {_f(p['cpu_cores'], 2)} | {_f(p['rss_mb_mean'], 0)} / {_f(p['rss_mb_max'], 0)}"
            f" MB (all) |"
        )
    if "one_replica" in r:
        one = r["one_replica"]["cpu_ms_per_check"]
        out.append(
            f"\nCPU per check, all replicas over one replica (same run): "
            f"{s['cpu_ms_per_check'] / one:.2f}x"
        )
    for label, p in phases:
        two = p.get("checked_by_two", {})
        out.append(
            f"{label}: Clusters checked by two replicas within a minute"
            f" {two.get('two_within_minute', '-')}, whose checker changed"
            f" {two.get('checker_changed', '-')}"
        )
    if "argocd_writers" in r:
        w = r["argocd_writers"]
        out.append(
            f"Argo CD Secrets written by two replicas (managedFields): {w['written_by_two']}"
            f" of {w['secrets']}"
        )
    hub_rows = []
    bare, onboard = r.get("hub_bare_writes"), r.get("hub_onboarding")
    if bare and onboard:
        hub_rows += [
            ("onboarding, per Cluster", onboard, n),
            ("bare 3N writes, per Cluster", bare, n),
        ]
    for label, p in phases:
        if "hub" in p:
            hub_rows.append((f"{label}, per minute per 1,000 Clusters", p["hub"], None))
    if "hub_idle" in r:
        hub_rows.append(("idle hub (no manager), per minute per 1,000", r["hub_idle"], None))
    if hub_rows:
        out += [
            "",
            f"| hub cost ({r.get('auth', 'cert')}) | kube-apiserver CPU | etcd CPU |"
            " apiserver + etcd | watch bytes | seconds |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for label, h, per in hub_rows:
            if per:
                scale, unit = 1000 / per, " ms"
            else:
                scale, unit = 60 / h["seconds"] * 1000 / n * 1000, " ms"
            out.append(
                f"| {label} | {h['apiserver_cpu_s'] * scale:.2f}{unit} |"
                f" {h['etcd_cpu_s'] * scale:.2f}{unit} | {h['hub_cpu_s'] * scale:.2f}{unit} |"
                f" {h['watch_bytes'] * (scale / 1000):,.0f} B | {h['seconds']:.0f} |"
            )
        if bare and onboard:
            out.append(
                f"\nonboarding's hub CPU over the bare writes': "
                f"{onboard['hub_cpu_s'] / bare['hub_cpu_s']:.2f}x"
            )
    if "objects" in r:
        o = r["objects"]
        out.append(
            f"objects in the hub (JSON as listed): {o['bytes_per_cluster']:,.0f} bytes per"
            f" Cluster (Clusters {o['clusters_bytes'] / 1e6:.1f} MB, kubeconfig Secrets"
            f" {o['kubeconfig_secrets_bytes'] / 1e6:.1f} MB, Argo CD Secrets"
            f" {o['argocd_secrets_bytes'] / 1e6:.1f} MB)"
        )
    for label, p in phases:
        for name, sc in p.get("scrape", {}).items():
            out.append(
                f"/metrics, {label}, {name}: {sc['bytes'] / 1e6:.2f} MB, {sc['series']:,} series,"
                f" on the wire {sc['wire_bytes'] / 1e6:.2f} MB (Content-Encoding"
                f" {sc['content_encoding']}), gzipped {sc['gzip_bytes'] / 1e6:.3f} MB;"
                f" {sc['time_ms']:.0f} ms (max {sc['time_max_ms']:.0f})"
            )
    if "rolling" in r:
        g = r["rolling"]
        out += [
            "",
            f"| rolling upgrade ({g['window_s']} s, roll {g['roll_s']} s, load {g['load']}) | |",
            "|---|---|",
            f"| check gap p50 / p99 / max, every answering Cluster | {_f(g['gap_p50'])} /"
            f" {_f(g['gap_p99'])} / {_f(g['gap_max'])} s |",
            f"| each Cluster's worst gap, p99; Clusters over 70 s |"
            f" {_f(g['clusters_worst_gap_p99'])} s; {g['clusters_gap_over_70']} |",
            f"| writes beyond the Leases | {g['writes_beyond_leases'] or 0} |",
            f"| Lease writes | {g['lease_writes']:.0f} |",
            f"| Ready changes / Ready Clusters that left Ready | {g['ready_changes']} /"
            f" {g['left_ready']} |",
            f"| registrations replaced (deleted or new uid) | {len(g['registrations_replaced'])} |",
            f"| checked by two replicas within a minute / checker changed |"
            f" {g['checked_by_two']['two_within_minute']} /"
            f" {g['checked_by_two']['checker_changed']} (gap at the change min / p50 / max"
            f" {_f(g['checked_by_two']['change_gap_min'])} /"
            f" {_f(g['checked_by_two']['change_gap_p50'])} /"
            f" {_f(g['checked_by_two']['change_gap_max'])} s) |",
            "| steps: Ready after / stop / all shards held again |"
            + "; ".join(
                f" {x['ready_s']:.0f} / {x['stop_s']:.1f} / {x['all_shards_held_s']:.1f} s"
                for x in g["steps"]
            )
            + " |",
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument(
        "--replicas", type=int, default=1, help="manager replicas; above 1, one shard each"
    )
    parser.add_argument("--window", type=float, default=180.0, help="steady window, seconds")
    parser.add_argument("--restart-window", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=20.0, help="wait after onboarding")
    parser.add_argument("--idle-window", type=float, default=30.0)
    parser.add_argument("--onboard-timeout", type=float, default=1800.0)
    for kind in ("slow", "hanging", "refusing", "unauthorized"):
        parser.add_argument(f"--{kind}", type=float, default=0.0, help=f"share of {kind} spokes")
    parser.add_argument(
        "--sourced",
        nargs="?",
        const="capi",
        choices=("capi", "secrets"),
        help="one ClusterSource instead of hand-made Clusters: over Cluster API-shaped Secrets"
        " (capi, the default) or a team's labelled Secrets (secrets, from: Secrets)",
    )
    parser.add_argument(
        "--silent-batch",
        type=int,
        default=0,
        help="after the steady window, this many more Clusters at once whose spokes never answer",
    )
    parser.add_argument("--batch-window", type=float, default=240.0)
    parser.add_argument(
        "--lease",
        action="store_true",
        help="one replica leads on its Lease, as kokumi manager does by default (without it:"
        " --no-leader-elect, as every run in benchmarks/README.md)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help="--shards of the replicas (default: --replicas); each holds at most"
        " ceil(shards / replicas) (--max-shards)",
    )
    parser.add_argument(
        "--auth",
        choices=("token", "cert"),
        default="token",
        help="the managers and the runner's writes reach the hub with a ServiceAccount token"
        " (token, the default, as in a real hub) or the admin client certificate (cert, as"
        " every run before the hub's cost was measured)",
    )
    parser.add_argument(
        "--rolling",
        action="store_true",
        help="after the steady window, a rolling upgrade: each replica replaced by a new one,"
        " one at a time, the new one Ready before the old one goes",
    )
    parser.add_argument(
        "--rolling-tail", type=float, default=90.0, help="seconds measured after the last step"
    )
    parser.add_argument(
        "--compare-one",
        action="store_true",
        help="at the end, one replica on the same tree in the same run: the sharded replicas"
        " stopped, one started, --compare-settle seconds, then a steady window",
    )
    parser.add_argument("--compare-settle", type=float, default=70.0)
    parser.add_argument(
        "--carry-labels",
        metavar="PATTERNS",
        help="the managers' --carry-labels (e.g. fleet: every Cluster here has fleet: bench), so"
        " that every Argo CD Secret carries a label of its Cluster's besides its Environment's",
    )
    parser.add_argument("--output", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if args.carry_labels:
        Managers.extra = ("--carry-labels", args.carry_labels)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = Path(tempfile.mkdtemp(prefix="kokumi-bench-"))
    print(f"work directory {workdir}; load {load()}", flush=True)
    with ControlPlane.start() as plane:
        run_kubectl(plane.hub, "apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
        if args.sourced == "capi":
            run_kubectl(plane.hub, "apply", "-f", "-", input=CAPI_CRD)  # Cluster API's clusters
        run_kubectl(plane.hub, "wait", "--for=condition=Established", "crd", "--all")
        result = trio.run(main_async, args, plane, workdir)
    text = report(result)
    print(text)
    if args.output:
        args.output.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
