"""What the Clusters list and the Overview read from the hub, as the signed-in user.

Apart from the pages (:mod:`kokumi.ui.clusters`), which decide what to show with
:mod:`kokumi.core.clusterview`, because reading is where a fleet's size and a user's rights
bite: the first page in the API's order is one request however many Clusters there are, any
other view reads every Cluster once per session (:class:`kokumi.ui.pages.Lists`), and a user who
may not list all namespaces is answered namespace by namespace with what they may see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kokumi.core import api, clusterview
from kokumi.core.sources.spec import CLUSTER_SOURCES
from kokumi.kube.client import Client
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.kube.paths import resource_path
from kokumi.kube.resources import NAMESPACES
from kokumi.ui.pages import UI, Listed
from kokumi.ui.security import Session
from kokumi.workspace import newcluster

__all__ = ["cluster_sources", "every_cluster", "list_page"]


async def list_page(
    ui: UI, session: Session, hub: Client, query: clusterview.Query
) -> tuple[clusterview.Window, str, str, float | None, tuple[str, ...]]:
    """The page of the list ``query`` asks for, where from, why some may be missing, how
    many seconds old the list is (None: read for this view), and the namespaces looked in when
    the user may not list all of them.

    The first page in the API's order is one request of a page of Clusters, whatever the fleet's
    size (:func:`_first_page`); any other page, order or status filter needs every Cluster, read
    as the user by :func:`_clusters` and kept for the session for ``LIST_TTL`` seconds
    (:class:`kokumi.ui.pages.Lists`), so that paging, sorting and reloading read them once.
    """
    if query.in_api_order and query.page == 1 and not query.selector:
        first = await _first_page(hub, query.namespace, session.user)
        looked = (query.namespace,) if query.namespace else ()
        if isinstance(first, str):
            return clusterview.window([], 1), _scope_of(query.namespace), first, None, looked
        if first is not None:
            items, total = first
            now = ui.clock()
            rows = tuple(clusterview.row(c, now) for c in items)
            shown = clusterview.Window(rows, total, 1, clusterview.pages_of(total))
            return shown, _scope_of(query.namespace), "", None, looked
    listed, error, age = await every_cluster(ui, session, hub, query.namespace, query.selector)
    chosen = clusterview.select(listed.ordered(query.sort, query.descending), query)
    return clusterview.window(chosen, query.page), listed.scope, error, age, listed.looked


async def every_cluster(
    ui: UI, session: Session, hub: Client, namespace: str, selector: str
) -> tuple[Listed, str, float | None]:
    """Every Cluster the user may list there, from the session's recent lists or read now (see
    :class:`kokumi.ui.pages.Lists`); why some may be missing; how many seconds old (None: now)."""
    known: Sequence[str] = () if namespace else ui.known_namespaces(session)
    listed = ui.lists.get(session, namespace, selector, known)
    if listed is not None:
        return listed, "", ui.lists.clock() - listed.at
    items, scope, error, looked = await _clusters(
        hub, namespace or None, selector, known, session.user
    )
    now = ui.clock()
    every = [clusterview.row(c, now) for c in items]
    if error or scope == clusterview.NOWHERE:
        # Nowhere to look is no list to keep: the namespace the user names next is where the
        # next read looks, at once (kept, it answered every read for 30 s, the named one too).
        return Listed(tuple(every), scope, 0.0, tuple(looked)), error, None
    kept = ui.lists.put(session, namespace, selector, every, scope, known, looked)
    return kept, "", None


async def cluster_sources(
    hub: Client, namespace: str, rows: Sequence[clusterview.Row]
) -> tuple[list[dict[str, Any]], str]:
    """The ClusterSources the user may list where the Clusters are, and a line on any missing.

    All namespaces (or the one asked for) when the user may list them so; else each namespace
    the Clusters listed are in, since a source makes its Clusters in its own namespace.
    """
    try:
        listing = await hub.list(CLUSTER_SOURCES, namespace=namespace or None)
    except NotFound:
        return [], "ClusterSources are not installed on this hub (no clustersources resource)"
    except Forbidden:
        if namespace:
            return [], f"you may not list ClusterSources in namespace {namespace}"
    except KubeError as exc:
        return [], str(newcluster.api_error("cannot list ClusterSources", exc))
    else:
        return list(listing["items"]), ""
    found: list[dict[str, Any]] = []
    refused: list[str] = []
    for name in sorted({r.namespace for r in rows}):
        try:
            found.extend((await hub.list(CLUSTER_SOURCES, namespace=name))["items"])
        except Forbidden:
            refused.append(name)
        except KubeError as exc:
            return found, str(newcluster.api_error(f"cannot list ClusterSources in {name}", exc))
    if refused:
        return found, "you may not list ClusterSources in " + ", ".join(refused)
    return found, ""


def _refused(namespace: str, exc: KubeError, user: str) -> str:
    """Why the Clusters of ``namespace`` cannot be listed, in one line: the user's RBAC said
    plainly (which namespace, what grant), any other refusal (an impersonation the API server
    will not make, say) in its own words."""
    if isinstance(exc, Forbidden) and "cannot list resource" in exc.message:
        return clusterview.forbidden("list", "Clusters", namespace, user)
    return str(newcluster.api_error(f"cannot list Clusters in namespace {namespace}", exc))


def _scope_of(namespace: str) -> str:
    return f"namespace {namespace}" if namespace else "all namespaces"


async def _first_page(
    hub: Client, namespace: str, user: str = ""
) -> tuple[list[dict[str, Any]], int] | str | None:
    """The first :data:`~kokumi.core.clusterview.PAGE_SIZE` Clusters in the API's order and how
    many there are in all, in one request, or why they cannot be listed (one line); None when
    the API server cannot say so in one request (the user may not list every namespace, or it
    leaves out the count), and every Cluster is read instead.

    The API server lists in its keys' order, namespace then name, which is the list's default
    order, and counts what it left out (``remainingItemCount``) when no selector is given.
    """
    path = resource_path(api.CLUSTERS, namespace=namespace or None)
    try:
        page = await hub.request("GET", path, params={"limit": str(clusterview.PAGE_SIZE)})
    except KubeError as exc:
        if isinstance(exc, Forbidden) and not namespace:
            return None  # the full read finds the namespaces the user may list
        if namespace:
            return _refused(namespace, exc, user)
        return str(newcluster.api_error("cannot list Clusters", exc))
    items = [i for i in page.get("items") or () if isinstance(i, dict)]
    meta = page.get("metadata") or {}
    if not meta.get("continue"):
        return items, len(items)
    remaining = meta.get("remainingItemCount")
    if not isinstance(remaining, int) or remaining < 0:
        return None
    return items, len(items) + remaining


async def _clusters(
    hub: Client, namespace: str | None, selector: str, known: Sequence[str] = (), user: str = ""
) -> tuple[list[dict[str, Any]], str, str, list[str]]:
    """The Clusters the user may list, where from, why some may be missing (one line), and the
    namespaces looked in when the user may not list all of them.

    All namespaces when the user may list them so; else each namespace they may see; else each
    of ``known`` (:meth:`UI.known_namespaces`), each tried as the user.
    """
    label_selector = selector or None
    if namespace:
        try:
            listing = await hub.list(
                api.CLUSTERS, namespace=namespace, label_selector=label_selector
            )
        except KubeError as exc:
            return [], f"namespace {namespace}", _refused(namespace, exc, user), [namespace]
        return list(listing["items"]), f"namespace {namespace}", "", [namespace]
    try:
        listing = await hub.list(api.CLUSTERS, label_selector=label_selector)
    except Forbidden:
        pass
    except KubeError as exc:
        return [], "all namespaces", str(newcluster.api_error("cannot list Clusters", exc)), []
    else:
        return list(listing["items"]), "all namespaces", "", []
    try:
        names = [n["metadata"]["name"] for n in (await hub.list(NAMESPACES))["items"]]
    except KubeError:
        names = list(known)
    found: list[dict[str, Any]] = []
    seen: list[str] = []
    for name in names:
        try:
            listing = await hub.list(api.CLUSTERS, namespace=name, label_selector=label_selector)
        except Forbidden:
            continue
        except KubeError as exc:
            return (
                found, "", str(newcluster.api_error(f"cannot list Clusters in {name}", exc)), names
            )  # fmt: skip
        seen.append(name)
        found.extend(listing["items"])
    return found, clusterview.scope(seen, names), "", names
