"""A spoke credential granted less than cluster-admin, as the spec advises, on the real hub.

Argo CD lists and watches every kind cluster-wide unless its cluster Secret names namespaces, so a
Cluster whose credential may not list cluster-wide is not Ready until it names them
(``spec.scope.namespaces``): never a silent Ready that Argo CD cannot sync to.
"""

from __future__ import annotations

import pytest

from kokumi.core import api
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, ready_of, wait_for, wait_reason, workspace
from tests.support.spoke import NARROW_NAMESPACE

pytestmark = pytest.mark.cluster

NAMESPACES_REQUIRED = (
    "the credential may not list every resource cluster-wide, which Argo CD does unless told"
    " which namespaces to use: set spec.scope.namespaces to the namespaces Argo CD may use there,"
    " or grant the credential list and watch on all resources cluster-wide"
)


async def test_a_namespace_bound_credential_is_ready_once_the_cluster_names_its_namespaces(
    hub: APIServer,
    spoke: APIServer,
    crds: object,
    narrow_spoke_kubeconfig: Registration,
    spoke_kubeconfig: Registration,
) -> None:
    narrow = narrow_spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()) as running:
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "narrow", narrow.kubeconfig)
        await ws.cluster(ns, "narrow", secret="narrow", labels={"fleet": "edge"})
        await ws.environment(ns, "edge", {"fleet": "edge"})
        # The cluster-admin credential of the same spoke, selected by no Environment (one
        # server, one registration): Ready without a scope.
        await ws.kubeconfig_secret(ns, "admin", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "admin", secret="admin")

        cluster = await wait_reason(ws, ns, "narrow", "NamespacesRequired")
        ready = ready_of(cluster)
        assert (ready["status"], ready["message"]) == ("False", NAMESPACES_REQUIRED)
        assert cluster["status"]["kubernetesVersion"] == spoke.version
        assert cluster["status"]["server"] == spoke.url
        assert narrow.token not in repr(cluster)
        # Registered as for any credential the spoke refuses (Unauthorized, Forbidden): a fix on
        # the spoke or in the spec then needs no new registration.
        secrets = await wait_for(
            ws.argocd_secrets, lambda found: len(found) == 1, "the narrow Cluster's registration"
        )
        uid = secrets[0]["metadata"]["uid"]
        ready = ready_of(await wait_reason(ws, ns, "admin", "Ready"))
        assert ready["status"] == "True"

        await ws.client.patch_merge(
            api.CLUSTERS,
            "narrow",
            {"spec": {"scope": {"namespaces": [NARROW_NAMESPACE]}}},
            namespace=ns,
        )
        cluster = await wait_reason(ws, ns, "narrow", "Ready", timeout=15)
        ready = ready_of(cluster)
        assert ready["status"] == "True"
        assert ready["observedGeneration"] == cluster["metadata"]["generation"]
        assert ready["message"].endswith("as system:serviceaccount:kube-system:kokumi-narrow")
        assert [s["metadata"]["uid"] for s in await ws.argocd_secrets()] == [uid]

        # Unset again: asked again, at once (a new generation is checked afresh).
        await ws.client.patch_merge(api.CLUSTERS, "narrow", {"spec": {"scope": None}}, namespace=ns)
        await wait_reason(ws, ns, "narrow", "NamespacesRequired", timeout=15)
        await running.wait_checked()
        await ws.cleanup()
