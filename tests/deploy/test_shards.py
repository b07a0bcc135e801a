"""``kokumi manager --shards 2`` as two processes under install.yaml's RBAC, as the Deployment runs.

The Lease Role names no Lease, so it must let the replicas take the shard Leases too; each
replica writes under its own field manager, so each Cluster's managedFields say which one wrote.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from kokumi.core import api
from kokumi.core.fleet.shards import lease_name, shard_of
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import (
    LEASE_DURATION,
    _remove_workspace,
    install,
    replicas,
    run,
    wait,
)


def _name_in(namespace: str, shard: int) -> str:
    return next(f"home-{k}" for k in range(100) if shard_of(namespace, f"home-{k}", 2) == shard)


def _get(hub: APIServer, *args: str) -> Any:
    return json.loads(run(hub.admin_kubeconfig, "get", *args, "-o", "json").stdout)


def _status_managers(cluster: dict[str, Any]) -> set[str]:
    return {
        entry["manager"]
        for entry in cluster["metadata"].get("managedFields") or ()
        if entry.get("subresource") == "status"
    }


def test_two_replicas_split_the_shards_under_the_installed_rbac(
    hub: APIServer, admission_policies: object, tmp_path: Path
) -> None:
    lease, workspace, _ = install(hub, tmp_path)
    flags = ("--shards=2", "--max-shards=1")
    names = {shard: _name_in(workspace, shard) for shard in (0, 1)}
    leases = [lease_name(shard, 2) for shard in (0, 1)]
    try:
        with replicas(hub, tmp_path, lease, flags) as start:
            a = start("a")
            wait(a.leading, "a holds a shard")
            b = start("b")
            wait(b.leading, "b holds the other shard")
            holders = [
                _get(hub, "-n", "kokumi", "lease", n)["spec"]["holderIdentity"] for n in leases
            ]
            assert len(set(holders)) == 2 and all(holders), holders

            clusters = "---\n".join(
                f"apiVersion: {api.API_VERSION}\nkind: Cluster\n"
                f"metadata: {{name: {name}, namespace: {workspace}}}\n"
                "spec: {connection: InCluster}\n"
                for name in names.values()
            )
            run(hub.admin_kubeconfig, "apply", "-f", "-", input=clusters)

            def ready() -> dict[str, dict[str, Any]]:
                found = _get(
                    hub, "-n", workspace, "clusters.delivery.kokumi.dev", "--show-managed-fields"
                )["items"]
                return {c["metadata"]["name"]: c for c in found}

            wait(
                lambda: all(
                    any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (ready().get(n, {}).get("status") or {}).get("conditions") or ()
                    )
                    for n in names.values()
                ),
                "both Clusters Ready",
            )
            writers = {name: _status_managers(ready()[name]) for name in names.values()}
            assert all(len(w) == 1 for w in writers.values()), writers
            assert set().union(*writers.values()) == {"kokumi-a", "kokumi-b"}, writers
            assert a.writes() > 0 and b.writes() > 0

            # SIGTERM hands a's shard Lease back; a new replica takes it at its next try.
            a.process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            assert a.process.wait(timeout=30) == 0
            c = start("c")
            took = wait(c.leading, "c takes the shard a handed back", timeout=LEASE_DURATION * 3)
            assert time.monotonic() - stopped < LEASE_DURATION * 3
            after = [
                _get(hub, "-n", "kokumi", "lease", n)["spec"]["holderIdentity"] for n in leases
            ]
            # b keeps its shard; the other is c's now, not a's any more.
            assert len(set(after)) == 2 and len(set(after) & set(holders)) == 1, (holders, after)
            print(f"a shard handed back was taken {took:.1f} s after the new replica started")
    finally:
        _remove_workspace(hub, workspace)
        for name in leases:
            run(hub.admin_kubeconfig, "-n", "kokumi", "delete", "lease", name, check=False)
