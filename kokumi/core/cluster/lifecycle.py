"""One Cluster's life, decided purely: its state as one frozen value, and the next step from it.

The Cluster actor (:mod:`kokumi.actors.cluster`) keeps the mailbox, the timer and the carrying
out; every choice it makes is made here, from a :class:`State` (what the actor knows of its
Cluster), a :class:`Turn` (what this reconcile has done so far) and the time. One reconcile is a
chain of :func:`next_step` calls, each step carried out and its result folded back into the
state, until a :class:`Done`. That is Cluster API's machine controller's shape (a list of
phases over one scope value), and it lets the spec's rules be tested as properties of a
function, with no actor, no clock and no server:

- a check less than :data:`~kokumi.core.cluster.schedule.REUSE_WINDOW` old serves, unless the
  kubeconfig Secret, its reference or the spec changed (:func:`needs_check`);
- a status is written only when it would say something new (:func:`status_to_write`);
- a holder carries the finalizer, and a Cluster lets go of it only once no Secret names it
  (:func:`finalizer_step`); a deleted or invalid Cluster releases first, then drops it.

The phases of a live Cluster, in order, each at most once a turn: seed (a restart takes the
status's finding as the first check), check (or reuse), claim or release its server, the
finalizer, the status. A deleted Cluster stops being checked, releases, then drops its
finalizer; an invalid one releases, reports why, stops being checked, then drops it.
"""

from __future__ import annotations

import math

import attrs

from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.core.cluster.findings import Check, Read, secret_version, version_of
from kokumi.core.cluster.status import (
    Outcome,
    claim_stands,
    cluster_outcome,
    cluster_status,
    observed_cluster_status,
)
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import PROBE_REASONS, Reason
from kokumi.core.registry.carry import NO_EXTRAS, NOT_CARRYING, Carrying, Extras
from kokumi.core.registry.ownership import is_argocd_own
from kokumi.core.registry.registration import NOT_REGISTERED, Registration

__all__ = [
    "RELEASING",
    "AddFinalizer",
    "Done",
    "DropFinalizer",
    "Release",
    "RunCheck",
    "Seed",
    "State",
    "Step",
    "StopChecking",
    "Turn",
    "Want",
    "WriteStatus",
    "after_check",
    "after_release",
    "after_seed",
    "ask_before_stop",
    "claim_step",
    "finalizer_step",
    "first_due",
    "needs_check",
    "next_due",
    "next_step",
    "path_of",
    "reusable_read",
    "seen",
    "slot_request",
    "seed_check",
    "status_to_write",
]

RELEASING = "releasing its Argo CD registration"
"""The kind of request a release that is not done yet retries as (its own backoff)."""


@attrs.frozen
class State:
    """What a Cluster actor knows of its Cluster: everything its decisions are made from."""

    cluster: api.Cluster | api.Invalid
    #: Whether an Environment selects it; None until the Environments actor has said: after a
    #: restart, acting on a guess would release (and so delete) a registration still wanted.
    selected: bool | None = None
    #: Which Environments select it, sorted: its Argo CD Secret carries their names.
    environments: tuple[str, ...] = ()
    #: The manager's allow-lists: what of the Cluster its Secret carries (one value for all).
    carry: Carrying = attrs.field(default=NOT_CARRYING, repr=False)
    #: The registry's last word for this Cluster.
    registration: Registration = NOT_REGISTERED
    #: Whether the registry may count it as holding or waiting. True at start: after a restart
    #: the registry's table, rebuilt from Argo CD's Secrets, may name it.
    may_hold: bool = True
    #: A Cluster of the same name was made again: its claims are the new actor's, so this one
    #: neither wants nor releases anything, or a late message would undo the new registration.
    superseded: bool = False
    check: Check | None = None
    #: The spec generation ``check`` was made for: a new spec (a connection switched, or valid
    #: again after an Invalid spell) is checked afresh, never served an old check.
    checked_generation: int | None = None
    read: Read | None = None
    #: Words of a changed Secret (the watch's), and how many of them the last check heard.
    secret_news: int = 0
    secret_heard: int = 0
    #: The claim last made (connection and extras) and the registry's answer to it: a check
    #: that finds all the same claims nothing again.
    claimed: Want | None = attrs.field(default=None, repr=False)
    claim_answer: Registration | None = None
    #: What the status said when the actor started, if a check of this spec wrote it.
    #:
    #: After a restart every Cluster would otherwise check at once: thousands of connections
    #: together, the loop too busy to finish the checks in their 10 s, and healthy Clusters
    #: marked Unreachable. So the actor reads the kubeconfig (for its registration), keeps this
    #: finding as its first check (:func:`seed_check`), writes nothing since nothing changed,
    #: and checks at its own place within the interval, or at once if that place came while no
    #: manager may have checked it (:func:`first_due`). A Cluster whose status does not match
    #: its spec or its kubeconfig's server is checked at once. Deferring the read to that first
    #: check was measured too: at 10,000 Clusters the hub served 83 GETs a second either way, so
    #: the first checks queued behind their reads and the gap across a restart grew (p99
    #: 152-172 s against 119-136 s).
    seed: Outcome | None = None
    #: When the next check falls due (``math.inf``: never; ``-math.inf``: now).
    next_check: float = -math.inf
    #: A restart's first check of a place missed: when it fell due, which orders it among the
    #: others checked at once. None once it has run.
    missed_due: float | None = None
    #: Checks in a row that got no answer, and whether any ever did (schedule.check_class).
    unanswered: int = 0
    answered: bool = False
    #: The status this manager wrote last (the watch may not have brought it back yet).
    written: api.ClusterStatus | None = None
    #: This manager's stop asked for a check (1), which has been made (2); and when that check
    #: fell due before the stop asked for it (see :func:`ask_before_stop`).
    stop_check: int = 0
    stop_check_due: float = math.nan
    #: When the check under way began (None: none is), for a stop record written meanwhile.
    running_since: float | None = None


@attrs.frozen
class Turn:
    """What one reconcile has done so far: each phase runs at most once a turn."""

    #: The path the turn took (see :func:`path_of`): a Cluster that turns deleted or invalid
    #: meanwhile ends the turn, and the next one starts on its own path.
    path: str | None = None
    #: The check phase is over: a check made, reused, seeded, or its wait for a slot given up.
    checked: bool = False
    #: None: nothing released this turn; else whether the release is done.
    released: bool | None = None
    registered: bool = False
    finalized: bool = False
    wrote: bool = False


# --- the steps ---------------------------------------------------------------------------------


@attrs.frozen
class Seed:
    """Read the kubeconfig and take the status's finding as the first check if it still fits."""


@attrs.frozen
class RunCheck:
    """Check the Cluster (reading its Secret unless a read serves); the wait for a slot yields to
    any message."""


@attrs.frozen
class Want:
    """Claim the server of ``connection``, carrying ``extras`` on its Secret; the registry
    answers with a new registration."""

    connection: Connection = attrs.field(repr=False)
    extras: Extras = attrs.field(default=NO_EXTRAS, repr=False)


@attrs.frozen
class Release:
    """Let go of any claim; the result says whether no Secret names the Cluster any more."""


@attrs.frozen
class AddFinalizer:
    """A holder carries the finalizer: its Secret goes even if it is deleted while no manager
    runs."""


@attrs.frozen
class DropFinalizer:
    """Nothing names the Cluster any more: let the API server delete it, or keep it unblocked."""


@attrs.frozen
class StopChecking:
    """No check falls due any more, and nobody waiting for a first check waits for this one."""


@attrs.frozen
class WriteStatus:
    status: api.ClusterStatus


@attrs.frozen
class Done:
    """The turn is over; ``retry``: the kind of request to try again after its backoff."""

    retry: str | None = None


Step = (
    Seed
    | RunCheck
    | Want
    | Release
    | AddFinalizer
    | DropFinalizer
    | StopChecking
    | WriteStatus
    | Done
)

DONE = Done()


# --- the rules -----------------------------------------------------------------------------------


def path_of(cluster: api.Cluster | api.Invalid) -> str:
    """``deleting``, ``invalid`` or ``live``: which chain of phases a turn follows."""
    if cluster.metadata.deletion_timestamp:
        return "deleting"
    return "invalid" if isinstance(cluster, api.Invalid) else "live"


def next_step(
    state: State,
    turn: Turn,
    now: float,
    *,
    watched: str | None,
    reuse_window: float = schedule.REUSE_WINDOW,
    stamp: str | None = None,
) -> Step:
    """The next thing to do for ``state``'s Cluster in a turn that has done ``turn`` so far.

    ``now`` is when the turn began (a check made during it does not make the turn later),
    ``watched`` the Secret watch's version of the Cluster's kubeconfig Secret (None: not known
    yet), ``stamp`` the time a changed condition's transition time says.
    """
    path = path_of(state.cluster)
    if turn.path is not None and turn.path != path:
        return DONE  # the Cluster changed its path meanwhile; its message woke the next turn
    if path == "deleting":
        # Let go first, and let the object go only once the registry says no Secret names it
        # any more. Nothing is checked any more: with the check timer in the past, a Cluster
        # whose DELETED event is late (a watch down) would reconcile in a loop that never blocks.
        if state.next_check != math.inf:
            return StopChecking()
        return _let_go(state, turn)
    if isinstance(state.cluster, api.Invalid):
        if turn.released is None:
            return Release()
        if not turn.wrote:
            outcome = cluster_outcome(state.cluster)
            status = status_to_write(state, outcome, None, stamp)
            if status is not None:
                return WriteStatus(status)
        if state.next_check != math.inf:
            return StopChecking()
        return _let_go(state, turn)
    assert isinstance(state.cluster, api.Cluster)
    if not turn.checked:
        if state.seed is not None:
            return Seed()
        if needs_check(state, now, watched=watched, reuse_window=reuse_window):
            return RunCheck()
    if state.check is None:
        return DONE  # its first check gave up its wait for a slot: the next turn asks again
    if state.selected is None:
        # Until the Environments actor has spoken, neither claim nor release anything, and
        # write no status that the registration would change a moment later.
        return DONE
    if not turn.registered:
        step = claim_step(state, state.check)
        if step is not None:
            return step
    if not turn.finalized:
        fin = finalizer_step(state)
        if fin is not None:
            return fin
    if not turn.wrote:
        status = status_to_write(state, state.check.outcome, state.registration, stamp)
        if status is not None:
            return WriteStatus(status)
    return Done(RELEASING) if turn.released is False else DONE


def _let_go(state: State, turn: Turn) -> Step:
    """Release, then drop the finalizer once released; retry a release not done yet."""
    if turn.released is None:
        return Release()
    if not turn.released:
        return Done(RELEASING)
    if not turn.finalized and api.FINALIZER in state.cluster.metadata.finalizers:
        return DropFinalizer()
    return DONE


def seen(state: State, cluster: api.Cluster | api.Invalid) -> State:
    """The state once the watch brings ``cluster``: the status it carries, when it is our last
    write come back, is kept as one copy (10,000 fewer statuses kept once a fleet onboarded)."""
    written = state.written
    observed = observed_cluster_status(cluster)
    if observed is not None and observed == written:
        written = observed
    return attrs.evolve(state, cluster=cluster, written=written)


def after_release(state: State, done: bool) -> State:
    """The state once a release is ``done`` (no Secret names the Cluster any more) or not: a
    Secret that still does keeps it holding, so the finalizer stays."""
    if not done:
        return attrs.evolve(state, registration=Registration(holding=True))
    return attrs.evolve(state, may_hold=False, registration=NOT_REGISTERED)


def needs_check(
    state: State, now: float, *, watched: str | None, reuse_window: float = schedule.REUSE_WINDOW
) -> bool:
    """A reconcile for another reason reuses a check under half a minute old.

    The timer, a changed kubeconfig Secret, a new Secret reference or a new spec check again,
    and so does a Cluster back from an invalid spell (no check planned, ``math.inf``): the object
    was over the bounds of tenant metadata, say, which is no change of its spec, and a check from
    before the spell would otherwise serve forever, with no check planned after it.
    Until the Secret watch has listed (``watched`` None), its version is unknown, not changed:
    the first list wakes the actor, which compares then.
    """
    check = state.check
    if check is None or now >= state.next_check or state.next_check == math.inf:
        return True
    if state.secret_news != state.secret_heard:
        return True
    cluster = state.cluster
    if cluster.metadata.generation != state.checked_generation:
        return True
    if watched is not None and secret_version(cluster, watched) != check.secret_version:
        return True
    return now - check.at >= reuse_window


def reusable_read(
    state: State, now: float, *, watched: str | None, reuse_window: float = schedule.REUSE_WINDOW
) -> Read | None:
    """The kubeconfig last read, while the Secret watch says the Secret is that version.

    A steady check then costs the hub nothing: the watch (metadata only) already tells when the
    Secret changes. A read is still renewed every 10-20 minutes (:data:`SECRET_REREAD`), since
    the watch cannot tell when the manager may no longer read the Secret.

    A read younger than the reuse window serves while the watch does not know the Secret (it
    has not listed yet): after a restart, a Cluster checked at once for a place missed is not
    read twice. Once the watch has told of a change (a new version, or the Secret deleted, which
    leaves the watch not knowing it either), nothing read before serves.
    """
    read, cluster = state.read, state.cluster
    if read is None or not read.reusable:
        return None
    if not isinstance(cluster, api.Cluster) or cluster.secret_ref is None:
        return None
    if now - read.at >= read.keep or read.news != state.secret_news:
        return None
    if watched is None:
        return read if now - read.at < reuse_window else None
    return read if read.version == version_of(cluster, watched) else None


def seed_check(seed: Outcome, read: Read, now: float) -> Check | None:
    """``seed`` (the status's finding) as the first check, if the kubeconfig just read still
    leads to the server it was made of; None: check at once."""
    if read.outcome is not None or read.connection is None:
        return None
    if read.connection.server != seed.server:
        return None
    return Check(seed, now, read.version, read.connection, heard=read.news)


def first_due(
    after: float,
    *,
    recorded: float | None,
    offset: float,
    period: float,
    since: float,
    lateness: float,
) -> tuple[float, float | None]:
    """When a restart's first check of a seeded Cluster falls due, and when it fell due if that
    place was missed (the state's ``missed_due``).

    ``recorded`` is the last manager's word, as it stopped, of when this check falls due (on
    this process's clock): on its chain, wherever that is in the minute; if that time has gone
    by, now, in its turn. Without one: now if its place came while no manager may have checked
    it (and before the others of the restart that were checked more lately), else its own place
    in the period (:func:`kokumi.core.cluster.schedule.period_of`) plus ``lateness``, so the
    restarted fleet's checks are as evenly spread as they were before it.

    A recorded due is never moved earlier: it was drawn a minute or more after the check before
    it began, so following it keeps that gap (a new manager can only be late for it).
    """
    if recorded is not None:
        return (recorded, None) if recorded > after else (after, recorded)
    if schedule.missed_place(after, offset, period, since):
        return after, schedule.missed_due(after, offset, period)
    return schedule.first_place(after, offset, period) + lateness, None


def after_seed(state: State, check: Check, generation: int | None) -> State:
    """The state once ``check`` (a seeded one) is the first.

    Silent before the restart: its first checks must not take the answering Clusters' slots
    either (200 dead spokes, two checks each at full priority, would hold all eight slots for
    eight minutes).
    """
    silent = schedule.is_unanswered(check.outcome.reason)
    return attrs.evolve(
        state,
        check=check,
        secret_heard=check.heard,
        checked_generation=generation,
        unanswered=schedule.SILENT_AFTER if silent else state.unanswered,
        answered=state.answered or not silent,
    )


def after_check(
    state: State,
    check: Check,
    *,
    fell_due: float,
    finished: float,
    offset: float,
    interval: float,
    lateness: float,
    jitter: float = schedule.CHECK_JITTER,
) -> State:
    """The state once ``check``, which fell due at ``fell_due``, ended at ``finished``: counted
    for the class of the next check, which falls due an interval to an interval plus ``jitter``
    after this one began (the spoke sees the gap between two probes, so a wait for a slot must
    not shorten it), toward the Cluster's place (``offset``) plus the spec's random ``lateness``
    (:func:`kokumi.core.cluster.schedule.due_after`)."""
    began = check.began if check.began is not None else fell_due
    due = schedule.due_after(began, finished, offset, interval, lateness=lateness, jitter=jitter)
    reason = check.outcome.reason
    unanswered, answered = state.unanswered, state.answered
    if schedule.is_unanswered(reason):
        unanswered += 1
    elif reason in PROBE_REASONS:  # the server answered (a Secret's finding asked nobody)
        unanswered, answered = 0, True
    return attrs.evolve(
        state,
        check=check,
        checked_generation=state.cluster.metadata.generation,
        secret_heard=check.heard,
        unanswered=unanswered,
        answered=answered,
        running_since=None,
        next_check=due,
        stop_check=2 if state.stop_check else 0,
    )


def slot_request(state: State) -> tuple[str, float, float]:
    """What a check asks the check slots with: its class, when the last check was (silent ones
    go in that order) and when it fell due (the slots go to the checks that fell due first; a
    first check, or one a changed Secret asks for early, is due as it asks)."""
    kind = schedule.check_class(state.unanswered, state.answered)
    since = state.check.at if state.check is not None else -math.inf
    due = state.missed_due if state.missed_due is not None else state.next_check
    return kind, since, due if math.isfinite(due) else math.inf


def ask_before_stop(state: State, until: float, now: float, interval: float) -> State | None:
    """The state once a stopping manager asks for the check due by ``until`` now, so that it does
    not fall due while no manager checks; None: no check asked for.

    Only an answering Cluster, on its chain of checks: a silent one could hold a slot for its
    whole timeout while the stop waits, and its gap is not what the stop protects. And only one
    whose last check began at least ``interval`` ago: no check comes before the minute after
    the last one began, so the stop takes only what is left of a check's random lateness, and
    the next manager makes the others when they fall due (a seeded check, whose beginning is
    not known, waits for it too). The check is due when it was before the stop asked (soonest
    due first).
    """
    check = state.check
    if (
        check is None
        or check.began is None
        or now < check.began + interval
        or not state.next_check <= until
        or schedule.check_class(state.unanswered, state.answered) != schedule.ANSWERING
    ):
        return None
    due = state.next_check
    return attrs.evolve(state, missed_due=due, stop_check_due=due, next_check=now, stop_check=1)


def next_due(state: State, interval: float) -> float | None:
    """When the next check falls due, for the stop record; None without one.

    A check the stop asked for that has not ended yet is due when it was before the stop
    asked: the next manager orders the checks it makes at once by when they fell due. One under
    way has no next due yet, and none may come before the minute after it began.
    """
    if state.check is None or not math.isfinite(state.next_check):
        return None
    due = state.stop_check_due if state.stop_check == 1 else state.next_check
    if state.running_since is not None:
        return max(due, state.running_since + interval)
    return due


def claim_step(state: State, check: Check) -> Want | Release | None:
    """Want the server while selected and the kubeconfig is usable; else let go; None: as is.

    "Usable" means a valid connection: an unreachable cluster keeps its registration (an outage
    should not hand its server to someone else), a broken kubeconfig does not, nor one whose
    server the egress policy refuses (Argo CD's pods would connect there with the Cluster's
    credential; the registry judges literal addresses itself too). A Cluster that may not read
    its Secret just now keeps its claim (:func:`~kokumi.core.cluster.status.claim_stands`).
    """
    if state.superseded or claim_stands(check.outcome):
        return None
    cluster = state.cluster
    connection = check.connection
    usable = (
        connection is not None
        and isinstance(cluster, api.Cluster)
        and cluster.spec.connection == "Kubeconfig"
        and not is_argocd_own(connection.server)
        and check.outcome.reason != Reason.EGRESS_DENIED
    )
    if state.selected and usable and connection is not None:
        extras = state.carry.extras(cluster, state.environments)
        claimed = state.claimed
        if (
            claimed is not None
            and connection is claimed.connection
            and extras == claimed.extras
            and state.registration == state.claim_answer
        ):
            # The same connection and extras claimed, and the registry has said nothing new
            # since its answer: it has the claim. Any change of the table reaches the actor as
            # a new registration, and the next check claims again; a label, Environment or
            # scope changed claims at once (one in-place update of the Secret).
            return None
        return Want(connection, extras)
    return Release()


def finalizer_step(state: State) -> AddFinalizer | DropFinalizer | None:
    """A holder carries a finalizer; it goes only once the Cluster wants no server and its
    release is done.

    A Cluster in a server's line (behind a foreign Secret, say) keeps one it has: the registry
    may hand it the server at any moment, and a finalizer dropped on the view of a moment ago
    would reach the API server after the Secret that names the Cluster again. Once released,
    the Cluster is in no line, so no Secret can come for it until its actor wants again.
    """
    has = api.FINALIZER in state.cluster.metadata.finalizers
    if state.registration.holding and not has:
        return AddFinalizer()
    if not state.registration.holding and not state.may_hold and has:
        return DropFinalizer()
    return None


def status_to_write(
    state: State, outcome: Outcome, registration: Registration | None, stamp: str | None
) -> api.ClusterStatus | None:
    """The status to write after ``outcome``, or None when it says nothing new: what the
    object says and what this manager wrote last (the watch may not have brought it back yet)
    both count as said. The registry's conflict, if any, outranks a good check."""
    said = registration if registration is not None else NOT_REGISTERED
    status = cluster_status(
        state.cluster,
        outcome,
        conflict=said.conflict,
        conflict_reason=said.reason,
        now=stamp,
        written=state.written,
    )
    if status == state.written or status == observed_cluster_status(state.cluster):
        return None
    return status
