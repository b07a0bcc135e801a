"""The chart's ``helm test`` script where it must fail: no manager answers, the API server refuses
the account, or the account may not list Clusters. Each says which check failed and why, exits 1,
and never prints the token it used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kokumi.testing.controlplane import APIServer
from tests.deploy.test_helm_chart import CHART
from tests.support.deploy import free_port, run

SCRIPT = CHART / "files" / "helm-test.py"


def run_script(
    hub: APIServer, account: Path, token: str, readyz: str
) -> subprocess.CompletedProcess[str]:
    account.mkdir(exist_ok=True)
    (account / "ca.crt").write_bytes(hub.ca_pem)
    (account / "token").write_text(token)
    return subprocess.run(
        [sys.executable, str(SCRIPT)],
        env={
            "PATH": os.environ["PATH"],
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(hub.port),
            "SERVICE_ACCOUNT_DIR": str(account),
            "KOKUMI_READYZ_URL": readyz,
            "KOKUMI_TEST_SECONDS": "2",
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.usefixtures("crds")
def test_no_manager_and_a_refused_token_fail_with_both_reasons(
    hub: APIServer, tmp_path: Path
) -> None:
    token = "not-a-token-" + "x" * 40
    ran = run_script(hub, tmp_path / "account", token, f"http://127.0.0.1:{free_port()}/readyz")
    assert ran.returncode == 1
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("the manager answers http://127.0.0.1:")
    assert "failed:" in lines[0] and "refused" in lines[0].lower()
    assert lines[1].startswith("the test account lists Clusters: failed:") and "401" in lines[1]
    assert token not in ran.stdout + ran.stderr


@pytest.mark.usefixtures("crds")
def test_an_account_that_may_not_list_clusters_fails_as_forbidden(
    hub: APIServer, namespace: str, tmp_path: Path
) -> None:
    admin = hub.admin_kubeconfig
    run(admin, "-n", namespace, "create", "serviceaccount", "helm-test")
    token = run(admin, "-n", namespace, "create", "token", "helm-test").stdout.strip()
    ran = run_script(hub, tmp_path / "account", token, f"http://127.0.0.1:{free_port()}/readyz")
    assert ran.returncode == 1
    assert "the test account lists Clusters: failed: HTTP Error 403" in ran.stdout
    assert token not in ran.stdout + ran.stderr
