"""The check schedule's rules (kokumi.core.cluster.schedule): each Cluster's own place in the
minute, every gap about a minute on the way to it, and the class of each check."""

from __future__ import annotations

import math
import uuid

from hypothesis import assume, example, given
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


def _from_place(at: float, offset: float) -> float:
    """How far ``at`` is from the Cluster's nearest place, signed: within half an interval."""
    return (at - offset + INTERVAL / 2) % INTERVAL - INTERVAL / 2


lateness = st.floats(min_value=0.0, max_value=6.0)


@given(times, st.floats(min_value=0.0, max_value=INTERVAL / 2), places, lateness)
# Half an interval from two places: the later one (a tie went by the parity of the turn).
@example(began=0.0, took=0.0, offset=30.0, late=0.0)
def test_the_next_check_is_an_interval_on_moved_toward_its_place_by_a_tenth_at_most(
    began: float, took: float, offset: float, late: float
) -> None:
    """Whenever the check began (a first check comes whenever its Cluster appeared), the next
    is due 54 to 66 s after it, never before it ends, and 6 s closer to the Cluster's place
    plus its lateness, or on it."""
    finished = began + took
    assume(finished - began <= INTERVAL / 2)  # floating point
    due = schedule.due_after(began, finished, offset, INTERVAL, lateness=late)
    assert 54.0 - 1e-6 <= due - began <= 66.0 + 1e-6
    assert due >= finished
    target = began + INTERVAL
    aim = target - _from_place(target, offset) + late  # the nearest place, plus its lateness
    assert math.isclose(abs(due - aim), max(0.0, abs(target - aim) - 6.0), abs_tol=1e-5)


@given(times, st.floats(min_value=INTERVAL / 2, max_value=3600.0, exclude_min=True), places)
def test_a_check_that_ran_past_half_an_interval_is_followed_a_minute_after_it_ended(
    began: float, took: float, offset: float
) -> None:
    finished = began + took
    assume(finished - began > INTERVAL / 2)  # floating point
    due = schedule.due_after(began, finished, offset, INTERVAL)
    assert 54.0 - 1e-6 <= due - finished <= 66.0 + 1e-6


@given(
    places,
    st.floats(min_value=0.0, max_value=1e5),
    st.lists(lateness, min_size=12, max_size=12),
)
def test_a_first_check_anywhere_reaches_its_place_with_every_gap_about_a_minute(
    offset: float, appeared: float, lates: list[float]
) -> None:
    """A Cluster created anywhere in the minute, each check with the spec's random lateness:
    every gap between its checks is 54 to 66 s, the first one included, and from its seventh
    check on each one is at its place plus that check's lateness."""
    at = appeared
    for count, late in enumerate(lates, start=2):
        due = schedule.due_after(at, at + 0.05, offset, INTERVAL, lateness=late)
        assert 54.0 - 1e-6 <= due - at <= 66.0 + 1e-6
        if count >= 7:
            assert abs(_from_place(due - late, offset)) <= 1e-5, (count, due, late)
        at = due


@given(times, places)
def test_the_first_place_is_at_or_after_the_moment_and_within_an_interval(
    at: float, offset: float
) -> None:
    due = schedule.first_place(at, offset, INTERVAL)
    assert at <= due < at + INTERVAL + 1e-6
    assert abs(_from_place(due, offset)) <= 1e-5


@given(times, places, st.floats(min_value=0.0, max_value=2 * INTERVAL))
def test_a_place_is_missed_exactly_when_it_came_since_the_manager_began(
    now: float, offset: float, served_for: float
) -> None:
    """After a restart: checked at once if and only if an occurrence of the Cluster's place lies
    between ``since`` and ``now``; and one served for a whole interval always has one."""
    since = now - served_for
    missed = schedule.missed_place(now, offset, INTERVAL, since)
    # Whole intervals k with since <= offset + k * INTERVAL <= now.
    first_k = math.ceil((since - offset) / INTERVAL)
    last_k = math.floor((now - offset) / INTERVAL)
    for k in (first_k, last_k):  # on an edge, floating point decides
        assume(min(abs(offset + k * INTERVAL - t) for t in (since, now)) > 1e-6)
    assert missed == (first_k <= last_k)
    if served_for >= INTERVAL + 1e-6:
        assert missed


@given(st.floats(min_value=-1e7, max_value=1e7), places)
def test_a_missed_check_fell_due_at_the_last_place_before_now(now: float, offset: float) -> None:
    """The place a restart's check at once missed: within the interval before ``now``, at the
    Cluster's offset, so that ordering by it is ordering by how long each has waited."""
    due = schedule.missed_due(now, offset, INTERVAL)
    assert now - INTERVAL - 1e-6 <= due <= now + 1e-6
    turns = (due - offset) / INTERVAL
    assert abs(turns - round(turns)) < 1e-6


@given(
    st.integers(min_value=-100_000, max_value=100_000),
    places,
    lateness,
    lateness,
    st.floats(min_value=0.0, max_value=10.0),
)
def test_in_the_steady_state_each_check_is_at_its_place_plus_its_lateness(
    turn: int, offset: float, late: float, late_next: float, took: float
) -> None:
    """A check that began at its place plus the spec's lateness (up to 6 s) and took up to its
    10 s: the next is due one interval after its place plus its own lateness."""
    place = offset + turn * INTERVAL
    began = place + late
    due = schedule.due_after(began, began + took, offset, INTERVAL, lateness=late_next)
    assert math.isclose(due, place + INTERVAL + late_next, abs_tol=1e-6)


def test_only_no_answer_at_all_is_unanswered() -> None:
    assert schedule.is_unanswered(Reason.UNREACHABLE)
    for reason in Reason:
        if reason is not Reason.UNREACHABLE:
            assert not schedule.is_unanswered(reason), reason


def test_a_cluster_that_never_answered_is_silent_after_its_first_try() -> None:
    """A batch of new Clusters whose servers do not answer yet: one try each in the new class,
    then the slots the answering ones leave; one that answered keeps two misses."""
    assert schedule.check_class(0, answered=False) == schedule.NEW
    assert schedule.check_class(1, answered=False) == schedule.SILENT
    assert schedule.check_class(0, answered=True) == schedule.ANSWERING
    assert schedule.check_class(1, answered=True) == schedule.ANSWERING
    assert schedule.check_class(schedule.SILENT_AFTER, answered=True) == schedule.SILENT
    assert schedule.CLASSES == (schedule.ANSWERING, schedule.NEW, schedule.SILENT)


def test_silent_checks_leave_one_slot_unless_there_is_only_one() -> None:
    assert schedule.silent_slots(8) == 7
    assert schedule.silent_slots(2) == 1
    assert schedule.silent_slots(1) == 1
