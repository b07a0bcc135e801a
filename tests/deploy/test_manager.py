"""The manager does its whole job with exactly the RBAC and policies of install.yaml.

The manager runs here as the real ServiceAccount kokumi:kokumi, with a token from the TokenRequest
API, against the hub with install.yaml applied and the registrar bound in argocd. It watches,
writes status, keeps its finalizer, records events, creates in-cluster and local, registers a
Cluster with Argo CD, copies a changed kubeconfig over, deletes the registration, and writes the
record of next checks its stop leaves in its own namespace: any missing verb, or a write the
integrity policy refuses, shows up as a status, Secret, event or record that never comes.

The Cluster's server is a name of its own that resolves nowhere: an unreachable cluster is still
registered (the spec keeps registrations of clusters that cannot be reached), and no other test's
Cluster can hold that server.
"""

from __future__ import annotations

import base64
import logging
import shlex
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from kokumi.core import api
from kokumi.core.fleet import stoprecord
from kokumi.core.registry import argocd
from kokumi.core.sources.clusterapi import CAPI_CLUSTER_NAME, CAPI_CLUSTERS
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.resources import CONFIG_MAPS, EVENTS, NAMESPACES, SECRETS
from kokumi.manager import run_manager
from kokumi.runtime.options import Options
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import Registration
from tests.support.deploy import (
    DEPLOY,
    bind_manager_secrets,
    ensure_namespace,
    run,
    service_account_kubeconfig,
    unreachable_kubeconfig,
    wait_until,
)

MANAGER = "system:serviceaccount:kokumi:kokumi"


async def wait_for(
    read: Callable[[], Awaitable[Any]], accept: Callable[[Any], bool], what: str
) -> Any:
    last: Any = None
    with trio.move_on_after(45):
        while True:
            last = await read()
            if accept(last):
                return last
            await trio.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


@asynccontextmanager
async def admin_client(hub: APIServer) -> AsyncIterator[Client]:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as client:
        yield client


def secret_data(kubeconfig: str) -> dict[str, str]:
    return {"value": base64.b64encode(kubeconfig.encode()).decode()}


def manager_kubeconfig(hub: APIServer) -> Path:
    """install.yaml applied; a kubeconfig with a fresh token of the real kokumi:kokumi."""
    ensure_namespace(hub, "argocd")
    run(hub.admin_kubeconfig, "apply", "--server-side", "-f", str(DEPLOY / "install.yaml"))
    token = run(
        hub.admin_kubeconfig, "-n", "kokumi", "create", "token", "kokumi", "--duration=10m"
    ).stdout.strip()
    path = hub.workdir / f"manager-{uuid.uuid4().hex[:8]}.kubeconfig"
    return service_account_kubeconfig(hub, token, path)


def ready(cluster: dict[str, Any]) -> dict[str, Any]:
    for condition in cluster.get("status", {}).get("conditions", []):
        if condition["type"] == "Ready":
            return dict(condition)
    return {}


async def test_manager_reads_secrets_only_where_bound_and_says_how(
    hub: APIServer,
    admission_policies: object,
    spoke_kubeconfig: Registration,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the workspace's RoleBinding: SecretNotReadable naming the command; with it, Ready.

    The command is taken from the Cluster's own message and run as it stands. The Secret watch
    of that namespace is refused meanwhile: it must neither crash the manager nor fill the log.
    A Cluster whose server is the metadata address ends in EgressDenied, as the real identity.
    """
    kubeconfig = manager_kubeconfig(hub)
    suffix = uuid.uuid4().hex[:8]
    own, workspace = f"kokumi-own-{suffix}", f"secrets-{suffix}"
    caplog.set_level(logging.INFO, logger="kokumi")
    async with admin_client(hub) as admin:
        for name in (own, workspace):
            await admin.create(NAMESPACES, {"metadata": {"name": name}})
        secrets = {
            "spoke-kubeconfig": spoke_kubeconfig.kubeconfig,
            "metadata-kubeconfig": unreachable_kubeconfig(
                "https://169.254.169.254", "a-token", hub.ca_pem
            ),
        }
        for secret_name, text in secrets.items():
            body: dict[str, Any] = {"metadata": {"name": secret_name}, "data": secret_data(text)}
            await admin.create(SECRETS, body, namespace=workspace)
        for cluster_name in ("spoke", "metadata"):
            body = {
                "apiVersion": api.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": cluster_name},
                "spec": {
                    "connection": "Kubeconfig",
                    "kubeconfig": {"secretRef": {"name": f"{cluster_name}-kubeconfig"}},
                },
            }
            await admin.create(api.CLUSTERS, body, namespace=workspace)

        async def cluster(name: str) -> dict[str, Any]:
            found: dict[str, Any] = await admin.get(api.CLUSTERS, name, namespace=workspace)
            return found

        options = Options(namespace=own, argocd_namespace="argocd", keep_in_cluster=False)
        try:
            async with trio.open_nursery() as nursery:
                manager = await nursery.start(
                    run_manager, Config.from_kubeconfig(kubeconfig), options
                )
                # Clusters that earlier tests left on the shared hub have watches of their own.
                assert workspace in manager.dispatcher.secret_watches.namespaces
                refused = await wait_for(
                    lambda: cluster("spoke"),
                    lambda c: ready(c).get("reason") == "SecretNotReadable",
                    "the Cluster reports SecretNotReadable",
                )
                command = (
                    f"kubectl -n {workspace} create rolebinding kokumi-manager-secrets"
                    " --clusterrole=kokumi-manager-secrets --serviceaccount=kokumi:kokumi"
                )
                assert ready(refused)["message"] == (
                    f"Kokumi may not read Secret spoke-kubeconfig in namespace {workspace}: bind"
                    f" it the ClusterRole kokumi-manager-secrets there: {command}"
                )
                # The refused watch backs off: a few seconds bring one warning, not one a try.
                await trio.sleep(4)
                warned = [
                    r
                    for r in caplog.records
                    if "may not list Secrets" in r.getMessage() and workspace in r.getMessage()
                ]
                assert len(warned) == 1, [r.getMessage() for r in warned]
                assert command in warned[0].getMessage()

                # The fix, exactly as the message gives it.
                args = shlex.split(command)
                assert args[0] == "kubectl"
                run(hub.admin_kubeconfig, *args[1:])
                spoke = await wait_for(
                    lambda: cluster("spoke"),
                    lambda c: ready(c).get("reason") == "Ready",
                    "the Cluster is Ready once the manager may read its Secret",
                )
                assert spoke["status"]["server"] == spoke_kubeconfig.server
                metadata = await wait_for(
                    lambda: cluster("metadata"),
                    lambda c: ready(c).get("reason") == "EgressDenied",
                    "the metadata address is refused",
                )
                assert ready(metadata)["message"].startswith(
                    "169.254.169.254 is in 169.254.0.0/16, where the manager does not connect"
                )
                assert any(
                    "may list Secrets in namespace" in r.getMessage() for r in caplog.records
                )

                # The watch stops with the namespace's last Kubeconfig Cluster.
                for cluster_name in ("spoke", "metadata"):
                    await admin.delete(api.CLUSTERS, cluster_name, namespace=workspace)
                await wait_for(
                    lambda: _async(manager.dispatcher.secret_watches.namespaces),
                    lambda namespaces: workspace not in namespaces,
                    "the workspace's Secret watch stops",
                )
                nursery.cancel_scope.cancel()
        finally:
            for name in (own, workspace):
                try:
                    await admin.delete(NAMESPACES, name)
                except errors.KubeError:
                    pass


async def _async(value: Any) -> Any:
    return value


async def test_manager_works_with_the_installed_rbac_and_policies(
    hub: APIServer, admission_policies: object
) -> None:
    ensure_namespace(hub, "argocd")
    run(hub.admin_kubeconfig, "apply", "--server-side", "-f", str(DEPLOY / "install.yaml"))
    token = run(
        hub.admin_kubeconfig, "-n", "kokumi", "create", "token", "kokumi", "--duration=10m"
    ).stdout.strip()
    suffix = uuid.uuid4().hex[:8]
    kubeconfig = service_account_kubeconfig(
        hub, token, hub.workdir / f"manager-{suffix}.kubeconfig"
    )
    server = f"https://kokumi-deploy-{suffix}.invalid:6443"
    registration = argocd.secret_name(server)

    async with admin_client(hub) as admin:
        # The manager's own namespace is kokumi: its Role there is its only create of Clusters
        # and Environments. in-cluster and local are deleted first, so the manager must create
        # them again.
        own, workspace = "kokumi", f"deploy-{suffix}"
        await admin.create(NAMESPACES, {"metadata": {"name": workspace}})
        for resource, name in ((api.CLUSTERS, "in-cluster"), (api.ENVIRONMENTS, "local")):
            try:
                await admin.delete(resource, name, namespace=own)
            except errors.NotFound:
                pass
        bind_manager_secrets(hub, workspace)
        secret = {"metadata": {"name": "edge-kubeconfig"}, "data": {}}
        secret["data"] = secret_data(unreachable_kubeconfig(server, "first-token", hub.ca_pem))
        await admin.create(SECRETS, secret, namespace=workspace)
        cluster = {
            "apiVersion": api.API_VERSION,
            "kind": "Cluster",
            "metadata": {"name": "edge", "labels": {"deploy-test": suffix}},
            "spec": {
                "connection": "Kubeconfig",
                "kubeconfig": {"secretRef": {"name": "edge-kubeconfig"}},
            },
        }
        await admin.create(api.CLUSTERS, cluster, namespace=workspace)
        environment = {
            "apiVersion": api.API_VERSION,
            "kind": "Environment",
            "metadata": {"name": "edge"},
            "spec": {"clusterSelector": {"matchLabels": {"deploy-test": suffix}}},
        }
        await admin.create(api.ENVIRONMENTS, environment, namespace=workspace)

        async def argocd_secret() -> dict[str, Any] | None:
            try:
                found: dict[str, Any] = await admin.get(SECRETS, registration, namespace="argocd")
            except errors.NotFound:
                return None
            return found

        async def edge() -> dict[str, Any]:
            found: dict[str, Any] = await admin.get(api.CLUSTERS, "edge", namespace=workspace)
            return found

        options = Options(namespace=own, argocd_namespace="argocd")
        try:
            async with trio.open_nursery() as nursery:
                manager = await nursery.start(
                    run_manager, Config.from_kubeconfig(kubeconfig), options
                )
                assert manager is not None

                # Registered in argocd through the registrar role, past the integrity policy.
                registered = await wait_for(argocd_secret, lambda s: s is not None, "registered")
                labels = registered["metadata"]["labels"]
                assert labels[argocd.LABEL_CLUSTER] == "edge"
                assert labels[argocd.LABEL_CLUSTER_NAMESPACE] == workspace
                # Status and finalizer written on the Cluster.
                status = await wait_for(
                    edge,
                    lambda c: any(
                        x["type"] == "Ready" for x in c.get("status", {}).get("conditions", [])
                    ),
                    "the Cluster reports Ready",
                )
                assert "delivery.kokumi.dev/argocd-registration" in status["metadata"]["finalizers"]
                # in-cluster and local created in the manager's own namespace.
                await wait_for(
                    lambda: admin.list(api.CLUSTERS, namespace=own),
                    lambda items: "in-cluster" in [i["metadata"]["name"] for i in items["items"]],
                    "the Cluster in-cluster exists",
                )
                await wait_for(
                    lambda: admin.list(api.ENVIRONMENTS, namespace=own),
                    lambda items: "local" in [i["metadata"]["name"] for i in items["items"]],
                    "the Environment local exists",
                )
                # An event on the Cluster.
                events = await wait_for(
                    lambda: admin.list(EVENTS, namespace=workspace),
                    lambda items: any(
                        e["involvedObject"]["name"] == "edge" for e in items["items"]
                    ),
                    "an event on the Cluster",
                )
                assert events["items"][0]["source"]["component"] == "kokumi"

                # A changed kubeconfig is copied over: an update of the registration in place.
                secret["data"] = secret_data(
                    unreachable_kubeconfig(server, "second-token", hub.ca_pem)
                )
                await admin.replace(SECRETS, secret, namespace=workspace)
                updated = await wait_for(
                    argocd_secret,
                    lambda s: (
                        s is not None
                        and s["metadata"]["resourceVersion"]
                        != registered["metadata"]["resourceVersion"]
                    ),
                    "the registration is updated",
                )
                assert updated["metadata"]["uid"] == registered["metadata"]["uid"]
                assert b"second-token" in base64.b64decode(updated["data"]["config"])

                # Deleting the Cluster deletes the registration, then the finalizer goes.
                await admin.delete(api.CLUSTERS, "edge", namespace=workspace)
                await wait_for(argocd_secret, lambda s: s is None, "the registration is deleted")

                async def edge_gone() -> bool:
                    try:
                        await edge()
                    except errors.NotFound:
                        return True
                    return False

                await wait_for(edge_gone, bool, "the Cluster is deleted")

                # The stop record of next checks: created, then written again over it.
                for _ in range(2):
                    await manager.record_stop()
                    record = await admin.get(CONFIG_MAPS, stoprecord.NAME, namespace=own)
                    in_cluster = await admin.get(api.CLUSTERS, "in-cluster", namespace=own)
                    uid = in_cluster["metadata"]["uid"]
                    recorded = stoprecord.read_config_map(record, time.time(), 60.0)
                    assert stoprecord.uid_key(uid) in recorded, record["data"]
                nursery.cancel_scope.cancel()
        finally:
            try:
                await admin.delete(NAMESPACES, workspace)
            except errors.KubeError:
                pass


async def test_cluster_sources_work_with_the_installed_rbac_and_policies(
    hub: APIServer, admission_policies: object, capi_crd: object, spoke_kubeconfig: Registration
) -> None:
    """As kokumi:kokumi: no RoleBinding, SecretNotReadable with the fix; with it, the Cluster.

    The manager creates the Cluster past kokumi-cluster-secret-access (it may get the Secret
    only through the RoleBinding), reads the Cluster API cluster's labels with its ClusterRole,
    and deletes the Cluster when the Secret stops matching.
    """
    kubeconfig = manager_kubeconfig(hub)
    suffix = uuid.uuid4().hex[:8]
    own, workspace = f"kokumi-own-{suffix}", f"sources-{suffix}"
    async with admin_client(hub) as admin:
        for name in (own, workspace):
            await admin.create(NAMESPACES, {"metadata": {"name": name}})
        body = {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": "work", "labels": {"env": "prod"}},
            "spec": {},
        }
        capi = await admin.create(CAPI_CLUSTERS, body, namespace=workspace)
        # As Cluster API writes it: its cluster is its controller.
        owner = {
            "apiVersion": capi["apiVersion"],
            "kind": "Cluster",
            "name": "work",
            "uid": capi["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        secret = {
            "metadata": {
                "name": "work-kubeconfig",
                "labels": {CAPI_CLUSTER_NAME: "work"},
                "ownerReferences": [owner],
            },
            "data": secret_data(spoke_kubeconfig.kubeconfig),
        }
        await admin.create(SECRETS, secret, namespace=workspace)
        source = {
            "apiVersion": api.API_VERSION,
            "kind": "ClusterSource",
            "metadata": {"name": "capi"},
            "spec": {"from": "ClusterAPI", "selector": {"matchLabels": {"env": "prod"}}},
        }
        await admin.create(CLUSTER_SOURCES, source, namespace=workspace)

        async def get_source() -> dict[str, Any]:
            found: dict[str, Any] = await admin.get(CLUSTER_SOURCES, "capi", namespace=workspace)
            return found

        async def clusters() -> list[str]:
            listing = await admin.list(api.CLUSTERS, namespace=workspace)
            return [c["metadata"]["name"] for c in listing["items"]]

        options = Options(namespace=own, argocd_namespace="argocd", keep_in_cluster=False)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(run_manager, Config.from_kubeconfig(kubeconfig), options)
                refused = await wait_for(
                    get_source,
                    lambda s: ready(s).get("reason") == "SecretNotReadable",
                    "the source reports SecretNotReadable",
                )
                command = (
                    f"kubectl -n {workspace} create rolebinding kokumi-manager-secrets"
                    " --clusterrole=kokumi-manager-secrets --serviceaccount=kokumi:kokumi"
                )
                assert ready(refused)["message"] == (
                    f"Kokumi may not list Secrets in namespace {workspace}: bind it the ClusterRole"
                    f" kokumi-manager-secrets there: {command}; its Clusters stay as they are"
                    " meanwhile"
                )
                assert await clusters() == []
                run(hub.admin_kubeconfig, *shlex.split(command)[1:])
                made = await wait_for(
                    get_source,
                    lambda s: ready(s).get("reason") == "Ready" and s["status"]["made"] == 1,
                    "the source makes the Cluster once the manager may read the Secrets",
                )
                assert made["status"]["matched"] == 1
                assert await clusters() == ["work"]
                # Cluster API relabels its cluster: the Cluster goes (its finalizer released).
                await admin.patch_merge(
                    CAPI_CLUSTERS, "work", {"metadata": {"labels": {"env": "dev"}}},
                    namespace=workspace,
                )  # fmt: skip
                await wait_for(clusters, lambda names: names == [], "the Cluster is deleted")
                await admin.delete(CLUSTER_SOURCES, "capi", namespace=workspace)
                nursery.cancel_scope.cancel()
        finally:
            for name in (own, workspace):
                try:
                    await admin.delete(NAMESPACES, name)
                except errors.KubeError:
                    pass


async def test_a_secrets_source_keeps_its_clusters_while_the_manager_may_not_list_secrets(
    hub: APIServer, admission_policies: object, spoke_kubeconfig: Registration
) -> None:
    """As kokumi:kokumi, a ``from: Secrets`` source's Cluster, then a restart without the
    RoleBinding: the source says how to bind it and its Cluster stays, the same object; bound
    again, the source is Ready with that Cluster, not a new one.

    A missing permission is somebody's mistake or a change half made, never a sign the Secrets
    went: deleting the Cluster would take its registration from Argo CD.
    """
    kubeconfig = manager_kubeconfig(hub)
    suffix = uuid.uuid4().hex[:8]
    own, workspace = f"kokumi-own-{suffix}", f"sources-{suffix}"
    bind = (
        f"-n {workspace} create rolebinding kokumi-manager-secrets"
        " --clusterrole=kokumi-manager-secrets --serviceaccount=kokumi:kokumi"
    )
    async with admin_client(hub) as admin:
        for name in (own, workspace):
            await admin.create(NAMESPACES, {"metadata": {"name": name}})
        run(hub.admin_kubeconfig, *shlex.split(bind))
        secret = {
            "metadata": {"name": "edge-1", "labels": {"kokumi.dev/kubeconfig": "true"}},
            "data": secret_data(spoke_kubeconfig.kubeconfig),
        }
        await admin.create(SECRETS, secret, namespace=workspace)
        source = {
            "apiVersion": api.API_VERSION,
            "kind": "ClusterSource",
            "metadata": {"name": "team"},
            "spec": {
                "from": "Secrets",
                "secretSelector": {"matchLabels": {"kokumi.dev/kubeconfig": "true"}},
            },
        }
        await admin.create(CLUSTER_SOURCES, source, namespace=workspace)

        async def get_source() -> dict[str, Any]:
            found: dict[str, Any] = await admin.get(CLUSTER_SOURCES, "team", namespace=workspace)
            return found

        async def uids() -> dict[str, str]:
            listing = await admin.list(api.CLUSTERS, namespace=workspace)
            return {c["metadata"]["name"]: c["metadata"]["uid"] for c in listing["items"]}

        def made_one(s: dict[str, Any]) -> bool:
            return ready(s).get("reason") == "Ready" and s["status"].get("made") == 1

        options = Options(namespace=own, argocd_namespace="argocd", keep_in_cluster=False)
        config = Config.from_kubeconfig(kubeconfig)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(run_manager, config, options)
                await wait_for(get_source, made_one, "the source makes its Cluster")
                before = await uids()
                assert list(before) == ["edge-1"]
                nursery.cancel_scope.cancel()

            run(hub.admin_kubeconfig, "-n", workspace, "delete", "rolebinding",
                "kokumi-manager-secrets")  # fmt: skip

            def may_not_list() -> bool | None:
                answer = run(
                    hub.admin_kubeconfig, "auth", "can-i", "list", "secrets", "-n", workspace,
                    f"--as={MANAGER}", check=False,
                )  # fmt: skip
                return True if answer.stdout.strip() == "no" else None

            wait_until(may_not_list, "the manager may no longer list the workspace's Secrets")
            async with trio.open_nursery() as nursery:
                await nursery.start(run_manager, config, options)
                refused = await wait_for(
                    get_source,
                    lambda s: "may not list Secrets" in ready(s).get("message", ""),
                    "the source says the manager may not list Secrets",
                )
                assert ready(refused)["status"] == "False"
                assert ready(refused)["message"].endswith("its Clusters stay as they are meanwhile")
                assert await uids() == before
                run(hub.admin_kubeconfig, *shlex.split(bind))
                await wait_for(get_source, made_one, "the source is Ready again once bound")
                assert await uids() == before, "the same Cluster, neither deleted nor made again"
                await admin.delete(CLUSTER_SOURCES, "team", namespace=workspace)
                nursery.cancel_scope.cancel()
        finally:
            for name in (own, workspace):
                try:
                    await admin.delete(NAMESPACES, name)
                except errors.KubeError:
                    pass
