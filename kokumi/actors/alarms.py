"""The Cluster actors' timers, rung together on a grid of ``TIMER_GRAIN`` (50 ms).

Each actor owns its timer: it says when it next wants to wake (its next check, or a retry), and
only it. It does not arm a Trio deadline of its own for it: a deadline that fires costs the
event loop a wake-up of its own (an ``epoll_wait`` that returns, a pass of the run loop over
cold caches) and a ``Cancelled`` raised through the actor's stack and caught again. At the 166
checks a second of 10,000 Clusters that was 110-160 µs of CPU a wake-up, against about 40 µs
rung a tick at a time (``benchmarks/HISTORY.md``, "The actors' timers rung together"). Here one
task sleeps until the next tick that has a timer due and sets the events of every actor due by
then: the timers of a tick cost one wake-up between them, and none raises anything.

The price is a lateness of at most a tick on each timer, far inside the spec's own random
lateness of up to 6 s a check (:data:`kokumi.core.cluster.schedule.TIMER_GRAIN`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol

import trio

from kokumi.core.cluster.schedule import TIMER_GRAIN

__all__ = ["Alarms", "Sleeper"]


class Sleeper(Protocol):
    def ring(self, serial: int) -> None:
        """Wake, if ``serial`` is still the timer the sleeper set (it sets a new one each time)."""


class Alarms:
    """Timers by tick, rung by :meth:`run`; a timer set again simply leaves the old one to ring
    unheard (the sleeper's serial tells), which costs a heap entry until its time, not a search.
    """

    def __init__(self, grain: float = TIMER_GRAIN) -> None:
        self._grain = grain
        self._heap: list[tuple[float, float, int, Sleeper, int]] = []
        self._order = itertools.count()
        self._sleep: trio.CancelScope | None = None

    def set(self, at: float, sleeper: Sleeper, serial: int) -> None:
        """Ring ``sleeper`` with ``serial`` at the end of the tick that holds ``at``.

        A time already past rings at once, as a deadline in the past cancels at once; never
        (``math.inf``) sets nothing.
        """
        if at <= trio.current_time():
            sleeper.ring(serial)
            return
        if not math.isfinite(at):
            return
        # Never before ``at``: a sleeper woken early would find nothing due and set the same
        # time again, a loop without a wait.
        tick = max(at, math.ceil(at / self._grain) * self._grain)
        # Within a tick, in the order they fell due (the check slots serve that order too).
        heapq.heappush(self._heap, (tick, at, next(self._order), sleeper, serial))
        sleep = self._sleep
        if sleep is not None and tick < sleep.deadline:
            sleep.deadline = tick

    def __len__(self) -> int:
        """Timers set and not rung yet, those set again since included."""
        return len(self._heap)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as sleep:
                self._sleep = sleep
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _, _, _, sleeper, serial = heapq.heappop(heap)
                sleeper.ring(serial)
