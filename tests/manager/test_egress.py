"""One egress policy for the probe and the registry, on the real hub: a server the manager may
not connect to is never lent to Argo CD, whose pods would connect there with the credential."""

from __future__ import annotations

import base64
from typing import Any

import trio

from kokumi.actors.registry import Registry
from kokumi.core.cluster.egress import EgressPolicy
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef
from kokumi.core.registry.registration import Registration
from kokumi.kube.resources import SECRETS
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration as SpokeRegistration
from tests.support.manager import (
    Workspace,
    holder_labels,
    manager,
    ready_of,
    wait_for,
    wait_reason,
    workspace,
)

METADATA = "https://169.254.169.254"


async def _cluster(ws: Workspace, name: str, kubeconfig: str) -> str:
    ns = await ws.namespace()
    await ws.kubeconfig_secret(ns, f"{name}-kubeconfig", kubeconfig)
    await ws.cluster(ns, name, secret=f"{name}-kubeconfig", labels={"fleet": "edge"})
    await ws.environment(ns, "edge", {"fleet": "edge"})
    return ns


async def _holders(ws: Workspace) -> set[tuple[str, str]]:
    return {holder_labels(s) for s in await ws.argocd_secrets()}


async def test_a_denied_server_gets_no_argocd_secret_and_a_held_one_is_released(
    hub: APIServer, crds: object, spoke_kubeconfig: SpokeRegistration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        held = await _cluster(ws, "spoke", reg.kubeconfig)
        await wait_for(lambda: _holders(ws), lambda h: (held, "spoke") in h, "a registration")
        denied = await _cluster(ws, "metadata", reg.variant(server=METADATA))
        status = ready_of(await wait_reason(ws, denied, "metadata", "EgressDenied"))
        assert "169.254.169.254" in status["message"]
        await trio.sleep(1)
        assert await _holders(ws) == {(held, "spoke")}

        # The holder's kubeconfig moves to the metadata address: its registration goes.
        secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=held)
        moved = base64.b64encode(reg.variant(server=METADATA + ":443").encode()).decode()
        secret["data"]["value"] = moved
        await ws.client.replace(SECRETS, secret, namespace=held)
        await wait_reason(ws, held, "spoke", "EgressDenied")
        await wait_for(lambda: _holders(ws), lambda h: h == set(), "the release")
        await ws.cleanup()


async def test_a_name_that_resolves_to_a_denied_address_is_not_registered(
    hub: APIServer, crds: object, spoke_kubeconfig: SpokeRegistration
) -> None:
    """Argo CD resolves the name itself: only the probe's resolution can tell, and it decides."""
    reg = spoke_kubeconfig
    loopback = EgressPolicy.from_cidrs(deny=["127.0.0.0/8", "::1/128"])
    options_of = {"keep_in_cluster": False, "probe_egress": loopback}
    async with workspace(hub) as ws, manager(hub, ws.options(**options_of)):
        server = reg.server.replace("127.0.0.1", "localhost")
        ns = await _cluster(ws, "local", reg.variant(server=server))
        status = ready_of(await wait_reason(ws, ns, "local", "EgressDenied"))
        assert "localhost resolves to" in status["message"]
        await trio.sleep(1)
        assert await ws.argocd_secrets() == []
        await ws.cleanup()


async def test_the_registry_itself_refuses_a_denied_address(hub: APIServer, crds: object) -> None:
    """Whoever asks, the registry writes no Secret for a server or proxy the policy refuses."""
    async with workspace(hub) as ws:
        told: list[Registration] = []
        registry = Registry(ws.client, ws.argocd, egress=EgressPolicy())
        cluster = ClusterRef("fleet", "metadata")
        async with trio.open_nursery() as nursery:
            await nursery.start(registry.run)
            registry.subscribe(cluster, "uid-1", told.append)
            for connection in (
                Connection(server=METADATA, token="t"),
                Connection(server="https://10.0.0.1", token="t", proxy_url="http://[fe80::1]:3128"),
            ):
                await registry.want(cluster, "uid-1", connection)
                assert told[-1].reason == Reason.EGRESS_DENIED
                assert told[-1].conflict is not None
                assert "where the manager does not connect" in told[-1].conflict
                secrets: list[dict[str, Any]] = (
                    await ws.client.list(SECRETS, namespace=ws.argocd)
                )["items"]
                assert [s for s in secrets if argocd.is_ours(s)] == []
            assert await registry.release(cluster, "uid-1")
            nursery.cancel_scope.cancel()
        await ws.cleanup()
