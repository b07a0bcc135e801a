"""Waiting on ClusterSources and the Clusters they keep, on the real hub (manager tests)."""

from __future__ import annotations

from typing import Any

import trio

from kokumi.core.sources.plan import Existing, Plan, cluster_body, existing_of
from kokumi.core.sources.spec import CLUSTER_SOURCES, ClusterSource
from kokumi.kube import errors
from kokumi.manager import Manager
from tests.support.manager import Workspace, ready_of, wait_for

__all__ = [
    "applied",
    "cleanup",
    "get_source",
    "gone",
    "passes_beyond",
    "wait_reason",
    "wait_source",
]


async def get_source(ws: Workspace, ns: str, name: str = "capi") -> dict[str, Any]:
    return await ws.client.get(CLUSTER_SOURCES, name, namespace=ns)


async def wait_source(
    ws: Workspace, ns: str, reason: str, name: str = "capi", **counts: int
) -> dict[str, Any]:
    def fits(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return ready_of(obj).get("reason") == reason and all(
            status.get(k) == v for k, v in counts.items()
        )

    result: dict[str, Any] = await wait_for(
        lambda: get_source(ws, ns, name), fits, f"ClusterSource {ns}/{name}: {reason} {counts}"
    )
    return result


async def wait_reason(
    ws: Workspace, ns: str, name: str, reason: str, timeout: float = 30.0
) -> dict[str, Any]:
    """The Cluster once it reports ``reason``; it may not exist yet (the source makes it)."""

    async def read() -> dict[str, Any]:
        try:
            return await ws.get_cluster(ns, name)
        except errors.NotFound:
            return {}

    result: dict[str, Any] = await wait_for(
        read,
        lambda c: ready_of(c).get("reason") == reason,
        f"Cluster {ns}/{name}: {reason}",
        timeout,
    )
    return result


async def passes_beyond(running: Manager, count: int) -> None:
    async def read() -> int:
        await trio.sleep(0.1)
        return running.dispatcher.sources_actor.passes

    await wait_for(read, lambda n: n > count, f"the sources actor to pass {count} times")


async def gone(ws: Workspace, ns: str, name: str) -> None:
    async def read() -> bool:
        try:
            await ws.get_cluster(ns, name)
        except errors.NotFound:
            return True
        return False

    await wait_for(read, bool, f"Cluster {ns}/{name} to be deleted")


async def cleanup(ws: Workspace) -> None:
    """The sources first, or they make again the Clusters the cleanup deletes."""
    for ns in ws.namespaces:
        await ws.client.delete_collection(CLUSTER_SOURCES, namespace=ns)
    await ws.cleanup()


def applied(
    src: ClusterSource, decided: Plan, existing: dict[str, Existing]
) -> dict[str, Existing]:
    """The source's Clusters once ``decided`` is carried out, as the plan's property tests of
    every kind of source read them."""
    after = {n: e for n, e in existing.items() if n not in decided.delete}
    for d in (*decided.create, *decided.update):
        after[d.name] = existing_of(cluster_body(src, d))
    return after
