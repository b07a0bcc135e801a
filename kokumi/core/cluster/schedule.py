"""When each Cluster is checked, and which checks go first when the check slots are short.

Two rules, both pure so that their properties are tested without a clock:

**A place in the minute.** Each Cluster has its own offset within the check interval, a hash of
its identity (as Prometheus offsets each scrape target within its scrape interval), and its
checks fall due at that offset of every interval, plus the spec's random lateness on top (up to
a tenth of the interval). Without the offset, Clusters created together (a ``kubectl apply`` of
hundreds) were checked together: only the random lateness spread them, like a random walk, so
for the first minutes the load came in bursts of the whole fleet, and it never became flat. With
it the load is flat from the first minute, and after a restart too.

**Answering first.** Eight checks run at a time and each has 10 s. A spoke that never answers
holds its slot for all of them, so 48 silent spokes fill the minute, and in a first-come queue
every Cluster then waited behind them (with 199 of 400 spokes hanging, healthy ones were checked
every 4 minutes). A Cluster whose last :data:`SILENT_AFTER` checks got no answer is *silent*, and
its checks take only what the answering Clusters leave: whenever a slot frees, an answering
check that waits gets it first, and silent checks never hold the last free slot
(:func:`silent_slots`), so an answering check never waits for a silent one. Silent checks wait
in the order they asked, so each silent Cluster is checked in its turn. One answer makes a
Cluster answering again, from its next check on.
"""

from __future__ import annotations

import hashlib
import math

from kokumi.core.reasons import Reason

__all__ = [
    "CHECK_INTERVAL",
    "CHECK_JITTER",
    "CHECK_SLOTS",
    "CHECK_TIMEOUT",
    "REUSE_WINDOW",
    "SILENT_AFTER",
    "due_after",
    "is_unanswered",
    "offset_of",
    "silent_slots",
]

# The spec's numbers, in one place: the defaults of kokumi.Options and of the probe read them.

CHECK_INTERVAL = 60.0
"""Seconds between two checks of one Cluster: "about once a minute"."""

CHECK_JITTER = 6.0
"""The most a check comes later than its Cluster's place, at random: a tenth of the interval."""

CHECK_SLOTS = 8
"""Checks at a time ("eight at a time"), and kubeconfig Secret reads at a time."""

CHECK_TIMEOUT = 10.0
"""Seconds one check has, all included: DNS, TLS, both requests."""

REUSE_WINDOW = 30.0
"""A check younger than this (half a minute), with the Secret unchanged, is reused."""

SILENT_AFTER = 2
"""Unanswered checks in a row that make a Cluster silent.

Two, not one: a healthy spoke that misses one check (a node rebooting, a network blip) keeps its
minute; a dead one costs two checks at full priority before it waits for spare capacity.
"""


def offset_of(identity: str, interval: float) -> float:
    """The Cluster's own place within the interval, in ``[0, interval)``: a hash of ``identity``.

    ``identity`` is the object's uid (a Cluster deleted and created again gets a new place) or,
    without one, ``namespace/name``. A stable hash, not Python's ``hash()``, which changes with
    every process: a restarted manager keeps each Cluster's place.
    """
    digest = hashlib.blake2b(identity.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * interval


def due_after(began: float, finished: float, offset: float, interval: float) -> float:
    """When the check after one that began at ``began`` and ended at ``finished`` falls due.

    The first moment of the Cluster's place (``offset`` plus a whole number of intervals) that is
    more than half an interval after ``began`` and not before ``finished``. In the steady state
    a check begins at its place plus some lateness, so the next place is one interval later and
    the gap is the interval, give or take the two latenesses. A check that ran late (it waited
    minutes for a slot) is followed at the first place after it ended, never at once; a first
    check, made whenever the Cluster appeared, is followed within one and a half intervals, and
    from then on on its place. The caller adds the random lateness.
    """
    earliest = max(began + interval / 2, finished)
    turns = math.floor((earliest - offset) / interval) + 1
    due = offset + turns * interval
    if due - interval > earliest:  # floating point: never skip a place
        due -= interval
    return due


def is_unanswered(reason: str) -> bool:
    """Whether a check's Ready reason says the server gave no answer at all.

    ``Unreachable`` is every such case: timed out, refused, no route, DNS. Any other reason
    (a TLS error, a 401, a 403, an egress refusal decided before any connection) came back at
    once and held its slot for milliseconds.
    """
    return reason == Reason.UNREACHABLE


def silent_slots(total: int) -> int:
    """How many of ``total`` check slots silent checks may hold at once: all but one.

    The one left is always free for an answering Cluster, so an answering check never waits for
    a silent one to run out its timeout; with one slot in all, silent checks may take it.
    """
    return total - 1 if total > 1 else total
