"""A ClusterSource's ``spec.scope`` on the real hub: every Cluster it makes carries it, and a change
of the source's scope (or a hand edit of a Cluster's) is made on each Cluster in place."""

from __future__ import annotations

from typing import Any

import pytest

from kokumi.core import api
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube import errors
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.manager.test_secretsource import MARK, labelled_secret, source
from tests.support.manager import Workspace, manager, wait_for, workspace
from tests.support.sources import cleanup, wait_source

pytestmark = pytest.mark.usefixtures("crds")


async def scopes(ws: Workspace, ns: str) -> dict[str, tuple[str, Any]]:
    """Each Cluster of the namespace: its uid and its spec.scope (None: unset)."""
    listed = await ws.client.list(api.CLUSTERS, namespace=ns)
    return {
        c["metadata"]["name"]: (c["metadata"]["uid"], c["spec"].get("scope"))
        for c in listed["items"]
    }


async def test_the_sources_scope_goes_on_every_cluster_and_follows_the_source(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        spec = {
            "from": "Secrets",
            "secretSelector": {"matchLabels": MARK},
            "key": "value",
            "labels": {"fleet": "edge"},
            "scope": {"namespaces": ["team-a"]},
        }
        await source(ws, ns, "team", spec)
        for name in ("edge-1", "edge-2"):
            await labelled_secret(ws, ns, name, MARK, "value", reg.kubeconfig)
        await wait_source(ws, ns, "Ready", "team", matched=2, made=2)
        first = await wait_for(
            lambda: scopes(ws, ns),
            lambda s: len(s) == 2 and all(v[1] == {"namespaces": ["team-a"]} for v in s.values()),
            "both Clusters with the source's scope",
        )
        uids = {name: uid for name, (uid, _) in first.items()}

        # The source's scope changes: each Cluster is updated in place (same uid).
        wider = {"namespaces": ["team-a", "team-b"], "clusterResources": True}
        await ws.client.patch_merge(
            CLUSTER_SOURCES, "team", {"spec": {"scope": wider}}, namespace=ns
        )
        changed = await wait_for(
            lambda: scopes(ws, ns),
            lambda s: all(v[1] == wider for v in s.values()),
            "both Clusters with the wider scope",
        )
        assert {name: uid for name, (uid, _) in changed.items()} == uids

        # A hand edit of one Cluster's scope is undone: the source is where to edit it.
        await ws.client.patch_merge(
            api.CLUSTERS, "edge-1", {"spec": {"scope": {"clusterResources": None}}},
            namespace=ns,
        )  # fmt: skip
        await wait_for(
            lambda: scopes(ws, ns),
            lambda s: s["edge-1"][1] == wider,
            "the hand edit undone",
        )

        # Narrowed without cluster-scoped resources: clusterResources goes, not only its value.
        await ws.client.patch_merge(
            CLUSTER_SOURCES, "team",
            {"spec": {"scope": {"namespaces": ["team-b"], "clusterResources": None}}},
            namespace=ns,
        )  # fmt: skip
        await wait_for(
            lambda: scopes(ws, ns),
            lambda s: all(v[1] == {"namespaces": ["team-b"]} for v in s.values()),
            "both Clusters with the narrower scope",
        )

        # The source's scope removed: the Clusters' scope goes, and they stay the same objects.
        await ws.client.patch_merge(
            CLUSTER_SOURCES, "team", {"spec": {"scope": None}}, namespace=ns
        )
        gone = await wait_for(
            lambda: scopes(ws, ns),
            lambda s: all(v[1] is None for v in s.values()),
            "both Clusters without a scope",
        )
        assert {name: uid for name, (uid, _) in gone.items()} == uids
        await cleanup(ws)


async def test_a_scope_the_crd_refuses_is_refused_on_the_source_at_admission(
    hub: APIServer,
) -> None:
    async with workspace(hub) as ws:
        ns = await ws.namespace()
        spec = {
            "from": "Secrets",
            "secretSelector": {"matchLabels": MARK},
            "scope": {"clusterResources": True},
        }
        with pytest.raises(errors.Invalid) as refused:
            await source(ws, ns, "team", spec)
        assert "spec.scope.clusterResources needs spec.scope.namespaces" in str(refused.value)
        spec["scope"] = {"namespaces": ["Team-A"]}
        with pytest.raises(errors.Invalid):
            await source(ws, ns, "team", spec)
