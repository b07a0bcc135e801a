"""Which replica serves which Cluster: shards by a stable hash, one Lease per shard.

Pure: no I/O, no Trio. The replicas never talk to each other; each one is a candidate for every
shard's Lease (:mod:`kokumi.core.fleet.leader` rules, :mod:`kokumi.runtime.election` loop), and a
Cluster belongs to the shard its name hashes to. The hash must be the same in every process and
every release, so it is SHA-256 of ``namespace/name``, never Python's ``hash()``, which is salted
per process. The one waiting line a server's replicas share is the handover's
(:mod:`kokumi.core.registry.handover`).

Shard Leases carry their shard count in their name (``kokumi-clusters-shard-1-of-3``), and a
replica serves a shard only while no Lease of another count is held: during a change of
``--shards`` the replicas of two counts run side by side, and a Cluster's shard differs
between them. After it takes a Lease, a replica lists the Leases and lets go again if one of
another count is held (:class:`Counts`). Because each side writes its Lease before it reads the
others', at least one of two replicas of different counts that start together sees the other;
one that already serves keeps its Lease held, so a newcomer of another count always sees it.
The single leader's Lease (``kokumi-clusters``) counts as one shard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

import attrs

from kokumi.core.fleet.leader import DEFAULT_LEASE_NAME, LeaseRecord, Timing

__all__ = ["Counts", "Sharding", "count_of", "lease_name", "preference", "shard_of"]

_SHARD_LEASE = re.compile(rf"{re.escape(DEFAULT_LEASE_NAME)}-shard-\d+(?:-of-(\d+))?")


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard of the Cluster ``namespace/name`` among ``shards``: stable everywhere."""
    if shards < 1:
        raise ValueError("there must be at least one shard")
    return _digest(f"{namespace}/{name}") % shards


def lease_name(shard: int, shards: int) -> str:
    """The Lease that says which replica serves ``shard`` of ``shards``, in Kokumi's namespace."""
    return f"{DEFAULT_LEASE_NAME}-shard-{shard}-of-{shards}"


def count_of(name: str, leader_lease: str = DEFAULT_LEASE_NAME) -> int | None:
    """The shard count the Lease ``name`` elects for: 1 for the single leader's Lease, 0 for a
    shard Lease without a count in its name (an early build's: every count's rival), None for a
    Lease that is not Kokumi's."""
    if name == leader_lease:
        return 1
    match = _SHARD_LEASE.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else 0


@attrs.frozen
class Counts:
    """What one replica has seen of the Leases of other shard counts, to judge them held.

    A Lease is held while its holder is set and ``leaseDurationSeconds`` have not passed since
    this replica saw its record change, on this replica's clock, as for any Lease
    (:mod:`kokumi.core.fleet.leader`): a record seen for the first time counts as just changed.
    """

    own: int
    leader_lease: str = DEFAULT_LEASE_NAME
    #: Lease name -> (record, when this replica saw it change).
    seen: Mapping[str, tuple[LeaseRecord, float]] = attrs.field(factory=dict)

    def observe(self, leases: Iterable[tuple[str, LeaseRecord]], now: float) -> Counts:
        """Take in a listing of the namespace's Leases (every Lease, or just Kokumi's)."""
        seen: dict[str, tuple[LeaseRecord, float]] = {}
        for name, record in leases:
            count = count_of(name, self.leader_lease)
            if count is None or count == self.own:
                continue
            old = self.seen.get(name)
            seen[name] = (record, old[1] if old is not None and old[0] == record else now)
        return attrs.evolve(self, seen=seen)

    def held(self, now: float) -> list[tuple[str, str]]:
        """The Leases of another count held now, as (name, holder), by name."""
        return sorted(
            (name, record.holder)
            for name, (record, changed_at) in self.seen.items()
            if record.holder and now < changed_at + record.duration_seconds
        )


def preference(identity: str, shards: int) -> tuple[int, ...]:
    """The order in which the replica ``identity`` tries the shards.

    Every replica starts at a different place (the hash of its identity), so replicas that start
    together with ``--max-shards`` below the number of shards reach for different shards first
    instead of all racing for shard 0.
    """
    start = _digest(identity) % shards
    return tuple((start + k) % shards for k in range(shards))


@attrs.frozen
class Sharding:
    """How this replica takes part: ``shards`` in all, at most ``max_shards`` held at a time.

    ``identity`` names this replica in the Leases and must differ between replicas; ``timing``
    is every shard Lease's (client-go's three durations).
    """

    identity: str
    shards: int
    max_shards: int | None = None
    timing: Timing = attrs.field(factory=Timing)
    #: The single leader's Lease (``--leader-elect-lease-name``): a rival of one shard.
    leader_lease: str = DEFAULT_LEASE_NAME

    def __attrs_post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"--shards must be 1 or more, not {self.shards}")
        if self.max_shards is not None and self.max_shards < 1:
            raise ValueError(f"--max-shards must be 1 or more, not {self.max_shards}")

    @property
    def limit(self) -> int:
        """How many shards this replica may hold at once."""
        return min(self.shards, self.max_shards or self.shards)

    def shard_of(self, namespace: str, name: str) -> int:
        return shard_of(namespace, name, self.shards)

    def lease_name(self, shard: int) -> str:
        return lease_name(shard, self.shards)
