"""Long passes over the fleet checkpoint every few milliseconds of work.

At 10,000 Clusters, taking in the first list or recomputing a namespace's selection is
thousands of steps; done in one go it would block the event loop for hundreds of
milliseconds, long enough for the checks' 10 s deadlines and the Leases' renewals to slip.
"""

from __future__ import annotations

import time

import trio

__all__ = ["SLICE", "Pace"]

SLICE = 0.01
"""A pass checkpoints after this many seconds of work, far under the 50 ms the loop may block."""


class Pace:
    """Checkpoints a long pass every ``SLICE`` seconds of work, so that it never blocks the loop
    for longer. Whatever the pass reads must be read before its first tick, or be allowed to
    change between two ticks: other tasks run there.
    """

    def __init__(self) -> None:
        self._began = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._began >= SLICE:
            await trio.lowlevel.checkpoint()
            self._began = time.perf_counter()
