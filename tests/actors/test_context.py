"""A Cluster's place in the minute is the same second of the wall clock in every process."""

from __future__ import annotations

import time

import trio

from kokumi.actors.context import wall_shift
from kokumi.core.cluster import schedule


def _next_place_on_the_wall(identity: str) -> float:
    """Where a manager on Trio's own clock puts the Cluster's next place, as Unix time."""

    async def main() -> float:
        interval = 60.0
        place = (schedule.offset_of(identity, interval) + wall_shift()) % interval
        now = trio.current_time()
        due = schedule.first_place(now, place, interval)
        return time.time() + (due - now)

    return trio.run(main)


def test_two_processes_put_a_cluster_at_the_same_second_of_the_minute() -> None:
    # Each trio.run has a clock of its own, starting at a random point, as two processes do.
    for identity in ("uid-1", "uid-2", "3f7c8e1a-0000-4000-8000-000000000000"):
        first, second = _next_place_on_the_wall(identity), _next_place_on_the_wall(identity)
        apart = (second - first) % 60.0
        assert min(apart, 60.0 - apart) < 0.05, (identity, first, second)
        # And that second is the hash's own offset from the Unix epoch.
        off = (first - schedule.offset_of(identity, 60.0)) % 60.0
        assert min(off, 60.0 - off) < 0.05, (identity, first)
