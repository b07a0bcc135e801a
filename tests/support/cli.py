"""What the command-line tests share: ``kokumi`` run as a process, its one error line, the
kubeconfig a Cluster's Secret holds, and users and ServiceAccounts of a test's own.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import wait_until


@attrs.frozen
class Run:
    code: int
    out: str
    err: str


def kokumi(*args: str, hub: Path | None = None, stdin: str = "") -> Run:
    """``kokumi ARGS`` as a process; ``hub`` is the current kubeconfig ($KUBECONFIG), ``stdin``
    what a user types (nothing: end of input at once)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if hub is not None:
        env["KUBECONFIG"] = str(hub)
    result = subprocess.run(
        [sys.executable, "-m", "kokumi", *args],
        capture_output=True,
        input=stdin,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    return Run(result.returncode, result.stdout, result.stderr)


def one_error_line(run: Run) -> str:
    assert run.code != 0, run.out
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("kokumi: ")
    return lines[0]


def stored_kubeconfig(kubectl: Kubectl, hub: APIServer, namespace: str, name: str) -> str:
    data = kubectl(
        hub, "get", "secret", name, "-n", namespace, "-o", "jsonpath={.data.value}"
    ).stdout
    return base64.b64decode(data).decode()


def whoami(kubectl: Kubectl, kubeconfig_text: str, path: Path) -> str:
    path.write_text(kubeconfig_text)
    path.chmod(0o600)
    review = json.loads(kubectl(path, "auth", "whoami", "-o", "json").stdout)
    return str(review["status"]["userInfo"]["username"])


@pytest.fixture
def account(spoke: APIServer, kubectl: Kubectl) -> Iterator[str]:
    """A ServiceAccount name of the test's own on the spoke, and its objects removed after."""
    name = f"kokumi-{uuid.uuid4().hex[:6]}"
    yield name
    for kind, obj in (
        ("clusterrolebinding", name),
        ("secret", f"{name}-token"),
        ("serviceaccount", name),
    ):
        kubectl(spoke, "delete", kind, obj, "-n", "kube-system", "--ignore-not-found")


def user_with(hub: APIServer, kubectl: Kubectl, namespace: str, grants: dict[str, str]) -> Path:
    """The kubeconfig of a new user with ``grants`` (resource: verbs) in ``namespace`` only."""
    user = f"user-{uuid.uuid4().hex[:6]}"
    for index, (resource, verbs) in enumerate(grants.items()):
        role = f"{user}-{index}"
        kubectl(hub, "-n", namespace, "create", "role", role, f"--verb={verbs}",
                f"--resource={resource}")  # fmt: skip
        kubectl(hub, "-n", namespace, "create", "rolebinding", role, f"--role={role}",
                f"--user={user}")  # fmt: skip
    config = hub.kubeconfig_for(user)
    resource, verbs = list(grants.items())[-1]

    def granted() -> bool | None:
        can = kubectl(config, "auth", "can-i", verbs.split(",")[0], resource, "-n", namespace,
                      check=False)  # fmt: skip
        return True if can.stdout.strip() == "yes" else None

    wait_until(granted, "the roles reach the authorizer")
    return config
