"""kokumi.kube.Client against the real hub: CRUD, status, apply, and what errors look like."""

from __future__ import annotations

import base64
from typing import Any

import attrs
import pytest
import trio

from kokumi.kube import (
    CONFIG_MAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    SECRETS,
    AlreadyExists,
    Client,
    Config,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Resource,
    StaticToken,
    TooLarge,
    TransportError,
    Unauthorized,
)
from kokumi.testing.controlplane import APIServer

GIZMOS = Resource("kubetest.kokumi.dev", "v1", "gizmos", "Gizmo")

GIZMO_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.kubetest.kokumi.dev"},
    "spec": {
        "group": "kubetest.kokumi.dev",
        "scope": "Namespaced",
        "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 0}},
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "observed": {"type": "integer"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def admin(hub: APIServer) -> Client:
    return Client(Config.from_kubeconfig(hub.admin_kubeconfig), field_manager="kube-tests")


async def ensure_gizmo_crd(client: Client) -> None:
    """Apply the test CRD (idempotent across tests) and wait until it is served."""
    await client.apply(CUSTOM_RESOURCE_DEFINITIONS, GIZMO_CRD)
    with trio.fail_after(30):
        while True:
            crd = await client.get(CUSTOM_RESOURCE_DEFINITIONS, GIZMO_CRD["metadata"]["name"])
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            await trio.sleep(0.1)
    with trio.fail_after(30):  # discovery may lag Established by a moment
        while True:
            try:
                await client.list(GIZMOS, namespace="default")
                return
            except NotFound:
                await trio.sleep(0.1)


def configmap(name: str, namespace: str, **data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "kube-tests"}},
        "data": data,
    }


async def test_version_through_a_raw_request(hub: APIServer) -> None:
    async with admin(hub) as client:
        version = await client.request("GET", "/version")
    assert version["gitVersion"] == hub.version


async def test_configmap_crud(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        created = await client.create(CONFIG_MAPS, configmap("a", namespace, k="1"))
        assert created["metadata"]["uid"]
        assert created["metadata"]["managedFields"][0]["manager"] == "kube-tests"

        got = await client.get(CONFIG_MAPS, "a", namespace=namespace)
        assert got["data"] == {"k": "1"}

        with pytest.raises(AlreadyExists) as exists:
            await client.create(CONFIG_MAPS, configmap("a", namespace))
        assert exists.value.code == 409

        got["data"]["k"] = "2"
        replaced = await client.replace(CONFIG_MAPS, got)
        assert replaced["data"] == {"k": "2"}

        merged = await client.patch_merge(
            CONFIG_MAPS, "a", {"data": {"k": None, "m": "3"}}, namespace=namespace
        )
        assert merged["data"] == {"m": "3"}

        patched = await client.patch_json(
            CONFIG_MAPS,
            "a",
            [
                {"op": "test", "path": "/data/m", "value": "3"},
                {"op": "add", "path": "/data/j", "value": "4"},
            ],
            namespace=namespace,
        )
        assert patched["data"] == {"m": "3", "j": "4"}
        with pytest.raises(Invalid):  # a failed `test` makes the whole patch fail
            await client.patch_json(
                CONFIG_MAPS,
                "a",
                [{"op": "test", "path": "/data/m", "value": "nope"}],
                namespace=namespace,
            )

        with pytest.raises(Conflict):  # a precondition on the uid guards against a re-created name
            await client.delete(
                CONFIG_MAPS, "a", namespace=namespace, uid="00000000-0000-0000-0000-000000000000"
            )
        await client.delete(
            CONFIG_MAPS,
            "a",
            namespace=namespace,
            uid=created["metadata"]["uid"],
            resource_version=patched["metadata"]["resourceVersion"],
            propagation_policy="Background",
        )
        with trio.fail_after(10):
            while True:
                try:
                    await client.get(CONFIG_MAPS, "a", namespace=namespace)
                except NotFound as missing:
                    assert missing.code == 404
                    break
                await trio.sleep(0.05)
        with pytest.raises(NotFound):
            await client.delete(CONFIG_MAPS, "a", namespace=namespace)


async def test_list_pages_selectors_and_metadata_only(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        for i in range(7):
            body = configmap(f"cm-{i}", namespace, i=str(i))
            body["metadata"]["labels"]["parity"] = "even" if i % 2 == 0 else "odd"  # type: ignore[index]
            await client.create(CONFIG_MAPS, body)
        everything = await client.list(CONFIG_MAPS, namespace=namespace, limit=2)
        names = sorted(
            o["metadata"]["name"]
            for o in everything["items"]
            if o["metadata"]["name"].startswith("cm-")
        )
        assert names == [f"cm-{i}" for i in range(7)]
        assert everything["metadata"]["resourceVersion"].isdigit()
        assert "continue" not in everything["metadata"]
        assert {o["kind"] for o in everything["items"]} == {"ConfigMap"}
        assert {o["apiVersion"] for o in everything["items"]} == {"v1"}

        odd = await client.list(
            CONFIG_MAPS, namespace=namespace, label_selector="parity=odd", limit=1
        )
        assert sorted(o["metadata"]["name"] for o in odd["items"]) == ["cm-1", "cm-3", "cm-5"]
        one = await client.list(
            CONFIG_MAPS, namespace=namespace, field_selector="metadata.name=cm-4"
        )
        assert [o["data"] for o in one["items"]] == [{"i": "4"}]

        secret = {
            "metadata": {"name": "s", "namespace": namespace},
            "stringData": {"password": "hunter2"},
        }
        await client.create(SECRETS, secret)
        metadata = await client.list(SECRETS, namespace=namespace, metadata_only=True)
        (item,) = [o for o in metadata["items"] if o["metadata"]["name"] == "s"]
        assert item["kind"] == "PartialObjectMetadata"
        assert "data" not in item
        full = await client.get(SECRETS, "s", namespace=namespace)
        assert base64.b64decode(full["data"]["password"]) == b"hunter2"
        partial = await client.get(SECRETS, "s", namespace=namespace, metadata_only=True)
        assert "data" not in partial
        assert partial["metadata"]["uid"] == full["metadata"]["uid"]


async def test_pages_come_one_at_a_time_with_every_secret_and_its_data(
    hub: APIServer, namespace: str
) -> None:
    """What a restart's kubeconfig reads rest on: a namespace's Secrets, data and all, in pages
    of ``limit``, each page handed over before the next is asked for."""
    async with admin(hub) as client:
        for i in range(5):
            data = {"value": base64.b64encode(f"kubeconfig {i}".encode()).decode()}
            await client.create(
                SECRETS, {"metadata": {"name": f"s-{i}", "namespace": namespace}, "data": data}
            )
        sizes: list[int] = []
        seen: dict[str, str] = {}
        async for items in client.pages(SECRETS, namespace=namespace, limit=2):
            sizes.append(len(items))
            for item in items:
                if item["metadata"]["name"].startswith("s-"):
                    seen[item["metadata"]["name"]] = base64.b64decode(
                        item["data"]["value"]
                    ).decode()
        assert seen == {f"s-{i}": f"kubeconfig {i}" for i in range(5)}
        # Five of ours (and whatever else the namespace holds) in pages of at most two.
        assert len(sizes) >= 3 and max(sizes) <= 2


async def test_a_page_over_its_byte_cap_is_cut_off(hub: APIServer, namespace: str) -> None:
    """A page is bounded in objects, a Secret's size by its author: ``max_bytes`` stops a page
    that grows past it as it arrives (the hub compresses a big answer; the cap counts what it
    decodes to), and a page within it reads as ever."""
    async with admin(hub) as client:
        for i in range(3):
            data = {"blob": base64.b64encode(bytes([i]) * 300_000).decode()}
            await client.create(
                SECRETS, {"metadata": {"name": f"big-{i}", "namespace": namespace}, "data": data}
            )
        with pytest.raises(TooLarge, match="over 500000 bytes"):
            async for _ in client.pages(SECRETS, namespace=namespace, limit=2, max_bytes=500_000):
                pass
        names = [
            item["metadata"]["name"]
            async for items in client.pages(
                SECRETS, namespace=namespace, limit=2, max_bytes=1_000_000
            )
            for item in items
        ]
        assert {f"big-{i}" for i in range(3)} <= set(names)


async def test_stale_resource_version_is_a_conflict(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        first = await client.create(CONFIG_MAPS, configmap("c", namespace, v="0"))
        await client.patch_merge(CONFIG_MAPS, "c", {"data": {"v": "1"}}, namespace=namespace)
        first["data"]["v"] = "stale"
        with pytest.raises(Conflict) as conflict:
            await client.replace(CONFIG_MAPS, first)
        assert conflict.value.code == 409
        assert conflict.value.reason == "Conflict"
        current = await client.get(CONFIG_MAPS, "c", namespace=namespace)
        assert current["data"] == {"v": "1"}


async def test_server_side_apply(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        body = configmap("applied", namespace, owned="by-a")
        created = await client.apply(CONFIG_MAPS, body, field_manager="manager-a")
        assert created["data"] == {"owned": "by-a"}
        # Re-applying what the server returned works: managedFields is dropped for us.
        again = await client.apply(CONFIG_MAPS, created, field_manager="manager-a")
        assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

        other = configmap("applied", namespace, owned="by-b", extra="b")
        with pytest.raises(Conflict) as conflict:
            await client.apply(CONFIG_MAPS, other, field_manager="manager-b", force=False)
        assert "manager-a" in conflict.value.message

        taken = await client.apply(CONFIG_MAPS, other, field_manager="manager-b", force=True)
        assert taken["data"] == {"owned": "by-b", "extra": "b"}
        managers = {f["manager"] for f in taken["metadata"]["managedFields"]}
        assert "manager-b" in managers

        # Applying a smaller intent removes the fields this manager no longer names.
        smaller = configmap("applied", namespace, owned="by-b")
        shrunk = await client.apply(CONFIG_MAPS, smaller, field_manager="manager-b")
        assert shrunk["data"] == {"owned": "by-b"}


async def test_custom_resource_with_status_subresource(hub: APIServer, namespace: str) -> None:
    async with admin(hub) as client:
        await ensure_gizmo_crd(client)
        gizmo = {
            "apiVersion": "kubetest.kokumi.dev/v1",
            "kind": "Gizmo",
            "metadata": {"name": "g", "namespace": namespace},
            "spec": {"size": 1},
            "status": {"phase": "ignored-on-create"},
        }
        created = await client.create(GIZMOS, gizmo)
        assert "status" not in created  # the main resource never writes status

        created["status"] = {"phase": "Ready", "observed": 1}
        with_status = await client.replace(GIZMOS, created, subresource="status")
        assert with_status["status"] == {"phase": "Ready", "observed": 1}

        merged = await client.patch_merge(
            GIZMOS,
            "g",
            {"status": {"phase": "Degraded"}, "spec": {"size": 9}},
            namespace=namespace,
            subresource="status",
        )
        assert merged["status"] == {"phase": "Degraded", "observed": 1}
        assert merged["spec"] == {"size": 1}  # the status endpoint never writes spec

        applied = await client.apply(
            GIZMOS,
            {
                "apiVersion": "kubetest.kokumi.dev/v1",
                "kind": "Gizmo",
                "metadata": {"name": "g", "namespace": namespace},
                "status": {"phase": "Applied"},
            },
            subresource="status",
            field_manager="status-writer",
        )
        assert applied["status"]["phase"] == "Applied"
        status = await client.get(GIZMOS, "g", namespace=namespace, subresource="status")
        assert status["status"]["phase"] == "Applied"

        patched = await client.patch_json(
            GIZMOS,
            "g",
            [{"op": "replace", "path": "/status/observed", "value": 2}],
            namespace=namespace,
            subresource="status",
        )
        assert patched["status"]["observed"] == 2

        spec = await client.patch_merge(GIZMOS, "g", {"spec": {"size": 3}}, namespace=namespace)
        assert spec["spec"] == {"size": 3}
        assert spec["status"]["phase"] == "Applied"

        with pytest.raises(Invalid) as invalid:
            await client.patch_merge(GIZMOS, "g", {"spec": {"size": -1}}, namespace=namespace)
        assert any(c.get("field") == "spec.size" for c in invalid.value.causes)

        await client.delete(GIZMOS, "g", namespace=namespace)
        with pytest.raises(NotFound):
            await client.get(GIZMOS, "g", namespace=namespace)


async def test_errors_name_the_request_and_never_the_body(hub: APIServer, namespace: str) -> None:
    marker = "bWFya2VyLXNlY3JldC12YWx1ZQ=="
    async with admin(hub) as client:
        with pytest.raises(Invalid) as invalid:
            await client.create(
                SECRETS,
                {"metadata": {"name": "Not_A_Name", "namespace": namespace}, "data": {"k": marker}},
            )
        error = invalid.value
        assert error.code == 422
        assert any(c.get("field") == "metadata.name" for c in error.causes)
        assert f"POST /api/v1/namespaces/{namespace}/secrets" in str(error)
        for text in (str(error), repr(error), *map(str, error.args), str(error.details)):
            assert marker not in text
        assert error.__cause__ is None


async def test_unauthorized_forbidden_and_unreachable(hub: APIServer, namespace: str) -> None:
    base = Config(server=hub.url, certificate_authority=hub.ca_pem)
    async with Client(attrs.evolve(base, token=StaticToken("not-a-token"))) as client:
        with pytest.raises(Unauthorized) as unauthorized:
            await client.list(CONFIG_MAPS, namespace=namespace)
        assert unauthorized.value.code == 401

    cert, key = hub.identity("nobody-in-particular")
    async with Client(attrs.evolve(base, client_certificate=cert, client_key=key)) as client:
        with pytest.raises(Forbidden) as forbidden:
            await client.get(SECRETS, "anything", namespace=namespace)
        assert "nobody-in-particular" in forbidden.value.message

    # tls-server-name: the serving certificate names "kubernetes", not "wrong.example".
    named = attrs.evolve(
        base, client_certificate=cert, client_key=key, tls_server_name="kubernetes"
    )
    async with Client(named) as client:
        assert (await client.request("GET", "/version"))["gitVersion"] == hub.version
    async with Client(attrs.evolve(named, tls_server_name="wrong.example")) as client:
        with pytest.raises(TransportError, match="certificate"):
            await client.request("GET", "/version")

    async with Client(
        attrs.evolve(
            base,
            insecure_skip_tls_verify=True,
            certificate_authority=None,
            client_certificate=cert,
            client_key=key,
        )
    ) as client:
        assert (await client.request("GET", "/version"))["gitVersion"] == hub.version

    async with Client(
        Config(server="https://127.0.0.1:9", certificate_authority=hub.ca_pem), timeout=5
    ) as client:
        with pytest.raises(TransportError, match="GET /version"):
            await client.request("GET", "/version")
