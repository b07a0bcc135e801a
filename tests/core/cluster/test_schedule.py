"""The check schedule's rules (kokumi.core.cluster.schedule): each Cluster's own place in the
period, every gap a minute to a minute and 6 s on the way to it and on it, the fleet spread, and
the class of each check."""

from __future__ import annotations

import math
import random
import uuid

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from kokumi.core.cluster import schedule
from kokumi.core.reasons import Reason

INTERVAL = 60.0
times = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)
places = st.floats(min_value=0.0, max_value=63.0, exclude_max=True)


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


PERIOD = schedule.period_of(INTERVAL, schedule.CHECK_JITTER)
JITTER = schedule.CHECK_JITTER
# Gaps are compared with a microsecond's slack: times of 1e7 s keep about 1e-9 s of precision.
EPS = 1e-6


def _from_place(at: float, offset: float) -> float:
    """How far ``at`` is from the Cluster's nearest place, signed: within half a period."""
    return (at - offset + PERIOD / 2) % PERIOD - PERIOD / 2


lateness = st.floats(min_value=0.0, max_value=JITTER / 2, exclude_max=True)


def test_places_recur_a_minute_plus_half_the_jitter_apart() -> None:
    """Every gap is a minute plus 0 to 6 s, so a Cluster on its place is checked every 63 s on
    average: that is how far apart its places are."""
    assert PERIOD == 63.0


@given(times, st.floats(min_value=0.0, max_value=INTERVAL / 2), places, lateness)
# Half a period from two places: the later one (a tie went by the parity of the turn).
@example(began=0.0, took=0.0, offset=PERIOD / 2, late=0.0)
def test_the_next_check_comes_a_minute_to_a_minute_and_the_jitter_after_the_last_began(
    began: float, took: float, offset: float, late: float
) -> None:
    """Whenever the check began and however long it took within its budget (a first check comes
    whenever its Cluster appeared; a hanging spoke's takes its whole 10 s), the next is due 60
    to 66 s after it began, never sooner, and either on the Cluster's place (up to 3 s after
    it) or 1.5 to 3 s nearer to it than a period after this check."""
    assume(0.0 <= offset < PERIOD)
    finished = began + took
    assume(finished - began <= INTERVAL / 2)  # floating point
    due = schedule.due_after(began, finished, offset, INTERVAL, lateness=late)
    assert INTERVAL - EPS <= due - began <= INTERVAL + JITTER + EPS
    assert due >= finished
    before = _from_place(began + PERIOD, offset)  # where it would be, a period on
    after = _from_place(due, offset)
    on_place = -EPS <= after < JITTER / 2 + EPS
    assert on_place or abs(before) - 3.0 - EPS <= abs(after) <= abs(before) - 1.5 + EPS
    if -JITTER / 2 < before - late < JITTER / 2:  # the aim is within reach: the check lands on it
        assert abs(_from_place(due - late, offset)) <= 1e-5


@given(times, st.floats(min_value=INTERVAL / 2, max_value=3600.0, exclude_min=True), places)
def test_a_check_that_ran_past_half_an_interval_is_followed_a_minute_after_it_ended(
    began: float, took: float, offset: float
) -> None:
    """Longer than a check's budget allows: the minute counts from its end."""
    finished = began + took
    assume(finished - began > INTERVAL / 2)  # floating point
    due = schedule.due_after(began, finished, offset % PERIOD, INTERVAL)
    assert INTERVAL - EPS <= due - finished <= INTERVAL + JITTER + EPS


@given(
    places,
    st.floats(min_value=0.0, max_value=1e5),
    st.sampled_from([0.02, 2.0, 10.0]),
    st.lists(lateness, min_size=40, max_size=40),
)
def test_a_first_check_anywhere_reaches_its_place_with_every_gap_a_minute_and_a_little(
    offset: float, appeared: float, took: float, lates: list[float]
) -> None:
    """A Cluster created anywhere in the period, its spoke answering at once, slowly, or not at
    all (every check its full 10 s): every gap from the beginning of one check to the next is
    60 to 66 s, the first one included; from its 24th check on each is at its place plus that
    check's lateness, and stays there."""
    offset %= PERIOD
    at = appeared
    for count, late in enumerate(lates, start=2):
        due = schedule.due_after(at, at + took, offset, INTERVAL, lateness=late)
        assert INTERVAL - EPS <= due - at <= INTERVAL + JITTER + EPS, (count, due - at)
        if count >= 24:
            assert abs(_from_place(due - late, offset)) <= 1e-5, (count, due, late)
        at = due


@given(times, places)
def test_the_first_place_is_at_or_after_the_moment_and_within_an_interval(
    at: float, offset: float
) -> None:
    due = schedule.first_place(at, offset, PERIOD)
    assert at <= due < at + PERIOD + 1e-6
    assert abs(_from_place(due, offset)) <= 1e-5


@given(times, places, st.floats(min_value=0.0, max_value=2 * PERIOD))
def test_a_place_is_missed_exactly_when_it_came_since_the_manager_began(
    now: float, offset: float, served_for: float
) -> None:
    """After a restart: checked at once if and only if an occurrence of the Cluster's place lies
    between ``since`` and ``now``; and one served for a whole period always has one."""
    since = now - served_for
    missed = schedule.missed_place(now, offset, PERIOD, since)
    # Whole periods k with since <= offset + k * PERIOD <= now.
    first_k = math.ceil((since - offset) / PERIOD)
    last_k = math.floor((now - offset) / PERIOD)
    for k in (first_k, last_k):  # on an edge, floating point decides
        assume(min(abs(offset + k * PERIOD - t) for t in (since, now)) > 1e-6)
    assert missed == (first_k <= last_k)
    if served_for >= PERIOD + 1e-6:
        assert missed


@given(st.floats(min_value=-1e7, max_value=1e7), places)
def test_a_missed_check_fell_due_at_the_last_place_before_now(now: float, offset: float) -> None:
    """The place a restart's check at once missed: within the period before ``now``, at the
    Cluster's offset, so that ordering by it is ordering by how long each has waited."""
    due = schedule.missed_due(now, offset, PERIOD)
    assert now - PERIOD - 1e-6 <= due <= now + 1e-6
    turns = (due - offset) / PERIOD
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
    """A check that began at its place plus the spec's lateness (up to 3 s) and took up to its
    10 s: the next is due one period after its place plus its own lateness, 60 to 66 s on."""
    place = offset + turn * PERIOD
    began = place + late
    due = schedule.due_after(began, began + took, offset, INTERVAL, lateness=late_next)
    assert math.isclose(due, place + PERIOD + late_next, abs_tol=1e-6)


def test_a_hanging_spokes_checks_come_a_minute_or_more_apart_from_their_starts() -> None:
    """A spoke that takes the connection and never answers: every check runs its full 10 s. Its
    checks began 54.0 s apart when the next was due a minute after the last began, moved toward
    the place by up to 6 s; now, wherever its place and whatever its lateness, each begins 60 to
    66 s after the last began."""
    for offset in (0.0, 10.0, 31.4, 31.6, 50.0, 62.9):
        for late in (0.0, 1.5, 2.999):
            at = 1_000_000.0
            for _ in range(30):
                due = schedule.due_after(at, at + schedule.CHECK_TIMEOUT, offset, INTERVAL, late)
                assert INTERVAL <= due - at <= INTERVAL + JITTER, (offset, late, due - at)
                at = due


def _fleet(
    rng: random.Random, clusters: int, pace: float, minutes: int
) -> tuple[list[float], list[int]]:
    """Checks of ``clusters`` Clusters whose first checks came at ``pace`` a second from time 0,
    each taking 20 ms, every next one planned by the schedule with a random lateness, over
    ``minutes``: every gap, and the checks begun in each second."""
    offsets = [
        schedule.offset_of(str(uuid.UUID(int=rng.getrandbits(128))), PERIOD)
        for _ in range(clusters)
    ]
    end = minutes * 60.0
    counts = [0] * (minutes * 60)
    gaps: list[float] = []
    for index, offset in enumerate(offsets):
        at = index / pace
        while at < end:
            counts[int(at)] += 1
            late = rng.uniform(0.0, JITTER / 2)
            due = schedule.due_after(at, at + 0.02, offset, INTERVAL, lateness=late)
            gaps.append(due - at)
            at = due
    return gaps, counts


@settings(max_examples=8, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from([1e9, 400.0, 60.0]))
def test_a_fleet_started_at_once_spreads_over_the_period_and_stays_spread(
    seed: int, pace: float
) -> None:
    """2,000 Clusters whose first checks came together: in one instant, as fast as eight slots
    make them (400 a second), or as onboarding does (60 a second). Lateness only ever adds, so
    every Cluster moves later in the minute, but all alike: their places keep them apart. Over
    40 minutes every gap is 60 to 66 s; no minute's busiest second holds more than the first
    minute's or three times the even share (N / 63 s); and from the 24th minute, when each
    Cluster is on its place, none holds more than two and a half times the even share."""
    clusters, minutes = 2_000, 40
    gaps, counts = _fleet(random.Random(seed), clusters, pace, minutes)
    assert min(gaps) >= INTERVAL - EPS and max(gaps) <= INTERVAL + JITTER + EPS
    even = clusters / PERIOD
    busiest = [max(counts[m * 60 : (m + 1) * 60]) for m in range(minutes)]
    assert all(b <= max(busiest[0], 3 * even) for b in busiest), busiest
    assert all(b <= 2.5 * even for b in busiest[24:]), busiest


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
