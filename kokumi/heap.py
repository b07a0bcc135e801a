"""The cyclic garbage collector, set for a process that holds a whole fleet in memory.

A full collection walks every container object the process holds and stops the event loop
while it does: with Python's defaults, the fleet benchmark saw one every 30 to 50 s in steady
state, each 300 to 600 ms at 1,000 to 3,000 Clusters, the longest steps of the loop by far
(checks in flight time out falsely meanwhile). :func:`freeze_as_it_grows` moves what the process
holds into the permanent generation, which collections skip: the watches' objects, the parsed
Clusters, the actors. A full collection then walks only what came since.

Young collections keep Python's threshold: raising it (to 10,000 or 50,000 allocations) was
measured too, and made each young collection walk that many more live objects, 50 to 350 ms a
time on the loaded benchmark machine, in place of the full collections it avoided.

The price of a freeze is that a reference cycle which is garbage at that moment, or becomes
garbage later among frozen objects, is never collected. Young garbage is collected just before
each freeze, and freezes come once per quarter of growth (about 30 from 0 to 10,000 Clusters)
and once more when the fleet's size has settled, so what can leak is bounded by changes in the
fleet's size, not by the process's uptime.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable

import trio

__all__ = ["GROWTH", "SETTLED", "freeze_as_it_grows"]

GROWTH = 1.25
"""The fleet grows by this factor (and by at least ``STEP`` Clusters) between two freezes."""

STEP = 100

SETTLED = 6
"""Polls (a minute at the default 10 s) with the same size, after a change, before a freeze."""

log = logging.getLogger(__name__)


async def freeze_as_it_grows(size: Callable[[], int], *, every: float = 10.0) -> None:
    """Freeze the heap once ``size()`` (the number of Clusters) is first known, each time it has
    grown by ``GROWTH``, and once it has stayed the same for ``SETTLED`` polls after a change
    (the end of an onboarding, say); never returns."""
    frozen = 0
    last, same = 0, 0
    while True:
        await trio.sleep(every)
        now = size()
        same = same + 1 if now == last else 0
        last = now
        due = max(frozen * GROWTH, frozen + STEP) if frozen else 1
        if now >= due or (frozen and now != frozen and same >= SETTLED):
            gc.collect(1)  # the young generations only: cheap, and their cycles are not kept
            gc.freeze()
            frozen = now
            log.debug("heap frozen at %d Clusters: %d objects", now, gc.get_freeze_count())
