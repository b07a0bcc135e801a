"""The chart's release metadata and pod knobs, read from what ``helm template`` renders.

Every object of the chart, in any release namespace and with every optional part on, carries the
labels of a Helm release and names Kokumi's namespace as the release's; each pod knob, the
PodDisruptionBudget, the CRDs' keep, the monitoring values and the helm test do what their value
says (tests/deploy/test_helm_chart.py holds the defaults equal to install.yaml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.test_helm_chart import CHART, RELEASE_LABELS, Key, render
from tests.support.deploy import DEPLOY

EVERYTHING = (
    "manager.secretsScope=cluster",
    "manager.secretsNamespaces={team-a}",
    "networkPolicy.enabled=true",
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "ui.enabled=true",
    "ui.signIn=proxy",
    "ui.proxy.containers[0].name=oauth2-proxy",
    "ui.proxy.containers[0].image=proxy.example/oauth2-proxy:7",
)

# Namespaces the chart writes to besides its own: Argo CD's, the UI's signing key's, a workspace.
ELSEWHERE = {"argocd", "kokumi-signing", "team-a"}


def pod_spec(objects: dict[Key, dict[str, Any]], namespace: str = "kokumi") -> dict[str, Any]:
    spec: dict[str, Any] = objects[("Deployment", namespace, "kokumi-clusters")]["spec"]
    return spec


def test_every_object_has_the_release_labels_and_lives_in_the_releases_namespace(
    helm: Path,
) -> None:
    objects = render(helm, *EVERYTHING, namespace="ops", tests=True)
    kinds = {k[0] for k in objects}
    assert {"CustomResourceDefinition", "PrometheusRule", "ConfigMap", "Pod"} <= kinds
    for (kind, namespace, name), doc in objects.items():
        labels = doc["metadata"]["labels"]
        assert labels.items() >= RELEASE_LABELS.items(), (kind, name)
        assert namespace in {"", "ops"} | ELSEWHERE, (kind, namespace, name)
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == "ops", (kind, name)
    text = json.dumps(list(objects.values()))
    assert "system:serviceaccount:kokumi:" not in text
    assert "system:serviceaccount:ops:kokumi" in text
    binding = objects[("ValidatingAdmissionPolicyBinding", "", "kokumi-secret-role-bindings")]
    (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == ["ops", "kokumi-signing"]
    assert ("Role", "ops", "kokumi-manager-leader-election") in objects
    assert not [k for k in render(helm, namespace="ops") if k[1] == "kokumi"]


def test_namespace_name_puts_the_objects_elsewhere_and_create_makes_it(helm: Path) -> None:
    objects = render(helm, "namespace.name=kokumi-system", "namespace.create=true")
    assert ("Namespace", "", "kokumi-system") in objects
    assert ("Deployment", "kokumi-system", "kokumi-clusters") in objects
    assert not [k for k in objects if k[1] == "kokumi"]


def test_the_pod_knobs(helm: Path) -> None:
    objects = render(
        helm,
        "imagePullSecrets[0].name=registry",
        "manager.nodeSelector.pool=system",
        "manager.tolerations[0].key=dedicated",
        "manager.tolerations[0].operator=Exists",
        "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "manager.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "manager.priorityClassName=system-cluster-critical",
        "manager.podLabels.team=platform",
        "manager.podAnnotations.example\\.com/owner=platform",
        "manager.extraArgs={--field-manager=platform}",
        "manager.extraEnv[0].name=HTTPS_PROXY",
        "manager.extraEnv[0].value=http://proxy.example:3128",
        "ui.enabled=true",
    )
    spec = pod_spec(objects)
    pod = spec["template"]
    assert pod["metadata"]["labels"]["team"] == "platform"
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kokumi-clusters",
        "app.kubernetes.io/component": "manager",
    }
    assert pod["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert list(pod["spec"]["affinity"]) == ["nodeAffinity"]
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    container = pod["spec"]["containers"][0]
    assert container["args"][-1] == "--field-manager=platform"
    assert container["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}
    ui = objects[("Deployment", "kokumi", "kokumi-clusters-ui")]["spec"]["template"]["spec"]
    assert ui["imagePullSecrets"] == [{"name": "registry"}]

    default = pod_spec(render(helm))["template"]["spec"]
    assert "podAntiAffinity" in default["affinity"]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName"} & set(
        default
    )


def test_a_disruption_budget_when_more_than_one_replica(helm: Path) -> None:
    objects = render(helm, "manager.replicas=3")
    budget = objects[("PodDisruptionBudget", "kokumi", "kokumi-clusters")]
    pod = pod_spec(objects)["template"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert not [k for k in render(helm, "manager.replicas=1") if k[0] == "PodDisruptionBudget"]


def test_the_crds_are_kept_on_uninstall_unless_told(helm: Path) -> None:
    kept = [d for k, d in render(helm).items() if k[0] == "CustomResourceDefinition"]
    assert len(kept) == 3
    for crd in kept:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    for k, crd in render(helm, "crds.keep=false").items():
        if k[0] == "CustomResourceDefinition":
            assert "annotations" not in crd["metadata"]


def test_the_monitoring_values(helm: Path) -> None:
    objects = render(
        helm,
        "serviceMonitor.enabled=true",
        "serviceMonitor.relabelings[0].targetLabel=hub",
        "serviceMonitor.relabelings[0].replacement=eu-1",
        "serviceMonitor.metricRelabelings[0].action=drop",
        "serviceMonitor.metricRelabelings[0].regex=kokumi_api_request_seconds_bucket",
        "serviceMonitor.metricRelabelings[0].sourceLabels={__name__}",
        "prometheusRule.enabled=true",
        "prometheusRule.labels.release=prom",
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.annotations.grafana_folder=Kokumi",
        namespace="ops",
    )
    (endpoint,) = objects[("ServiceMonitor", "ops", "kokumi-clusters")]["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"targetLabel": "hub", "replacement": "eu-1"}]
    assert endpoint["metricRelabelings"][0]["sourceLabels"] == ["__name__"]
    source = yaml.safe_load((DEPLOY / "monitoring" / "prometheus-rule.yaml").read_text())
    rule = objects[("PrometheusRule", "ops", source["metadata"]["name"])]
    assert rule["spec"] == source["spec"]
    assert rule["metadata"]["labels"]["release"] == "prom"
    dashboard = objects[("ConfigMap", "ops", "kokumi-clusters-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kokumi"}
    assert json.loads(dashboard["data"]["kokumi-clusters.json"]) == json.loads(
        (DEPLOY / "monitoring" / "grafana-dashboard.json").read_text()
    )
    # Off by default: the PrometheusRule needs the Prometheus Operator's CRD.
    assert not [k for k in render(helm) if k[0] in ("PrometheusRule", "ConfigMap")]


def test_the_helm_test_runs_its_script_with_a_list_only_account(helm: Path) -> None:
    objects = render(helm, namespace="ops", tests=True)
    hooks = {
        k: d for k, d in objects.items() if "helm.sh/hook" in d["metadata"].get("annotations", {})
    }
    assert {d["metadata"]["annotations"]["helm.sh/hook"] for d in hooks.values()} == {"test"}
    pod = objects[("Pod", "ops", "kokumi-kokumi-test")]["spec"]
    (container,) = pod["containers"]
    script = (CHART / "files" / "helm-test.py").read_text()
    assert container["command"] == ["python3", "-c"] and container["args"] == [script]
    role = objects[("ClusterRole", "", "kokumi-kokumi-test")]
    assert role["rules"] == [
        {"apiGroups": ["delivery.kokumi.dev"], "resources": ["clusters"], "verbs": ["list"]}
    ]
    service = objects[("Service", "ops", "kokumi-kokumi-test")]
    assert (
        service["spec"]["selector"].items()
        <= pod_spec(objects, "ops")["template"]["metadata"]["labels"].items()
    )
    (env,) = container["env"]
    assert env["value"] == "http://kokumi-kokumi-test.ops.svc:8080/readyz"
    assert not [k for k in render(helm) if k[0] == "Pod"]


def test_the_schema_knows_every_value_and_refuses_any_other() -> None:
    """Every key of values.yaml is in values.schema.json, and every object of the schema that
    lists its keys refuses others: a new value must be added to both."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if not isinstance(value, dict) or "properties" not in node:
            return
        assert node.get("additionalProperties") is False, path
        for name, inner in value.items():
            assert name in node["properties"], f"{path}.{name} is not in values.schema.json"
            walk(inner, node["properties"][name], f"{path}.{name}")

    walk(values, schema, "")
    assert set(schema["properties"]) - {"global"} == set(values)
