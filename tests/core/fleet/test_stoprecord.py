"""The stop's record of next checks, without a server: what goes in comes out, within a
millisecond; what is not a record is named; a stale record gives nothing."""

from __future__ import annotations

import base64
import json
import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.fleet import stoprecord

WRITTEN = 1_780_000_000.0  # a Unix time in 2026

uids = st.uuids().map(str)
dues = st.floats(min_value=-86_400.0, max_value=86_400.0, allow_nan=False)


@given(st.dictionaries(uids, dues, max_size=200))
def test_each_due_comes_back_within_a_millisecond_under_its_uid(entries: dict[str, float]) -> None:
    body = stoprecord.config_map(
        ((uid, WRITTEN + d) for uid, d in entries.items()), WRITTEN, namespace="kokumi"
    )
    json.dumps(body)  # what the API server is sent
    read = stoprecord.read_config_map(body, WRITTEN + 5.0, 60.0)
    assert set(read) == {stoprecord.uid_key(uid) for uid in entries}
    for uid, due in entries.items():
        assert math.isclose(read[stoprecord.uid_key(uid)], WRITTEN + due, abs_tol=0.0006)


@given(st.lists(st.sampled_from([math.inf, -math.inf, math.nan, 30 * 86_400.0]), max_size=5))
def test_dues_that_cannot_be_recorded_are_left_out(bad: list[float]) -> None:
    entries = [(str(uuid.uuid4()), WRITTEN + d) for d in bad] + [("kept", WRITTEN + 10.0)]
    read = stoprecord.read_config_map(
        stoprecord.config_map(entries, WRITTEN, "kokumi"), WRITTEN, 60.0
    )
    assert read == {stoprecord.uid_key("kept"): WRITTEN + 10.0}


def test_ten_thousand_clusters_fit_a_config_map_many_times_over() -> None:
    entries = [(str(uuid.uuid4()), WRITTEN + i / 100) for i in range(10_000)]
    size = len(json.dumps(stoprecord.config_map(entries, WRITTEN, "kokumi")))
    assert size < 170_000, size  # 12 bytes a Cluster, as base64


def test_past_the_limit_the_clusters_due_soonest_are_kept() -> None:
    extra = 10
    entries = [
        (f"uid-{i}", WRITTEN + (stoprecord.MAX_ENTRIES + extra - i) / 1000)
        for i in range(stoprecord.MAX_ENTRIES + extra)
    ]
    body = stoprecord.config_map(entries, WRITTEN, "kokumi")
    assert len(json.dumps(body)) < 1_000_000  # a ConfigMap's limit is 1 MiB
    read = stoprecord.read_config_map(body, WRITTEN, 60.0)
    assert len(read) == stoprecord.MAX_ENTRIES
    assert stoprecord.uid_key("uid-0") not in read  # the latest due
    assert stoprecord.uid_key(f"uid-{stoprecord.MAX_ENTRIES + extra - 1}") in read  # the soonest


@pytest.mark.parametrize(
    ("age", "used"),
    [(0.0, True), (119.0, True), (121.0, False), (-30.0, True), (-121.0, False)],
)
def test_a_record_older_than_the_limit_gives_nothing(age: float, used: bool) -> None:
    body = stoprecord.config_map([("a", WRITTEN + 50.0)], WRITTEN, "kokumi")
    assert bool(stoprecord.read_config_map(body, WRITTEN + age, 120.0)) is used


def _record(written_at: object = "1780000000.000", blob: object = "") -> dict[str, object]:
    return {"data": {stoprecord.WRITTEN_AT: written_at}, "binaryData": {stoprecord.KEY: blob}}


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        ({}, "it has no data.written-at and binaryData.next-checks"),
        ({"data": {}, "binaryData": []}, "it has no data.written-at"),
        (_record(written_at="yesterday"), "data.written-at is not a Unix time in seconds"),
        (_record(written_at="nan"), "data.written-at is not a Unix time in seconds"),
        (_record(written_at=None), "data.written-at is not a Unix time in seconds"),
        ({"data": {stoprecord.WRITTEN_AT: "1"}, "binaryData": {}}, "next-checks is missing"),
        (_record(blob="not base64!"), "binaryData.next-checks is not base64"),
        (_record(blob=base64.b64encode(b"x" * 13).decode()), "13 bytes: not a whole number"),
        (
            _record(blob=base64.b64encode(b"\0" * 12 * (stoprecord.MAX_ENTRIES + 1)).decode()),
            f"at most {stoprecord.MAX_ENTRIES}",
        ),
    ],
)
def test_what_is_not_a_record_is_named(obj: dict[str, object], said: str) -> None:
    with pytest.raises(stoprecord.RecordError, match=said.replace(".", r"\.")):
        stoprecord.read_config_map(obj, WRITTEN, 120.0)


@given(st.binary(max_size=300), st.text(max_size=30))
def test_any_bytes_or_time_is_a_record_or_a_record_error(blob: bytes, written_at: str) -> None:
    obj = _record(written_at=written_at, blob=base64.b64encode(blob).decode())
    try:
        read = stoprecord.read_config_map(obj, WRITTEN, 120.0)
    except stoprecord.RecordError:
        return
    assert len(read) <= len(blob) // 12


def test_a_uid_key_is_the_same_in_every_process() -> None:
    """A fixed hash (not Python's ``hash()``, which each process seeds anew): the process that
    reads the record is not the one that wrote it."""
    key = stoprecord.uid_key("00000000-0000-0000-0000-000000000000")
    assert key.hex() == "27653cbf106bd80a"
    assert len(stoprecord.uid_key("x")) == 8
    assert stoprecord.uid_key("a") != stoprecord.uid_key("b")


@given(
    st.dictionaries(st.integers(0, 63), st.dictionaries(uids, dues, max_size=20), max_size=6),
    st.integers(0, 63),
)
def test_each_shard_reads_its_own_record_from_one_config_map(
    records: dict[int, dict[str, float]], asked: int
) -> None:
    """With ``--shards`` each stopping replica writes its shards' records under keys of their
    own into one ConfigMap (the API server merges the applies of different field managers, as
    merging the bodies does here); each shard reads back its own, and a shard with no record
    reads nothing, which is no error: its Clusters are checked at their places."""
    merged: dict[str, dict[str, str]] = {"data": {}, "binaryData": {}}
    for shard, entries in records.items():
        body = stoprecord.config_map(
            ((uid, WRITTEN + d) for uid, d in entries.items()), WRITTEN, "kokumi", shard=shard
        )
        merged["data"].update(body["data"])
        merged["binaryData"].update(body["binaryData"])
    read = stoprecord.read_config_map(merged, WRITTEN + 5.0, 60.0, shard=asked)
    assert set(read) == {stoprecord.uid_key(uid) for uid in records.get(asked, {})}
    # The whole fleet's keys are not a shard's, nor the other way round.
    assert set(merged["data"]).isdisjoint({stoprecord.keys(None)[0]})
    assert len({stoprecord.keys(s) for s in range(64)} | {stoprecord.keys(None)}) == 65


def test_a_shards_record_that_is_not_one_is_named_with_its_keys() -> None:
    written, key = stoprecord.keys(3)
    assert (written, key) == ("written-at.shard-3", "next-checks.shard-3")
    said = r"binaryData\.next-checks\.shard-3 is"
    broken = {"data": {written: "1"}, "binaryData": {key: "AAAA"}}
    with pytest.raises(stoprecord.RecordError, match=f"{said} 3 bytes"):
        stoprecord.read_config_map(broken, 1.0, 60.0, shard=3)
    without = {"data": {written: "1"}, "binaryData": {}}
    with pytest.raises(stoprecord.RecordError, match=f"{said} missing"):
        stoprecord.read_config_map(without, 1.0, 60.0, shard=3)


def test_a_shards_record_keeps_at_most_its_limit_those_due_soonest() -> None:
    entries = [(f"uid-{i}", WRITTEN + (100 - i)) for i in range(100)]
    body = stoprecord.config_map(entries, WRITTEN, "kokumi", shard=1, limit=10)
    read = stoprecord.read_config_map(body, WRITTEN, 60.0, shard=1)
    assert set(read) == {stoprecord.uid_key(f"uid-{i}") for i in range(90, 100)}
