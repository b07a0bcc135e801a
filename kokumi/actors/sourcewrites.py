"""The ClusterSources actor's writes: a plan's Clusters sent, and a source's status.

Apart from the actor (:mod:`kokumi.actors.sources`), which keeps what the writes' outcomes
change (the errors logged once per change, the namespaces to pass again, the writes in flight):
what is sent for a plan, and how, depends only on the plan and the Clusters as the store keeps
them (:func:`kokumi.core.sources.plan.cluster_patch` decides an update's patch).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from kokumi.actors.writes import replace_status
from kokumi.core import api
from kokumi.core.sources.plan import Plan, cluster_body, cluster_patch
from kokumi.core.sources.spec import CLUSTER_SOURCES, ClusterSource
from kokumi.core.sources.status import SourceStatus, status_patch
from kokumi.kube import errors
from kokumi.kube.client import Client

__all__ = ["Attempt", "write_clusters", "write_status"]

#: The sources' log, under one name wherever its lines are written.
log = logging.getLogger("kokumi.actors.sources")

Attempt = Callable[[str, str, Callable[[], Awaitable[object]]], Awaitable[None]]
"""Carries out one write (the Cluster's name, the verb, the call) and takes its outcome."""


async def write_clusters(
    writer: Client,
    source: ClusterSource,
    decided: Plan,
    clusters: Mapping[str, Mapping[str, Any]],
    attempt: Attempt,
) -> None:
    """Send the plan's creates, updates and deletes, each through ``attempt``.

    ``clusters`` are the namespace's Clusters as the store keeps them: an update is conditional
    on the version kept, a delete on the uid, so that a Cluster made again meanwhile under the
    name is not taken for the one planned over.
    """
    ns = source.namespace
    # Creates side by side, a few at a time: a thousand new Secrets are a thousand POSTs.
    try:
        async with trio.open_nursery() as nursery:
            for desired in decided.create:
                body = cluster_body(source, desired)
                nursery.start_soon(
                    attempt, desired.name, "create",
                    functools.partial(writer.create, api.CLUSTERS, body, namespace=ns),
                )  # fmt: skip
    except* errors.Fenced as fenced:
        # Refused at their send, one or several: the pass stops once, as for one write (the
        # group itself went past the actor's handler and ended the manager).
        raise errors.Fenced("creates not sent: this replica may not write now") from fenced
    for desired in decided.update:
        patch = cluster_patch(source, desired, clusters.get(desired.name, {}))
        if isinstance(patch, list):
            call = functools.partial(
                writer.patch_json, api.CLUSTERS, desired.name, patch, namespace=ns
            )
        else:
            call = functools.partial(
                writer.patch_merge, api.CLUSTERS, desired.name, patch, namespace=ns
            )
        await attempt(desired.name, "update", call)
    for name in decided.delete:
        uid = str(clusters.get(name, {}).get("metadata", {}).get("uid", "")) or None
        await attempt(
            name,
            "delete",
            functools.partial(writer.delete, api.CLUSTERS, name, namespace=ns, uid=uid),
        )


async def write_status(writer: Client, obj: Mapping[str, Any], status: SourceStatus) -> bool:
    """Write the source's status if it differs; whether it is as it should be now.

    A refused write is logged and answered False, for the actor to pass the namespace again;
    only a fenced writer's refusal stops the pass, as every write's does.
    """
    meta = obj.get("metadata", {})
    patch = status_patch(obj.get("status"), status, api.now_rfc3339())
    if patch is None:
        return True
    try:
        await replace_status(
            writer,
            CLUSTER_SOURCES,
            str(meta.get("name")),
            str(meta.get("namespace")),
            str(meta.get("uid") or ""),
            patch,
        )
    except errors.Fenced:
        raise
    except errors.KubeError as exc:
        log.warning(
            "ClusterSource %s/%s: status write failed (%s); retrying",
            meta.get("namespace"),
            meta.get("name"),
            exc,
        )
        return False
    return True
