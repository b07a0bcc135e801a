"""What the sources' rules read of the actor's stores, without a server: a source or a Cluster API
cluster kept as a stub over the metadata bounds, the Secrets of one namespace a source takes, and
how an update of a Cluster is written over the Cluster as the store keeps it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import limits
from kokumi.core.reasons import Reason
from kokumi.core.sources import clusterapi
from kokumi.core.sources.plan import Desired, cluster_body, cluster_patch
from kokumi.core.sources.secretplan import Labelled, matched_secrets
from kokumi.core.sources.secretsource import parse_shape
from kokumi.core.sources.spec import ClusterSource, SourceInvalid, kept_source, parse_source

TOO_MANY = {f"k{i:03d}": "v" for i in range(limits.LABELS_MAX + 1)}


def source_object(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "ClusterSource",
        "metadata": {
            "name": "capi",
            "namespace": "platform",
            "uid": "uid-capi",
            "generation": 4,
            "labels": labels or {},
        },
        "spec": {"from": "ClusterAPI", "labels": {"team": "a"}},
    }


def test_a_source_within_the_bounds_reads_as_written_and_a_stub_plans_nothing() -> None:
    within = limits.kept(source_object({"a": "b"}))
    assert kept_source(within) == parse_source(within)
    assert isinstance(kept_source(within), ClusterSource)
    stub = limits.kept(source_object(TOO_MANY))
    read = kept_source(stub)
    assert isinstance(read, SourceInvalid)
    assert (read.name, read.namespace, read.uid, read.generation) == (
        "capi",
        "platform",
        "uid-capi",
        4,
    )
    assert read.reason is Reason.OBJECT_TOO_LARGE
    assert read.message == limits.over_bounds(stub)


def test_a_capi_cluster_over_the_bounds_exists_in_the_view_without_labels() -> None:
    small = {"metadata": {"name": "a", "uid": "uid-a", "labels": {"env": "prod"}}}
    big = limits.kept({"metadata": {"name": "b", "uid": "uid-b", "labels": TOO_MANY}})
    view = clusterapi.view_of(True, [small, big])
    assert view.readable
    assert view.labels == {"a": {"env": "prod"}, "b": {}}
    assert view.uids == {"a": "uid-a", "b": "uid-b"}
    assert view.over == {"b": limits.over_bounds(big)}
    assert not clusterapi.view_of(False, []).readable


def test_only_the_namespaces_capi_kubeconfig_secrets_are_taken() -> None:
    labels = {
        ("platform", "w-kubeconfig"): {clusterapi.CAPI_CLUSTER_NAME: "w"},
        ("platform", "w-ca"): {clusterapi.CAPI_CLUSTER_NAME: "w"},
        ("platform", "plain"): {"team": "a"},
        ("other", "v-kubeconfig"): {clusterapi.CAPI_CLUSTER_NAME: "v"},
    }
    assert clusterapi.kubeconfig_secrets("platform", labels) == {"w-kubeconfig": "w"}
    assert clusterapi.kubeconfig_secrets("nowhere", labels) == {}


def test_matched_secrets_that_name_no_cluster_need_no_read() -> None:
    shape = parse_shape(
        "Secrets",
        {"secretSelector": {"matchLabels": {"fleet": "edge"}}, "naming": {"label": "name"}},
    )
    assert not isinstance(shape, tuple), shape
    labels = {
        ("edge", "s1"): {"fleet": "edge", "name": "one"},
        ("edge", "s2"): {"fleet": "edge", "name": "Not A Name"},
        ("edge", "s3"): {"fleet": "core", "name": "three"},
        ("other", "s4"): {"fleet": "edge", "name": "four"},
    }
    named, unnamed = matched_secrets(shape, "edge", labels)
    assert named == {"s1": {"fleet": "edge", "name": "one"}}
    assert unnamed == [Labelled("s2", {"fleet": "edge", "name": "Not A Name"})]


def source() -> ClusterSource:
    parsed = parse_source(source_object())
    assert isinstance(parsed, ClusterSource)
    return parsed


_keys = st.sampled_from(["env", "team", "zone", "tier"])
_labels = st.dictionaries(_keys, st.sampled_from(["a", "b"]), max_size=4)


@given(old=_labels, new=_labels, version=st.one_of(st.none(), st.sampled_from(["1", "42"])))
def test_an_update_drops_the_labels_the_source_no_longer_gives_on_the_version_kept(
    old: dict[str, str], new: dict[str, str], version: str | None
) -> None:
    desired = Desired("w", "w-kubeconfig", new)
    meta: dict[str, Any] = {"name": "w", "labels": old}
    if version is not None:
        meta["resourceVersion"] = version
    patch = cluster_patch(source(), desired, {"metadata": meta})
    assert isinstance(patch, dict)
    assert patch["spec"] == cluster_body(source(), desired)["spec"]
    assert patch["metadata"]["resourceVersion"] == version
    merged = {**old, **patch["metadata"]["labels"]}
    assert {k: v for k, v in merged.items() if v is not None} == new


@given(new=_labels, version=st.one_of(st.none(), st.sampled_from(["1", "42"])))
def test_an_update_of_a_stub_replaces_every_label_tested_on_its_version(
    new: dict[str, str], version: str | None
) -> None:
    desired = Desired("w", "w-kubeconfig", new)
    meta: dict[str, Any] = {"name": "w", "labels": TOO_MANY}
    if version is not None:
        meta["resourceVersion"] = version
    patch = cluster_patch(source(), desired, limits.kept({"metadata": meta}))
    assert isinstance(patch, list)
    tests = [op for op in patch if op["op"] == "test"]
    expected = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
    assert tests == (expected if version is not None else [])
    assert patch[len(tests) :] == [
        {"op": "add", "path": "/metadata/labels", "value": new},
        {"op": "add", "path": "/spec", "value": cluster_body(source(), desired)["spec"]},
    ]
