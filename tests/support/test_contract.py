"""The API contract the actors rely on, asserted once and run on two servers: the fake and the hub.

``tests/support/fakeapi.py`` stands in for the hub in the model test of the actors; it is only worth
anything if it answers as the real kube-apiserver does. Every test here takes ``server``, which
is a ``kokumi.kube.Client`` on ``FakeApi`` (``fake``) or on the real hub (``hub``), with a fresh
namespace of its own. When the two disagree, the hub is right and the fake gets fixed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio

from kokumi.core import api
from kokumi.core.sources.clusterapi import CAPI_CLUSTERS
from kokumi.kube import (
    CONFIG_MAPS,
    NAMESPACES,
    SECRETS,
    AlreadyExists,
    BadRequest,
    Client,
    Config,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    Resource,
    Resync,
    ServerError,
    Store,
    WatchEvent,
    watch,
)
from kokumi.kube.errors import error_from_status
from kokumi.kube.paths import resource_path
from kokumi.kube.wire import METADATA_LIST, METADATA_OBJECT
from tests.support.fakeapi import CAPI_CLUSTERS as FAKE_CAPI_CLUSTERS
from tests.support.fakeapi import DEFAULT_KINDS, FakeApi

Obj = dict[str, Any]
FINALIZER = "contract.kokumi.dev/hold"


@attrs.frozen
class Backend:
    name: str
    config: Config
    namespace: str
    transport: FakeApi | None


@attrs.frozen
class Server:
    name: str
    client: Client
    namespace: str


# The hub asks for its fixtures at run time, which collection cannot see: marked here.
@pytest.fixture(params=["fake", pytest.param("hub", marks=pytest.mark.cluster)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        fake = FakeApi(kinds=(*DEFAULT_KINDS, FAKE_CAPI_CLUSTERS))  # the hub has Cluster API's
        namespace = f"t-{uuid.uuid4().hex[:10]}"
        fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        yield Backend("fake", Config(server="https://fake.invalid"), namespace, fake)
        return
    hub = request.getfixturevalue("hub")
    request.getfixturevalue("crds")
    request.getfixturevalue("capi_crd")
    namespace = request.getfixturevalue("namespace")
    yield Backend("hub", Config.from_kubeconfig(hub.admin_kubeconfig), namespace, None)


@pytest.fixture
async def server(backend: Backend) -> AsyncIterator[Server]:
    async with Client(backend.config, transport=backend.transport) as client:
        yield Server(backend.name, client, backend.namespace)


# --- helpers ----------------------------------------------------------------------------------


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def cluster(name: str, finalizers: list[str] | None = None) -> Obj:
    metadata: Obj = {"name": name}
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Cluster",
        "metadata": metadata,
        "spec": {"connection": "InCluster"},
    }


def rv(obj: Obj) -> str:
    return str(obj["metadata"]["resourceVersion"])


class Events:
    """The events of one raw watch stream, read one at a time (bookmarks skipped)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self, within: float = 15.0) -> tuple[str, Obj]:
        with trio.fail_after(within):
            while True:
                line = await self._lines.__anext__()
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] != "BOOKMARK":
                    return event["type"], event["object"]

    async def names(self, count: int) -> list[tuple[str, str]]:
        return [(t, o["metadata"]["name"]) for t, o in [await self.next() for _ in range(count)]]


@asynccontextmanager
async def raw_watch(
    server: Server,
    resource: Resource,
    *,
    accept: str = "application/json",
    **params: str,
) -> AsyncIterator[Events]:
    query = {"watch": "true", "timeoutSeconds": "60", **params}
    path = resource_path(resource, namespace=server.namespace)
    async with server.client.stream("GET", path, params=query, accept=accept) as response:
        assert response.status_code == 200
        yield Events(response)


# --- creating ---------------------------------------------------------------------------------


async def test_create_twice_is_already_exists(server: Server) -> None:
    client, ns = server.client, server.namespace
    first = await client.create(CONFIG_MAPS, configmap("taken"), namespace=ns)
    assert first["metadata"]["uid"]
    assert first["metadata"]["creationTimestamp"]
    assert "generation" not in first["metadata"]  # built-in types without spec/status
    with pytest.raises(AlreadyExists) as caught:
        await client.create(CONFIG_MAPS, configmap("taken"), namespace=ns)
    assert caught.value.code == 409
    assert caught.value.reason == "AlreadyExists"
    assert caught.value.details["name"] == "taken"
    assert caught.value.details["kind"] == "configmaps"
    assert caught.value.message.endswith('configmaps "taken" already exists')

    await client.create(api.CLUSTERS, cluster("taken"), namespace=ns)
    with pytest.raises(AlreadyExists) as crd_caught:
        await client.create(api.CLUSTERS, cluster("taken"), namespace=ns)
    assert crd_caught.value.details == {
        "name": "taken",
        "group": "delivery.kokumi.dev",
        "kind": "clusters",
    }


async def test_generate_name_and_missing_namespace(server: Server) -> None:
    client, ns = server.client, server.namespace
    body = configmap("")
    body["metadata"] = {"generateName": "gen-"}
    created = await client.create(CONFIG_MAPS, body, namespace=ns)
    name = created["metadata"]["name"]
    assert name.startswith("gen-")
    assert len(name) == len("gen-") + 5
    with pytest.raises(NotFound) as caught:
        await client.create(CONFIG_MAPS, configmap("x"), namespace=f"{ns}-missing")
    assert caught.value.details["kind"] == "namespaces"
    with pytest.raises(Invalid) as bad_name:
        await client.create(CONFIG_MAPS, configmap("Not_A_Name"), namespace=ns)
    assert 'ConfigMap "Not_A_Name" is invalid: metadata.name: Invalid value' in str(bad_name.value)
    assert bad_name.value.causes[0]["field"] == "metadata.name"
    with pytest.raises(Invalid) as bad_label:
        await client.create(CONFIG_MAPS, configmap("bad-label", {"a b": "c"}), namespace=ns)
    assert bad_label.value.causes[0]["field"] == "metadata.labels"
    with pytest.raises(Invalid) as no_name:
        await client.create(CONFIG_MAPS, {"metadata": {}}, namespace=ns)
    assert no_name.value.causes[0]["reason"] == "FieldValueRequired"
    with pytest.raises(BadRequest) as no_kind:
        await client.create(api.CLUSTERS, {"metadata": {"name": "k"}, "spec": {}}, namespace=ns)
    assert "Object 'Kind' is missing" in str(no_kind.value)
    with pytest.raises(ServerError) as with_version:
        body = configmap("versioned")
        body["metadata"]["resourceVersion"] = "5"
        await client.create(CONFIG_MAPS, body, namespace=ns)
    assert with_version.value.code == 500
    assert "resourceVersion should not be set on objects to be created" in str(with_version.value)


async def test_secret_string_data_is_merged_into_data(server: Server) -> None:
    client, ns = server.client, server.namespace
    body = {
        "metadata": {"name": "s"},
        "data": {"a": "YQ=="},
        "stringData": {"b": "bee"},
    }
    created = await client.create(SECRETS, body, namespace=ns)
    assert created["data"] == {"a": "YQ==", "b": "YmVl"}
    assert "stringData" not in created
    assert created["type"] == "Opaque"


# --- updating ---------------------------------------------------------------------------------


async def test_stale_updates_conflict(server: Server) -> None:
    client, ns = server.client, server.namespace
    old = await client.create(CONFIG_MAPS, configmap("cm", v="1"), namespace=ns)
    new = await client.patch_merge(CONFIG_MAPS, "cm", {"data": {"v": "2"}}, namespace=ns)
    assert int(rv(new)) > int(rv(old))

    stale = {**old, "data": {"v": "3"}}
    with pytest.raises(Conflict) as caught:
        await client.replace(CONFIG_MAPS, stale, namespace=ns)
    assert caught.value.code == 409
    assert caught.value.reason == "Conflict"
    assert caught.value.details == {"name": "cm", "kind": "configmaps"}
    # The resourceVersion inside a merge patch is a precondition, as in a PUT.
    with pytest.raises(Conflict):
        await client.patch_merge(
            CONFIG_MAPS,
            "cm",
            {"metadata": {"resourceVersion": rv(old)}, "data": {"v": "3"}},
            namespace=ns,
        )
    current = await client.patch_merge(
        CONFIG_MAPS,
        "cm",
        {"metadata": {"resourceVersion": rv(new)}, "data": {"v": "4"}},
        namespace=ns,
    )
    assert current["data"] == {"v": "4"}
    # Without a resourceVersion a PUT is unconditional.
    unconditional = {**old, "data": {"v": "5"}}
    del unconditional["metadata"]["resourceVersion"]
    replaced = await client.replace(CONFIG_MAPS, unconditional, namespace=ns)
    assert replaced["data"] == {"v": "5"}
    assert replaced["metadata"]["uid"] == old["metadata"]["uid"]


async def test_only_a_json_patch_test_keeps_a_status_write_off_a_new_object(
    server: Server,
) -> None:
    """A write meant for an object deleted meanwhile must not land on a new one of its name.

    A uid in a merge patch of the object is refused (the uid cannot change), but the status
    subresource takes the old object's metadata whatever the patch says: a stale status merge
    patch lands on the successor. A JSON patch's ``test`` of ``/metadata/uid`` is what holds.
    """
    client, ns = server.client, server.namespace
    old = await client.create(api.CLUSTERS, cluster("again"), namespace=ns)
    await client.delete(api.CLUSTERS, "again", namespace=ns)
    new = await client.create(api.CLUSTERS, cluster("again"), namespace=ns)
    stale_uid, uid = old["metadata"]["uid"], new["metadata"]["uid"]

    with pytest.raises(Invalid) as caught:
        await client.patch_merge(
            api.CLUSTERS,
            "again",
            {"metadata": {"uid": stale_uid, "labels": {"a": "b"}}},
            namespace=ns,
        )
    assert caught.value.message.endswith(
        f'Cluster.delivery.kokumi.dev "again" is invalid: metadata.uid: Invalid value:'
        f' "{stale_uid}": field is immutable'
    ), caught.value.message
    landed = await client.patch_merge(
        api.CLUSTERS,
        "again",
        {"metadata": {"uid": stale_uid}, "status": {"server": "https://old"}},
        namespace=ns,
        subresource="status",
    )
    assert landed["metadata"]["uid"] == uid
    assert landed["status"] == {"server": "https://old"}

    def status_ops(expected_uid: str, server_url: str) -> list[Obj]:
        return [
            {"op": "test", "path": "/metadata/uid", "value": expected_uid},
            {"op": "add", "path": "/status", "value": {"server": server_url}},
        ]

    with pytest.raises(Invalid) as refused:
        await client.patch_json(
            api.CLUSTERS,
            "again",
            status_ops(stale_uid, "https://stale"),
            namespace=ns,
            subresource="status",
        )
    assert refused.value.code == 422
    current = await client.get(api.CLUSTERS, "again", namespace=ns)
    assert current["status"] == {"server": "https://old"}
    written = await client.patch_json(
        api.CLUSTERS, "again", status_ops(uid, "https://new"), namespace=ns, subresource="status"
    )
    assert written["status"] == {"server": "https://new"}  # the whole status replaced


async def test_json_patch_test_operation_is_a_precondition(server: Server) -> None:
    client, ns = server.client, server.namespace
    await client.create(CONFIG_MAPS, configmap("jp", v="1"), namespace=ns)
    with pytest.raises(Invalid) as caught:
        await client.patch_json(
            CONFIG_MAPS,
            "jp",
            [
                {"op": "test", "path": "/data/v", "value": "2"},
                {"op": "replace", "path": "/data/v", "value": "3"},
            ],
            namespace=ns,
        )
    assert caught.value.code == 422
    assert caught.value.message.endswith(
        "the server rejected our request due to an error in our request"
    )
    patched = await client.patch_json(
        CONFIG_MAPS,
        "jp",
        [
            {"op": "test", "path": "/data/v", "value": "1"},
            {"op": "replace", "path": "/data/v", "value": "3"},
            {"op": "add", "path": "/data/w", "value": "4"},
        ],
        namespace=ns,
    )
    assert patched["data"] == {"v": "3", "w": "4"}


async def test_a_write_that_changes_nothing_keeps_the_version(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(CONFIG_MAPS, configmap("same", v="1"), namespace=ns)
    again = await client.patch_merge(CONFIG_MAPS, "same", {"data": {"v": "1"}}, namespace=ns)
    assert rv(again) == rv(created)
    replaced = await client.replace(CONFIG_MAPS, created, namespace=ns)
    assert rv(replaced) == rv(created)


async def test_update_and_patch_of_a_missing_object_are_not_found(server: Server) -> None:
    client, ns = server.client, server.namespace
    with pytest.raises(NotFound) as caught:
        await client.patch_merge(CONFIG_MAPS, "ghost", {"data": {"a": "b"}}, namespace=ns)
    assert caught.value.details == {"name": "ghost", "kind": "configmaps"}
    with pytest.raises(NotFound):
        await client.replace(CONFIG_MAPS, configmap("ghost"), namespace=ns)
    with pytest.raises(BadRequest):
        body = configmap("other")
        await client.request(
            "PUT", resource_path(CONFIG_MAPS, namespace=ns, name="ghost"), json=body
        )


async def test_generation_and_the_status_subresource(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(
        api.CLUSTERS, {**cluster("gen"), "status": {"server": "ignored"}}, namespace=ns
    )
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # create ignores the status of a status subresource

    labelled = await client.patch_merge(
        api.CLUSTERS, "gen", {"metadata": {"labels": {"a": "b"}}}, namespace=ns
    )
    assert labelled["metadata"]["generation"] == 1
    assert int(rv(labelled)) > int(rv(created))

    status = await client.patch_merge(
        api.CLUSTERS,
        "gen",
        {"status": {"server": "https://x"}, "spec": {"description": "ignored"}},
        namespace=ns,
        subresource="status",
    )
    assert status["status"] == {"server": "https://x"}
    assert "description" not in status["spec"]
    assert status["metadata"]["generation"] == 1

    spec = await client.patch_merge(
        api.CLUSTERS,
        "gen",
        {"spec": {"description": "new"}, "status": {"server": "ignored"}},
        namespace=ns,
    )
    assert spec["metadata"]["generation"] == 2
    assert spec["spec"]["description"] == "new"
    assert spec["status"] == {"server": "https://x"}  # main writes leave status alone

    # A status PUT takes only the status, even with other changes in the body.
    body = {**spec, "status": {"server": "https://y"}, "metadata": {**spec["metadata"]}}
    body["metadata"]["labels"] = {"changed": "no"}
    put = await client.replace(api.CLUSTERS, body, namespace=ns, subresource="status")
    assert put["status"] == {"server": "https://y"}
    assert put["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(Conflict):  # and checks the version like any PUT
        await client.replace(api.CLUSTERS, body, namespace=ns, subresource="status")

    # Unlike a ConfigMap, a custom resource takes no update without a resourceVersion.
    del body["metadata"]["resourceVersion"]
    with pytest.raises(Invalid) as unconditional:
        await client.replace(api.CLUSTERS, body, namespace=ns)
    assert unconditional.value.message.endswith(
        'clusters.delivery.kokumi.dev "gen" is invalid: metadata.resourceVersion: Invalid value:'
        " 0: must be specified for an update"
    )
    with pytest.raises(Invalid):
        await client.patch_merge(
            api.CLUSTERS,
            "gen",
            {"metadata": {"resourceVersion": None, "labels": {"x": "y"}}},
            namespace=ns,
        )


# --- deleting ---------------------------------------------------------------------------------


async def test_delete_preconditions(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(CONFIG_MAPS, configmap("del", v="1"), namespace=ns)
    newer = await client.patch_merge(CONFIG_MAPS, "del", {"data": {"v": "2"}}, namespace=ns)
    with pytest.raises(Conflict) as caught:
        await client.delete(CONFIG_MAPS, "del", namespace=ns, uid=str(uuid.uuid4()))
    assert "does not match the UID in record" in caught.value.message
    assert caught.value.details == {"name": "del", "kind": "ConfigMap"}
    with pytest.raises(Conflict) as stale:
        await client.delete(CONFIG_MAPS, "del", namespace=ns, resource_version=rv(created))
    assert f"the ResourceVersion in the precondition ({rv(created)}) does not match" in str(
        stale.value
    )
    answer = await client.delete(
        CONFIG_MAPS,
        "del",
        namespace=ns,
        uid=created["metadata"]["uid"],
        resource_version=rv(newer),
    )
    assert answer["kind"] == "Status"
    assert answer["status"] == "Success"
    assert answer["details"]["name"] == "del"
    assert answer["details"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(NotFound):
        await client.delete(CONFIG_MAPS, "del", namespace=ns)


async def test_finalizers_hold_a_deleted_object_until_the_last_goes(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(api.CLUSTERS, cluster("fin", [FINALIZER]), namespace=ns)
    async with raw_watch(server, api.CLUSTERS, resourceVersion=rv(created)) as events:
        held = await client.delete(api.CLUSTERS, "fin", namespace=ns)
        assert held["kind"] == "Cluster"
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["deletionGracePeriodSeconds"] == 0
        assert held["metadata"]["generation"] == 2  # deletion bumps a generation
        assert held["metadata"]["finalizers"] == [FINALIZER]
        # Deleting again changes nothing; adding a finalizer now is refused.
        again = await client.delete(api.CLUSTERS, "fin", namespace=ns)
        assert rv(again) == rv(held)
        with pytest.raises(Invalid) as caught:
            await client.patch_merge(
                api.CLUSTERS,
                "fin",
                {"metadata": {"finalizers": [FINALIZER, "another.kokumi.dev/x"]}},
                namespace=ns,
            )
        assert caught.value.message.endswith(
            'Cluster.delivery.kokumi.dev "fin" is invalid: metadata.finalizers: Forbidden: no new'
            " finalizers can be added if the object is being deleted, found new finalizers"
            ' []string{"another.kokumi.dev/x"}'
        )
        assert caught.value.causes[0]["field"] == "metadata.finalizers"
        # Other changes still go through while it is terminating.
        labelled = await client.patch_merge(
            api.CLUSTERS, "fin", {"metadata": {"labels": {"still": "here"}}}, namespace=ns
        )
        released = await client.patch_merge(
            api.CLUSTERS,
            "fin",
            {"metadata": {"finalizers": None}},
            namespace=ns,
        )
        # The answer is the update as made, on the version it was made on; no finalizers.
        assert released["metadata"]["name"] == "fin"
        assert "finalizers" not in released["metadata"]
        assert rv(released) == rv(labelled)
        with pytest.raises(NotFound):
            await client.get(api.CLUSTERS, "fin", namespace=ns)

        kind, obj = await events.next()
        assert (kind, obj["metadata"]["deletionTimestamp"]) == (
            "MODIFIED",
            held["metadata"]["deletionTimestamp"],
        )
        kind, obj = await events.next()
        assert kind == "MODIFIED"
        assert obj["metadata"]["labels"] == {"still": "here"}
        kind, obj = await events.next()
        # The DELETED event shows the object as last stored, finalizer and all, new version.
        assert kind == "DELETED"
        assert obj["metadata"]["deletionTimestamp"]
        assert obj["metadata"]["finalizers"] == [FINALIZER]
        assert obj["metadata"]["labels"] == {"still": "here"}
        assert int(rv(obj)) > int(rv(labelled))


# --- listing ----------------------------------------------------------------------------------

SELECTIONS = {
    "env=prod": {"a"},
    "env==prod": {"a"},
    "env!=prod": {"b", "c"},
    "env in (prod,dev)": {"a", "b"},
    "env notin (prod)": {"b", "c"},
    "env": {"a", "b"},
    "!env": {"c"},
    "env,tier=web": {"a"},
    "!tier,env": {"b"},
    "env in (prod),tier notin (db)": {"a"},
    "empty in ()": {"c"},
    "env in ()": set(),
    "": {"a", "b", "c"},
}


async def test_label_selectors(server: Server) -> None:
    client, ns = server.client, server.namespace
    await client.create(CONFIG_MAPS, configmap("a", {"env": "prod", "tier": "web"}), namespace=ns)
    await client.create(CONFIG_MAPS, configmap("b", {"env": "dev"}), namespace=ns)
    await client.create(CONFIG_MAPS, configmap("c", {"other": "x", "empty": ""}), namespace=ns)
    for selector, expected in SELECTIONS.items():
        listed = await client.list(CONFIG_MAPS, namespace=ns, label_selector=selector)
        names = {o["metadata"]["name"] for o in listed["items"]}
        assert names == expected, selector
    by_field = await client.list(CONFIG_MAPS, namespace=ns, field_selector="metadata.name=b")
    assert [o["metadata"]["name"] for o in by_field["items"]] == ["b"]
    not_b = await client.list(CONFIG_MAPS, namespace=ns, field_selector="metadata.name!=b")
    assert {o["metadata"]["name"] for o in not_b["items"]} == {"a", "c"}
    for bad in ("env in (", "a b", "env=prod,,"):
        with pytest.raises(BadRequest):
            await client.list(CONFIG_MAPS, namespace=ns, label_selector=bad)
    with pytest.raises(BadRequest) as bad_field:
        await client.list(CONFIG_MAPS, namespace=ns, field_selector="spec.x=1")
    assert str(bad_field.value).endswith(
        '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


async def test_lists_and_metadata_only_answers(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(CONFIG_MAPS, configmap("m", {"k": "v"}, secret="x"), namespace=ns)
    raw = await client.request("GET", resource_path(CONFIG_MAPS, namespace=ns))
    assert raw["kind"] == "ConfigMapList"
    assert raw["apiVersion"] == "v1"
    assert int(raw["metadata"]["resourceVersion"]) >= int(rv(created))
    assert [o["metadata"]["name"] for o in raw["items"]] == ["m"]

    meta_list = await client.request(
        "GET", resource_path(CONFIG_MAPS, namespace=ns), accept=METADATA_LIST
    )
    assert meta_list["kind"] == "PartialObjectMetadataList"
    assert meta_list["apiVersion"] == "meta.k8s.io/v1"
    item = meta_list["items"][0]
    assert item["metadata"]["labels"] == {"k": "v"}
    assert "data" not in item

    one = await client.get(CONFIG_MAPS, "m", namespace=ns, metadata_only=True)
    assert one["kind"] == "PartialObjectMetadata"
    assert one["apiVersion"] == "meta.k8s.io/v1"
    assert rv(one) == rv(created)
    assert "data" not in one

    async with raw_watch(
        server, CONFIG_MAPS, accept=METADATA_OBJECT, resourceVersion=rv(created)
    ) as events:
        await client.patch_merge(CONFIG_MAPS, "m", {"data": {"secret": "y"}}, namespace=ns)
        kind, obj = await events.next()
        assert kind == "MODIFIED"
        assert obj["kind"] == "PartialObjectMetadata"
        assert "data" not in obj

    listed = await client.list(api.CLUSTERS, namespace=ns)
    assert listed["kind"] == "ClusterList"
    assert listed["items"] == []


# --- watching ---------------------------------------------------------------------------------


async def test_watch_resumes_from_a_list_without_synthetic_adds(server: Server) -> None:
    client, ns = server.client, server.namespace
    await client.create(CONFIG_MAPS, configmap("old1"), namespace=ns)
    await client.create(CONFIG_MAPS, configmap("old2"), namespace=ns)
    listed = await client.list(CONFIG_MAPS, namespace=ns)
    await client.create(CONFIG_MAPS, configmap("new"), namespace=ns)
    await client.patch_merge(CONFIG_MAPS, "old1", {"data": {"v": "1"}}, namespace=ns)
    await client.delete(CONFIG_MAPS, "old2", namespace=ns)
    async with raw_watch(
        server, CONFIG_MAPS, resourceVersion=listed["metadata"]["resourceVersion"]
    ) as events:
        assert await events.names(3) == [
            ("ADDED", "new"),
            ("MODIFIED", "old1"),
            ("DELETED", "old2"),
        ]
        await client.create(CONFIG_MAPS, configmap("marker"), namespace=ns)
        assert await events.names(1) == [("ADDED", "marker")]

    # Without a version the watch starts with the current state as ADDED events.
    async with raw_watch(server, CONFIG_MAPS) as events:
        assert sorted(await events.names(3)) == [
            ("ADDED", "marker"),
            ("ADDED", "new"),
            ("ADDED", "old1"),
        ]


async def test_a_watch_with_a_selector_sees_objects_enter_and_leave(server: Server) -> None:
    client, ns = server.client, server.namespace
    created = await client.create(CONFIG_MAPS, configmap("x", {"env": "prod"}), namespace=ns)
    async with raw_watch(
        server, CONFIG_MAPS, resourceVersion=rv(created), labelSelector="env=prod"
    ) as events:
        await client.patch_merge(
            CONFIG_MAPS, "x", {"metadata": {"labels": {"env": "dev"}}}, namespace=ns
        )
        kind, obj = await events.next()
        assert kind == "DELETED"
        await client.patch_merge(
            CONFIG_MAPS, "x", {"metadata": {"labels": {"env": "prod"}}}, namespace=ns
        )
        kind, obj = await events.next()
        assert kind == "ADDED"
        assert obj["metadata"]["labels"] == {"env": "prod"}


async def test_a_watch_from_a_version_older_than_the_history_is_expired(server: Server) -> None:
    client, ns = server.client, server.namespace
    await client.create(api.CLUSTERS, cluster("w"), namespace=ns)
    # The server answers 200 and sends the 410 as an ERROR event, then ends the stream.
    async with raw_watch(server, api.CLUSTERS, resourceVersion="1") as events:
        kind, obj = await events.next()
    assert kind == "ERROR"
    assert obj["kind"] == "Status"
    assert obj["code"] == 410
    assert obj["reason"] == "Expired"
    assert obj["message"].startswith("too old resource version: 1 (")
    # kokumi.kube.watch turns it into Gone, on which it lists again.
    assert isinstance(error_from_status(410, obj), Gone)


async def test_kokumi_watch_end_to_end(server: Server) -> None:
    client, ns = server.client, server.namespace
    await client.create(CONFIG_MAPS, configmap("before"), namespace=ns)
    store = Store()
    send, receive = trio.open_memory_channel[WatchEvent | Resync](100)
    log: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: watch(
                client, CONFIG_MAPS, send, namespace=ns, store=store, task_status=task_status
            )
        )
        first = await receive.receive()
        assert isinstance(first, Resync)
        assert [o["metadata"]["name"] for o in first.objects] == ["before"]
        await client.create(CONFIG_MAPS, configmap("after"), namespace=ns)
        await client.patch_merge(CONFIG_MAPS, "before", {"data": {"v": "2"}}, namespace=ns)
        await client.delete(CONFIG_MAPS, "after", namespace=ns)
        with trio.fail_after(15):
            while len(log) < 3:
                item = await receive.receive()
                assert isinstance(item, WatchEvent)
                log.append((item.type, item.object["metadata"]["name"]))
        nursery.cancel_scope.cancel()
    assert log == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "after")]
    listed = await client.list(CONFIG_MAPS, namespace=ns)
    assert {k[1]: rv(o) for k, o in ((k, store.get(*k)) for k in store) if o} == {
        o["metadata"]["name"]: rv(o) for o in listed["items"]
    }


# --- the in-cluster check's requests -----------------------------------------------------------


async def test_two_kinds_of_one_plural_are_two_objects(server: Server) -> None:
    """Kokumi's Cluster and Cluster API's of one name in one namespace: two objects, each
    listed, changed and deleted under its own group, as a ClusterSource reads them side by side."""
    ns = server.namespace
    capi = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "work", "labels": {"made-by": "capi"}}, "spec": {}}  # fmt: skip
    ours = await server.client.create(api.CLUSTERS, cluster("work"), namespace=ns)
    theirs = await server.client.create(CAPI_CLUSTERS, capi, namespace=ns)
    assert ours["metadata"]["uid"] != theirs["metadata"]["uid"]
    assert theirs["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    listed = await server.client.list(CAPI_CLUSTERS, namespace=ns)
    assert [o["metadata"]["labels"] for o in listed["items"]] == [{"made-by": "capi"}]
    ours_listed = await server.client.list(api.CLUSTERS, namespace=ns)
    assert [o["metadata"]["uid"] for o in ours_listed["items"]] == [ours["metadata"]["uid"]]
    await server.client.delete(CAPI_CLUSTERS, "work", namespace=ns)
    assert (await server.client.get(api.CLUSTERS, "work", namespace=ns))["spec"] == {
        "connection": "InCluster"
    }
    with pytest.raises(NotFound):
        await server.client.get(CAPI_CLUSTERS, "work", namespace=ns)
    await server.client.delete(api.CLUSTERS, "work", namespace=ns)


async def test_version_and_self_subject_review(server: Server) -> None:
    client = server.client
    version = await client.request("GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    assert version["major"] == "1"
    review = await client.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["kind"] == "SelfSubjectReview"
    assert review["metadata"]["creationTimestamp"]
    assert review["status"]["userInfo"]["username"] == "kokumi-admin"
    assert "system:authenticated" in review["status"]["userInfo"]["groups"]
    namespace = await client.get(NAMESPACES, server.namespace)
    assert namespace["status"]["phase"] == "Active"
    assert namespace["metadata"]["labels"]["kubernetes.io/metadata.name"] == server.namespace
