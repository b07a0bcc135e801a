"""An Environment's targets: who deploys, who is held, and that order never decides it."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.environments.targets import (
    NOT_CHECKED_MESSAGE,
    ClusterNotReady,
    Deploy,
    SelectedCluster,
    Target,
    TargetTaken,
    selected_cluster,
    targets,
)
from kokumi.core.reasons import Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, normalise_server
from tests.support import strategies as s

environments = st.lists(s.selected_clusters(), max_size=12, unique_by=lambda c: c.name)


def _ready(name: str, server: str | None = None, connection: str = "Kubeconfig") -> SelectedCluster:
    return SelectedCluster(
        name=name,
        connection="InCluster" if connection == "InCluster" else "Kubeconfig",
        ready=True,
        reason="Ready",
        server=server,
    )


def _server(cluster: SelectedCluster) -> str | None:
    if cluster.connection == "InCluster":
        return IN_CLUSTER_SERVER
    return normalise_server(cluster.server) if cluster.server else None


def _eligible(cluster: SelectedCluster) -> bool:
    return cluster.ready and cluster.reason != "ClusterConflict" and _server(cluster) is not None


# Examples from the spec.


def test_two_in_cluster_clusters_only_the_first_by_name_deploys() -> None:
    result = targets(
        [_ready("local", connection="InCluster"), _ready("in-cluster", connection="InCluster")]
    )
    assert result[1] == Deploy("in-cluster", IN_CLUSTER_SERVER, f"deploys to {IN_CLUSTER_SERVER}")
    assert isinstance(result[0], TargetTaken)
    assert result[0].winner == "in-cluster"
    assert result[0].server == IN_CLUSTER_SERVER
    assert "in-cluster" in result[0].message
    assert result[0].reason is Reason.CLUSTER_CONFLICT


def test_a_trailing_slash_is_the_same_server() -> None:
    result = targets([_ready("b", "https://spoke.example/"), _ready("a", "https://spoke.example")])
    assert result[1] == Deploy("a", "https://spoke.example", "deploys to https://spoke.example")
    assert result[0] == TargetTaken("b", "https://spoke.example", "a", result[0].message)


def test_a_cluster_reporting_cluster_conflict_is_not_ready_even_if_marked_ready() -> None:
    conflicted = SelectedCluster("a", "Kubeconfig", True, "ClusterConflict", "https://x")
    result = targets([conflicted, _ready("b", "https://x")])
    assert isinstance(result[0], ClusterNotReady)
    assert "ClusterConflict" in result[0].message
    assert result[1] == Deploy("b", "https://x", "deploys to https://x")


def test_not_ready_names_the_reason_on_one_line() -> None:
    cluster = SelectedCluster(
        "spoke", "Kubeconfig", False, "Unreachable", "https://x", "dial tcp\n10.0.0.1: timeout"
    )
    (result,) = targets([cluster])
    assert result == ClusterNotReady(
        "spoke", "Cluster spoke is not ready (Unreachable): dial tcp 10.0.0.1: timeout"
    )
    assert result.reason is Reason.CLUSTER_NOT_READY


def test_a_cluster_never_checked_is_held_as_not_checked() -> None:
    """No Ready condition yet: a Reason of the API with a message that says what to do."""
    cluster = api.parse_cluster(
        {
            "metadata": {"name": "spoke", "namespace": "fleet"},
            "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "s"}}},
        }
    )
    assert isinstance(cluster, api.Cluster)
    selected = selected_cluster(cluster)
    assert selected.reason is Reason.NOT_CHECKED
    assert not selected.ready
    (result,) = targets([selected])
    assert result == ClusterNotReady(
        "spoke", f"Cluster spoke is not ready (NotChecked): {NOT_CHECKED_MESSAGE}"
    )
    assert "\n" not in result.message
    assert "manager runs" in result.message


def test_ready_without_a_server_is_held() -> None:
    (result,) = targets([_ready("spoke")])
    assert isinstance(result, ClusterNotReady)
    assert "no server" in result.message


def test_different_servers_all_deploy() -> None:
    result = targets(
        [_ready("a", "https://a"), _ready("b", "https://b"), _ready("c", connection="InCluster")]
    )
    assert [type(target) for target in result] == [Deploy, Deploy, Deploy]
    assert [target.reason for target in result] == ["Deploy"] * 3


def test_nothing_selected_nothing_to_do() -> None:
    assert targets([]) == ()


# Properties.


@given(clusters=environments)
def test_one_target_per_cluster_in_input_order(clusters: list[SelectedCluster]) -> None:
    result = targets(clusters)
    assert [target.cluster for target in result] == [cluster.name for cluster in clusters]


@given(clusters=environments)
def test_a_cluster_not_ready_or_in_conflict_never_deploys(clusters: list[SelectedCluster]) -> None:
    for cluster, target in zip(clusters, targets(clusters), strict=True):
        if not _eligible(cluster):
            assert isinstance(target, ClusterNotReady)
        else:
            assert isinstance(target, Deploy | TargetTaken)


@given(clusters=environments)
def test_exactly_one_deploy_per_server_the_first_by_name(clusters: list[SelectedCluster]) -> None:
    result = targets(clusters)
    by_server: dict[str, list[str]] = defaultdict(list)
    for cluster in clusters:
        server = _server(cluster)
        if _eligible(cluster) and server is not None:
            by_server[server].append(cluster.name)
    deploys: dict[str, list[str]] = defaultdict(list)
    for target in result:
        if isinstance(target, Deploy):
            deploys[target.server].append(target.cluster)
    assert dict(deploys) == {server: [min(names)] for server, names in by_server.items()}


@given(clusters=environments)
def test_a_conflict_names_the_cluster_that_deploys(clusters: list[SelectedCluster]) -> None:
    result = targets(clusters)
    deploying = {target.server: target.cluster for target in result if isinstance(target, Deploy)}
    for cluster, target in zip(clusters, result, strict=True):
        if isinstance(target, TargetTaken):
            assert target.server == _server(cluster)
            assert deploying[target.server] == target.winner
            assert target.winner < target.cluster
            assert target.winner in target.message


@given(data=st.data(), clusters=environments)
def test_the_outcome_does_not_depend_on_the_order(
    data: st.DataObject, clusters: list[SelectedCluster]
) -> None:
    shuffled = data.draw(st.permutations(clusters))
    by_name = {target.cluster: target for target in targets(clusters)}
    assert {target.cluster: target for target in targets(shuffled)} == by_name


@given(clusters=environments)
def test_every_message_is_one_line(clusters: list[SelectedCluster]) -> None:
    result: tuple[Target, ...] = targets(clusters)
    for target in result:
        assert target.message
        assert "\n" not in target.message
        assert target.cluster in target.message or isinstance(target, Deploy)


@given(clusters=environments)
def test_deterministic(clusters: list[SelectedCluster]) -> None:
    assert targets(clusters) == targets(list(clusters))
