"""The Environments actor on the in-process API fake: its status writes keep their pace while
Clusters come in bursts, and the selection they drive is never held back."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from kokumi.actors import environments
from kokumi.actors.environments import STATUS_PACE
from kokumi.core import api
from kokumi.core.environments.status import selection_status
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from kokumi.manager import Manager
from kokumi.runtime.options import Options
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster, put_environment

NS = "fleet"


class _StatusWrites(httpx.AsyncBaseTransport):
    """The fake, with the time of every write of an Environment's status."""

    def __init__(self, fake: FakeApi) -> None:
        self.fake = fake
        self.at: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH" and request.url.path.endswith("/environments/all/status"):
            self.at.append(trio.current_time())
        return await self.fake.handle_async_request(request)


async def test_an_environment_is_written_once_a_second_at_most_while_its_clusters_onboard(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 Clusters created 20 a second, one Environment selecting them all: before the pace it
    was written twice per Cluster (400 writes, each a count moving by one); now at most once a
    second, and its last status counts every Cluster selected and deploying. Its status is not
    even computed while the pace holds it (it was, once per pass: per Cluster event)."""
    computed: list[float] = []

    def counted(*args: Any, **kwargs: Any) -> api.EnvironmentStatus:
        computed.append(trio.current_time())
        return selection_status(*args, **kwargs)

    monkeypatch.setattr(environments, "selection_status", counted)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS), seed=3)
    put_environment(fake, NS)
    transport = _StatusWrites(fake)
    spokes = StandInSpokes()
    options = Options(namespace="kokumi", argocd_namespace="argocd", keep_in_cluster=False)
    async with Client(Config(server="https://hub.example:6443"), transport=transport) as client:
        manager = Manager(client, options, check=spokes.check, check_own=spokes.check_own)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.sleep(5.0)
            began = trio.current_time()
            for index in range(200):
                put_cluster(fake, NS, f"c{index:03d}", f"https://spoke-{index}.example:6443")
                await trio.sleep(0.05)
            await trio.sleep(20.0)
            registered = sum(
                1
                for secret in (await client.list(SECRETS, namespace="argocd"))["items"]
                if secret["metadata"]["name"].startswith("kokumi-")
            )
            environment = await client.get(api.ENVIRONMENTS, "all", namespace=NS)
            nursery.cancel_scope.cancel()

    writes = [at for at in transport.at if at >= began]
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= STATUS_PACE - 1e-6, gaps
    assert len(writes) <= 10.0 / STATUS_PACE + 2, len(writes)  # the burst lasts 10 s
    # Each write's status, and at most one more per second when the pace's second is up.
    assert len([at for at in computed if at >= began]) <= 2 * len(writes) + 2, len(computed)
    assert registered == 200  # the selection was not held back with the counts
    assert environment["status"]["selected"] == 200
    assert environment["status"]["deploying"] == 200
