"""The manager's Secret reads on the in-process API fake: a burst of reads in one namespace is one
list, a refused or failed list leaves each read to its own GET, and nothing is lost either way.

The fake answers a list in one page whatever the limit; pages of a real hub are in
``tests/kube/test_client.py``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing

from kokumi.actors.secretreads import SecretReads
from kokumi.kube import errors
from kokumi.kube.client import Client, Obj
from kokumi.kube.config import Config
from tests.support.fakeapi import Call, FakeApi

NS = "team"


def _secret(fake: FakeApi, name: str, namespace: str = NS) -> None:
    value = base64.b64encode(f"kubeconfig of {name}".encode()).decode()
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"value": value},
        }
    )


def _secrets(fake: FakeApi, count: int) -> list[str]:
    names = [f"c{i:03}" for i in range(count)]
    for name in names:
        _secret(fake, name)
    return names


def _count(fake: FakeApi, verb: str) -> Callable[[], int]:
    """How many requests of ``verb`` on Secrets the fake has seen from now on."""
    seen: list[Call] = []

    def record(call: Call) -> bool:
        seen.append(call)
        return False  # matches nothing: the request goes through untouched

    fake.delay(0.0, verb=verb, resource="secrets", when=record)
    return lambda: len(seen)


def _data(secret: Obj) -> str:
    return base64.b64decode(secret["data"]["value"]).decode()


async def _read_all(
    reads: SecretReads, names: list[str], namespace: str = NS
) -> dict[str, Obj | Exception]:
    got: dict[str, Obj | Exception] = {}

    async def one(name: str) -> None:
        try:
            got[name] = await reads.get(namespace, name)
        except errors.KubeError as exc:
            got[name] = exc

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    return got


@pytest.fixture
def fake() -> FakeApi:
    fake = FakeApi()
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return fake


async def test_a_burst_of_reads_in_one_namespace_is_one_list(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    names = _secrets(fake, 300)
    _secret(fake, "unrelated")
    gets, lists = _count(fake, "get"), _count(fake, "list")
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")  # a busy hub: GETs queue up
            got = await _read_all(reads, [*names, "missing"])
            nursery.cancel_scope.cancel()
    assert {n: _data(s) for n, s in got.items() if not isinstance(s, Exception)} == {
        n: f"kubeconfig of {n}" for n in names
    }
    # The one that is not there is what a GET of it says: NotFound, as the actor reports it.
    assert isinstance(got["missing"], errors.NotFound)
    assert lists() == 1
    # Reads already queued for the eight GETs when the burst began stay GETs; the rest (and the
    # missing one, after the list) are served by the list.
    assert reads.listed == 300 - gets() + 1
    assert gets() <= 32 + 1
    assert reads.lists == 1


async def test_a_refused_list_leaves_each_read_to_its_own_get_and_is_not_tried_again_at_once(
    fake: FakeApi, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kokumi.actors.secretreads")
    names = _secrets(fake, 100)
    fake.fail(403, verb="list", resource="secrets", times=None)
    gets = _count(fake, "get")
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            first = await _read_all(reads, names)
            second = await _read_all(reads, names)
            nursery.cancel_scope.cancel()
    for got in (first, second):
        assert {n: _data(s) for n, s in got.items() if not isinstance(s, Exception)} == {
            n: f"kubeconfig of {n}" for n in names
        }
    assert gets() == 200
    assert reads.lists == 1  # the second burst, within five minutes, did not list again
    refusals = [r for r in caplog.records if "may not list Secrets" in r.getMessage()]
    assert len(refusals) == 1


async def test_a_list_that_fails_midway_leaves_nothing_unread(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    names = _secrets(fake, 100)
    fake.fail(500, verb="list", resource="secrets")
    async with Client(
        Config(server="https://hub.example:6443"), transport=fake, max_retries=0
    ) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            got = await _read_all(reads, names)
            nursery.cancel_scope.cancel()
    assert {n: _data(s) for n, s in got.items() if not isinstance(s, Exception)} == {
        n: f"kubeconfig of {n}" for n in names
    }
    assert reads.lists == 1
    assert reads.listed == 0


async def test_a_read_cancelled_while_it_waits_for_the_list_is_forgotten(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    names = _secrets(fake, 64)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            fake.delay(5.0, verb="list", resource="secrets")
            with trio.move_on_after(1.0):
                await _read_all(reads, names)
            # Every read was cancelled before the list came back: none is left waiting in it.
            listing = reads._listings.get(NS)
            assert listing is not None and listing.waiters == {}
            got = await _read_all(reads, names[-8:])
            nursery.cancel_scope.cancel()
    assert sorted(got) == names[-8:]
    assert all(not isinstance(s, Exception) for s in got.values())


async def test_other_namespaces_and_small_bursts_are_gets(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    for i in range(20):
        _secret(fake, f"c{i}")
        _secret(fake, f"c{i}", namespace="other")
    lists = _count(fake, "list")
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            async with trio.open_nursery() as both:
                both.start_soon(_read_all, reads, [f"c{i}" for i in range(20)])
                both.start_soon(_read_all, reads, [f"c{i}" for i in range(20)], "other")
            nursery.cancel_scope.cancel()
    # 40 reads in all, but never 32 of one namespace waiting at once.
    assert lists() == 0
