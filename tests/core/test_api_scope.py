"""``spec.scope`` read as the CRD's schema and rules say, for objects the schema never saw.

The CRD refuses a bad scope at admission; a Cluster written before the field had a schema, or
with validation off, must still end in a one-line message that names the field and the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api

NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


def _cluster(spec_extra: dict[str, Any], connection: str = "Kubeconfig") -> dict[str, Any]:
    spec: dict[str, Any] = {"connection": connection, **spec_extra}
    if connection == "Kubeconfig":
        spec["kubeconfig"] = {"secretRef": {"name": "spoke"}}
    return {"metadata": {"name": "c", "namespace": "team"}, "spec": spec}


@given(st.lists(NAMES, min_size=1, max_size=64, unique=True), st.booleans())
def test_a_scope_the_schema_allows_is_read_as_written(names: list[str], whole: bool) -> None:
    parsed = api.parse_cluster(
        _cluster({"scope": {"namespaces": names, "clusterResources": whole}})
    )
    assert isinstance(parsed, api.Cluster)
    assert parsed.spec.scope == api.Scope(tuple(names), whole)
    assert api.converter.unstructure(parsed.spec)["scope"]["namespaces"] == names


def test_no_scope_is_none_and_writes_nothing() -> None:
    parsed = api.parse_cluster(_cluster({}))
    assert isinstance(parsed, api.Cluster)
    assert parsed.spec.scope is None
    assert "scope" not in api.converter.unstructure(parsed.spec)


@pytest.mark.parametrize(
    ("scope", "connection", "says"),
    [
        ({"namespaces": ["a"]}, "InCluster", "spec.scope is set on an InCluster Cluster"),
        ("team-a", "Kubeconfig", "spec.scope is not an object"),
        ({"namespaces": "team-a"}, "Kubeconfig", "spec.scope.namespaces is not a list"),
        ({"namespaces": ["Team"]}, "Kubeconfig", "'Team', not a namespace name"),
        ({"namespaces": ["a" * 64]}, "Kubeconfig", "not a namespace name"),
        ({"namespaces": ["a", "a"]}, "Kubeconfig", "names a namespace twice"),
        ({"namespaces": [f"n{i}" for i in range(65)]}, "Kubeconfig", "65 namespaces, over 64"),
        ({"namespaces": ["a"], "clusterResources": "yes"}, "Kubeconfig", "not true or false"),
        ({"clusterResources": True}, "Kubeconfig", "clusterResources needs spec.scope.namespaces"),
    ],
)
def test_a_scope_the_schema_refuses_is_invalid_with_the_fix(
    scope: object, connection: str, says: str
) -> None:
    parsed = api.parse_cluster(_cluster({"scope": scope}, connection))
    assert isinstance(parsed, api.Invalid)
    assert says in parsed.message
    assert "\n" not in parsed.message and len(parsed.message) < 200
