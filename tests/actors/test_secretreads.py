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
from hypothesis import given
from hypothesis import strategies as st

from kokumi.actors.secretreads import SecretReads, SecretVersions
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from kokumi.kube.wire import Obj
from kokumi.objects import resource_version
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


def _texts(got: dict[str, Obj | Exception]) -> dict[str, object]:
    """Each read's kubeconfig text, or what it raised."""
    return {n: s if isinstance(s, Exception) else _data(s) for n, s in got.items()}


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


def _burst(
    nursery: trio.Nursery, reads: SecretReads, names: list[str]
) -> dict[str, Obj | Exception]:
    """Reads of every name, started in ``nursery``: the dict fills as they end."""
    got: dict[str, Obj | Exception] = {}

    async def all_of() -> None:
        got.update(await _read_all(reads, names))

    nursery.start_soon(all_of)
    return got


def _versions(fake: FakeApi, names: list[str], namespace: str = NS) -> SecretVersions:
    """The Secrets' resourceVersions, as the Secret watch would hold them."""
    return SecretVersions(
        ((namespace, n), str(resource_version(fake.object(SECRETS, n, namespace) or {})))
        for n in names
    )


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

    def __init__(self, fake: FakeApi, lag: float = 1.0) -> None:
        self.fake = fake
        self.lag = lag

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.fake.handle_async_request(request)
        if request.method == "GET" and request.url.path.endswith("/secrets"):
            await trio.sleep(self.lag)
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


async def test_a_late_read_is_served_by_the_running_list_the_version_the_watch_holds(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    """As above, but the Secret watch's versions are known (as after its first list): the
    reads that come while the list's one page is on its way are served by that list when the
    page holds the version the watch holds as it arrives; c000, changed after the snapshot
    (the watch told its new version), is read by GET and gets the new kubeconfig. Reads that
    come after the page went by wait for the next list, as before."""
    names = _secrets(fake, 100)
    versions = _versions(fake, names)
    gets = _count(fake, "get")
    async with Client(
        Config(server="https://hub.example:6443"), transport=_SlowAnswers(fake, lag=5.0)
    ) as client:
        reads = SecretReads(client, versions=versions)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            early = _burst(nursery, reads, names)
            await trio.sleep(4.0)  # the list is on its way; the GETs of the first burst are done
            assert len(early) < 100
            _secret(fake, "c000", value="the new kubeconfig")
            versions.update(_versions(fake, ["c000"]))
            before = gets()
            late = await _read_all(reads, names)
            assert (reads.lists, gets() - before) == (1, 1)  # the one changed since
            assert reads.listed == 100 - before + 99
            # The page went by: these are served by the next list (or their GETs), never by
            # the one whose snapshot is older than they are.
            _secret(fake, "c001", value="newer still")
            versions.update(_versions(fake, ["c001"]))
            after = await _read_all(reads, names)
            nursery.cancel_scope.cancel()
    assert _texts(late) == {
        **{n: f"kubeconfig of {n}" for n in names},
        "c000": "the new kubeconfig",
    }
    assert _texts(after)["c001"] == "newer still"
    assert reads.lists == 2


class _PagedAnswers(httpx.AsyncBaseTransport):
    """A hub that pages its lists as a real one does: the first page's request takes the
    snapshot that every page of the list is cut from (the fake answers in one page), and each
    page takes ``lag`` seconds to arrive."""

    def __init__(self, fake: FakeApi, lag: float) -> None:
        self.fake, self.lag = fake, lag
        self._snapshots: dict[str, list[Obj]] = {}
        self.pages = 0  # pages answered

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not (request.method == "GET" and request.url.path.endswith("/secrets")):
            return await self.fake.handle_async_request(request)
        limit = int(request.url.params.get("limit", "0")) or 10**9
        snapshot, _, at = request.url.params.get("continue", "").partition(":")
        if not snapshot:
            whole = await self.fake.handle_async_request(httpx.Request("GET", request.url.path))
            await whole.aread()
            snapshot = str(len(self._snapshots))
            self._snapshots[snapshot] = whole.json()["items"]
        start = int(at or 0)
        items = self._snapshots[snapshot][start : start + limit]
        more = start + limit < len(self._snapshots[snapshot])
        self.pages += 1
        await trio.sleep(self.lag)
        body = {
            "kind": "SecretList",
            "metadata": {"continue": f"{snapshot}:{start + limit}" if more else ""},
        }
        return httpx.Response(200, json={**body, "items": items})


@pytest.mark.parametrize("watch_lists", ["before", "while the list runs"])
async def test_late_reads_are_served_by_the_pages_still_to_come_and_the_rest_by_the_next_list(
    fake: FakeApi, autojump_clock: trio.testing.MockClock, watch_lists: str
) -> None:
    """A list of 300 Secrets in pages of 100, and every Secret read again after its first page
    went by: the reads of the pages still to come are served by it as they arrive, since the
    Secret watch holds those very versions (it listed before, or while the list ran, as after
    a restart), and those of the first page wait for the next list. No read is a GET but the
    first burst's before the list began, and every read is given its Secret."""
    names = _secrets(fake, 300)
    current = _versions(fake, names)
    versions = SecretVersions(current.items() if watch_lists == "before" else ())
    gets = _count(fake, "get")
    served_at: dict[str, float] = {}

    async def again(reads: SecretReads, name: str) -> None:
        secret = await reads.get(NS, name)
        assert _data(secret) == f"kubeconfig of {name}"
        served_at[name] = trio.current_time()

    async with Client(
        Config(server="https://hub.example:6443"), transport=_PagedAnswers(fake, lag=1.0)
    ) as client:
        reads = SecretReads(client, versions=versions)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.2, verb="get", resource="secrets")
            early = _burst(nursery, reads, names)
            await trio.sleep(1.5)  # the first page went by (at 1.1 s), the second is on its way
            before = gets()
            async with trio.open_nursery() as late:
                for name in names:
                    late.start_soon(again, reads, name)
                await trio.sleep(0.2)
                versions.update(current)  # the watch has listed (if it had not)
            nursery.cancel_scope.cancel()
    assert _texts(early) == {n: f"kubeconfig of {n}" for n in names}
    assert gets() == before  # the late ones: none a GET
    assert reads.lists == 2
    assert reads.listed == 600 - before
    # The first list's pages 2 and 3 came at 2.1 and 3.1 s; the next list's first at 4.2 s.
    assert max(served_at[n] for n in names[100:]) < 3.5
    assert min(served_at[n] for n in names[:100]) > 4.0


async def test_the_reads_a_list_left_get_the_next_list_which_ends_once_it_served_them(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    """40 reads of the first page's Secrets come after it went by, in a namespace of 1,000
    Secrets: too few to list again by the share (1,000 / 16), but they have waited a whole list
    already, and eight GETs at a time are slower than a list, so the next list serves them,
    and it ends after its first page, which held them all."""
    names = _secrets(fake, 1000)
    gets = _count(fake, "get")
    hub = _PagedAnswers(fake, lag=1.0)
    served_at: dict[str, float] = {}

    async def again(reads: SecretReads, name: str) -> None:
        assert _data(await reads.get(NS, name)) == f"kubeconfig of {name}"
        served_at[name] = trio.current_time()

    async with Client(Config(server="https://hub.example:6443"), transport=hub) as client:
        reads = SecretReads(client, versions=_versions(fake, names))
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.2, verb="get", resource="secrets")
            early = _burst(nursery, reads, names)
            await trio.sleep(1.5)  # the first page (c000-c099) went by at 1.1 s
            before = gets()
            async with trio.open_nursery() as late:
                for name in names[:40]:
                    late.start_soon(again, reads, name)
            nursery.cancel_scope.cancel()
    assert _texts(early) == {n: f"kubeconfig of {n}" for n in names}
    assert gets() == before
    assert reads.lists == 2
    assert hub.pages == 10 + 1
    # The first list's ten pages end at 10.1 s; the next one's first page comes 1.1 s later.
    assert 11.0 < min(served_at.values()) <= max(served_at.values()) < 11.5


async def test_a_burst_under_a_share_of_what_the_watch_holds_is_gets(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    """40 reads wait together in a namespace of 1,000 Secrets that the Secret watch holds: a
    list would walk all 1,000 for them (ten pages of the hub's JSON), so they are GETs. Before,
    only the sizes seen by earlier lists counted, and a namespace never listed was listed for
    any 32 reads."""
    names = _secrets(fake, 1000)
    gets, lists = _count(fake, "get"), _count(fake, "list")
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        reads = SecretReads(client, versions=_versions(fake, names))
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            got = await _read_all(reads, names[:40])
            nursery.cancel_scope.cancel()
    assert _texts(got) == {n: f"kubeconfig of {n}" for n in names[:40]}
    assert (lists(), reads.lists, gets()) == (0, 0, 40)


async def test_reads_of_secrets_created_while_lists_run_make_one_follow_up_list_not_a_chain(
    fake: FakeApi, autojump_clock: trio.testing.MockClock
) -> None:
    """Onboarding: a burst of 200 reads lists a namespace of 1,000 Secrets (ten pages, a second
    each) while new Clusters keep coming, four a second, each reading a Secret younger than the
    list's snapshot. Those reads wait for the next list, which serves them; the reads that come
    while that one runs are as many again, under a sixteenth of the namespace, and are GETs.
    Before, each list's leftovers started the next list, whatever their share, and onboarding
    10,000 Clusters made 1,969 lists of the whole namespace, each walking it to its newest."""
    names = _secrets(fake, 1000)
    versions = _versions(fake, names)
    hub = _PagedAnswers(fake, lag=1.0)
    made: list[str] = []

    async def new_cluster(reads: SecretReads, name: str) -> None:
        _secret(fake, name)
        versions.update(_versions(fake, [name]))  # the watch hears of it
        assert _data(await reads.get(NS, name)) == f"kubeconfig of {name}"
        made.append(name)

    async with Client(Config(server="https://hub.example:6443"), transport=hub) as client:
        reads = SecretReads(client, versions=versions)
        async with trio.open_nursery() as nursery:
            await nursery.start(reads.run)
            fake.delay(0.5, verb="get", resource="secrets")
            early = _burst(nursery, reads, names[:200])
            await trio.sleep(0.5)
            async with trio.open_nursery() as onboarding:
                for i in range(160):  # 40 s, four a second
                    onboarding.start_soon(new_cluster, reads, f"n{i:03}")
                    await trio.sleep(0.25)
            nursery.cancel_scope.cancel()
    assert _texts(early) == {n: f"kubeconfig of {n}" for n in names[:200]}
    assert len(made) == 160
    # The first list's ten pages, and the next one's eleven (the new Secrets are its last).
    assert (reads.lists, hub.pages) == (2, 21), (reads.lists, hub.pages)


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


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "del", "pop", "update"]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["s1", "s2", "s3", "s4"]),
            st.sampled_from(["1", "2"]),
        ),
        max_size=60,
    )
)
def test_the_versions_count_each_namespace_as_keys_come_and_go(
    steps: list[tuple[str, str, str, str]],
) -> None:
    """The count the reads weigh a list with is the number of keys of the namespace, whichever
    way the watches add and drop them (``[]=``, ``del``, ``pop``, ``update``)."""
    versions, model = SecretVersions(), dict[tuple[str, str], str]()
    for verb, namespace, name, version in steps:
        key = (namespace, name)
        if verb == "set":
            versions[key] = model[key] = version
        elif verb == "del" and key in model:
            del versions[key], model[key]
        elif verb == "pop":
            assert versions.pop(key, None) == model.pop(key, None)
        elif verb == "update":
            versions.update({key: version, (namespace, "s0"): version})
            model.update({key: version, (namespace, "s0"): version})
        assert dict(versions) == model
        for ns in ("a", "b", "c"):
            assert versions.in_namespace(ns) == sum(1 for k in model if k[0] == ns)
