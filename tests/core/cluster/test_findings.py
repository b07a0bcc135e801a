"""Which Clusters' checks ask whether the credential may list cluster-wide."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.cluster.findings import lists_cluster_wide

NAMES = st.lists(st.from_regex(r"[a-z]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True), unique=True)


def _cluster(spec: dict[str, Any]) -> api.Cluster:
    parsed = api.parse_cluster({"metadata": {"name": "c", "namespace": "team"}, "spec": spec})
    assert isinstance(parsed, api.Cluster), parsed
    return parsed


def _kubeconfig(**extra: Any) -> dict[str, Any]:
    return {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "s"}}, **extra}


@given(NAMES, st.booleans())
def test_only_a_kubeconfig_cluster_without_namespaces_is_asked(
    namespaces: list[str], cluster_resources: bool
) -> None:
    scope: dict[str, Any] = {"namespaces": namespaces}
    if namespaces:
        scope["clusterResources"] = cluster_resources
    assert lists_cluster_wide(_cluster(_kubeconfig(scope=scope))) == (not namespaces)


def test_no_scope_is_asked_and_in_cluster_never() -> None:
    assert lists_cluster_wide(_cluster(_kubeconfig()))
    assert not lists_cluster_wide(_cluster({"connection": "InCluster"}))
