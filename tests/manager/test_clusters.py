"""Clusters on the real hub and spoke: checks, reasons, status writes, the in-cluster check."""

from __future__ import annotations

import base64

import trio

from kokumi.core import api
from kokumi.kube.resources import EVENTS, SECRETS
from kokumi.testing import Kubectl, canary
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration, closed_port_server, foreign_ca_pem
from tests.support.manager import manager, ready_of, wait_for, wait_reason, workspace


async def test_kubeconfig_cluster_becomes_ready_with_version_and_server(
    hub: APIServer, spoke: APIServer, crds: object, spoke_kubeconfig: Registration, kubectl: Kubectl
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options()) as running:
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
        cluster = await wait_reason(ws, ns, "spoke", "Ready")
        assert cluster["status"]["server"] == spoke.url
        assert cluster["status"]["kubernetesVersion"] == spoke.version
        assert cluster["status"]["observedGeneration"] == cluster["metadata"]["generation"]
        ready = ready_of(cluster)
        assert ready["status"] == "True"
        assert ready["observedGeneration"] == cluster["metadata"]["generation"]
        table = kubectl(hub, "get", "kcl", "-n", ns).stdout
        header, row = table.splitlines()[:2]
        assert header.split() == [
            "NAME",
            "CONNECTION",
            "SERVER",
            "VERSION",
            "READY",
            "REASON",
            "AGE",
        ]
        assert row.split()[:6] == ["spoke", "Kubeconfig", spoke.url, spoke.version, "True", "Ready"]
        assert "spoke" in kubectl(hub, "get", "kokumi", "-n", ns).stdout
        await running.wait_checked()
        # A first report that the Cluster is Ready records no Event: it is what creating it
        # asked for, and a fleet brought in at once would write one per Cluster.
        # (tests/deploy/test_manager.py sees the Warning of a first report that is not Ready.)
        events = await ws.client.list(EVENTS, namespace=ns)
        assert [e["reason"] for e in events["items"]] == []
        # A change of state does record one: the Secret's key goes, the Cluster leaves Ready.
        await ws.client.patch_merge(
            SECRETS, "spoke-kubeconfig", {"data": {"value": None}}, namespace=ns
        )
        await wait_reason(ws, ns, "spoke", "SecretKeyNotFound")
        events = await wait_for(
            lambda: ws.client.list(EVENTS, namespace=ns),
            lambda found: any(e["reason"] == "SecretKeyNotFound" for e in found["items"]),
            "a Ready transition to record an Event",
        )
        assert [(e["type"], e["involvedObject"]["name"]) for e in events["items"]] == [
            ("Warning", "spoke")
        ]
        await ws.cleanup()


async def test_every_bad_input_gets_its_reason_and_the_manager_keeps_going(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        cases = {
            "bad-token": (reg.variant(token=canary.token("not-a-real-token")), "Unauthorized"),
            "wrong-ca": (reg.variant(ca_pem=foreign_ca_pem()), "TLSError"),
            "closed-port": (reg.variant(server=closed_port_server()), "Unreachable"),
            "exec-plugin": (reg.variant(exec_plugin=True), "InvalidKubeconfig"),
            "not-yaml": ("{{{ this is not a kubeconfig", "InvalidKubeconfig"),
        }
        for name, (text, _) in cases.items():
            await ws.kubeconfig_secret(ns, f"{name}-kubeconfig", text)
            await ws.cluster(ns, name, secret=f"{name}-kubeconfig")
        await ws.kubeconfig_secret(ns, "other-key", reg.kubeconfig, key="kubeconfig")
        await ws.cluster(ns, "missing-key", secret="other-key")
        await ws.cluster(ns, "missing-secret", secret="later-kubeconfig")
        for name, (_, reason) in cases.items():
            cluster = await wait_reason(ws, ns, name, reason)
            message = ready_of(cluster)["message"]
            assert "\n" not in message
            assert reg.token not in message
        missing_key = ready_of(await wait_reason(ws, ns, "missing-key", "SecretKeyNotFound"))
        assert "kubeconfig" in missing_key["message"]  # names the keys it has
        missing = ready_of(await wait_reason(ws, ns, "missing-secret", "SecretNotFound"))
        assert "later-kubeconfig" in missing["message"]
        # Creating the Secret makes the Cluster Ready without waiting for the next minute.
        started = trio.current_time()
        await ws.kubeconfig_secret(ns, "later-kubeconfig", reg.kubeconfig)
        await wait_reason(ws, ns, "missing-secret", "Ready", timeout=15)
        assert trio.current_time() - started < 15
        await ws.cleanup()


async def test_closed_port_is_unreachable_within_the_budget(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await ws.kubeconfig_secret(
            ns, "gone", spoke_kubeconfig.variant(server=closed_port_server())
        )
        started = trio.current_time()
        await ws.cluster(ns, "gone", secret="gone")
        cluster = await wait_reason(ws, ns, "gone", "Unreachable", timeout=15)
        assert trio.current_time() - started < 11
        assert "refused" in ready_of(cluster)["message"]
        await ws.cleanup()


async def test_in_cluster_clusters_share_one_check(hub: APIServer, crds: object) -> None:
    async with workspace(hub) as ws:
        first, second = await ws.namespace(), await ws.namespace()
        await ws.cluster(first, "in-cluster")
        await ws.cluster(second, "in-cluster")
        async with manager(hub, ws.options(keep_in_cluster=False)) as running:
            await running.wait_checked()
            for ns in (first, second):
                cluster = await wait_reason(ws, ns, "in-cluster", "Ready")
                assert cluster["status"]["server"] == "https://kubernetes.default.svc"
                assert cluster["status"]["kubernetesVersion"] == hub.version
            assert running.metrics.in_cluster_checks == 1


async def test_secret_change_checks_again_at_once(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        secret = await ws.kubeconfig_secret(
            ns, "kc", spoke_kubeconfig.variant(token=canary.token("wrong-token"))
        )
        await ws.cluster(ns, "spoke", secret="kc")
        await wait_reason(ws, ns, "spoke", "Unauthorized")
        secret["data"]["value"] = base64.b64encode(spoke_kubeconfig.kubeconfig.encode()).decode()
        await ws.client.replace(SECRETS, secret, namespace=ns)
        await wait_reason(ws, ns, "spoke", "Ready", timeout=10)
        await ws.cleanup()


async def test_invalid_spec_gets_a_reason(hub: APIServer, crds: object) -> None:
    """The CRD validates, but a Cluster the schema let through broken still gets an answer."""
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        await ws.cluster(ns, "ok-in-cluster")
        cluster = await wait_for(
            lambda: ws.get_cluster(ns, "ok-in-cluster"),
            lambda c: ready_of(c).get("reason") == "Ready",
            "in-cluster Ready",
        )
        assert api.parse_cluster(cluster).__class__ is api.Cluster
        await ws.cleanup()


async def test_wait_checked_does_not_wait_for_a_cluster_being_deleted(
    hub: APIServer, crds: object
) -> None:
    """A Cluster left deleting (its finalizer held while no manager ran) is never checked
    again: waiting for its first check would never end."""
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        cluster = await ws.cluster(ns, "leaving")
        cluster["metadata"]["finalizers"] = [api.FINALIZER]
        await ws.client.replace(api.CLUSTERS, cluster, namespace=ns)
        await ws.client.delete(api.CLUSTERS, "leaving", namespace=ns)
        async with manager(hub, ws.options(keep_in_cluster=False)) as running:
            with trio.fail_after(30):
                await running.wait_checked()
            await wait_for(
                lambda: ws.client.list(api.CLUSTERS, namespace=ns),
                lambda listing: listing["items"] == [],
                "the deleted Cluster to lose its finalizer and go",
            )
