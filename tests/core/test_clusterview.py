"""The list's rules (its address, order, pages and status filters) and the overview's counts."""

from __future__ import annotations

import datetime
import urllib.parse
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import clusterview, overview
from kokumi.core.clusterview import Query, Row

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)

_labels = st.dictionaries(
    st.sampled_from(["region", "tier", "fleet", "example.com/team"]),
    st.sampled_from(["", "eu", "us", "prod", "dev", "a.b-c_d"]),
    max_size=3,
)


@st.composite
def rows(draw: st.DrawFn) -> Row:
    ready = draw(st.sampled_from(clusterview.READIES))
    reason = (
        "Ready"
        if ready == "True"
        else draw(
            st.sampled_from([clusterview.CHECKING, "Unreachable", "TLSError", "Unauthorized"])
        )
    )
    return Row(
        name=draw(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)),
        namespace=draw(st.sampled_from(["platform", "team-a", "team-b", "kokumi"])),
        connection="Kubeconfig",
        server="https://x.example:6443",
        version=draw(st.sampled_from(["-", "v1.9.0", "v1.10.2", "v1.36.3", "v1.36.10"])),
        ready=ready,
        reason=reason,
        message="",
        labels=tuple(sorted(draw(_labels).items())),
        age="1d",
        description="",
        created=f"2026-11-{draw(st.integers(1, 30)):02d}T08:00:00Z",
    )


def unique(found: list[Row]) -> list[Row]:
    seen: dict[tuple[str, str], Row] = {}
    for r in found:
        seen.setdefault((r.namespace, r.name), r)
    return list(seen.values())


fleets = st.lists(rows(), max_size=140).map(unique)

queries = st.builds(
    Query,
    namespace=st.sampled_from(["", "platform", "team-a"]),
    selector=st.sampled_from(["", "region=eu", "tier!=dev,fleet", "!region", "a in (b,c)"]),
    reason=st.sampled_from(["", "Ready", clusterview.CHECKING, "TLSError"]),
    ready=st.sampled_from(["", *clusterview.READIES]),
    sort=st.sampled_from(clusterview.SORTS),
    descending=st.booleans(),
    page=st.integers(1, 9),
)


def parsed(link: str) -> Query | str:
    params = dict(urllib.parse.parse_qsl(link.removeprefix("?")))
    return clusterview.parse_query(params)


@given(queries)
def test_every_link_reads_back_as_the_query_it_was_made_from(query: Query) -> None:
    assert parsed(query.link()) == query
    assert parsed(query.link(page=query.page + 1)) == Query(
        **{**_fields(query), "page": query.page + 1}
    )


@given(queries, st.sampled_from(clusterview.SORTS))
def test_a_sort_keeps_the_filters_and_goes_back_to_the_first_page(
    query: Query, column: str
) -> None:
    again = parsed(query.sorted_by(column))
    assert isinstance(again, Query)
    assert (again.namespace, again.selector, again.reason, again.ready) == (
        query.namespace, query.selector, query.reason, query.ready,
    )  # fmt: skip
    assert again.sort == column and again.page == 1
    # The heading of the column sorted by turns the order around; another starts ascending.
    assert again.descending == (not query.descending if column == query.sort else False)


def _fields(query: Query) -> dict[str, Any]:
    return {k: getattr(query, k) for k in
            ("namespace", "selector", "reason", "ready", "sort", "descending", "page")}  # fmt: skip


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"sort": "server"}, "sort must be one of name, namespace, ready, reason, version, age"),
        ({"order": "up"}, "order must be asc or desc"),
        ({"ready": "yes"}, "ready must be one of True, False, Unknown"),
        ({"page": "0"}, "page must be a whole number from 1"),
        ({"page": "-2"}, "page must be a whole number from 1"),
        ({"page": "two"}, "page must be a whole number from 1"),
        ({"page": "9" * 30}, "page must be a whole number from 1"),
        ({"selector": "a=" + "b" * 2000}, "selector is longer than 1024 characters"),
    ],
)
def test_an_address_the_list_cannot_follow_is_refused_in_one_line(
    params: dict[str, str], said: str
) -> None:
    refused = clusterview.parse_query(params)
    assert isinstance(refused, str)
    assert refused.startswith(said) and "\n" not in refused and len(refused) < 200


def test_the_default_address_is_the_api_servers_order() -> None:
    query = clusterview.parse_query({})
    assert query == Query() and isinstance(query, Query)
    assert query.in_api_order and query.link() == ""
    assert not Query(reason="Ready").in_api_order
    assert not Query(sort="name").in_api_order
    assert not Query(descending=True).in_api_order


@given(fleets, st.integers(1, 7))
def test_the_pages_hold_every_row_once_in_order(fleet: list[Row], size: int) -> None:
    pages = clusterview.pages_of(len(fleet), size)
    shown = [clusterview.window(fleet, p, size) for p in range(1, pages + 1)]
    assert [r for w in shown for r in w.rows] == fleet
    for w in shown:
        assert w.total == len(fleet) and w.pages == pages
        assert len(w.rows) == (w.last - w.first + 1 if w.rows else 0)
        if w.rows:
            assert fleet[w.first - 1] == w.rows[0] and fleet[w.last - 1] == w.rows[-1]
    # Past the last page: the last page, not an empty one.
    assert clusterview.window(fleet, pages + 3, size) == shown[-1]


def test_a_page_says_which_rows_it_shows() -> None:
    fleet = [clusterview.row(_cluster(f"c{i:03d}"), NOW) for i in range(120)]
    second = clusterview.window(fleet, 2)
    assert (second.first, second.last, second.total, second.pages) == (51, 100, 120, 3)
    assert clusterview.window([], 1) == clusterview.Window((), 0, 1, 1)
    assert clusterview.window([], 1).first == 0


@given(fleets, st.sampled_from(clusterview.SORTS), st.booleans())
def test_each_order_is_the_columns_and_the_other_way_reversed(
    fleet: list[Row], sort: str, descending: bool
) -> None:
    result = clusterview.ordered(fleet, sort, descending)
    assert sorted(result, key=id) == sorted(fleet, key=id)
    assert clusterview.ordered(fleet, sort, not descending) == result[::-1]


def test_versions_sort_as_numbers_and_the_youngest_comes_first_by_age() -> None:
    fleet = [
        attrs.evolve(_row("a"), version="v1.10.0", created="2026-11-01T00:00:00Z"),
        attrs.evolve(_row("b"), version="v1.9.3", created="2026-11-20T00:00:00Z"),
        attrs.evolve(_row("c"), version="-", created="2026-11-10T00:00:00Z"),
    ]
    by_version = clusterview.ordered(fleet, "version", False)
    assert [r.version for r in by_version] == ["v1.9.3", "v1.10.0", "-"]
    assert [r.name for r in clusterview.ordered(fleet, "age", False)] == ["b", "c", "a"]


@given(fleets, queries)
def test_the_status_filters_keep_exactly_the_rows_with_that_status(
    fleet: list[Row], query: Query
) -> None:
    kept = clusterview.select(fleet, query)
    assert kept == [
        r
        for r in fleet
        if r.reason == (query.reason or r.reason) and r.ready == (query.ready or r.ready)
    ]


def _cluster(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "platform"}, "spec": {}, "status": status}


def _row(name: str) -> Row:
    return clusterview.row(_cluster(name), NOW)


# --- the overview -------------------------------------------------------------------------------

_label_values = st.sampled_from(
    ["", "eu", "us", "prod", "dev", "a.b-c_d"] + [f"v{i}" for i in range(60)]
)


@st.composite
def many_valued_rows(draw: st.DrawFn) -> Row:
    """Rows whose ``id`` label has up to 60 values: more than an overview shows on their own."""
    base = draw(rows())
    labels = dict(base.labels)
    if draw(st.booleans()):
        labels["id"] = draw(_label_values)
    return attrs.evolve(base, labels=tuple(sorted(labels.items())))


def _groups(view: overview.Overview) -> list[tuple[str, tuple[overview.Count, ...]]]:
    return [
        ("ready", view.ready), ("reasons", view.reasons), ("namespaces", view.namespaces),
        *((f"label {lc.key}", lc.counts) for lc in view.labels),
    ]  # fmt: skip


scopes = st.builds(
    Query,
    namespace=st.sampled_from(["", "platform"]),
    selector=st.sampled_from(["", "fleet=edge", "tier!=dev"]),
)


@given(
    st.lists(many_valued_rows(), max_size=160).map(unique),
    st.lists(st.sampled_from(["region", "tier", "id", "absent"]), max_size=3),
    scopes,
)
def test_each_group_of_counts_sums_to_the_total_and_each_link_lists_exactly_what_it_counts(
    fleet: list[Row], keys: list[str], scope: Query
) -> None:
    view = overview.overview(fleet, label_keys=keys)
    assert view.total == len(fleet)
    assert view.ready_count == sum(1 for r in fleet if r.ready == "True")
    if keys:
        assert [lc.key for lc in view.labels] == list(dict.fromkeys(keys))
    for group, counts in _groups(view):
        assert sum(c.count for c in counts) == len(fleet), group
        seen: set[tuple[str, str]] = set()
        for c in counts:
            assert c.count > 0, (group, c)
            chosen = {(r.namespace, r.name) for r in fleet if c.filter.matches(r)}
            assert len(chosen) == c.count, (group, c)
            assert not chosen & seen, (group, c)  # no Cluster counted twice in a group
            seen |= chosen
            # The link is the filter and the overview's scope, and reads back as that Query.
            linked = parsed(c.filter.query(scope).link())
            assert isinstance(linked, Query)
            assert linked.reason == c.filter.reason and linked.ready == c.filter.ready
            assert linked.namespace == (c.filter.namespace or scope.namespace)
            assert linked.selector == ",".join(
                p for p in (scope.selector, str(c.filter.selector)) if p
            )


@given(st.lists(many_valued_rows(), max_size=160).map(unique))
def test_unasked_the_overview_counts_the_few_valued_keys_most_used(fleet: list[Row]) -> None:
    view = overview.overview(fleet)
    assert len(view.labels) <= overview.MAX_LABEL_KEYS
    values: dict[str, set[str]] = {}
    for r in fleet:
        for k, v in r.labels:
            values.setdefault(k, set()).add(v)
    for counted in view.labels:
        assert len(values[counted.key]) <= overview.MAX_LABEL_VALUES
        assert len(counted.counts) <= overview.MAX_LABEL_VALUES + 1  # its values + without
    left_out = {k for k, v in values.items() if len(v) > overview.MAX_LABEL_VALUES}
    assert left_out.isdisjoint(lc.key for lc in view.labels)


def test_an_asked_key_of_many_values_shows_the_most_used_and_counts_the_rest_together() -> None:
    fleet = [
        attrs.evolve(_row(f"c{i:03d}"), labels=(("id", f"v{i % 70:02d}"),)) for i in range(140)
    ] + [_row("bare")]
    (ids,) = overview.overview(fleet, label_keys=["id"]).labels
    assert len(ids.counts) == overview.MAX_VALUES_SHOWN + 2
    others, without = ids.counts[-2:]
    assert (others.title, others.count) == ("20 other values", 40)
    assert (without.title, without.count) == ("without id", 1)
    assert str(without.filter.selector) == "!id"
    assert str(others.filter.selector).startswith("id,id notin (v00,")
    assert ids.counts[0].title == "v00" and str(ids.counts[0].filter.selector) == "id=v00"


def test_an_empty_label_value_is_counted_apart_from_no_label() -> None:
    fleet = [attrs.evolve(_row("a"), labels=(("tier", ""),)), _row("b")]
    (tier,) = overview.overview(fleet, label_keys=["tier"]).labels
    assert [(c.title, c.count, str(c.filter.selector)) for c in tier.counts] == [
        ('""', 1, "tier="), ("without tier", 1, "!tier"),
    ]  # fmt: skip


def test_a_cluster_source_is_read_from_its_status_whatever_it_holds() -> None:
    source = {
        "metadata": {"name": "capi", "namespace": "platform"},
        "spec": {"from": "Secrets"},
        "status": {
            "matched": 3, "made": 1, "notUsable": 1, "conflicts": 1, "more": 4,
            "notImported": [
                {"secret": "a-kubeconfig", "cluster": "a", "reason": "InvalidKubeconfig",
                 "message": "the kubeconfig\nhas no current context"},
                "not an entry",
            ],
            "conditions": [{"type": "Ready", "status": "False", "reason": "NotAllImported",
                            "message": "2 of 3 Secrets have no Cluster"}],
        },
    }  # fmt: skip
    view = overview.source_view(source, "delivery.kokumi.dev/cluster-source")
    assert (view.origin, view.ready, view.reason) == ("Secrets", "False", "NotAllImported")
    assert (view.matched, view.made, view.not_usable, view.conflicts, view.more) == (3, 1, 1, 1, 4)
    assert view.not_imported == (
        ("a-kubeconfig", "a", "InvalidKubeconfig", "the kubeconfig has no current context"),
    )
    made = view.made_filter.query(Query())
    assert (made.namespace, made.selector) == (
        "platform",
        "delivery.kokumi.dev/cluster-source=capi",
    )
    # A source the manager has not read yet, or one with a status of the wrong shapes.
    for status in (None, {}, {"matched": "three", "made": -1, "notImported": "x"}):
        odd = overview.source_view({"metadata": {"name": "x"}, "status": status}, "k")
        assert (odd.reason, odd.matched, odd.made, odd.not_imported) == (
            clusterview.CHECKING, 0, 0, (),
        )  # fmt: skip
        assert odd.origin == "ClusterAPI"
