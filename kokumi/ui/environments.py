"""The Environments' pages: which Clusters each Environment selects and what it targets, as
:mod:`kokumi.core.clusterview` computes them for ``kokumi cluster describe`` too.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kokumi.core import api, clusterview, sessioncookie
from kokumi.kube.client import Client
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.kube.resources import NAMESPACES
from kokumi.ui.pages import REFRESH, UI, error_page, listed_namespace, named, page, signed_in
from kokumi.ui.security import Session
from kokumi.workspace import newcluster

__all__ = ["environment_routes"]


def environment_routes(ui: UI) -> list[BaseRoute]:
    async def environments(request: Request, session: Session, hub: Client) -> Response:
        namespace = request.query_params.get("namespace", "").strip()
        if (refused := listed_namespace(session, namespace)) is not None:
            return refused
        views: list[clusterview.EnvironmentView] = []
        error = ""
        looked: list[str] | None = None
        try:
            envs, looked = await _environments(hub, namespace, ui.known_namespaces(session))
            if namespace:
                session.namespaces = sessioncookie.remembered(session.namespaces, namespace)
            by_namespace: dict[str, list[dict[str, Any]]] = {}
            for env in envs:
                ns = env["metadata"]["namespace"]
                if ns not in by_namespace:
                    by_namespace[ns] = (await hub.list(api.CLUSTERS, namespace=ns))["items"]
                views.append(clusterview.environment_view(env, by_namespace[ns]))
        except KubeError as exc:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            error = str(newcluster.api_error(f"cannot list Environments in {where}", exc))
        views.sort(key=lambda v: (v.namespace, v.name))
        return page(
            "environments.html",
            {"title": "Environments", "session": session, "views": views,
             "namespace": namespace, "error": error, "looked": looked},
        )  # fmt: skip

    async def environment(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            env = await hub.get(api.ENVIRONMENTS, name, namespace=namespace)
            items = (await hub.list(api.CLUSTERS, namespace=namespace))["items"]
        except NotFound:
            missing = newcluster.Refused(f"no Environment {name} in namespace {namespace}")
            return error_page(session, missing, status=404)
        except KubeError as exc:
            return error_page(
                session, newcluster.api_error(f"cannot read Environment {namespace}/{name}", exc)
            )
        view = clusterview.environment_view(env, items)
        rows = {r.name: r for r in (clusterview.row(c, ui.clock()) for c in items)}
        return page(
            "environment.html",
            {"title": f"Environment {name}", "session": session, "view": view, "rows": rows,
             "refresh": REFRESH},
        )  # fmt: skip

    return [
        Route("/environments", signed_in(ui, environments)),
        Route("/environments/{namespace}/{name}", signed_in(ui, named("Environment", environment))),
    ]


async def _environments(
    hub: Client, namespace: str, known: list[str]
) -> tuple[list[dict[str, Any]], list[str] | None]:
    """The Environments the user may list, and the namespaces looked in when they may not list
    them in every namespace (None when they may, or when one was named).

    It looks where the Clusters list looks: each namespace the user may see, else ``known``
    (:meth:`UI.known_namespaces`), each tried as the user. A namespace named is read alone, and
    its refusal is the page's error.
    """
    if namespace:
        return list((await hub.list(api.ENVIRONMENTS, namespace=namespace))["items"]), None
    try:
        return list((await hub.list(api.ENVIRONMENTS))["items"]), None
    except Forbidden:
        pass
    try:
        names = [n["metadata"]["name"] for n in (await hub.list(NAMESPACES))["items"]]
    except KubeError:
        names = known
    found: list[dict[str, Any]] = []
    for name in names:
        try:
            found.extend((await hub.list(api.ENVIRONMENTS, namespace=name))["items"])
        except Forbidden:
            continue
    return found, names
