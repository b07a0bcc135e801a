"""The limit of eight checks at a time says once when checks fall behind, and once when they
keep up again; how long each check waited is a histogram on ``/metrics``.

Spokes that never answer hold a slot for the whole 10 s timeout, and the queue is first in,
first out: measured with half of 400 spokes hanging, every healthy Cluster was checked every
240 s, each status still saying what its last check found.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing
from prometheus_client.exposition import generate_latest

from kokumi.actors.context import CountingLimiter, Metrics

LOGGER = "kokumi.actors.context"


async def test_falling_behind_is_said_once_and_so_is_keeping_up(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    metrics = Metrics()
    limiter = CountingLimiter(1, metrics, late_after=60.0)

    async def check(seconds: float) -> None:
        async with limiter:
            await trio.sleep(seconds)

    async with trio.open_nursery() as nursery:
        for _ in range(5):  # one slot, 30 s each: they wait 0, 30, 60, 90 and 120 s
            nursery.start_soon(check, 30.0)
            await trio.testing.wait_all_tasks_blocked()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert len(said) == 1, said
    level, message = said[0]
    assert level == logging.WARNING
    assert "waited 90 s for one of the 1 check slots (1 more waiting)" in message
    assert "less often than every 60 s" in message
    # Three checks had held the slot 30 s each: the average has come up from nothing to 4.3 s.
    assert "hold their slot 4.3 s on average" in message
    assert "fix or remove the Clusters that report Unreachable" in message

    caplog.clear()
    await check(1.0)  # no wait: keeping up again, said once
    await check(1.0)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert said == [(logging.INFO, "checks keep up again: the last one waited 0.0 s for its slot")]

    scraped = generate_latest(metrics.registry).decode()
    assert "kokumi_check_wait_seconds_count 7.0" in scraped
    assert "kokumi_check_wait_seconds_sum 300.0" in scraped


async def test_quick_checks_that_fall_behind_name_the_managers_cpu(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Healthy spokes, too many of them for the CPU: each check holds its slot briefly, and
    still the queue grows past the interval (one replica at 10,000 Clusters)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    limiter = CountingLimiter(1, Metrics(), late_after=5.0)

    async def check() -> None:
        async with limiter:
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        for _ in range(100):  # the 52nd waits 5.1 s, after 51 checks of 0.1 s
            nursery.start_soon(check)
            await trio.testing.wait_all_tasks_blocked()
    (said,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "waited 5 s for one of the 1 check slots (48 more waiting)" in said
    assert "hold their slot 93 ms on average" in said
    assert "short of CPU for this many Clusters: give it more CPU, or shard it" in said


async def test_without_an_interval_nothing_is_said(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An embedding program's own limiter: the default ``late_after`` never trips."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    limiter = CountingLimiter(1, Metrics())

    async def check() -> None:
        async with limiter:
            await trio.sleep(3600.0)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(check)
    assert [r for r in caplog.records if r.name == LOGGER] == []
