"""`kokumi demo --once`, the README's main-job command, end to end on its own hub and spoke."""

from __future__ import annotations

import subprocess
import sys


def test_demo_once_registers_the_spoke_and_exits() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kokumi", "demo", "--once", "--timeout", "150"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, f"{out[-3000:]}\n{result.stderr[-3000:]}"
    assert "$ kubectl --context spoke create serviceaccount kokumi -n kube-system" in out
    # The demo prints the view each time it changes; the last one is where it settled.
    rows = [line.split() for line in reversed(out.splitlines())]
    spoke = next(r for r in rows if r[:2] == ["cluster.delivery.kokumi.dev/spoke", "Kubeconfig"])
    assert spoke[4:6] == ["True", "Ready"]
    in_cluster = next(
        r for r in rows if r[:2] == ["cluster.delivery.kokumi.dev/in-cluster", "InCluster"]
    )
    assert in_cluster[2] == "https://kubernetes.default.svc"
    env = next(r for r in rows if r[:1] == ["environment.delivery.kokumi.dev/edge"])
    assert env[1:6] == ["ArgoCD", "1", "1", "True", "Ready"]
    secret = next(r for r in rows if r and r[0].startswith("kokumi-") and len(r) >= 4)
    assert secret[1].startswith("kokumi-platform-spoke-")
    assert "Everything is Ready" in out
    # The demo shows the registration's name, server and labels, never its credentials.
    assert "bearerToken" not in out
    assert "eyJ" not in out  # no JWT (the ServiceAccount token) anywhere
