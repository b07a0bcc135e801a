"""The examples render, the hub accepts them, and they say what the samples and the keeper say.

Users apply the examples as they are (``kubectl apply -n <namespace> -k``), so each one is rendered
with ``kubectl kustomize`` and applied server-side with ``--dry-run=server``: the CRDs' schemas and
the admission policies judge them, not a copy of those rules here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kokumi import selectors
from kokumi.actors.incluster import in_cluster_cluster, local_environment
from kokumi.controlplane import APIServer
from kokumi.testing import Kubectl
from tests.fixtures_deploy import crds  # noqa: F401  (the session fixture installing the CRDs)

REPO = Path(__file__).resolve().parent.parent
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
