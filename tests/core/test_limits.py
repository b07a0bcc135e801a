"""The bounds of tenant metadata: the judge, what is kept of an object, and how it reads."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api, limits
from kokumi.core.cluster.status import cluster_outcome
from kokumi.core.environments.status import environment_status
from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import existing_of
from kokumi.core.sources.spec import source_of

_text = st.text(st.characters(codec="utf-8"), max_size=40)
_maps = st.dictionaries(_text, _text, max_size=80)


def _bytes(entries: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in entries.items())


def _within(entries: dict[str, str], most: int, most_bytes: int) -> bool:
    return len(entries) <= most and _bytes(entries) <= most_bytes


@given(labels=_maps, annotations=_maps)
def test_the_judge_refuses_exactly_what_is_over_a_bound(
    labels: dict[str, str], annotations: dict[str, str]
) -> None:
    why = limits.judge({"labels": labels, "annotations": annotations}, "Cluster")
    labels_ok = _within(labels, limits.LABELS_MAX, limits.LABEL_BYTES_MAX)
    annotations_ok = _within(annotations, limits.ANNOTATIONS_MAX, limits.ANNOTATION_BYTES_MAX)
    assert (why is None) == (labels_ok and annotations_ok)
    if why is not None:
        assert "\n" not in why
        assert ("metadata.labels" in why) == (not labels_ok)
        assert ("metadata.annotations" in why) == (not annotations_ok)
        assert "remove" in why and "Cluster" in why


@given(
    count=st.integers(0, 200),
    width=st.integers(1, 400),
    field=st.sampled_from(["labels", "annotations"]),
)
def test_the_bounds_are_counts_and_bytes_at_their_edges(count: int, width: int, field: str) -> None:
    entries = {f"k{i:04d}": "v" * width for i in range(count)}
    why = limits.judge({field: entries}, "Environment")
    most, most_bytes = (
        (limits.LABELS_MAX, limits.LABEL_BYTES_MAX)
        if field == "labels"
        else (limits.ANNOTATIONS_MAX, limits.ANNOTATION_BYTES_MAX)
    )
    assert (why is None) == (count <= most and count * (5 + width) <= most_bytes)
    if why is not None:
        assert f"has {count} entr" in why and f"{count * (5 + width)} bytes" in why


@given(secret=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=8, max_size=30))
def test_the_message_says_counts_never_what_was_written(secret: str) -> None:
    secret = f"Q9{secret}"  # no word of the message itself
    labels = {f"{secret}-{i}": secret for i in range(limits.LABELS_MAX + 1)}
    annotations = {"note": secret * (limits.ANNOTATION_BYTES_MAX // len(secret) + 1)}
    why = limits.judge({"labels": labels, "annotations": annotations})
    assert why is not None
    assert secret not in why


def test_no_labels_or_odd_shapes_are_within_the_bounds() -> None:
    assert limits.judge({}) is None
    assert limits.judge({"labels": None, "annotations": "x"}) is None
    assert limits.judge({"labels": {"a": "b"}, "annotations": {"a": "b"}}) is None


def _cluster(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "big",
        "namespace": "team",
        "uid": "u-1",
        "generation": 3,
        "resourceVersion": "42",
        "finalizers": [api.FINALIZER],
        "labels": labels,
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": metadata,
        "spec": {"connection": "InCluster"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
    }


def test_an_object_over_the_bounds_is_kept_as_a_stub_that_says_why() -> None:
    obj = _cluster({f"k{i}": "v" for i in range(90_000)}, {"a": "b"})
    stub = limits.kept(obj)
    assert set(stub) == {"apiVersion", "kind", "metadata", "spec", "status", limits.OVER_BOUNDS}
    assert stub["spec"] == obj["spec"]
    assert stub["metadata"] == {
        "name": "big",
        "namespace": "team",
        "uid": "u-1",
        "generation": 3,
        "resourceVersion": "42",
        "finalizers": [api.FINALIZER],
    }
    assert stub[limits.OVER_BOUNDS] == limits.judge(obj["metadata"], "Cluster")
    assert limits.over_bounds(stub) == limits.over_bounds(obj)
    parsed = api.parse_cluster(stub)
    assert isinstance(parsed, api.Invalid)
    assert parsed.reason is Reason.OBJECT_TOO_LARGE
    assert parsed.metadata.labels == {} and parsed.metadata.finalizers == (api.FINALIZER,)
    assert parsed.metadata.resource_version == "42" and parsed.metadata.uid == "u-1"
    outcome = cluster_outcome(parsed)
    assert outcome.reason is Reason.OBJECT_TOO_LARGE and not outcome.ok
    # The object as read (a GET, the UI) reads the same.
    assert api.parse_cluster(obj) == parsed


def test_an_object_within_the_bounds_is_kept_without_its_annotations() -> None:
    labels = {f"k{i}": "v" for i in range(limits.LABELS_MAX)}
    obj = _cluster(labels, {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 1000})
    kept = limits.kept(obj)
    assert "annotations" not in kept["metadata"]
    assert kept["metadata"]["labels"] == labels
    assert limits.over_bounds(kept) is None
    parsed = api.parse_cluster(kept)
    assert isinstance(parsed, api.Cluster) and parsed.metadata.labels == labels


def test_an_environment_over_the_bounds_reports_it_in_its_ready_condition() -> None:
    huge = {"a": "x" * (limits.ANNOTATION_BYTES_MAX + 1)}
    obj: dict[str, Any] = {
        "kind": "Environment",
        "metadata": {"name": "prod", "namespace": "team", "generation": 2, "annotations": huge},
        "spec": {},
    }
    parsed = api.parse_environment(limits.kept(obj))
    assert isinstance(parsed, api.Invalid) and parsed.reason is Reason.OBJECT_TOO_LARGE
    ready = api.ready_condition(environment_status(parsed, []).conditions)
    assert ready is not None and ready.status == "False"
    assert ready.reason == Reason.OBJECT_TOO_LARGE and "Environment" in ready.message


def test_a_stub_keeps_its_controller_so_a_sources_cluster_stays_its_sources() -> None:
    """A ClusterSource's Cluster that a tenant pushed past the bounds: the stub keeps the
    controller reference (one, as the API server allows) and the spec, so the source still
    knows it as its own, and writes its labels back; no other owner is kept."""
    obj = _cluster({f"k{i}": "v" for i in range(limits.LABELS_MAX + 1)})
    source = {
        "apiVersion": "delivery.kokumi.dev/v1alpha1",
        "kind": "ClusterSource",
        "name": "capi",
        "uid": "s-1",
        "controller": True,
    }
    others = [{"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}", "uid": f"c-{i}"}
              for i in range(1000)]  # fmt: skip
    obj["metadata"]["ownerReferences"] = [*others, source]
    stub = limits.kept(obj)
    assert stub["metadata"]["ownerReferences"] == [source]
    assert source_of(stub) == ("capi", "s-1")
    assert existing_of(stub).owner == ("capi", "s-1")


def test_a_followed_object_keeps_only_the_annotations_it_may_carry() -> None:
    obj = {
        "metadata": {
            "name": "a",
            "namespace": "ws1",
            "annotations": {
                "example.com/owner": "team-a",
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}",
            },
        },
        "spec": {"connection": "InCluster"},
    }
    assert "annotations" not in limits.kept(obj)["metadata"]
    carried = limits.kept(obj, annotations=lambda key: key.startswith("example.com/"))
    assert carried["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert "annotations" not in limits.kept(obj, annotations=lambda _key: False)["metadata"]
