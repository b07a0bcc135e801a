"""The writes every actor makes the same way, apart so that each actor writes a status only when
it changed and loses an Event without harm, whichever actor it is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kokumi.core import api
from kokumi.core.api import unstructured
from kokumi.kube import errors
from kokumi.kube.client import EVENTS, Client
from kokumi.objects import Resource

__all__ = ["EventRecorder", "write_status"]

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
    body = {"status": unstructured(status)}
    try:
        await client.patch_merge(
            resource, meta.name, body, namespace=meta.namespace, subresource="status"
        )
    except errors.NotFound:
        return False  # deleted meanwhile: nothing to report on
    return True


class EventRecorder:
    """Kubernetes Events on Ready transitions, as ``kubectl describe`` users expect to see them."""

    def __init__(self, client: Client, component: str = "kokumi") -> None:
        self._client = client
        self._component = component

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
