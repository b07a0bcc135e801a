"""The per-Cluster series of /metrics: they appear with a Cluster, follow its status, go with it.

Alerts name the Cluster from these (deploy/monitoring/prometheus-rule.yaml), so a series left
behind by a deleted Cluster would page for a Cluster nobody has any more.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kokumi.actors.metrics import Metrics
from kokumi.core import api
from kokumi.core.registry.carry import Carry
from kokumi.kube.watch import Resync, WatchEvent

PER_CLUSTER = ("kokumi_cluster_ready", "kokumi_cluster_info", "kokumi_cluster_registration")


def cluster(
    name: str,
    *,
    ready: tuple[str, str] | None = None,
    server: str | None = None,
    version: str | None = None,
    holds: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready[0], "reason": ready[1]}]
    if server is not None:
        status["server"] = server
    if version is not None:
        status["kubernetesVersion"] = version
    metadata: dict[str, Any] = {"namespace": "team", "name": name}
    if holds:
        metadata["finalizers"] = [api.FINALIZER]
    return {"metadata": metadata, "status": status}


def per_cluster(metrics: Metrics) -> dict[str, set[tuple[tuple[tuple[str, str], ...], float]]]:
    """Each per-Cluster family's samples, read back from the text a scrape gets."""
    text = generate_latest(metrics.exposition()).decode()
    return {
        family.name: {(tuple(sorted(s.labels.items())), s.value) for s in family.samples}
        for family in text_string_to_metric_families(text)
        if family.name in PER_CLUSTER
    }


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": "team", **pairs}.items()))


def test_a_new_cluster_has_its_info_and_registration_but_no_ready_before_its_check() -> None:
    metrics = Metrics()
    metrics.clusters_seen(WatchEvent("ADDED", cluster("edge")))
    assert per_cluster(metrics) == {
        "kokumi_cluster_ready": set(),
        "kokumi_cluster_info": {
            (labels(name="edge", server="", kubernetes_version=""), 1.0),
        },
        "kokumi_cluster_registration": {(labels(name="edge", state="none"), 1.0)},
    }


def test_the_series_follow_the_status_one_series_per_cluster() -> None:
    metrics = Metrics()
    metrics.clusters_seen(Resync((cluster("edge"), cluster("core"))))
    metrics.clusters_seen(
        WatchEvent("MODIFIED", cluster("edge", ready=("False", "Unreachable"), server="https://e"))
    )
    metrics.clusters_seen(
        WatchEvent("MODIFIED", cluster("core", ready=("False", "ClusterConflict")))
    )
    got = per_cluster(metrics)
    assert got["kokumi_cluster_ready"] == {
        (labels(name="edge", reason="Unreachable"), 0.0),
        (labels(name="core", reason="ClusterConflict"), 0.0),
    }
    assert (labels(name="core", state="waiting"), 1.0) in got["kokumi_cluster_registration"]

    ready = cluster("edge", ready=("True", "Ready"), server="https://e", version="v1.31.2")
    metrics.clusters_seen(
        WatchEvent(
            "MODIFIED", {**ready, "metadata": {**ready["metadata"], "finalizers": [api.FINALIZER]}}
        )
    )
    got = per_cluster(metrics)
    # The reason in force only: the Unreachable series is gone, not left at 0 beside it.
    assert {s for s in got["kokumi_cluster_ready"] if ("name", "edge") in s[0]} == {
        (labels(name="edge", reason="Ready"), 1.0)
    }
    assert {s for s in got["kokumi_cluster_info"] if ("name", "edge") in s[0]} == {
        (labels(name="edge", server="https://e", kubernetes_version="v1.31.2"), 1.0)
    }
    assert {s for s in got["kokumi_cluster_registration"] if ("name", "edge") in s[0]} == {
        (labels(name="edge", state="held"), 1.0)
    }


def test_the_series_go_with_the_cluster_deleted_or_missed_by_the_watch() -> None:
    metrics = Metrics()
    edge = cluster("edge", ready=("False", "Unreachable"))
    core = cluster("core", ready=("True", "Ready"), holds=True)
    gone = cluster("gone", ready=("True", "Ready"))
    metrics.clusters_seen(Resync((edge, core, gone)))
    metrics.clusters_seen(WatchEvent("DELETED", edge))
    metrics.clusters_seen(Resync((core,)))  # gone went while the watch was away
    got = per_cluster(metrics)
    for family in PER_CLUSTER:
        assert {dict(s[0])["name"] for s in got[family]} == {"core"}, family


def gauge(metrics: Metrics, name: str) -> dict[str, float]:
    """The samples of ``name`` on /metrics, by their first label's value (``""``: none)."""
    text = generate_latest(metrics.exposition()).decode()
    return {
        next(iter(s.labels.values()), ""): s.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for s in family.samples
    }


def test_every_shard_is_reported_held_or_not() -> None:
    metrics = Metrics()
    metrics.held({0: False, 1: True, 2: False})
    assert gauge(metrics, "kokumi_shard_held") == {"0": 0.0, "1": 1.0, "2": 0.0}
    assert gauge(metrics, "kokumi_leader") == {"": 1.0}
    metrics.held({0: False, 1: False, 2: False})
    assert gauge(metrics, "kokumi_leader") == {"": 0.0}


def carried(metrics: Metrics) -> set[tuple[tuple[str, str], ...]]:
    text = generate_latest(metrics.exposition()).decode()
    return {
        tuple(sorted(s.labels.items()))
        for family in text_string_to_metric_families(text)
        if family.name == "kokumi_cluster_labels"
        for s in family.samples
    }


def labelled(name: str, **pairs: str) -> dict[str, Any]:
    obj = cluster(name)
    obj["metadata"]["labels"] = pairs
    return obj


def test_no_carried_labels_no_labels_series() -> None:
    metrics = Metrics()
    metrics.clusters_seen(WatchEvent("ADDED", labelled("edge", fleet="edge")))
    assert carried(metrics) == set()


def test_carried_labels_follow_the_cluster_and_nothing_else_goes() -> None:
    metrics = Metrics()
    metrics.fleet.carry = Carry.parse(["fleet", "example.com/*"])
    metrics.clusters_seen(
        WatchEvent("ADDED", labelled("a", fleet="edge", secret="x", **{"example.com/tier": "1"}))
    )
    metrics.clusters_seen(WatchEvent("ADDED", labelled("b")))
    assert carried(metrics) == {
        labels(name="a", label_fleet="edge", label_example_com_tier="1"),
        labels(name="b", label_fleet="", label_example_com_tier=""),
    }
    metrics.clusters_seen(WatchEvent("MODIFIED", labelled("a", fleet="core")))
    assert carried(metrics) == {
        labels(name="a", label_fleet="core"),
        labels(name="b", label_fleet=""),
    }
    metrics.clusters_seen(WatchEvent("DELETED", labelled("a")))
    assert carried(metrics) == {labels(name="b")}


def test_keys_that_read_alike_to_prometheus_are_told_apart_the_same_way_every_scrape() -> None:
    metrics = Metrics()
    metrics.fleet.carry = Carry.parse(["a.b", "a_b", "a-b"])
    metrics.clusters_seen(
        WatchEvent("ADDED", labelled("c", **{"a.b": "1", "a_b": "2", "a-b": "3"}))
    )
    assert carried(metrics) == {
        labels(name="c", label_a_b="3", label_a_b_conflict1="1", label_a_b_conflict2="2")
    }
