"""The fake API server's fault injection, bookkeeping and watch machinery, with no real server.

What the fake shares with the real apiserver is pinned by ``tests/support/test_contract.py``;
these tests cover what only the fake has: faults on command, the write log, and watch streams
that a test can drop, stall, expire or cut, all in Trio time (most run under an autojump
``MockClock``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from kokumi.core import api
from kokumi.core.sources.clusterapi import CAPI_CLUSTERS
from kokumi.kube import (
    CONFIG_MAPS,
    SECRETS,
    Client,
    Config,
    Conflict,
    Forbidden,
    NotFound,
    Resync,
    ServerError,
    ServiceUnavailable,
    Store,
    TooManyRequests,
    TransportError,
    WatchEvent,
    resource_path,
    watch,
)
from tests.support import fakeapi
from tests.support.fakeapi import (
    DEFAULT_KINDS,
    FakeApi,
    json_patch,
    merge_patch,
    parse_label_selector,
)

NS = "default"


@asynccontextmanager
async def connected(fake: FakeApi, **options: Any) -> AsyncIterator[Client]:
    async with Client(Config(server="https://fake.invalid"), transport=fake, **options) as client:
        yield client


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": data}


@attrs.define
class Followed:
    """What a kokumi watcher delivered: every item in order, and the store it keeps."""

    store: Store = attrs.Factory(Store)
    items: list[WatchEvent | Resync] = attrs.Factory(list)

    @property
    def resyncs(self) -> int:
        return sum(isinstance(i, Resync) for i in self.items)

    def names(self) -> set[str]:
        return {name for _, name in self.store}


@asynccontextmanager
async def following(client: Client, **options: Any) -> AsyncIterator[Followed]:
    followed = Followed()
    send, receive = trio.open_memory_channel[WatchEvent | Resync](0)

    async def consume() -> None:
        async for item in receive:
            followed.items.append(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await nursery.start(
            lambda task_status: watch(
                client,
                CONFIG_MAPS,
                send,
                namespace=NS,
                store=followed.store,
                task_status=task_status,
                **options,
            )
        )
        yield followed
        nursery.cancel_scope.cancel()


async def settle() -> None:
    """Let every task that can run, run (Trio time moves only under the autojump clock)."""
    await trio.testing.wait_all_tasks_blocked()


# --- failures ---------------------------------------------------------------------------------


async def test_fail_hits_the_next_matching_requests_only() -> None:
    fake = FakeApi()
    rule = fake.fail(500, verb="create", resource=SECRETS, times=2)
    async with connected(fake) as client:
        await client.create(CONFIG_MAPS, configmap("unaffected"), namespace=NS)
        for _ in range(2):
            with pytest.raises(ServerError) as caught:
                await client.create(SECRETS, {"metadata": {"name": "s"}}, namespace=NS)
            assert caught.value.reason == "InternalError"
            assert fake.object(SECRETS, "s", NS) is None  # a failed write did nothing
        await client.create(SECRETS, {"metadata": {"name": "s"}}, namespace=NS)
    assert rule.hits == 2
    assert fake.count("create", SECRETS, ok=False) == 2
    assert fake.count("create", SECRETS, "s") == 1
    assert fake.count("create", CONFIG_MAPS) == 1


@pytest.mark.parametrize(
    ("status", "error", "reason"),
    [
        (403, Forbidden, "Forbidden"),
        (404, NotFound, "NotFound"),
        (409, Conflict, "Conflict"),
        (503, ServiceUnavailable, "ServiceUnavailable"),
    ],
)
async def test_injected_statuses_are_real_status_bodies(
    status: int, error: type[Exception], reason: str
) -> None:
    fake = FakeApi()
    fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}})
    fake.fail(status, verb="patch", name="x")
    async with connected(fake) as client:
        with pytest.raises(error) as caught:
            await client.patch_merge(CONFIG_MAPS, "x", {"data": {"a": "b"}}, namespace=NS)
        assert getattr(caught.value, "reason", None) == reason
        assert getattr(caught.value, "code", None) == status
        patched = await client.patch_merge(CONFIG_MAPS, "x", {"data": {"a": "b"}}, namespace=NS)
    assert patched["data"] == {"a": "b"}


async def test_a_429_carries_retry_after_and_the_client_waits_it_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    fake.fail(429, retry_after=7, verb="get", times=2)
    async with connected(fake) as client:
        fake.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}}
        )
        start = trio.current_time()
        got = await client.get(CONFIG_MAPS, "x", namespace=NS)
        assert trio.current_time() - start == pytest.approx(14)
        assert got["metadata"]["name"] == "x"
        fake.fail(429, retry_after=1, verb="get", times=None)
        with pytest.raises(TooManyRequests) as caught:
            await client.get(CONFIG_MAPS, "x", namespace=NS)
        assert caught.value.retry_after == 1


async def test_a_reset_before_loses_the_request_and_after_loses_only_the_reply() -> None:
    fake = FakeApi()
    async with connected(fake) as client:
        fake.reset(verb="create")
        with pytest.raises(TransportError):
            await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        assert fake.object(CONFIG_MAPS, "a", NS) is None
        fake.reset(verb="create", after=True)
        with pytest.raises(TransportError):
            await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        assert fake.object(CONFIG_MAPS, "a", NS) is not None
        assert fake.count("create", CONFIG_MAPS, "a") == 1
        fake.reset(when=lambda call: call.path.endswith("/a"), method="DELETE")
        with pytest.raises(TransportError):
            await client.delete(CONFIG_MAPS, "a", namespace=NS)
    assert fake.count("delete", CONFIG_MAPS, "a") == 0
    assert fake.count("delete", CONFIG_MAPS, "a", ok=False) == 1


async def test_delay_holds_replies_in_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeApi()
    rule = fake.delay(5, verb="get", times=None)
    fake.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NS}})
    async with connected(fake) as client:
        start = trio.current_time()
        await client.get(CONFIG_MAPS, "x", namespace=NS)
        await client.get(CONFIG_MAPS, "x", namespace=NS)
        assert trio.current_time() - start == pytest.approx(10)
        await client.list(CONFIG_MAPS, namespace=NS)
        assert trio.current_time() - start == pytest.approx(10)
        fake.clear_faults()
        await client.get(CONFIG_MAPS, "x", namespace=NS)
        assert trio.current_time() - start == pytest.approx(10)
    assert rule.hits == 2


async def test_going_down_during_a_delay_loses_the_reply(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    fake.delay(5, verb="create")
    async with connected(fake) as client, trio.open_nursery() as nursery:
        failures: list[BaseException] = []

        async def create() -> None:
            try:
                await client.create(CONFIG_MAPS, configmap("late"), namespace=NS)
            except TransportError as exc:
                failures.append(exc)

        nursery.start_soon(create)
        await trio.sleep(1)
        fake.down = True
        await trio.sleep(10)
        assert len(failures) == 1
        fake.down = False
        await client.create(CONFIG_MAPS, configmap("later"), namespace=NS)


# --- the write log ----------------------------------------------------------------------------


async def test_writes_are_counted_per_verb_resource_and_name() -> None:
    fake = FakeApi()
    async with connected(fake) as client:
        await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        for value in ("1", "2", "3"):
            await client.patch_merge(CONFIG_MAPS, "a", {"data": {"v": value}}, namespace=NS)
        with pytest.raises(NotFound):
            await client.delete(CONFIG_MAPS, "b", namespace=NS)
        await client.get(CONFIG_MAPS, "a", namespace=NS)
    assert fake.count("patch", CONFIG_MAPS, "a") == 3
    assert fake.count(None, CONFIG_MAPS, "a") == 4
    assert fake.count("delete") == 0
    assert fake.count("delete", ok=None) == 1
    assert [w.verb for w in fake.writes] == ["create", "patch", "patch", "patch", "delete"]
    assert fake.requests == 6


async def test_the_same_seed_gives_the_same_uids_and_names() -> None:
    async def run() -> list[str]:
        fake = FakeApi(seed=7)
        async with connected(fake) as client:
            a = await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
            b = await client.create(CONFIG_MAPS, {"metadata": {"generateName": "g-"}}, namespace=NS)
        return [a["metadata"]["uid"], b["metadata"]["name"], b["metadata"]["uid"]]

    assert await run() == await run()


async def test_two_kinds_of_one_plural_are_stored_apart() -> None:
    """Cluster API's clusters and Kokumi's are both ``clusters``: one name, two objects."""
    fake = FakeApi(kinds=(*DEFAULT_KINDS, fakeapi.CAPI_CLUSTERS))
    capi = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "spec": {}}
    ours = {"apiVersion": api.API_VERSION, "kind": "Cluster", "spec": {"connection": "InCluster"}}
    async with connected(fake) as client:
        made = await client.create(CAPI_CLUSTERS, {**capi, "metadata": {"name": "a"}}, namespace=NS)
        await client.create(api.CLUSTERS, {**ours, "metadata": {"name": "a"}}, namespace=NS)
        assert (await client.get(CAPI_CLUSTERS, "a", namespace=NS))["metadata"]["uid"] == (
            made["metadata"]["uid"]
        )
        await client.delete(api.CLUSTERS, "a", namespace=NS)
        assert [o["kind"] for o in (await client.list(CAPI_CLUSTERS, namespace=NS))["items"]] == [
            "Cluster"
        ]
        assert (await client.list(api.CLUSTERS, namespace=NS))["items"] == []
    assert [o["apiVersion"] for o in fake.objects(CAPI_CLUSTERS)] == ["cluster.x-k8s.io/v1beta1"]
    assert fake.objects(api.CLUSTERS) == []
    with pytest.raises(ValueError, match="names 2 kinds"):
        fake.objects("clusters")


# --- watches ----------------------------------------------------------------------------------


async def test_dropped_watches_resume_where_they_were(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    async with connected(fake) as client, following(client) as followed:
        await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        await settle()
        assert fake.drop_watches() == 1
        await client.create(CONFIG_MAPS, configmap("b"), namespace=NS)
        await trio.sleep(5)
        assert followed.names() == {"a", "b"}
        assert followed.resyncs == 1  # resumed from its version: no list again
        assert fake.open_watches == 1
        assert fake.count("create") == 2


async def test_stalled_watches_are_given_up_after_the_inactivity_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    async with (
        connected(fake) as client,
        following(client, inactivity_timeout=30, timeout_seconds=3600) as followed,
    ):
        await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        await settle()
        assert fake.stall_watches() == 1
        stalled_at = trio.current_time()
        await client.create(CONFIG_MAPS, configmap("b"), namespace=NS)
        await trio.sleep(29)
        assert followed.names() == {"a"}
        await trio.sleep(2)
        assert followed.names() == {"a", "b"}
        assert trio.current_time() - stalled_at == pytest.approx(31)
        assert followed.resyncs == 1


async def test_an_expired_resume_makes_the_watcher_list_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    async with connected(fake) as client, following(client) as followed:
        await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        await settle()
        fake.expire_next_watches()
        fake.drop_watches()
        await client.delete(CONFIG_MAPS, "a", namespace=NS)
        await trio.sleep(5)
        assert followed.resyncs == 2
        assert followed.names() == set()
        # The relist told of the deletion; no DELETED event came for it.
        assert not any(isinstance(i, WatchEvent) and i.type == "DELETED" for i in followed.items)


async def test_history_is_bounded_per_resource(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeApi(history=3)
    async with connected(fake) as client:
        first = await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        for value in "12":
            await client.patch_merge(CONFIG_MAPS, "a", {"data": {"v": value}}, namespace=NS)
        await client.patch_merge(CONFIG_MAPS, "a", {"data": {"v": "3"}}, namespace=NS)
        # The create's event fell out of the three kept, but nothing after it did.
        assert await first_event(client, first["metadata"]["resourceVersion"]) == "MODIFIED"
        await client.patch_merge(CONFIG_MAPS, "a", {"data": {"v": "4"}}, namespace=NS)
        assert await first_event(client, first["metadata"]["resourceVersion"]) == "ERROR"
        # Writes to other resources do not push configmaps' history out.
        for i in range(5):
            await client.create(SECRETS, {"metadata": {"name": f"s{i}"}}, namespace=NS)
        latest = fake.object(CONFIG_MAPS, "a", NS)
        assert latest is not None
        version = int(latest["metadata"]["resourceVersion"]) - 1
        assert await first_event(client, str(version)) == "MODIFIED"


async def first_event(client: Client, version: str) -> str:
    params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "1"}
    async with (
        client.stream("GET", resource_path(CONFIG_MAPS, namespace=NS), params=params) as response,
        contextlib.aclosing(cast("AsyncGenerator[str, None]", response.aiter_lines())) as lines,
    ):
        async for line in lines:
            return str(json.loads(line)["type"])
    return "END"


async def test_down_refuses_requests_and_breaks_watches_and_restart_forgets_history(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    async with connected(fake) as client, following(client, backoff_max=2) as followed:
        await client.create(CONFIG_MAPS, configmap("a"), namespace=NS)
        await settle()
        fake.down = True
        assert fake.open_watches == 0
        with pytest.raises(TransportError):
            await client.get(CONFIG_MAPS, "a", namespace=NS)
        await trio.sleep(10)  # the watcher retries against a server that is down
        fake.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": NS}}
        )
        fake.restart()
        await trio.sleep(10)
        assert followed.names() == {"a", "b"}
        assert followed.resyncs == 2  # the restarted server had no history to resume from
        assert fake.open_watches == 1


async def test_bookmarks_and_the_server_side_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi(bookmark_interval=60)
    created = fake.put(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": NS}}
    )
    params = {
        "watch": "true",
        "resourceVersion": created["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "150",
    }
    seen: list[tuple[float, str, str]] = []
    async with (
        connected(fake) as client,
        client.stream("GET", resource_path(CONFIG_MAPS, namespace=NS), params=params) as response,
    ):
        start = trio.current_time()
        async for line in response.aiter_lines():
            event = json.loads(line)
            version = event["object"]["metadata"]["resourceVersion"]
            seen.append((trio.current_time() - start, event["type"], version))
    current = str(fake.resource_version)
    assert seen == [  # type: ignore[comparison-overlap]  # approx compares equal to floats
        (pytest.approx(60), "BOOKMARK", current),
        (pytest.approx(120), "BOOKMARK", current),
        (pytest.approx(148), "BOOKMARK", current),
    ]
    assert trio.current_time() - start == pytest.approx(150)


async def test_a_status_write_wakes_a_watcher_and_leaves_the_spec(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeApi()
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"connection": "InCluster"},
    }
    async with connected(fake) as client:
        await client.create(api.CLUSTERS, body, namespace=NS)
        updated = await client.patch_merge(
            api.CLUSTERS, "c", {"status": {"server": "s"}}, namespace=NS, subresource="status"
        )
    assert updated["status"] == {"server": "s"}
    assert updated["metadata"]["generation"] == 1
    assert fake.count("patch", api.CLUSTERS, "c") == 1


# --- pure helpers -----------------------------------------------------------------------------


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {}}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "d"}
    ops = [
        {"op": "add", "path": "/a/b/1", "value": 9},
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "remove", "path": "/c"},
        {"op": "copy", "from": "/a/b", "path": "/copied"},
        {"op": "move", "from": "/copied", "path": "/moved"},
        {"op": "replace", "path": "/a/x~1y", "value": 0},
    ]
    with pytest.raises(Exception, match="does not exist"):
        json_patch(doc, ops)
    ops[-1] = {"op": "add", "path": "/a/x~1y", "value": 0}
    assert json_patch(doc, ops) == {"a": {"b": [1, 9, 2, 3], "x/y": 0}, "moved": [1, 9, 2, 3]}
    assert doc == {"a": {"b": [1, 2]}, "c": "d"}


def test_label_selector_parsing() -> None:
    assert parse_label_selector("a=b, c in (d, e),!f,g,h!=i") == (
        ("a", "=", ("b",)),
        ("c", "in", ("d", "e")),
        ("f", "!", ()),
        ("g", "exists", ()),
        ("h", "!=", ("i",)),
    )
    assert parse_label_selector("a in ()") == (("a", "in", ("",)),)
    for bad in ("a b", ",", "a=b c", "example.com/=x"):
        with pytest.raises(ValueError):
            parse_label_selector(bad)
