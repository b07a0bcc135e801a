"""The per-namespace selection index gives what a pass from scratch gives (no server needed).

The Environments actor keeps an index up to date per change instead of recomputing every Cluster
of a namespace; whatever the order of changes, the statuses it writes and the selection it tells
the Cluster actors must be those of the from-scratch computation over the same Clusters.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.environments import selectors
from kokumi.core.environments.selection import Entry, NamespaceIndex
from kokumi.core.environments.status import environment_status, selection_status
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from tests.support.strategies import examples

NAMES = [f"c{i}" for i in range(8)]
SELECTORS = {
    "all": {},
    "red": {"matchLabels": {"colour": "red"}},
    "not-blue": {"matchExpressions": [{"key": "colour", "operator": "NotIn", "values": ["blue"]}]},
    "tier": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
}


def _cluster(
    name: str, labels: dict[str, str], connection: str, ready: bool, reason: str, server: str | None
) -> api.Cluster:
    spec: dict[str, Any] = {"connection": connection}
    if connection == "Kubeconfig":
        spec["kubeconfig"] = {"secretRef": {"name": name}}
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": reason,
                "message": f"{reason} {name}",
                "lastTransitionTime": "2026-11-30T12:00:00Z",
            }
        ]
    }
    if server is not None:
        status["server"] = server
    parsed = api.parse_cluster(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels},
            "spec": spec,
            "status": status,
        }
    )
    assert isinstance(parsed, api.Cluster), parsed
    return parsed


def _environment(name: str, selector: str) -> api.Environment:
    parsed = api.parse_environment(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 2},
            "spec": {"clusterSelector": SELECTORS[selector]},
        }
    )
    assert isinstance(parsed, api.Environment)
    return parsed


clusters = st.builds(
    _cluster,
    name=st.sampled_from(NAMES),
    labels=st.dictionaries(
        st.sampled_from(["colour", "tier"]), st.sampled_from(["red", "blue"]), max_size=2
    ),
    connection=st.sampled_from(["Kubeconfig", "InCluster"]),
    ready=st.booleans(),
    reason=st.sampled_from(["Ready", "Unreachable", "ClusterConflict"]),
    # Few servers, so that Clusters share one and only the first by name deploys.
    server=st.sampled_from(
        [None, "https://a.example:6443", "https://a.example:6443/", "https://b.example"]
    )
    | st.just(IN_CLUSTER_SERVER),
)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), clusters),
        st.tuples(st.just("remove"), st.sampled_from(NAMES)),
        st.tuples(
            st.just("environment"),
            st.tuples(st.sampled_from(["e1", "e2"]), st.sampled_from(sorted(SELECTORS))),
        ),
        st.tuples(st.just("drop"), st.sampled_from(["e1", "e2"])),
    ),
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(operations=operations, listed=st.integers(min_value=1, max_value=4))
def test_the_index_agrees_with_a_pass_from_scratch(
    operations: list[tuple[str, Any]], listed: int
) -> None:
    index = NamespaceIndex()
    present: dict[str, api.Cluster] = {}
    environments: dict[str, str] = {}
    for kind, value in operations:
        if kind == "put":
            index.put(Entry.of(value))
            present[value.metadata.name] = value
        elif kind == "remove":
            index.remove(value)
            present.pop(value, None)
        elif kind == "environment":
            name, selector = value
            parsed = selectors.parse(SELECTORS[selector])
            assert isinstance(parsed, selectors.Selector)
            for _ in index.set_environment(name, parsed, chunk=3):
                pass
            environments[name] = selector
        else:
            index.drop_environment(value)
            environments.pop(value, None)

        by_name = [present[name] for name in sorted(present)]
        chosen: set[str] = set()
        for name, selector in environments.items():
            environment = _environment(name, selector)
            parsed = selectors.parse(SELECTORS[selector])
            assert isinstance(parsed, selectors.Selector)
            chosen |= {c.metadata.name for c in by_name if parsed.matches(c.metadata.labels)}
            now = "2026-11-30T12:00:00Z"
            expected = environment_status(environment, by_name, listed=listed, now=now)
            got = selection_status(environment, parsed, index.summary(name, listed), now=now)
            assert got == expected
        assert index.selected_names() == chosen
        assert {name for name in present if index.selected(name)} == chosen
        # Which Environments select each Cluster: what its Argo CD Secret carries as labels.
        for cluster in by_name:
            selecting = tuple(
                sorted(
                    name
                    for name, selector in environments.items()
                    if _matches(selector, cluster.metadata.labels)
                )
            )
            assert index.selecting(cluster.metadata.name) == selecting
        assert set(index.environments()) == set(environments)


def _matches(selector: str, labels: Any) -> bool:
    parsed = selectors.parse(SELECTORS[selector])
    assert isinstance(parsed, selectors.Selector)
    return parsed.matches(labels)


def test_a_changed_cluster_is_touched_and_a_rebuild_touches_what_it_selects() -> None:
    index = NamespaceIndex()
    red = _cluster("c1", {"colour": "red"}, "Kubeconfig", True, "Ready", "https://a.example")
    blue = _cluster("c2", {"colour": "blue"}, "Kubeconfig", True, "Ready", "https://b.example")
    index.put(Entry.of(red))
    index.put(Entry.of(blue))
    assert index.touched == {"c1", "c2"}
    index.touched = set()
    selector = selectors.parse(SELECTORS["red"])
    assert isinstance(selector, selectors.Selector)
    for _ in index.set_environment("e", selector):
        pass
    assert index.touched == {"c1"}
    assert index.selected("c1") and not index.selected("c2")
    summary = index.summary("e", 50)
    assert (summary.selected, summary.deploying, summary.held_total) == (1, 1, 0)
