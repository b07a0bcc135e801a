"""Retry pacing and quiet failure logs, shared by every loop that talks to an API server.

A controller that retries a refused write every few seconds and logs each attempt turns one outage
into a request storm and a log flood: 5,000 Clusters against a recovering hub would be a thousand
requests and a thousand log lines a second. Every retry path therefore waits an exponentially
growing, jittered, capped delay (so that retries of many callers spread out instead of arriving
together), and a failure is logged when it starts or changes, not at every attempt.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable

import attrs

__all__ = ["Backoff", "FailureLog", "Retries"]


@attrs.define
class Backoff:
    """Exponential delays with equal jitter: each delay is between half and all of its step.

    The step doubles from ``initial`` up to ``maximum``; :meth:`reset` after a success starts
    over. Equal jitter keeps a floor (half the step), so a caller never retries at once.
    """

    initial: float = 1.0
    maximum: float = 300.0
    _current: float = attrs.field(default=0.0, init=False)

    def next(self) -> float:
        self._current = self.initial if self._current <= 0 else min(self._current * 2, self.maximum)
        half = self._current / 2
        return half + random.uniform(0, half)  # noqa: S311  (jitter, not a secret)

    def reset(self) -> None:
        self._current = 0.0

    @property
    def failing(self) -> bool:
        """Whether the last attempt failed (a delay was taken since the last reset)."""
        return self._current > 0


@attrs.define
class FailureLog:
    """Logs a failure once per change of its text, and the recovery once.

    ``what`` names the subject ("Cluster ns/name", "watch /api/v1/secrets"). The text must carry
    no credential: callers pass the typed errors of :mod:`kokumi.kube.errors`, which never do.
    """

    logger: logging.Logger
    what: str
    level: int = logging.WARNING
    _last: str | None = attrs.field(default=None, init=False)

    def failed(self, error: object, *, retry_in: float | None = None) -> bool:
        """Note a failure; log it only if it differs from the last one. Whether it was logged."""
        text = str(error)
        if text == self._last:
            self.logger.debug("%s: %s (again)", self.what, text)
            return False
        self._last = text
        if retry_in is None:
            self.logger.log(self.level, "%s: %s; retrying", self.what, text)
        else:
            self.logger.log(self.level, "%s: %s; retrying in %.1f s", self.what, text, retry_in)
        return True

    def recovered(self) -> None:
        if self._last is not None:
            self.logger.info("%s: recovered", self.what)
            self._last = None

    @property
    def failing(self) -> bool:
        return self._last is not None


class Retries:
    """One actor's retries: a backoff per kind of request, one log line per change of error, and
    when the soonest retry falls due (``at``; ``math.inf``: none pending).

    A failed step waits its own kind's growing, jittered delay, and a turn that ends with no
    retry pending forgets them all, so a long outage costs neither a request storm nor a log
    flood, and a recovery starts afresh.
    """

    __slots__ = ("_backoffs", "_new", "at", "failures")

    def __init__(self, new: Callable[[], Backoff], failures: FailureLog) -> None:
        self._new = new
        self._backoffs: dict[str, Backoff] = {}
        self.failures = failures
        self.at = math.inf

    def later(self, kind: str, now: float) -> float:
        """Retry after the next delay of ``kind`` from ``now``; the delay."""
        backoff = self._backoffs.get(kind)
        if backoff is None:
            backoff = self._backoffs[kind] = self._new()
        delay = backoff.next()
        self.at = min(self.at, now + delay)
        return delay

    def failed(self, kind: str, error: object, now: float) -> None:
        """``kind`` failed with ``error``: retry later, logged once per change of error."""
        delay = self.later(kind, now)
        self.failures.failed(f"{kind}: {error}", retry_in=delay)

    def settled(self) -> None:
        """A turn ended: with no retry pending, every kind starts afresh."""
        if self.at == math.inf:
            self._backoffs.clear()
            self.failures.recovered()
