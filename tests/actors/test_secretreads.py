"""The manager's Secret reads on the in-process API fake: a burst of reads in one namespace is one
list, a refused or failed list leaves each read to its own GET, and nothing is lost either way.

The fake answers a list in one page whatever the limit; pages of a real hub are in
``tests/kube/test_client.py``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import httpx
import pytest
import trio
import trio.testing

from kokumi.actors.secretreads import SecretReads
from kokumi.kube import errors
from kokumi.kube.client import Client, Obj
from kokumi.kube.config import Config
from tests.support.fakeapi import Call, FakeApi

NS = "team"


def _secret(fake: FakeApi, name: str, namespace: str = NS, value: str | None = None) -> None:
    text = f"kubeconfig of {name}" if value is None else value
    value = base64.b64encode(text.encode()).decode()
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


async def _read_twice(fake: FakeApi, names: list[str]) -> SecretReads:
    """Two bursts of reads of ``names`` on a busy hub, each read given its own Secret."""
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
    return reads


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


@pytest.mark.parametrize("gather", [0.1, 0.0], ids=["gathered", "not gathered"])
async def test_a_burst_spread_over_steps_of_the_loop_is_one_list(
    fake: FakeApi, autojump_clock: trio.testing.MockClock, gather: float
) -> None:
    """A restart's actors read in one instant but over many steps of the loop (each has its own
    awaits before its read): the reads of later steps than the list's first join it, and none
    waits for a second list. Without the gathering (``gather=0``) how many join was the loop's
    order: a second list, or GETs, in about one run in thirteen of a restart test."""
    names = _secrets(fake, 200)
    gets = _count(fake, "get")
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client, gather=gather)
        got: dict[str, Obj] = {}

        async def one(name: str, steps: int) -> None:
            for _ in range(steps):
                await trio.lowlevel.checkpoint()
            got[name] = await reads.get(NS, name)

        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            async with trio.open_nursery() as burst:
                for index, name in enumerate(names):
                    burst.start_soon(one, name, index // 10)  # 10 reads a step, 20 steps
            nursery.cancel_scope.cancel()
    assert {n: _data(s) for n, s in got.items()} == {n: f"kubeconfig of {n}" for n in names}
    assert gets() + reads.listed == 200
    # GETs: only the reads that came before the list began (eight in flight, 31 queued).
    if gather:
        assert (reads.lists, gets() <= 8 + 31) == (1, True), (reads.lists, gets())
    else:  # the case the gathering mends, kept to show that the test can tell
        assert reads.lists == 2 or gets() > 8 + 31, (reads.lists, gets())


async def test_a_refused_list_leaves_each_read_to_its_own_get_and_is_not_tried_again_at_once(
    fake: FakeApi, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kokumi.actors.secretreads")
    names = _secrets(fake, 100)
    fake.fail(403, verb="list", resource="secrets", times=None)
    gets = _count(fake, "get")
    reads = await _read_twice(fake, names)
    assert gets() == 200
    assert reads.lists == 1  # the second burst, within five minutes, did not list again
    refusals = [r for r in caplog.records if "may not list Secrets" in r.getMessage()]
    assert len(refusals) == 1


class _SlowAnswers(httpx.AsyncBaseTransport):
    """A hub whose lists take their snapshot at once and a second to arrive, as a real hub's
    pages of a big namespace do (the fake's own delays come before it reads its store)."""

    def __init__(self, fake: FakeApi) -> None:
        self.fake = fake

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.fake.handle_async_request(request)
        if request.method == "GET" and request.url.path.endswith("/secrets"):
            await trio.sleep(1.0)
        return response


async def test_a_read_that_comes_while_a_list_runs_is_never_served_older_data(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    """A Secret changes while a list of its namespace is on its way, and a read of it comes
    after the change (the watch told its Cluster, which reads again): the list's snapshot is
    older than the read, so the read waits for the next list, as do the others that came
    meanwhile, and gets the Secret as it is now."""
    names = _secrets(fake, 40)
    gets = _count(fake, "get")
    async with Client(
        Config(server="https://hub.example:6443"), transport=_SlowAnswers(fake)
    ) as client:
        reads = SecretReads(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            early: dict[str, Obj | Exception] = {}
            late: dict[str, Obj | Exception] = {}

            async def first() -> None:
                early.update(await _read_all(reads, names))

            nursery.start_soon(first)
            await trio.sleep(0.5)  # the list is on its way
            _secret(fake, "c000", value="the new kubeconfig")
            late.update(await _read_all(reads, names))
            await trio.sleep(2.0)
            nursery.cancel_scope.cancel()
    assert _data(late["c000"]) == "the new kubeconfig"  # type: ignore[arg-type]
    assert reads.lists == 2
    # Only reads of the first burst were GETs (those queued before the first list began): the
    # second burst waited for the second list, all 40 of it.
    assert gets() + reads.listed == 80
    assert gets() < 40


async def test_secrets_too_big_to_list_are_read_one_by_one(
    fake: FakeApi, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A namespace's author keeps a few Secrets of a megabyte each beside the kubeconfigs: a
    page of them is over the byte cap, so the list ends there, without holding the page, and
    every read is a GET; the namespace is not listed again for five minutes, and says so once."""
    caplog.set_level(logging.INFO, logger="kokumi.actors.secretreads")
    names = _secrets(fake, 100)
    blob = base64.b64encode(b"\0" * 1_000_000).decode()
    for i in range(8):
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"big-{i}", "namespace": NS},
                "data": {"blob": blob},
            }
        )
    gets = _count(fake, "get")
    reads = await _read_twice(fake, names)
    assert reads.lists == 1 and reads.listed == 0
    assert gets() == 200
    said = [r.getMessage() for r in caplog.records if "is over" in r.getMessage()]
    assert said == [
        f"a page of Secrets in namespace {NS} is over 4194304 bytes; its kubeconfigs are read"
        " one by one"
    ]


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
