"""What a registration carries on the real hub: a Cluster's labels and annotations named by the
allow-lists, its Environments, its scope; each change one in-place update of the same Secret."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import Carry, Carrying
from kokumi.kube import errors
from kokumi.kube.resources import SECRETS
from kokumi.manager import Manager
from kokumi.objects import Resource
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import Workspace, holder_labels, manager, wait_for, workspace

CARRY = Carrying(
    Carry.parse(["fleet", "region", "app.kubernetes.io/*"]), Carry.parse(["example.com/*"])
)
ENV = "environment.delivery.kokumi.dev/"


def _labels(secret: Mapping[str, Any]) -> dict[str, str]:
    return dict(secret["metadata"].get("labels") or {})


def _annotations(secret: Mapping[str, Any]) -> dict[str, str]:
    return dict(secret["metadata"].get("annotations") or {})


def _data(secret: Mapping[str, Any], key: str) -> str | None:
    raw = (secret.get("data") or {}).get(key)
    return None if raw is None else base64.b64decode(raw).decode()


async def _secret_where(
    ws: Workspace, holder: tuple[str, str], test: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        for secret in await ws.argocd_secrets():
            if holder_labels(secret) == holder and test(secret):
                return secret
        return None

    secret: dict[str, Any] = await wait_for(found, bool, what)
    return secret


async def _label(ws: Workspace, namespace: str, name: str, labels: dict[str, Any]) -> None:
    patch = {"metadata": {"labels": labels}}
    await ws.client.patch_merge(api.CLUSTERS, name, patch, namespace=namespace)


def _carried(secret: Mapping[str, Any]) -> dict[str, str]:
    """The Secret's labels but Kokumi's four: what it carries."""
    own = {
        argocd.LABEL_SECRET_TYPE,
        argocd.LABEL_MANAGED_BY,
        argocd.LABEL_CLUSTER,
        argocd.LABEL_CLUSTER_NAMESPACE,
    }
    return {k: v for k, v in _labels(secret).items() if k not in own}


async def _writes(running: Manager, count: int) -> None:
    """The registry has written ``count`` times, no more: the hub may show a write before its
    answer reaches the registry, which counts it then."""

    async def counted() -> bool:
        return running.metrics.registry_writes >= count

    await wait_for(counted, bool, f"{count} registry writes")
    assert running.metrics.registry_writes == count


def _unchanged_but_labels(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "updated in place"
    assert after["data"] == before["data"]
    assert after["type"] == before["type"]
    assert holder_labels(after) == holder_labels(before)


async def _onboarded(
    ws: Workspace, reg: Registration, labels: dict[str, str], annotations: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    ns = await ws.namespace()
    await ws.kubeconfig_secret(ns, "kc", reg.kubeconfig)
    await ws.environment(ns, "edge", {"fleet": "edge"})
    metadata = {"name": "spoke", "namespace": ns, "labels": labels, "annotations": annotations}
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": metadata,
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "kc"}}},
    }
    await ws.client.create(api.CLUSTERS, body, namespace=ns)
    secret = await _secret_where(
        ws, (ns, "spoke"), lambda s: ENV + "edge" in _labels(s), "the Secret, with edge"
    )
    return ns, secret


async def test_labels_and_annotations_follow_the_cluster_in_place(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False, carry=CARRY)) as running,
    ):
        labels = {
            "fleet": "edge",
            "region": "eu",
            "tier": "not-named",
            "app.kubernetes.io/part-of": "shop",
            # Under a named prefix, but Kokumi's own: never carried, never over its own.
            "app.kubernetes.io/managed-by": "helm",
        }
        annotations = {"example.com/owner": "team-a", "other.example/x": "no"}
        ns, secret = await _onboarded(ws, spoke_kubeconfig, labels, annotations)
        # Onboarding is one write: the claim waited for the Environments, so the create
        # carried them.
        await _writes(running, 1)
        assert _carried(secret) == {
            "fleet": "edge",
            "region": "eu",
            "app.kubernetes.io/part-of": "shop",
            ENV + "edge": "true",
        }
        assert _labels(secret)[argocd.LABEL_MANAGED_BY] == "kokumi"

        # /metrics carries the same labels, for alerts routed by them.
        async def series() -> list[dict[str, str]]:
            text = generate_latest(running.metrics.exposition()).decode()
            return [
                s.labels
                for f in text_string_to_metric_families(text)
                if f.name == "kokumi_cluster_labels"
                for s in f.samples
                if s.labels.get("label_fleet") == "edge"
            ]

        (row,) = await wait_for(series, bool, "kokumi_cluster_labels of the Cluster")
        assert row == {
            "namespace": ns,
            "name": "spoke",
            "label_fleet": "edge",
            "label_region": "eu",
            "label_app_kubernetes_io_part_of": "shop",
        }
        assert _annotations(secret) == {
            "example.com/owner": "team-a",
            argocd.ANNOTATION_CARRIED_ANNOTATIONS: "example.com/owner",
            argocd.ANNOTATION_CARRIED_LABELS: "app.kubernetes.io/part-of,fleet,region",
        }

        # A label changed: one write, the same Secret.
        await _label(ws, ns, "spoke", {"region": "us"})
        moved = await _secret_where(
            ws, (ns, "spoke"), lambda s: _labels(s).get("region") == "us", "region us"
        )
        _unchanged_but_labels(secret, moved)
        await _writes(running, 2)

        # A label removed: it goes from the Secret, in place.
        await _label(ws, ns, "spoke", {"region": None})
        gone = await _secret_where(
            ws, (ns, "spoke"), lambda s: "region" not in _labels(s), "region removed"
        )
        _unchanged_but_labels(secret, gone)
        assert _carried(gone) == {
            "fleet": "edge",
            "app.kubernetes.io/part-of": "shop",
            ENV + "edge": "true",
        }
        await _writes(running, 3)

        # An annotation changed likewise.
        patch = {"metadata": {"annotations": {"example.com/owner": "team-b"}}}
        await ws.client.patch_merge(api.CLUSTERS, "spoke", patch, namespace=ns)
        owner = await _secret_where(
            ws,
            (ns, "spoke"),
            lambda s: _annotations(s).get("example.com/owner") == "team-b",
            "the new owner annotation",
        )
        _unchanged_but_labels(secret, owner)
        await _writes(running, 4)

        # A label nobody carries changes nothing on the Secret: the next change that does is
        # the one write after it (the Cluster's events are taken in order).
        await _label(ws, ns, "spoke", {"tier": "other"})
        await _label(ws, ns, "spoke", {"region": "eu"})
        await _secret_where(
            ws, (ns, "spoke"), lambda s: _labels(s).get("region") == "eu", "region eu"
        )
        await _writes(running, 5)
        await ws.cleanup()


async def test_environments_selecting_the_cluster_are_labels_in_place(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False)) as running,
    ):
        ns, secret = await _onboarded(ws, spoke_kubeconfig, {"fleet": "edge"}, {})
        # Nothing named: only the Environment is carried.
        assert _carried(secret) == {ENV + "edge": "true"}
        assert "annotations" not in secret["metadata"]
        long_name = "e" * 70
        await ws.environment(ns, long_name, {"fleet": "edge"})
        both = await _secret_where(
            ws, (ns, "spoke"), lambda s: len(_carried(s)) == 2, "a second Environment label"
        )
        _unchanged_but_labels(secret, both)
        hashed = next(k for k in _carried(both) if k != ENV + "edge")
        assert hashed.startswith(ENV + "e" * 46 + "-") and len(hashed.split("/")[1]) == 63
        await _writes(running, 2)

        await ws.client.delete(api.ENVIRONMENTS, "edge", namespace=ns)
        one = await _secret_where(
            ws, (ns, "spoke"), lambda s: ENV + "edge" not in _labels(s), "edge's label gone"
        )
        _unchanged_but_labels(secret, one)
        assert _carried(one) == {hashed: "true"}
        await _writes(running, 3)
        await ws.cleanup()


async def test_scope_is_written_as_argo_cds_namespaces_and_cluster_resources(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False)) as running,
    ):
        ns, secret = await _onboarded(ws, spoke_kubeconfig, {"fleet": "edge"}, {})
        assert _data(secret, "namespaces") is None
        scope = {"namespaces": ["team-a", "apps"], "clusterResources": True}
        await ws.client.patch_merge(api.CLUSTERS, "spoke", {"spec": {"scope": scope}}, namespace=ns)
        scoped = await _secret_where(
            ws, (ns, "spoke"), lambda s: _data(s, "namespaces") is not None, "namespaces"
        )
        assert scoped["metadata"]["uid"] == secret["metadata"]["uid"]
        assert _data(scoped, "namespaces") == "apps,team-a"
        assert _data(scoped, "clusterResources") == "true"
        assert _data(scoped, "config") == _data(secret, "config")
        await _writes(running, 2)
        await ws.client.patch_merge(
            api.CLUSTERS, "spoke", {"spec": {"scope": {"clusterResources": False}}}, namespace=ns
        )
        narrow = await _secret_where(
            ws, (ns, "spoke"), lambda s: _data(s, "clusterResources") is None, "no clusterResources"
        )
        assert _data(narrow, "namespaces") == "apps,team-a"
        assert narrow["metadata"]["uid"] == secret["metadata"]["uid"]
        await _writes(running, 3)
        await ws.cleanup()


async def test_a_handover_takes_the_new_holders_labels_in_the_same_update(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False, carry=CARRY)) as running,
    ):
        first, secret = await _onboarded(
            ws, spoke_kubeconfig, {"fleet": "edge", "region": "eu"}, {}
        )
        second = await ws.namespace()
        await ws.kubeconfig_secret(second, "kc", spoke_kubeconfig.kubeconfig)
        await ws.environment(second, "core", {"fleet": "core"})
        await ws.cluster(second, "spoke", secret="kc", labels={"fleet": "core"})

        async def waits() -> bool:
            cluster = await ws.get_cluster(second, "spoke")
            return any(
                c.get("reason") == "ClusterConflict"
                for c in (cluster.get("status") or {}).get("conditions", [])
            )

        await wait_for(waits, bool, "the second Cluster to wait")
        before = running.metrics.registry_writes  # the line recorded on the Secret counts
        await ws.client.delete(api.CLUSTERS, "spoke", namespace=first)
        taken = await _secret_where(
            ws, (second, "spoke"), lambda s: True, "the Secret handed to the second"
        )
        assert taken["metadata"]["uid"] == secret["metadata"]["uid"], "handed over in place"
        assert _carried(taken) == {"fleet": "core", ENV + "core": "true"}
        assert _annotations(taken) == {argocd.ANNOTATION_CARRIED_LABELS: "fleet"}
        await _writes(running, before + 1)
        await ws.cleanup()


_POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
)
_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)


@asynccontextmanager
async def _refusing(ws: Workspace, key: str, value: str) -> AsyncIterator[None]:
    """A policy that refuses any Secret in Argo CD's namespace labelled ``<key>: <value>``:
    a write the API server turns down, whoever sends it."""
    name = f"refuse-{ws.argocd}"
    policy = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["secrets"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"object.metadata.?labels[?'{key}'].orValue('') != '{value}'",
                    "message": "refused by the test",
                }
            ],
        },
    }
    binding = {
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ws.argocd}}
            },
        },
    }
    await ws.client.create(_POLICIES, policy)
    await ws.client.create(_BINDINGS, binding)
    probe = {"metadata": {"name": "probe", "labels": {key: value}}, "type": "Opaque"}

    async def refused() -> bool:
        try:
            await ws.client.create(SECRETS, probe, namespace=ws.argocd)
        except errors.KubeError:
            return True
        await ws.client.delete(SECRETS, "probe", namespace=ws.argocd)
        return False

    await wait_for(refused, bool, "the refusing policy in force")
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            for resource in (_BINDINGS, _POLICIES):
                try:
                    await ws.client.delete(resource, name)
                except errors.KubeError:
                    pass


async def test_a_refused_write_converges_to_the_holders_labels(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    options = dict(keep_in_cluster=False, carry=CARRY, retry_initial=0.2, retry_max=1.0)
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(**options)) as running,
        _refusing(ws, "region", "refused"),
    ):
        ns, secret = await _onboarded(ws, spoke_kubeconfig, {"fleet": "edge"}, {})
        await _label(ws, ns, "spoke", {"region": "refused"})

        async def retrying() -> bool:
            return bool(running.registry.out_of_step())

        await wait_for(retrying, bool, "the registry retrying the refused write")
        assert "region" not in _carried((await ws.argocd_secrets())[0])
        # The Cluster moves on before the write ever went through: the next one carries it.
        await _label(ws, ns, "spoke", {"region": "eu"})
        settled = await _secret_where(
            ws, (ns, "spoke"), lambda s: _labels(s).get("region") == "eu", "the labels now"
        )
        _unchanged_but_labels(secret, settled)
        assert _carried(settled) == {"fleet": "edge", "region": "eu", ENV + "edge": "true"}

        async def in_step() -> bool:
            return not running.registry.out_of_step()

        await wait_for(in_step, bool, "the registry in step again")
        await ws.cleanup()
