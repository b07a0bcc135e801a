"""Status writes on the real hub: they report on the object they were given, never on a new one
of its name, and a status the schema refuses is not mistaken for that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kokumi.actors.writes import replace_status, write_status
from kokumi.core import api
from kokumi.core.api import Condition
from kokumi.kube import Client, Config, Invalid
from kokumi.testing.controlplane import APIServer
from tests.support.deploy import crds  # noqa: F401  (the session fixture installing the CRDs)

pytestmark = pytest.mark.usefixtures("crds")


@pytest.fixture
async def client(hub: APIServer) -> AsyncIterator[Client]:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as kube:
        yield kube


def _cluster(name: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"connection": "InCluster"},
    }


def _meta(obj: dict[str, Any]) -> api.Meta:
    return api.parse_cluster(obj).metadata


CONFLICT = api.ClusterStatus(
    server="https://s0.example:6443",
    observed_generation=1,
    conditions=(
        Condition(
            type="Ready",
            status="False",
            reason="ClusterConflict",
            message="server https://s0.example:6443 is already registered",
            last_transition_time="2026-01-01T00:00:00Z",
            observed_generation=1,
        ),
    ),
)


async def test_a_status_for_a_deleted_cluster_does_not_land_on_its_successor(
    client: Client, namespace: str
) -> None:
    old = await client.create(api.CLUSTERS, _cluster("b"), namespace=namespace)
    await client.delete(api.CLUSTERS, "b", namespace=namespace)
    new = await client.create(api.CLUSTERS, _cluster("b"), namespace=namespace)

    assert not await write_status(client, api.CLUSTERS, _meta(old), CONFLICT, unchanged=())
    current = await client.get(api.CLUSTERS, "b", namespace=namespace)
    assert "status" not in current
    assert current["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]

    assert await write_status(client, api.CLUSTERS, _meta(new), CONFLICT, unchanged=())
    current = await client.get(api.CLUSTERS, "b", namespace=namespace)
    assert current["status"]["conditions"][0]["reason"] == "ClusterConflict"


async def test_a_status_replaces_the_last_one_whole(client: Client, namespace: str) -> None:
    """A field the new status leaves out (a server no kubeconfig names any more) is gone."""
    made = await client.create(api.CLUSTERS, _cluster("c"), namespace=namespace)
    assert await write_status(client, api.CLUSTERS, _meta(made), CONFLICT, unchanged=())
    later = api.ClusterStatus(observed_generation=1)
    assert await write_status(client, api.CLUSTERS, _meta(made), later, unchanged=())
    current = await client.get(api.CLUSTERS, "c", namespace=namespace)
    assert current["status"] == {"observedGeneration": 1, "conditions": []}


async def test_a_status_the_schema_refuses_is_an_error_not_a_successor(
    client: Client, namespace: str
) -> None:
    made = await client.create(api.CLUSTERS, _cluster("d"), namespace=namespace)
    bad = {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "R", "message": "m"}]}
    with pytest.raises(Invalid):
        await replace_status(client, api.CLUSTERS, "d", namespace, made["metadata"]["uid"], bad)


async def test_a_status_for_a_cluster_gone_is_not_written(client: Client, namespace: str) -> None:
    made = await client.create(api.CLUSTERS, _cluster("e"), namespace=namespace)
    await client.delete(api.CLUSTERS, "e", namespace=namespace)
    assert not await write_status(client, api.CLUSTERS, _meta(made), CONFLICT, unchanged=())
