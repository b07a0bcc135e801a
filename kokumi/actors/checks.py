"""The check slots, apart from the context because the schedule meets Trio here: every check
waits its turn under one :class:`CountingLimiter`, answering Clusters before new and silent ones,
so the fleet's lateness shows and is said here; and the in-cluster Clusters share one check.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from kokumi.actors.metrics import Metrics
from kokumi.core.cluster import schedule
from kokumi.core.cluster.status import Outcome
from kokumi.kube.client import Client
from kokumi.runtime.options import Options
from kokumi.runtime.probe import checks

if TYPE_CHECKING:
    from kokumi.core.cluster.egress import EgressPolicy
    from kokumi.core.kubeconfig.connection import Connection

__all__ = ["ANSWERING", "NEW", "SILENT", "CountingLimiter", "InClusterCheck", "Probe"]

log = logging.getLogger(__name__)


class Probe(Protocol):
    """One check of one connection: :func:`kokumi.runtime.probe.checks.check`, or a stand-in in
    a model test."""

    async def __call__(
        self,
        connection: Connection,
        *,
        timeout: float,  # noqa: ASYNC109
        egress: EgressPolicy | None = None,
        cluster_wide: bool = True,
    ) -> Outcome: ...


class CountingLimiter:
    """The shared limit of eight checks at a time, in three classes, counting how close it came.

    Answering Clusters and new ones (never answered, first try) are served first come, first
    served, but new and silent checks together never hold the last free slot; silent ones
    (:mod:`kokumi.core.cluster.schedule`) take the capacity the others leave, by the time of their
    last check, so that each silent Cluster gets its turn even when many of them ask at the same
    moment. When a slot frees, it goes to the check that asked first among the answering and the
    new that may start, else to the silent one checked longest ago. Before the classes, spokes
    that never answered held the slots 10 s each and every Cluster queued behind them (with half
    of 400 spokes hanging, every Cluster was checked every 4 minutes); before the new class, a
    batch of 100 new Clusters that did not answer yet held every slot for two minutes and the
    live ones' gaps grew to two minutes with them. New checks are not served after answering
    ones: while 10,000 Clusters onboard, checks wait for CPU, not for slow spokes, and first
    checks behind every repeat check made onboarding half as long again (711 s against 444 s).

    Each Cluster's status still says what its last check found; the limiter is where lateness
    shows, so it says so once when an answering check has waited longer than ``late_after`` (the
    check interval), and once when they keep up again. That happens when the manager is short of
    CPU for its fleet, or when slow spokes (answering within the 10 s) fill the slots; how long
    checks hold their slot tells the two apart, so the warning names the right remedy. Silent
    checks waiting minutes are the design, not lateness: ``kokumi_checks_waiting{class="silent"}``
    shows them.

    "First come" is by when each check fell due, which is when it asks, but for a restart's
    Clusters whose place came while no manager checked them: those ask together, as their reads
    end (in the order of their Secrets' names), and each gives the moment it fell due at a guess
    (``due``), so the one unchecked longest goes first (``schedule.missed_due``).
    """

    def __init__(self, total: int, metrics: Metrics, late_after: float = math.inf) -> None:
        self._total = total
        self._silent_max = schedule.silent_slots(total)
        self._metrics = metrics
        self._running = dict.fromkeys(schedule.CLASSES, 0)
        # First come, first served for the answering and the new (heaps by when each fell due,
        # then the number of its asking, so the two keep one order); the silent by last check.
        self._queues: dict[str, list[tuple[float, int, _Ticket]]] = {ANSWERING: [], NEW: []}
        self._silent: list[tuple[float, int, _Ticket]] = []  # a heap: last checked, then asked
        self._asked = itertools.count()
        self._waiting = dict.fromkeys(schedule.CLASSES, 0)
        self._started: dict[trio.lowlevel.Task, tuple[float, str]] = {}
        self._late_after = late_after
        self._behind = False
        self._held = 0.0  # seconds a check holds its slot, a moving average
        self._closed = False

    @property
    def total(self) -> int:
        return self._total

    def running(self, kind: str) -> int:
        """Checks of ``kind`` (``answering``, ``new`` or ``silent``) holding a slot now."""
        return self._running[kind]

    def waiting(self, kind: str) -> int:
        """Checks of ``kind`` waiting for a slot now."""
        return self._waiting[kind]

    def slot(
        self, kind: str = "answering", since: float = -math.inf, due: float = math.inf
    ) -> _Slot:
        """``async with limiter.slot(kind, since, due)``: hold one slot, in the Cluster's class;
        ``since`` is when its last check was (it orders the silent ones), ``due`` when this one
        fell due (it orders the others; later than now counts as now)."""
        return _Slot(self, kind, since, due)

    async def __aenter__(self) -> None:
        await self.acquire(ANSWERING)

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    async def acquire(self, kind: str, since: float = -math.inf, due: float = math.inf) -> None:
        """Wait for a slot; ``since``: when the Cluster's last check was (it orders the silent);
        ``due``: when this check fell due, if before now (it orders the others)."""
        m = self._metrics
        asked = trio.current_time()
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._may_start(kind) and not self._queued_before(kind):
            self._running[kind] += 1
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            ticket = _Ticket(trio.Event())
            if kind == SILENT:
                heapq.heappush(self._silent, (since, next(self._asked), ticket))
            else:
                heapq.heappush(self._queues[kind], (min(due, asked), next(self._asked), ticket))
            self._waiting[kind] += 1
            m.checks_waiting.labels(kind).inc()
            try:
                await ticket.granted.wait()
            except BaseException:
                if ticket.granted.is_set():
                    self._running[kind] -= 1  # granted as it was cancelled: hand it on
                    self._dispatch()
                else:
                    ticket.cancelled = True
                    self._waiting[kind] -= 1
                    m.checks_waiting.labels(kind).dec()
                raise
        if self._closed:
            # Given a slot before close() but woken after: never begun, whatever the slot.
            self._running[kind] -= 1
            await trio.sleep_forever()
        waited = trio.current_time() - asked
        m.check_wait_seconds.observe(waited)
        if kind == ANSWERING:
            self._keeping_up(waited)
        m.checks += 1
        m.concurrent_checks += 1
        m.running_checks[kind] = self._running[kind]
        m.max_concurrent_checks = max(m.max_concurrent_checks, m.concurrent_checks)
        self._started[trio.lowlevel.current_task()] = (trio.current_time(), kind)

    def close(self) -> None:
        """Start no check from now on; those running end as they would. A stopping manager has
        recorded every Cluster's next due: a check begun after that would be made again at that
        due by the next manager, seconds later (gaps of 34-49 s in a fleet run whose exit took
        10 s after the record). That includes a check given its slot just before, whose task
        has not run since: it waits, never begun, until the manager's end cancels it (eight such
        at 10,000 Clusters were made again by the next manager 10-20 s later)."""
        self._total = 0
        self._closed = True

    def release(self) -> None:
        started = self._started.pop(trio.lowlevel.current_task(), None)
        kind = ANSWERING
        if started is not None:
            began, kind = started
            held = trio.current_time() - began
            self._metrics.check_seconds.observe(held)
            if kind == ANSWERING:
                self._held += (held - self._held) * 0.05
        self._metrics.concurrent_checks -= 1
        self._running[kind] -= 1
        self._metrics.running_checks[kind] = self._running[kind]
        self._dispatch()

    def _may_start(self, kind: str) -> bool:
        running = self._running
        if running[ANSWERING] + running[NEW] + running[SILENT] >= self._total:
            return False
        return kind == ANSWERING or running[NEW] + running[SILENT] < self._silent_max

    def _queued_before(self, kind: str) -> bool:
        """Whether a check that may start before one of ``kind`` waits: it goes first.

        A slot is free when this is asked, so a waiting answering or new check that may start
        would have had it already: the new ones that wait are held by the cap of the
        unproven, which an answering check is not.
        """
        waiting = self._waiting
        if kind == ANSWERING:
            return bool(waiting[ANSWERING])
        if kind == NEW:
            return bool(waiting[ANSWERING] or waiting[NEW])
        return any(waiting.values())

    def _dispatch(self) -> None:
        """Hand free slots on: to the check that asked first among the answering and the new
        that may start, else to the silent one checked longest ago."""
        answering, new = self._queues[ANSWERING], self._queues[NEW]
        while True:
            heads = [
                (queue[0][:2], kind, queue)
                for kind, queue in ((ANSWERING, answering), (NEW, new))
                if queue and self._may_start(kind)
            ]
            if not heads:
                break
            _, kind, queue = min(heads)
            self._grant(kind, heapq.heappop(queue)[2])
        while self._silent and self._may_start(SILENT):
            self._grant(SILENT, heapq.heappop(self._silent)[2])

    def _grant(self, kind: str, ticket: _Ticket) -> None:
        if ticket.cancelled:
            return
        self._running[kind] += 1
        self._waiting[kind] -= 1
        self._metrics.checks_waiting.labels(kind).dec()
        ticket.granted.set()

    def _keeping_up(self, waited: float) -> None:
        if not self._behind and waited > self._late_after:
            self._behind = True
            if self._held >= 1.0:
                why = (
                    f"checks hold their slot {self._held:.1f} s on average, as spokes that answer"
                    " slowly or not at all do: fix or remove the Clusters that report Unreachable"
                    " (timed out) and those that answer slowly, or shard the manager"
                )
            else:
                why = (
                    f"checks hold their slot {self._held * 1000:.0f} ms on average, so the"
                    " manager is short of CPU for this many Clusters: give it more CPU, or shard"
                    " it (--shards)"
                )
            log.warning(
                "checks are falling behind: a check waited %.0f s for one of the %d check slots"
                " (%d more waiting), so Clusters are checked less often than every %.0f s; %s",
                waited,
                self._total,
                self._waiting[ANSWERING],
                self._late_after,
                why,
            )
        elif self._behind and waited < self._late_after / 2:
            self._behind = False
            log.info("checks keep up again: the last one waited %.1f s for its slot", waited)


ANSWERING = schedule.ANSWERING
NEW = schedule.NEW
SILENT = schedule.SILENT


@attrs.define
class _Ticket:
    granted: trio.Event
    cancelled: bool = False


@attrs.frozen
class _Slot:
    limiter: CountingLimiter
    kind: str
    since: float
    due: float

    async def __aenter__(self) -> None:
        await self.limiter.acquire(self.kind, self.since, self.due)

    async def __aexit__(self, *exc: object) -> None:
        self.limiter.release()


class InClusterCheck:
    """One check of the cluster the manager runs in, shared by every InCluster Cluster.

    Single-flight: while a check runs, other askers wait for its result instead of starting theirs.
    """

    def __init__(
        self,
        client: Client,
        limiter: CountingLimiter,
        options: Options,
        metrics: Metrics,
        check_own: Callable[..., Awaitable[Outcome]] = checks.check_client,
    ):
        self._client = client
        self._check_own = check_own
        self._limiter = limiter
        self._options = options
        self._metrics = metrics
        self._last: tuple[float, Outcome] | None = None
        self._running: trio.Event | None = None

    async def check(self, max_age: float) -> Outcome:
        while True:
            if self._last is not None and trio.current_time() - self._last[0] < max_age:
                return self._last[1]
            if self._running is None:
                break
            await self._running.wait()
            if self._last is not None:
                return self._last[1]
        self._running = done = trio.Event()
        try:
            async with self._limiter:
                self._metrics.in_cluster_checks += 1
                finding = await self._check_own(self._client, timeout=self._options.probe_timeout)
            self._last = (trio.current_time(), finding)
        finally:
            self._running = None
            done.set()
        return finding
