"""The Helm chart deploy/helm/kokumi-clusters, with the real helm of each major it claims.

Its templates are generated from the pieces of install.yaml (deploy/helm/build-chart.py); with the
default values it renders install.yaml's objects (but the Namespace, which
``helm install --create-namespace`` makes), each with the release's labels added, each value
changes what it says, and values.schema.json refuses a typo. Installed into a namespace of its own,
upgraded, tested and uninstalled on a control plane of its own (the session's shared hub keeps
the CRDs as install.yaml makes them), once per helm major on the same API server (so the second
install is a reinstall over the kept CRDs), the chart's objects run the manager as its
ServiceAccount, which then registers the spoke with Argo CD."""

from __future__ import annotations

import base64
import json
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kokumi.core.registry import argocd
from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import APIServer, ControlPlane
from kokumi.testing.spoke import register
from tests.support.deploy import DEPLOY, Replica, ensure_namespace, replicas, run, wait_until
from tests.support.podtoken import assert_only_the_ui_holds_the_token

CHART = DEPLOY / "helm" / "kokumi-clusters"
Key = tuple[str, str, str]


def helm_run(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(helm), *args], capture_output=True, text=True, check=False, timeout=300
    )
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result


def render(
    helm: Path, *sets: str, namespace: str = "kokumi", tests: bool = False
) -> dict[Key, dict[str, Any]]:
    """``helm template``'s objects by (kind, namespace, name); the helm test's only if asked."""
    args = [arg for value in sets for arg in ("--set", value)]
    if not tests:
        args.append("--skip-tests")
    out = helm_run(helm, "template", "kokumi", str(CHART), "-n", namespace, *args).stdout
    return {key(doc): doc for doc in yaml.safe_load_all(out) if doc}


# The labels of a Helm release that the chart adds to every object (none of install.yaml's has).
RELEASE_LABELS = {
    "helm.sh/chart": "kokumi-clusters-0.1.0",
    "app.kubernetes.io/instance": "kokumi",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/version": "0.1.0",
}


def without_release_metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """The object as install.yaml has it: the release's labels and the CRDs' keep taken off,
    after checking they are there."""
    doc = json.loads(json.dumps(doc))
    labels = doc["metadata"]["labels"]
    assert {k: labels.pop(k, None) for k in RELEASE_LABELS} == RELEASE_LABELS, key(doc)
    if doc["kind"] == "CustomResourceDefinition":
        assert doc["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    return doc


def key(doc: dict[str, Any]) -> Key:
    meta = doc["metadata"]
    return (doc["kind"], meta.get("namespace", ""), meta["name"])


def manager_args(objects: dict[Key, dict[str, Any]]) -> list[str]:
    deployment = objects[("Deployment", "kokumi", "kokumi-clusters")]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_the_chart_lints(helm: Path) -> None:
    result = helm_run(helm, "lint", str(CHART), "-n", "kokumi")
    assert "0 chart(s) failed" in result.stdout


def test_default_values_render_install_yaml(helm: Path) -> None:
    installed = {
        key(doc): doc
        for doc in yaml.safe_load_all((DEPLOY / "install.yaml").read_text())
        if doc and doc["kind"] != "Namespace"
    }
    rendered = render(helm)
    # The chart's own beside install.yaml's: two replicas get a PodDisruptionBudget.
    assert rendered.pop(("PodDisruptionBudget", "kokumi", "kokumi-clusters"))
    assert {k: without_release_metadata(doc) for k, doc in rendered.items()} == installed
    with_namespace = render(
        helm, "namespace.create=true", "namespace.name=kokumi", namespace="default"
    )
    assert without_release_metadata(with_namespace[("Namespace", "", "kokumi")]) == next(
        doc
        for doc in yaml.safe_load_all((DEPLOY / "install.yaml").read_text())
        if doc and doc["kind"] == "Namespace"
    )


def test_the_values_change_what_they_say(helm: Path) -> None:
    objects = render(
        helm,
        "manager.replicas=3",
        "manager.shards=3",
        "manager.maxShards=2",
        "manager.secretsNamespaces={team-a,team-b}",
        "manager.probeDenyCIDRs={10.0.0.0/8}",
        "manager.probeAllowCIDRs={10.1.0.0/16}",
        "manager.resources.limits.memory=1Gi",
        "image.repository=registry.example/kokumi",
        "image.tag=0.2.0",
        "argocd.namespace=gitops",
    )
    deployment = objects[("Deployment", "kokumi", "kokumi-clusters")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "registry.example/kokumi:0.2.0"
    assert container["resources"] == {
        "limits": {"memory": "1Gi"},
        "requests": {"cpu": "50m", "memory": "96Mi"},
    }
    assert container["args"][3:] == [
        "--shards=3",
        "--max-shards=2",
        "--argocd-namespace=gitops",
        "--probe-deny-cidr=10.0.0.0/8",
        "--probe-allow-cidr=10.1.0.0/16",
    ]
    for namespace in ("team-a", "team-b", "gitops"):
        binding = objects[("RoleBinding", namespace, "kokumi-manager-secrets")]
        assert binding["roleRef"]["name"] == "kokumi-manager-secrets"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "kokumi", "namespace": "kokumi"}
        ]
    assert ("RoleBinding", "gitops", "kokumi-argocd-cluster-registrar") in objects
    assert not [k for k in objects if k[1] == "argocd"]
    policy = objects[("ValidatingAdmissionPolicyBinding", "", "kokumi-argocd-secret-integrity")]
    selector = policy["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {"matchLabels": {"kubernetes.io/metadata.name": "gitops"}}

    cluster_wide = render(helm, "manager.secretsScope=cluster", "networkPolicy.enabled=true")
    assert "--secrets-scope=cluster" in manager_args(cluster_wide)
    assert ("ClusterRoleBinding", "", "kokumi-manager-secrets-cluster-wide") in cluster_wide
    assert ("NetworkPolicy", "kokumi", "kokumi-clusters-egress") in cluster_wide

    bounded = render(helm, "manager.maxContextsPerSecret=20", "manager.maxClustersPerSource=300")
    assert manager_args(bounded)[-2:] == [
        "--max-contexts-per-secret=20",
        "--max-clusters-per-source=300",
    ]
    assert not [a for a in manager_args(render(helm)) if a.startswith("--max-c")]

    carried = render(
        helm,
        "argocd.carryLabels={fleet,example.com/*}",
        "argocd.carryAnnotations={example.com/owner}",
    )
    assert manager_args(carried)[-2:] == [
        "--carry-labels=fleet,example.com/*",
        "--carry-annotations=example.com/owner",
    ]
    assert not [a for a in manager_args(render(helm)) if a.startswith("--carry")]


def test_the_service_monitor_scrapes_the_managers_metrics(helm: Path) -> None:
    objects = render(helm, "serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")
    monitor = objects[("ServiceMonitor", "kokumi", "kokumi-clusters")]
    service = objects[("Service", "kokumi", "kokumi-clusters-metrics")]
    pod = objects[("Deployment", "kokumi", "kokumi-clusters")]["spec"]["template"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    # The Clusters' own namespace label stays namespace, not exported_namespace.
    assert endpoint["honorLabels"] is True
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] == endpoint["port"] == "health"
    assert ports["health"] == 8080
    assert not [k for k in render(helm) if k[0] in ("ServiceMonitor", "Service")]


def test_the_ui_and_its_sign_in_modes(helm: Path) -> None:
    ui_files = [p for p in (DEPLOY / "ui").glob("*.yaml")]
    expected = {key(d) for p in ui_files for d in yaml.safe_load_all(p.read_text()) if d}
    token = render(helm, "ui.enabled=true")
    assert expected <= token.keys()
    ui = token[("Deployment", "kokumi", "kokumi-clusters-ui")]["spec"]["template"]["spec"]
    assert ui["containers"][0]["args"] == ["--in-cluster", "--listen=0.0.0.0:8080"]
    assert ("ClusterRole", "", "kokumi-clusters-ui-impersonate") not in token
    proxy = render(
        helm,
        "ui.enabled=true",
        "ui.signIn=proxy",
        "ui.proxy.containers[0].name=oauth2-proxy",
        "ui.proxy.containers[0].image=proxy.example/oauth2-proxy:7",
    )
    ui = proxy[("Deployment", "kokumi", "kokumi-clusters-ui")]["spec"]["template"]["spec"]
    assert ui["containers"][0]["args"] == [
        "--in-cluster",
        "--listen=127.0.0.1:8080",
        "--trusted-proxy=127.0.0.1",
    ]
    assert [c["name"] for c in ui["containers"]] == ["ui", "oauth2-proxy"]
    # The UI listens on loopback, which no kubelet reaches: its probes go through the proxy.
    for probe in ("livenessProbe", "readinessProbe"):
        assert ui["containers"][0][probe]["httpGet"] == {"path": "/healthz", "port": 4180}
        on_token = token[("Deployment", "kokumi", "kokumi-clusters-ui")]["spec"]["template"]
        assert on_token["spec"]["containers"][0][probe]["httpGet"] == {
            "path": "/healthz",
            "port": "http",
        }
    service = proxy[("Service", "kokumi", "kokumi-clusters-ui")]
    assert service["spec"]["ports"][0]["targetPort"] == 4180
    impersonate = {
        key(d)
        for d in yaml.safe_load_all((DEPLOY / "ui" / "optional" / "impersonate.yaml").read_text())
        if d
    }
    assert impersonate <= proxy.keys()
    assert not [k for k in render(helm) if "ui" in k[2]]


def test_in_proxy_mode_only_the_ui_container_holds_the_token(helm: Path) -> None:
    """The proxy sidecars of ui.proxy.containers face the internet: none gets the UI's account."""
    for sets in (
        ("ui.enabled=true",),
        (
            "ui.enabled=true",
            "ui.signIn=proxy",
            "ui.proxy.containers[0].name=oauth2-proxy",
            "ui.proxy.containers[0].image=proxy.example/oauth2-proxy:7",
        ),
    ):
        objects = render(helm, *sets)
        pod = objects[("Deployment", "kokumi", "kokumi-clusters-ui")]["spec"]["template"]["spec"]
        assert_only_the_ui_holds_the_token(pod)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("manager.shardz=3", "shardz"),
        ("manager.secretsScope=everywhere", "secretsScope"),
        ("manager.secretsNamespaces={kokumi}", "secretsNamespaces"),
        ("manager.secretsNamespaces={kokumi-signing}", "secretsNamespaces"),
        ("manager.probeDenyCIDRs={10.0.0.0}", "probeDenyCIDRs"),
        ("ui.signIn=password", "signIn"),
        ("serviceMonitr.enabled=true", "serviceMonitr"),
        ("manager.replicas=0", "replicas"),
        ("manager.podLabel.team=a", "podLabel"),
        ("manager.extraArgs={log-level=debug}", "extraArgs"),
        ("crds.keeep=false", "keeep"),
        ("prometheusRule.enable=true", "enable"),
        ("grafanaDashboard.label.x=y", "label"),
        ("serviceMonitor.relabeling[0].action=drop", "relabeling"),
        ("imagePullSecret[0].name=x", "imagePullSecret"),
        ("namespace.name=Kokumi", "name"),
        ("argocd.carryLabels={fleet*x}", "carryLabels"),
    ],
)
def test_a_wrong_value_fails_and_names_it(helm: Path, value: str, says: str) -> None:
    result = helm_run(
        helm, "template", "kokumi", str(CHART), "-n", "kokumi", "--set", value, check=False
    )
    assert result.returncode != 0
    assert says in result.stderr


@pytest.mark.parametrize(
    ("namespace", "sets", "says"),
    [
        ("kokumi", ("namespace.create=true",), "namespace.create makes the Namespace kokumi"),
        (
            "ops",
            ("namespace.create=true", "namespace.name=ops"),
            "namespace.create makes the Namespace ops",
        ),
        ("ops", ("manager.secretsNamespaces={ops}",), "secretsNamespaces must not hold ops"),
    ],
)
def test_a_namespace_that_cannot_work_is_refused_with_how_to_fix_it(
    helm: Path, namespace: str, sets: tuple[str, ...], says: str
) -> None:
    args = [arg for value in sets for arg in ("--set", value)]
    result = helm_run(helm, "template", "kokumi", str(CHART), "-n", namespace, *args, check=False)
    assert result.returncode != 0
    assert says in result.stderr


def test_the_templates_are_generated_from_the_pieces(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "helm" / "build-chart.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    build = runpy.run_path(str(DEPLOY / "helm" / "build-chart.py"))
    deployment = (DEPLOY / "manager" / "deployment.yaml").read_text()
    reshaped = deployment.replace("  replicas: 2\n", "  replicas: 3\n")
    with pytest.raises(SystemExit, match="exactly once"):
        build["_template"](reshaped, ("Deployment", "kokumi", "kokumi-clusters"), "x")
    with pytest.raises(SystemExit, match="template"):
        build["_template"]("a: '{{ x }}'\n", ("ConfigMap", "kokumi", "x"), "x")


@pytest.fixture(scope="module")
def chart_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own (helm uninstall deletes the CRDs the shared hub keeps), one for
    both helm majors: the second installs where the first uninstalled, as a user who reinstalls
    does, and its manager's registrations must pass the integrity policy made again."""
    plane = ControlPlane.start(tmp_path_factory.mktemp("chart") / "plane")
    try:
        yield plane
    finally:
        plane.stop()


# A namespace of the release's choosing, not install.yaml's kokumi.
RELEASE_NAMESPACE = "kokumi-system"
TEST_POD = "kokumi-kokumi-test"


def helm_test_with_a_stand_in_kubelet(
    helm: Path, base: list[str], hub: APIServer, manager: Replica, root: Path
) -> str:
    """``helm test``, its pod run as a kubelet would: the control plane has no node, so the
    pod's own command runs here, with its ServiceAccount's token and the pod's environment but
    for the Service's address, which is the manager replica running beside the control plane.
    Its exit code becomes the pod's phase, which helm test waits for. Returns helm's output."""
    admin = hub.admin_kubeconfig
    namespace = RELEASE_NAMESPACE
    with subprocess.Popen(
        [str(helm), "test", "kokumi", *base, "--timeout=120s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as helm_test:
        pod = wait_until(
            lambda: (
                json.loads(found.stdout)
                if (
                    found := run(
                        admin, "-n", namespace, "get", "pod", TEST_POD, "-o", "json", check=False
                    )
                ).returncode
                == 0
                else None
            ),
            "helm test creates its pod",
        )
        (container,) = pod["spec"]["containers"]
        account = root / "test-account"
        account.mkdir(exist_ok=True)
        (account / "ca.crt").write_bytes(hub.ca_pem)
        (account / "token").write_text(
            run(
                admin, "-n", namespace, "create", "token", pod["spec"]["serviceAccountName"]
            ).stdout.strip()
        )
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["KOKUMI_READYZ_URL"] == f"http://{TEST_POD}.{namespace}.svc:8080/readyz"
        env["KOKUMI_READYZ_URL"] = f"http://127.0.0.1:{manager.port}/readyz"
        assert container["command"][0] == "python3"
        ran = subprocess.run(
            [sys.executable, *container["command"][1:], *container["args"]],
            env={
                **env,
                "PATH": os.environ["PATH"],
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(hub.port),
                "SERVICE_ACCOUNT_DIR": str(account),
            },
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        phase = "Succeeded" if ran.returncode == 0 else "Failed"
        run(
            admin,
            "-n",
            namespace,
            "patch",
            "pod",
            TEST_POD,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": phase}}),
        )
        out, _ = helm_test.communicate(timeout=150)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "the manager answers" in ran.stdout and "Clusters" in ran.stdout
    assert helm_test.returncode == 0, out
    return out


def test_install_upgrade_test_uninstall_in_a_namespace_of_its_own(
    helm: Path, chart_plane: ControlPlane, tmp_path: Path
) -> None:
    """Installed into kokumi-system with pod knobs set, upgraded with others, ``helm test``
    passes, the chart's manager registers a spoke with Argo CD through the admission policies
    that now name kokumi-system, and ``helm uninstall`` leaves the CRDs and the Clusters. The
    second helm major installs again where the first uninstalled, over the kept CRDs."""
    hub, spoke = chart_plane.hub, chart_plane.spoke
    admin = hub.admin_kubeconfig
    ensure_namespace(hub, "argocd")
    ensure_namespace(hub, "team-a")
    namespace = RELEASE_NAMESPACE
    base = ["--kubeconfig", str(admin), "-n", namespace]
    installed = helm_run(
        helm,
        "install",
        "kokumi",
        str(CHART),
        *base,
        "--create-namespace",
        "--set",
        "manager.podLabels.team=platform",
        "--set",
        "manager.extraArgs={--probe-allow-cidr=10.99.0.0/16}",
        "--set",
        "manager.nodeSelector.pool=system",
    ).stdout
    assert f"kubectl -n {namespace} rollout status deployment/kokumi-clusters" in installed
    assert f"helm test kokumi -n {namespace}" in installed
    for crd in ("clusters", "environments", "clustersources"):
        run(
            admin,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            f"crd/{crd}.delivery.kokumi.dev",
        )
    # Not bound in team-a yet: the upgrade binds it, as a user lists a new workspace.
    assert (
        run(
            admin, "-n", "team-a", "get", "rolebinding", "kokumi-manager-secrets", check=False
        ).returncode
        != 0
    )
    helm_run(
        helm,
        "upgrade",
        "kokumi",
        str(CHART),
        *base,
        "--reuse-values",
        "--set",
        "manager.secretsNamespaces={team-a}",
        "--set",
        "manager.podLabels.team=platform-2",
    )
    binding = json.loads(
        run(
            admin, "-n", "team-a", "get", "rolebinding", "kokumi-manager-secrets", "-o", "json"
        ).stdout
    )
    assert binding["subjects"][0]["namespace"] == namespace
    status = json.loads(helm_run(helm, "status", "kokumi", *base, "-o", "json").stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"

    # The manager as the chart's Deployment runs it: its ServiceAccount's token, its flags.
    deployment = json.loads(
        run(admin, "-n", namespace, "get", "deployment", "kokumi-clusters", "-o", "json").stdout
    )
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "platform-2"
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}
    args = pod["spec"]["containers"][0]["args"]
    assert args[-1] == "--probe-allow-cidr=10.99.0.0/16"
    token = run(
        admin, "-n", namespace, "create", "token", "kokumi", "--duration=10m"
    ).stdout.strip()
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    (mount / "token").write_text(token)
    (mount / "ca.crt").write_bytes(hub.ca_pem)
    (mount / "namespace").write_text(namespace)
    flags = tuple(
        a for a in args if not a.startswith(("--health-port", "--log-format", "--leader-elect"))
    )
    registration = register(spoke, run_kubectl)
    secret = argocd.secret_name(registration.server)
    with replicas(hub, tmp_path, "kokumi-clusters", (*flags, "--no-in-cluster")) as start:
        manager = start("chart")
        kubeconfig = base64.b64encode(registration.kubeconfig.encode()).decode()
        manifests = [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "spoke-kubeconfig", "namespace": "team-a"},
                "data": {"value": kubeconfig},
            },
            {
                "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "spoke", "namespace": "team-a", "labels": {"env": "prod"}},
                "spec": {
                    "connection": "Kubeconfig",
                    "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig"}},
                },
            },
            {
                "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "kind": "Environment",
                "metadata": {"name": "prod", "namespace": "team-a"},
                "spec": {"delivery": "ArgoCD", "clusterSelector": {"matchLabels": {"env": "prod"}}},
            },
            # Registered nowhere (no Environment selects it): it must outlive the release.
            {
                "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "kept", "namespace": "team-a"},
                "spec": {
                    "connection": "Kubeconfig",
                    "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig"}},
                },
            },
        ]
        run(admin, "apply", "-f", "-", input="\n---\n".join(json.dumps(m) for m in manifests))

        def ready() -> dict[str, Any] | None:
            got: dict[str, Any] = json.loads(
                run(admin, "-n", "team-a", "get", "kcl", "spoke", "-o", "json").stdout
            )
            for condition in got.get("status", {}).get("conditions", []):
                if condition["type"] == "Ready" and condition["status"] == "True":
                    return got
            return None

        cluster = wait_until(
            ready, "the spoke's Cluster is Ready through the chart's manager", timeout=90
        )
        assert cluster["status"]["server"] == registration.server
        registered = wait_until(
            lambda: (
                run(
                    admin, "-n", "argocd", "get", "secret", secret, "-o", "json", check=False
                ).stdout
                or None
            ),
            "the spoke is registered with Argo CD",
        )
        assert (
            json.loads(registered)["metadata"]["labels"]["argocd.argoproj.io/secret-type"]
            == "cluster"
        )
        helm_test_with_a_stand_in_kubelet(helm, base, hub, manager, tmp_path)
        # Deleted while the manager runs, so it lets go of the registration and its finalizer.
        run(admin, "-n", "team-a", "delete", "environment", "prod", "--wait=true", "--timeout=60s")
        run(admin, "-n", "team-a", "delete", "kcl", "spoke", "--wait=true", "--timeout=60s")
        wait_until(
            lambda: (
                True
                if run(admin, "-n", "argocd", "get", "secret", secret, check=False).returncode
                else None
            ),
            "the registration is deleted",
        )

    helm_run(helm, "uninstall", "kokumi", *base, "--wait", "--timeout=120s")
    gone = run(
        admin,
        "get",
        "deployment,clusterrole,pod,serviceaccount",
        "-A",
        "-l",
        "app.kubernetes.io/instance=kokumi",
        "-o",
        "name",
    )
    assert gone.stdout.strip() == ""
    # Kept: the CRDs, and so the Cluster; and what the manager made at run time, its Lease.
    for crd in ("clusters", "environments", "clustersources"):
        run(admin, "get", "crd", f"{crd}.delivery.kokumi.dev")
    run(admin, "-n", "team-a", "get", "kcl", "kept")
    run(admin, "-n", namespace, "get", "lease", "kokumi-clusters")
