"""Every spelling of Argo CD's own cluster is a ClusterConflict, on the real hub with the policy.

The admission policy refuses a Secret for any of them; a manager that tried would retry
RegistrationFailed for ever instead of saying what to do.
"""

from __future__ import annotations

import trio

from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, ready_of, wait_reason, workspace

SPELLINGS = {
    "upper": "https://KUBERNETES.default.svc",
    "port": "https://kubernetes.default.svc:443",
    "local": "https://kubernetes.default.svc.cluster.local",
    "http": "http://kubernetes.default",
}


async def test_each_spelling_of_the_in_cluster_server_is_a_cluster_conflict(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        await ws.environment(ns, "edge", {"fleet": "edge"})
        for name, server in SPELLINGS.items():
            kubeconfig = spoke_kubeconfig.variant(server=server)
            await ws.kubeconfig_secret(ns, f"{name}-kubeconfig", kubeconfig)
            await ws.cluster(ns, name, secret=f"{name}-kubeconfig", labels={"fleet": "edge"})
        for name, server in SPELLINGS.items():
            ready = ready_of(await wait_reason(ws, ns, name, "ClusterConflict"))
            assert "connection: InCluster" in ready["message"], name
            assert server.rstrip("/") in ready["message"], name
        await trio.sleep(
            1
        )  # a registration tried meanwhile would have turned it RegistrationFailed
        for name in SPELLINGS:
            assert ready_of(await ws.get_cluster(ns, name))["reason"] == "ClusterConflict", name
        assert await ws.argocd_secrets() == []
        await ws.cleanup()
