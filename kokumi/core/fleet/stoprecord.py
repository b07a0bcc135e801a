"""The stop record: what a stopping manager leaves for the next one, when each Cluster's next
check is due.

Why it exists: a restarted manager cannot tell when each Cluster was last checked (the status
changes only when the finding does), so it checks each at its place in the minute
(:mod:`kokumi.core.cluster.schedule`). That is right for a fleet whose checks are on their places,
and wrong for two kinds of Cluster. One created in the last minutes is still moving toward its
place, 1.5 to 3 s a check, so its place can be half a minute from its last check: a gap of
80-105 s across the restart. And every Cluster due in the seconds a new manager needs before its
first check (its lists of Clusters and Secrets: 11-15 s at 10,000) waits that long past its
minute.

So a manager that is asked to stop (SIGTERM) records its stop: it checks at once every answering
Cluster due within :data:`HORIZON` whose last check began a minute ago or more (no check comes
before the minute, so this takes only what is left of a check's random lateness), then writes
one ConfigMap, :data:`NAME` in its own namespace, with every Cluster's next due; the next
manager reads it once and checks each Cluster when the last one would have. One write per stop,
none while running and none after a restart. A manager that crashed leaves no fresh record, and
the next falls back to the places.

The record is the ConfigMap's ``binaryData`` key :data:`KEY`: 12 bytes per Cluster, a 64-bit
hash of its uid and its due in milliseconds from the record's ``written-at`` (a signed 32-bit
count, so a due may lie before the record was written: a check the stop could not make). Ten
thousand Clusters take 120 KB, well within a ConfigMap's 1 MiB; past :data:`MAX_ENTRIES` the
Clusters due soonest are kept.

With ``--shards`` a replica serves only its shards, and a shard moves when its holder stops (a
rolling upgrade moves every one): the stopping replica records each shard it holds under keys of
that shard's own (:func:`keys`) in the same ConfigMap, each written by a server-side apply of a
field manager of that shard's, so that records of shards written by different replicas stand
side by side; the replica that takes a shard reads that shard's record as it starts serving it.
Without one, a shard's Clusters whose place came in the last seconds would be checked at once,
before their minute, and the others at their places with a new lateness.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import math
import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "BUDGET",
    "HORIZON",
    "KEY",
    "MAX_ENTRIES",
    "NAME",
    "RecordError",
    "config_map",
    "keys",
    "read_config_map",
    "uid_key",
]

NAME: Final = "kokumi-clusters-handover"
"""The ConfigMap, in the manager's own namespace (the namespace of its Lease). Its name is older
than the word "stop record" and stays: the Role grants access to it by name, and a new manager
reads the record an older one wrote."""

KEY: Final = "next-checks"
WRITTEN_AT: Final = "written-at"

HORIZON: Final = 25.0
"""Seconds ahead whose checks a stopping manager makes before it goes.

The gap a restart leaves: the old process's last checks and exit (up to :data:`BUDGET`), the
pod's start (2 s in the fleet benchmark, more for an image pull), and the new manager's lists
before its first check (11-15 s at 10,000 Clusters). A Cluster due beyond it is checked by the
next manager on time. Of those due within it, the stop checks only the ones whose minute since
their last check began is over, never early (the spec's "a little later than the minute"): the
others are checked by the next manager as soon as it can, a little late, in the order they fell
due."""

BUDGET: Final = 15.0
"""Seconds a stopping manager spends on those checks before it writes the record regardless:
half of the Deployment's ``terminationGracePeriodSeconds`` (30)."""

MAX_ENTRIES: Final = 50_000
"""Clusters in one record: 600 KB, 800 KB as base64 in the ConfigMap's JSON (limit 1 MiB)."""

_ENTRY = struct.Struct(">8si")


def keys(shard: int | None = None) -> tuple[str, str]:
    """The record's two keys, ``data``'s written-at and ``binaryData``'s dues: the whole
    fleet's (None), or one shard's (``written-at.shard-3``, ``next-checks.shard-3``)."""
    if shard is None:
        return WRITTEN_AT, KEY
    return f"{WRITTEN_AT}.shard-{shard}", f"{KEY}.shard-{shard}"


_INT32 = 2**31 - 1


class RecordError(ValueError):
    """The ConfigMap is not a record this manager can read; the message says what is wrong."""


def uid_key(uid: str) -> bytes:
    """The 8 bytes that stand for a Cluster's uid in the record (a blake2b hash: uids are 36
    characters, and two of 10,000 share these 64 bits with a chance of 3e-12)."""
    return hashlib.blake2b(uid.encode(), digest_size=8).digest()


def config_map(
    dues: Iterable[tuple[str, float]],
    written_at: float,
    namespace: str,
    *,
    shard: int | None = None,
    limit: int = MAX_ENTRIES,
) -> Any:
    """The ConfigMap that records ``dues`` (uid, Unix time of the next check), written at
    ``written_at`` (Unix time), under ``shard``'s keys (:func:`keys`), at most ``limit`` of
    them. Dues not finite, or beyond a signed 32-bit count of milliseconds from ``written_at``
    (24 days), are left out: the next manager places those."""
    written_key, dues_key = keys(shard)
    kept = [
        (due, uid)
        for uid, due in dues
        if math.isfinite(due) and abs(round((due - written_at) * 1000)) <= _INT32
    ]
    if len(kept) > limit:
        kept = heapq.nsmallest(limit, kept)
    blob = b"".join(
        _ENTRY.pack(uid_key(uid), round((due - written_at) * 1000)) for due, uid in kept
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "kokumi",
                "app.kubernetes.io/part-of": "kokumi",
                "app.kubernetes.io/managed-by": "kokumi",
            },
        },
        "data": {written_key: f"{written_at:.3f}"},
        "binaryData": {dues_key: base64.b64encode(blob).decode()},
    }


def read_config_map(
    obj: Mapping[str, Any], now: float, max_age: float, *, shard: int | None = None
) -> dict[bytes, float]:
    """Each recorded Cluster's next due (Unix time), by :func:`uid_key`; empty when the record
    was written more than ``max_age`` seconds before ``now``: a manager that stopped that long
    ago missed every due it holds, and checking the whole fleet at once would be a herd where
    the places spread it. ``shard``: that shard's record, empty when the ConfigMap has none (a
    shard that never moved on a stop). Raises :class:`RecordError` for a ConfigMap that is not
    a record."""
    written_key, dues_key = keys(shard)
    data = obj.get("data")
    binary = obj.get("binaryData")
    if shard is not None and not (isinstance(data, Mapping) and written_key in data):
        return {}
    if not isinstance(data, Mapping) or not isinstance(binary, Mapping):
        raise RecordError(f"it has no data.{written_key} and binaryData.{dues_key}")
    try:
        written_at = float(data[written_key])
    except (KeyError, TypeError, ValueError):
        raise RecordError(f"data.{written_key} is not a Unix time in seconds") from None
    if not math.isfinite(written_at):
        raise RecordError(f"data.{written_key} is not a Unix time in seconds")
    encoded = binary.get(dues_key)
    if not isinstance(encoded, str):
        raise RecordError(f"binaryData.{dues_key} is missing")
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RecordError(f"binaryData.{dues_key} is not base64") from None
    if len(blob) % _ENTRY.size or len(blob) > MAX_ENTRIES * _ENTRY.size:
        raise RecordError(
            f"binaryData.{dues_key} is {len(blob)} bytes: not a whole number of"
            f" {_ENTRY.size}-byte entries, at most {MAX_ENTRIES}"
        )
    if abs(now - written_at) > max_age:  # a node's clock a little ahead is no reason
        return {}
    return {key: written_at + ms / 1000 for key, ms in _ENTRY.iter_unpack(blob)}
