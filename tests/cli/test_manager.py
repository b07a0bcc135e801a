"""`kokumi manager`, the container's command, run as a process against the real hub."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_manager_command_runs_until_stopped(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl, stop: signal.Signals
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kokumi",
            "manager",
            "--kubeconfig",
            str(hub.admin_kubeconfig),
            "--namespace",
            namespace,
            "--argocd-namespace",
            f"{namespace}-argocd",
            "--health-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        kept = ""
        while time.monotonic() < deadline and "in-cluster" not in kept:
            assert process.poll() is None, process.communicate()[0]
            kept = kubectl(hub, "get", "kcl", "-n", namespace, "-o", "name", check=False).stdout
            time.sleep(0.3)
        assert "cluster.delivery.kokumi.dev/in-cluster" in kept
    finally:
        process.send_signal(stop)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output  # a clean stop, as on a pod's SIGTERM
    assert "manager started" in output
    assert f"{stop.name} received: writing the stop record, then stopping" in output
    # The in-cluster Cluster's next check, recorded for the next manager before it stopped.
    assert f"recorded the next checks of 1 in ConfigMap {namespace}/kokumi-clusters-handover" in (
        output
    )
    # It led through the Lease in its namespace, and gave the Lease back on the way out.
    assert "leading: Lease" in output
    assert f"handed the Lease {namespace}/kokumi-clusters back" in output
    assert "Traceback" not in output


def test_manager_command_says_what_is_wrong_with_its_kubeconfig(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kokumi", "manager", "--kubeconfig", "/nonexistent/kubeconfig"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("kokumi: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_manager_command_refuses_timings_that_could_let_two_replicas_write(
    tmp_path: object,
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kokumi",
            "manager",
            "--kubeconfig",
            "/nonexistent/kubeconfig",  # never read: the flags are refused first
            "--leader-elect-renew-deadline",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kokumi: the lease duration (15 s) must be more than the renew deadline (20 s),"
        " or a standby could take over while the leader still writes"
    ]


NEEDS_BOTH = "kokumi: --max-shards needs --shards above 1: set both, or neither"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--shards", "0"], "kokumi: --shards must be 1 or more, not 0"),
        (["--max-shards", "2"], NEEDS_BOTH),
        (["--shards", "3", "--max-shards", "0"], "kokumi: --max-shards must be 1 or more, not 0"),
    ],
)
def test_manager_command_refuses_shard_flags_that_make_no_sense(
    flags: list[str], message: str
) -> None:
    command = [sys.executable, "-m", "kokumi", "manager", "--kubeconfig", "/nonexistent/kubeconfig"]
    result = subprocess.run(
        [*command, *flags], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [message]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--carry-labels", "fleet,argocd.argoproj.io/*"],
            "kokumi: --carry-labels: 'argocd.argoproj.io/*' is Kokumi's or Argo CD's own: they"
            " say what the Secret is and who holds it, and are never carried",
        ),
        (
            ["--carry-annotations", "example.com/*", "--carry-annotations", "a*b"],
            "kokumi: --carry-annotations: 'a*b' is not a label key or a prefix ending in *: name"
            " keys such as fleet or prefixes such as example.com/*",
        ),
    ],
)
def test_manager_command_refuses_what_it_may_not_carry(flags: list[str], message: str) -> None:
    command = [sys.executable, "-m", "kokumi", "manager", "--kubeconfig", "/nonexistent/kubeconfig"]
    result = subprocess.run(
        [*command, *flags], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [message]


def test_manager_command_stops_at_once_while_its_start_waits_for_the_hub(tmp_path: Path) -> None:
    """A hub that does not answer holds the manager's start (it retries with backoff): SIGTERM
    must still stop the process then, with no stop record to write, not when Kubernetes kills it."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: hub\n"
        f"clusters: [{{name: hub, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: me, user: {token: not-a-real-token}}]\n"
        "contexts: [{name: hub, context: {cluster: hub, user: me}}]\n"
    )
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kokumi", "manager", "--kubeconfig", str(kubeconfig)),
            *("--no-leader-elect", "--namespace", "kokumi", "--health-port", "0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(4)  # Python's start, then the start's first refused requests
        assert process.poll() is None, process.communicate()[0]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    assert "SIGTERM received: stopping" in output
    assert "manager started" not in output
    assert "not-a-real-token" not in output
