"""The in-cluster keeper on the real hub: it creates, re-creates, and otherwise leaves things alone.

A fresh namespace stands in for the manager's own. Where a test must show that the keeper did *not*
write, it runs the keeper with a short fallback interval, lets many checks pass, and compares
``resourceVersion``: any write, even one that changed nothing visible, would move it.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
import trio

from kokumi.actors.incluster import (
    CLUSTERS,
    ENVIRONMENTS,
    IN_CLUSTER_LABEL,
    ensure_in_cluster,
    keep_in_cluster,
)
from kokumi.kube import Client, Config, NotFound
from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import crds  # noqa: F401  (the session fixture installing the CRDs)

pytestmark = pytest.mark.usefixtures("crds")

T = TypeVar("T")

# Long enough that only the watch can explain a re-creation within a test.
NO_FALLBACK = 3600.0


@pytest.fixture
async def client(hub: APIServer) -> AsyncIterator[Client]:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as kube:
        yield kube


@contextlib.asynccontextmanager
async def keeper(client: Client, namespace: str, interval: float) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(keep_in_cluster, client, namespace, interval=interval)
        )
        yield
        nursery.cancel_scope.cancel()


async def eventually(attempt: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Poll until ``attempt`` returns something; fail with ``what`` after 20 s."""
    with trio.move_on_after(20):
        while True:
            outcome = await attempt()
            if outcome is not None:
                return outcome
            await trio.sleep(0.05)
    raise AssertionError(f"gave up waiting until {what}")


async def get(client: Client, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
    resource = CLUSTERS if kind == "Cluster" else ENVIRONMENTS
    try:
        return await client.get(resource, name, namespace=namespace)
    except NotFound:
        return None


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def assert_as_created(cluster: dict[str, Any], environment: dict[str, Any]) -> None:
    assert labels(cluster) == {IN_CLUSTER_LABEL: "true"}
    assert cluster["spec"] == {
        "description": "The cluster Kokumi runs in",
        "connection": "InCluster",
    }
    assert environment["spec"] == {
        "description": "The cluster Kokumi runs in",
        "clusterSelector": {"matchLabels": {IN_CLUSTER_LABEL: "true"}},
        "delivery": "ArgoCD",
    }


async def test_both_exist_once_the_keeper_has_started(client: Client, namespace: str) -> None:
    async with keeper(client, namespace, NO_FALLBACK):
        cluster = await get(client, "Cluster", "in-cluster", namespace)
        environment = await get(client, "Environment", "local", namespace)
        assert cluster is not None
        assert environment is not None
        assert_as_created(cluster, environment)


async def test_deleted_objects_come_back_through_the_watch(client: Client, namespace: str) -> None:
    async with keeper(client, namespace, NO_FALLBACK):
        before = {
            kind: await get(client, kind, name, namespace)
            for kind, name in (("Cluster", "in-cluster"), ("Environment", "local"))
        }
        await client.delete(ENVIRONMENTS, "local", namespace=namespace)
        await client.delete(CLUSTERS, "in-cluster", namespace=namespace)

        async def recreated(kind: str, name: str) -> dict[str, Any] | None:
            obj = await get(client, kind, name, namespace)
            old = before[kind]
            assert old is not None
            if obj is None or obj["metadata"]["uid"] == old["metadata"]["uid"]:
                return None
            return obj

        cluster = await eventually(lambda: recreated("Cluster", "in-cluster"), "in-cluster is back")
        environment = await eventually(lambda: recreated("Environment", "local"), "local is back")
        assert_as_created(cluster, environment)


async def test_edits_are_kept_and_labels_never_touched(client: Client, namespace: str) -> None:
    """The admin narrows local and relabels in-cluster, removing the label local selected it by."""
    async with keeper(client, namespace, interval=0.05):
        await client.patch_merge(
            ENVIRONMENTS,
            "local",
            {"spec": {"clusterSelector": {"matchLabels": {"tier": "dev", IN_CLUSTER_LABEL: None}}}},
            namespace=namespace,
        )
        await client.patch_merge(
            CLUSTERS,
            "in-cluster",
            {"metadata": {"labels": {"tier": "dev", IN_CLUSTER_LABEL: None}}},
            namespace=namespace,
        )
        edited = {
            "Cluster": await get(client, "Cluster", "in-cluster", namespace),
            "Environment": await get(client, "Environment", "local", namespace),
        }
        await trio.sleep(1.0)  # some twenty fallback checks
        cluster = await get(client, "Cluster", "in-cluster", namespace)
        environment = await get(client, "Environment", "local", namespace)
    assert cluster == edited["Cluster"]
    assert environment == edited["Environment"]
    assert cluster is not None
    assert environment is not None
    assert labels(cluster) == {"tier": "dev"}
    assert environment["spec"]["clusterSelector"] == {"matchLabels": {"tier": "dev"}}


async def test_no_other_cluster_is_ever_labelled(
    client: Client, hub: APIServer, namespace: str, kubectl: Kubectl
) -> None:
    other = (
        "apiVersion: delivery.kokumi.dev/v1alpha1\nkind: Cluster\n"
        "metadata: {name: also-in-cluster, labels: {team: a}}\n"
        "spec: {connection: InCluster}\n"
    )
    kubectl(hub, "-n", namespace, "create", "-f", "-", input=other)
    async with keeper(client, namespace, interval=0.05):
        created = await get(client, "Cluster", "also-in-cluster", namespace)
        # A re-creation of in-cluster is the moment a careless keeper would label the wrong one.
        await client.delete(CLUSTERS, "in-cluster", namespace=namespace)
        await eventually(lambda: get(client, "Cluster", "in-cluster", namespace), "in-cluster")
        await trio.sleep(0.5)
        after = await get(client, "Cluster", "also-in-cluster", namespace)
    assert after == created
    assert after is not None
    assert labels(after) == {"team": "a"}


async def test_ensure_reports_what_it_created(client: Client, namespace: str) -> None:
    assert await ensure_in_cluster(client, namespace) == ["Cluster/in-cluster", "Environment/local"]
    assert await ensure_in_cluster(client, namespace) == []
    await client.delete(ENVIRONMENTS, "local", namespace=namespace)
    assert await ensure_in_cluster(client, namespace) == ["Environment/local"]


async def test_a_missing_namespace_is_waited_for(
    client: Client, hub: APIServer, kubectl: Kubectl
) -> None:
    """The keeper starts, and does not fail, before its namespace exists; it creates both after.

    With the fallback interval an hour, only the quick retry after a failure can explain it: the
    same path that notices CRDs installed after the manager.
    """
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    try:
        async with keeper(client, namespace, NO_FALLBACK):
            assert await get(client, "Cluster", "in-cluster", namespace) is None
            kubectl(hub, "create", "namespace", namespace)
            await eventually(lambda: get(client, "Cluster", "in-cluster", namespace), "in-cluster")
            await eventually(lambda: get(client, "Environment", "local", namespace), "local")
    finally:
        kubectl(hub, "delete", "namespace", namespace, "--wait=false", check=False)
