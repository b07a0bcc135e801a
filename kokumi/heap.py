"""The cyclic garbage collector, set for a process that holds a whole fleet in memory.

A full collection walks every container object the process holds and stops the event loop
while it does: with Python's defaults, the fleet benchmark saw one every 30 to 50 s in steady
state, each 300 to 600 ms at 1,000 to 3,000 Clusters, the longest steps of the loop by far
(checks in flight time out falsely meanwhile). Two settings take them away:

- Young collections run after 10,000 allocations instead of 700. A check's objects live for
  the check, are freed by their reference counts, and so no longer survive a young collection
  by chance and pile up in the oldest generation, which is what made full collections come.
- :func:`freeze_as_it_grows` moves what the process holds into the permanent generation, which
  collections skip, each time the fleet has grown by a quarter: the watches' objects, the
  parsed Clusters, the actors. A full collection then walks only what came since.

The price of a freeze is that a reference cycle which is garbage at that moment, or becomes
garbage later among frozen objects, is never collected. Young garbage is collected just before
each freeze; freezes come once per quarter of growth (about 30 from 0 to 10,000 Clusters), so
what can leak is bounded by the fleet's growth, not by the process's uptime.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable

import trio

__all__ = ["GROWTH", "YOUNG", "freeze_as_it_grows", "tune"]

YOUNG = 10_000
"""Allocations between two young collections (Python's default: 700)."""

GROWTH = 1.25
"""The fleet grows by this factor (and by at least ``STEP`` Clusters) between two freezes."""

STEP = 100

log = logging.getLogger(__name__)


def tune() -> None:
    """Set the collector's thresholds for the manager process; call once, at its start."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)


async def freeze_as_it_grows(size: Callable[[], int], *, every: float = 10.0) -> None:
    """Freeze the heap once ``size()`` (the number of Clusters) is first known, and again each
    time it has grown by ``GROWTH``; never returns."""
    frozen = 0
    while True:
        await trio.sleep(every)
        now = size()
        due = max(frozen * GROWTH, frozen + STEP) if frozen else 1
        if now >= due:
            gc.collect(1)  # the young generations only: cheap, and their cycles are not kept
            gc.freeze()
            frozen = now
            log.debug("heap frozen at %d Clusters: %d objects", now, gc.get_freeze_count())
