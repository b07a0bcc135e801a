"""Where the manager reads tenants' kubeconfigs: in worker threads, a few at a time.

A kubeconfig is text whoever may write its Secret chooses. Read on the event loop, one of them
stopped every actor, the watches and ``/healthz`` for as long as it took (a Secret of 1,000
contexts: 23 s, and the liveness probe restarts the pod after 30). Each read has its own
budget inside the reader (:mod:`kokumi.core.kubeconfig.events`: bytes, YAML events, depth, CPU
time); here it gets a thread of its own, from a limiter of a few, so that many hostile Secrets
queue behind each other instead of taking every thread Trio has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, TypeVar

import trio
import trio.testing

__all__ = ["PARSER_THREADS", "off_loop", "parsers"]

PARSER_THREADS: Final = 2
"""Kubeconfig reads at once: the manager's two cores' worth, since a read is CPU under the GIL;
more would only take turns with the loop."""

_PARSERS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("kokumi_parsers")

_T = TypeVar("_T")


def parsers() -> trio.CapacityLimiter:
    """The kubeconfig readers' limiter, one per Trio run (a limiter belongs to its run)."""
    try:
        return _PARSERS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(PARSER_THREADS)
        _PARSERS.set(limiter)
        return limiter


async def off_loop(read: Callable[[], _T]) -> _T:
    """``read()`` in a worker thread under :func:`parsers`.

    Abandoned when the caller is cancelled (its Cluster deleted meanwhile): the thread ends of
    itself within the reader's budget, and holds its slot until then, so the limiter still
    counts it.
    """
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold != math.inf:
        # A test's simulated minutes: while a thread ran, the clock would jump ahead as if
        # every actor slept, and the checks it schedules would fall out of their minute.
        await trio.lowlevel.checkpoint()
        return read()
    return await trio.to_thread.run_sync(read, limiter=parsers(), abandon_on_cancel=True)
