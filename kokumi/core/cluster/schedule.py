"""When each Cluster is checked, and which checks go first when the check slots are short.

Two rules, both pure so that their properties are tested without a clock:

**A place in the minute.** Each Cluster has its own offset within the check period (a minute
plus half the jitter, :func:`period_of`), a hash of its identity (as Prometheus offsets each
scrape target within its scrape interval), and its checks fall due at that offset of every
period, plus the spec's random lateness on top (up to 3 s). Without the offset, Clusters
created together (a ``kubectl apply`` of hundreds) were checked together: only the random
lateness spread them, like a random walk, so for the first minutes the load came in bursts of
the whole fleet, and it never became flat. With it the load is flat from the first minute, and
after a restart too.

**Answering first.** Eight checks run at a time and each has 10 s. A spoke that never answers
holds its slot for all of them, so 48 silent spokes fill the minute, and in a first-come queue
every Cluster then waited behind them (with 199 of 400 spokes hanging, healthy ones were checked
every 4 minutes). Checks come in three classes (:func:`check_class`):

- *answering*: a Cluster that has answered, and whose last :data:`SILENT_AFTER` checks did not
  all go unanswered;
- *new*: a Cluster that has never answered and has had no check yet (its first try);
- *silent*: the rest: a Cluster that answered once but not its last two checks, or one that has
  never answered and has had its first try.

Answering and new checks are served first come, first served, but new and silent checks
together never hold the last free slot (:func:`silent_slots`), so an answering check never
waits for a spoke that may not answer: a batch of new Clusters whose servers do not answer yet
(Cluster API writes the kubeconfig before the API server is up) costs the live ones nothing, and
each of them gets one try before the slots the others leave are all it has. Silent checks take
only those, in the order of their last check, so each silent Cluster is checked in its turn.
One answer makes a Cluster answering, from its next check on.

**The same place in every process.** The offset counts from the Unix epoch, not from the
clock of one process, so a restarted manager (or the replica a shard moves to) checks each
Cluster at the same second of the minute as the one before it; a Cluster whose place came while
no manager was checking is checked at once (:func:`missed_place`). That is the rule after a
crash: a manager that is stopped leaves a stop record of each Cluster's next due, which the next
one follows instead (:mod:`kokumi.core.fleet.stoprecord`).

**Never before the minute, a little later at random.** The spec asks for a check "about once
a minute, each a little later than the minute at random": no check comes before a minute after
the last one began, and none more than :data:`CHECK_JITTER` (6 s) after it (:func:`due_after`).
Lateness that only ever adds moves every Cluster later in the minute, 3 s a minute on average,
so the places move with it: they recur every :func:`period_of` the interval plus half the jitter
(63 s), not every minute, and a check on its place comes up to half the jitter (3 s) after it,
at random. The gap between two checks on their places is then 60 s plus 3 s plus the difference
of two such latenesses: 60 to 66 s, 63 s on average. The fleet stays as evenly spread as the
places are, since every place moves alike; what the random lateness adds is that two Clusters
whose places are close do not meet every time.

A Cluster's first check comes when it appears, anywhere in the period; each next check moves it
toward its place by 1.5 to 3 s (a gap of 60 to 61.5 s, or 64.5 to 66 s, at random) until it is
within 3 s of it, and from then on it is on its place. A check that ran past half an interval
(which the 10 s timeout never allows) counts from its end instead.
"""

from __future__ import annotations

import hashlib
import math

from kokumi.core.reasons import Reason

__all__ = [
    "ANSWERING",
    "CHECK_INTERVAL",
    "CHECK_JITTER",
    "CHECK_SLOTS",
    "CHECK_TIMEOUT",
    "CLASSES",
    "NEW",
    "RESTART_ALLOWANCE",
    "REUSE_WINDOW",
    "SILENT",
    "SILENT_AFTER",
    "TIMER_GRAIN",
    "check_class",
    "due_after",
    "first_place",
    "is_unanswered",
    "missed_due",
    "missed_place",
    "offset_of",
    "period_of",
    "silent_slots",
]

# The spec's numbers, in one place: the defaults of kokumi.Options and of the probe read them.

CHECK_INTERVAL = 60.0
"""Seconds between two checks of one Cluster: "about once a minute"."""

CHECK_JITTER = 6.0
"""The most a check comes later than a minute after the last one began, at random: a tenth of
the interval. Half of it is each check's random lateness after its Cluster's place (see
:func:`period_of`)."""

CHECK_SLOTS = 8
"""Checks at a time ("eight at a time"), and kubeconfig Secret reads at a time."""

SECRET_LIST_AT = 32
"""Reads of one namespace's Secrets waiting at once that make one paged list of them worth it:
four times the reads in flight, which only a burst (a restart, a thousand Clusters applied
together) brings (kokumi.actors.secretreads)."""

CHECK_TIMEOUT = 10.0
"""Seconds one check has, all included: DNS, TLS, both requests."""

TIMER_GRAIN = 0.05
"""Seconds between two ticks of the actors' timers (kokumi.actors.alarms): a check or a retry
due within one tick begins at its end, up to this much after its due, together with the others
of the tick. Far inside the spec's random lateness of up to :data:`CHECK_JITTER` seconds."""

REUSE_WINDOW = 30.0
"""A check younger than this (half a minute), with the Secret unchanged, is reused."""

SILENT_AFTER = 2
"""Unanswered checks in a row that make a Cluster that has answered before silent.

Two, not one: a healthy spoke that misses one check (a node rebooting, a network blip) keeps its
minute. A Cluster that has never answered is silent after its first try (:func:`check_class`).
"""

RESTART_ALLOWANCE = 15.0
"""Seconds before a manager began serving a Cluster that the one before it may have stopped,
where no record of the last manager's next checks says better (a crash, a shard moved).

A restarted manager, or the replica a shard moves to, cannot tell when the last check of a
Cluster was (the status changes only when the finding does). The process before it stopped a
moment before it started, or its shard's Lease expired, so a Cluster whose place came since
then may have missed its check: :func:`missed_place`.
"""

ANSWERING = "answering"
NEW = "new"
SILENT = "silent"
CLASSES = (ANSWERING, NEW, SILENT)
"""The classes of checks: the first two first come, first served, the silent after them."""


def period_of(interval: float, jitter: float) -> float:
    """How often a Cluster's place in the minute recurs: the interval plus half the jitter.

    Every gap is the interval plus a lateness in ``[0, jitter]``; on its place a Cluster's gaps
    average the interval plus half the jitter, so that is how far apart its places are. Counted
    from the Unix epoch like the offsets, so every process agrees on them.
    """
    return interval + jitter / 2


def offset_of(identity: str, period: float) -> float:
    """The Cluster's own place within the period (:func:`period_of`), in ``[0, period)``: a hash
    of ``identity``.

    ``identity`` is the object's uid (a Cluster deleted and created again gets a new place) or,
    without one, ``namespace/name``. A stable hash, not Python's ``hash()``, which changes with
    every process: a restarted manager keeps each Cluster's place.
    """
    digest = hashlib.blake2b(identity.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * period


def first_place(at: float, offset: float, period: float) -> float:
    """The first moment of the Cluster's place (``offset`` plus a whole number of periods) at
    or after ``at``."""
    turns = math.ceil((at - offset) / period)
    due = offset + turns * period
    if due < at:  # floating point
        due += period
    return due


def missed_place(now: float, offset: float, period: float, since: float) -> bool:
    """Whether the Cluster's place came after ``since`` and before ``now``.

    A restarted manager takes the status's finding as a Cluster's last check, and checks it
    next at its place; but a Cluster whose place came while no manager was checking has missed
    that check, and its next place is a period away: two minutes without a check (the p99 gap
    across a restart of 10,000 Clusters was 119-136 s). Such a Cluster is checked at once. One
    whose place came just before the last manager stopped is checked again too, early: at most
    one extra check, since ``since`` cannot tell the two apart. That is the one check that may
    come before the minute after the last one began, and only after a crash or a shard's move:
    a manager that is stopped leaves a record of each Cluster's next check instead.
    """
    last = first_place(now, offset, period) - period
    return last >= since


def missed_due(now: float, offset: float, period: float) -> float:
    """When the check of a Cluster whose place came while no manager may have checked it fell
    due: that place (the last at or before ``now``).

    A restart's Clusters whose place was missed are checked at once, but not all at once: at
    10,000 they were a quarter of the fleet, and they asked for the check slots in the order
    their kubeconfigs were read (their Secrets' names), so one whose last check was a minute
    and a half ago could wait behind two thousand others (the p99 gap across a restart was
    80-83 s). By their places, the earliest first, every Cluster the last manager missed waits
    only for those whose place came before its own; the price is that those whose place came
    in the seconds before that manager stopped, which it most likely checked, go first too:
    when it stopped is not known here (a Lease expires, a pod takes seconds to start).
    """
    return first_place(now, offset, period) - period


def due_after(
    began: float,
    finished: float,
    offset: float,
    interval: float,
    lateness: float = 0.0,
    jitter: float = CHECK_JITTER,
) -> float:
    """When the check after one that began at ``began`` and ended at ``finished`` falls due.

    Never before an interval after ``began``, and never more than ``jitter`` after that: the
    gap the spoke sees is a minute plus 0 to 6 s. Within that window it aims at the Cluster's
    place nearest to a period (:func:`period_of`) after ``began``, plus ``lateness`` (the
    check's random lateness, drawn by the caller in ``[0, jitter / 2)``). In the steady state a
    check begins at its place plus its lateness, so the next lands on its aim: the gap is the
    period plus the difference of the two latenesses, 60 to 66 s. A Cluster off its place (its
    first check comes whenever it appeared) is due at the edge of the window toward its place,
    less ``lateness / 2`` so that Clusters checked together do not stay together: it moves
    toward its place by 1.5 to 3 s a check, and so reaches it within 22 checks (a new Cluster is
    7 checks away on average). A check that ended more than half an interval after it began
    (longer than a check's timeout allows) counts from its end.
    """
    period = interval + jitter / 2
    anchor = finished if finished - began > interval / 2 else began
    earliest = anchor + interval
    latest = earliest + jitter
    # The place nearest a period on; of two as near, the later (Python's round() halves to even,
    # so a tie would go one way or the other by the parity of the turn).
    natural = anchor + period
    aim = offset + math.floor((natural - offset) / period + 0.5) * period + lateness
    if aim < earliest:
        due = earliest + lateness / 2
    elif aim > latest:
        due = latest - lateness / 2
    else:
        due = aim
    return max(due, finished)


def is_unanswered(reason: str) -> bool:
    """Whether a check's Ready reason says the server gave no answer at all.

    ``Unreachable`` is every such case: timed out, refused, no route, DNS. Any other reason
    (a TLS error, a 401, a 403, an egress refusal decided before any connection) came back at
    once and held its slot for milliseconds.
    """
    return reason == Reason.UNREACHABLE


def check_class(unanswered: int, answered: bool) -> str:
    """The class of a Cluster's next check, from its unanswered checks in a row and whether it
    has ever answered: :data:`ANSWERING`, :data:`NEW` or :data:`SILENT`."""
    if answered:
        return SILENT if unanswered >= SILENT_AFTER else ANSWERING
    return NEW if unanswered == 0 else SILENT


def silent_slots(total: int) -> int:
    """How many of ``total`` check slots new and silent checks together may hold: all but one.

    The one left is always free for an answering Cluster, so an answering check never waits for
    a spoke that may not answer to run out its timeout; with one slot in all, they may take it.
    """
    return total - 1 if total > 1 else total
