"""An Environment's status, with no server: it reads back as it was written, it is a function of
the Clusters it selects, and it stays bounded however many Clusters it selects."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.api import unstructured
from kokumi.core.environments.status import LISTED, environment_status, observed_environment_status
from kokumi.core.reasons import Reason
from tests.support.statuses import (
    EARLY,
    LATE,
    environment_statuses,
    environments,
    fleets,
    invalid_environments,
)
from tests.support.strategies import examples


def _cluster(name: str, *, ready: bool, server: str | None = None) -> api.Cluster:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "Ready" if ready else "Unreachable",
        "message": "ok" if ready else f"timed out after 10 s: {name}.example:6443 did not answer",
        "lastTransitionTime": "2026-11-30T12:00:00Z",
    }
    body: dict[str, Any] = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "fleet", "uid": name, "labels": {"f": "x"}},
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": name}}},
        "status": {
            "server": server or f"https://{name}.example:6443",
            "conditions": [condition],
        },
    }
    parsed = api.parse_cluster(body)
    assert isinstance(parsed, api.Cluster)
    return parsed


def _environment() -> api.Environment:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "Environment",
        "metadata": {"name": "all", "namespace": "fleet", "uid": "e", "generation": 3},
        "spec": {"clusterSelector": {"matchLabels": {"f": "x"}}},
    }
    parsed = api.parse_environment(body)
    assert isinstance(parsed, api.Environment)
    return parsed


def _ready(status: api.EnvironmentStatus) -> api.Condition:
    ready = api.ready_condition(status.conditions)
    assert ready is not None
    return ready


def _as_written(value: api.EnvironmentStatus) -> dict[str, Any]:
    """The status as the API server stores it: JSON, with the nulls of the merge patch gone."""
    text = json.dumps(unstructured(value))
    return {k: v for k, v in json.loads(text).items() if v is not None}


def test_only_clusters_that_do_not_deploy_are_listed() -> None:
    clusters = [_cluster(f"c{i:03d}", ready=i % 3 != 0) for i in range(9)]
    status = environment_status(_environment(), clusters)
    assert status.selected == 9
    assert status.deploying == 6
    assert status.more == 0
    assert [row.name for row in status.clusters] == ["c000", "c003", "c006"]
    assert {row.target for row in status.clusters} == {"ClusterNotReady"}
    assert {row.reason for row in status.clusters} == {"Unreachable"}
    assert _ready(status).message == "6 of 9 selected Clusters deploy"


def test_a_fleet_in_an_outage_is_counted_not_listed() -> None:
    clusters = [_cluster(f"c{i:06d}", ready=False) for i in range(100_000)]
    status = environment_status(_environment(), clusters)
    assert len(status.clusters) == LISTED
    assert status.clusters[0].name == "c000000"
    assert status.more == 100_000 - LISTED
    assert status.deploying == 0
    ready = _ready(status)
    assert ready.reason == "NoClusterReady"
    assert ready.message == (
        "none of the 100000 selected Clusters can be deployed to; the first 50 in"
        " status.clusters, and 99950 more"
    )
    # Far under the API server's limit of about 1.5 MB for the whole object.
    assert len(json.dumps(unstructured(status))) < 32_000


def test_a_conflict_inside_the_environment_is_listed() -> None:
    clusters = [
        _cluster("a", ready=True, server="https://same.example:6443"),
        _cluster("b", ready=True, server="https://same.example:6443"),
    ]
    status = environment_status(_environment(), clusters)
    assert status.deploying == 1
    assert [(r.name, r.target) for r in status.clusters] == [("b", "ClusterConflict")]


def test_a_cluster_never_checked_is_listed_as_not_checked() -> None:
    """A selected Cluster without a Ready condition gets a Reason of the API, not a placeholder."""
    fresh = api.parse_cluster(
        {
            "metadata": {"name": "new", "namespace": "fleet", "labels": {"f": "x"}},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "new"}}},
        }
    )
    assert isinstance(fresh, api.Cluster)
    status = environment_status(_environment(), [fresh, _cluster("old", ready=True)])
    assert [(r.name, r.target, r.reason) for r in status.clusters] == [
        ("new", "ClusterNotReady", "NotChecked")
    ]
    assert status.clusters[0].message.startswith("Cluster new is not ready (NotChecked): ")


# --- what is written, and a function of what was found ---------------------------------------


@settings(max_examples=examples(500))
@given(value=environment_statuses)
def test_an_environment_status_survives_its_write(value: api.EnvironmentStatus) -> None:
    assert api.converter.structure(unstructured(value), api.EnvironmentStatus) == value
    assert api.converter.structure(_as_written(value), api.EnvironmentStatus) == value


def test_an_environment_status_is_written_as_today() -> None:
    value = api.EnvironmentStatus(
        observed_generation=2,
        conditions=(api.Condition("Ready", "False", Reason.NO_CLUSTERS, "none", EARLY, 2),),
    )
    assert json.dumps(unstructured(value)) == json.dumps(
        {
            "observedGeneration": 2,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "NoClusters",
                    "message": "none",
                    "lastTransitionTime": EARLY,
                    "observedGeneration": 2,
                }
            ],
            "selected": 0,
            "deploying": 0,
            "clusters": [],
            "more": 0,
        }
    )


@settings(max_examples=examples(500))
@given(
    environment=environments | invalid_environments,
    fleet=fleets,
    listed=st.integers(0, 4),
)
def test_an_environment_status_is_a_function_of_its_clusters(
    environment: api.Environment | api.Invalid, fleet: list[api.Cluster], listed: int
) -> None:
    first = environment_status(environment, fleet, listed=listed, now=EARLY)
    assert first == environment_status(environment, fleet, listed=listed, now=EARLY)
    assert len(first.clusters) <= listed
    assert first.selected == first.deploying + len(first.clusters) + first.more
    assert first.observed_generation == environment.metadata.generation
    assert _ready(first).status == ("True" if first.deploying else "False")
    written = attrs.evolve(environment, status=first)
    assert environment_status(written, fleet, listed=listed, now=LATE) == first
    assert observed_environment_status(written) == first


def test_an_environment_with_a_bad_selector_says_so() -> None:
    environment = api.Environment(
        api.Meta("all", "fleet", generation=2),
        api.EnvironmentSpec({"matchExpressions": [{"key": "env", "operator": "Has"}]}),
    )
    status = environment_status(environment, [], now=EARLY)
    assert _ready(status).reason == Reason.INVALID_SELECTOR
    assert '"Has"' in _ready(status).message
    assert (status.selected, status.deploying, status.clusters, status.more) == (0, 0, (), 0)
