"""The carry allow-list: what goes from a Cluster onto its Argo CD Secret, and what never does."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.registry import carry

KEY = st.from_regex(
    r"([a-z]([-a-z0-9.]{0,20}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,20})?", fullmatch=True
)
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def test_keys_and_prefixes_are_carried_and_nothing_else() -> None:
    allow = carry.Carry.parse(["fleet, example.com/*", "topology.kubernetes.io/zone"])
    found = {
        "fleet": "edge",
        "fleetwide": "no",
        "example.com/tier": "gold",
        "example.com": "no",
        "topology.kubernetes.io/zone": "eu-1",
        "topology.kubernetes.io/region": "eu",
    }
    assert allow.pick(found) == {
        "example.com/tier": "gold",
        "fleet": "edge",
        "topology.kubernetes.io/zone": "eu-1",
    }
    assert allow.patterns() == ["fleet", "topology.kubernetes.io/zone", "example.com/*"]


def test_nothing_named_carries_nothing() -> None:
    assert not carry.NOTHING
    assert carry.Carry.parse(["", " , "]) == carry.NOTHING
    assert carry.NOTHING.pick({"fleet": "edge"}) == {}


@pytest.mark.parametrize(
    "key",
    [
        "delivery.kokumi.dev/cluster",
        "environment.delivery.kokumi.dev/edge",
        "kokumi.dev/x",
        "argocd.argoproj.io/secret-type",
        "ARGOCD.ARGOPROJ.IO/secret-type",
        "app.kubernetes.io/managed-by",
    ],
)
def test_reserved_keys_are_never_carried_even_under_a_named_prefix(key: str) -> None:
    assert carry.is_reserved(key)
    broad = carry.Carry.parse(["app.kubernetes.io/*", "a*", "d*", "e*", "k*", "A*"])
    assert not broad.matches(key)
    assert broad.pick({key: "v"}) == {}


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("*", "not a label key or a prefix"),
        ("a*b", "not a label key or a prefix"),
        ("fleet name", "not a label key or a prefix"),
        ("a/b/c", "more than one '/'"),
        ("argocd.argoproj.io/*", "Kokumi's or Argo CD's own"),
        ("delivery.kokumi.dev/cluster", "Kokumi's or Argo CD's own"),
        ("app.kubernetes.io/managed-by", "Kokumi's or Argo CD's own"),
    ],
)
def test_a_pattern_that_cannot_carry_is_refused_with_why(pattern: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        carry.Carry.parse([pattern])


@given(st.dictionaries(KEY, st.text(max_size=5), max_size=8), st.lists(KEY, max_size=4))
def test_what_is_carried_is_named_and_never_reserved(
    found: dict[str, str], named: list[str]
) -> None:
    allowed = [k for k in named if not carry.is_reserved(k)]
    allow = carry.Carry.parse(allowed)
    picked = allow.pick(found)
    assert set(picked) <= set(found)
    for key, value in picked.items():
        assert value == found[key]
        assert key in allowed and not carry.is_reserved(key)
    assert all(k in picked for k in found if k in allowed)


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True))
def test_every_environment_name_gets_a_valid_stable_label_key(name: str) -> None:
    key = carry.environment_label(name)
    prefix, _, segment = key.partition("/")
    assert prefix + "/" == carry.ENVIRONMENT_LABEL_PREFIX
    assert LABEL_NAME.fullmatch(segment), segment
    assert key == carry.environment_label(name)
    if len(name) <= 63:
        assert segment == name
    else:
        assert segment.startswith(name[:46]) and len(segment) == 63


def test_long_environment_names_that_share_a_head_get_different_keys() -> None:
    head = "e" * 60
    assert carry.environment_label(head + "-one") != carry.environment_label(head + "-two")
