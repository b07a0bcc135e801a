"""What a registration carries beside the connection: carried labels and annotations, the
Environments that select the Cluster, and its scope, on the Argo CD Secret and in the plan.

The rules held: the Secret is a function of connection, holder and extras down to the byte, and
without extras it is the Secret Kokumi always wrote; a change of extras is one in-place update
(a Replace, never a Delete and a Create) that removes what is no longer carried and leaves any
other label alone; a handover takes the new holder's extras in the same update; a plan carried
out and planned again is Keep.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover, ownership, registrar
from kokumi.core.registry.carry import (
    NO_EXTRAS,
    Carry,
    Carrying,
    Extras,
    environment_label,
    extras_of,
)
from kokumi.core.registry.ownership import ClusterRef

SERVER = "https://spoke.example:6443"
A, B, C = ClusterRef("ws1", "a"), ClusterRef("ws1", "b"), ClusterRef("ws2", "c")
CONNECTION = Connection(SERVER, token="t")
ALLOW = Carry.parse(["fleet", "example.com/*", "region"])

_values = st.sampled_from(["edge", "core", "eu-1", ""])
_label_sets = st.dictionaries(
    st.sampled_from(["fleet", "region", "example.com/tier", "example.com/team"]), _values
)
_environments = st.lists(
    st.sampled_from(["edge", "prod", "staging", "x" * 80]), unique=True, max_size=3
)


@st.composite
def extras(draw: st.DrawFn) -> Extras:
    namespaces = draw(st.lists(st.sampled_from(["apps", "team-a", "kube-system"]), max_size=3))
    return extras_of(
        draw(_label_sets),
        draw(_label_sets),
        draw(_environments),
        namespaces=namespaces,
        cluster_resources=draw(st.booleans()),
        carry_labels=ALLOW,
        carry_annotations=ALLOW,
    )


def _labels(secret: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = secret["metadata"].get("labels") or {}
    return labels


def _annotations(secret: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = secret["metadata"].get("annotations") or {}
    return annotations


def _data(secret: dict[str, Any], key: str) -> str | None:
    raw = secret["data"].get(key)
    return None if raw is None else base64.b64decode(raw).decode()


def _stored(secret: dict[str, Any]) -> dict[str, Any]:
    """As the API server keeps it: with a uid and a version, and a label of somebody else's."""
    body = {**secret, "metadata": dict(secret["metadata"])}
    body["metadata"]["uid"] = "u-1"
    body["metadata"]["resourceVersion"] = "7"
    body["metadata"]["labels"] = {**_labels(secret), "team.example/owner": "platform"}
    return body


# --- the value --------------------------------------------------------------------------------


def test_nothing_carried_is_the_one_shared_empty_value() -> None:
    assert extras_of({"fleet": "edge"}, {"example.com/x": "y"}, ()) is NO_EXTRAS
    assert not NO_EXTRAS
    # clusterResources means something only beside namespaces (the API refuses it alone).
    assert extras_of({}, {}, (), cluster_resources=True) is NO_EXTRAS


def test_a_cluster_carries_what_the_allow_lists_name_its_environments_and_scope() -> None:
    cluster = api.parse_cluster(
        {
            "metadata": {
                "name": "a",
                "namespace": "ws1",
                "labels": {"fleet": "edge", "other": "no", "delivery.kokumi.dev/cluster": "x"},
                "annotations": {
                    "example.com/owner": "team-a",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                },
            },
            "spec": {
                "connection": "Kubeconfig",
                "kubeconfig": {"secretRef": {"name": "kc"}},
                "scope": {"namespaces": ["team-a", "apps"], "clusterResources": True},
            },
        },
        annotations=ALLOW.matches,
    )
    assert isinstance(cluster, api.Cluster)
    # The parse kept only the annotation that may be carried, not kubectl's copy of the object.
    assert dict(cluster.metadata.annotations) == {"example.com/owner": "team-a"}
    got = Carrying(ALLOW, ALLOW).extras(cluster, ["prod", "edge"])
    assert got == Extras(
        labels=(("fleet", "edge"),),
        annotations=(("example.com/owner", "team-a"),),
        environments=("edge", "prod"),
        namespaces=("apps", "team-a"),
        cluster_resources=True,
    )
    # Without an allow-list only the Environments and the scope go.
    bare = Carrying().extras(cluster, ["edge"])
    assert bare.labels == bare.annotations == ()
    assert bare.environments == ("edge",)


def test_a_parse_without_an_allow_list_keeps_no_annotation() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ws1", "annotations": {"a": "b"}}, "spec": {}}
    assert not api.parse_cluster(obj).metadata.annotations


# --- the Secret -------------------------------------------------------------------------------


def test_without_extras_the_secret_is_the_one_kokumi_always_wrote() -> None:
    secret = argocd.cluster_secret(CONNECTION, A)
    assert secret == argocd.cluster_secret(CONNECTION, A, extras=NO_EXTRAS)
    assert "annotations" not in secret["metadata"]
    assert sorted(secret["data"]) == ["config", "name", "server"]
    assert set(_labels(secret)) == {
        argocd.LABEL_SECRET_TYPE,
        argocd.LABEL_MANAGED_BY,
        argocd.LABEL_CLUSTER,
        argocd.LABEL_CLUSTER_NAMESPACE,
    }


def test_the_secret_says_what_the_holder_carries() -> None:
    carried = Extras(
        labels=(("fleet", "edge"), ("region", "eu")),
        annotations=(("example.com/owner", "team-a"),),
        environments=("edge", "x" * 80),
        namespaces=("apps", "team-a"),
        cluster_resources=True,
    )
    secret = argocd.cluster_secret(CONNECTION, A, extras=carried)
    labels = _labels(secret)
    assert labels["fleet"] == "edge" and labels["region"] == "eu"
    assert labels["environment.delivery.kokumi.dev/edge"] == "true"
    assert labels[environment_label("x" * 80)] == "true"
    assert argocd.holder_of(secret) == A and argocd.is_ours(secret)
    assert _annotations(secret) == {
        "example.com/owner": "team-a",
        argocd.ANNOTATION_CARRIED_ANNOTATIONS: "example.com/owner",
        argocd.ANNOTATION_CARRIED_LABELS: "fleet,region",
    }
    assert _data(secret, "namespaces") == "apps,team-a"
    assert _data(secret, "clusterResources") == "true"
    # clusterResources is written only when true.
    narrow = argocd.cluster_secret(CONNECTION, A, extras=Extras(namespaces=("apps",)))
    assert _data(narrow, "namespaces") == "apps" and "clusterResources" not in narrow["data"]


@given(extras(), extras())
def test_the_secret_is_a_function_of_its_inputs_down_to_the_byte(one: Extras, two: Extras) -> None:
    first = json.dumps(argocd.cluster_secret(CONNECTION, A, extras=one))
    again = json.dumps(argocd.cluster_secret(CONNECTION, A, extras=one))
    assert first == again
    if one != two:
        other = argocd.cluster_secret(CONNECTION, A, extras=two)
        assert json.dumps(other) != first


@given(extras())
def test_kokumis_own_labels_are_never_overwritten_by_what_is_carried(carried: Extras) -> None:
    secret = argocd.cluster_secret(CONNECTION, A, extras=carried)
    assert argocd.holder_of(secret) == A
    assert _labels(secret)[argocd.LABEL_MANAGED_BY] == argocd.MANAGED_BY


# --- updates in place ---------------------------------------------------------------------------


@given(extras(), extras())
def test_an_update_carries_the_new_extras_and_removes_the_old(old: Extras, new: Extras) -> None:
    existing = _stored(argocd.cluster_secret(CONNECTION, A, extras=old))
    desired = argocd.cluster_secret(CONNECTION, A, extras=new)
    body = argocd.updated(existing, desired)
    assert body["metadata"]["uid"] == "u-1" and body["metadata"]["resourceVersion"] == "7"
    # Somebody else's label stays; Kokumi's are exactly the new ones.
    expected = {**_labels(desired), "team.example/owner": "platform"}
    assert _labels(body) == expected
    assert _annotations(body) == _annotations(desired)
    assert body["data"] == desired["data"]
    assert registrar.same(body, desired)
    assert registrar.same(existing, desired) == (old == new)


def test_a_label_somebody_else_put_on_the_secret_is_never_removed() -> None:
    existing = _stored(argocd.cluster_secret(CONNECTION, A))
    desired = argocd.cluster_secret(CONNECTION, A)
    assert registrar.same(existing, desired)
    carried = argocd.cluster_secret(CONNECTION, A, extras=Extras(labels=(("fleet", "edge"),)))
    body = argocd.updated(existing, carried)
    assert _labels(body)["team.example/owner"] == "platform"
    # Uncarried again: fleet goes, the other label stays.
    back = argocd.updated(body, desired)
    assert "fleet" not in _labels(back) and _labels(back)["team.example/owner"] == "platform"
    assert registrar.same(back, desired)


# --- the plan -----------------------------------------------------------------------------------


def _view(secret: dict[str, Any] | None, holder: ClusterRef, carried: Extras) -> registrar.View:
    table, _ = ownership.step(ownership.Table(), ownership.Want(holder, SERVER))
    return registrar.View(
        server=SERVER, table=table, secret=secret, connection=CONNECTION, extras=carried
    )


def _plan_until_keep(view: registrar.View) -> list[registrar.Plan]:
    plans: list[registrar.Plan] = []
    for _ in range(4):
        plan = registrar.plan(view)
        if isinstance(plan, registrar.Keep):
            return plans
        plans.append(plan)
        assert isinstance(plan, registrar.Replace | registrar.Create), plan
        existing = view.secret
        body = plan.body if existing is None else argocd.updated(existing, plan.body)
        view = _view(_stored(body) if existing is None else body, view.holder or A, view.extras)
    raise AssertionError(f"no Keep after {plans}")


@given(extras(), extras())
def test_a_change_of_extras_is_one_replace_then_keep(old: Extras, new: Extras) -> None:
    existing = _stored(argocd.cluster_secret(CONNECTION, A, extras=old))
    plans = _plan_until_keep(_view(existing, A, new))
    if old == new:
        assert plans == []
    else:
        assert len(plans) == 1 and isinstance(plans[0], registrar.Replace)
        assert plans[0].holder == A and not plans[0].announce


@given(extras())
def test_onboarding_is_one_create_with_the_extras_then_keep(carried: Extras) -> None:
    plans = _plan_until_keep(_view(None, A, carried))
    assert len(plans) == 1 and isinstance(plans[0], registrar.Create)
    assert plans[0].body == argocd.cluster_secret(CONNECTION, A, extras=carried)


@given(extras(), extras())
def test_a_handover_takes_the_new_holders_extras_in_the_same_update(
    old: Extras, new: Extras
) -> None:
    existing = _stored(
        handover.with_waiting(argocd.cluster_secret(CONNECTION, A, extras=old), [B, C])
    )
    # A let go: B, first in line, holds the server now.
    table, _ = ownership.step(ownership.Table(), ownership.Want(B, SERVER))
    table, _ = ownership.step(table, ownership.Want(C, SERVER))
    view = registrar.View(
        server=SERVER, table=table, secret=existing, connection=CONNECTION, extras=new
    )
    plan = registrar.plan(view)
    assert isinstance(plan, registrar.Replace) and plan.previous == A and plan.holder == B
    body = argocd.updated(existing, plan.body)
    assert argocd.holder_of(body) == B
    wanted = argocd.cluster_secret(CONNECTION, B, extras=new)
    carried = {k: v for k, v in _labels(body).items() if k != "team.example/owner"}
    assert carried == _labels(wanted)
    assert handover.waiting_of(body) == (C,)
    after = registrar.View(
        server=SERVER, table=table, secret=body, connection=CONNECTION, extras=new
    )
    assert isinstance(registrar.plan(after), registrar.Keep)


def test_what_a_cluster_is_told_counts_its_scope() -> None:
    scoped = Extras(namespaces=("apps",))
    table, _ = ownership.step(ownership.Table(), ownership.Want(A, SERVER))
    secret = argocd.cluster_secret(CONNECTION, A)

    def told(carried: Extras, error: str | None) -> Any:
        return registrar.told(
            A,
            table,
            {argocd.secret_name(SERVER): secret}.get,
            named=True,
            connection=CONNECTION,
            retry_error=error,
            extras=carried,
        )

    assert told(NO_EXTRAS, "refused").holding
    # The scope Argo CD has is not the Cluster's, and the write failed: the status says so.
    assert told(scoped, "refused").reason == "RegistrationFailed"


@pytest.mark.parametrize("key", ["environment.delivery.kokumi.dev/edge", "fleet"])
def test_extras_recorded_on_a_secret_are_kokumis_to_remove(key: str) -> None:
    carried = Extras(labels=(("fleet", "edge"),), environments=("edge",))
    secret = argocd.cluster_secret(CONNECTION, A, extras=carried)
    assert key in argocd.carried_label_keys(secret)
    assert key in _labels(secret)
