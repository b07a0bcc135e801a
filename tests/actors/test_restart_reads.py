"""A Cluster actor's reads and claims on the in-process API fake: a restarted manager reads
no kubeconfig Secret before each Cluster's first check at its place, and a steady check claims
its server only when something changed."""

from __future__ import annotations

import base64
from collections import defaultdict
from typing import Any

import httpx
import trio
import trio.testing

from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.core.registry import argocd
from kokumi.kube.client import SECRETS, Client
from kokumi.kube.config import Config
from kokumi.manager import Manager
from kokumi.objects import Resource
from kokumi.runtime.options import Options
from tests.support import strategies as s
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster

NS = "fleet"
COUNT = 40


class _Requests(httpx.AsyncBaseTransport):
    """The fake, with the time of every GET of a Secret of the fleet's and of every write."""

    def __init__(self, fake: FakeApi) -> None:
        self.fake = fake
        self.reads: dict[str, list[float]] = defaultdict(list)
        self.writes: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and f"/namespaces/{NS}/secrets/" in path:
            self.reads[path.rsplit("/", 1)[1]].append(trio.current_time())
        elif request.method != "GET" and "selfsubjectreviews" not in path:
            self.writes.append(f"{request.method} {path}")
        return await self.fake.handle_async_request(request)


def _object(fake: FakeApi, resource: Resource, name: str, namespace: str) -> dict[str, Any]:
    found = fake.object(resource, name, namespace)
    assert found is not None, (resource.plural, namespace, name)
    return found


def _server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


def _fleet(fake: FakeApi) -> None:
    fake.put(
        {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": "all", "namespace": NS},
            "spec": {"clusterSelector": {}},
        }
    )
    for index in range(COUNT):
        put_cluster(fake, NS, f"c{index:02d}", _server(index))


async def test_a_restart_reads_each_secret_with_its_first_check_at_its_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """40 selected Clusters, Ready and registered; the manager stops and a new one starts. It
    writes nothing, reads no Secret before a Cluster's first check, and that check comes at the
    Cluster's place in the minute; Argo CD's Secrets stay as they were."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=41)
    _fleet(fake)
    spokes = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=spokes.check, check_own=spokes.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(90.0)
            nursery.cancel_scope.cancel()
    registered = {
        name: _object(fake, SECRETS, argocd.secret_name(_server(i)), "argocd")["metadata"][
            "resourceVersion"
        ]
        for i, name in enumerate(f"c{i:02d}" for i in range(COUNT))
    }

    requests = _Requests(fake)
    spokes.asked.clear()
    async with Client(Config(server="https://hub.example:6443"), transport=requests) as client:
        manager = Manager(client, options, check=spokes.check, check_own=spokes.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            started = trio.current_time()
            await manager.dispatcher.wait_checked()
            seeded = trio.current_time()
            await trio.sleep(70.0)
            nursery.cancel_scope.cancel()

    assert requests.writes == [], requests.writes
    for index in range(COUNT):
        name, server = f"c{index:02d}", _server(index)
        uid = _object(fake, api.CLUSTERS, name, NS)["metadata"]["uid"]
        place = schedule.first_place(seeded, schedule.offset_of(uid, 60.0), 60.0)
        first = spokes.asked[server][0]
        assert place - 1.0 <= first <= place + 6.1, (name, first - started, place - started)
        reads = requests.reads[name]
        assert reads, name
        assert reads[0] >= first - 0.5, (name, reads[0] - started, first - started)
        assert len(reads) == 1, reads
        secret = _object(fake, SECRETS, argocd.secret_name(server), "argocd")
        assert secret["metadata"]["resourceVersion"] == registered[name]


async def test_a_steady_check_claims_its_server_only_when_something_changed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Five minutes of checks of 40 registered Clusters claim nothing after the first claims;
    a kubeconfig changed (a new server) is claimed at once, and only that one."""
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=42)
    _fleet(fake)
    spokes = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=fake) as client:
        manager = Manager(client, options, check=spokes.check, check_own=spokes.check_own)
        claims: list[str] = []
        want = manager.registry.want

        async def counting(cluster: object, uid: str, connection: object) -> None:
            claims.append(str(cluster))
            await want(cluster, uid, connection)  # type: ignore[arg-type]

        manager.registry.want = counting  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(60.0)
            first = len(claims)
            checks = manager.metrics.checks
            await trio.sleep(300.0)
            steady = len(claims) - first
            checked = manager.metrics.checks - checks
            moved = "https://moved.example:6443"
            text = s.dump(
                s.kubeconfig(
                    cluster={"server": moved, "certificate-authority-data": s.b64(s.ca_pem())},
                    user={"token": "token-moved"},
                )
            )
            secret = await client.get(SECRETS, "c07", namespace=NS)
            secret["data"] = {"value": base64.b64encode(text.encode()).decode()}
            await client.replace(SECRETS, secret, namespace=NS)
            before = len(claims)
            await trio.sleep(30.0)
            after = claims[before:]
            holder = argocd.holder_of(_object(fake, SECRETS, argocd.secret_name(moved), "argocd"))
            nursery.cancel_scope.cancel()

    assert first >= COUNT
    assert checked >= 5 * COUNT - 5  # checked all along...
    assert steady == 0  # ... and claimed nothing
    assert after == [f"{NS}/c07"]
    assert holder is not None and holder.name == "c07"
