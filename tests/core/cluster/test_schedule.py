"""The check schedule's two rules (kokumi.core.cluster.schedule): each Cluster's own place in the
minute, and which checks count as silent."""

from __future__ import annotations

import math
import uuid

from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.cluster import schedule
from kokumi.core.reasons import Reason

INTERVAL = 60.0
times = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)
places = st.floats(min_value=0.0, max_value=INTERVAL, exclude_max=True)


@given(st.text())
def test_a_place_is_within_the_interval_and_the_same_in_every_process(identity: str) -> None:
    offset = schedule.offset_of(identity, INTERVAL)
    assert 0.0 <= offset < INTERVAL
    assert schedule.offset_of(identity, INTERVAL) == offset


def test_places_of_many_clusters_fill_the_minute_evenly() -> None:
    """10,000 uids: each tenth of the minute holds a tenth of them, within 0.6 points (four
    standard deviations of a uniform draw)."""
    uids = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(10_000)]
    offsets = [schedule.offset_of(uid, INTERVAL) for uid in uids]
    tenths = [0] * 10
    for offset in offsets:
        tenths[int(offset // 6)] += 1
    assert all(880 <= count <= 1120 for count in tenths), tenths
    seconds = [0] * 60
    for offset in offsets:
        seconds[int(offset)] += 1
    assert max(seconds) < 2 * min(seconds), seconds


@given(times, st.floats(min_value=0.0, max_value=3600.0), places)
def test_the_next_check_is_the_first_place_after_half_an_interval_and_the_check(
    began: float, took: float, offset: float
) -> None:
    finished = began + took
    due = schedule.due_after(began, finished, offset, INTERVAL)
    earliest = max(began + INTERVAL / 2, finished)
    assert due > began + INTERVAL / 2
    assert due >= finished
    assert due - INTERVAL <= earliest + 1e-6  # the first such place, none skipped
    turns = (due - offset) / INTERVAL
    assert math.isclose(turns, round(turns), abs_tol=1e-6)


@given(
    st.integers(min_value=-100_000, max_value=100_000),
    places,
    st.floats(min_value=0.0, max_value=6.0),
    st.floats(min_value=0.0, max_value=6.0),
    st.floats(min_value=0.0, max_value=10.0),
)
def test_in_the_steady_state_the_gap_is_a_minute_give_or_take_the_lateness(
    turn: int, offset: float, late: float, late_next: float, took: float
) -> None:
    """A check that began at its place plus the spec's lateness (up to 6 s) and took up to its
    10 s: the next is due one interval after its place, so the gap is 54 to 66 s."""
    place = offset + turn * INTERVAL
    began = place + late
    due = schedule.due_after(began, began + took, offset, INTERVAL)
    assert math.isclose(due, place + INTERVAL, abs_tol=1e-6)
    assert 54.0 - 1e-6 <= due + late_next - began <= 66.0 + 1e-6


@given(places, st.floats(min_value=0.0, max_value=1e5), st.floats(min_value=0.0, max_value=1e4))
def test_a_first_or_a_late_check_is_followed_within_an_interval_and_a_half(
    offset: float, began: float, waited: float
) -> None:
    """A first check comes when the Cluster appears, a silent one's may have waited minutes for
    a slot: the next one is due at the first place after half an interval and the check's end,
    never at once and never more than an interval after both."""
    finished = began + waited
    due = schedule.due_after(began, finished, offset, INTERVAL)
    assert due - max(began + INTERVAL / 2, finished) <= INTERVAL + 1e-6


def test_only_no_answer_at_all_is_unanswered() -> None:
    assert schedule.is_unanswered(Reason.UNREACHABLE)
    for reason in Reason:
        if reason is not Reason.UNREACHABLE:
            assert not schedule.is_unanswered(reason), reason


def test_silent_checks_leave_one_slot_unless_there_is_only_one() -> None:
    assert schedule.silent_slots(8) == 7
    assert schedule.silent_slots(2) == 1
    assert schedule.silent_slots(1) == 1
