"""Which replica serves which Cluster: shards by a stable hash, one Lease per shard.

Pure: no I/O, no Trio. The replicas never talk to each other; each one is a candidate for every
shard's Lease (:mod:`kokumi.core.leader` rules, :mod:`kokumi.runtime.election` loop), and a
Cluster belongs to the shard its name hashes to. The hash must be the same in every process and
every release, so it is SHA-256 of ``namespace/name``, never Python's ``hash()``, which is salted
per process. The one waiting line a server's replicas share is the handover's
(:mod:`kokumi.core.handover`).
"""

from __future__ import annotations

import hashlib

import attrs

from kokumi.core.leader import DEFAULT_LEASE_NAME, Timing

__all__ = ["Sharding", "lease_name", "preference", "shard_of"]


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard of the Cluster ``namespace/name`` among ``shards``: stable everywhere."""
    if shards < 1:
        raise ValueError("there must be at least one shard")
    return _digest(f"{namespace}/{name}") % shards


def lease_name(shard: int) -> str:
    """The Lease that says which replica serves ``shard``, in Kokumi's namespace."""
    return f"{DEFAULT_LEASE_NAME}-shard-{shard}"


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
