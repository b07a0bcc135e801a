"""A ClusterSource's ``spec.scope``: read by the Cluster's own parser, written on each Cluster it
makes, compared so that a change is one update, and patched so that what goes is removed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import (
    Candidate,
    Desired,
    cluster_body,
    cluster_patch,
    existing_of,
    settle,
)
from kokumi.core.sources.spec import ClusterSource, SourceInvalid, parse_source


def source_object(scope: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"from": "ClusterAPI"}
    if scope is not None:
        spec["scope"] = scope
    meta = {"name": "capi", "namespace": "team", "uid": "u-1", "generation": 1}
    return {"metadata": meta, "spec": spec}


def parsed(scope: object = None) -> ClusterSource:
    found = parse_source(source_object(scope))
    assert isinstance(found, ClusterSource)
    return found


def test_a_source_without_a_scope_gives_its_clusters_none() -> None:
    body = cluster_body(parsed(), Desired("w", "w-kubeconfig", {}))
    assert "scope" not in body["spec"]


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        ("team-a", "spec.scope is not an object"),
        ({"namespaces": ["Team"]}, "spec.scope.namespaces has 'Team', not a namespace name"),
        ({"clusterResources": True}, "spec.scope.clusterResources needs spec.scope.namespaces"),
        ({"namespaces": ["a", "a"]}, "names a namespace twice"),
    ],
)
def test_a_scope_a_cluster_would_refuse_makes_the_source_invalid(scope: object, says: str) -> None:
    found = parse_source(source_object(scope))
    assert isinstance(found, SourceInvalid)
    assert found.reason is Reason.INVALID_SPEC
    assert says in found.message and "\n" not in found.message


NAMES = st.lists(st.sampled_from(["a", "b", "team-a"]), min_size=1, max_size=3, unique=True)
SCOPES = st.one_of(st.none(), st.builds(api.Scope, NAMES.map(tuple), st.booleans()))


def _written(scope: api.Scope | None) -> dict[str, Any] | None:
    if scope is None:
        return None
    found: dict[str, Any] = {"namespaces": list(scope.namespaces)}
    if scope.cluster_resources:
        found["clusterResources"] = True
    return found


def _merge(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies a merge patch."""
    merged = dict(old)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@given(old=SCOPES, new=SCOPES)
def test_a_changed_scope_is_one_update_that_leaves_exactly_the_sources(
    old: api.Scope | None, new: api.Scope | None
) -> None:
    labels = {"delivery.kokumi.dev/cluster-source": "capi"}
    before = cluster_body(parsed(_written(old)), Desired("w", "w-kubeconfig", labels, scope=old))
    before["metadata"]["uid"] = "c-1"
    source = parsed(_written(new))
    there = existing_of(before)
    assert there.scope == old
    candidate = Candidate("w-kubeconfig", "w", {}, None, None)
    plan = settle(source, [candidate], {"w": there}, {"w": there})
    changed = old != new
    assert (len(plan.update), len(plan.kept)) == ((1, 0) if changed else (0, 1))
    desired = Desired(
        "w", "w-kubeconfig", {"delivery.kokumi.dev/cluster-source": "capi"}, scope=new
    )
    patch = cluster_patch(source, desired, before)
    assert isinstance(patch, dict)
    after = _merge(before, patch)
    assert after["spec"].get("scope") == _written(new)
    assert existing_of(after).scope == new
