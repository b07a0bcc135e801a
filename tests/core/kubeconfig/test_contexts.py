"""Every context of one kubeconfig from one read: the verdicts of a read per context, at the cost
of one, and a budget of YAML events that does not depend on the machine."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from kokumi.core.kubeconfig.connection import Code, Connection, Refusal
from kokumi.core.kubeconfig.events import MAX_EVENTS
from kokumi.core.kubeconfig.reader import examine, parse, read_contexts
from tests.support import strategies as s


def per_context(
    text: str | bytes,
) -> tuple[tuple[str, ...], object, list[tuple[str, Connection | Refusal]]]:
    """What the sources read before: the names, then the whole text again for each context."""
    names, first = examine(text)
    return names, first, [(name, parse(text, context=name)) for name in names]


_PEM, _KEY = s.client_pair()

_CLUSTERS: list[object] = [
    {"server": s.SERVER},
    {"server": s.SERVER, "certificate-authority-data": s.b64(s.ca_pem())},
    {"server": s.SERVER, "certificate-authority-data": "not base64!"},
    {"server": s.SERVER, "certificate-authority": "/etc/ca.crt"},
    {"server": "ftp://spoke.example"},
    {"server": 6443},
    {"server": s.SERVER, "extensions": [{"name": "x", "extension": {}}]},
    {"server": s.SERVER, "insecure-skip-tls-verify": "yes"},
    {},
    None,
    "a string",
]

_USERS: list[object] = [
    {"token": s.TOKEN},
    {"token": "two words"},
    {"exec": {"command": "aws"}},
    {"tokenFile": "/token"},
    {"client-certificate-data": s.b64(_PEM), "client-key-data": s.b64(_KEY)},
    {"client-certificate-data": s.b64(_PEM)},
    {"username": "admin", "password": "secret"},
    {},
    None,
]

_NAMES: list[object] = ["a", "b", "c", "d", 7, None]


@st.composite
def many_contexts(draw: st.DrawFn) -> str:
    """A kubeconfig of several contexts over a few clusters and users, each possibly broken:
    names repeated or missing, entries of the wrong type, every mechanism refused."""

    def entries(kind: str, bodies: list[object]) -> list[object]:
        drawn = draw(
            st.lists(st.tuples(st.sampled_from(_NAMES), st.sampled_from(bodies)), max_size=5)
        )
        found: list[object] = [{"name": n, kind: b} for n, b in drawn]
        if draw(st.integers(0, 9)) == 0:
            found.append("not an entry")
        return found

    context_bodies: list[object] = [
        {"cluster": c, "user": u} for c in ("a", "b", "z", 7) for u in ("a", "b", "z")
    ]
    context_bodies += [{"cluster": "a"}, {"user": "a"}, None, "x", {"cluster": "a", "user": "a",
                       "extensions": [{"name": "e"}]}]  # fmt: skip
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": entries("cluster", _CLUSTERS),
        "users": entries("user", _USERS),
        "contexts": entries("context", context_bodies),
    }
    if draw(st.booleans()):
        document["current-context"] = draw(st.sampled_from(["a", "b", "z"]))
    if draw(st.integers(0, 9)) == 0:
        document[draw(st.sampled_from(["clusters", "users"]))] = "not a list"
    if draw(st.integers(0, 9)) == 0:
        document["extensions"] = [{"name": "e"}]
    return s.dump(document, draw(st.sampled_from(["yaml", "json"])))


def assert_same(text: str | bytes) -> None:
    names, first, each = per_context(text)
    read = read_contexts(text)
    if names:
        assert (read.total, read.refusal) == (len(names), None)
        assert list(read.verdicts) == each
    else:
        assert (read.total, read.verdicts, read.refusal) == (0, (), first)
    for limit in (0, 1, 2):
        cut = read_contexts(text, limit)
        assert (cut.verdicts, cut.total) == (read.verdicts[:limit], read.total)


@given(many_contexts())
def test_one_read_judges_each_context_as_a_read_of_its_own(text: str) -> None:
    assert_same(text)


@given(s.mutated_kubeconfigs())
def test_one_read_agrees_on_kubeconfigs_people_break(drawn: tuple[str | bytes, list[str]]) -> None:
    assert_same(drawn[0])


@settings(max_examples=s.examples(30))
@given(s.hostile_kubeconfigs())
def test_one_read_agrees_on_hostile_yaml(text: str) -> None:
    assert_same(text)


def shared(contexts: int) -> str:
    """The shape that stopped the manager: many contexts of one cluster (with a CA) and user."""
    document = s.kubeconfig(context="ctx-00000", cluster_name="c", user_name="u")
    document["contexts"] = [
        {"name": f"ctx-{i:05d}", "context": {"cluster": "c", "user": "u"}} for i in range(contexts)
    ]
    return s.dump(document)


def test_a_document_of_more_events_than_the_budget_is_refused_whatever_the_machine() -> None:
    """1 MiB of tiny values took 2 s of CPU; refused at the budget, with the same words on
    every machine, however fast."""
    document = s.kubeconfig()
    document["preferences"] = {"x": [1] * (MAX_EVENTS + 10)}
    refused = parse(s.dump(document))
    assert isinstance(refused, Refusal) and refused.code == Code.TOO_COMPLEX.value
    assert f"more than {MAX_EVENTS:,} YAML values" in refused.message
    document["preferences"] = {"x": [1] * (MAX_EVENTS // 2)}
    assert isinstance(parse(s.dump(document)), Connection)
    assert isinstance(parse(shared(2_000)), Connection)
