"""``kokumi demo``: the whole job on a local hub + spoke, as a platform engineer would do it.

It starts the test control plane (etcd, a hub and a spoke kube-apiserver), registers the spoke as
the spec's "Register a cluster" steps do — a ServiceAccount with a token on the spoke, a
self-contained kubeconfig in the Secret ``spoke-kubeconfig`` of namespace ``platform`` — applies the
Cluster ``spoke`` and an Environment that selects it, runs the manager, and prints what a user would
look at. Every kubectl command it runs is printed first, so the output doubles as a walk-through.
"""

from __future__ import annotations

import base64
import importlib.resources
import json
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import trio

from kokumi.cmd import UsageError
from kokumi.core.registry import argocd
from kokumi.kube.config import Config
from kokumi.manager import Manager, run_manager
from kokumi.runtime.options import Options
from kokumi.runtime.signals import until_signalled
from kokumi.testing import kubectl_binary, register, run_kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane

__all__ = ["run_demo"]

NAMESPACE = "platform"
# The CRDs and the example's workspace, shipped in the wheel beside the control plane's Go modules.
DATA = Path(str(importlib.resources.files("kokumi.testing")))


def _data(name: str) -> str:
    """A folder of DATA; resolved, as kubectl reads a link to a folder as a file."""
    return str((DATA / name).resolve())


def _kubectl(server: APIServer, *args: str, show: bool = True, input: str | None = None) -> str:
    """kubectl, its command printed first (a walk-through), its output returned."""
    if show:
        print(f"$ kubectl --context {server.name} {' '.join(args)}", flush=True)
    return run_kubectl(server, *args, input=input).stdout


def _shown(server: APIServer | Path, *args: str, **kwargs: Any) -> CompletedProcess[str]:
    """kubectl for the spec's registration steps: each shown, but no poll and no credentials."""
    if isinstance(server, APIServer) and args[0] != "get":
        print(f"$ kubectl --context {server.name} {' '.join(args)}", flush=True)
    return run_kubectl(server, *args, **kwargs)


def _setup(plane: ControlPlane) -> None:
    hub = plane.hub
    print("# The hub: Kokumi's CRDs and namespaces (Argo CD's namespace stands in for Argo CD)")
    _kubectl(hub, "apply", "--server-side", "-f", _data("crds"))
    _kubectl(hub, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    for namespace in ("kokumi", NAMESPACE, "argocd"):
        _kubectl(hub, "create", "namespace", namespace)
    print("# The spoke: a ServiceAccount with a token, and a self-contained kubeconfig")
    print("$ kubectl config --kubeconfig spoke.kubeconfig set-cluster|set-credentials|set-context")
    kubeconfig = register(plane.spoke, _shown).path
    print("# The workspace: the kubeconfig Secret, the Cluster and the Environment")
    _kubectl(
        hub,
        "create",
        "secret",
        "generic",
        "spoke-kubeconfig",
        "-n",
        NAMESPACE,
        f"--from-file=value={kubeconfig}",
    )
    _kubectl(hub, "apply", "-n", NAMESPACE, "-k", _data("example"))


def _argocd_secrets(hub: APIServer) -> str:
    """Name, labels and server of Kokumi's cluster Secrets — never their config."""
    listing = json.loads(
        _kubectl(
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
    rows = [["NAME", "ARGO CD NAME", "SERVER", "LABELS"]]
    for secret in listing.get("items", []):
        data = secret.get("data") or {}
        name = base64.b64decode(data.get("name", "")).decode(errors="replace")
        server = argocd.server_of(secret) or "?"
        labels = ",".join(f"{k}={v}" for k, v in sorted(secret["metadata"]["labels"].items()))
        rows.append([secret["metadata"]["name"], name, server, labels])
    # Each column as wide as its widest cell, as kubectl aligns them.
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _view(hub: APIServer) -> str:
    parts = []
    for namespace in (NAMESPACE, "kokumi"):
        command = ("get", "clusters.delivery.kokumi.dev,environments.delivery.kokumi.dev")
        parts.append(f"$ kubectl get kcl,kenv -n {namespace}")
        parts.append(_kubectl(hub, *command, "-n", namespace, show=False).rstrip())
    parts.append("$ kubectl get secrets -n argocd -l app.kubernetes.io/managed-by=kokumi")
    parts.append(_argocd_secrets(hub))
    return "\n".join(parts)


def _state(hub: APIServer) -> tuple[str, bool]:
    """What changed-detection compares (no AGE column), and whether everything is Ready."""
    columns = (
        "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,"
        'READY:.status.conditions[?(@.type=="Ready")].status,'
        'REASON:.status.conditions[?(@.type=="Ready")].reason,'
        "SERVER:.status.server,VERSION:.status.kubernetesVersion"
    )
    text = _kubectl(
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
    secrets = _argocd_secrets(hub)
    ready = bool(rows) and all(len(r) > 2 and r[2] == "True" for r in rows)
    registered = len(secrets.splitlines()) > 1
    return text + secrets, ready and registered


async def _run(plane: ControlPlane, once: bool, patience: float, ui: bool = False) -> int:
    config = Config.from_kubeconfig(plane.hub.admin_kubeconfig)
    options = Options(namespace="kokumi")
    async with trio.open_nursery() as nursery:
        manager: Manager = await nursery.start(run_manager, config, options)
        print("# The manager runs; it checks every Cluster and registers the selected ones")
        if ui:
            from kokumi.ui.serve import serve_ui  # noqa: PLC0415 - the web stack for --ui only

            running = await nursery.start(serve_ui, config)
            print(
                f"# The UI, as the hub's admin: open {running.sign_in_url} (it signs in once)",
                flush=True,
            )
        await manager.wait_checked()
        last = ""
        deadline = trio.current_time() + patience
        while True:
            state, ready = await trio.to_thread.run_sync(_state, plane.hub)
            if state != last:
                last = state
                print(await trio.to_thread.run_sync(_view, plane.hub), flush=True)
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


def run_demo(*, once: bool = False, timeout: float = 180.0, ui: bool = False) -> int:
    try:
        kubectl_binary()
    except FileNotFoundError as exc:
        raise UsageError(f"kokumi demo needs {exc}", prefix="") from None
    print("# Starting a local hub and spoke (etcd, kube-apiserver, kube-controller-manager)")
    plane = ControlPlane.start()
    try:
        print(f"# hub {plane.hub.url}, spoke {plane.spoke.url}, Kubernetes {plane.hub.version}")
        print(f"# kubectl --kubeconfig {plane.hub.admin_kubeconfig} reaches the hub")
        _setup(plane)
        result = trio.run(until_signalled, _run, plane, once, timeout, ui)
        return result if isinstance(result, int) else 0  # None: stopped by Ctrl-C
    finally:
        plane.stop()
