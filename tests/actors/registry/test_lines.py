"""A server's waiting line across replicas is right after the event that changes it.

With shards, the line on a server's Secret is shared by Clusters that different replicas serve,
and each replica may take only its own Clusters out of it. Found by the two-replica model test:
a Cluster recorded as waiting behind another replica's holder let go (or was deleted while its
shard moved) and stayed in the line for good, because nothing made its own replica write that
server's Secret: the line was put right, if ever, only at the holder's next claim. These run
the registry alone on the in-process API fake, with the shards it serves set by the test, so
each case is the same every run. The last one holds the registry's own writes to the fence
every other write of a shard goes through.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from kokumi.actors.registry import Registry
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd, handover
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from tests.support.fakeapi import FakeApi

SERVER = "https://s2.example:6443"
HOLDER = ClusterRef("ws1", "b")
WAITER = ClusterRef("ws2", "c")
OTHER = ClusterRef("ws2", "d")


def _fake(waiting: tuple[ClusterRef, ...]) -> FakeApi:
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "ws1", "ws2"))
    secret = argocd.cluster_secret(Connection(SERVER, token="t"), HOLDER, "argocd")
    fake.put(handover.with_waiting(secret, waiting))
    return fake


def _line(fake: FakeApi) -> tuple[ClusterRef, ...]:
    found = fake.object(SECRETS, argocd.secret_name(SERVER), "argocd")
    assert found is not None and argocd.holder_of(found) == HOLDER, found
    return handover.waiting_of(found)


@asynccontextmanager
async def _registry(
    fake: FakeApi, served: set[ClusterRef], exists: Callable[[ClusterRef], bool]
) -> AsyncIterator[Registry]:
    """As the dispatcher serves a shard: the registry reshards, then prunes the Clusters that
    no longer exist."""
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        registry = Registry(client, "argocd")
        registry.follow_liveness(lambda _ref, _uid: True, exists)
        registry.follow_shards(lambda ref: math.inf if ref in served else None)
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            await registry.reshard()
            await registry.prune([c for c in (HOLDER, WAITER, OTHER) if exists(c)])
            yield registry
            nursery.cancel_scope.cancel()


async def test_a_waiter_that_lets_go_leaves_a_line_another_replica_holds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The holder is another replica's; the waiter's release writes the line at once."""
    fake = _fake((WAITER, OTHER))
    async with _registry(fake, {WAITER}, lambda _ref: True) as registry:
        assert _line(fake) == (WAITER, OTHER)
        await registry.release(WAITER, "uid-c")
        # The other replica's waiter keeps its place; only the one that let go leaves.
        assert _line(fake) == (OTHER,)
        assert registry.out_of_step() == frozenset()


async def test_a_waiter_that_wants_another_server_leaves_the_old_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = _fake((WAITER,))
    async with _registry(fake, {WAITER}, lambda _ref: True) as registry:
        await registry.want(WAITER, "uid-c", Connection("https://s0.example:6443", token="t"))
        assert _line(fake) == ()
        # ... and holds the server it wants now (free, so it is created for it).
        other = fake.object(SECRETS, argocd.secret_name("https://s0.example:6443"), "argocd")
        assert other is not None and argocd.holder_of(other) == WAITER


async def test_a_waiter_deleted_while_its_shard_moved_leaves_the_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nobody served the waiter when it was deleted (no finalizer holds a waiter): the replica
    that takes its shard takes it out of the line, whoever serves the holder."""
    for served in ({WAITER}, {WAITER, HOLDER}):
        fake = _fake((WAITER, OTHER))
        async with _registry(fake, served, lambda ref: ref != WAITER):
            assert _line(fake) == (OTHER,), served


async def test_a_waiter_whose_actor_has_not_spoken_keeps_its_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The other side of the rule above: a shard just taken, its Cluster alive and silent yet,
    keeps its place (its actor says what it wants in a moment); nothing is written."""
    fake = _fake((WAITER, OTHER))
    before = fake.object(SECRETS, argocd.secret_name(SERVER), "argocd")
    assert before is not None
    async with _registry(fake, {WAITER}, lambda _ref: True):
        after = fake.object(SECRETS, argocd.secret_name(SERVER), "argocd")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_registry_write_that_waited_while_its_shard_went_is_not_sent(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The registry's own writes of Argo CD Secrets are fenced at the send, as every other
    write of a shard is: a create that waited for the only request slot while the Cluster's
    shard went is never sent, nothing is logged for it, and it is made once the shard is back."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "ws1", "ws2"))
    served = {WAITER}
    secret_name = argocd.secret_name(SERVER)
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0, max_requests=1
    ) as client:
        registry = Registry(client, "argocd", backoff_initial=1.0, backoff_max=1.0)
        registry.follow_shards(lambda ref: math.inf if ref in served else None)
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            await client._requests.acquire()
            nursery.start_soon(registry.want, WAITER, "uid-c", Connection(SERVER, token="t"))
            await trio.testing.wait_all_tasks_blocked()
            served.clear()  # the shard's Lease is gone while the create waits for its slot
            client._requests.release()
            await trio.testing.wait_all_tasks_blocked()
            assert fake.object(SECRETS, secret_name, "argocd") is None
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            served.add(WAITER)  # back: the retry makes it
            await trio.sleep(5)
            made = fake.object(SECRETS, secret_name, "argocd")
            assert made is not None and argocd.holder_of(made) == WAITER
            nursery.cancel_scope.cancel()


async def test_a_holder_that_lets_go_never_hands_over_to_a_deleted_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first waiter, another replica's, was deleted (no finalizer holds a waiter): it is
    passed over, and with nobody else waiting the Secret goes, rather than being handed to a
    Cluster that no replica will ever let go of."""
    fake = _fake((WAITER,))
    async with _registry(fake, {HOLDER}, lambda ref: ref != WAITER) as registry:
        await registry.release(HOLDER, "uid-b")
        assert fake.object(SECRETS, argocd.secret_name(SERVER), "argocd") is None


async def test_a_secret_handed_to_a_deleted_cluster_is_passed_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The other side: a Secret already names a deleted Cluster of this replica's (handed to
    it by a replica that did not know): the replica taking the shard passes it on to the next
    in line, here another replica's waiter, and it never stays registered for nobody."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "ws1", "ws2"))
    async with _registry(fake, {WAITER}, lambda ref: ref != WAITER):
        # Handed over by the other replica after this one took the shard: the watch brings it.
        secret = argocd.cluster_secret(Connection(SERVER, token="t"), WAITER, "argocd")
        fake.put(handover.with_waiting(secret, (OTHER,)))
        await trio.sleep(1)
        found = fake.object(SECRETS, argocd.secret_name(SERVER), "argocd")
        assert found is not None and argocd.holder_of(found) == OTHER, found


async def test_a_stray_that_declares_a_server_held_elsewhere_goes_and_the_server_stays_held(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A Secret of Kokumi's named after no server (a move cut short by hand) that declares the
    server another replica's Cluster holds, deleted by the other replica's restart: the server
    stays held. Found by the two-replica model test (issue 33's example 2): forgetting the stray
    made the table forget the server's own Secret, so when this replica took the holder's shard
    it never adopted that Secret (and when the holder let go, nothing deleted it). Here a
    Cluster of this replica's then wants the server: it must wait behind the holder, not take
    the holder's registration over."""
    fake = _fake(())
    stray = "kokumi-stray-0"
    served = {WAITER}
    async with _registry(fake, served, lambda _ref: True) as registry:
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": stray,
                    "namespace": "argocd",
                    "labels": {
                        argocd.LABEL_SECRET_TYPE: "cluster",
                        argocd.LABEL_MANAGED_BY: argocd.MANAGED_BY,
                    },
                },
                "data": {"server": base64.b64encode(SERVER.encode()).decode()},
            }
        )
        await trio.sleep(1)
        fake.remove(SECRETS, stray, "argocd")  # by the other replica, as its restart does
        await trio.sleep(1)
        served.add(HOLDER)  # the holder's shard comes here; its actor has not spoken yet
        await registry.reshard()
        await registry.want(WAITER, "uid-c", Connection(SERVER, token="t"))
        assert _line(fake) == (WAITER,)


async def test_a_retry_due_while_a_renewal_is_late_is_kept_for_the_claim(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A shard's Lease renewed late: for a moment the replica still leads but is past its renew
    deadline, so it may write for none of the shard's Clusters. A retry of the holder's create
    that came due then was dropped as if another replica served the holder; the renewal went
    through (no shard changed hands, so no reshard), and the holder's next claim, the same as
    the last, was skipped as one on a server in step. The server was never registered. The
    retry now waits for the renewal while the Clusters it acts for still claim here."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "ws1", "ws2"))
    served = {WAITER}
    connection = Connection(SERVER, token="t")
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        registry = Registry(client, "argocd", backoff_initial=1.0, backoff_max=1.0)
        registry.follow_shards(lambda ref: math.inf if ref in served else None)
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            fake.fail(500, verb="create", namespace="argocd")
            await registry.want(WAITER, "uid-c", connection)
            assert registry.out_of_step() == {argocd.normalise_server(SERVER)}
            served.clear()  # past the renew deadline while the retry comes due
            await trio.sleep(3)
            served.add(WAITER)  # the renewal went through: the same shard, no reshard
            await registry.want(WAITER, "uid-c", connection)  # the next check's claim
            await trio.sleep(5)
            made = fake.object(SECRETS, argocd.secret_name(SERVER), "argocd")
            assert made is not None and argocd.holder_of(made) == WAITER
            assert registry.out_of_step() == frozenset()
            nursery.cancel_scope.cancel()


async def test_a_move_cut_short_is_finished_when_its_shard_comes_here(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The holder moved from one server to another and the old Secret's delete was cut; this
    replica started meanwhile, without the holder's shard, so both Secrets are held elsewhere
    in its table. When the shard comes, the newest Secret is where the holder stands; the
    older one, passed over before (seed 6023 of the two-replica model test), is deleted: Argo
    CD must not keep a cluster the holder let go of."""
    old, new = "https://s0.example:6443", SERVER
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", "ws1", "ws2"))
    fake.put(argocd.cluster_secret(Connection(old, token="t"), HOLDER, "argocd"))
    fake.put(argocd.cluster_secret(Connection(new, token="t"), HOLDER, "argocd"))
    served: set[ClusterRef] = set()
    async with _registry(fake, served, lambda _ref: True) as registry:
        assert fake.object(SECRETS, argocd.secret_name(old), "argocd") is not None
        served.add(HOLDER)
        await registry.reshard()
        await trio.sleep(1)
        assert fake.object(SECRETS, argocd.secret_name(old), "argocd") is None
        assert _line(fake) == ()  # the newest stays, naming the holder
        assert registry.out_of_step() == frozenset()
