"""The examples render, the hub accepts them, and they say what the samples and the keeper say.

Users apply the examples as they are (``kubectl apply -n <namespace> -k``), so each one is rendered
with ``kubectl kustomize`` and applied server-side with ``--dry-run=server``: the CRDs' schemas and
the admission policies judge them, not a copy of those rules here.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import pytest
import yaml

from kokumi.actors.incluster import in_cluster_cluster, local_environment
from kokumi.core.environments import selectors
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import crds  # noqa: F401  (the session fixture installing the CRDs)
from tests.support.paths import REPO

EXAMPLES = REPO / "examples"
SAMPLES = REPO / "deploy" / "samples"

# example directory -> (Kind, name) of every object it renders
EXPECTED = {
    "multi-cluster/platform": {("Cluster", "spoke"), ("Environment", "edge")},
    "local": {("Cluster", "in-cluster"), ("Environment", "local")},
}


def render(hub: APIServer, kubectl: Kubectl, example: str) -> tuple[str, list[dict[str, Any]]]:
    text = kubectl(hub, "kustomize", str(EXAMPLES / example)).stdout
    return text, [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_is_accepted_by_the_hub(
    hub: APIServer, kubectl: Kubectl, namespace: str, example: str
) -> None:
    text, objects = render(hub, kubectl, example)
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == EXPECTED[example]
    assert all("namespace" not in o["metadata"] for o in objects), "the user picks it with -n"
    applied = kubectl(
        hub,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=kokumi-examples",
        "-n",
        namespace,
        "-f",
        "-",
        input=text,
    )
    lines = sorted(applied.stdout.splitlines())
    assert lines == sorted(
        f"{kind.lower()}.delivery.kokumi.dev/{name} serverside-applied (server dry run)"
        for kind, name in EXPECTED[example]
    )


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_each_environment_selects_the_example_cluster(
    hub: APIServer, kubectl: Kubectl, example: str
) -> None:
    _, objects = render(hub, kubectl, example)
    (cluster,) = by_kind(objects, "Cluster")
    for environment in by_kind(objects, "Environment"):
        selector = selectors.parse(environment["spec"]["clusterSelector"])
        assert isinstance(selector, selectors.Selector), selector
        assert selector.matches(cluster["metadata"]["labels"])
        assert not selector.matches({})


@pytest.mark.parametrize(
    ("example_file", "sample"),
    [
        ("multi-cluster/platform/cluster-spoke.yaml", "cluster-kubeconfig.yaml"),
        ("local/cluster-in-cluster.yaml", "cluster-incluster.yaml"),
    ],
)
def test_clusters_match_the_samples_comments_included(example_file: str, sample: str) -> None:
    """The example, the sample beside the CRDs and the documentation show one Cluster, one way."""
    assert (EXAMPLES / example_file).read_text() == (SAMPLES / sample).read_text()


def test_local_example_matches_what_the_keeper_creates(hub: APIServer, kubectl: Kubectl) -> None:
    """Another workspace's in-cluster is the one Kokumi keeps in its own namespace, placed here."""
    _, objects = render(hub, kubectl, "local")
    (cluster,) = by_kind(objects, "Cluster")
    (environment,) = by_kind(objects, "Environment")
    kept_cluster = in_cluster_cluster("any")
    kept_environment = local_environment("any")
    assert cluster["metadata"]["labels"] == kept_cluster["metadata"]["labels"]
    assert cluster["spec"] == kept_cluster["spec"]
    assert environment["spec"] == kept_environment["spec"]


# --- examples/argocd: an ApplicationSet that a handover leaves alone ----------------------------

APPLICATION_SET = EXAMPLES / "argocd" / "applicationset.yaml"
SERVER = "https://spoke.example:6443"


def generator_params(secret: dict[str, Any]) -> dict[str, Any]:
    """What Argo CD's cluster generator hands the template for one cluster Secret (goTemplate):
    the cluster's name and server from the Secret's data, its labels and annotations."""
    data = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    return {
        "name": data["name"],
        "server": data["server"].rstrip("/"),
        "metadata": {
            "labels": secret["metadata"].get("labels", {}),
            "annotations": secret["metadata"].get("annotations", {}),
        },
    }


def render_template(value: Any, params: dict[str, Any]) -> Any:
    """The example's Go template expressions, evaluated: a field (``.server``), piped through
    sprig's ``sha256sum`` and ``trunc N``. Anything else fails, so the example cannot use a
    function this evaluator would misread."""
    if isinstance(value, dict):
        return {k: render_template(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [render_template(v, params) for v in value]
    if not isinstance(value, str):
        return value

    def expression(match: re.Match[str]) -> str:
        field, *pipes = (part.strip() for part in match.group(1).split("|"))
        assert re.fullmatch(r"\.\w+", field), f"unsupported expression {match.group(0)}"
        result = str(params[field[1:]])
        for pipe in pipes:
            if pipe == "sha256sum":
                result = hashlib.sha256(result.encode()).hexdigest()
            elif found := re.fullmatch(r"trunc (\d+)", pipe):
                result = result[: int(found.group(1))]
            else:
                raise AssertionError(f"unsupported function {pipe}")
        return result

    return re.sub(r"\{\{(.*?)\}\}", expression, value)


def applications_for(holder: ClusterRef, application_set: dict[str, Any]) -> list[Any]:
    """The Applications the set generates from Kokumi's Secret while ``holder`` holds SERVER."""
    secret = argocd.cluster_secret(Connection(server=SERVER, token="t"), holder)
    (generator,) = application_set["spec"]["generators"]
    selector = selectors.parse(generator["clusters"]["selector"])
    assert isinstance(selector, selectors.Selector), selector
    if not selector.matches(secret["metadata"]["labels"]):
        return []
    return [render_template(application_set["spec"]["template"], generator_params(secret))]


def test_the_application_set_example_survives_a_handover() -> None:
    """The Application the example generates is the same whichever Cluster holds the server:
    same name (so the ApplicationSet neither deletes nor re-creates it), same destination."""
    application_set = yaml.safe_load(APPLICATION_SET.read_text())
    assert application_set["kind"] == "ApplicationSet"
    assert application_set["spec"]["goTemplate"] is True
    before = applications_for(ClusterRef("platform", "spoke"), application_set)
    after = applications_for(ClusterRef("edge-team", "spoke-2"), application_set)
    assert len(before) == 1
    assert before == after
    (application,) = before
    assert application["metadata"]["name"] == f"guestbook-{argocd.server_hash(SERVER)}"
    assert application["spec"]["destination"]["server"] == SERVER
    assert "name" not in application["spec"]["destination"]


def test_naming_applications_after_the_cluster_name_breaks_at_a_handover() -> None:
    """The hazard docs/argocd.md warns of is real: ``{{.name}}`` is the holder's Argo CD name."""
    application_set = yaml.safe_load(APPLICATION_SET.read_text())
    application_set["spec"]["template"]["metadata"]["name"] = "guestbook-{{ .name }}"
    application_set["spec"]["template"]["spec"]["destination"] = {"name": "{{ .name }}"}
    before = applications_for(ClusterRef("platform", "spoke"), application_set)
    after = applications_for(ClusterRef("edge-team", "spoke-2"), application_set)
    assert before[0]["metadata"]["name"] != after[0]["metadata"]["name"]
    assert before[0]["spec"]["destination"] != after[0]["spec"]["destination"]
