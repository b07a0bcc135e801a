"""What ``kokumi cluster describe`` and the Cluster page read, in one place, as the user.

Reading is the I/O half of describing a Cluster; :mod:`kokumi.core.clusterview` is the half that
decides what it means. Both front ends call this, so that what a user may not read (Argo CD's
Secrets, Events) is left out the same way in both, and never fails the whole page.
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs

from kokumi.core import api
from kokumi.core.registry import argocd
from kokumi.kube.client import Client
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.kube.resources import EVENTS, SECRETS
from kokumi.workspace.newcluster import api_error

__all__ = ["Facts", "cluster_facts"]


@attrs.frozen
class Facts:
    cluster: dict[str, Any]
    clusters: list[dict[str, Any]]
    environments: list[dict[str, Any]]
    argocd_secrets: list[dict[str, Any]] | None  # None: the user may not list them
    events: list[dict[str, Any]]


async def cluster_facts(
    hub: Client, namespace: str, name: str, argocd_namespace: str = argocd.ARGOCD_NAMESPACE
) -> Facts:
    """The Cluster, its namespace's Clusters and Environments, Argo CD's Secrets, its Events.

    The Cluster's own read raises the client's error (a caller says "no such Cluster" in its own
    words); the namespace's lists a :class:`~kokumi.workspace.newcluster.Refused`.
    """
    cluster = await hub.get(api.CLUSTERS, name, namespace=namespace)
    try:
        clusters = (await hub.list(api.CLUSTERS, namespace=namespace))["items"]
        environments = (await hub.list(api.ENVIRONMENTS, namespace=namespace))["items"]
    except KubeError as exc:
        what = f"cannot list the Clusters and Environments of namespace {namespace}"
        raise api_error(what, exc) from None
    secrets: list[dict[str, Any]] | None
    try:
        listing = await hub.list(
            SECRETS,
            namespace=argocd_namespace,
            label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
        )
        secrets = listing["items"]
    except (Forbidden, NotFound):
        secrets = None
    events: list[dict[str, Any]] = []
    uid = cluster["metadata"].get("uid")
    # Events are a courtesy; a user who may not read them still gets the rest.
    with contextlib.suppress(KubeError):
        events = (
            await hub.list(EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={uid}")
        )["items"]
    return Facts(cluster, clusters, environments, secrets, events)
