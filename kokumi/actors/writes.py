"""The writes every actor makes the same way, apart so that each actor writes a status only when
it changed and loses an Event without harm, whichever actor it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kokumi.core import api
from kokumi.core.api import unstructured
from kokumi.core.cluster.status import ready_event
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.resources import EVENTS
from kokumi.objects import Resource

__all__ = ["EventRecorder", "replace_status", "set_finalizer", "write_status"]

log = logging.getLogger(__name__)


_Status = api.ClusterStatus | api.EnvironmentStatus


async def write_status(
    client: Client,
    resource: Resource,
    meta: api.Meta,
    status: _Status,
    *,
    unchanged: Iterable[_Status | None],
) -> bool:
    """Write ``status`` unless it equals one of ``unchanged``; whether it was written.

    ``unchanged`` holds what the object says and what was last written (the watch may not have
    brought our own write back yet): a status equal to either costs no API call. The values are
    compared typed, and turned into the API's JSON only here, once, for the write.
    """
    if any(status == seen for seen in unchanged):
        return False
    return await replace_status(
        client, resource, meta.name, meta.namespace, meta.uid, unstructured(status)
    )


async def replace_status(
    client: Client,
    resource: Resource,
    name: str,
    namespace: str | None,
    uid: str,
    status: Mapping[str, Any],
) -> bool:
    """Make ``status`` the status of the object ``uid``; whether it was written.

    An actor reports on the object it was given, never on a new one of the same name made after
    a delete: a status merge patch lands on whatever has the name (the status subresource keeps
    the object's metadata, so a uid in the patch is no precondition there), and an old object's
    conflict would stand on its successor. A JSON patch that tests ``/metadata/uid`` first is
    refused instead, 422 like any failed test: the object is read to tell that from a status the
    schema refuses, which is a fault of ours and must not be lost.
    """
    operations: list[dict[str, Any]] = [{"op": "add", "path": "/status", "value": _set(status)}]
    if uid:
        operations.insert(0, {"op": "test", "path": "/metadata/uid", "value": uid})
    try:
        await client.patch_json(
            resource, name, operations, namespace=namespace, subresource="status"
        )
    except errors.NotFound:
        return False  # deleted meanwhile: nothing to report on
    except errors.Invalid:
        try:
            current = await client.get(resource, name, namespace=namespace)
        except errors.NotFound:
            return False
        if str(current.get("metadata", {}).get("uid", "")) != uid:
            return False  # made again under the name: its own actor reports on it
        raise
    return True


async def set_finalizer(
    writer: Client,
    reader: Client,
    cluster: api.Cluster | api.Invalid,
    present: bool,
    parse: Callable[[Mapping[str, Any]], api.Cluster | api.Invalid] = api.parse_cluster,
) -> api.Cluster | api.Invalid | None:
    """Add (``present``) or drop Kokumi's finalizer on the version of ``cluster`` known; the
    Cluster as the API server now has it, or None when it is gone or no longer the same object.

    The resourceVersion makes the patch safe against a concurrent edit of the list. A conflict
    is not retried at once with the same stale version (that is a request loop until the watch
    catches up): the object is read again with ``reader``, and a second conflict is raised, to
    wait its backoff. ``parse`` types the answers as the watch does (the annotations it keeps).
    """
    meta, uid = cluster.metadata, cluster.metadata.uid
    current = cluster
    for attempt in range(2):
        others = tuple(f for f in meta.finalizers if f != api.FINALIZER)
        patch = {
            "metadata": {
                "finalizers": [*others, api.FINALIZER] if present else list(others),
                "resourceVersion": meta.resource_version,
            }
        }
        try:
            updated = await writer.patch_merge(
                api.CLUSTERS, meta.name, patch, namespace=meta.namespace
            )
        except errors.NotFound:
            return None
        except errors.Conflict:
            if attempt:
                raise
            try:
                fresh = await reader.get(api.CLUSTERS, meta.name, namespace=meta.namespace)
            except errors.NotFound:
                return None
            current = parse(fresh)
            if current.metadata.uid != uid:
                return None  # another Cluster of the same name: not ours to change
            meta = current.metadata
            if (api.FINALIZER in meta.finalizers) == present:
                return current  # already as it should be
            continue
        return parse(updated)
    return current


def _set(value: Any) -> Any:
    """The value without its nulls: a merge patch's way of saying "no such field", which a
    replaced status says by leaving the field out."""
    if isinstance(value, Mapping):
        return {k: _set(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


class EventRecorder:
    """Kubernetes Events on Ready transitions, as ``kubectl describe`` users expect to see them."""

    def __init__(self, client: Client, component: str = "kokumi") -> None:
        self._client = client
        self._component = component

    async def ready_changed(
        self,
        resource: Resource,
        meta: api.Meta,
        old: api.ClusterStatus | None,
        new: api.ClusterStatus,
        *,
        client: Client | None = None,
    ) -> None:
        """Record the Event a status write from ``old`` to ``new`` is worth, if any
        (:func:`kokumi.core.cluster.status.ready_event` says which are)."""
        ready = ready_event(old, new)
        if ready is not None:
            await self.record(
                resource,
                meta,
                reason=ready.reason,
                message=ready.message,
                warning=ready.status != "True",
                client=client,
            )

    async def record(
        self,
        resource: Resource,
        meta: api.Meta,
        *,
        reason: str,
        message: str,
        warning: bool,
        client: Client | None = None,
    ) -> None:
        """Record an Event, with ``client`` if given (a Cluster actor's fenced writer)."""
        now = api.now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
            "involvedObject": {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self._component,
        }
        try:
            await (client or self._client).create(EVENTS, event, namespace=meta.namespace)
        except errors.Fenced:
            return  # the Cluster's shard went meanwhile: its new server tells
        except errors.KubeError as exc:
            # An Event is a courtesy; losing one must not stop the status from being right.
            log.info("could not record event for %s/%s: %s", meta.namespace, meta.name, exc)
