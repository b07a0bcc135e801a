"""The status decisions (kokumi.core.cluster.status), with no server.

The properties are those the spec and the API rest on: what is written reads back as the same
value (so the next pass compares equal and writes nothing), a status recomputed from unchanged
findings is the same status whatever the clock says ("the status changes only when what the check
finds changes"), and a condition's transition time moves only with its status.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.api import unstructured
from kokumi.core.cluster.status import (
    Outcome,
    SecretRead,
    claim_stands,
    cluster_outcome,
    cluster_status,
    observed_cluster_status,
    ready_event,
    seeded_outcome,
)
from kokumi.core.environments.status import environment_status
from kokumi.core.kubeconfig.connection import Connection, Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.reasons import Reason
from kokumi.core.secretaccess import not_readable_message
from tests.support.statuses import (
    EARLY,
    LATE,
    cluster_statuses,
    clusters,
    conflict_reasons,
    conflicts,
    invalid_clusters,
    outcomes,
)
from tests.support.strategies import examples

LATER = "2026-12-01T08:00:00Z"  # no generated status holds it

# --- strategies ---------------------------------------------------------------------------------


def _as_written(value: api.ClusterStatus | api.EnvironmentStatus) -> dict[str, Any]:
    """The status as the API server stores it: JSON, with the nulls of the merge patch gone."""
    text = json.dumps(unstructured(value))
    return {k: v for k, v in json.loads(text).items() if v is not None}


def _ready(status: api.ClusterStatus | api.EnvironmentStatus) -> api.Condition:
    ready = api.ready_condition(status.conditions)
    assert ready is not None
    return ready


# --- the converter: one shape for reading and writing -------------------------------------------


@settings(max_examples=examples(500))
@given(value=cluster_statuses)
def test_a_cluster_status_survives_its_write(value: api.ClusterStatus) -> None:
    assert api.converter.structure(unstructured(value), api.ClusterStatus) == value
    assert api.converter.structure(_as_written(value), api.ClusterStatus) == value


@settings(max_examples=examples(300))
@given(cluster=clusters, status=cluster_statuses)
def test_what_is_written_is_what_the_next_pass_observes(
    cluster: api.Cluster, status: api.ClusterStatus
) -> None:
    """The watch brings the write back; parsed, it equals what was written: nothing to rewrite."""
    body = {
        "metadata": {"name": cluster.metadata.name, "namespace": "fleet"},
        "spec": api.converter.unstructure(cluster.spec),
        "status": _as_written(status),
    }
    parsed = api.parse_cluster(body)
    assert isinstance(parsed, api.Cluster)
    assert observed_cluster_status(parsed) == (None if status == api.ClusterStatus() else status)


def test_a_cluster_status_is_written_as_today() -> None:
    """camelCase as the CRD; every status field (null removes one); conditions without defaults."""
    value = api.ClusterStatus(
        server=None,
        kubernetes_version="v1.36.3",
        observed_generation=4,
        conditions=(
            api.Condition("Ready", "False", Reason.UNREACHABLE, "timed out", EARLY, 4),
            api.Condition("Other", "True", "Fine", "fine"),
        ),
    )
    assert json.dumps(unstructured(value)) == json.dumps(
        {
            "server": None,
            "kubernetesVersion": "v1.36.3",
            "observedGeneration": 4,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Unreachable",
                    "message": "timed out",
                    "lastTransitionTime": EARLY,
                    "observedGeneration": 4,
                },
                {"type": "Other", "status": "True", "reason": "Fine", "message": "fine"},
            ],
        }
    )


# --- the Cluster --------------------------------------------------------------------------------


def _cluster(
    connection: str = "Kubeconfig", status: api.ClusterStatus | None = None
) -> api.Cluster:
    spec = (
        api.ClusterSpec("InCluster")
        if connection == "InCluster"
        else api.ClusterSpec("Kubeconfig", api.KubeconfigSource(api.SecretRef("kubeconfig")))
    )
    return api.Cluster(
        api.Meta("spoke", "fleet", generation=3), spec, status or api.ClusterStatus()
    )


def test_a_good_check_makes_the_cluster_ready() -> None:
    found = Outcome(True, Reason.READY, "accepted as admin", "https://a.example:6443", "v1.36.3")
    status = cluster_status(_cluster(), found, now=EARLY)
    assert status == api.ClusterStatus(
        "https://a.example:6443",
        "v1.36.3",
        3,
        (api.Condition("Ready", "True", Reason.READY, "accepted as admin", EARLY, 3),),
    )


def test_the_transition_time_is_kept_from_the_last_write_the_watch_has_not_brought_back() -> None:
    """The first status is written at EARLY; a second pass at LATE, before the watch brought
    that write back (the object has no status yet), says the same: it is the same status, so
    nothing is written again. A change of Ready does move the time."""
    found = Outcome(True, Reason.READY, "accepted as admin", "https://a.example:6443", "v1.36.3")
    first = cluster_status(_cluster(), found, now=EARLY)
    assert cluster_status(_cluster(), found, now=LATE, written=first) == first
    lost = Outcome(False, Reason.UNREACHABLE, "timed out")
    assert (
        _ready(cluster_status(_cluster(), lost, now=LATE, written=first)).last_transition_time
        == LATE
    )


def test_a_conflict_outranks_a_good_check_but_not_a_failed_one() -> None:
    good = Outcome(True, Reason.READY, "ok", "https://a.example:6443")
    held = cluster_status(
        _cluster(),
        good,
        conflict="held by x",
        conflict_reason=Reason.REGISTRATION_FAILED,
        now=EARLY,
    )
    assert (_ready(held).status, _ready(held).reason) == ("False", "RegistrationFailed")
    assert _ready(held).message == "held by x"
    bad = Outcome(False, Reason.UNREACHABLE, "refused")
    failed = cluster_status(_cluster(), bad, conflict="held by x", now=EARLY)
    assert (_ready(failed).reason, _ready(failed).message) == ("Unreachable", "refused")


def test_an_in_cluster_cluster_reports_argo_cds_name_for_its_server() -> None:
    found = Outcome(True, Reason.READY, "ok", "https://10.0.0.1:443")
    status = cluster_status(_cluster("InCluster"), found, now=EARLY)
    assert status.server == "https://kubernetes.default.svc"


def test_an_invalid_cluster_keeps_its_transition_time() -> None:
    old = api.ClusterStatus(
        conditions=(api.Condition("Ready", "False", Reason.INVALID_SPEC, "old words", EARLY, 2),)
    )
    invalid = api.Invalid(api.Meta("spoke", "fleet", generation=3), "spec is missing", old)
    status = cluster_status(
        invalid, Outcome(False, Reason.INVALID_SPEC, "spec is missing"), now=LATE
    )
    assert _ready(status) == api.Condition(
        "Ready", "False", Reason.INVALID_SPEC, "spec is missing", EARLY, 3
    )
    assert status.server is None


@settings(max_examples=examples(500))
@given(
    cluster=clusters | invalid_clusters,
    outcome=outcomes,
    conflict=conflicts,
    reason=conflict_reasons,
)
def test_a_cluster_status_is_a_function_of_what_was_found(
    cluster: api.Cluster | api.Invalid, outcome: Outcome, conflict: str | None, reason: Reason
) -> None:
    """Pure: the same arguments give the same status, and the arguments are left as they were."""
    before = attrs.evolve(cluster)
    first = cluster_status(cluster, outcome, conflict=conflict, conflict_reason=reason, now=EARLY)
    again = cluster_status(cluster, outcome, conflict=conflict, conflict_reason=reason, now=EARLY)
    assert first == again
    assert cluster == before
    ready = _ready(first)
    assert (ready.status == "True") == (outcome.ok and not conflict)
    assert ready.observed_generation == first.observed_generation == cluster.metadata.generation
    assert [c.type for c in first.conditions].count("Ready") == 1


@settings(max_examples=examples(500))
@given(
    cluster=clusters | invalid_clusters,
    outcome=outcomes,
    conflict=conflicts,
    reason=conflict_reasons,
)
def test_the_status_changes_only_when_what_the_check_finds_changes(
    cluster: api.Cluster | api.Invalid, outcome: Outcome, conflict: str | None, reason: Reason
) -> None:
    """Computed again later from the same finding, over the status written, it is the same."""
    first = cluster_status(cluster, outcome, conflict=conflict, conflict_reason=reason, now=EARLY)
    written = attrs.evolve(cluster, status=first)
    later = cluster_status(written, outcome, conflict=conflict, conflict_reason=reason, now=LATE)
    assert later == first
    assert observed_cluster_status(written) == first
    assert ready_event(first, later) is None


@settings(max_examples=examples(500))
@given(cluster=clusters, first=outcomes, second=outcomes)
def test_the_transition_time_moves_only_with_the_status(
    cluster: api.Cluster, first: Outcome, second: Outcome
) -> None:
    before = cluster_status(cluster, first, now=EARLY)
    after = cluster_status(attrs.evolve(cluster, status=before), second, now=LATER)
    moved = _ready(after).last_transition_time != _ready(before).last_transition_time
    assert moved == (_ready(after).status != _ready(before).status)


@settings(max_examples=examples(500))
@given(old=st.none() | cluster_statuses, cluster=clusters, outcome=outcomes)
def test_an_event_is_recorded_when_the_ready_state_changes_or_a_first_report_is_not_ready(
    old: api.ClusterStatus | None, cluster: api.Cluster, outcome: Outcome
) -> None:
    new = cluster_status(cluster, outcome, now=LATE)
    event = ready_event(old, new)
    before = api.ready_condition(old.conditions) if old is not None else None
    if before is None:
        # A first report: an Event only when it is not Ready (creating a Cluster asks for Ready).
        changed = _ready(new).status != "True"
    else:
        changed = (before.status, before.reason) != (_ready(new).status, _ready(new).reason)
    assert (event is not None) == changed
    assert event is None or event == _ready(new)


# --- the Environment ----------------------------------------------------------------------------


def test_a_cluster_not_checked_yet_is_held_with_not_checked() -> None:
    environment = api.Environment(api.Meta("all", "fleet", generation=1), api.EnvironmentSpec({}))
    fresh = _cluster()
    status = environment_status(environment, [fresh], now=EARLY)
    (row,) = status.clusters
    assert (row.name, row.target, row.reason) == ("spoke", "ClusterNotReady", "NotChecked")
    assert row.reason is Reason.NOT_CHECKED
    assert _ready(status).reason == Reason.NO_CLUSTER_READY


# --- the Cluster's outcome before a check: the spec, its Secret, its kubeconfig ------------------

KUBECONFIG_CLUSTER = api.Cluster(
    api.Meta("c", "fleet", "u", 1),
    api.ClusterSpec("Kubeconfig", api.KubeconfigSource(api.SecretRef("kc", "value"))),
)
GOOD = Connection("https://a.example:6443", token="t")


def _read(**fields: Any) -> SecretRead:
    return SecretRead("kc", "value", "fleet", **fields)


def test_an_invalid_spec_is_its_own_outcome_whatever_the_secret_says() -> None:
    invalid = api.Invalid(api.Meta("c", "fleet", "u", 1), "spec.connection is missing")
    expected = Outcome(False, Reason.INVALID_SPEC, "spec.connection is missing")
    assert cluster_outcome(invalid) == expected
    assert cluster_outcome(invalid, _read(found=False)) == expected


def test_a_cluster_with_nothing_against_it_is_to_be_checked() -> None:
    assert cluster_outcome(KUBECONFIG_CLUSTER) is None
    assert cluster_outcome(KUBECONFIG_CLUSTER, _read(kubeconfig=GOOD)) is None


def test_a_missing_secret_says_how_to_create_it() -> None:
    assert cluster_outcome(KUBECONFIG_CLUSTER, _read(found=False)) == Outcome(
        False,
        Reason.SECRET_NOT_FOUND,
        "Secret kc not found in namespace fleet: create it with the kubeconfig under key value"
        " (kubectl create secret generic kc -n fleet --from-file=value=...)",
    )


def test_an_unreadable_secret_names_the_binding_for_the_manager() -> None:
    outcome = cluster_outcome(
        KUBECONFIG_CLUSTER,
        _read(readable=False, kubeconfig=GOOD),
        username="system:serviceaccount:kokumi:kokumi",
    )
    assert outcome == Outcome(
        False,
        Reason.SECRET_NOT_READABLE,
        not_readable_message("kc", "fleet", "system:serviceaccount:kokumi:kokumi"),
    )
    assert outcome is not None and claim_stands(outcome)
    own = cluster_outcome(KUBECONFIG_CLUSTER, _read(readable=False), own_namespace="fleet")
    assert own is not None and "and never will" in own.message


def test_a_secret_without_the_key_lists_the_keys_it_has() -> None:
    outcome = cluster_outcome(KUBECONFIG_CLUSTER, _read(keys=("b", "a")))
    assert outcome == Outcome(
        False,
        Reason.SECRET_KEY_NOT_FOUND,
        "Secret kc has no key value (its keys: a, b): store the kubeconfig under value, or set"
        " spec.kubeconfig.secretRef.key",
    )
    empty = cluster_outcome(KUBECONFIG_CLUSTER, _read())
    assert empty is not None and "(its keys: none)" in empty.message


def test_a_refused_kubeconfig_carries_the_refusals_own_reason() -> None:
    refusal = parse("kind: Config\n")
    assert isinstance(refusal, Refusal)
    outcome = cluster_outcome(KUBECONFIG_CLUSTER, _read(kubeconfig=refusal))
    assert outcome == Outcome(False, refusal.reason, f"Secret kc key value: {refusal.message}")
    assert outcome.reason == Reason.INVALID_KUBECONFIG


@pytest.mark.parametrize(
    "server", ["https://kubernetes.default.svc", "https://kubernetes.default.svc//"]
)
def test_argo_cds_own_server_is_a_conflict_with_the_fix(server: str) -> None:
    outcome = cluster_outcome(KUBECONFIG_CLUSTER, _read(kubeconfig=Connection(server)))
    assert outcome is not None
    assert (outcome.ok, outcome.reason, outcome.server) == (False, Reason.CLUSTER_CONFLICT, server)
    assert outcome.message.endswith("use connection: InCluster instead")
    assert not claim_stands(outcome)


@settings(max_examples=examples(300))
@given(
    found=st.booleans(),
    readable=st.booleans(),
    parsed=st.sampled_from([None, GOOD, Refusal("X", "no")]),
)
def test_the_first_objection_wins_in_the_order_a_user_fixes_them(
    found: bool, readable: bool, parsed: Connection | Refusal | None
) -> None:
    outcome = cluster_outcome(
        KUBECONFIG_CLUSTER, _read(found=found, readable=readable, kubeconfig=parsed)
    )
    if not found:
        expected: str | None = Reason.SECRET_NOT_FOUND
    elif not readable:
        expected = Reason.SECRET_NOT_READABLE
    elif parsed is None:
        expected = Reason.SECRET_KEY_NOT_FOUND
    elif isinstance(parsed, Refusal):
        expected = Reason.INVALID_KUBECONFIG
    else:
        expected = None
    assert (outcome.reason if outcome is not None else None) == expected
    assert outcome is None or not outcome.ok


def _checked(reason: str, status: str, generation: int = 1) -> api.Cluster:
    condition = api.Condition("Ready", status, reason, "as found", EARLY, generation)  # type: ignore[arg-type]
    return attrs.evolve(
        KUBECONFIG_CLUSTER,
        status=api.ClusterStatus(
            server="https://a.example:6443", kubernetes_version="v1.36.3", conditions=(condition,)
        ),
    )


def test_a_status_a_check_wrote_seeds_the_first_check() -> None:
    assert seeded_outcome(_checked(Reason.READY, "True")) == Outcome(
        True, Reason.READY, "as found", "https://a.example:6443", "v1.36.3"
    )
    assert seeded_outcome(_checked(Reason.UNREACHABLE, "False")) == Outcome(
        False, Reason.UNREACHABLE, "as found", "https://a.example:6443", "v1.36.3"
    )


@pytest.mark.parametrize(
    "cluster",
    [
        _checked(Reason.SECRET_NOT_FOUND, "False"),  # no check wrote it
        _checked(Reason.READY, "True", generation=0),  # an older spec's
        _checked(Reason.READY, "False"),  # inconsistent
        _checked(Reason.UNREACHABLE, "True"),
        attrs.evolve(KUBECONFIG_CLUSTER, metadata=api.Meta("c", "fleet", "u", 1)),  # no status
        api.Invalid(api.Meta("c", "fleet", "u", 1), "bad"),
    ],
)
def test_any_other_status_seeds_nothing(cluster: api.Cluster | api.Invalid) -> None:
    assert seeded_outcome(cluster) is None
