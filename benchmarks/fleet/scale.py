"""The fleet benchmark's figures beyond one process: replicas, the hub's own cost, the scrape.

Used by ``run.py``:

- :func:`token_kubeconfig`: a ServiceAccount, bound to ``cluster-admin``, and a kubeconfig with
  a token of it from the TokenRequest API, so the manager (and the runner's writes) reach the hub
  as a pod's ServiceAccount does, not with the admin client certificate, whose verification on
  every request costs the API server about 8 % of its CPU (a token's check is cached 10 s).
- :class:`HubCost`: the hub's kube-apiserver and etcd CPU from ``/proc``, the watch bytes the API
  server sent (``apiserver_watch_events_sizes``) and etcd's database in use.
- :func:`scrape`: one manager's ``GET /metrics``, its size raw and gzipped, and its time.
- :func:`by_replica` and :func:`two_checkers`: the spokes' asks split by the replica that made
  each (every replica binds its checks to a source address of its own).
- :func:`two_writers`: the Argo CD Secrets whose managedFields name two replicas' field managers.
"""

from __future__ import annotations

import gzip
import itertools
import math
import os
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml

from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import ControlPlane

CLK = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def token_kubeconfig(plane: ControlPlane, workdir: Path, namespace: str, name: str) -> Path:
    """A kubeconfig for the ServiceAccount ``namespace/name`` (made here, cluster-admin), with
    a token of a day from the TokenRequest API."""
    hub = plane.hub
    run_kubectl(hub, "create", "serviceaccount", name, "-n", namespace)
    run_kubectl(
        hub,
        "create",
        "clusterrolebinding",
        f"{namespace}-{name}",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{name}",
    )
    made = run_kubectl(hub, "create", "token", name, "-n", namespace, "--duration=24h")
    token = made.stdout.strip()
    ca = hub.ca_file
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "hub", "cluster": {"server": hub.url, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": name}}],
        "current-context": "hub",
    }
    path = workdir / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


class HubCost:
    """The hub's own cost, read from outside: CPU of its kube-apiserver and of etcd (``/proc``;
    etcd also serves the idle spoke API server of the control plane), the watch events' bytes
    the API server sent, and etcd's database in use."""

    def __init__(self, plane: ControlPlane) -> None:
        assert plane.hub.apiserver.popen is not None and plane.etcd.popen is not None
        self.apiserver = plane.hub.apiserver.popen.pid
        self.etcd = plane.etcd.popen.pid
        self.etcd_url = plane.hub.etcd_url
        self.url = plane.hub.url
        self.context = plane.hub.ssl_context("kokumi-admin", ["system:masters"])

    def read(self) -> dict[str, float]:
        out = {
            "at": time.time(),
            "apiserver_cpu": _cpu(self.apiserver),
            "etcd_cpu": _cpu(self.etcd),
            "watch_bytes": 0.0,
            "watch_events": 0.0,
            "etcd_db_in_use": math.nan,
            "etcd_keys": math.nan,
        }
        text = httpx.get(f"{self.url}/metrics", verify=self.context, timeout=30).text
        for line in text.splitlines():
            if line.startswith("apiserver_watch_events_sizes_sum{"):
                out["watch_bytes"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("apiserver_watch_events_total{"):
                out["watch_events"] += float(line.rsplit(" ", 1)[1])
        etcd = httpx.get(f"{self.etcd_url}/metrics", timeout=30).text
        for line in etcd.splitlines():
            if line.startswith("etcd_mvcc_db_total_size_in_use_in_bytes "):
                out["etcd_db_in_use"] = float(line.split()[1])
            elif line.startswith("etcd_debugging_mvcc_keys_total "):
                out["etcd_keys"] = float(line.split()[1])
        return out

    @staticmethod
    def between(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        """What the hub spent from reading ``a`` to reading ``b``."""
        seconds = b["at"] - a["at"]
        apiserver = b["apiserver_cpu"] - a["apiserver_cpu"]
        etcd = b["etcd_cpu"] - a["etcd_cpu"]
        return {
            "seconds": seconds,
            "apiserver_cpu_s": apiserver,
            "etcd_cpu_s": etcd,
            "hub_cpu_s": apiserver + etcd,
            "hub_cores": (apiserver + etcd) / seconds if seconds else math.nan,
            "watch_bytes": b["watch_bytes"] - a["watch_bytes"],
            "watch_events": b["watch_events"] - a["watch_events"],
            "etcd_db_in_use_delta": b["etcd_db_in_use"] - a["etcd_db_in_use"],
            "etcd_keys_delta": b["etcd_keys"] - a["etcd_keys"],
        }


def scrape(port: int, times: int = 3) -> dict[str, float]:
    """``GET /metrics`` of one manager as Prometheus asks for it (gzip accepted): the page's
    bytes, the bytes on the wire (the manager does not compress, so the same), what gzip would
    make of it, its series, and the time of a scrape (the median of ``times``)."""
    took: list[float] = []
    body = b""
    wire = 0
    encoding = ""
    for _ in range(times):
        began = time.perf_counter()
        with httpx.stream(
            "GET",
            f"http://127.0.0.1:{port}/metrics",
            headers={"Accept-Encoding": "gzip", "Accept": "text/plain;version=0.0.4"},
            timeout=60,
        ) as response:
            body = response.read()
            wire = response.num_bytes_downloaded
            encoding = response.headers.get("content-encoding", "")
        took.append(time.perf_counter() - began)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {
        "bytes": len(body),
        "wire_bytes": wire,
        "content_encoding": encoding or "none",  # type: ignore[dict-item]
        "gzip_bytes": len(gzip.compress(body, 6)),
        "series": series,
        "time_ms": statistics.median(took) * 1000,
        "time_max_ms": max(took) * 1000,
    }


def by_replica(
    asked: dict[int, list[float]],
    by: dict[int, list[str]],
    kinds: list[str],
    start: float,
    names: list[str],
) -> dict[str, dict[str, Any]]:
    """Each replica's answering Clusters (those whose checks in the window it made) and their
    check gaps (a gap counts for the replica that made its second check, when that falls in the
    window), by the replica's name (its source address)."""
    gaps: dict[str, list[float]] = defaultdict(list)
    clusters: dict[str, set[int]] = defaultdict(set)
    for i, times in asked.items():
        if kinds[i] != "ok":
            continue
        sources = by.get(i, [])
        for k, t in enumerate(times):
            if t >= start and k < len(sources):
                clusters[sources[k]].add(i)
                if k > 0:
                    gaps[sources[k]].append(t - times[k - 1])
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(names) | set(clusters)):
        g = gaps.get(name, [])
        out[name] = {
            "clusters": len(clusters.get(name, ())),
            "gap_p50": pct(g, 0.5),
            "gap_p99": pct(g, 0.99),
            "gap_max": max(g, default=math.nan),
        }
    return out


def two_checkers(
    asked: dict[int, list[float]], by: dict[int, list[str]], start: float, within: float = 60.0
) -> dict[str, int]:
    """Clusters checked by two replicas within ``within`` seconds (two checks in a row, from two
    source addresses, the second in the window), and Clusters whose checker changed at all."""
    close, moved = set(), set()
    changes: list[float] = []
    for i, times in asked.items():
        sources = by.get(i, [])
        for k in range(1, min(len(times), len(sources))):
            if times[k] < start or sources[k] == sources[k - 1]:
                continue
            moved.add(i)
            changes.append(times[k] - times[k - 1])
            if times[k] - times[k - 1] < within:
                close.add(i)
    return {
        "two_within_minute": len(close),
        "checker_changed": len(moved),
        # The gap between the last check by one replica and the first by the next.
        "change_gap_min": min(changes, default=math.nan),
        "change_gap_p50": pct(changes, 0.5),
        "change_gap_max": max(changes, default=math.nan),
    }


def two_writers(managers_seen: dict[str, set[str]]) -> dict[str, Any]:
    """The Argo CD Secrets whose managedFields named two replicas' field managers (``kokumi-<n>``)
    at any moment the runner saw them."""
    two = {
        name: sorted(seen)
        for name, seen in managers_seen.items()
        if len({m for m in seen if re.fullmatch(r"kokumi-\d+", m)}) > 1
    }
    return {
        "secrets": len(managers_seen),
        "written_by_two": len(two),
        "examples": dict(itertools.islice(two.items(), 5)),
    }
