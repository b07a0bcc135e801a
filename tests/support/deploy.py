"""Session fixtures that install pieces of deploy/ on the hub, and helpers for their tests.

The hub is shared by the whole session, and the objects installed here are cluster-scoped (CRDs,
ClusterRoles, admission policies) or live in shared namespaces (kokumi, argocd). So every step is
idempotent: server-side apply with ``--force-conflicts``, namespaces created only when missing. A
test may apply the same files again, or all of install.yaml, and nothing breaks.

Fixtures:

- ``crds``: the Cluster and Environment CRDs, Established and served (kubectl get works).
- ``admission_policies``: the admission policies, bound and enforced, with their parameter, the
  namespace argocd and the manager's ServiceAccount and registrar binding they are about.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kokumi.testing import canary, run_kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane
from tests.support.paths import REPO

__all__ = [
    "CRD_NAMES",
    "DEPLOY",
    "KUBECTL",
    "ensure_namespace",
    "kubectl_as",
    "run",
    "service_account_kubeconfig",
    "wait_until",
]

DEPLOY = REPO / "deploy"
KUBECTL = str(Path(sys.executable).with_name("kubectl"))
FIELD_MANAGER = "kokumi-tests"
CRD_NAMES = (
    "clusters.delivery.kokumi.dev",
    "environments.delivery.kokumi.dev",
    "clustersources.delivery.kokumi.dev",
)

# The probe objects that show a policy is enforced live in this namespace of the hub.
PROBE_NAMESPACE = "kokumi-policy-probe"

T = TypeVar("T")


def run(
    kubeconfig: Path, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """kubectl with the given kubeconfig; with ``check`` a failure raises with kubectl's stderr."""
    return run_kubectl(kubeconfig, *args, input=input, check=check)


def kubectl_as(
    kubeconfig: Path,
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """kubectl as one identity: ``kubectl_as(path)("get", "kcl", check=False)``."""

    def call(
        *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run(kubeconfig, *args, input=input, check=check)

    return call


def wait_until(
    attempt: Callable[[], T | None], what: str, timeout: float = 60.0, interval: float = 0.2
) -> T:
    """Call ``attempt`` until it returns something other than None; fail with ``what`` if never.

    RBAC and admission policies reach the API server's authorizer and admission chain through
    informers, a moment after the write that created them: tests poll for the effect instead of
    sleeping a guessed time.
    """
    deadline = time.monotonic() + timeout
    while True:
        outcome = attempt()
        if outcome is not None:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout} s waiting until {what}")
        time.sleep(interval)


def ensure_namespace(hub: APIServer, name: str) -> None:
    """Create ``name`` unless it exists; wait out a deletion another test may have started."""

    def ready() -> bool | None:
        phase = run(
            hub.admin_kubeconfig,
            "get",
            "namespace",
            name,
            "-o",
            "jsonpath={.status.phase}",
            check=False,
        )
        if phase.returncode == 0 and phase.stdout == "Active":
            return True
        if phase.returncode != 0 and "NotFound" in phase.stderr:
            run(hub.admin_kubeconfig, "create", "namespace", name, check=False)
        return None

    wait_until(ready, f"namespace {name} is Active", timeout=120)


def apply(hub: APIServer, *files: Path) -> None:
    """Server-side apply, taking over fields other managers hold: idempotent across the session."""
    args = [arg for path in files for arg in ("-f", str(path))]
    run(
        hub.admin_kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        *args,
    )


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> tuple[str, ...]:
    """The Cluster and Environment CRDs on the hub, Established and served; their names."""
    hub = control_plane.hub
    apply(hub, *sorted((DEPLOY / "crds").glob("*.yaml")))
    run(
        hub.admin_kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{name}" for name in CRD_NAMES),
    )

    # Established comes a moment before discovery and the handlers serve the new resources.
    def served() -> bool | None:
        listed = run(
            hub.admin_kubeconfig,
            "get",
            "kcl,kenv,kcs",
            "--all-namespaces",
            "-o",
            "name",
            check=False,
        )
        return True if listed.returncode == 0 else None

    wait_until(served, "kubectl get kcl,kenv,kcs works")
    return CRD_NAMES


@pytest.fixture(scope="session")
def admission_policies(control_plane: ControlPlane, crds: tuple[str, ...]) -> tuple[str, ...]:
    """The admission policies bound and enforced on the hub; their names.

    Also the namespaces kokumi and argocd, the manager's ServiceAccount kokumi:kokumi and the
    registrar role bound to it in argocd: what the policies are about.
    """
    return install_admission_policies(control_plane.hub)


POLICIES = DEPLOY / "policies"


def install_admission_policies(hub: APIServer) -> tuple[str, ...]:
    """Apply deploy/policies/ (and what they are about) and wait until each is enforced."""
    ensure_namespace(hub, "kokumi")
    ensure_namespace(hub, "argocd")
    ensure_namespace(hub, PROBE_NAMESPACE)
    rbac = DEPLOY / "rbac"
    apply(
        hub,
        rbac / "service-account.yaml",
        rbac / "argocd-cluster-registrar.yaml",
        rbac / "argocd-cluster-registrar-binding.yaml",
        *sorted(POLICIES.glob("*.yaml")),
    )
    _wait_secret_access_enforced(hub)
    _wait_source_access_enforced(hub)
    wait_secret_integrity_enforced(hub)
    _wait_role_bindings_enforced(hub)
    wait_object_limits_enforced(hub)
    return (
        "kokumi-cluster-secret-access",
        "kokumi-cluster-source-access",
        "kokumi-argocd-secret-integrity",
        "kokumi-secret-role-bindings",
        "kokumi-object-limits",
    )


def wait_object_limits_enforced(hub: APIServer) -> None:
    """Until a dry-run Cluster with 65 labels is refused by kokumi-object-limits."""
    labels = {f"l{i}": "v" for i in range(65)}
    cluster = json.dumps({"apiVersion": "delivery.kokumi.dev/v1alpha1", "kind": "Cluster",
                          "metadata": {"name": "probe", "labels": labels},
                          "spec": {"connection": "InCluster"}})  # fmt: skip

    def refused() -> bool | None:
        created = run(hub.admin_kubeconfig, "-n", PROBE_NAMESPACE, "create", "--dry-run=server",
                      "-f", "-", input=cluster, check=False)  # fmt: skip
        return True if "kokumi-object-limits" in created.stderr else None

    wait_until(refused, "kokumi-object-limits refuses 65 labels", timeout=90)


def _wait_role_bindings_enforced(hub: APIServer) -> None:
    """Until a dry-run ClusterRoleBinding of kokumi-cluster-credentials is refused."""

    def refused() -> bool | None:
        created = run(
            hub.admin_kubeconfig,
            "create",
            "clusterrolebinding",
            "policy-probe",
            "--clusterrole=kokumi-cluster-credentials",
            "--user=policy-probe",
            "--dry-run=server",
            check=False,
        )
        return True if "kokumi-secret-role-bindings" in created.stderr else None

    wait_until(refused, "kokumi-secret-role-bindings refuses cluster-wide bindings", timeout=90)


def _wait_secret_access_enforced(hub: APIServer) -> None:
    """Until a dry-run Cluster naming a Secret its author may not read is refused by the policy."""
    user = f"policy-probe-{uuid.uuid4().hex[:6]}"
    admin = hub.admin_kubeconfig
    run(
        admin,
        "-n",
        PROBE_NAMESPACE,
        "create",
        "role",
        user,
        "--verb=create",
        "--resource=clusters.delivery.kokumi.dev",
    )
    run(
        admin,
        "-n",
        PROBE_NAMESPACE,
        "create",
        "rolebinding",
        user,
        f"--role={user}",
        f"--user={user}",
    )
    probe = hub.kubeconfig_for(user)
    cluster = (
        "apiVersion: delivery.kokumi.dev/v1alpha1\nkind: Cluster\nmetadata: {name: probe}\n"
        "spec: {connection: Kubeconfig, kubeconfig: {secretRef: {name: probe}}}\n"
    )

    def refused() -> bool | None:
        created = run(
            probe,
            "-n",
            PROBE_NAMESPACE,
            "create",
            "--dry-run=server",
            "-f",
            "-",
            input=cluster,
            check=False,
        )
        return True if "kokumi-cluster-secret-access" in created.stderr else None

    wait_until(refused, "kokumi-cluster-secret-access refuses Clusters", timeout=90)


def _wait_source_access_enforced(hub: APIServer) -> None:
    """Until a dry-run ClusterSource by a user who may not read Secrets is refused."""
    user = f"policy-probe-{uuid.uuid4().hex[:6]}"
    admin = hub.admin_kubeconfig
    run(admin, "-n", PROBE_NAMESPACE, "create", "role", user, "--verb=create",
        "--resource=clustersources.delivery.kokumi.dev")  # fmt: skip
    run(admin, "-n", PROBE_NAMESPACE, "create", "rolebinding", user, f"--role={user}",
        f"--user={user}")  # fmt: skip
    probe = hub.kubeconfig_for(user)
    source = (
        "apiVersion: delivery.kokumi.dev/v1alpha1\nkind: ClusterSource\n"
        "metadata: {name: probe}\nspec: {from: ClusterAPI}\n"
    )

    def refused() -> bool | None:
        created = run(probe, "-n", PROBE_NAMESPACE, "create", "--dry-run=server", "-f", "-",
                      input=source, check=False)  # fmt: skip
        return True if "kokumi-cluster-source-access" in created.stderr else None

    wait_until(refused, "kokumi-cluster-source-access refuses ClusterSources", timeout=90)


def wait_secret_integrity_enforced(hub: APIServer) -> None:
    """Until the manager's dry-run create of an unlabeled Secret in argocd is refused."""
    token = run(
        hub.admin_kubeconfig, "-n", "kokumi", "create", "token", "kokumi", "--duration=10m"
    ).stdout.strip()
    manager = service_account_kubeconfig(hub, token, hub.workdir / "policy-probe-sa.kubeconfig")

    def refused() -> bool | None:
        created = run(
            manager,
            "-n",
            "argocd",
            "create",
            "secret",
            "generic",
            "policy-probe",
            "--dry-run=server",
            check=False,
        )
        return True if "kokumi-argocd-secret-integrity" in created.stderr else None

    wait_until(refused, "kokumi-argocd-secret-integrity refuses unlabeled Secrets", timeout=90)


def service_account_kubeconfig(hub: APIServer, token: str, path: Path) -> Path:
    """A kubeconfig that authenticates to the hub with a bearer token."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: hub, cluster: {{server: '{hub.url}', "
        f"certificate-authority: '{hub.ca_file}'}}}}]\n"
        f"users: [{{name: sa, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: hub, context: {cluster: hub, user: sa}}]\n"
        "current-context: hub\n"
    )
    path.chmod(0o600)
    return path


CAPI_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusters.cluster.x-k8s.io}
spec:
  group: cluster.x-k8s.io
  scope: Namespaced
  names: {kind: Cluster, listKind: ClusterList, plural: clusters, singular: cluster}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


@pytest.fixture(scope="session")
def capi_crd(control_plane: ControlPlane) -> None:
    """Cluster API's Cluster kind, as far as Kokumi reads it: its labels."""
    install_capi_crd(control_plane.hub)


def install_capi_crd(hub: APIServer) -> None:
    """Apply Cluster API's CRD and wait until its clusters are served (a no-op if they are)."""
    run(hub.admin_kubeconfig, "apply", "-f", "-", input=CAPI_CRD)
    run(hub.admin_kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
        "crd/clusters.cluster.x-k8s.io")  # fmt: skip

    def served() -> bool | None:
        listed = run(hub.admin_kubeconfig, "get", "clusters.cluster.x-k8s.io", "-A", check=False)
        return True if listed.returncode == 0 else None

    wait_until(served, "Cluster API's clusters are served")


def remove_capi_crd(hub: APIServer) -> None:
    """Delete Cluster API's CRD (and with it every Cluster API cluster) and wait until its
    clusters are no longer served: a hub where Cluster API is not installed yet."""
    run(hub.admin_kubeconfig, "delete", "crd", "clusters.cluster.x-k8s.io", "--wait=true",
        "--ignore-not-found")  # fmt: skip

    def gone() -> bool | None:
        path = "/apis/cluster.x-k8s.io/v1beta1/clusters"
        listed = run(hub.admin_kubeconfig, "get", "--raw", path, check=False)
        return True if listed.returncode != 0 else None

    wait_until(gone, "Cluster API's clusters are no longer served")


# --- what the manager's and the leader's tests share ----------------------------------------


def unreachable_kubeconfig(server: str, token: str, ca: bytes) -> str:
    """A self-contained kubeconfig, as the spec asks, for a server that resolves nowhere."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca).decode(),
                    },
                }
            ],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


def bind_manager_secrets(hub: APIServer, namespace: str) -> None:
    """The RoleBinding deploy/README.md tells the platform team to create per workspace."""
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "create",
        "rolebinding",
        "kokumi-manager-secrets",
        "--clusterrole=kokumi-manager-secrets",
        "--serviceaccount=kokumi:kokumi",
    )


LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _remove_workspace(hub: APIServer, workspace: str) -> None:
    """Leave nothing behind for the next test: the managers were killed, so their Clusters'
    finalizers and Argo CD Secrets stay unless removed here, and a namespace stuck Terminating
    would be seen by every later manager of this hub."""
    admin = hub.admin_kubeconfig
    kind = "clusters.delivery.kokumi.dev"
    names = run(admin, "-n", workspace, "get", kind, "-o", "name", check=False)
    for name in names.stdout.split():
        patch = '{"metadata":{"finalizers":null}}'
        run(admin, "-n", workspace, "patch", name, "--type=merge", "-p", patch, check=False)
    held = f"delivery.kokumi.dev/cluster-namespace={workspace}"
    run(admin, "-n", "argocd", "delete", "secrets", "-l", held, check=False)
    # Waited for: a namespace still Terminating is seen by the next test's managers.
    run(admin, "delete", "namespace", workspace, "--wait=true", "--timeout=90s", check=False)


@attrs.define
class Replica:
    """One manager process, its health port and its log file."""

    name: str
    process: subprocess.Popen[bytes] | subprocess.Popen[str]
    port: int
    log: Path

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        text = self.get("/metrics").text
        return {
            family.name: [(dict(s.labels), s.value) for s in family.samples]
            for family in text_string_to_metric_families(text)
        }

    def leading(self) -> bool:
        try:
            return self.metrics()["kokumi_leader"] == [({}, 1.0)]
        except httpx.HTTPError:
            return False

    def writes(self) -> float:
        """Write requests this process sent to the API server, as it counts them itself."""
        return sum(
            value
            for labels, value in self.metrics()["kokumi_api_requests"]
            if labels["verb"] in WRITES
        )

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


@contextmanager
def replicas(hub: APIServer, root: Path, lease: str, extra: tuple[str, ...] = ()) -> Iterator[Any]:
    started: list[Replica] = []

    def start(name: str) -> Replica:
        port = free_port()
        log = root / f"{name}.log"
        env = {
            **os.environ,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(hub.port),
        }
        env.pop("KUBECONFIG", None)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kokumi",
                    "manager",
                    "--service-account-dir",
                    str(root / "serviceaccount"),
                    "--leader-elect-lease-name",
                    lease,
                    f"--leader-elect-lease-duration={LEASE_DURATION}",
                    f"--leader-elect-renew-deadline={RENEW_DEADLINE}",
                    f"--leader-elect-retry-period={RETRY_PERIOD}",
                    f"--health-port={port}",
                    "--log-format=json",
                    f"--field-manager=kokumi-{name}",
                    *extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
            )
        replica = Replica(name, process, port, log)
        started.append(replica)
        wait(lambda: replica.get("/healthz").status_code == 200, f"{name} answers /healthz")
        return replica

    try:
        yield start
    finally:
        for replica in started:
            if replica.process.poll() is None:
                replica.process.kill()
            replica.process.wait(timeout=30)
    # The replicas' logs, what a log collector would keep: no made-up credential in them.
    leaked = [r.name for r in started if canary.found(r.log.read_text(errors="replace"))]
    assert leaked == [], f"the canary leaked into the logs of {leaked}"


def wait(check: Any, what: str, timeout: float = 60.0) -> float:
    """Poll ``check`` until it is true; how long that took."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except (httpx.HTTPError, KeyError):
            pass
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.1)


def install(hub: APIServer, tmp_path: Path) -> tuple[str, str, str]:
    """install.yaml applied, the ServiceAccount's token mounted under ``tmp_path`` as in a pod;
    a Lease name, a workspace namespace of this test's own, and a suffix for other names."""
    ensure_namespace(hub, "argocd")
    run(hub.admin_kubeconfig, "apply", "--server-side", "-f", str(DEPLOY / "install.yaml"))
    token = run(
        hub.admin_kubeconfig, "-n", "kokumi", "create", "token", "kokumi", "--duration=30m"
    ).stdout.strip()
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    (mount / "token").write_text(token)
    (mount / "ca.crt").write_bytes(hub.ca_pem)
    (mount / "namespace").write_text("kokumi")
    suffix = uuid.uuid4().hex[:8]
    lease = f"kokumi-clusters-{suffix}"
    workspace = f"leader-{suffix}"
    run(hub.admin_kubeconfig, "create", "namespace", workspace)
    return lease, workspace, suffix
