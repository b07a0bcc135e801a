"""The server registry on the real hub and spoke: first come, handover in place, foreign Secrets."""

from __future__ import annotations

import base64
import json
import ssl
from typing import Any

import httpx
import trio

from kokumi.actors.registry import HANDOVER_REASON
from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef
from kokumi.kube.resources import EVENTS, SECRETS
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import (
    Workspace,
    holder_labels,
    manager,
    ready_of,
    wait_for,
    wait_reason,
    workspace,
)


async def _registered(ws: Workspace, namespace: str, name: str) -> dict[str, Any]:
    secrets: list[dict[str, Any]] = await wait_for(
        ws.argocd_secrets,
        lambda items: any(holder_labels(s) == (namespace, name) for s in items),
        f"an Argo CD Secret for {namespace}/{name}",
    )
    return next(s for s in secrets if holder_labels(s) == (namespace, name))


async def _selected_cluster(
    ws: Workspace, reg: Registration, name: str = "spoke", kubeconfig: str | None = None
) -> str:
    ns = await ws.namespace()
    await ws.kubeconfig_secret(ns, f"{name}-kubeconfig", kubeconfig or reg.kubeconfig)
    await ws.cluster(ns, name, secret=f"{name}-kubeconfig", labels={"fleet": "edge"})
    await ws.environment(ns, "edge", {"fleet": "edge"})
    return ns


async def test_first_come_holds_and_the_waiter_takes_over_in_place(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False)) as running,
    ):
        first = await _selected_cluster(ws, spoke_kubeconfig)
        secret = await _registered(ws, first, "spoke")
        server = spoke_kubeconfig.server.rstrip("/")
        assert secret["metadata"]["name"] == argocd.secret_name(server)

        # The registry keeps the Secret it wrote as the watch keeps objects: without the
        # managedFields the create's answer carried. The hub may show the Secret before the
        # create's answer reaches the registry (or, if that answer is lost, its next read).
        async def kept_secret() -> dict[str, Any] | None:
            return running.registry._memory.secrets.get(secret["metadata"]["name"])

        kept = await wait_for(kept_secret, bool, "the registry to keep the Secret it wrote")
        assert kept["metadata"]["uid"] == secret["metadata"]["uid"]
        assert "managedFields" not in kept["metadata"]
        second = await _selected_cluster(ws, spoke_kubeconfig)
        waiting = ready_of(await wait_reason(ws, second, "spoke", "ClusterConflict"))
        assert f"{first}/spoke" in waiting["message"]
        assert waiting["status"] == "False"
        holder = await ws.get_cluster(first, "spoke")
        assert "delivery.kokumi.dev/argocd-registration" in holder["metadata"]["finalizers"]

        started = trio.current_time()
        await ws.client.delete(api.CLUSTERS, "spoke", namespace=first)
        taken = await _registered(ws, second, "spoke")
        handover = trio.current_time() - started
        assert taken["metadata"]["uid"] == secret["metadata"]["uid"], "handed over in place"
        await wait_reason(ws, second, "spoke", "Ready")
        print(f"handover after the holder's deletion: {handover:.3f} s")
        assert len(await ws.argocd_secrets()) == 1
        await ws.cleanup()


async def test_the_cluster_that_takes_over_says_argo_cds_name_changed(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    """A handover keeps the Secret but changes Argo CD's name for the cluster: an Event on the
    new holder names both, so whoever targets the old name learns why it broke."""
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        first = await _selected_cluster(ws, spoke_kubeconfig)
        await _registered(ws, first, "spoke")
        second = await _selected_cluster(ws, spoke_kubeconfig)
        await wait_reason(ws, second, "spoke", "ClusterConflict")
        await ws.client.patch_merge(
            api.CLUSTERS, "spoke", {"metadata": {"labels": {"fleet": "core"}}}, namespace=first
        )
        await _registered(ws, second, "spoke")
        server = spoke_kubeconfig.server.rstrip("/")
        old = argocd.cluster_name(ClusterRef(first, "spoke"), server)
        new = argocd.cluster_name(ClusterRef(second, "spoke"), server)

        async def renamed(namespace: str) -> list[dict[str, Any]]:
            events = await ws.client.list(EVENTS, namespace=namespace)
            return [e for e in events["items"] if e["reason"] == HANDOVER_REASON]

        events = await wait_for(lambda: renamed(second), bool, "the handover Event")
        taker = await ws.get_cluster(second, "spoke")
        assert len(events) == 1
        event = events[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == taker["metadata"]["uid"]
        assert event["message"] == (
            f"took over server {server} from {first}/spoke: Argo CD now names it {new} "
            f"(was {old}); target it by server, not by name (see docs/argocd.md)"
        )
        assert await renamed(first) == []  # the first registration was no handover
        await ws.cleanup()


async def test_moving_to_another_server_and_an_unusable_kubeconfig_release(
    hub: APIServer, spoke: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await _selected_cluster(ws, reg)
        old = await _registered(ws, ns, "spoke")
        # Another spelling of the same apiserver is another server to Argo CD.
        other = reg.server.replace("127.0.0.1", "localhost")
        secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=ns)
        secret["data"]["value"] = base64.b64encode(reg.variant(server=other).encode()).decode()
        await ws.client.replace(SECRETS, secret, namespace=ns)
        moved = await wait_for(
            ws.argocd_secrets,
            lambda items: [s["metadata"]["name"] for s in items] == [argocd.secret_name(other)],
            "the registration to move to the other server",
        )
        assert moved[0]["metadata"]["uid"] != old["metadata"]["uid"]
        # A kubeconfig that cannot be used lets go of the server.
        secret = await ws.client.get(SECRETS, "spoke-kubeconfig", namespace=ns)
        secret["data"]["value"] = base64.b64encode(reg.variant(exec_plugin=True).encode()).decode()
        await ws.client.replace(SECRETS, secret, namespace=ns)
        await wait_for(ws.argocd_secrets, lambda items: items == [], "the Secret to go")
        await wait_reason(ws, ns, "spoke", "InvalidKubeconfig")
        cluster = await ws.get_cluster(ns, "spoke")
        assert "delivery.kokumi.dev/argocd-registration" not in (
            cluster["metadata"].get("finalizers") or []
        )
        await ws.cleanup()


async def test_foreign_secrets_are_left_alone_and_in_cluster_server_is_refused(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    server = reg.server.rstrip("/")
    async with workspace(hub) as ws:
        by_name = await ws.client.create(
            SECRETS,
            {
                "metadata": {
                    "name": argocd.secret_name(server),
                    "labels": {"argocd.argoproj.io/secret-type": "cluster"},
                },
                "stringData": {"name": "hand-made", "server": "https://elsewhere.example"},
            },
            namespace=ws.argocd,
        )
        by_server = await ws.client.create(
            SECRETS,
            {
                "metadata": {
                    "name": "hand-made-spoke",
                    "labels": {"argocd.argoproj.io/secret-type": "cluster"},
                },
                "stringData": {"name": "hand-made-spoke", "server": server},
            },
            namespace=ws.argocd,
        )
        async with manager(hub, ws.options(keep_in_cluster=False)):
            ns = await _selected_cluster(ws, reg)
            message = ready_of(await wait_reason(ws, ns, "spoke", "ClusterConflict"))["message"]
            assert "Kokumi did not write" in message
            inside = await _selected_cluster(
                ws, reg, "inside", reg.variant(server="https://kubernetes.default.svc")
            )
            refused = ready_of(await wait_reason(ws, inside, "inside", "ClusterConflict"))
            assert "connection: InCluster" in refused["message"]
            await trio.sleep(1)
            for original in (by_name, by_server):
                now = await ws.client.get(
                    SECRETS, original["metadata"]["name"], namespace=ws.argocd
                )
                assert now["metadata"]["resourceVersion"] == original["metadata"]["resourceVersion"]
            assert await ws.argocd_secrets() == []
            # Once the hand-made Secrets are gone, the waiting Cluster registers the server.
            for original in (by_name, by_server):
                await ws.client.delete(SECRETS, original["metadata"]["name"], namespace=ws.argocd)
            await _registered(ws, ns, "spoke")
            await wait_reason(ws, ns, "spoke", "Ready")
            await ws.cleanup()


async def test_restart_with_nothing_changed_writes_nothing(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        options = ws.options()
        async with manager(hub, options) as first:
            ns = await _selected_cluster(ws, spoke_kubeconfig)
            await _registered(ws, ns, "spoke")
            await wait_reason(ws, ns, "spoke", "Ready")
            await first.wait_checked()
            await trio.sleep(1)  # let the Environment's status settle
        before = await _versions(ws, ns)
        async with manager(hub, options) as second:
            await second.wait_checked()
            await trio.sleep(2)
            # Every object of this test as it was: no status, finalizer, Secret or keeper write.
            # (Counters would also count other tests' Clusters that linger on the shared hub.)
            assert await _versions(ws, ns) == before
            await ws.cleanup()


async def _versions(ws: Workspace, namespace: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for resource, where in (
        (api.CLUSTERS, namespace),
        (api.ENVIRONMENTS, namespace),
        (api.CLUSTERS, ws.own),
        (api.ENVIRONMENTS, ws.own),
        (SECRETS, ws.argocd),
    ):
        for item in (await ws.client.list(resource, namespace=where))["items"]:
            meta = item["metadata"]
            found[f"{resource.plural}/{where}/{meta['name']}"] = meta["resourceVersion"]
    return found


async def test_copied_config_reaches_the_spoke_by_argo_cds_rules(
    hub: APIServer, spoke: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await _selected_cluster(ws, spoke_kubeconfig)
        secret = await _registered(ws, ns, "spoke")
        config = argocd.config_from_secret(secret)
        server = base64.b64decode(secret["data"]["server"]).decode()
        tls = config.get("tlsClientConfig", {})
        # Argo CD's decoding gives the PEM bytes back, as Go's []byte does.
        context = ssl.create_default_context(cadata=tls["caData"].decode())
        headers = {"Authorization": f"Bearer {config['bearerToken']}"}
        async with httpx.AsyncClient(verify=context, headers=headers) as client:
            version = (await client.get(f"{server}/version")).json()
            review = await client.post(
                f"{server}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
        assert version["gitVersion"] == spoke.version
        user = review.json()["status"]["userInfo"]["username"]
        assert user == "system:serviceaccount:kube-system:kokumi"
        assert json.loads(base64.b64decode(secret["data"]["config"]))  # valid JSON for Argo CD
        await ws.cleanup()


async def test_holder_deleted_while_the_manager_is_down_is_released_on_start(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        options = ws.options(keep_in_cluster=False)
        async with manager(hub, options):
            ns = await _selected_cluster(ws, spoke_kubeconfig)
            await _registered(ws, ns, "spoke")
            await wait_for(
                lambda: ws.get_cluster(ns, "spoke"),
                lambda c: api.FINALIZER in (c["metadata"].get("finalizers") or []),
                "the finalizer",
            )
        # The manager is down: the finalizer holds the Cluster until the Secret is gone.
        await ws.client.delete(api.CLUSTERS, "spoke", namespace=ns)
        held = await ws.get_cluster(ns, "spoke")
        assert held["metadata"]["deletionTimestamp"]
        assert len(await ws.argocd_secrets()) == 1
        async with manager(hub, options):
            await wait_for(ws.argocd_secrets, lambda items: items == [], "the Secret to go")
            await wait_for(
                lambda: ws.client.list(api.CLUSTERS, namespace=ns),
                lambda listing: listing["items"] == [],
                "the Cluster to be gone",
            )


async def test_a_cluster_deleted_and_created_again_keeps_its_registration(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await _selected_cluster(ws, spoke_kubeconfig)
        await _registered(ws, ns, "spoke")
        await ws.client.delete(api.CLUSTERS, "spoke", namespace=ns)
        await wait_for(
            lambda: ws.client.list(api.CLUSTERS, namespace=ns),
            lambda listing: listing["items"] == [],
            "the old Cluster to be gone",
        )
        await ws.cluster(ns, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
        await wait_reason(ws, ns, "spoke", "Ready")
        secret = await _registered(ws, ns, "spoke")
        await trio.sleep(1)  # a late release of the old actor would remove it now
        assert [s["metadata"]["uid"] for s in await ws.argocd_secrets()] == [
            secret["metadata"]["uid"]
        ]
        await ws.cleanup()
