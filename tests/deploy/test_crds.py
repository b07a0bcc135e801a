"""The Cluster and Environment CRDs as the real API server serves them.

What users meet first: ``kubectl explain`` teaches the API, the schema refuses what Kokumi cannot
use with a message that says why, and ``kubectl get kcl`` / ``kubectl get kokumi`` print the columns
the spec shows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from kokumi.testing.controlplane import APIServer
from tests.support.deploy import DEPLOY, run, wait_until

pytestmark = pytest.mark.usefixtures("crds")

CLUSTER_COLUMNS = ["NAME", "CONNECTION", "SERVER", "VERSION", "READY", "REASON", "AGE"]
ENVIRONMENT_COLUMNS = ["NAME", "DELIVERY", "CLUSTERS", "DEPLOYING", "READY", "REASON", "AGE"]


def cluster(name: str, spec: Mapping[str, object]) -> str:
    return json.dumps(
        {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def environment(name: str, spec: Mapping[str, object]) -> str:
    return json.dumps(
        {
            "apiVersion": "delivery.kokumi.dev/v1alpha1",
            "kind": "Environment",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


class _AnyAge(str):
    """Equal to any age kubectl prints (``3s``, ``2m10s``): the one column a test cannot fix."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(r"(\d+[smhdy]){1,2}", other) is not None

    def __hash__(self) -> int:
        return 0


_ANY_AGE = _AnyAge("<age>")


def create(hub: APIServer, namespace: str, manifest: str, *, check: bool = True) -> str:
    """Create as the admin; return kubectl's stderr (the API server's refusal, if any)."""
    result = run(
        hub.admin_kubeconfig, "-n", namespace, "create", "-f", "-", input=manifest, check=check
    )
    return result.stderr if result.returncode else ""


def refused(hub: APIServer, namespace: str, manifest: str) -> str:
    stderr = create(hub, namespace, manifest, check=False)
    assert "is invalid" in stderr, f"the API server accepted {manifest}"
    return stderr


def explain(hub: APIServer, field: str) -> str:
    """``kubectl explain field``: Kokumi's Cluster by its short name kcl, as the spec says to
    write it, since ``cluster`` is Cluster API's once its CRD is in (the capi_crd fixture)."""

    # The OpenAPI document of a new CRD is published a moment after the CRD is served.
    def attempt() -> str | None:
        result = run(hub.admin_kubeconfig, "explain", field, check=False)
        return result.stdout if result.returncode == 0 else None

    return wait_until(attempt, f"kubectl explain {field} works")


def table(hub: APIServer, namespace: str, resource: str) -> list[list[str]]:
    out = run(hub.admin_kubeconfig, "-n", namespace, "get", resource).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


# kubectl explain


def test_explain_cluster_spec_teaches_the_connection(hub: APIServer) -> None:
    text = explain(hub, "kcl.spec")
    for field in ("connection", "kubeconfig", "description"):
        assert f"  {field}\t" in text
    assert "Kubeconfig, InCluster" in text
    assert "needs no" in text and "Secret" in text


def test_explain_cluster_kubeconfig_names_the_secret_and_its_default_key(hub: APIServer) -> None:
    text = explain(hub, "kcl.spec.kubeconfig.secretRef")
    assert "kokumi-cluster-secret-access" in text
    assert "  name\t" in text and "  key\t" in text
    assert "Defaults" in explain(hub, "kcl.spec.kubeconfig.secretRef.key")


def test_explain_cluster_status_teaches_what_kokumi_reports(hub: APIServer) -> None:
    text = explain(hub, "kcl.status")
    for field in ("server", "kubernetesVersion", "observedGeneration", "conditions"):
        assert f"  {field}\t" in text
    assert "Ready: whether Orders can deploy" in explain(hub, "kcl.status.conditions")


def test_explain_environment_teaches_selector_and_delivery(hub: APIServer) -> None:
    spec = explain(hub, "environment.spec")
    for field in ("clusterSelector", "delivery", "description"):
        assert f"  {field}\t" in spec
    assert "ArgoCD" in spec
    status = explain(hub, "environment.status")
    for field in ("selected", "deploying", "clusters", "more", "conditions", "observedGeneration"):
        assert f"  {field}\t" in status
    assert "ClusterNotReady" in explain(hub, "environment.status.clusters.target")
    assert "first 50 by name" in " ".join(explain(hub, "environment.status.clusters").split())


# Cluster validation


def test_name_of_64_characters_is_refused_with_the_reason(hub: APIServer, namespace: str) -> None:
    stderr = refused(hub, namespace, cluster("a" * 64, {"connection": "InCluster"}))
    assert "metadata.name" in stderr
    assert "at most 63 characters" in stderr and "labels" in stderr
    create(hub, namespace, cluster("a" * 63, {"connection": "InCluster"}))


def test_unknown_connection_is_refused(hub: APIServer, namespace: str) -> None:
    stderr = refused(hub, namespace, cluster("c", {"connection": "Token"}))
    assert "spec.connection" in stderr
    assert '"Kubeconfig", "InCluster"' in stderr


def test_connection_is_required(hub: APIServer, namespace: str) -> None:
    stderr = refused(hub, namespace, cluster("c", {"description": "no connection"}))
    assert "spec.connection: Required value" in stderr


def test_kubeconfig_connection_needs_a_secret(hub: APIServer, namespace: str) -> None:
    stderr = refused(hub, namespace, cluster("c", {"connection": "Kubeconfig"}))
    assert "connection Kubeconfig needs spec.kubeconfig.secretRef.name" in stderr
    stderr = refused(hub, namespace, cluster("c", {"connection": "Kubeconfig", "kubeconfig": {}}))
    assert "spec.kubeconfig.secretRef: Required value" in stderr
    stderr = refused(
        hub,
        namespace,
        cluster("c", {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"key": "value"}}}),
    )
    assert "spec.kubeconfig.secretRef.name: Required value" in stderr


def test_in_cluster_connection_takes_no_kubeconfig(hub: APIServer, namespace: str) -> None:
    spec = {"connection": "InCluster", "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig"}}}
    stderr = refused(hub, namespace, cluster("c", spec))
    assert "connection InCluster takes no spec.kubeconfig" in stderr


def test_scope_takes_namespaces_and_cluster_resources_with_them(
    hub: APIServer, namespace: str
) -> None:
    base = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "spoke"}}}
    scope = {"namespaces": ["team-a", "team-a-jobs"], "clusterResources": True}
    create(hub, namespace, cluster("scoped", {**base, "scope": scope}))
    stderr = refused(hub, namespace, cluster("c1", {**base, "scope": {"clusterResources": True}}))
    assert "spec.scope.clusterResources needs spec.scope.namespaces" in stderr
    stderr = refused(hub, namespace, cluster("c2", {**base, "scope": {"namespaces": ["Team"]}}))
    assert "spec.scope.namespaces[0]" in stderr
    stderr = refused(hub, namespace, cluster("c3", {**base, "scope": {"namespaces": ["a", "a"]}}))
    assert "Duplicate value" in stderr
    too_many = {"namespaces": [f"n{i}" for i in range(65)]}
    stderr = refused(hub, namespace, cluster("c4", {**base, "scope": too_many}))
    assert "must have at most 64 items" in stderr
    in_cluster = {"connection": "InCluster", "scope": {"namespaces": ["a"]}}
    stderr = refused(hub, namespace, cluster("c5", in_cluster))
    assert "connection InCluster takes no spec.scope" in stderr


def test_explain_cluster_scope_says_what_argocd_gets(hub: APIServer) -> None:
    text = explain(hub, "kcl.spec.scope")
    assert "  namespaces\t" in text and "  clusterResources\t" in text
    assert "NamespacesRequired" in text and "less than" in text
    assert "namespaces field of the Argo CD" in explain(hub, "kcl.spec.scope.namespaces")


def test_explain_clustersource_scope_says_it_goes_on_every_cluster(hub: APIServer) -> None:
    text = explain(hub, "kcs.spec.scope")
    assert "  namespaces\t" in text and "  clusterResources\t" in text
    assert "every Cluster the source makes" in text and "in place" in text


def test_secret_key_defaults_to_value(hub: APIServer, namespace: str) -> None:
    spec = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig"}}}
    create(hub, namespace, cluster("spoke", spec))
    secret_ref = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "get",
        "kcl",
        "spoke",
        "-o",
        "jsonpath={.spec.kubeconfig.secretRef}",
    ).stdout
    assert json.loads(secret_ref) == {"name": "spoke-kubeconfig", "key": "value"}


def test_another_secret_key_is_kept(hub: APIServer, namespace: str) -> None:
    spec = {
        "connection": "Kubeconfig",
        "kubeconfig": {"secretRef": {"name": "spoke", "key": "kubeconfig.yaml"}},
    }
    create(hub, namespace, cluster("spoke", spec))
    key = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "get",
        "kcl",
        "spoke",
        "-o",
        "jsonpath={.spec.kubeconfig.secretRef.key}",
    ).stdout
    assert key == "kubeconfig.yaml"


def test_samples_are_accepted(hub: APIServer, namespace: str) -> None:
    run(hub.admin_kubeconfig, "-n", namespace, "apply", "-f", str(DEPLOY / "samples"))
    names = run(hub.admin_kubeconfig, "-n", namespace, "get", "kokumi", "-o", "name").stdout
    assert sorted(names.split()) == [
        "cluster.delivery.kokumi.dev/in-cluster",
        "cluster.delivery.kokumi.dev/spoke",
        "clustersource.delivery.kokumi.dev/capi",
        "clustersource.delivery.kokumi.dev/crossplane",
        "clustersource.delivery.kokumi.dev/kamaji",
        "clustersource.delivery.kokumi.dev/team-kubeconfigs",
        "clustersource.delivery.kokumi.dev/vclusters",
        "environment.delivery.kokumi.dev/edge-eu",
    ]
    # A ClusterSource left in a namespace being deleted would hold a later manager's Secret
    # watch there until the namespace is gone.
    run(hub.admin_kubeconfig, "-n", namespace, "delete", "kcs", "--all")


# Environment validation


def test_environment_selector_operators_and_values(hub: APIServer, namespace: str) -> None:
    def selector_refused(expression: Mapping[str, object]) -> str:
        spec = {"clusterSelector": {"matchExpressions": [expression]}}
        return refused(hub, namespace, environment("e", spec))

    assert "operator In needs values" in selector_refused({"key": "fleet", "operator": "In"})
    assert "operator NotIn needs values" in selector_refused(
        {"key": "fleet", "operator": "NotIn", "values": []}
    )
    assert "operator Exists takes no values" in selector_refused(
        {"key": "fleet", "operator": "Exists", "values": ["edge"]}
    )
    assert "operator DoesNotExist takes no values" in selector_refused(
        {"key": "fleet", "operator": "DoesNotExist", "values": ["edge"]}
    )
    stderr = selector_refused({"key": "fleet", "operator": "Equals", "values": ["edge"]})
    assert '"In", "NotIn", "Exists", "DoesNotExist"' in stderr

    expressions = [
        {"key": "fleet", "operator": "In", "values": ["edge", "core"]},
        {"key": "tier", "operator": "NotIn", "values": ["test"]},
        {"key": "topology.kubernetes.io/region", "operator": "Exists"},
        {"key": "retired", "operator": "DoesNotExist"},
    ]
    spec = {"clusterSelector": {"matchLabels": {"a": "b"}, "matchExpressions": expressions}}
    create(hub, namespace, environment("edge", spec))


def test_environment_needs_a_selector_and_delivers_with_argocd(
    hub: APIServer, namespace: str
) -> None:
    stderr = refused(hub, namespace, environment("e", {"description": "nothing selected"}))
    assert "spec.clusterSelector: Required value" in stderr
    stderr = refused(hub, namespace, environment("e", {"clusterSelector": {}, "delivery": "Flux"}))
    assert 'spec.delivery: Unsupported value: "Flux"' in stderr

    create(hub, namespace, environment("all", {"clusterSelector": {}}))
    delivery = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "get",
        "kenv",
        "all",
        "-o",
        "jsonpath={.spec.delivery}",
    ).stdout
    assert delivery == "ArgoCD"


# Status and printer columns


def patch_status(hub: APIServer, namespace: str, resource: str, status: dict[str, object]) -> None:
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        resource,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Ready",
    "message": "Orders can deploy to the cluster.",
    "lastTransitionTime": "2026-11-29T10:00:00Z",
    "observedGeneration": 1,
}


def test_get_kcl_prints_the_spec_columns(hub: APIServer, namespace: str) -> None:
    spec = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "spoke-kubeconfig"}}}
    create(hub, namespace, cluster("spoke", spec))
    # Without a status the row has empty columns: the age follows the connection.
    assert table(hub, namespace, "kcl") == [CLUSTER_COLUMNS, ["spoke", "Kubeconfig", _ANY_AGE]]

    status = {
        "server": "https://spoke.example:6443",
        "kubernetesVersion": "v1.37.0",
        "observedGeneration": 1,
        "conditions": [READY],
    }
    patch_status(hub, namespace, "kcl/spoke", status)
    assert table(hub, namespace, "clusters.delivery.kokumi.dev") == [
        CLUSTER_COLUMNS,
        ["spoke", "Kubeconfig", "https://spoke.example:6443", "v1.37.0", "True", "Ready", _ANY_AGE],
    ]


def test_get_kenv_prints_the_environment_columns(hub: APIServer, namespace: str) -> None:
    spec = {"clusterSelector": {"matchLabels": {"fleet": "edge"}}}
    create(hub, namespace, environment("edge", spec))
    status = {
        "observedGeneration": 1,
        "selected": 2,
        "deploying": 1,
        "clusters": [
            {"name": "spoke", "target": "Deploy", "reason": "Ready", "message": "Orders deploy."},
            {
                "name": "spoke-copy",
                "target": "ClusterConflict",
                "reason": "ClusterConflict",
                "message": "spoke connects to the same server and deploys.",
            },
        ],
        "conditions": [{**READY, "message": "Orders can deploy to 1 of 2 Clusters."}],
    }
    patch_status(hub, namespace, "kenv/edge", status)
    assert table(hub, namespace, "kenv") == [
        ENVIRONMENT_COLUMNS,
        ["edge", "ArgoCD", "2", "1", "True", "Ready", _ANY_AGE],
    ]


def test_get_kokumi_lists_clusters_and_environments(hub: APIServer, namespace: str) -> None:
    create(hub, namespace, cluster("in-cluster", {"connection": "InCluster"}))
    create(hub, namespace, environment("local", {"clusterSelector": {}}))
    lines = table(hub, namespace, "kokumi")
    assert lines == [
        CLUSTER_COLUMNS,
        ["cluster.delivery.kokumi.dev/in-cluster", "InCluster", _ANY_AGE],
        ENVIRONMENT_COLUMNS,
        ["environment.delivery.kokumi.dev/local", "ArgoCD", _ANY_AGE],
    ]


def test_status_is_a_subresource(hub: APIServer, namespace: str) -> None:
    """Users' writes cannot set status, and Kokumi's status writes cannot change the spec."""
    create(hub, namespace, cluster("c", {"connection": "InCluster"}))
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        "kcl/c",
        "--type=merge",
        "-p",
        json.dumps({"status": {"server": "https://nowhere.example"}}),
    )
    patch_status(hub, namespace, "kcl/c", {"server": "https://kubernetes.default.svc"})
    run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        "kcl/c",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"description": "via status"}}),
    )
    got = json.loads(
        run(hub.admin_kubeconfig, "-n", namespace, "get", "kcl/c", "-o", "json").stdout
    )
    assert got["status"] == {"server": "https://kubernetes.default.svc"}
    assert "description" not in got["spec"]


def test_status_conditions_are_validated(hub: APIServer, namespace: str) -> None:
    create(hub, namespace, cluster("c", {"connection": "InCluster"}))
    result = run(
        hub.admin_kubeconfig,
        "-n",
        namespace,
        "patch",
        "kcl/c",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [{**READY, "status": "Maybe"}]}}),
        check=False,
    )
    assert result.returncode != 0
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in result.stderr


def test_crds_are_namespaced_with_short_names_and_category(hub: APIServer) -> None:
    raw = run(hub.admin_kubeconfig, "get", "--raw", "/apis/delivery.kokumi.dev/v1alpha1").stdout
    resources = {r["name"]: r for r in json.loads(raw)["resources"]}
    assert resources["clusters"]["kind"] == "Cluster"
    assert resources["clusters"]["shortNames"] == ["kcl"]
    assert resources["environments"]["kind"] == "Environment"
    assert resources["environments"]["shortNames"] == ["kenv"]
    assert resources["clustersources"]["kind"] == "ClusterSource"
    # Not cl or cc (Cluster API's clusters and clusterclasses) nor Rancher's: Kokumi's own.
    assert resources["clustersources"]["shortNames"] == ["kcs"]
    for name in ("clusters", "environments", "clustersources"):
        assert resources[name]["namespaced"] is True
        assert resources[name]["categories"] == ["kokumi"]
        assert f"{name}/status" in resources


# ClusterSource


def test_explain_clustersource_teaches_the_source_and_its_status(hub: APIServer) -> None:
    spec = " ".join(explain(hub, "clustersource.spec").split())
    assert "<cluster>-kubeconfig" in spec
    assert "clusters.cluster.x-k8s.io" in spec
    assert "ClusterAPINotReadable" in spec
    status = " ".join(explain(hub, "clustersource.status").split())
    for field in ("matched", "made", "notUsable", "conflicts", "notImported"):
        assert field in status
    top = " ".join(explain(hub, "clustersource").split())
    assert "kokumi-cluster-source-access" in top


def test_get_kcs_prints_the_source_columns(hub: APIServer, namespace: str) -> None:
    create(hub, namespace, (DEPLOY / "samples" / "clustersource.yaml").read_text())
    header, row = table(hub, namespace, "kcs")
    assert header == [
        "NAME", "FROM", "MATCHED", "MADE", "NOT-USABLE", "CONFLICTS", "READY", "REASON", "AGE",
    ]  # fmt: skip
    assert row == ["capi", "ClusterAPI", _ANY_AGE]
    run(hub.admin_kubeconfig, "-n", namespace, "delete", "kcs", "--all")


def test_clustersource_refuses_another_source_and_kokumis_labels(
    hub: APIServer, namespace: str
) -> None:
    def source(spec: Mapping[str, object]) -> str:
        return json.dumps(
            {
                "apiVersion": "delivery.kokumi.dev/v1alpha1",
                "kind": "ClusterSource",
                "metadata": {"name": "s"},
                "spec": spec,
            }
        )

    assert 'spec.from: Unsupported value: "Rancher"' in refused(
        hub, namespace, source({"from": "Rancher"})
    )
    assert "spec.from: Required value" in refused(hub, namespace, source({}))
    ours = {"from": "ClusterAPI", "labels": {"delivery.kokumi.dev/cluster-source": "x"}}
    assert "keys under delivery.kokumi.dev/ are Kokumi's own" in refused(
        hub, namespace, source(ours)
    )


# Every tenant-written spec is bounded in size: the manager and the UI keep these objects whole.

KEY_MAX = 317  # a label key: a DNS prefix of 253, a slash, a name of 63


def _spec_schemas() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        out[crd["spec"]["names"]["kind"]] = schema
    return out


def _unbounded(schema: dict[str, Any], path: str) -> list[str]:
    kind = schema.get("type")
    if kind == "string":
        return [] if "maxLength" in schema else [f"{path}: a string without maxLength"]
    if kind == "array":
        missing = [] if "maxItems" in schema else [f"{path}: a list without maxItems"]
        return missing + _unbounded(schema["items"], f"{path}[]")
    if kind == "object" and "additionalProperties" in schema:
        rules = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
        missing = [] if "maxProperties" in schema else [f"{path}: a map without maxProperties"]
        if f"self.all(k, size(k) <= {KEY_MAX})" not in rules:
            missing.append(f"{path}: a map without a bound on its keys")
        return missing + _unbounded(schema["additionalProperties"], f"{path}{{}}")
    if kind == "object":
        return [m for name, sub in schema.get("properties", {}).items()
                for m in _unbounded(sub, f"{path}.{name}")]  # fmt: skip
    return []


def _most_characters(schema: dict[str, Any]) -> int:
    """The longest JSON the schema admits, in characters (what maxLength counts)."""
    kind = schema.get("type")
    if kind == "string":
        return 2 + int(schema["maxLength"])
    if kind in ("integer", "number"):
        return 24
    if kind == "boolean":
        return 5
    if kind == "array":
        return 2 + int(schema["maxItems"]) * (_most_characters(schema["items"]) + 1)
    if "additionalProperties" in schema:
        entry = 2 + KEY_MAX + 1 + _most_characters(schema["additionalProperties"]) + 1
        return 2 + int(schema["maxProperties"]) * entry
    fields = schema["properties"].items()
    return 2 + sum(len(name) + 4 + _most_characters(sub) for name, sub in fields)


# The largest spec each schema admits, in characters, as docs/operations.md states it.
MOST = {"Cluster": 6_167, "Environment": 65_491, "ClusterSource": 159_023}


def test_every_spec_field_is_bounded_and_a_spec_stays_small() -> None:
    schemas = _spec_schemas()
    assert set(schemas) == set(MOST)
    operations = (DEPLOY.parent / "docs" / "operations.md").read_text()
    for kind, schema in schemas.items():
        assert _unbounded(schema, f"{kind}.spec") == []
        most = _most_characters(schema)
        assert most == MOST[kind], f"{kind}.spec may be {most} characters"
        assert f"{kind} {most:,}" in operations
