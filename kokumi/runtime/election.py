"""The Lease loop: run a body only while this process holds the manager's Lease.

:meth:`LeaseElector.run` waits until the Lease is this candidate's, runs the body, renews every
retry period, and when no renewal goes through before the renew deadline it cancels the body and
raises :class:`LeadershipLost` (``kokumi manager`` then exits non-zero and Kubernetes restarts the
pod as a fresh standby). When the body is cancelled from outside (SIGTERM), the Lease is handed
back after the body has stopped, so a standby takes over at its next try instead of waiting out
the lease. What to do at each step is decided by :mod:`kokumi.core.fleet.leader`; this module only
reads, writes and sleeps.

With a :class:`CountGate`, a candidate that has just taken its Lease lists the Leases of other
shard counts before it runs the body, and hands its own back when one is held
(:class:`kokumi.core.fleet.shards.Counts`): replicas of two ``--shards`` never serve side by side.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from kokumi.core.fleet import leader, shards
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.resources import LEASES
from kokumi.objects import metadata_of, resource_version

__all__ = ["Admission", "CountGate", "LeadershipLost", "LeaseElector"]

log = logging.getLogger(__name__)

#: How long a stopping leader tries to hand the Lease back before it gives up and lets it expire.
RELEASE_TIMEOUT = 5.0


class LeadershipLost(Exception):
    """The leader could not renew its Lease in time, or somebody else holds it now."""


class Admission:
    """What the electors of one replica share when it stands for several Leases (shards).

    At most ``limit`` of them may hold their Lease at once, and they try to take one at a time,
    in the order they asked, so the bound is exact even when several Leases are free together.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lock = trio.Lock()
        self.electors: list[LeaseElector] = []

    def room(self, me: LeaseElector) -> bool:
        """Whether ``me`` may hold one more (a Lease it holds already, created and not yet
        written for, is its own place)."""
        return sum(e.state.leading for e in self.electors if e is not me) < self.limit


class CountGate:
    """The Leases of other shard counts, as this replica lists them (one per replica).

    ``own`` is this replica's count (1: the single leader). Listing needs ``list`` on Leases in
    Kokumi's namespace; a listing that fails counts as a rival held, so nothing is served on a
    guess.
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        own: int,
        leader_lease: str = leader.DEFAULT_LEASE_NAME,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.counts = shards.Counts(own, leader_lease)
        #: The rivals found by the last listing, as (Lease, holder).
        self.rivals: list[tuple[str, str]] = []

    async def held(self) -> list[tuple[str, str]]:
        """The Leases of another shard count held now, read from the server just now."""
        try:
            listing = await self._client.list(LEASES, namespace=self.namespace)
        except errors.KubeError as exc:
            self.rivals = [("(the Leases could not be listed)", str(exc))]
            return self.rivals
        leases = [
            (str(metadata_of(item).get("name", "")), leader.parse_record(item.get("spec")))
            for item in listing.get("items", [])
        ]
        now = trio.current_time()
        self.counts = self.counts.observe(leases, now)
        self.rivals = self.counts.held(now)
        return self.rivals


class LeaseElector:
    """One candidate for the Lease ``config.lease_name`` in ``namespace``.

    ``on_change(leading)`` is called whenever this candidate starts or stops leading (metrics).
    ``last_seen`` is the Trio time of the last successful read or write of the Lease: a standby
    that reads it regularly is healthy even though it does nothing else.
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        config: leader.LeaderElection,
        *,
        on_change: Callable[[bool], None] | None = None,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        admission: Admission | None = None,
        gate: CountGate | None = None,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self.config = config
        self.state = leader.Elector(config.identity, config.timing)
        self.last_seen: float | None = None
        self._on_change = on_change or (lambda leading: None)
        self._wall = wall
        self._lease: dict[str, Any] | None = None
        self._last_problem = ""
        self.leading = trio.Event()
        self._admission = admission
        self._gate = gate
        self._last_rivals: list[tuple[str, str]] = []
        if admission is not None:
            admission.electors.append(self)
        #: Set once this candidate has made its first try: a replica standing for several
        #: Leases starts them one after another, so its first choice is tried first.
        self.tried = trio.Event()

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def timing(self) -> leader.Timing:
        return self.config.timing

    async def run(self, body: Callable[[], Awaitable[object]]) -> None:
        """Run ``body`` while this candidate holds the Lease; never before it does.

        Returns when ``body`` returns (the Lease is handed back). Raises :class:`LeadershipLost`
        once the body has been cancelled for a renewal that did not come in time.
        """
        lost: str | None = None
        try:
            await self._acquire()
            async with trio.open_nursery() as nursery:

                async def keep() -> None:
                    nonlocal lost
                    lost = await self._renew_until_lost()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(keep)
                await body()
                nursery.cancel_scope.cancel()
        finally:
            # Whatever ended the body, it has stopped writing by now: the nursery is closed.
            if self.leading.is_set():
                self._set_leading(False)
            if self.state.leading and lost is None:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + RELEASE_TIMEOUT
                    await self._release()
            self.state = self.state.stepped_down()
        if lost is not None:
            raise LeadershipLost(lost)

    # --- the steps --------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        log.info(
            "waiting to lead: Lease %s/%s, candidate %s",
            self.namespace,
            self.config.lease_name,
            self.identity,
        )
        # Polled, as client-go does: a watch would not tell when a silent holder's lease expires.
        while not await self._admitted_attempt():
            self.tried.set()
            await trio.sleep(self._retry_delay())
        self.tried.set()
        log.info("leading: Lease %s/%s is held by %s", *self._where(), self.identity)

    async def _renew_until_lost(self) -> str:
        """Renew every retry period until a renewal fails to arrive in time; say why it ended."""
        while True:
            with trio.move_on_at(self.state.stop_by()):
                await trio.sleep(self.timing.retry_period)
                while not await self._attempt():
                    if not self.state.leading:
                        return leader.Lost(self.state.holder).why("/".join(self._where()))
                    await trio.sleep(self._retry_delay())
                continue
            return (
                f"could not renew the Lease {'/'.join(self._where())} within"
                f" {self.timing.renew_deadline:g} s"
            )

    async def _admitted_attempt(self) -> bool:
        """One try to take the Lease, if this replica has room for one more."""
        admission = self._admission
        if admission is None:
            taken = await self._take()
        else:
            async with admission.lock:
                taken = admission.room(self) and await self._take()
        if taken:
            self._set_leading(True)
        return taken

    async def _take(self) -> bool:
        """Take the Lease, and keep it only if no Lease of another shard count is held.

        The listing after the write is what makes it safe (each side writes, then reads); the
        one before it only spares a write while a rival is plainly there.
        """
        gate = self._gate
        if gate is not None and await self._rivals(gate):
            return False
        if not await self._attempt():
            return False
        if not self.state.may_write(trio.current_time()):
            return False  # created just now: held, renewed, not written for yet
        if gate is None or not await self._rivals(gate):
            return True
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + RELEASE_TIMEOUT
            await self._release()
        return False

    async def _rivals(self, gate: CountGate) -> bool:
        rivals = await gate.held()
        if rivals and rivals != self._last_rivals:
            held = ", ".join(f"{name} by {holder}" for name, holder in rivals)
            log.warning(
                "Lease %s/%s: waiting, a Lease of another shard count is held (%s); this"
                " replica serves once the replicas of the other --shards have gone",
                *self._where(),
                held,
            )
        self._last_rivals = rivals
        return bool(rivals)

    def serving_until(self) -> float | None:
        """Until when (Trio time) the holder may write: the renew deadline; None if not held."""
        if not (self.state.leading and self.leading.is_set()):
            return None
        until = self.state.stop_by()
        return until if until > trio.current_time() else None

    async def _attempt(self) -> bool:
        """One read and, if the rules say so, one write of the Lease; whether we hold it now."""
        started = trio.current_time()
        try:
            await self._read(started)
            decision = leader.decide(self.state, trio.current_time(), self._wall())
            if isinstance(decision, leader.Wait):
                self._problem("")
                return False
            if isinstance(decision, leader.Lost):
                log.warning("%s: stepping down", decision.why("/".join(self._where())))
                self.state = self.state.stepped_down()
                return False
            await self._write(decision, started)
        except (errors.Conflict, errors.AlreadyExists):
            # Another candidate wrote first: the rules work as meant, nothing to report.
            log.debug("Lease %s/%s: another candidate wrote it first", *self._where())
            return False
        except errors.KubeError as exc:
            self._problem(str(exc))
            return False
        self._problem("")
        return True

    async def _read(self, now: float) -> None:
        try:
            lease = await self._client.get(LEASES, self.config.lease_name, namespace=self.namespace)
        except errors.NotFound:
            self._lease = None
            self.state = self.state.observe(None, "", now)
        else:
            self._lease = lease
            record = leader.parse_record(lease.get("spec"))
            version = resource_version(lease) or ""
            self.state = self.state.observe(record, version, now)
        self.last_seen = trio.current_time()

    async def _write(self, decision: leader.Create | leader.Update, started: float) -> None:
        spec = leader.spec_of(decision.record)
        if isinstance(decision, leader.Create):
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self.config.lease_name, "namespace": self.namespace},
                "spec": spec,
            }
            written = await self._client.create(LEASES, body, namespace=self.namespace)
        else:
            current = self._lease or {}
            metadata = dict(metadata_of(current))
            metadata["resourceVersion"] = decision.resource_version
            body = {**current, "metadata": metadata, "spec": {**current.get("spec", {}), **spec}}
            written = await self._client.replace(LEASES, body, namespace=self.namespace)
        self._lease = written
        version = resource_version(written) or ""
        created = isinstance(decision, leader.Create)
        self.state = self.state.wrote(decision.record, version, started, created=created)
        self.last_seen = trio.current_time()

    async def _release(self) -> None:
        """Hand the Lease back: empty holder, one-second lease, so a standby takes it at once."""
        record = self.state.release(self._wall())
        self.state = self.state.stepped_down()
        if record is None or self._lease is None:
            return
        try:
            try:
                await self._hand_back(self._lease, record)
            except errors.Conflict:
                # A renewal cancelled on its way back (the stop came while it was in flight)
                # may have been written all the same: the Lease is then a version newer than
                # the one known here, and still ours. Read it, and hand back that one.
                lease = await self._client.get(
                    LEASES, self.config.lease_name, namespace=self.namespace
                )
                holder = leader.parse_record(lease.get("spec")).holder
                if holder != self.identity:
                    log.info(
                        "Lease %s/%s is held by %r now: nothing to hand back",
                        *self._where(),
                        holder,
                    )
                    return
                await self._hand_back(lease, record)
        except errors.KubeError as exc:
            log.warning("could not hand the Lease back (%s): it runs out by itself", exc)
            return
        log.info("handed the Lease %s/%s back", *self._where())

    async def _hand_back(self, lease: dict[str, Any], record: leader.LeaseRecord) -> None:
        """Write ``record`` over ``lease``, at that version (a Conflict if it moved on)."""
        body = {**lease, "spec": {**lease.get("spec", {}), **leader.spec_of(record)}}
        body["metadata"] = dict(metadata_of(lease))
        await self._client.replace(LEASES, body, namespace=self.namespace)

    # --- helpers ----------------------------------------------------------------------------------

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self.leading.set()
        else:
            self.leading = trio.Event()
        self._on_change(leading)

    def _problem(self, problem: str) -> None:
        """Log a failure once when it starts or changes, not once per retry."""
        if problem and problem != self._last_problem:
            log.warning("Lease %s/%s: %s; retrying", *self._where(), problem)
        self._last_problem = problem

    def _retry_delay(self) -> float:
        return self.timing.retry_period * random.uniform(1.0, leader.JITTER)  # noqa: S311

    def _where(self) -> tuple[str, str]:
        return self.namespace, self.config.lease_name
