"""One Cluster's lifecycle (kokumi.core.cluster.lifecycle), as properties of a pure function.

A turn is played here as the actor plays it: ask :func:`next_step`, carry the step out, fold its
result back in, until :class:`Done`; what each step yields (a check's finding, the registry's
answer, whether a release is done) is drawn by Hypothesis. The spec's rules are then asserted on
every step of every turn: a check under half a minute old is reused unless the kubeconfig Secret or
the spec changed, a status is written only when it says something new, a holder carries the
finalizer and a Cluster lets go of it only once nothing names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.cluster import lifecycle, schedule
from kokumi.core.cluster.findings import Check, Read, version_of
from kokumi.core.cluster.lifecycle import State, Step, Turn
from kokumi.core.cluster.status import Outcome, observed_cluster_status
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry.registration import NOT_REGISTERED, Registration
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

NOW = 1_000.0
WINDOW = schedule.REUSE_WINDOW
VERSIONS = ("1", "2")

connections = st.sampled_from(
    [
        Connection("https://a.example:6443"),
        Connection("https://b.example:6443"),
        Connection("https://kubernetes.default.svc"),
    ]
)
registrations = st.just(NOT_REGISTERED) | st.builds(
    Registration,
    holding=st.booleans(),
    server=st.none() | st.just("https://a.example:6443"),
    conflict=conflicts,
    reason=conflict_reasons,
)
finalizer_lists = st.sampled_from([(), (api.FINALIZER,), ("other", api.FINALIZER)])
deletions = st.sampled_from([None, None, None, EARLY])

Draw = Callable[[st.SearchStrategy[Any]], Any]
"""Hypothesis's ``draw``, of a composite strategy or of ``st.data()``."""


@st.composite
def some_clusters(draw: st.DrawFn) -> api.Cluster | api.Invalid:
    cluster = draw(clusters | invalid_clusters)
    meta = attrs.evolve(
        cluster.metadata, finalizers=draw(finalizer_lists), deletion_timestamp=draw(deletions)
    )
    return attrs.evolve(cluster, metadata=meta)


def _check(draw: Draw, at: float, cluster: api.Cluster | api.Invalid) -> Check:
    version = None
    if isinstance(cluster, api.Cluster) and cluster.secret_ref is not None:
        version = version_of(cluster, draw(st.sampled_from(VERSIONS)))
    return Check(
        draw(outcomes),
        at,
        version,
        draw(st.none() | connections),
        heard=draw(st.integers(0, 2)),
    )


@st.composite
def states(draw: st.DrawFn) -> State:
    cluster = draw(some_clusters())
    check = None
    if draw(st.booleans()):
        check = _check(draw, draw(st.floats(NOW - 2 * WINDOW, NOW)), cluster)
    return State(
        cluster,
        selected=draw(st.none() | st.booleans()),
        registration=draw(registrations),
        may_hold=draw(st.booleans()),
        superseded=draw(st.sampled_from([False, False, True])),
        check=check,
        checked_generation=draw(st.none() | st.integers(1, 5)),
        secret_news=draw(st.integers(0, 2)),
        secret_heard=draw(st.integers(0, 2)),
        claimed=draw(st.none() | connections.map(lifecycle.Want)),
        claim_answer=draw(st.none() | registrations),
        seed=draw(st.none() | outcomes),
        next_check=draw(st.sampled_from([-math.inf, math.inf]) | st.floats(NOW - 60, NOW + 60)),
        written=draw(st.none() | cluster_statuses),
    )


# --- a turn, played ----------------------------------------------------------------------------


@attrs.frozen
class Played:
    """One step of a turn, with the state it was decided from."""

    step: Step
    state: State
    turn: Turn


def _carry_out(draw: Draw, state: State, turn: Turn, step: Step) -> tuple[State, Turn]:
    """What the actor would make of ``step``, its results drawn."""
    cluster = state.cluster
    if isinstance(step, lifecycle.Seed):
        seed, state = state.seed, attrs.evolve(state, seed=None)
        assert seed is not None and isinstance(cluster, api.Cluster)
        if cluster.secret_ref is None:  # an InCluster Cluster is checked at once
            return state, turn
        read = Read(version_of(cluster, "1"), NOW, draw(st.none() | connections), None)
        check = lifecycle.seed_check(seed, read, NOW) if read.connection else None
        if check is None:
            return state, turn
        return lifecycle.after_seed(state, check, cluster.metadata.generation), attrs.evolve(
            turn, checked=True
        )
    if isinstance(step, lifecycle.RunCheck):
        if not draw(st.booleans()):  # a message gave up the wait for a slot
            return state, attrs.evolve(turn, checked=True)
        check = _check(draw, NOW, cluster)
        state = lifecycle.after_check(
            state, check, fell_due=NOW, finished=NOW + 1, offset=7.0, interval=60.0, lateness=0
        )
        return state, attrs.evolve(turn, checked=True)
    if isinstance(step, lifecycle.Want):
        state = attrs.evolve(state, may_hold=True, claimed=step, claim_answer=state.registration)
        # The registry's answer, which comes to the mailbox (a new registration, or none yet).
        state = attrs.evolve(state, registration=draw(st.just(state.registration) | registrations))
        return state, attrs.evolve(turn, registered=True)
    if isinstance(step, lifecycle.Release):
        state = attrs.evolve(state, claimed=None, claim_answer=None)
        done = True if state.superseded or not state.may_hold else draw(st.booleans())
        if not state.superseded:
            state = lifecycle.after_release(state, done)
        return state, attrs.evolve(turn, registered=True, released=done)
    if isinstance(step, lifecycle.AddFinalizer | lifecycle.DropFinalizer):
        others = tuple(f for f in cluster.metadata.finalizers if f != api.FINALIZER)
        wanted = (*others, api.FINALIZER) if isinstance(step, lifecycle.AddFinalizer) else others
        meta = attrs.evolve(cluster.metadata, finalizers=wanted)
        return attrs.evolve(state, cluster=attrs.evolve(cluster, metadata=meta)), attrs.evolve(
            turn, finalized=True
        )
    if isinstance(step, lifecycle.StopChecking):
        return attrs.evolve(state, next_check=math.inf), turn
    assert isinstance(step, lifecycle.WriteStatus)
    return attrs.evolve(state, written=step.status), attrs.evolve(turn, wrote=True)


def _play(draw: Draw, state: State, *, watched: str | None) -> tuple[list[Played], State]:
    turn = Turn(path=lifecycle.path_of(state.cluster))
    played: list[Played] = []
    for _ in range(20):
        step = lifecycle.next_step(state, turn, NOW, watched=watched, stamp=LATE)
        played.append(Played(step, state, turn))
        if isinstance(step, lifecycle.Done):
            return played, state
        state, turn = _carry_out(draw, state, turn, step)
    raise AssertionError(f"a turn that does not end: {[type(p.step).__name__ for p in played]}")


def _kinds(played: list[Played]) -> list[str]:
    return [type(p.step).__name__ for p in played]


# --- every turn ----------------------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(state=states(), watched=st.none() | st.sampled_from(VERSIONS), data=st.data())
def test_every_turn_ends_and_does_each_phase_once(
    state: State, watched: str | None, data: st.DataObject
) -> None:
    played, _ = _play(data.draw, state, watched=watched)
    kinds = _kinds(played)
    assert kinds[-1] == "Done"
    for kind in set(kinds) - {"Done"}:
        assert kinds.count(kind) == 1, kinds
    assert not ({"Want", "Release"} <= set(kinds)), kinds


@settings(max_examples=examples(300))
@given(state=states(), watched=st.none() | st.sampled_from(VERSIONS), data=st.data())
def test_a_deleted_or_invalid_cluster_releases_before_its_finalizer_goes(
    state: State, watched: str | None, data: st.DataObject
) -> None:
    """Nothing is checked or claimed; the finalizer goes only once the release is done, and a
    release not done yet is retried with its own backoff."""
    path = lifecycle.path_of(state.cluster)
    if path == "live":
        return
    played, after = _play(data.draw, state, watched=watched)
    kinds = _kinds(played)
    assert not {"Seed", "RunCheck", "Want", "AddFinalizer"} & set(kinds), kinds
    assert after.next_check == math.inf  # never checked again while it is so
    released = [p for p in played if p.turn.released is not None]
    if "DropFinalizer" in kinds:
        drop = kinds.index("DropFinalizer")
        assert "Release" in kinds[:drop] and played[drop].turn.released is True
    if released and released[0].turn.released is False:
        assert played[-1].step == lifecycle.Done(lifecycle.RELEASING)
        assert "DropFinalizer" not in kinds
    if path == "deleting":
        assert "WriteStatus" not in kinds
    if api.FINALIZER in state.cluster.metadata.finalizers and after.registration == NOT_REGISTERED:
        assert api.FINALIZER not in after.cluster.metadata.finalizers


@settings(max_examples=examples(300))
@given(state=states(), watched=st.none() | st.sampled_from(VERSIONS), data=st.data())
def test_a_live_cluster_claims_only_once_told_and_as_itself(
    state: State, watched: str | None, data: st.DataObject
) -> None:
    """Until the Environments actor has spoken nothing is claimed, released or written; a
    superseded actor never claims or releases; a holder carries the finalizer and only a
    Cluster that wants nothing and holds nothing lets it go."""
    if lifecycle.path_of(state.cluster) != "live":
        return
    played, _ = _play(data.draw, state, watched=watched)
    kinds = set(_kinds(played))
    if state.selected is None:
        assert kinds <= {"Seed", "RunCheck", "Done"}, kinds
    if state.superseded:
        assert not {"Want", "Release"} & kinds
    for p in played:
        if isinstance(p.step, lifecycle.AddFinalizer):
            assert p.state.registration.holding
        if isinstance(p.step, lifecycle.DropFinalizer):
            assert not p.state.registration.holding and not p.state.may_hold
        if isinstance(p.step, lifecycle.Want):
            cluster, check = p.state.cluster, p.state.check
            assert p.state.selected and isinstance(cluster, api.Cluster)
            assert cluster.spec.connection == "Kubeconfig"
            assert check is not None and check.outcome.reason != Reason.EGRESS_DENIED


# --- a status only when it says something new ----------------------------------------------------


@settings(max_examples=examples(300))
@given(state=states(), watched=st.none() | st.sampled_from(VERSIONS), data=st.data())
def test_a_status_is_written_only_when_it_says_something_new(
    state: State, watched: str | None, data: st.DataObject
) -> None:
    """What is written differs from what the object says and from the last write; a second turn
    from the same finding (the clock later, nothing new arrived) writes nothing."""
    played, after = _play(data.draw, state, watched=watched)
    for p in played:
        if isinstance(p.step, lifecycle.WriteStatus):
            assert p.step.status != p.state.written
            assert p.step.status != observed_cluster_status(p.state.cluster)
    if lifecycle.path_of(after.cluster) != "live" or after.check is None:
        return
    # The same finding again, later: the check is fresh, nothing changed since, and the registry
    # says nothing new (a superseded actor neither claims nor releases).
    again = attrs.evolve(
        after,
        check=attrs.evolve(after.check, at=NOW, secret_version=_seen(after, watched)),
        next_check=NOW + 60,
        secret_heard=after.secret_news,
        checked_generation=after.cluster.metadata.generation,
        superseded=True,
    )
    kinds = _kinds(_play(data.draw, again, watched=watched)[0])
    assert not {"Seed", "RunCheck", "WriteStatus"} & set(kinds), kinds


def _seen(state: State, watched: str | None) -> str | None:
    """The version of the kubeconfig the watch says the Cluster would read now."""
    cluster = state.cluster
    if isinstance(cluster, api.Cluster) and cluster.secret_ref is not None and watched:
        return version_of(cluster, watched)
    return state.check.secret_version if state.check is not None else None


# --- a check under half a minute old is reused ---------------------------------------------------


@st.composite
def fresh(draw: st.DrawFn) -> tuple[State, str | None]:
    """A live Cluster whose check is under the reuse window old, with nothing changed since."""
    cluster = draw(clusters)
    meta = attrs.evolve(cluster.metadata, deletion_timestamp=None)
    cluster = attrs.evolve(cluster, metadata=meta)
    watched = draw(st.none() | st.sampled_from(VERSIONS))
    check = _check(draw, NOW - draw(st.floats(0, WINDOW - 0.001)), cluster)
    if watched is not None and cluster.secret_ref is not None:
        check = attrs.evolve(check, secret_version=version_of(cluster, watched))
    news = draw(st.integers(0, 3))
    state = State(
        cluster,
        selected=draw(st.none() | st.booleans()),
        check=check,
        checked_generation=meta.generation,
        secret_news=news,
        secret_heard=news,
        next_check=draw(st.floats(NOW, NOW + 60, exclude_min=True)),
    )
    return state, watched


@settings(max_examples=examples(300))
@given(fresh=fresh())
def test_a_check_under_half_a_minute_old_is_reused(fresh: tuple[State, str | None]) -> None:
    state, watched = fresh
    step = lifecycle.next_step(state, Turn(path="live"), NOW, watched=watched, stamp=LATE)
    assert not isinstance(step, lifecycle.RunCheck | lifecycle.Seed)


def _changes(state: State) -> dict[str, dict[str, Any]]:
    """Each thing that makes a fresh check stale, as a change of the state."""
    check = state.check
    assert check is not None
    meta = attrs.evolve(state.cluster.metadata, generation=state.cluster.metadata.generation + 1)
    return {
        "the spec changed": {"cluster": attrs.evolve(state.cluster, metadata=meta)},
        "the watch heard of the Secret": {"secret_news": state.secret_news + 1},
        "the timer is due": {"next_check": NOW},
        "the window has passed": {"check": attrs.evolve(check, at=NOW - WINDOW)},
        # Back from an invalid spell that changed no spec (an object over the metadata bounds,
        # then trimmed): nothing was planned after the spell's last check.
        "no check is planned": {"next_check": math.inf},
    }


@settings(max_examples=examples(300))
@given(fresh=fresh(), which=st.sampled_from(range(6)))
def test_a_check_is_made_again_when_the_secret_the_spec_the_timer_or_the_window_says(
    fresh: tuple[State, str | None], which: int
) -> None:
    state, watched = fresh
    changes = list(_changes(state).values())
    if which < len(changes):
        state = attrs.evolve(state, **changes[which])
    else:
        cluster = state.cluster
        if not isinstance(cluster, api.Cluster) or cluster.secret_ref is None:
            return  # an InCluster Cluster has no Secret to change
        # The watch reports another version of the Secret than the check read.
        check = state.check
        assert check is not None
        watched = next(v for v in VERSIONS if version_of(cluster, v) != check.secret_version)
    step = lifecycle.next_step(state, Turn(path="live"), NOW, watched=watched, stamp=LATE)
    assert isinstance(step, lifecycle.RunCheck)


def _kubeconfig_cluster(name: str, namespace: str) -> api.Cluster:
    """A Kubeconfig Cluster of spec generation 2, its kubeconfig in Secret ``kubeconfig``."""
    return api.Cluster(
        api.Meta(name, namespace, uid="u", generation=2),
        api.ClusterSpec("Kubeconfig", api.KubeconfigSource(api.SecretRef("kubeconfig"))),
        api.ClusterStatus(),
    )


def _ready_check(cluster: api.Cluster, message: str) -> Check:
    """A Ready check a second old, of version 1 of the Cluster's kubeconfig Secret."""
    return Check(
        Outcome(True, Reason.READY, message, "https://a.example:6443"),
        NOW - 1,
        version_of(cluster, "1"),
    )


def test_a_secret_the_watch_has_not_listed_yet_is_not_a_change() -> None:
    cluster = _kubeconfig_cluster("spoke", "fleet")
    check = _ready_check(cluster, "ok")
    state = State(cluster, check=check, checked_generation=2, next_check=NOW + 30)
    assert not lifecycle.needs_check(state, NOW, watched=None)
    assert not lifecycle.needs_check(state, NOW, watched="1")
    assert lifecycle.needs_check(state, NOW, watched="2")


# --- the first check after a restart -------------------------------------------------------------


@settings(max_examples=examples(300))
@given(
    after=st.floats(0, 10_000),
    recorded=st.none() | st.floats(0, 10_000),
    offset=st.floats(0, 63, exclude_max=True),
    since=st.floats(-100, 10_000),
    lateness=st.floats(0, 3, exclude_max=True),
)
def test_a_restart_checks_on_the_recorded_chain_or_at_its_place_or_at_once(
    after: float, recorded: float | None, offset: float, since: float, lateness: float
) -> None:
    """The recorded due is kept, never moved earlier (it was drawn a minute or more after the
    check before it began); else now for a missed place, else the place plus its lateness."""
    period = 63.0
    due, missed = lifecycle.first_due(
        after, recorded=recorded, offset=offset, period=period, since=since, lateness=lateness
    )
    assert due >= after
    if recorded is not None:
        assert due >= recorded
        assert (due, missed) == ((recorded, None) if recorded > after else (after, recorded))
    elif missed is not None:
        # Its place came while no manager may have checked it: now, ordered by that place.
        assert due == after and since <= missed <= after
    else:
        assert due - lateness - after < period + 1e-6
        turns = (due - lateness - offset) / period
        assert abs(turns - round(turns)) < 1e-6


def test_a_seed_is_taken_only_while_the_kubeconfig_leads_to_its_server() -> None:
    seed = Outcome(True, Reason.READY, "ok", "https://a.example:6443", "v1.36.3")
    same = Read("v", NOW, Connection("https://a.example:6443"), None)
    moved = Read("v", NOW, Connection("https://b.example:6443"), None)
    broken = Read("v", NOW, None, Outcome(False, Reason.INVALID_KUBECONFIG, "no server"))
    taken = lifecycle.seed_check(seed, same, NOW)
    assert taken is not None and taken.outcome is seed and taken.connection is same.connection
    assert lifecycle.seed_check(seed, moved, NOW) is None
    assert lifecycle.seed_check(seed, broken, NOW) is None


def test_a_cluster_back_from_an_invalid_spell_of_the_same_spec_is_checked_again() -> None:
    """Over the bounds of tenant metadata (its labels, not its spec), then trimmed back: the check
    from before the spell must not serve, with nothing planned after it (found by the model test:
    such a Cluster stayed Ready on a check of a spoke long down)."""
    live = _kubeconfig_cluster("a", "ws1")
    check = attrs.evolve(
        _ready_check(live, "reachable"), connection=Connection("https://a.example:6443")
    )
    state = State(live, selected=True, check=check, checked_generation=2, next_check=NOW + 50)
    over = api.Invalid(live.metadata, "over the bounds", live.status)
    played, state = _play(lambda strategy: False, attrs.evolve(state, cluster=over), watched="1")
    assert "StopChecking" in _kinds(played) and state.next_check == math.inf
    back = attrs.evolve(state, cluster=live)
    step = lifecycle.next_step(back, Turn(path="live"), NOW + 2, watched="1", stamp=LATE)
    assert isinstance(step, lifecycle.RunCheck)


# --- a stopping manager's early checks -----------------------------------------------------------


@settings(max_examples=examples(200))
@given(
    cluster=clusters,
    running_for=st.none() | st.floats(0, 30),
    due_in=st.floats(-40, 40),
    asked=st.booleans(),
)
def test_the_record_never_puts_a_check_before_the_minute_after_one_under_way_began(
    cluster: api.Cluster, running_for: float | None, due_in: float, asked: bool
) -> None:
    """The stop record is written while checks may be under way (the stop's own, or any that
    fell due meanwhile): their next due is not known yet, and the one the state holds is the
    one they are making. Seen at 10,000 Clusters: eight such checks (one per slot) were made
    again by the next manager 8-19 s later."""
    ready = Outcome(True, Reason.READY, "ok", "https://a.example:6443", "v1.36.3")
    state = State(
        cluster,
        check=Check(ready, NOW - 70, None, began=NOW - 70),
        next_check=NOW + due_in,
        running_since=None if running_for is None else NOW - running_for,
    )
    if asked:
        state = attrs.evolve(state, stop_check=1, stop_check_due=NOW + due_in, next_check=NOW)
    due = lifecycle.next_due(state, 60.0)
    assert due is not None
    if running_for is None:
        assert due == NOW + due_in
    else:
        assert due == max(NOW + due_in, NOW - running_for + 60.0)
        assert due >= NOW - running_for + 60.0
    # The check's end gives it its next due, and the state forgets the one under way.
    ended = lifecycle.after_check(
        state,
        Check(ready, NOW, None, began=NOW - (running_for or 0.0)),
        fell_due=NOW,
        finished=NOW,
        offset=0.0,
        interval=60.0,
        lateness=0.0,
    )
    assert ended.running_since is None


@settings(max_examples=examples(200))
@given(
    cluster=clusters,
    began=st.none() | st.floats(NOW - 120, NOW),
    due_in=st.floats(-5, 40),
    answered=st.booleans(),
    unanswered=st.integers(0, 3),
)
def test_a_stop_asks_for_a_check_only_once_the_minute_since_the_last_one_began_is_over(
    cluster: api.Cluster,
    began: float | None,
    due_in: float,
    answered: bool,
    unanswered: int,
) -> None:
    """A stopping manager checks at once the answering Clusters due within the horizon, but
    never one whose last check began less than a minute ago: that check would come before the
    minute. A seeded check's beginning is not known, so it waits for its due too."""
    ready = Outcome(True, Reason.READY, "ok", "https://a.example:6443", "v1.36.3")
    check = Check(ready, NOW - 1 if began is None else began, None, began=began)
    state = State(
        cluster,
        check=check,
        next_check=NOW + due_in,
        answered=answered,
        unanswered=unanswered,
    )
    asked = lifecycle.ask_before_stop(state, NOW + 25.0, NOW, 60.0)
    expected = (
        began is not None
        and began + 60.0 <= NOW
        and due_in <= 25.0
        and schedule.check_class(unanswered, answered) == schedule.ANSWERING
    )
    assert (asked is not None) == expected
    if asked is not None:
        assert asked.next_check == NOW and asked.missed_due == NOW + due_in
        assert lifecycle.next_due(asked, 60.0) == NOW + due_in  # the record keeps its due
