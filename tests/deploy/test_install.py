"""install.yaml: generated from the pieces, in apply order, applied cleanly by the API server."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import yaml

from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, ensure_namespace, run

INSTALL = DEPLOY / "install.yaml"


def build_install() -> str:
    build: Callable[[], str] = runpy.run_path(str(DEPLOY / "build-install.py"))["build"]
    return build()


def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(INSTALL.read_text()) if doc is not None]


def test_committed_install_yaml_is_the_generated_one() -> None:
    assert INSTALL.read_text() == build_install(), "run python deploy/build-install.py"
    check = subprocess.run(
        [sys.executable, str(DEPLOY / "build-install.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def test_install_yaml_is_in_apply_order_and_ends_with_the_argocd_bindings() -> None:
    kinds = [doc["kind"] for doc in documents()]
    order = [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Deployment",
        "RoleBinding",
    ]
    assert [kind for i, kind in enumerate(kinds) if i == 0 or kinds[i - 1] != kind] == order
    last = documents()[-2:]
    labels = {"app.kubernetes.io/name": "kokumi", "app.kubernetes.io/part-of": "kokumi"}
    assert [doc["metadata"] for doc in last] == [
        {"name": "kokumi-manager-secrets", "namespace": "argocd", "labels": labels},
        {"name": "kokumi-argocd-cluster-registrar", "namespace": "argocd", "labels": labels},
    ]
    for doc in last:
        assert doc["roleRef"]["name"] == doc["metadata"]["name"]
        assert doc["subjects"] == [
            {"kind": "ServiceAccount", "name": "kokumi", "namespace": "kokumi"}
        ]
    # Nothing else needs Argo CD: no other document is in argocd.
    assert [doc for doc in documents() if doc["metadata"].get("namespace") == "argocd"] == last


def test_install_yaml_names() -> None:
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in documents()}
    assert names == {
        ("Namespace", "kokumi"),
        ("CustomResourceDefinition", "clusters.delivery.kokumi.dev"),
        ("CustomResourceDefinition", "environments.delivery.kokumi.dev"),
        ("CustomResourceDefinition", "clustersources.delivery.kokumi.dev"),
        ("ServiceAccount", "kokumi"),
        ("ClusterRole", "kokumi-manager"),
        ("ClusterRoleBinding", "kokumi-manager"),
        ("Role", "kokumi-manager"),
        ("RoleBinding", "kokumi-manager"),
        ("ClusterRole", "kokumi-manager-secrets"),
        ("RoleBinding", "kokumi-manager-secrets"),
        ("ClusterRole", "kokumi-argocd-cluster-registrar"),
        ("ClusterRole", "kokumi-cluster-credentials"),
        ("ClusterRole", "kokumi-delivery-view"),
        ("ClusterRole", "kokumi-delivery-edit"),
        ("ValidatingAdmissionPolicy", "kokumi-cluster-secret-access"),
        ("ValidatingAdmissionPolicyBinding", "kokumi-cluster-secret-access"),
        ("ValidatingAdmissionPolicy", "kokumi-cluster-source-access"),
        ("ValidatingAdmissionPolicyBinding", "kokumi-cluster-source-access"),
        ("ValidatingAdmissionPolicy", "kokumi-argocd-secret-integrity"),
        ("ValidatingAdmissionPolicyBinding", "kokumi-argocd-secret-integrity"),
        ("ValidatingAdmissionPolicy", "kokumi-secret-role-bindings"),
        ("ValidatingAdmissionPolicyBinding", "kokumi-secret-role-bindings"),
        ("ValidatingAdmissionPolicy", "kokumi-object-limits"),
        ("ValidatingAdmissionPolicyBinding", "kokumi-object-limits"),
        ("Role", "kokumi-manager-leader-election"),
        ("RoleBinding", "kokumi-manager-leader-election"),
        ("Deployment", "kokumi-clusters"),
        ("RoleBinding", "kokumi-argocd-cluster-registrar"),
    }


def test_the_manager_holds_no_secret_verb_cluster_wide() -> None:
    """Secrets only through RoleBindings; only the optional file binds them cluster-wide."""
    cluster_wide = {
        doc["roleRef"]["name"] for doc in documents() if doc["kind"] == "ClusterRoleBinding"
    }
    for doc in documents():
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] in cluster_wide:
            for rule in doc["rules"]:
                assert "secrets" not in rule["resources"], doc["metadata"]["name"]
    (optional,) = yaml.safe_load_all(
        (DEPLOY / "optional" / "manager-secrets-cluster-wide.yaml").read_text()
    )
    assert optional["kind"] == "ClusterRoleBinding"
    assert optional["roleRef"]["name"] == "kokumi-manager-secrets"


def test_manager_deployment_runs_kokumi_manager_locked_down() -> None:
    (deployment,) = [doc for doc in documents() if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["metadata"]["namespace"] == "kokumi"
    assert pod["serviceAccountName"] == "kokumi"
    assert pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == ["kokumi", "manager"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_two_replicas_elect_a_leader_and_answer_their_probes() -> None:
    (deployment,) = [doc for doc in documents() if doc["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--leader-elect" in container["args"]
    assert container["image"].rsplit(":", 1)[1][0].isdigit()  # a pinned version, not latest
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("health", 8080)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    (volume,) = pod["volumes"]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/tmp"}]
    # The Leases, and nothing else, in Kokumi's namespace only (listed: the other --shards).
    (role,) = [
        doc
        for doc in documents()
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "kokumi-manager-leader-election"
    ]
    assert role["metadata"]["namespace"] == "kokumi"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update"],
        }
    ]


def test_cluster_credentials_role_warns_where_never_to_bind_it() -> None:
    (role,) = [
        doc
        for doc in documents()
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "kokumi-cluster-credentials"
    ]
    description = role["metadata"]["annotations"]["kubernetes.io/description"]
    for where in ("ClusterRoleBinding", "kokumi-signing", "kokumi"):
        assert where in description
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]


def test_every_schema_field_has_a_description() -> None:
    """So that kubectl explain teaches every field, not only the ones we remembered."""
    missing: list[str] = []

    def walk(schema: dict[str, object], path: str) -> None:
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                if "." not in path and name == "metadata":
                    continue  # ObjectMeta: Kubernetes documents it
                if not str(sub.get("description", "")).strip():
                    missing.append(f"{path}.{name}")
                walk(sub, f"{path}.{name}")
        items = schema.get("items")
        if isinstance(items, dict):
            walk(items, f"{path}[]")
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            walk(additional, f"{path}{{}}")

    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            walk(version["schema"]["openAPIV3Schema"], crd["spec"]["names"]["kind"])
    assert missing == []


def test_install_yaml_applies_cleanly_server_side(hub: APIServer) -> None:
    """What a user runs once Argo CD is installed: every document accepted, run after run.

    Another field manager applied it first (an earlier installation, or the session's fixtures):
    the API server defaults fields inside atomic structs, and a piece that left such a default
    out would conflict here.
    """
    ensure_namespace(hub, "argocd")
    run(
        hub.admin_kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=kokumi-earlier-install",
        "-f",
        str(INSTALL),
    )
    for _ in range(2):  # the second run changes nothing and must not conflict
        applied = run(hub.admin_kubeconfig, "apply", "--server-side", "-f", str(INSTALL))
        assert applied.stderr == ""
        assert len(applied.stdout.splitlines()) == len(documents())
    listed = run(hub.admin_kubeconfig, "get", "-f", str(INSTALL), "-o", "json").stdout
    items = json.loads(listed)["items"]
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
        (d["kind"], d["metadata"]["name"]) for d in documents()
    ]


def test_built_in_roles_may_work_with_clusters_and_environments(hub: APIServer) -> None:
    """The aggregated roles carry the labels the built-in view, edit and admin roles select."""
    run(
        hub.admin_kubeconfig,
        "apply",
        "--server-side",
        "-f",
        str(DEPLOY / "rbac" / "aggregate.yaml"),
    )
    selected: dict[str, set[str]] = {}
    for builtin in ("view", "edit", "admin"):
        role = json.loads(
            run(hub.admin_kubeconfig, "get", "clusterrole", builtin, "-o", "json").stdout
        )
        selectors = role["aggregationRule"]["clusterRoleSelectors"]
        for selector in selectors:
            labels = ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())
            names = run(
                hub.admin_kubeconfig, "get", "clusterrole", "-l", labels, "-o", "name"
            ).stdout.split()
            selected.setdefault(builtin, set()).update(names)
    view = "clusterrole.rbac.authorization.k8s.io/kokumi-delivery-view"
    edit = "clusterrole.rbac.authorization.k8s.io/kokumi-delivery-edit"
    assert view in selected["view"] and edit not in selected["view"]
    assert {view, edit} <= selected["edit"]
    assert {view, edit} <= selected["admin"]


def test_optional_files_are_valid_objects_for_the_api_server(hub: APIServer) -> None:
    """A server-side dry run: the schema and admission accept them; nothing is changed."""
    # The NetworkPolicy lives in Kokumi's namespace, which an earlier test may not have made.
    ensure_namespace(hub, "kokumi")
    for name in ("network-policy.yaml", "manager-secrets-cluster-wide.yaml"):
        applied = run(
            hub.admin_kubeconfig,
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            str(DEPLOY / "optional" / name),
        )
        assert "serverside-applied (server dry run)" in applied.stdout, applied.stdout
