"""What every actor of one manager shares: the hub client, options, limits and counters."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import trio
import trio.testing

from kokumi.actors.alarms import Alarms
from kokumi.actors.checks import CountingLimiter, InClusterCheck, Probe
from kokumi.actors.metrics import Metrics
from kokumi.actors.secretreads import SecretReads, SecretVersions
from kokumi.actors.writes import EventRecorder
from kokumi.core.fleet import stoprecord
from kokumi.kube.client import Client
from kokumi.runtime.options import Options
from kokumi.runtime.probe import checks

if TYPE_CHECKING:
    from kokumi.core.kubeconfig.connection import Connection
    from kokumi.core.registry.carry import Extras
    from kokumi.core.registry.ownership import ClusterRef
    from kokumi.core.registry.registration import Registration

__all__ = ["Context", "RegistryHandle", "StopRecord", "wall_shift"]

_SHIFTS: weakref.WeakKeyDictionary[trio.abc.Clock, float] = weakref.WeakKeyDictionary()


def wall_shift() -> float:
    """``trio.current_time()`` less ``time.time()``, measured once per Trio clock.

    Trio's clock starts at a random point in every process, so a Cluster's place in the minute
    counted on it moved at every restart (the gap across one was a matter of luck). Counted
    from the Unix epoch instead, the place is the same second of the minute in every process:
    a restarted manager, or the replica a shard moves to, checks each Cluster where the last one
    did. Once per clock, so that every actor of one run agrees. A test's ``MockClock`` is its
    own wall (no shift): its places count from its zero, so that a seeded test replays alike.
    """
    clock = trio.lowlevel.current_clock()
    shift = _SHIFTS.get(clock)
    if shift is None:
        mock = isinstance(clock, trio.testing.MockClock)
        shift = _SHIFTS[clock] = 0.0 if mock else trio.current_time() - time.time()
    return shift


class RegistryHandle(Protocol):
    def subscribe(
        self, cluster: ClusterRef, uid: str, notify: Callable[[Registration], None]
    ) -> None: ...
    def unsubscribe(self, cluster: ClusterRef, uid: str) -> None: ...
    async def want(
        self, cluster: ClusterRef, uid: str, connection: Connection, extras: Extras = ...
    ) -> None: ...
    async def release(self, cluster: ClusterRef, uid: str) -> bool: ...


class StopRecord:
    """The stop record of the manager that stopped before this one, and the checks of this one's
    stop (:mod:`kokumi.core.fleet.stoprecord`).

    ``recorded`` holds each recorded Cluster's next due (Unix time) by its uid's key; an actor
    takes its own entry as it starts. ``pending`` counts the checks a stop asked for that have
    not ended yet; ``done`` is set when the last one has.
    """

    __slots__ = ("done", "pending", "recorded")

    def __init__(self) -> None:
        self.recorded: dict[bytes, float] = {}
        self.pending = 0
        self.done = trio.Event()

    def take(self, uid: str) -> float | None:
        """The recorded next due of the Cluster ``uid`` (once: its actor takes it as it starts)."""
        if not uid or not self.recorded:
            return None
        return self.recorded.pop(stoprecord.uid_key(uid), None)

    def due(self, uid: str) -> float | None:
        """The recorded next due of the Cluster ``uid``, left for its actor to take."""
        if not uid or not self.recorded:
            return None
        return self.recorded.get(stoprecord.uid_key(uid))

    def begin(self, pending: int) -> None:
        self.pending = pending
        self.done = trio.Event()
        if pending <= 0:
            self.done.set()

    def checked(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self.done.set()


@attrs.define
class Context:
    client: Client
    options: Options
    registry: RegistryHandle
    in_cluster: InClusterCheck
    probe_limiter: CountingLimiter
    events: EventRecorder
    metrics: Metrics
    secret_versions: SecretVersions = attrs.field(factory=SecretVersions)
    check: Probe = checks.check
    username: str | None = None  # the manager's own identity on the hub, named in RBAC fixes
    #: Reads of Secrets' data (kubeconfigs), eight GETs at a time, or one paged list when a
    #: restart makes every Cluster of a namespace read at once (kokumi.actors.secretreads).
    secret_reads: SecretReads = attrs.field(
        default=attrs.Factory(
            lambda self: SecretReads(
                self.client, batch_at=self.options.secret_list_at, versions=self.secret_versions
            ),
            takes_self=True,
        )
    )
    #: The last manager's record of its Clusters' next checks, and this one's stop.
    stop_record: StopRecord = attrs.field(factory=StopRecord)
    #: The actors' timers, rung a tick at a time by one task of the manager.
    alarms: Alarms = attrs.field(factory=Alarms)
    #: The client of a Cluster's writes (status, finalizer, Events); with shards or a leader
    #: Lease, fenced by the Lease that lets this replica serve it. None: ``client``.
    writers: Callable[[ClusterRef], Client] | None = None

    def writer(self, cluster: ClusterRef) -> Client:
        return self.client if self.writers is None else self.writers(cluster)
