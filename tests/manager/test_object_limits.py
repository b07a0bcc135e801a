"""Objects over the bounds of tenant metadata, on the real hub, with the admission policy off.

The policy ``kokumi-object-limits`` refuses them at the door; where it is off, or the object
predates it, the manager must not keep them whole. The test unbinds the policy (if a test before
it installed it) for the writes that take the objects over the bounds, and binds it again, and
waits until it is enforced, before it ends: the same hub serves the whole session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from kokumi.core import api, limits
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.paths import resource_path
from kokumi.objects import Resource
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.manager import manager, ready_of, wait_for, wait_reason, workspace

BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
POLICY = "kokumi-object-limits"
# Over the count bound, a few KB in all: the bound, not the bulk, is what is tested here
# (benchmarks/object_limits.py measures the bulk).
MANY = {f"tenant.example/k{i:04d}": "v" for i in range(limits.LABELS_MAX + 36)}


async def _dry_run_refused(client: Client, namespace: str) -> bool:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": "probe", "namespace": namespace, "labels": MANY},
        "spec": {"connection": "InCluster"},
    }
    try:
        await client.request(
            "POST",
            resource_path(api.CLUSTERS, namespace=namespace),
            params={"dryRun": "All"},
            json=body,
        )
    except errors.KubeError:
        return True
    return False


@asynccontextmanager
async def admission_off(client: Client, namespace: str) -> AsyncIterator[None]:
    """The object limits' binding taken away while the body runs, then put back as it was."""
    try:
        binding = await client.get(BINDINGS, POLICY)
    except errors.NotFound:
        yield  # not installed in this session (yet): nothing refuses the writes
        return
    await client.delete(BINDINGS, POLICY)
    try:
        await wait_for(
            lambda: _dry_run_refused(client, namespace),
            lambda refused: not refused,
            "the object limits to stop being enforced",
        )
        yield
    finally:
        meta = binding["metadata"]
        await client.create(
            BINDINGS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": POLICY, "labels": meta.get("labels") or {}},
                "spec": binding["spec"],
            },
        )
        await wait_for(
            lambda: _dry_run_refused(client, namespace),
            bool,
            "the object limits to be enforced again",
            timeout=60,
        )


async def _ready_reason(read: Callable[[], Awaitable[dict[str, Any]]], reason: str) -> Any:
    return await wait_for(read, lambda o: ready_of(o).get("reason") == reason, f"Ready {reason}")


async def test_objects_over_the_bounds_are_reported_and_come_back_when_fixed(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    async with (
        workspace(hub) as ws,
        manager(hub, ws.options(keep_in_cluster=False)) as running,
    ):
        ns = await ws.namespace()
        client = ws.client
        await ws.kubeconfig_secret(ns, "spoke-kubeconfig", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "spoke", secret="spoke-kubeconfig", labels={"fleet": "edge"})
        await ws.environment(ns, "edge", {"fleet": "edge"})
        await wait_reason(ws, ns, "spoke", "Ready")
        await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "the Cluster registered")

        def cluster() -> Awaitable[dict[str, Any]]:
            return client.get(api.CLUSTERS, "spoke", namespace=ns)

        def environment() -> Awaitable[dict[str, Any]]:
            return client.get(api.ENVIRONMENTS, "edge", namespace=ns)

        def source() -> Awaitable[dict[str, Any]]:
            return client.get(CLUSTER_SOURCES, "capi", namespace=ns)

        huge = {"note": "x" * (limits.ANNOTATION_BYTES_MAX + 1)}
        async with admission_off(client, ns):
            # A registered Cluster grows over the bounds, an Environment's annotations do, and
            # a ClusterSource is made over them.
            await client.patch_merge(
                api.CLUSTERS, "spoke", {"metadata": {"labels": MANY}}, namespace=ns
            )
            await client.patch_merge(
                api.ENVIRONMENTS, "edge", {"metadata": {"annotations": huge}}, namespace=ns
            )
            await client.create(
                CLUSTER_SOURCES,
                {
                    "apiVersion": api.API_VERSION,
                    "kind": "ClusterSource",
                    "metadata": {"name": "capi", "namespace": ns, "labels": MANY},
                    "spec": {"from": "ClusterAPI"},
                },
                namespace=ns,
            )

        over = await _ready_reason(cluster, "ObjectTooLarge")
        ready = ready_of(over)
        assert ready["status"] == "False"
        assert ready["message"] == (
            f"metadata.labels has {len(MANY) + 1} entries of "
            f"{sum(len(k) + len(v) for k, v in MANY.items()) + len('fleetedge')} bytes (at most "
            "64 entries of 16384 bytes): remove labels until the Cluster is within the bounds; "
            "Kokumi ignores it until then"
        )
        # Let go of like any unusable Cluster: its Argo CD registration is released.
        await wait_for(ws.argocd_secrets, lambda s: s == [], "the registration released")
        env = ready_of(await _ready_reason(environment, "ObjectTooLarge"))
        assert env["status"] == "False" and "metadata.annotations has 1 entry" in env["message"]
        src = ready_of(await _ready_reason(source, "ObjectTooLarge"))
        assert src["status"] == "False" and "until the ClusterSource is within" in src["message"]
        # What the manager holds of them is a stub: no labels, no annotations.
        stores = (
            running.dispatcher.clusters.get(ns, "spoke"),
            running.dispatcher.environments.get(ns, "edge"),
            running.dispatcher.sources_actor.sources.get(ns, "capi"),
        )
        for kept in stores:
            assert kept is not None and limits.OVER_BOUNDS in kept
            assert set(kept["metadata"]) <= {
                "name", "namespace", "uid", "generation", "resourceVersion",
                "creationTimestamp", "deletionTimestamp", "finalizers",
            }  # fmt: skip

        # Fixed (the policy lets an object lose labels and annotations): back as before.
        trimmed: dict[str, str | None] = dict.fromkeys(MANY)
        await client.patch_merge(
            api.CLUSTERS, "spoke", {"metadata": {"labels": trimmed}}, namespace=ns
        )
        await client.patch_merge(
            api.ENVIRONMENTS, "edge", {"metadata": {"annotations": {"note": None}}}, namespace=ns
        )
        await client.patch_merge(
            CLUSTER_SOURCES, "capi", {"metadata": {"labels": trimmed}}, namespace=ns
        )
        await wait_reason(ws, ns, "spoke", "Ready")
        await wait_for(ws.argocd_secrets, lambda s: len(s) == 1, "the Cluster registered again")
        await wait_for(
            environment,
            lambda e: ready_of(e).get("reason") == "Ready",
            "the Environment Ready again",
        )
        await wait_for(
            source,
            lambda s: ready_of(s).get("reason") not in (None, "ObjectTooLarge"),
            "the ClusterSource to plan again",
        )
        assert running.dispatcher.clusters.get(ns, "spoke") is not None
        assert limits.OVER_BOUNDS not in (running.dispatcher.clusters.get(ns, "spoke") or {})
        await ws.cleanup()
