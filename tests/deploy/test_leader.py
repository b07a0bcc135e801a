"""Two ``kokumi manager`` processes in in-cluster mode, as the two replicas of the Deployment.

Both run as the real ServiceAccount kokumi:kokumi, with a token from the TokenRequest API and the
hub's CA mounted where a pod has them, under install.yaml's RBAC (the Lease Role in kokumi only).
Each process writes under its own field manager, so the managedFields of the Clusters say which
one wrote; each also reports its own API requests on /metrics. The test shows: only the leader
writes, the standby makes no write at all; a SIGKILLed leader is replaced within the lease time;
a SIGTERMed leader hands over at once; /metrics parses with prometheus_client's parser and shows
the Clusters; the JSON log lines carry the Cluster and the reason.

Timings are shortened (6/4/1 s instead of 15/10/2) to keep the test quick.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from kokumi.core import api
from kokumi.kube import Client, Config
from kokumi.kube.resources import EVENTS, LEASES, SECRETS
from kokumi.kube.watch import Resync, WatchEvent, watch
from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import (
    LEASE_DURATION,
    RENEW_DEADLINE,
    RETRY_PERIOD,
    Replica,
    _remove_workspace,
    bind_manager_secrets,
    free_port,
    install,
    replicas,
    run,
    service_account_kubeconfig,
    unreachable_kubeconfig,
    wait,
)


def rss(replica: Replica) -> int:
    """The process's resident memory in KiB, from /proc."""
    for line in Path(f"/proc/{replica.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc")


@attrs.define
class Writers:
    """Which field managers own the status of the watched Clusters, event by event."""

    seen: list[tuple[float, frozenset[str]]] = attrs.field(factory=list)

    def note(self, obj: dict[str, Any]) -> None:
        managers = frozenset(
            entry["manager"]
            for entry in obj["metadata"].get("managedFields") or ()
            if entry.get("subresource") == "status"
        )
        self.seen.append((time.monotonic(), managers))

    def between(self, start: float, end: float) -> set[str]:
        return {m for at, managers in self.seen if start <= at < end for m in managers}


async def follow(hub: APIServer, namespace: str, writers: Writers) -> None:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        send, receive = trio.open_memory_channel[WatchEvent | Resync](100)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    watch, admin, api.CLUSTERS, send, namespace=namespace, managed_fields=True
                )
            )
            async for event in receive:
                for obj in event.objects if isinstance(event, Resync) else (event.object,):
                    writers.note(obj)


def test_only_the_leader_writes_and_a_standby_takes_over(
    hub: APIServer, admission_policies: object, tmp_path: Path
) -> None:
    lease, workspace, suffix = install(hub, tmp_path)
    writers = Writers()

    async def background() -> None:
        await follow(hub, workspace, writers)

    try:
        with replicas(hub, tmp_path, lease) as start, _in_thread(background) as stop_watch:
            a = start("a")
            wait(a.leading, "a leads")
            b = start("b")
            wait(lambda: b.get("/readyz").status_code == 200, "b is ready as a standby")
            assert b.get("/readyz").text.startswith("standby: the Lease is held by ")

            # Two Clusters for the leader to check and report on.
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "edge-kubeconfig", "namespace": workspace},
                "data": {
                    "value": base64.b64encode(
                        unreachable_kubeconfig(
                            f"https://kokumi-leader-{suffix}.invalid:6443",
                            canary.token(),
                            hub.ca_pem,
                        ).encode()
                    ).decode()
                },
            }
            run(hub.admin_kubeconfig, "apply", "-f", "-", input=json.dumps(secret))
            # The manager reads Secrets only where kokumi-manager-secrets is bound.
            bind_manager_secrets(hub, workspace)
            clusters = (
                f"apiVersion: {api.API_VERSION}\nkind: Cluster\n"
                f"metadata: {{name: home, namespace: {workspace}}}\n"
                "spec: {connection: InCluster}\n---\n"
                f"apiVersion: {api.API_VERSION}\nkind: Cluster\n"
                f"metadata: {{name: edge, namespace: {workspace}}}\n"
                "spec: {connection: Kubeconfig, kubeconfig: {secretRef: {name: edge-kubeconfig}}}\n"
            )
            run(hub.admin_kubeconfig, "apply", "-f", "-", input=clusters)

            def reasons(replica: Replica) -> dict[str, float]:
                return {
                    labels["reason"]: value
                    for labels, value in replica.metrics()["kokumi_clusters"]
                }

            wait(
                lambda: {"Ready", "Unreachable"} <= set(reasons(a)),
                "a reports both Clusters on /metrics",
            )
            found = a.metrics()
            availability = {
                (labels["namespace"], labels["name"]): value
                for labels, value in found["kokumi_cluster_availability_ratio"]
            }
            assert availability[(workspace, "home")] == 1.0
            assert availability[(workspace, "edge")] == 0.0
            assert found["kokumi_leader"] == [({}, 1.0)]
            assert any(value > 0 for _, value in found["kokumi_checks"])
            # The standby reads the Lease and nothing else; it writes nothing at all.
            standby = b.metrics()
            assert standby["kokumi_leader"] == [({}, 0.0)]
            assert b.writes() == 0
            assert "kokumi_clusters" not in standby or standby["kokumi_clusters"] == []

            # The JSON log of the leader carries the Cluster and the reason as fields.
            edge_lines = [
                line
                for line in a.lines()
                if line.get("cluster_namespace") == workspace and line.get("cluster_name") == "edge"
            ]
            assert edge_lines and edge_lines[0]["reason"] == "Unreachable"

            # The figure docs/operations.md sizes the Deployment by; no assertion on it.
            print(f"resident: leader {rss(a)} KiB, standby {rss(b)} KiB")

            # SIGKILL: no hand-back; b waits out the lease, then leads.
            wait(lambda: "kokumi-a" in writers.between(0, time.monotonic()), "a's writes seen")
            a.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            a.process.wait(timeout=10)
            after_kill = wait(b.leading, "b leads after a was killed", timeout=LEASE_DURATION * 3)
            assert after_kill <= LEASE_DURATION + RETRY_PERIOD * 1.2 + 2.0
            assert writers.between(0, killed) == {"kokumi-a"}
            # b now writes: a changed Secret makes it check and report again.
            run(hub.admin_kubeconfig, "-n", workspace, "delete", "secret", "edge-kubeconfig")
            wait(
                lambda: "kokumi-b" in writers.between(killed, time.monotonic()),
                "b writes the status after taking over",
            )
            assert b.writes() > 0

            # SIGTERM: b hands the Lease back; the standby c leads at its next try.
            c = start("c")
            wait(lambda: c.get("/readyz").status_code == 200, "c is ready as a standby")
            b.process.send_signal(signal.SIGTERM)
            after_term = wait(c.leading, "c leads after b stopped", timeout=LEASE_DURATION * 3)
            assert b.process.wait(timeout=30) == 0
            assert after_term < LEASE_DURATION / 2  # not the lease: c's next try
            assert any("handed the Lease" in line["message"] for line in b.lines())
            print(f"takeover after SIGKILL {after_kill:.1f} s, after SIGTERM {after_term:.1f} s")
            stop_watch()
    finally:
        _remove_workspace(hub, workspace)
        run(hub.admin_kubeconfig, "-n", "kokumi", "delete", "lease", lease, check=False)


@contextmanager
def _in_thread(async_fn: Any) -> Iterator[Any]:
    """Run a Trio task in a thread beside the synchronous test; yield a function that stops it."""
    scope_holder: list[trio.CancelScope] = []
    token_holder: list[trio.lowlevel.TrioToken] = []
    ready = threading.Event()

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope_holder.append(scope)
            token_holder.append(trio.lowlevel.current_trio_token())
            ready.set()
            await async_fn()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    ready.wait(10)

    def stop() -> None:
        if scope_holder and thread.is_alive():
            trio.from_thread.run_sync(scope_holder[0].cancel, trio_token=token_holder[0])
        thread.join(10)

    try:
        yield stop
    finally:
        stop()


def test_a_leader_whose_renewals_are_refused_exits_non_zero(
    hub: APIServer, namespace: str, tmp_path: Path
) -> None:
    """Take the Lease rights away from a leading process: it stops and exits with status 1.

    The process runs as a ServiceAccount of its own that may only use Leases in ``namespace``
    (its watches of Clusters are refused and retried meanwhile, which is beside the point).
    """
    admin = hub.admin_kubeconfig
    run(admin, "-n", namespace, "create", "serviceaccount", "elect")
    run(
        admin,
        "-n",
        namespace,
        "create",
        "role",
        "elect",
        "--verb=get,list,create,update",
        "--resource=leases.coordination.k8s.io",
    )
    run(
        admin,
        "-n",
        namespace,
        "create",
        "rolebinding",
        "elect",
        "--role=elect",
        f"--serviceaccount={namespace}:elect",
    )
    token = run(admin, "-n", namespace, "create", "token", "elect").stdout.strip()
    kubeconfig = service_account_kubeconfig(hub, token, tmp_path / "elect.kubeconfig")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kokumi",
            "manager",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--no-in-cluster",
            f"--leader-elect-lease-duration={LEASE_DURATION}",
            f"--leader-elect-renew-deadline={RENEW_DEADLINE}",
            f"--leader-elect-retry-period={RETRY_PERIOD}",
            f"--health-port={port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    replica = Replica("elect", process, port, tmp_path / "unused.log")
    try:
        wait(replica.leading, "the process leads")
        run(admin, "-n", namespace, "delete", "rolebinding", "elect")
        revoked = time.monotonic()
        output, _ = process.communicate(timeout=60)
        took = time.monotonic() - revoked
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 1, output
    assert "leadership lost: could not renew the Lease" in output
    assert "Traceback" not in output
    # Within the renew deadline of its last good renewal, give or take the authorizer's catch-up.
    assert took < RENEW_DEADLINE + RETRY_PERIOD * 2 + 5


@attrs.define
class LateWrites:
    """Writes by one field manager at or after a wall-clock second, from watches on everything
    the manager writes: Clusters, Environments, Events, Argo CD's Secrets and the Lease."""

    manager: str
    since: str = "9999"  # RFC 3339, compared as text (same format, same zone)
    found: list[str] = attrs.field(factory=list)
    seen: int = 0

    def note(self, obj: dict[str, Any]) -> None:
        self.seen += 1
        for entry in obj["metadata"].get("managedFields") or ():
            if entry.get("manager") == self.manager and entry.get("time", "") >= self.since:
                meta = obj["metadata"]
                self.found.append(
                    f"{obj.get('kind')} {meta.get('namespace')}/{meta['name']} at {entry['time']}"
                )


async def follow_all(hub: APIServer, watched: list[tuple[Any, str]], late: LateWrites) -> None:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        send, receive = trio.open_memory_channel[WatchEvent | Resync](1000)
        async with trio.open_nursery() as nursery:
            for resource, namespace in watched:
                await nursery.start(
                    functools.partial(
                        watch, admin, resource, send, namespace=namespace, managed_fields=True
                    )
                )
            async for event in receive:
                for obj in event.objects if isinstance(event, Resync) else (event.object,):
                    late.note(obj)


def test_a_leader_paused_past_its_lease_writes_nothing_when_it_resumes(
    hub: APIServer, admission_policies: object, tmp_path: Path
) -> None:
    """SIGSTOP the leader past its lease: the standby takes over within the lease time; resumed,
    the old leader finds its renew deadline long gone and stops without a single write (it
    would hold the Lease first), and exits non-zero to be restarted as a standby."""
    lease, workspace, suffix = install(hub, tmp_path)
    late = LateWrites("kokumi-a")
    watched = [
        (api.CLUSTERS, workspace),
        (api.ENVIRONMENTS, workspace),
        (EVENTS, workspace),
        (SECRETS, "argocd"),
        (LEASES, "kokumi"),
    ]
    try:
        with (
            replicas(hub, tmp_path, lease) as start,
            _in_thread(functools.partial(follow_all, hub, watched, late)) as stop_watch,
        ):
            a = start("a")
            wait(a.leading, "a leads")
            b = start("b")
            wait(lambda: b.get("/readyz").status_code == 200, "b is ready as a standby")
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "edge-kubeconfig", "namespace": workspace},
                "data": {
                    "value": base64.b64encode(
                        unreachable_kubeconfig(
                            f"https://kokumi-pause-{suffix}.invalid:6443",
                            canary.token(),
                            hub.ca_pem,
                        ).encode()
                    ).decode()
                },
            }
            run(hub.admin_kubeconfig, "apply", "-f", "-", input=json.dumps(secret))
            bind_manager_secrets(hub, workspace)
            clusters = [
                f"apiVersion: {api.API_VERSION}\nkind: Cluster\n"
                f"metadata: {{name: edge-{i}, namespace: {workspace}, labels: {{fleet: edge}}}}\n"
                "spec: {connection: Kubeconfig, kubeconfig: {secretRef: {name: edge-kubeconfig}}}"
                for i in range(6)
            ]
            clusters.append(
                f"apiVersion: {api.API_VERSION}\nkind: Environment\n"
                f"metadata: {{name: edge, namespace: {workspace}}}\n"
                "spec: {clusterSelector: {matchLabels: {fleet: edge}}}"
            )
            run(hub.admin_kubeconfig, "apply", "-f", "-", input="\n---\n".join(clusters))

            def reasons() -> list[str]:
                return run(
                    hub.admin_kubeconfig,
                    "-n",
                    workspace,
                    "get",
                    "kcl",  # not Cluster API's (capi_crd)
                    "-o",
                    'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].reason}'
                    '{" "}{end}',
                ).stdout.split()

            wait(lambda: reasons() == ["Unreachable"] * 6, "a reports the six Clusters")

            a.process.send_signal(signal.SIGSTOP)
            took = wait(b.leading, "b leads while a is paused", timeout=LEASE_DURATION * 3)
            assert took <= LEASE_DURATION + RETRY_PERIOD * 1.2 + 2.0
            # While a sleeps, the world changes under it: its watches will deliver all of it.
            run(hub.admin_kubeconfig, "-n", workspace, "delete", "secret", "edge-kubeconfig")
            run(
                hub.admin_kubeconfig,
                "-n",
                workspace,
                "label",
                "kcl",
                "--all",
                "--overwrite",
                "fleet=core",
            )
            wait(lambda: reasons() == ["SecretNotFound"] * 6, "b reports the missing Secret")
            time.sleep(1.0)  # the next wall-clock second: all that follows is after the resume
            late.since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            a.process.send_signal(signal.SIGCONT)
            returncode = a.process.wait(timeout=LEASE_DURATION * 3)
            time.sleep(2.0)  # let the watches deliver whatever a might have written
            stop_watch()
            assert returncode == 1
            assert any("leadership lost" in line["message"] for line in a.lines())
            assert late.seen > 0
            assert late.found == [], f"a wrote after it resumed: {late.found}"
            assert b.leading()
    finally:
        _remove_workspace(hub, workspace)
        run(hub.admin_kubeconfig, "-n", "kokumi", "delete", "lease", lease, check=False)
