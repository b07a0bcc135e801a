"""A Cluster's shard is a stable hash of its name; each replica tries the shards its own way."""

from __future__ import annotations

import collections
import hashlib
import itertools
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.shards import Sharding, lease_name, preference, shard_of

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63)
counts = st.integers(min_value=1, max_value=64)


def _reference(namespace: str, name: str, shards: int) -> int:
    """The documented rule, written out separately: first 16 hex digits of the SHA-256."""
    return int(hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:16], 16) % shards


@given(names, names, counts)
def test_the_shard_is_the_documented_hash_and_in_range(namespace: str, name: str, n: int) -> None:
    shard = shard_of(namespace, name, n)
    assert 0 <= shard < n
    assert shard == _reference(namespace, name, n)
    assert shard == shard_of(namespace, name, n), "the same name always maps to the same shard"


def test_the_shard_is_the_same_in_another_process_with_another_hash_seed() -> None:
    """Python's own hash() is salted per process; the shard must not be."""
    keys = [(f"team-{i}", f"cluster-{i * 7}") for i in range(50)]
    here = [shard_of(ns, name, 7) for ns, name in keys]
    code = (
        "from kokumi.core.shards import shard_of\n"
        f"print([shard_of(ns, n, 7) for ns, n in {keys!r}])"
    )
    for seed in ("1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.strip() == repr(here)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_clusters_spread_evenly_over_the_shards(n: int) -> None:
    """10,000 Clusters named as a fleet would be: no shard more than 10 % off its share."""
    total = 10_000
    spread = collections.Counter(
        shard_of(f"team-{i % 40}", f"edge-{i:05d}", n) for i in range(total)
    )
    assert set(spread) == set(range(n))
    share = total / n
    assert all(abs(count - share) < share * 0.10 for count in spread.values()), spread


@given(names, names, st.integers(min_value=2, max_value=16))
def test_a_name_differing_by_namespace_alone_may_land_elsewhere(
    namespace: str, name: str, n: int
) -> None:
    """namespace/name, not name alone: "a-b"/"c" and "a"/"b-c" are different Clusters."""
    assert shard_of(namespace, name, n) == _reference(namespace, name, n)
    assert shard_of(name, namespace, n) == _reference(name, namespace, n)


@given(st.text(min_size=1, max_size=40), counts)
def test_each_replica_tries_every_shard_once_starting_at_its_own(identity: str, n: int) -> None:
    order = preference(identity, n)
    assert sorted(order) == list(range(n))
    digest = int(hashlib.sha256(identity.encode()).hexdigest()[:16], 16)
    assert order[0] == digest % n
    assert all(b == (a + 1) % n for a, b in itertools.pairwise(order))


def test_replicas_start_at_different_shards() -> None:
    firsts = {preference(f"kokumi-7d9f-{i}_{i * 31:08x}", 8)[0] for i in range(40)}
    assert len(firsts) >= 6, "identities spread their first choice over the shards"


def test_lease_names_and_limits() -> None:
    assert [lease_name(i) for i in range(3)] == [
        "kokumi-clusters-shard-0",
        "kokumi-clusters-shard-1",
        "kokumi-clusters-shard-2",
    ]
    assert Sharding("a", 4).limit == 4
    assert Sharding("a", 4, max_shards=2).limit == 2
    assert Sharding("a", 4, max_shards=9).limit == 4
    with pytest.raises(ValueError, match="--shards must be 1 or more"):
        Sharding("a", 0)
    with pytest.raises(ValueError, match="--max-shards must be 1 or more"):
        Sharding("a", 2, max_shards=0)
    with pytest.raises(ValueError, match="at least one shard"):
        shard_of("a", "b", 0)
