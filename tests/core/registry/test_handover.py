"""The Secret edits of a handover: the waiting line read back as written, and the relabel."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.handover import (
    ANNOTATION_WAITING,
    first_waiting,
    handed_to,
    merged_line,
    waiting_of,
    with_waiting,
)
from kokumi.core.registry.ownership import ClusterRef
from tests.support import strategies as s

SPOKE = ClusterRef("platform", "spoke")
SERVER = "https://spoke.example:6443"


def _secret(holder: ClusterRef = SPOKE) -> dict[str, Any]:
    return argocd.cluster_secret(Connection(server=SERVER, token="t"), holder)


# --- the waiting line on the Secret --------------------------------------------------------------


@given(s.cluster_refs(), st.lists(s.cluster_refs(), max_size=8))
def test_a_written_line_reads_back_as_written(holder: ClusterRef, line: list[ClusterRef]) -> None:
    secret = _secret(holder)
    assert waiting_of(with_waiting(secret, line)) == tuple(dict.fromkeys(line))


@given(s.connections(), s.cluster_refs(), st.lists(s.cluster_refs(), max_size=8))
def test_recording_a_line_changes_nothing_else(
    connection: Connection, holder: ClusterRef, line: list[ClusterRef]
) -> None:
    secret = argocd.cluster_secret(connection, holder)
    secret["metadata"]["annotations"] = {"note": "kept"}
    before = copy.deepcopy(secret)
    written = with_waiting(secret, line)
    assert secret == before, "the Secret read is never changed in place"
    annotations = dict(written["metadata"].pop("annotations"))
    assert annotations.pop("note") == "kept"
    assert annotations == ({ANNOTATION_WAITING: ",".join(map(str, line))} if line else {})
    before["metadata"].pop("annotations")
    assert written == before
    assert argocd.holder_of(written) == holder
    assert argocd.server_of(written) == argocd.server_of(before)


@given(s.cluster_refs(), st.lists(s.cluster_refs(), max_size=8))
def test_a_line_that_empties_leaves_no_annotation(
    holder: ClusterRef, line: list[ClusterRef]
) -> None:
    secret = _secret(holder)
    assert with_waiting(with_waiting(secret, line), ()) == secret
    assert "annotations" not in with_waiting(secret, ())["metadata"]


def test_the_line_is_spelled_namespace_slash_name_comma_separated() -> None:
    line = (ClusterRef("team-a", "spoke"), ClusterRef("team-b", "edge"))
    written = with_waiting(_secret(), line)
    assert written["metadata"]["annotations"] == {
        "delivery.kokumi.dev/waiting": "team-a/spoke,team-b/edge"
    }


def test_a_line_is_read_from_secrets_of_kokumi_only_and_garbage_is_skipped() -> None:
    secret = _secret()
    secret["metadata"]["annotations"] = {
        ANNOTATION_WAITING: " team-a/spoke,,nobody,a/b/c,/x,team-b/edge,team-a/spoke"
    }
    assert waiting_of(secret) == (ClusterRef("team-a", "spoke"), ClusterRef("team-b", "edge"))
    foreign = copy.deepcopy(secret)
    del foreign["metadata"]["labels"][argocd.LABEL_MANAGED_BY]
    assert waiting_of(foreign) == ()
    assert waiting_of({}) == ()
    assert waiting_of({"metadata": {"annotations": "not a map"}}) == ()


# --- handing the Secret over ---------------------------------------------------------------------


@given(
    s.connections(),
    s.cluster_refs(),
    s.cluster_refs(),
    st.lists(s.cluster_refs(), max_size=8, unique=True),
)
def test_a_handover_relabels_for_the_new_holder_and_keeps_the_rest_of_the_line(
    connection: Connection, previous: ClusterRef, holder: ClusterRef, line: list[ClusterRef]
) -> None:
    secret = with_waiting(argocd.cluster_secret(connection, previous), line)
    before = copy.deepcopy(secret)
    handed = handed_to(secret, holder)
    assert secret == before, "the Secret read is never changed in place"
    assert argocd.holder_of(handed) == holder
    assert waiting_of(handed) == tuple(c for c in line if c not in (previous, holder))
    assert argocd.is_ours(handed)
    assert handed["data"] == secret["data"], "the connection stays until its replica copies"
    assert handed["metadata"]["name"] == secret["metadata"]["name"]
    labels = {k: v for k, v in handed["metadata"]["labels"].items() if "kokumi.dev" not in k}
    assert labels == {
        k: v for k, v in secret["metadata"]["labels"].items() if "kokumi.dev" not in k
    }


def test_a_handover_keeps_metadata_the_update_needs() -> None:
    secret = with_waiting(_secret(), (ClusterRef("team-b", "edge"), ClusterRef("team-c", "x")))
    secret["metadata"] |= {"resourceVersion": "7", "uid": "u-1"}
    handed = handed_to(secret, ClusterRef("team-b", "edge"))
    assert handed["metadata"]["resourceVersion"] == "7", "the update is guarded by the read"
    assert handed["metadata"]["uid"] == "u-1"
    assert handed["metadata"]["annotations"] == {ANNOTATION_WAITING: "team-c/x"}
    last = handed_to(handed, ClusterRef("team-c", "x"))
    assert "annotations" not in last["metadata"], "nobody left waiting: no annotation"


# --- the waiting order of one server across replicas ---------------------------------------------

refs = st.builds(ClusterRef, st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", "z"]))
lines = st.lists(refs, unique=True, max_size=6)


@given(lines, lines, st.sets(refs))
def test_a_replica_records_its_waiters_and_leaves_the_others_in_place(
    recorded: list[ClusterRef], local: list[ClusterRef], served: set[ClusterRef]
) -> None:
    local = [c for c in local if c in served]  # a replica's waiters are Clusters it serves
    line = merged_line(recorded, local, served.__contains__)
    assert len(line) == len(set(line))
    assert set(local) <= set(line)
    others = [c for c in recorded if c not in served]
    assert [c for c in line if c not in served] == others, "others keep their order"
    kept = [c for c in recorded if c in served and c in local]
    joined = [c for c in local if c not in recorded]
    assert [c for c in line if c in served] == kept + joined
    assert line[: len(line) - len(joined)] == tuple(
        c for c in recorded if c not in served or c in local
    ), "a Cluster that joins comes after everyone recorded"
    assert merged_line(line, local, served.__contains__) == line, "written again: no change"


@given(lines, lines, st.sets(refs), st.one_of(st.none(), refs))
def test_the_next_holder_is_the_first_still_waiting_of_the_recorded_line(
    recorded: list[ClusterRef],
    local: list[ClusterRef],
    served: set[ClusterRef],
    holder: ClusterRef | None,
) -> None:
    local = [c for c in local if c in served]
    line = merged_line(recorded, local, served.__contains__)
    expected = next((c for c in line if c != holder), None)
    assert first_waiting(recorded, holder, local, served.__contains__) == expected
