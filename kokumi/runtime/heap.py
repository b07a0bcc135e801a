"""The cyclic garbage collector, set for a process that holds a whole fleet in memory.

A full collection walks every container object the process holds and stops the event loop
while it does: with Python's defaults, the fleet benchmark saw one every 30 to 50 s in steady
state, each 300 to 600 ms at 1,000 to 3,000 Clusters, the longest steps of the loop by far
(checks in flight time out falsely meanwhile). :func:`freeze_as_it_grows` moves what the process
holds into the permanent generation, which collections skip: the watches' objects, the parsed
Clusters, the actors. A full collection then walks only what came since.

Young collections keep Python's threshold: raising it (to 10,000 or 50,000 allocations) was
measured too, and made each young collection walk that many more live objects, 50 to 350 ms a
time on the loaded benchmark machine, in place of the full collections it avoided. But that
threshold counts allocations *less deallocations*, and a fleet in its steady state allocates
as much as it frees: each check makes its actor's new waiting state (about twenty tracked
objects: the coroutines, cancel scope and event of its wait, its Check and Outcome) and frees
the old one, a minute old. So the count hardly grows while the young generation fills with
every check's survivors, and the collection that comes at last walks them all: at 10,000
Clusters, one young collection every 30 s walking some 100,000 objects, 60 to 165 ms inside an
actor's step. :func:`sweep` collects the young generations by time instead, every ``SWEEP``
seconds, each a second's survivors (a few milliseconds at 10,000), and every ``FULL_EVERY``-th
a full collection, which walks only what survived since the last (then frozen, below).

What a fleet holds is not all there when its size settles: each Cluster's check keeps its
connection and parsed kubeconfig from its first check on, which at 10,000 Clusters comes
minutes after the last Cluster was created. Left in the oldest generation, those objects made
every full collection of the steady state walk them: 10 in 3 minutes, up to 965 ms each, in the
10,000 benchmark. So what survives a full collection is frozen too, as it ends (a ``gc.callbacks``
hook, :func:`freezing_survivors`): a full collection then walks only what has lived long since
the last one. The hook is in place before the first list of Clusters: while a restart took in
10,000 Clusters, ten full collections walked the whole growing heap, 60 to 300 ms each and
1.6 s in all, in the seconds that decide whether the Clusters whose place came meanwhile are
checked in time. Right after a
full collection every generation is empty but the oldest, so that freeze collects nothing more and
costs next to nothing; an earlier version froze at the next poll, with a young collection first,
and that step took over 50 ms 86 times in the 10,000 benchmark.

The price of a freeze is that a reference cycle which is garbage at that moment, or becomes
garbage later among frozen objects, is never collected (objects without cycles are freed by
their reference counts, frozen or not). Young garbage is collected just before each freeze of
growth (after a full collection there is none), and every ``THAW`` seconds everything is
unfrozen, so that the next full collection walks the whole heap once (about a second at 10,000
Clusters) and frees what became garbage meanwhile: what can leak is bounded by what the fleet
discards in ``THAW``, not by the process's uptime.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator

import trio

__all__ = [
    "FULL_EVERY",
    "GROWTH",
    "SETTLED",
    "SWEEP",
    "THAW",
    "freeze_as_it_grows",
    "freezing_survivors",
    "sweep",
]

GROWTH = 1.25
"""The fleet grows by this factor (and by at least ``STEP`` Clusters) between two freezes."""

STEP = 100

SETTLED = 6
"""Polls (a minute at the default 10 s) with the same size, after a change, before a freeze."""

THAW = 6 * 3600.0
"""Seconds between two thaws, each followed by one full collection over the whole heap."""

SWEEP = 1.0
"""Seconds between two collections of the young generations (see the module's docstring)."""

FULL_EVERY = 10
"""Every this many sweeps, a full collection: what survived the last ten seconds, since what
survived before is frozen."""

log = logging.getLogger(__name__)


def _freeze_after_full_collection(phase: str, info: dict[str, int]) -> None:
    """A ``gc.callbacks`` hook: freeze what survived a full collection, as it ends.

    It may run in any thread (a worker thread's allocation can set off a collection), which is
    fine: ``gc.freeze`` only moves the collector's lists, under the GIL.
    """
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


@contextlib.contextmanager
def freezing_survivors() -> Iterator[None]:
    """Within it, what survives each full collection is frozen as the collection ends."""
    gc.callbacks.append(_freeze_after_full_collection)
    try:
        yield
    finally:
        gc.callbacks.remove(_freeze_after_full_collection)


async def freeze_as_it_grows(
    size: Callable[[], int], *, every: float = 10.0, thaw: float = THAW
) -> None:
    """Freeze the heap once ``size()`` (the number of Clusters) is first known, each time it has
    grown by ``GROWTH``, and once it has stayed the same for ``SETTLED`` polls after a change
    (the end of an onboarding, say); thaw it every ``thaw`` seconds; never returns. Run it
    within :func:`freezing_survivors`, which freezes as each full collection ends.

    The first poll is at once: the manager starts this right after the first list of Clusters
    has been taken in.
    """
    frozen = 0
    last, same = 0, 0
    thawed = trio.current_time()
    while True:
        now = size()
        same = same + 1 if now == last else 0
        last = now
        due = max(frozen * GROWTH, frozen + STEP) if frozen else 1
        if trio.current_time() - thawed >= thaw:
            gc.unfreeze()
            thawed = trio.current_time()
            log.debug("heap thawed: the next full collection walks all of it")
        elif now >= due or (frozen and now != frozen and same >= SETTLED):
            gc.collect(1)  # the young generations only: cheap, and their cycles are not kept
            gc.freeze()
            frozen = now
            log.debug("heap frozen at %d Clusters: %d objects", now, gc.get_freeze_count())
        await trio.sleep(every)


async def sweep(*, every: float = SWEEP, full_every: int = FULL_EVERY) -> None:
    """Collect the young generations every ``every`` seconds and the whole unfrozen heap every
    ``full_every``-th time; never returns.

    Cyclic garbage that lives past a sweep is in the oldest generation, which the threshold's
    own full collections, coming when the count grows, might then never see: the full
    collection here frees it within ``every * full_every`` seconds.
    """
    swept = 0
    while True:
        await trio.sleep(every)
        swept += 1
        gc.collect(2 if swept % full_every == 0 else 1)
