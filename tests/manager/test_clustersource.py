"""ClusterSources on the real hub: Cluster API's Secrets become Clusters, and go with them."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from kokumi.cmd.cluster.describe import describe_text
from kokumi.core import api
from kokumi.core.sources.clusterapi import CAPI_CLUSTER_NAME, CAPI_CLUSTERS
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube import errors
from kokumi.kube.resources import CONFIG_MAPS, SECRETS
from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.deploy import install_capi_crd, remove_capi_crd, run, wait_until
from tests.support.manager import Workspace, manager, ready_of, wait_for, workspace
from tests.support.sources import (
    cleanup,
    get_source,
    gone,
    passes_beyond,
    wait_reason,
    wait_source,
)

REFUSE_WORK = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: refuse-work-{ns}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
    resourceRules:
      - apiGroups: [delivery.kokumi.dev]
        apiVersions: ["*"]
        operations: [CREATE]
        resources: [clusters]
  validations:
    - expression: object.metadata.name != 'work'
      message: refused by the test
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: refuse-work-{ns}}}
spec:
  policyName: refuse-work-{ns}
  validationActions: [Deny]
"""

PROBE_CLUSTER = """
apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {name: work}
spec: {connection: InCluster}
"""


def owned_by(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The controller ownerReference Cluster API puts on a cluster's kubeconfig Secret."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def capi_secret(
    ws: Workspace,
    ns: str,
    cluster: str,
    kubeconfig: str,
    *,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The kubeconfig Secret as Cluster API writes it: controlled by its Cluster API cluster,
    made here (without labels) if the test did not make it first; ``owners`` instead, if given."""
    if owners is None:
        try:
            capi = await ws.client.get(CAPI_CLUSTERS, cluster, namespace=ns)
        except errors.NotFound:
            capi = await capi_cluster(ws, ns, cluster, {})
        owners = [owned_by(capi)]
    body = {
        "metadata": {
            "name": f"{cluster}-kubeconfig",
            "namespace": ns,
            "labels": {CAPI_CLUSTER_NAME: cluster},
            "ownerReferences": owners,
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
    }
    return await ws.client.create(SECRETS, body, namespace=ns)


async def rotate(ws: Workspace, ns: str, cluster: str, kubeconfig: str) -> None:
    data = {"value": base64.b64encode(kubeconfig.encode()).decode()}
    await ws.client.patch_merge(SECRETS, f"{cluster}-kubeconfig", {"data": data}, namespace=ns)


async def capi_cluster(
    ws: Workspace, ns: str, name: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    body = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {},
    }
    return await ws.client.create(CAPI_CLUSTERS, body, namespace=ns)


async def source(
    ws: Workspace,
    ns: str,
    name: str = "capi",
    *,
    selector: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"from": "ClusterAPI", "labels": dict(labels or {})}
    if selector is not None:
        spec["selector"] = dict(selector)
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "ClusterSource",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
    return await ws.client.create(CLUSTER_SOURCES, body, namespace=ns)


pytestmark = pytest.mark.usefixtures("crds", "capi_crd")


async def test_a_capi_secret_becomes_a_registered_cluster_and_goes_with_it(
    hub: APIServer, spoke: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await capi_cluster(ws, ns, "work", {"env": "prod", "region": "eu"})
        await source(ws, ns, labels={"fleet": "edge"})
        await wait_source(ws, ns, "Ready", matched=0, made=0)
        await ws.environment(ns, "edge", {"fleet": "edge"})

        # A Cluster API Secret appears: a Cluster, Ready, registered with Argo CD.
        await capi_secret(ws, ns, "work", reg.kubeconfig)
        cluster = await wait_reason(ws, ns, "work", "Ready")
        assert cluster["metadata"]["labels"] == {
            "env": "prod",
            "region": "eu",
            "fleet": "edge",
            "delivery.kokumi.dev/cluster-source": "capi",
        }
        owner = cluster["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            "ClusterSource",
            "capi",
            True,
        )
        assert cluster["spec"]["kubeconfig"]["secretRef"] == {
            "name": "work-kubeconfig",
            "key": "value",
        }
        assert cluster["status"]["server"] == spoke.url
        described = describe_text(cluster, [cluster], [], None, [])
        assert (
            "ClusterSource capi (from Cluster API's Secret work-kubeconfig); edit the source,"
            " not this Cluster" in described
        ), described
        status = (await wait_source(ws, ns, "Ready", matched=1, made=1))["status"]
        assert (status["notUsable"], status["conflicts"], status["notImported"]) == (0, 0, [])
        secrets = await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "an Argo CD Secret")
        assert base64.b64decode(secrets[0]["data"]["server"]).decode() == spoke.url

        # Rotated: the Cluster follows at once (a broken token, then the good one again).
        await rotate(ws, ns, "work", reg.variant(token=canary.token("rotated-away")))
        await wait_reason(ws, ns, "work", "Unauthorized", timeout=15)
        await rotate(ws, ns, "work", reg.kubeconfig)
        await wait_reason(ws, ns, "work", "Ready", timeout=15)

        # Rotated to a kubeconfig Kokumi refuses: the Cluster stays, the source lists why.
        await rotate(ws, ns, "work", reg.variant(exec_plugin=True))
        listed = (await wait_source(ws, ns, "NotAllImported", notUsable=1, made=1))["status"]
        entry = listed["notImported"][0]
        assert (entry["secret"], entry["cluster"], entry["reason"]) == (
            "work-kubeconfig",
            "work",
            "InvalidKubeconfig",
        )
        assert "exec plugin" in entry["message"]
        cluster = await wait_reason(ws, ns, "work", "InvalidKubeconfig")
        assert entry["message"] in ready_of(cluster)["message"]  # the manager's own words
        await rotate(ws, ns, "work", reg.kubeconfig)
        await wait_source(ws, ns, "Ready", matched=1, made=1)
        await wait_reason(ws, ns, "work", "Ready", timeout=15)
        await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "the Argo CD Secret again")

        # The Secret deleted: the Cluster goes, and its Argo CD Secret is released.
        await ws.client.delete(SECRETS, "work-kubeconfig", namespace=ns)
        await gone(ws, ns, "work")
        await wait_for(ws.argocd_secrets, lambda s: s == [], "the Argo CD Secret to be released")
        await wait_source(ws, ns, "Ready", matched=0, made=0)
        await cleanup(ws)


async def test_cluster_api_installed_after_the_manager_is_picked_up_when_its_crd_appears(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    """A source applied before Cluster API's CRD says it waits for it (not for a permission),
    and makes its Cluster once the CRD is applied: the manager asks again every few seconds
    while the CRD is missing (tests/actors/test_sourcereads.py holds the seconds)."""
    reg = spoke_kubeconfig
    await trio.to_thread.run_sync(remove_capi_crd, hub)
    try:
        async with workspace(hub) as ws, manager(hub, ws.options()):
            ns = await ws.namespace()
            await source(ws, ns)
            waiting = await wait_source(ws, ns, "ClusterAPINotReadable", matched=0, made=0)
            message = ready_of(waiting)["message"]
            assert message.startswith(
                "Cluster API is not installed (no CRD clusters.cluster.x-k8s.io)"
            ), message
            assert "picked up within seconds of the CRD being applied" in message

            # Cluster API is installed while the manager runs, and writes its first cluster.
            await trio.to_thread.run_sync(install_capi_crd, hub)
            await capi_cluster(ws, ns, "work", {"env": "prod"})
            await capi_secret(ws, ns, "work", reg.kubeconfig)
            cluster = await wait_reason(ws, ns, "work", "Ready", timeout=60)
            assert cluster["metadata"]["labels"]["env"] == "prod"
            await wait_source(ws, ns, "Ready", matched=1, made=1)
            await cleanup(ws)
    finally:
        # The session's hub has Cluster API's CRD (the capi_crd fixture): it is put back.
        await trio.to_thread.run_sync(install_capi_crd, hub)


async def test_a_selector_that_stops_matching_and_a_hand_made_cluster(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await capi_cluster(ws, ns, "prod-1", {"env": "prod"})
        await capi_cluster(ws, ns, "dev-1", {"env": "dev"})
        await capi_cluster(ws, ns, "taken", {"env": "prod"})
        for name in ("prod-1", "dev-1", "taken"):
            await capi_secret(ws, ns, name, reg.kubeconfig)
        await ws.kubeconfig_secret(ns, "mine", reg.kubeconfig)
        hand = await ws.cluster(ns, "taken", secret="mine", labels={"team": "a"})
        await source(ws, ns, selector={"matchLabels": {"env": "prod"}})
        status = (await wait_source(ws, ns, "NotAllImported", matched=2, made=1, conflicts=1))[
            "status"
        ]
        entry = status["notImported"][0]
        assert (entry["secret"], entry["reason"]) == ("taken-kubeconfig", "ClusterConflict")
        assert "not made by this ClusterSource" in entry["message"]
        await ws.get_cluster(ns, "prod-1")
        with pytest.raises(errors.NotFound):
            await ws.get_cluster(ns, "dev-1")
        # The hand-made Cluster is as it was made: same object, spec and labels.
        still = await ws.get_cluster(ns, "taken")
        assert still["metadata"]["uid"] == hand["metadata"]["uid"]
        assert still["metadata"]["labels"] == {"team": "a"}
        assert still["spec"]["kubeconfig"]["secretRef"]["name"] == "mine"
        assert "ownerReferences" not in still["metadata"]

        # prod-1 is relabelled by Cluster API: it stops matching, and its Cluster goes.
        await ws.client.patch_merge(
            CAPI_CLUSTERS, "prod-1", {"metadata": {"labels": {"env": "dev"}}}, namespace=ns
        )
        await gone(ws, ns, "prod-1")
        await wait_source(ws, ns, "NotAllImported", matched=1, made=0, conflicts=1)
        # The selector widened: dev-1 and prod-1 come (back).
        await ws.client.patch_merge(
            CLUSTER_SOURCES,
            "capi",
            {"spec": {"selector": {"matchLabels": None, "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]}]}}},
            namespace=ns,
        )  # fmt: skip
        await wait_source(ws, ns, "NotAllImported", matched=3, made=2, conflicts=1)
        # The hand-made Cluster deleted: the source makes its own.
        await ws.client.delete(api.CLUSTERS, "taken", namespace=ns)
        await wait_source(ws, ns, "Ready", matched=3, made=3, conflicts=0)
        taken = await ws.get_cluster(ns, "taken")
        assert taken["spec"]["kubeconfig"]["secretRef"]["name"] == "taken-kubeconfig"
        await cleanup(ws)


async def test_a_secret_its_capi_cluster_does_not_control_makes_no_cluster(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    """Name and label are anybody's to write who may create Secrets (a tenant's ExternalSecret
    template, a sealed secret): only the Secret its Cluster API cluster controls, as Cluster API
    writes it, is imported. One without an owner, one owned by another kind or by another
    cluster, one for no cluster at all: no Cluster, each listed. The ownerReference Cluster API
    writes imports it; taking it away deletes the Cluster and lets go of its Argo CD Secret, as
    when a Secret stops matching."""
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        bare = await capi_cluster(ws, ns, "bare", {})
        other = await capi_cluster(ws, ns, "other", {})
        for name in ("by-kind", "by-name"):
            await capi_cluster(ws, ns, name, {})
        holder = await ws.client.create(CONFIG_MAPS, {"metadata": {"name": "holder"}}, namespace=ns)
        await capi_secret(ws, ns, "bare", reg.kubeconfig, owners=[])
        await capi_secret(ws, ns, "by-kind", reg.kubeconfig, owners=[owned_by(holder)])
        await capi_secret(ws, ns, "by-name", reg.kubeconfig, owners=[owned_by(other)])
        await capi_secret(ws, ns, "nobody", reg.kubeconfig, owners=[])
        await source(ws, ns, labels={"fleet": "edge"})
        await ws.environment(ns, "edge", {"fleet": "edge"})
        listed = await wait_source(ws, ns, "NotAllImported", matched=4, made=0, notUsable=4)
        entries = {e["secret"]: e for e in listed["status"]["notImported"]}
        assert {k: (e["cluster"], e["reason"]) for k, e in entries.items()} == {
            f"{n}-kubeconfig": (n, "SecretNotOwned")
            for n in ("bare", "by-kind", "by-name", "nobody")
        }
        bare_fix = (
            "set that ownerReference (apiVersion cluster.x-k8s.io/v1beta1, kind Cluster, name "
            f"bare, uid {bare['metadata']['uid']}, controller true)"
        )
        assert entries["bare-kubeconfig"]["message"].startswith(
            "it has no controller ownerReference"
        )
        assert bare_fix in entries["bare-kubeconfig"]["message"]
        assert '"ConfigMap" "holder" of "v1"' in entries["by-kind-kubeconfig"]["message"]
        assert 'cluster "other", not by-name' in entries["by-name-kubeconfig"]["message"]
        assert entries["nobody-kubeconfig"]["message"].startswith(
            "no Cluster API cluster nobody exists in this namespace"
        )
        for entry in entries.values():
            assert "\n" not in entry["message"]
        assert reg.token not in str(listed)
        assert (await ws.client.list(api.CLUSTERS, namespace=ns))["items"] == []
        assert await ws.argocd_secrets() == []

        # The ownerReference Cluster API writes: imported, Ready, registered with Argo CD.
        owned = {"metadata": {"ownerReferences": [owned_by(bare)]}}
        await ws.client.patch_merge(SECRETS, "bare-kubeconfig", owned, namespace=ns)
        await wait_reason(ws, ns, "bare", "Ready")
        await wait_source(ws, ns, "NotAllImported", matched=4, made=1, notUsable=3)
        await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "an Argo CD Secret")

        # Taken away: the Secret is anybody's again; its Cluster goes and lets go of Argo CD.
        unowned = {"metadata": {"ownerReferences": None}}
        await ws.client.patch_merge(SECRETS, "bare-kubeconfig", unowned, namespace=ns)
        await gone(ws, ns, "bare")
        await wait_for(ws.argocd_secrets, lambda s: s == [], "the Argo CD Secret to be released")
        await wait_source(ws, ns, "NotAllImported", matched=4, made=0, notUsable=4)
        await cleanup(ws)


async def test_quiet_sources_write_nothing_and_a_restart_writes_nothing(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        for i in range(3):
            await capi_cluster(ws, ns, f"c{i}", {"env": "prod"})
            await capi_secret(ws, ns, f"c{i}", spoke_kubeconfig.kubeconfig)
        await source(ws, ns, selector={"matchLabels": {"env": "prod"}})
        async with manager(hub, ws.options()) as running:
            await wait_source(ws, ns, "Ready", matched=3, made=3)
            await running.wait_checked()
            before = (await get_source(ws, ns))["metadata"]["resourceVersion"]
            passes = running.dispatcher.sources_actor.passes
            # News that changes nothing: an unrelated label on a Secret, a Cluster API label.
            await ws.client.patch_merge(
                SECRETS, "c0-kubeconfig", {"metadata": {"labels": {"x": "y"}}}, namespace=ns
            )
            await passes_beyond(running, passes)
            after = (await get_source(ws, ns))["metadata"]["resourceVersion"]
            assert after == before
        clusters = {
            c["metadata"]["name"]: c["metadata"]["resourceVersion"]
            for c in (await ws.client.list(api.CLUSTERS, namespace=ns))["items"]
        }
        async with manager(hub, ws.options()) as running:
            await running.wait_checked()
            await passes_beyond(running, 0)
            assert (await get_source(ws, ns))["metadata"]["resourceVersion"] == before
            for c in (await ws.client.list(api.CLUSTERS, namespace=ns))["items"]:
                # The Clusters' own status may move with a check; their spec and labels do not.
                assert c["metadata"]["generation"] == 1
                assert c["metadata"]["name"] in clusters
            await cleanup(ws)


async def test_a_refused_create_is_listed_and_retried_with_backoff(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(retry_initial=0.2, retry_max=1.0)):
        ns = await ws.namespace()
        # An admission policy of the test's own refuses the Cluster, as a platform's might.
        run(hub.admin_kubeconfig, "apply", "-f", "-", input=REFUSE_WORK.format(ns=ns))

        def enforced() -> bool | None:
            probe = run(hub.admin_kubeconfig, "-n", ns, "create", "--dry-run=server", "-f", "-",
                        input=PROBE_CLUSTER, check=False)  # fmt: skip
            return True if "refused by the test" in probe.stderr else None

        wait_until(enforced, "the test's policy to refuse Cluster work")
        await capi_secret(ws, ns, "work", spoke_kubeconfig.kubeconfig)
        await source(ws, ns)
        status = (await wait_source(ws, ns, "NotAllImported", matched=1, made=0))["status"]
        entry = status["notImported"][0]
        assert entry["reason"] == "ClusterWriteFailed"
        assert "create of Cluster" in entry["message"]
        assert "refused by the test" in entry["message"]
        assert "\n" not in entry["message"]
        run(hub.admin_kubeconfig, "delete", "validatingadmissionpolicybinding",
            f"refuse-work-{ns}")  # fmt: skip
        await wait_source(ws, ns, "Ready", matched=1, made=1)
        await wait_reason(ws, ns, "work", "Ready")
        run(hub.admin_kubeconfig, "delete", "validatingadmissionpolicy", f"refuse-work-{ns}")
        await cleanup(ws)


async def test_deleting_the_source_deletes_its_clusters_and_releases_argocd(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await capi_secret(ws, ns, "work", spoke_kubeconfig.kubeconfig)
        await source(ws, ns, labels={"fleet": "edge"})
        await ws.environment(ns, "edge", {"fleet": "edge"})
        await wait_reason(ws, ns, "work", "Ready")
        await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "an Argo CD Secret")
        await ws.client.delete(CLUSTER_SOURCES, "capi", namespace=ns)
        await gone(ws, ns, "work")  # the garbage collector, through the ownerReference
        await wait_for(ws.argocd_secrets, lambda s: s == [], "the Argo CD Secret to be released")
        # The Secret is Cluster API's: it stays.
        await ws.client.get(SECRETS, "work-kubeconfig", namespace=ns)
        await cleanup(ws)


async def test_creates_refused_at_their_send_stop_the_pass_not_the_manager(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    """Shard 0's Lease goes while a pass's creates wait for their slots: each is refused at its
    send, and being side by side in a nursery they come out as a group. The pass stops and is
    tried again; the manager runs on, and makes the Clusters once it may write again."""
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(retry_initial=0.2, retry_max=0.5)) as running,
    ):
        actor = running.dispatcher.sources_actor
        refused = 0
        may_write = False

        def fence() -> bool:
            nonlocal refused
            refused += 0 if may_write else 1
            return may_write

        actor.writer = actor.writer.fenced(fence)
        ns = await ws.namespace()
        for name in ("one", "two", "three"):
            await capi_secret(ws, ns, name, spoke_kubeconfig.kubeconfig)
        await source(ws, ns)

        async def refusals() -> int:
            await trio.sleep(0.1)
            return refused

        # Three creates refused in the first pass, and a pass tried again after it (a group
        # that escaped would have ended the manager at the first).
        await wait_for(refusals, lambda n: n >= 6, "two passes' creates to be refused")
        assert running.dispatcher.sources_actor is actor
        with pytest.raises(errors.NotFound):
            await ws.get_cluster(ns, "one")
        may_write = True
        await wait_source(ws, ns, "Ready", matched=3, made=3)
        for name in ("one", "two", "three"):
            await wait_reason(ws, ns, name, "Ready")
        await cleanup(ws)
