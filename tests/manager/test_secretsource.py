"""Sources of labelled kubeconfig Secrets on the real hub: from Secrets, and from VCluster."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from kokumi.cmd.cluster.describe import describe_text
from kokumi.core import api
from kokumi.core.sources.bounds import Bounds
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.core.sources.vcluster import SERVICES
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.identity import Identity
from kokumi.kube.resources import SECRETS
from kokumi.objects import Resource
from kokumi.testing import canary
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import Workspace, manager, ready_of, wait_for, workspace
from tests.support.sources import (
    cleanup,
    get_source,
    gone,
    passes_beyond,
    wait_reason,
    wait_source,
)

MARK = {"kokumi.dev/kubeconfig": "true"}
#: A from: Secrets source over the marked Secrets, every context of each a Cluster.
EVERY_CONTEXT: dict[str, Any] = {
    "from": "Secrets",
    "secretSelector": {"matchLabels": MARK},
    "key": "kubeconfig",
    "contexts": "All",
}
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


async def secrets_writer(ws: Workspace, ns: str, user: str = "tenant") -> Client:
    """A client acting as ``user``, who may write Secrets in ``ns`` and nothing else: what a
    team's ExternalSecret template or sealed-secrets controller can do."""
    role = {
        "metadata": {"name": "secrets-writer", "namespace": ns},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get", "list", "create", "update", "patch", "delete"],
            }
        ],
    }
    await ws.client.create(ROLES, role, namespace=ns)
    binding = {
        "metadata": {"name": f"secrets-writer-{user}", "namespace": ns},
        "roleRef": {"apiGroup": ROLES.group, "kind": "Role", "name": "secrets-writer"},
        "subjects": [{"apiGroup": ROLES.group, "kind": "User", "name": user}],
    }
    await ws.client.create(ROLE_BINDINGS, binding, namespace=ns)
    return ws.client.acting_as(Identity(user=user))


async def labelled_secret(
    ws: Workspace, ns: str, name: str, labels: Mapping[str, str], key: str, kubeconfig: str
) -> dict[str, Any]:
    body = {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "data": {key: base64.b64encode(kubeconfig.encode()).decode()},
    }
    return await ws.client.create(SECRETS, body, namespace=ns)


async def vcluster_service(ws: Workspace, ns: str, name: str) -> dict[str, Any]:
    """The Service vcluster's chart makes for vcluster ``name`` (headless here: nothing runs)."""
    body = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app": "vcluster", "release": name, "vcluster.loft.sh/service": "true"},
        },
        "spec": {
            "clusterIP": "None",
            "ports": [{"name": "https", "port": 443, "targetPort": 8443}],
            "selector": {"app": "vcluster", "release": name},
        },
    }
    return await ws.client.create(SERVICES, body, namespace=ns)


async def vcluster_secret(
    ws: Workspace, ns: str, name: str, kubeconfig: str, *, owned: bool = True
) -> dict[str, Any]:
    """``vc-<name>`` as vcluster writes it: labelled, key config, and (setOwner, the default)
    owned by the vcluster's Service, made here if the test did not make it first."""
    labels = {"app": "vcluster", "vcluster-name": name}
    body: dict[str, Any] = {
        "metadata": {"name": f"vc-{name}", "namespace": ns, "labels": labels},
        "data": {"config": base64.b64encode(kubeconfig.encode()).decode()},
    }
    if owned:
        try:
            service = await ws.client.get(SERVICES, name, namespace=ns)
        except errors.NotFound:
            service = await vcluster_service(ws, ns, name)
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "name": name,
                "uid": service["metadata"]["uid"],
                "controller": False,
            }
        ]
    return await ws.client.create(SECRETS, body, namespace=ns)


async def rotate(ws: Workspace, ns: str, name: str, key: str, kubeconfig: str) -> None:
    data = {key: base64.b64encode(kubeconfig.encode()).decode()}
    await ws.client.patch_merge(SECRETS, name, {"data": data}, namespace=ns)


async def source(ws: Workspace, ns: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "ClusterSource",
        "metadata": {"name": name, "namespace": ns},
        "spec": dict(spec),
    }
    return await ws.client.create(CLUSTER_SOURCES, body, namespace=ns)


pytestmark = pytest.mark.usefixtures("crds")


async def test_a_labelled_secret_becomes_a_registered_cluster_and_goes_when_unlabelled(
    hub: APIServer, spoke: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        spec = {
            "from": "Secrets",
            "secretSelector": {"matchLabels": MARK},
            "key": "admin.conf",
            "naming": {"trimSuffix": "-admin-kubeconfig"},
            "labels": {"fleet": "edge"},
        }
        await source(ws, ns, "team", spec)
        ready = await wait_source(ws, ns, "Ready", "team", matched=0, made=0)
        assert (
            "no Secret of this namespace matches spec.secretSelector"
            in (ready_of(ready)["message"])
        )
        await ws.environment(ns, "edge", {"fleet": "edge"})
        # Another Secret of the namespace, labelled otherwise: not the source's.
        await labelled_secret(ws, ns, "other", {"team": "a"}, "admin.conf", reg.kubeconfig)

        # The Secret appears: a Cluster named after it, Ready, registered with Argo CD.
        name = "edge-1-admin-kubeconfig"
        await labelled_secret(ws, ns, name, {**MARK, "env": "prod"}, "admin.conf", reg.kubeconfig)
        cluster = await wait_reason(ws, ns, "edge-1", "Ready")
        assert cluster["metadata"]["labels"] == {
            **MARK,
            "env": "prod",
            "fleet": "edge",
            "delivery.kokumi.dev/cluster-source": "team",
        }
        assert cluster["spec"]["kubeconfig"]["secretRef"] == {"name": name, "key": "admin.conf"}
        assert cluster["status"]["server"] == spoke.url
        described = describe_text(cluster, [cluster], [], None, [])
        assert f"ClusterSource team (from Secret {name}); edit the source" in described
        status = (await wait_source(ws, ns, "Ready", "team", matched=1, made=1))["status"]
        assert status["notImported"] == []
        secrets = await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "an Argo CD Secret")
        assert base64.b64decode(secrets[0]["data"]["server"]).decode() == spoke.url

        # Rotated: the Cluster follows (a broken token, then the good one again).
        await rotate(ws, ns, name, "admin.conf", reg.variant(token=canary.token("rotated-away")))
        await wait_reason(ws, ns, "edge-1", "Unauthorized", timeout=15)
        await rotate(ws, ns, name, "admin.conf", reg.kubeconfig)
        await wait_reason(ws, ns, "edge-1", "Ready", timeout=15)
        # Rotated to a kubeconfig Kokumi refuses: the Cluster stays, the source says why.
        await rotate(ws, ns, name, "admin.conf", reg.variant(exec_plugin=True))
        listed = await wait_source(ws, ns, "NotAllImported", "team", notUsable=1, made=1)
        entry = listed["status"]["notImported"][0]
        assert (entry["secret"], entry["cluster"], entry["reason"]) == (
            name,
            "edge-1",
            "InvalidKubeconfig",
        )
        await ws.get_cluster(ns, "edge-1")
        await rotate(ws, ns, name, "admin.conf", reg.kubeconfig)
        await wait_source(ws, ns, "Ready", "team", matched=1, made=1)

        # The Secret stops matching (its label taken off): the Cluster goes, and Argo CD's too.
        await ws.client.patch_merge(
            SECRETS, name, {"metadata": {"labels": {"kokumi.dev/kubeconfig": None}}}, namespace=ns
        )
        await gone(ws, ns, "edge-1")
        await wait_for(ws.argocd_secrets, lambda s: s == [], "the Argo CD Secret to be released")
        await wait_source(ws, ns, "Ready", "team", matched=0, made=0)
        # The Secret itself is the team's: Kokumi never writes or deletes it.
        assert (await ws.client.get(SECRETS, name, namespace=ns))["data"]
        await cleanup(ws)


async def test_vclusters_secret_becomes_a_cluster_and_a_hand_made_one_is_left_alone(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    vc = {"app": "vcluster"}
    async with workspace(hub) as ws, manager(hub, ws.options()) as running:
        ns = await ws.namespace()
        await ws.kubeconfig_secret(ns, "mine", reg.kubeconfig)
        hand = await ws.cluster(ns, "taken", secret="mine", labels={"team": "a"})
        await source(ws, ns, "vclusters", {"from": "VCluster"})
        await vcluster_secret(ws, ns, "dev", reg.kubeconfig)
        await vcluster_secret(ws, ns, "taken", reg.kubeconfig)
        # vcluster's other Secrets carry app: vcluster too, and are not kubeconfigs.
        await labelled_secret(ws, ns, "dev-certs", vc, "ca.crt", "not a kubeconfig")
        dev = await wait_reason(ws, ns, "dev", "Ready")
        assert dev["spec"]["kubeconfig"]["secretRef"] == {"name": "vc-dev", "key": "config"}
        assert dev["spec"]["description"] == "vcluster dev, from ClusterSource vclusters"
        status = await wait_source(
            ws, ns, "NotAllImported", "vclusters", matched=2, made=1, conflicts=1
        )
        entry = status["status"]["notImported"][0]
        assert (entry["secret"], entry["cluster"], entry["reason"]) == (
            "vc-taken",
            "taken",
            "ClusterConflict",
        )
        assert "not made by this ClusterSource: the source leaves it alone" in entry["message"]
        assert "1 of 2 matched vcluster kubeconfig Secrets" in ready_of(status)["message"]
        # News that changes nothing (vcluster's other Secret relabelled): nothing is written.
        before = status["metadata"]["resourceVersion"]
        passes = running.dispatcher.sources_actor.passes
        await ws.client.patch_merge(
            SECRETS, "dev-certs", {"metadata": {"labels": {"x": "y"}}}, namespace=ns
        )
        await passes_beyond(running, passes)
        assert (await get_source(ws, ns, "vclusters"))["metadata"]["resourceVersion"] == before
        still = await ws.get_cluster(ns, "taken")
        assert still["metadata"]["uid"] == hand["metadata"]["uid"]
        assert still["metadata"]["labels"] == {"team": "a"}
        assert still["spec"]["kubeconfig"]["secretRef"]["name"] == "mine"
        assert "ownerReferences" not in still["metadata"]

        # The hand-made Cluster deleted: the source makes its own.
        await ws.client.delete(api.CLUSTERS, "taken", namespace=ns)
        await wait_source(ws, ns, "Ready", "vclusters", matched=2, made=2, conflicts=0)
        taken = await ws.get_cluster(ns, "taken")
        assert taken["spec"]["kubeconfig"]["secretRef"]["name"] == "vc-taken"
        # The vcluster deleted: its Secret goes, and so does its Cluster.
        await ws.client.delete(SECRETS, "vc-dev", namespace=ns)
        await gone(ws, ns, "dev")
        with pytest.raises(errors.NotFound):
            await ws.get_cluster(ns, "dev")
        await wait_source(ws, ns, "Ready", "vclusters", matched=1, made=1)
        await cleanup(ws)


def with_contexts(kubeconfig: str, *names: str) -> str:
    """The spoke's kubeconfig with its one context under each of ``names`` (current: the first)."""
    doc = yaml.safe_load(kubeconfig)
    (context,) = doc["contexts"]
    doc["contexts"] = [{"name": n, "context": dict(context["context"])} for n in names]
    doc["current-context"] = names[0]
    return yaml.safe_dump(doc)


async def test_every_context_of_a_secret_is_a_cluster_and_follows_the_contexts(
    hub: APIServer, spoke: APIServer, spoke_kubeconfig: Registration
) -> None:
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        await source(ws, ns, "fleet", EVERY_CONTEXT)
        text = with_contexts(reg.kubeconfig, "edge-1", "edge-2")
        await labelled_secret(ws, ns, "fleet-kubeconfigs", MARK, "kubeconfig", text)
        for name in ("edge-1", "edge-2"):
            cluster = await wait_reason(ws, ns, name, "Ready")
            assert cluster["spec"]["kubeconfig"] == {
                "secretRef": {"name": "fleet-kubeconfigs", "key": "kubeconfig"},
                "context": name,
            }
            assert cluster["status"]["server"] == spoke.url
        await wait_source(ws, ns, "Ready", "fleet", matched=2, made=2)

        # A third context appears, edge-1 goes: a Cluster appears, edge-1's goes.
        await rotate(ws, ns, "fleet-kubeconfigs", "kubeconfig",
                     with_contexts(reg.kubeconfig, "edge-2", "edge-3"))  # fmt: skip
        await wait_reason(ws, ns, "edge-3", "Ready")
        await gone(ws, ns, "edge-1")
        await wait_source(ws, ns, "Ready", "fleet", matched=2, made=2)
        # One context's credential rotated away: that Cluster says so, the other is Ready.
        broken = yaml.safe_load(with_contexts(reg.kubeconfig, "edge-2", "edge-3"))
        broken["users"].append({"name": "rotated", "user": {"token": canary.token("gone")}})
        broken["contexts"][1]["context"]["user"] = "rotated"
        await rotate(ws, ns, "fleet-kubeconfigs", "kubeconfig", yaml.safe_dump(broken))
        await wait_reason(ws, ns, "edge-3", "Unauthorized", timeout=15)
        await wait_reason(ws, ns, "edge-2", "Ready")
        # The whole kubeconfig broken by a rotation: both Clusters stay.
        await rotate(ws, ns, "fleet-kubeconfigs", "kubeconfig", "{{{ not yaml")
        await wait_source(ws, ns, "NotAllImported", "fleet", made=2, notUsable=2)
        await ws.get_cluster(ns, "edge-2")
        await ws.get_cluster(ns, "edge-3")
        # The Secret deleted: both go.
        await ws.client.delete(SECRETS, "fleet-kubeconfigs", namespace=ns)
        await gone(ws, ns, "edge-2")
        await gone(ws, ns, "edge-3")
        await wait_source(ws, ns, "Ready", "fleet", matched=0, made=0)
        await cleanup(ws)


#: (spec beside the selector, the real Secret, the planted one, each one's labels, its text)
TAKEOVERS: dict[str, tuple[dict[str, Any], str, str, dict[str, str], bool]] = {
    "trimmed": ({"naming": {"trimSuffix": "-kubeconfig"}}, "prod-kubeconfig", "prod", {}, False),
    "label": ({"naming": {"label": "cluster"}}, "real", "a-planted", {"cluster": "prod"}, False),
    "contexts": ({"contexts": "All"}, "real", "a-planted", {}, True),
}


@pytest.mark.parametrize("shape", sorted(TAKEOVERS))
async def test_a_planted_secret_never_takes_over_a_cluster_and_waits_listed(
    hub: APIServer, spoke: APIServer, spoke_kubeconfig: Registration, shape: str
) -> None:
    """A user who may only write Secrets adds one that names an existing Cluster and sorts
    first (by its trimmed name, by its naming label, by a context of the same name): the
    Cluster keeps reading the Secret it was made from, the planted one is listed as a conflict
    naming both (never the credential). Once the real one is gone, the planted one takes the
    Cluster over in place: the same object, not a delete and a create."""
    reg = spoke_kubeconfig
    extra, real, planted, labels, contexts = TAKEOVERS[shape]
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        tenant = await secrets_writer(ws, ns)
        with pytest.raises(errors.Forbidden):
            await tenant.list(api.CLUSTERS, namespace=ns)
        spec = {"from": "Secrets", "secretSelector": {"matchLabels": MARK}, "key": "kubeconfig"}
        await source(ws, ns, "team", {**spec, **extra})
        text = with_contexts(reg.kubeconfig, "prod") if contexts else reg.kubeconfig
        await labelled_secret(ws, ns, real, {**MARK, **labels}, "kubeconfig", text)
        held = await wait_reason(ws, ns, "prod", "Ready")
        await wait_source(ws, ns, "Ready", "team", matched=1, made=1)

        planted_token = canary.token("planted")
        bad = reg.variant(token=planted_token)
        body = {
            "metadata": {"name": planted, "namespace": ns, "labels": {**MARK, **labels}},
            "data": {
                "kubeconfig": base64.b64encode(
                    (with_contexts(bad, "prod") if contexts else bad).encode()
                ).decode()
            },
        }
        await tenant.create(SECRETS, body, namespace=ns)
        listed = await wait_source(ws, ns, "NotAllImported", "team", matched=2, made=1, conflicts=1)
        (entry,) = listed["status"]["notImported"]
        assert (entry["secret"], entry["cluster"], entry["reason"]) == (
            planted,
            "prod",
            "ClusterConflict",
        )
        holder = f"context prod of Secret {real}" if contexts else f"Secret {real}"
        assert f"{holder} of this source has Cluster prod" in entry["message"]
        assert f"Secret {planted} names it too and waits" in entry["message"]
        assert planted_token not in str(listed) and reg.token not in str(listed)
        cluster = await wait_reason(ws, ns, "prod", "Ready")
        assert cluster["metadata"]["uid"] == held["metadata"]["uid"]
        assert cluster["spec"]["kubeconfig"]["secretRef"] == {"name": real, "key": "kubeconfig"}

        # The Secret the Cluster was made from goes: the waiting one takes it over in place.
        await ws.client.delete(SECRETS, real, namespace=ns)
        await wait_source(ws, ns, "Ready", "team", matched=1, made=1, conflicts=0)
        handed = await wait_reason(ws, ns, "prod", "Unauthorized")
        assert handed["metadata"]["uid"] == held["metadata"]["uid"]
        assert handed["spec"]["kubeconfig"]["secretRef"]["name"] == planted
        await cleanup(ws)


async def test_a_planted_vc_secret_without_its_vcluster_makes_no_cluster(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    """A user who may only write Secrets writes vc-evil as vcluster labels its Secret: no
    vcluster evil runs there (no Service evil, which vcluster's chart makes and vcluster names
    as the Secret's owner), so no Cluster, and the source lists it with the fix. A vc-<name>
    owned by something else than its vcluster's Service is listed too; vcluster's own Secret,
    beside its Service, is a Cluster, and goes once the Service does."""
    reg = spoke_kubeconfig
    async with workspace(hub) as ws, manager(hub, ws.options()):
        ns = await ws.namespace()
        tenant = await secrets_writer(ws, ns)
        with pytest.raises(errors.Forbidden):
            await tenant.list(SERVICES, namespace=ns)
        await source(ws, ns, "vclusters", {"from": "VCluster"})
        await vcluster_secret(ws, ns, "dev", reg.kubeconfig)
        await wait_reason(ws, ns, "dev", "Ready")
        planted_token = canary.token("planted-vcluster")
        planted = reg.variant(token=planted_token)
        for name, owners in (
            ("evil", []),
            # vcluster dev's Service named as the owner of another vcluster's Secret.
            (
                "dev2",
                [
                    dict(
                        (await ws.client.get(SECRETS, "vc-dev", namespace=ns))["metadata"][
                            "ownerReferences"
                        ][0]
                    )
                ],
            ),
        ):
            body = {
                "metadata": {
                    "name": f"vc-{name}",
                    "namespace": ns,
                    "labels": {"app": "vcluster", "vcluster-name": name},
                    "ownerReferences": owners,
                },
                "data": {"config": base64.b64encode(planted.encode()).decode()},
            }
            await tenant.create(SECRETS, body, namespace=ns)
        await ws.client.create(
            SERVICES,
            {
                "metadata": {"name": "dev2", "labels": {"app": "vcluster", "release": "dev2"}},
                "spec": {"clusterIP": "None", "ports": [{"port": 443}]},
            },
            namespace=ns,
        )
        listed = await wait_source(
            ws, ns, "NotAllImported", "vclusters", matched=3, made=1, notUsable=2
        )
        entries = {e["secret"]: e for e in listed["status"]["notImported"]}
        assert {k: (e["cluster"], e["reason"]) for k, e in entries.items()} == {
            "vc-evil": ("evil", "SecretNotOwned"),
            "vc-dev2": ("dev2", "SecretNotOwned"),
        }
        assert entries["vc-evil"]["message"].startswith("no vcluster evil runs in this namespace")
        assert "else delete it" in entries["vc-evil"]["message"]
        assert '"Service" "dev" of "v1", not vcluster dev2' in entries["vc-dev2"]["message"]
        assert (
            "set that ownerReference (apiVersion v1, kind Service, name dev2"
            in (entries["vc-dev2"]["message"])
        )
        assert planted_token not in str(listed) and reg.token not in str(listed)
        for name in ("evil", "dev2"):
            with pytest.raises(errors.NotFound):
                await ws.get_cluster(ns, name)

        # vcluster solo runs with setOwner false: its Secret has no owner, its Service vouches.
        await vcluster_service(ws, ns, "solo")
        await vcluster_secret(ws, ns, "solo", reg.kubeconfig, owned=False)
        await wait_reason(ws, ns, "solo", "Ready")
        await wait_source(ws, ns, "NotAllImported", "vclusters", matched=4, made=2, notUsable=2)
        # Its Service goes (the Secret, owned by nothing, stays): its Cluster goes too.
        await ws.client.delete(SERVICES, "solo", namespace=ns)
        await gone(ws, ns, "solo")
        listed = await wait_source(
            ws, ns, "NotAllImported", "vclusters", matched=4, made=1, notUsable=3
        )
        solo = {e["secret"]: e for e in listed["status"]["notImported"]}["vc-solo"]
        assert solo["message"].startswith("no vcluster solo runs in this namespace")


async def test_a_secret_of_2000_contexts_makes_clusters_up_to_the_bounds_and_says_so(
    hub: APIServer, spoke_kubeconfig: Registration
) -> None:
    """One tenant's Secret of 2,000 contexts (93 KiB) made 2,000 Clusters and kept the loop for a
    minute: it is read once, off the loop, and the manager's bounds cut it, in the status."""
    reg = spoke_kubeconfig
    limits = Bounds(contexts_per_secret=3, clusters_per_source=4)
    async with workspace(hub) as ws, manager(hub, ws.options(source_bounds=limits)):
        ns = await ws.namespace()
        await source(ws, ns, "fleet", EVERY_CONTEXT)
        names = [f"edge-{i:04d}" for i in range(2000)]
        text = with_contexts(reg.kubeconfig, *names)
        await labelled_secret(ws, ns, "a-fleet", MARK, "kubeconfig", text)
        cut = await wait_source(ws, ns, "TooManyContexts", "fleet", matched=3, made=3)
        ready = ready_of(cut)
        assert ready["status"] == "False"
        assert ready["message"].startswith(
            "1 matched Secret has more than 3 contexts (--max-contexts-per-secret)"
        )
        (entry,) = cut["status"]["notImported"]
        assert (entry["secret"], entry["reason"]) == ("a-fleet", "TooManyContexts")
        assert "it has 2,000 contexts" in entry["message"]
        for name in names[:3]:
            await wait_reason(ws, ns, name, "Ready")
        listed = await ws.client.list(api.CLUSTERS, namespace=ns)
        assert sorted(c["metadata"]["name"] for c in listed["items"]) == names[:3]

        # Another Secret: one Cluster more, up to the source's bound; the other waits, listed.
        await labelled_secret(ws, ns, "b-more", MARK, "kubeconfig",
                              with_contexts(reg.kubeconfig, "more-1", "more-2"))  # fmt: skip
        both = await wait_source(ws, ns, "TooManyContexts", "fleet", matched=5, made=4)
        message = ready_of(both)["message"]
        assert "1 Cluster is not made: one ClusterSource keeps at most 4" in message
        waiting = [e for e in both["status"]["notImported"] if e["reason"] == "TooManyClusters"]
        assert [(e["secret"], e["cluster"]) for e in waiting] == [("b-more", "more-2")]
        await wait_reason(ws, ns, "more-1", "Ready")
        await cleanup(ws)
