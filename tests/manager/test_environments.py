"""Environments on the real hub: selection drives registration, targets, their status."""

from __future__ import annotations

from typing import Any

from kokumi.core import api
from kokumi.core.registry.carry import environment_label
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import (
    Workspace,
    holder_labels,
    manager,
    wait_for,
    wait_reason,
    workspace,
)


async def _environment(ws: Workspace, namespace: str, name: str) -> dict[str, Any]:
    return await ws.client.get(api.ENVIRONMENTS, name, namespace=namespace)


async def _patch_labels(ws: Workspace, namespace: str, name: str, labels: dict[str, Any]) -> None:
    await ws.client.patch_merge(
        api.CLUSTERS, name, {"metadata": {"labels": labels}}, namespace=namespace
    )


async def _secrets_for(ws: Workspace, namespace: str) -> list[dict[str, Any]]:
    return [s for s in await ws.argocd_secrets() if holder_labels(s)[0] == namespace]


async def test_selection_drives_registration(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration, kubectl: Kubectl
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "spoke", secret="spoke-kubeconfig")
        await wait_reason(ws, ns, "spoke", "Ready")
        await ws.environment(ns, "edge", {"fleet": "edge"})
        env = await wait_for(
            lambda: _environment(ws, ns, "edge"),
            lambda e: e.get("status", {}).get("conditions"),
            "the Environment's status",
        )
        assert env["status"]["selected"] == 0
        assert not await _secrets_for(ws, ns), "unselected: not registered"

        # Relabel into the selector: registered, and the Environment deploys there.
        await _patch_labels(ws, ns, "spoke", {"fleet": "edge"})
        first = await wait_for(
            lambda: _secrets_for(ws, ns), lambda s: len(s) == 1, "the registration"
        )
        env = await wait_for(
            lambda: _environment(ws, ns, "edge"),
            lambda e: e.get("status", {}).get("deploying") == 1,
            "the Environment to deploy to spoke",
        )
        # A Cluster that deploys is counted, not listed: the list names only those that do not.
        assert env["status"].get("clusters", []) == []
        assert env["status"]["more"] == 0
        table = kubectl(hub, "get", "kenv", "-n", ns).stdout.splitlines()
        assert table[0].split()[:6] == [
            "NAME",
            "DELIVERY",
            "CLUSTERS",
            "DEPLOYING",
            "READY",
            "REASON",
        ]
        assert table[1].split()[:6] == ["edge", "ArgoCD", "1", "1", "True", "Ready"]

        # A second Environment selecting it by an expression; the first lets go: the same
        # Secret, its Environment labels updated in place.
        await ws.client.create(
            api.ENVIRONMENTS,
            {
                "apiVersion": api.API_VERSION,
                "kind": "Environment",
                "metadata": {"name": "eu", "namespace": ns},
                "spec": {
                    "clusterSelector": {
                        "matchExpressions": [
                            {"key": "region", "operator": "In", "values": ["eu", "us"]}
                        ]
                    }
                },
            },
            namespace=ns,
        )
        await _patch_labels(ws, ns, "spoke", {"region": "eu"})  # keeps fleet=edge
        await wait_for(
            lambda: _environment(ws, ns, "eu"),
            lambda e: e.get("status", {}).get("deploying") == 1,
            "eu to deploy to spoke",
        )
        await _patch_labels(ws, ns, "spoke", {"fleet": None})
        await wait_for(
            lambda: _environment(ws, ns, "edge"),
            lambda e: e.get("status", {}).get("selected") == 0,
            "edge to let go",
        )
        edge, eu = environment_label("edge"), environment_label("eu")
        still = await wait_for(
            lambda: _secrets_for(ws, ns),
            lambda found: [set(s["metadata"]["labels"]) & {edge, eu} for s in found] == [{eu}],
            "the Secret to name eu, not edge",
        )
        assert [s["metadata"]["uid"] for s in still] == [first[0]["metadata"]["uid"]]
        assert still[0]["data"] == first[0]["data"]

        # Editing eu's selector away from it: no Environment selects it, the Secret goes.
        await ws.client.patch_merge(
            api.ENVIRONMENTS,
            "eu",
            {"spec": {"clusterSelector": {"matchExpressions": None, "matchLabels": {"x": "y"}}}},
            namespace=ns,
        )
        await wait_for(lambda: _secrets_for(ws, ns), lambda s: s == [], "the Secret to go")
        await ws.cleanup()


async def test_two_in_cluster_clusters_of_one_environment_first_by_name_deploys(
    hub: APIServer, crds: object
) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        label = {api.IN_CLUSTER_LABEL: "true"}
        await ws.cluster(ns, "b-cluster", labels=label)
        await ws.cluster(ns, "a-cluster", labels=label)
        await ws.environment(ns, "local", label)
        expected = {"b-cluster": "ClusterConflict"}  # a-cluster deploys, so is not listed
        env = await wait_for(
            lambda: _environment(ws, ns, "local"),
            lambda e: (
                {r["name"]: r["target"] for r in e.get("status", {}).get("clusters", [])}
                == expected
                and e["status"].get("deploying") == 1
            ),
            "local to deploy to a-cluster and hold b-cluster (both Ready by then)",
        )
        assert (env["status"]["selected"], env["status"]["deploying"]) == (2, 1)
        conflict = next(r for r in env["status"]["clusters"] if r["name"] == "b-cluster")
        assert "a-cluster" in conflict["message"]
        assert not await ws.argocd_secrets(), "InCluster Clusters register nothing"
        await ws.cleanup()


async def test_invalid_selector_gets_a_clear_reason(hub: APIServer, crds: object) -> None:
    async with workspace(hub) as ws, manager(hub, ws.options(keep_in_cluster=False)):
        ns = await ws.namespace()
        await ws.client.create(
            api.ENVIRONMENTS,
            {
                "apiVersion": api.API_VERSION,
                "kind": "Environment",
                "metadata": {"name": "bad", "namespace": ns},
                "spec": {"clusterSelector": {"matchLabels": {"bad key!": "x"}}},
            },
            namespace=ns,
        )
        env = await wait_for(
            lambda: _environment(ws, ns, "bad"),
            lambda e: e.get("status", {}).get("conditions"),
            "the Environment's status",
        )
        ready = env["status"]["conditions"][0]
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSelector")
        assert "bad key!" in ready["message"]
        await ws.cleanup()
