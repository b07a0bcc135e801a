"""Keeps the Cluster ``in-cluster`` and the Environment ``local`` in the manager's own namespace.

Kokumi's own namespace is a workspace that works out of the box: Orders there deploy to the cluster
Kokumi runs in. So both objects are created when missing, also after somebody deletes them. They
are also the admins' to change: label ``in-cluster``, narrow ``local``. So the keeper only ever
creates, with a plain ``create`` whose ``AlreadyExists`` means "done". It never applies, patches or
updates, so no edit is ever overwritten, and the label ``delivery.kokumi.dev/in-cluster`` is set
only on the Cluster it creates and never removed from any.

It follows both objects with a watch on their names and re-creates one as soon as it is deleted.
A check every ``interval`` seconds is the fallback for a watch that is down or reconnecting: one
GET per object, and a create only when the GET says NotFound, so a quiet namespace costs no writes.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Final

import trio

from kokumi.core.api import CLUSTERS, ENVIRONMENTS, IN_CLUSTER_LABEL
from kokumi.kube import (
    AlreadyExists,
    Client,
    KubeError,
    NotFound,
    Resource,
    Resync,
    WatchEvent,
    watch,
)

__all__ = [
    "CLUSTERS",
    "CLUSTER_NAME",
    "ENVIRONMENTS",
    "ENVIRONMENT_NAME",
    "IN_CLUSTER_LABEL",
    "ensure_in_cluster",
    "in_cluster_cluster",
    "keep_in_cluster",
    "local_environment",
]

log = logging.getLogger(__name__)

# Kokumi's resources, here until they move to kokumi.core.api with the rest of the API.

"""The label ``local`` selects ``in-cluster`` by; set by Kokumi only on the Cluster it creates."""

CLUSTER_NAME: Final = "in-cluster"
ENVIRONMENT_NAME: Final = "local"


def in_cluster_cluster(namespace: str) -> dict[str, Any]:
    """The Cluster ``in-cluster`` as Kokumi creates it: InCluster, labelled, described."""
    return {
        "apiVersion": CLUSTERS.api_version,
        "kind": CLUSTERS.kind,
        "metadata": {
            "name": CLUSTER_NAME,
            "namespace": namespace,
            "labels": {IN_CLUSTER_LABEL: "true"},
        },
        "spec": {"description": "The cluster Kokumi runs in", "connection": "InCluster"},
    }


def local_environment(namespace: str) -> dict[str, Any]:
    """The Environment ``local`` as Kokumi creates it: it selects ``in-cluster`` by its label."""
    return {
        "apiVersion": ENVIRONMENTS.api_version,
        "kind": ENVIRONMENTS.kind,
        "metadata": {"name": ENVIRONMENT_NAME, "namespace": namespace},
        "spec": {
            "description": "The cluster Kokumi runs in",
            "clusterSelector": {"matchLabels": {IN_CLUSTER_LABEL: "true"}},
            "delivery": "ArgoCD",
        },
    }


def _kept(namespace: str) -> tuple[tuple[Resource, dict[str, Any]], ...]:
    return (
        (CLUSTERS, in_cluster_cluster(namespace)),
        (ENVIRONMENTS, local_environment(namespace)),
    )


async def ensure_in_cluster(client: Client, namespace: str) -> list[str]:
    """Create ``in-cluster`` and ``local`` in ``namespace`` where missing; what it created.

    The answer names each object it created as ``Kind/name`` (``Cluster/in-cluster``,
    ``Environment/local``), in that order; an empty list means both were there. Errors other than
    AlreadyExists propagate: a one-shot caller (the CLI) wants to see them.
    """
    created = []
    for resource, body in _kept(namespace):
        if await _create_if_missing(client, resource, body, namespace):
            created.append(f"{resource.kind}/{body['metadata']['name']}")
    return created


async def _create_if_missing(
    client: Client, resource: Resource, body: dict[str, Any], namespace: str
) -> bool:
    """Whether this call created the object. A GET first keeps the periodic check free of writes."""
    name = body["metadata"]["name"]
    try:
        await client.get(resource, name, namespace=namespace, metadata_only=True)
    except NotFound:
        pass
    else:
        return False
    try:
        await client.create(resource, body, namespace=namespace)
    except AlreadyExists:
        return False  # created meanwhile, by a user or another replica: theirs stands
    log.info("created %s %s in namespace %s", resource.kind, name, namespace)
    return True


async def _ensure_logged(client: Client, namespace: str) -> bool:
    """Ensure, but never fail: whether it worked. The keeper retries a failure soon."""
    try:
        await ensure_in_cluster(client, namespace)
    except KubeError as error:
        log.warning(
            "cannot ensure %s %s and %s %s in namespace %s: %s; retrying",
            CLUSTERS.kind,
            CLUSTER_NAME,
            ENVIRONMENTS.kind,
            ENVIRONMENT_NAME,
            namespace,
            error,
        )
        return False
    return True


async def keep_in_cluster(
    client: Client,
    namespace: str,
    *,
    interval: float = 30.0,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep ``in-cluster`` and ``local`` in ``namespace`` until cancelled.

    Use with ``await nursery.start(keep_in_cluster, client, namespace)``: it returns once a first
    ensure has run, so both exist when the API server allowed it. A failure (the CRDs not installed
    yet, the server away) is logged and retried, never raised: the manager must not stop for it.
    """
    failures = 0 if await _ensure_logged(client, namespace) else 1
    send, receive = trio.open_memory_channel[WatchEvent | Resync](16)
    async with trio.open_nursery() as nursery, send, receive:
        for resource, name in ((CLUSTERS, CLUSTER_NAME), (ENVIRONMENTS, ENVIRONMENT_NAME)):
            # Not nursery.start: a watch waits for its first list, and with the CRDs missing it
            # would hold the manager's start. The first Resync ensures once more, which is cheap.
            nursery.start_soon(
                functools.partial(
                    watch,
                    client,
                    resource,
                    send.clone(),
                    namespace=namespace,
                    field_selector=f"metadata.name={name}",
                )
            )
        task_status.started()
        next_check = trio.current_time() + _delay(interval, failures)
        while True:
            with trio.move_on_at(next_check):
                event = await receive.receive()
                # Each watch follows one name: an empty Resync (the first list, or a relist after
                # the history was gone) says the object is missing, and a DELETED says it went.
                # Additions and edits need nothing.
                if not _gone(event):
                    continue
            failures = 0 if await _ensure_logged(client, namespace) else failures + 1
            next_check = trio.current_time() + _delay(interval, failures)


def _gone(event: WatchEvent | Resync) -> bool:
    if isinstance(event, Resync):
        return not event.objects
    return event.type == "DELETED"


def _delay(interval: float, failures: int) -> float:
    """The next check: after ``interval``, or sooner while failing (1, 2, 4 ... s up to it).

    A deletion that could not be undone (the server away for a moment) should not wait the whole
    interval, and CRDs installed after the manager should be noticed within seconds; doubling
    keeps a lasting failure from filling the log.
    """
    if failures == 0:
        return interval
    return float(min(interval, 2 ** min(failures - 1, 16)))
