"""A Cluster actor's claims on the in-process API fake: a steady check claims its server only
when something changed."""

from __future__ import annotations

import base64
from typing import Any

import trio
import trio.testing

from kokumi.core.registry import argocd
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import SECRETS
from kokumi.manager import Manager
from kokumi.objects import Resource
from kokumi.runtime.options import Options
from tests.support import strategies as s
from tests.support.fakeapi import FakeApi
from tests.support.standin import StandInSpokes, put_cluster, put_environment

NS = "fleet"
COUNT = 40


def _object(fake: FakeApi, resource: Resource, name: str, namespace: str) -> dict[str, Any]:
    found = fake.object(resource, name, namespace)
    assert found is not None, (resource.plural, namespace, name)
    return found


def _server(index: int) -> str:
    return f"https://spoke-{index}.example:6443"


def _fleet(fake: FakeApi) -> None:
    put_environment(fake, NS)
    for index in range(COUNT):
        put_cluster(fake, NS, f"c{index:02d}", _server(index))


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

        async def counting(cluster: object, uid: str, connection: object, *more: object) -> None:
            claims.append(str(cluster))
            await want(cluster, uid, connection, *more)  # type: ignore[arg-type]

        manager.registry.want = counting  # type: ignore[method-assign,assignment]
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
