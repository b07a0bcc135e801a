"""Running a manager inside a test, and reading what it did, on the real hub."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import NAMESPACES, SECRETS
from kokumi.manager import Manager, run_manager
from kokumi.runtime.options import Options
from kokumi.testing.controlplane import APIServer


@asynccontextmanager
async def hub_client(hub: APIServer) -> AsyncIterator[Client]:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        yield client


async def make_namespace(client: Client, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    return name


@attrs.define
class Workspace:
    """A test's own namespaces: Kokumi's, Argo CD's, and the workspaces it creates."""

    client: Client
    own: str
    argocd: str
    namespaces: list[str] = attrs.field(factory=list)

    async def namespace(self) -> str:
        name = await make_namespace(self.client)
        self.namespaces.append(name)
        return name

    def options(self, **changes: Any) -> Options:
        return Options(namespace=self.own, argocd_namespace=self.argocd, **changes)

    async def kubeconfig_secret(
        self, namespace: str, name: str, kubeconfig: str, key: str = "value"
    ) -> dict[str, Any]:
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "data": {key: base64.b64encode(kubeconfig.encode()).decode()},
        }
        return await self.client.create(SECRETS, body, namespace=namespace)

    async def cluster(
        self,
        namespace: str,
        name: str,
        *,
        secret: str | None = None,
        key: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {"connection": "InCluster"}
        if secret is not None:
            ref = {"name": secret} if key is None else {"name": secret, "key": key}
            spec = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": ref}}
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec,
        }
        return await self.client.create(api.CLUSTERS, body, namespace=namespace)

    async def environment(
        self, namespace: str, name: str, match_labels: Mapping[str, str]
    ) -> dict[str, Any]:
        body = {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterSelector": {"matchLabels": dict(match_labels)}},
        }
        return await self.client.create(api.ENVIRONMENTS, body, namespace=namespace)

    async def get_cluster(self, namespace: str, name: str) -> dict[str, Any]:
        return await self.client.get(api.CLUSTERS, name, namespace=namespace)

    async def argocd_secrets(self) -> list[dict[str, Any]]:
        listing = await self.client.list(
            SECRETS, namespace=self.argocd, label_selector="app.kubernetes.io/managed-by=kokumi"
        )
        return list(listing["items"])

    async def cleanup(self) -> None:
        """Delete our Clusters while a manager still runs, so no finalizer outlives the test."""
        for namespace in self.namespaces:
            try:
                await self.client.delete_collection(api.CLUSTERS, namespace=namespace)
            except errors.KubeError:
                pass


def ready_of(cluster: Mapping[str, Any]) -> dict[str, Any]:
    for condition in cluster.get("status", {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return dict(condition)
    return {}


async def wait_for(
    read: Callable[[], Any], accept: Callable[[Any], bool], what: str, timeout: float = 30.0
) -> Any:
    """Poll ``read`` until ``accept`` says yes; fail with the last value seen."""
    last: Any = None
    with trio.move_on_after(timeout):
        while True:
            last = await read()
            if accept(last):
                return last
            await trio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last seen: {_redacted(last)!r}")


def _redacted(value: Any) -> Any:
    """What a failure may print: Secrets' data never reaches a test report."""
    if isinstance(value, Mapping):
        return {
            k: "<redacted>" if k in ("data", "stringData") else _redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


async def wait_reason(
    ws: Workspace, namespace: str, name: str, reason: str, timeout: float = 30.0
) -> dict[str, Any]:
    result: dict[str, Any] = await wait_for(
        lambda: ws.get_cluster(namespace, name),
        lambda c: ready_of(c).get("reason") == reason,
        f"Cluster {namespace}/{name} to report {reason}",
        timeout,
    )
    return result


@asynccontextmanager
async def workspace(hub: APIServer) -> AsyncIterator[Workspace]:
    async with hub_client(hub) as client:
        own = await make_namespace(client, "kokumi")
        argo = await make_namespace(client, "argocd")
        ws = Workspace(client, own, argo)
        try:
            yield ws
        finally:
            await _let_go(client, ws.namespaces)
            for namespace in (own, argo, *ws.namespaces):
                try:
                    await client.delete(NAMESPACES, namespace)
                except errors.KubeError:
                    pass


async def drop_finalizers(client: Client, namespace: str) -> int:
    """Take the finalizers off every Cluster of ``namespace``; how many Clusters it holds.

    With no manager running, nothing else would: the Clusters would outlive their namespace's
    deletion."""
    left = (await client.list(api.CLUSTERS, namespace=namespace))["items"]
    for cluster in left:
        if cluster["metadata"].get("finalizers"):
            await client.patch_merge(
                api.CLUSTERS,
                cluster["metadata"]["name"],
                {"metadata": {"finalizers": None}},
                namespace=namespace,
            )
    return len(left)


async def _let_go(client: Client, namespaces: list[str]) -> None:
    """Delete the Clusters a test leaves behind and take off their finalizers.

    A test that fails before its ``cleanup`` has stopped its manager, so nothing would take
    the finalizers off: its Clusters would outlive their namespace's deletion, and the next
    test's manager, which watches every namespace, would register them first and hold their
    servers against that test's own Clusters."""
    for namespace in namespaces:
        try:
            if await drop_finalizers(client, namespace):
                await client.delete_collection(api.CLUSTERS, namespace=namespace)
        except errors.KubeError:
            pass


@asynccontextmanager
async def manager(hub: APIServer, options: Options) -> AsyncIterator[Manager]:
    config = Config.from_kubeconfig(hub.admin_kubeconfig)
    async with trio.open_nursery() as nursery:
        running: Manager = await nursery.start(run_manager, config, options)
        try:
            yield running
        finally:
            nursery.cancel_scope.cancel()


def holder_labels(secret: Mapping[str, Any]) -> tuple[str, str]:
    labels = secret["metadata"]["labels"]
    return labels[argocd.LABEL_CLUSTER_NAMESPACE], labels[argocd.LABEL_CLUSTER]
