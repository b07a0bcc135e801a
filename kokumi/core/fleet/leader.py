"""Leader election on a ``coordination.k8s.io/v1`` Lease, as pure decisions.

Given what this candidate last saw of the Lease and the clock, :func:`decide` says what to do:
create the Lease, write it (to take it or to renew it), wait for the holder's lease to run out,
or give up leading because somebody else holds it now. No I/O and no Trio here: the loop that
reads and writes the Lease is :mod:`kokumi.runtime.election`, and the rules below are tested
without a server.

The rules are client-go's (``tools/leaderelection``), so a Kokumi manager reads a Lease the way
``kubectl`` users and every other controller expect:

- A holder's lease runs out ``leaseDurationSeconds`` after this candidate *saw the record change*,
  measured on its own monotonic clock. The ``renewTime`` written in the Lease is for people: two
  machines' wall clocks need not agree, and nothing here trusts them to.
- An empty ``holderIdentity`` means nobody holds it: a leader that stopped cleanly wrote that
  (with ``leaseDurationSeconds: 1``), and a standby takes it at its next try.
- A leader renews every retry period; when no renewal has gone through for ``renew_deadline``
  seconds, counted from when the last good attempt *began*, it must stop writing. Since
  ``renew_deadline < lease_duration`` it stops before any standby may take over.
- Writes carry the ``resourceVersion`` read just before, so two candidates racing for a free
  Lease cannot both win: the server turns the second write into a Conflict.

Where Kokumi is stricter than client-go, a deleted Lease: client-go creates a missing Lease at
once, so a standby leads while the old leader writes until its next renewal. Here a leader that
finds its Lease gone stops writing at once (:class:`Lost`), and a candidate that *created* the
Lease holds it a renew deadline before it leads (:meth:`Elector.may_write`): whoever held a
deleted Lease renewed it last before the deletion, so before the create, and has stopped by
then, whether it noticed or not. A candidate cannot tell a deleted Lease from a first start, so
a first start waits the same renew deadline once.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "DEFAULT_LEASE_NAME",
    "Create",
    "Decision",
    "Elector",
    "LeaderElection",
    "LeaseRecord",
    "Lost",
    "Timing",
    "Update",
    "Wait",
    "decide",
    "format_time",
    "parse_record",
    "spec_of",
]

DEFAULT_LEASE_NAME = "kokumi-clusters"

#: client-go's JitterFactor: a retry comes up to 20 % later, so candidates do not move in step.
JITTER = 1.2


@attrs.frozen
class Timing:
    """client-go's three durations, in seconds (the defaults are client-go's too).

    A standby may take the Lease ``lease_duration`` after it last saw it change; the leader
    gives up after ``renew_deadline`` without a renewal; everybody tries every ``retry_period``.
    """

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __attrs_post_init__(self) -> None:
        if not self.retry_period > 0:
            raise ValueError("the retry period must be more than 0 s")
        if not self.renew_deadline > self.retry_period * JITTER:
            raise ValueError(
                f"the renew deadline ({self.renew_deadline:g} s) must be more than"
                f" {JITTER:g} x the retry period ({self.retry_period:g} s): lengthen it"
            )
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(
                f"the lease duration ({self.lease_duration:g} s) must be more than the renew"
                f" deadline ({self.renew_deadline:g} s), or a standby could take over while"
                " the leader still writes"
            )

    @property
    def lease_seconds(self) -> int:
        """``leaseDurationSeconds`` is a whole number: rounded up, never shortened."""
        return math.ceil(self.lease_duration)


@attrs.frozen
class LeaderElection:
    """How a manager elects its leader: the Lease's name, who this candidate is, and the timing.

    The Lease lives in the manager's namespace. ``identity`` must differ between replicas: the
    pod's name and a random suffix (what ``kokumi manager`` uses) differ even across restarts.
    """

    identity: str
    lease_name: str = DEFAULT_LEASE_NAME
    timing: Timing = Timing()


@attrs.frozen
class LeaseRecord:
    """The part of a Lease's spec that election reads and writes."""

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


def parse_record(spec: Mapping[str, Any] | None) -> LeaseRecord:
    """The record in a Lease's ``spec``; missing or mistyped fields read as absent."""
    spec = spec or {}

    def text(key: str) -> str | None:
        value = spec.get(key)
        return value if isinstance(value, str) else None

    def number(key: str) -> int:
        value = spec.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return LeaseRecord(
        holder=text("holderIdentity") or "",
        duration_seconds=number("leaseDurationSeconds"),
        acquire_time=text("acquireTime"),
        renew_time=text("renewTime"),
        transitions=number("leaseTransitions"),
    )


def spec_of(record: LeaseRecord) -> dict[str, Any]:
    """The Lease ``spec`` fields for ``record`` (an empty holder is written as ``""``)."""
    spec: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration_seconds,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = record.acquire_time
    if record.renew_time is not None:
        spec["renewTime"] = record.renew_time
    return spec


def format_time(when: dt.datetime) -> str:
    """A ``MicroTime`` as the API server writes it: UTC, microseconds, a ``Z``."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.frozen
class Observation:
    """The Lease as last read, and when (this candidate's monotonic clock) its record changed."""

    record: LeaseRecord
    resource_version: str
    changed_at: float


@attrs.frozen
class Elector:
    """What one candidate knows: the Lease as last seen, and since when it has led (if it does).

    ``renewed_at`` is when the last successful acquire or renewal *began*: the deadline counts
    from there, so a write that took long is not credited with time it did not hold the Lease.
    """

    identity: str
    timing: Timing
    observed: Observation | None = None
    renewed_at: float | None = None
    #: Set by a create: until then this candidate holds the Lease but may not write.
    hold_until: float | None = None

    @property
    def leading(self) -> bool:
        return self.renewed_at is not None

    @property
    def holder(self) -> str:
        """Who holds the Lease as far as this candidate knows (``""``: nobody, or unknown)."""
        return self.observed.record.holder if self.observed is not None else ""

    def stop_by(self) -> float:
        """When the leader must have stopped writing unless a renewal goes through first."""
        assert self.renewed_at is not None, "only a leader has a deadline"
        return self.renewed_at + self.timing.renew_deadline

    def expires_at(self) -> float | None:
        """When the Lease as seen runs out for this candidate (None: nobody is seen holding it)."""
        if self.observed is None or not self.observed.record.holder:
            return None
        return self.observed.changed_at + self.observed.record.duration_seconds

    def observe(self, record: LeaseRecord | None, resource_version: str, now: float) -> Elector:
        """Remember the Lease as just read (``None``: none exists); a change restarts its clock."""
        if record is None:
            return attrs.evolve(self, observed=None)
        old = self.observed
        changed_at = now if old is None or old.record != record else old.changed_at
        return attrs.evolve(self, observed=Observation(record, resource_version, changed_at))

    def may_write(self, now: float) -> bool:
        """Whether this candidate may write for the Lease now: it leads, is past the hold of a
        Lease it created, and before its renew deadline."""
        if not self.leading or now >= self.stop_by():
            return False
        return self.hold_until is None or now >= self.hold_until

    def wrote(
        self, record: LeaseRecord, resource_version: str, started: float, *, created: bool = False
    ) -> Elector:
        """The write of ``record`` that began at ``started`` went through: this candidate leads
        (``created``: it created the Lease, and holds it a renew deadline before it writes)."""
        hold = started + self.timing.renew_deadline if created else self.hold_until
        return attrs.evolve(
            self,
            observed=Observation(record, resource_version, started),
            renewed_at=started,
            hold_until=hold,
        )

    def stepped_down(self) -> Elector:
        return attrs.evolve(self, renewed_at=None, hold_until=None)

    def release(self, wall: dt.datetime) -> LeaseRecord | None:
        """The record that hands the Lease back at once, as client-go's ``ReleaseOnCancel`` does.

        None when this candidate is not the holder it last saw: there is nothing to give back.
        """
        if self.observed is None or self.observed.record.holder != self.identity:
            return None
        now = format_time(wall)
        return LeaseRecord(
            holder="",
            duration_seconds=1,
            acquire_time=now,
            renew_time=now,
            transitions=self.observed.record.transitions,
        )


@attrs.frozen
class Create:
    """There is no Lease: create it, held by this candidate."""

    record: LeaseRecord


@attrs.frozen
class Update:
    """Write ``record`` over the Lease at ``resource_version``: take it, or renew it."""

    record: LeaseRecord
    resource_version: str


@attrs.frozen
class Wait:
    """Somebody else holds a lease that has not run out: try again after a retry period."""

    holder: str
    expires_at: float


@attrs.frozen
class Lost:
    """This candidate led, but the Lease now names somebody else (``holder``), or is gone
    (``holder`` empty): stop writing at once."""

    holder: str

    def why(self, lease: str) -> str:
        if self.holder:
            return f"the Lease {lease} is held by {self.holder}"
        return f"the Lease {lease} was deleted"


Decision = Create | Update | Wait | Lost


def decide(elector: Elector, now: float, wall: dt.datetime) -> Decision:
    """What ``elector`` should do at monotonic time ``now`` (``wall``: the time to write)."""
    stamp = format_time(wall)
    seconds = elector.timing.lease_seconds
    observed = elector.observed
    if observed is None:
        if elector.leading:
            return Lost("")
        return Create(LeaseRecord(elector.identity, seconds, stamp, stamp, 0))
    record = observed.record
    mine = record.holder == elector.identity
    if record.holder and not mine:
        if elector.leading:
            return Lost(record.holder)
        expires = observed.changed_at + record.duration_seconds
        if now < expires:
            return Wait(record.holder, expires)
    if mine:
        acquired, transitions = record.acquire_time or stamp, record.transitions
    else:
        acquired, transitions = stamp, record.transitions + 1
    new = LeaseRecord(elector.identity, seconds, acquired, stamp, transitions)
    return Update(new, observed.resource_version)
