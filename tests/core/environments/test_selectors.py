"""Label selectors mean what they mean to the API server, and parsing never raises.

The last test asks the hub itself: an Environment selects the Clusters ``kubectl get -l`` shows, or
admins could not predict where Orders deploy.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kokumi.core.environments.selectors import (
    EVERYTHING,
    Operator,
    Requirement,
    Selector,
    SelectorError,
    parse,
)
from kokumi.testing.controlplane import APIServer
from tests.support.strategies import examples

# --- strategies ---------------------------------------------------------------------------------

# A small pool makes selectors and label sets share keys and values, so most examples are decided by
# the labels rather than by a key nobody carries.
KEYS = (
    "fleet",
    "region",
    "topology.kubernetes.io/region",
    "delivery.kokumi.dev/in-cluster",
    "A_b.c-9",
    "x",
    "in",  # the grammar's operators, and valid keys all the same
    "notin",
)
VALUES = ("", "edge", "eu", "us", "true", "Z_9.a-b", "in", "notin")

names = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True)
prefixes = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?){0,3}", fullmatch=True
)
random_keys = st.builds(lambda p, n: f"{p}/{n}" if p else n, st.none() | prefixes, names)
label_keys = st.sampled_from(KEYS) | random_keys
label_values = st.sampled_from(VALUES) | st.from_regex(
    r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", fullmatch=True
)
label_sets = st.dictionaries(label_keys, label_values, max_size=4)


@st.composite
def requirements(draw: st.DrawFn) -> dict[str, Any]:
    operator = draw(st.sampled_from(Operator))
    body: dict[str, Any] = {"key": draw(label_keys), "operator": operator.value}
    if operator in (Operator.IN, Operator.NOT_IN):
        body["values"] = draw(st.lists(label_values, min_size=1, max_size=3))
    elif draw(st.booleans()):
        body["values"] = []  # allowed: the API writes an empty list as well as none
    return body


@st.composite
def selector_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Valid selectors in their JSON form, as an Environment carries them."""
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["matchLabels"] = draw(st.dictionaries(label_keys, label_values, max_size=3))
    if draw(st.booleans()):
        body["matchExpressions"] = draw(st.lists(requirements(), max_size=3))
    return body


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)

# Near misses reach the deep checks that random JSON rarely gets past the first type test.
near_misses = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([*KEYS, *VALUES, *Operator, "Has", "in", "a/b/c", "-x", "x" * 64, "Ex.com/a"])
    | st.text(max_size=8)
    # Not JSON, but a caller could pass them: parse must not care.
    | st.binary(max_size=4)
    | st.just(float("nan"))
    | st.builds(object),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["matchLabels", "matchExpressions", "key", "operator", "values", "x"])
            | st.sampled_from(KEYS),
            children,
            max_size=4,
        )
    ),
    max_leaves=25,
)


def model(body: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The meaning as set algebra over (key, value) pairs, written apart from the code."""
    pairs = set(labels.items())
    if not set((body.get("matchLabels") or {}).items()) <= pairs:
        return False
    for requirement in body.get("matchExpressions") or []:
        key = requirement["key"]
        wanted = {(key, value) for value in requirement.get("values") or []}
        holds = {
            "In": bool(wanted & pairs),
            "NotIn": not wanted & pairs,
            "Exists": key in set(labels),
            "DoesNotExist": key not in set(labels),
        }[requirement["operator"]]
        if not holds:
            return False
    return True


# --- table --------------------------------------------------------------------------------------

EDGE_EU = {"fleet": "edge", "region": "eu"}

CASES: list[tuple[object, Mapping[str, str], bool, str]] = [
    # (selector, labels, selected, kubectl form)
    ({}, {}, True, ""),
    ({}, EDGE_EU, True, ""),
    ({"matchLabels": {"fleet": "edge"}}, EDGE_EU, True, "fleet=edge"),
    ({"matchLabels": {"fleet": "edge"}}, {"fleet": "core"}, False, "fleet=edge"),
    ({"matchLabels": {"fleet": "edge"}}, {}, False, "fleet=edge"),
    ({"matchLabels": {"fleet": ""}}, {"fleet": ""}, True, "fleet="),
    ({"matchLabels": {"fleet": ""}}, {}, False, "fleet="),
    (
        {"matchLabels": {"region": "eu", "fleet": "edge"}},
        {"fleet": "edge"},
        False,
        "fleet=edge,region=eu",
    ),
    (
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["us", "eu", "eu"]}]},
        EDGE_EU,
        True,
        "region in (eu,us)",
    ),
    (
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["us"]}]},
        {},
        False,
        "region in (us)",
    ),
    (
        {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["us"]}]},
        {},
        True,  # NotIn holds when the label is missing
        "region notin (us)",
    ),
    (
        {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu"]}]},
        EDGE_EU,
        False,
        "region notin (eu)",
    ),
    (
        {"matchExpressions": [{"key": "legacy", "operator": "Exists"}]},
        {"legacy": ""},
        True,
        "legacy",
    ),
    (
        {"matchExpressions": [{"key": "legacy", "operator": "DoesNotExist", "values": []}]},
        {"legacy": ""},
        False,
        "!legacy",
    ),
    (
        {
            "matchLabels": {"fleet": "edge"},
            "matchExpressions": [
                {"key": "region", "operator": "In", "values": ["us", "eu"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        },
        EDGE_EU,
        True,
        "fleet=edge,region in (eu,us),!legacy",
    ),
    (
        {"matchLabels": {"delivery.kokumi.dev/in-cluster": "true"}},
        {"delivery.kokumi.dev/in-cluster": "true"},
        True,
        "delivery.kokumi.dev/in-cluster=true",
    ),
    (  # null fields are absent, as the API server prunes them
        {"matchLabels": None, "matchExpressions": None},
        {"a": "b"},
        True,
        "",
    ),
]


@pytest.mark.parametrize(("body", "labels", "selected", "text"), CASES)
def test_table(body: object, labels: Mapping[str, str], selected: bool, text: str) -> None:
    selector = parse(body)
    assert isinstance(selector, Selector), selector
    assert selector.matches(labels) is selected
    assert str(selector) == text


P = "spec.clusterSelector"
ERRORS: list[tuple[object, str]] = [
    (None, f"{P} is missing, so it selects nothing: set it to {{}} to select everything"),
    ("fleet=edge", f"{P} must be an object with matchLabels and matchExpressions, not a string"),
    ([], f"{P} must be an object with matchLabels and matchExpressions, not a list"),
    ({"matchLabel": {}}, f"{P}.matchLabel is not a field of a label selector: use matchLabels"),
    ({"matchLabels": ["fleet"]}, f"{P}.matchLabels must be an object of label keys and values"),
    ({"matchLabels": {"fleet": 1}}, f'{P}.matchLabels["fleet"] must be a string, not a number'),
    ({"matchLabels": {"fleet": True}}, f'{P}.matchLabels["fleet"] must be a string, not a boolean'),
    ({"matchLabels": {"fleet": "a b"}}, f'{P}.matchLabels["fleet"] "a b" is not a valid label val'),
    ({"matchLabels": {"f": "x" * 64}}, f'{P}.matchLabels["f"] "{"x" * 64}" is not a valid label'),
    ({"matchLabels": {"-f": "x"}}, f'{P}.matchLabels key "-f" is not a valid label key: the name'),
    ({"matchLabels": {"a/b/c": "x"}}, f'{P}.matchLabels key "a/b/c" is not a valid label key: use'),
    (
        {"matchLabels": {"/b": "x"}},
        f'{P}.matchLabels key "/b" is not a valid label key: the prefix',
    ),
    ({"matchLabels": {"A.com/b": ""}}, f'{P}.matchLabels key "A.com/b" is not a valid label key'),
    ({"matchLabels": {"a/": ""}}, f'{P}.matchLabels key "a/" is not a valid label key: the name'),
    ({"matchLabels": {"x" * 64: ""}}, f"{P}.matchLabels key"),
    ({"matchLabels": {f"{'a' * 254}/b": ""}}, f"{P}.matchLabels key"),
    ({"matchExpressions": {"key": "a"}}, f"{P}.matchExpressions must be a list of requirements"),
    ({"matchExpressions": ["a"]}, f"{P}.matchExpressions[0] must be an object with key, operator"),
    (
        {"matchExpressions": [{"key": "a", "operator": "Exists", "value": "x"}]},
        f"{P}.matchExpressions[0].value is not a field of a requirement: use key, operator and",
    ),
    (
        {"matchExpressions": [{"operator": "Exists"}]},
        f"{P}.matchExpressions[0].key is missing: name the label",
    ),
    (
        {"matchExpressions": [{"key": 7, "operator": "Exists"}]},
        f"{P}.matchExpressions[0].key must be a string, not a number",
    ),
    (
        {"matchExpressions": [{"key": "a b", "operator": "Exists"}]},
        f'{P}.matchExpressions[0].key "a b" is not a valid label key',
    ),
    (
        {"matchExpressions": [{"key": "a"}]},
        f"{P}.matchExpressions[0].operator is missing: use one of In, NotIn, Exists, DoesNotExist",
    ),
    (
        {
            "matchExpressions": [
                {"key": "a", "operator": "Exists"},
                {"key": "b", "operator": "Has"},
            ]
        },
        f'{P}.matchExpressions[1].operator "Has" is not one of In, NotIn, Exists, DoesNotExist: ',
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "notin", "values": ["x"]}]},
        f'{P}.matchExpressions[0].operator "notin" is not one of In, NotIn, Exists, DoesNotExist:'
        " write NotIn",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": 1}]},
        f"{P}.matchExpressions[0].operator must be a string, not a number: write one of In",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        f"{P}.matchExpressions[0].values must hold at least one value for operator In: add",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
        f"{P}.matchExpressions[0].values must hold at least one value for operator NotIn",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        f"{P}.matchExpressions[0].values must be empty for operator Exists: remove values",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": [""]}]},
        f"{P}.matchExpressions[0].values must be empty for operator DoesNotExist: remove values",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "In", "values": "eu"}]},
        f"{P}.matchExpressions[0].values must be a list of label values, not a string: write it"
        " as a list, such as [eu]",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["eu", 1]}]},
        f"{P}.matchExpressions[0].values[1] must be a string, not a number: quote the value,"
        ' such as "1"',
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["e/u"]}]},
        f'{P}.matchExpressions[0].values[0] "e/u" is not a valid label value',
    ),
]


@pytest.mark.parametrize(("body", "start"), ERRORS)
def test_errors_name_the_field_and_the_fix(body: object, start: str) -> None:
    error = parse(body)
    assert isinstance(error, SelectorError)
    assert error.message.startswith(start), error.message
    assert "\n" not in error.message
    assert ": " in error.message.removeprefix(start[: len(P)])  # a fix follows the problem


def test_the_path_is_the_callers() -> None:
    error = parse({"matchLabels": {"a": 1}}, "spec.selector")
    assert isinstance(error, SelectorError)
    assert error.message.startswith('spec.selector.matchLabels["a"] must be a string')


def test_user_text_stays_on_one_line_and_short() -> None:
    error = parse({"matchLabels": {"a\nb\u2028" + "c" * 500: "x"}})
    assert isinstance(error, SelectorError)
    assert error.message.isprintable()
    assert len(error.message) < 400


def test_everything_is_the_empty_selector() -> None:
    assert parse({}) == EVERYTHING
    assert EVERYTHING.selects_everything
    assert str(EVERYTHING) == ""
    assert EVERYTHING.to_json() == {}


def test_equal_selectors_compare_and_hash_equal() -> None:
    a = parse(
        {
            "matchLabels": {"b": "1", "a": "2"},
            "matchExpressions": [{"key": "k", "operator": "In", "values": ["y", "x", "y"]}],
        }
    )
    b = Selector({"a": "2", "b": "1"}, [Requirement("k", Operator.IN, ("x", "y"))])
    assert a == b
    assert hash(a) == hash(b)


# --- properties ---------------------------------------------------------------------------------


@given(selector_bodies(), label_sets)
@example({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["a"]}]}, {})
@example({"matchLabels": {"x": ""}}, {"x": ""})
def test_matches_agrees_with_the_model(body: dict[str, Any], labels: dict[str, str]) -> None:
    selector = parse(body)
    assert isinstance(selector, Selector), selector
    assert selector.matches(labels) is model(body, labels)


@given(selector_bodies())
def test_json_form_round_trips(body: dict[str, Any]) -> None:
    selector = parse(body)
    assert isinstance(selector, Selector), selector
    assert parse(selector.to_json()) == selector
    assert parse(json.loads(json.dumps(body))) == selector


@given(json_values | near_misses)
@settings(max_examples=examples(300))
def test_parse_never_raises(obj: object) -> None:
    result = parse(obj)
    if isinstance(result, SelectorError):
        assert result.message.startswith(P)
        assert "\n" not in result.message
        assert "bug in Kokumi" not in result.message
    else:
        assert isinstance(result, Selector)
        assert parse(result.to_json()) == result


# --- the API server agrees ----------------------------------------------------------------------


def test_the_api_server_selects_the_same(hub: APIServer, namespace: str) -> None:
    """For random selectors and label sets, the hub's labelSelector answer equals ``matches``.

    Each example creates its ConfigMaps under a fresh name prefix in one namespace and lists the
    namespace with ``str(selector)``; only its own names count, so nothing needs deleting between
    examples.
    """
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    counter = itertools.count()
    with httpx.Client(
        base_url=hub.url, verify=hub.ssl_context("kokumi-admin", ["system:masters"])
    ) as client:

        @given(selector_bodies(), st.lists(label_sets, min_size=1, max_size=6))
        @settings(
            max_examples=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        def agrees(body: dict[str, Any], label_sets: list[dict[str, str]]) -> None:
            selector = parse(body)
            assert isinstance(selector, Selector), selector
            prefix = f"e{next(counter)}-{uuid.uuid4().hex[:6]}"
            for index, labels in enumerate(label_sets):
                created = client.post(
                    path,
                    json={
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"{prefix}-{index}", "labels": labels},
                    },
                )
                assert created.status_code == 201, created.text
            listed = client.get(path, params={"labelSelector": str(selector)})
            assert listed.status_code == 200, (str(selector), listed.text)
            theirs = {
                item["metadata"]["name"]
                for item in listed.json()["items"]
                if item["metadata"]["name"].startswith(prefix + "-")
            }
            ours = {
                f"{prefix}-{index}"
                for index, labels in enumerate(label_sets)
                if selector.matches(labels)
            }
            assert ours == theirs, (str(selector), label_sets)

        agrees()
