"""The pages: Clusters, a Cluster, Environments, New Cluster; every call as the signed-in user.

Server-rendered HTML (Jinja2, autoescaped) and no script, so the Content-Security-Policy can
forbid all of it. What a page shows is what ``kubectl get kcl`` and ``kokumi cluster describe``
show, computed by :mod:`kokumi.core.clusterview`; New Cluster calls
:mod:`kokumi.workspace.newcluster`, the steps ``kokumi cluster add`` takes. A refusal is one line
under the field it is about; a kubeconfig, a token or a key is never put back into a page, not
even into the form after a failed attempt.
"""

from __future__ import annotations

import datetime
import importlib.resources
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kokumi.core import api, argocd, clusterview, kubeconfig
from kokumi.core.ownership import IN_CLUSTER_SERVER
from kokumi.core.text import one_line
from kokumi.kube.client import NAMESPACES, Client
from kokumi.kube.errors import Conflict, Forbidden, KubeError, NotFound
from kokumi.ui.security import COOKIE, Guard, Session, Sessions
from kokumi.workspace import inspect, newcluster

__all__ = ["UI", "create_app"]

log = logging.getLogger("kokumi.ui")

REFRESH: Final = 10
"""Seconds between reloads of the list and a Cluster's page: a check runs about once a minute."""

_FILES = importlib.resources.files("kokumi.ui")
_ENV: Final = jinja2.Environment(
    loader=jinja2.FunctionLoader(lambda name: (_FILES / "templates" / name).read_text("utf-8")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)

Handler = Callable[[Request, Session], Awaitable[Response]]


@attrs.define
class UI:
    """What the pages need: the user's connection to the hub, the sessions, Argo CD's namespace."""

    hub: Client
    sessions: Sessions
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)


def create_app(ui: UI) -> Guard:
    """The ASGI app, wrapped in the guard that adds the headers and refuses cross-site writes."""

    def signed_in(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = ui.sessions.get(request.cookies.get(COOKIE))
            if session is None:
                return _page(
                    "signin.html",
                    {"title": "Sign in", "session": None},
                    status=401,
                )
            if request.method != "POST":
                return await handler(request, session)
            # Parsed once, here, with its limits; the handler's request.form() returns it.
            form = await request.form(max_files=1, max_fields=40)
            try:
                given = form.get("csrf")
                if not isinstance(given, str) or not ui.sessions.csrf_ok(session, given):
                    log.warning(
                        "refused %s %s: no valid CSRF token", request.method, request.url.path
                    )
                    return Response(
                        "Refused: the form is not from this session: reload the page and try "
                        "again.",
                        status_code=403,
                        media_type="text/plain",
                    )
                return await handler(request, session)
            finally:
                await form.close()

        return endpoint

    async def sign_in(request: Request) -> Response:
        cookie = ui.sessions.exchange(request.query_params.get("token", ""))
        if cookie is None:
            log.warning("refused a sign-in: the link was used already or is wrong")
            return _page(
                "signin.html",
                {"title": "Sign in", "session": None, "spent": True},
                status=403,
            )
        log.info("signed in with the one-time link")
        response = RedirectResponse("/clusters", status_code=303)
        response.headers.append("set-cookie", ui.sessions.cookie_header(cookie))
        return response

    async def sign_out(request: Request, session: Session) -> Response:
        ui.sessions.end(request.cookies.get(COOKIE))
        response = _page("signin.html", {"title": "Signed out", "session": None, "out": True})
        response.headers.append(
            "set-cookie", f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        )
        return response

    async def index(request: Request) -> Response:
        return RedirectResponse("/clusters", status_code=303)

    async def clusters(request: Request, session: Session) -> Response:
        namespace = request.query_params.get("namespace", "").strip()
        selector = request.query_params.get("selector", "").strip()
        reason = request.query_params.get("reason", "").strip()
        items, scope, error = await _clusters(ui.hub, namespace or None, selector)
        now = ui.clock()
        rows = sorted((clusterview.row(c, now) for c in items), key=lambda r: (r.namespace, r.name))
        reasons = sorted({r.reason for r in rows})
        if reason:
            rows = [r for r in rows if r.reason == reason]
        return _page(
            "clusters.html",
            {
                "title": "Clusters",
                "session": session,
                "rows": rows,
                "namespace": namespace,
                "selector": selector,
                "reason": reason,
                "reasons": reasons,
                "scope": scope,
                "error": error,
                "refresh": REFRESH,
                "checking": clusterview.CHECKING,
            },
        )

    async def cluster(request: Request, session: Session) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            facts = await inspect.cluster_facts(ui.hub, namespace, name, ui.argocd_namespace)
        except NotFound:
            return _missing(session, namespace, name)
        except KubeError as exc:
            return _error(
                session, newcluster.api_error(f"cannot read Cluster {namespace}/{name}", exc)
            )
        except newcluster.Refused as refused:
            return _error(session, refused)
        return _page(
            "cluster.html",
            {"title": f"Cluster {name}", "session": session, "refresh": REFRESH,
             **_cluster_context(facts, ui.argocd_namespace, ui.clock())},
        )  # fmt: skip

    async def edit(request: Request, session: Session) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            current = await ui.hub.get(api.CLUSTERS, name, namespace=namespace)
        except NotFound:
            return _missing(session, namespace, name)
        except KubeError as exc:
            return _error(
                session, newcluster.api_error(f"cannot read Cluster {namespace}/{name}", exc)
            )
        labels = (current["metadata"].get("labels")) or {}
        values = {
            "labels": "\n".join(f"{k}={v}" for k, v in sorted(labels.items())),
            "description": (current.get("spec") or {}).get("description") or "",
            "version": current["metadata"]["resourceVersion"],
        }
        error = ""
        if request.method == "POST":
            form = await request.form()
            values = {k: _text(form, k) for k in ("labels", "description", "version")}
            try:
                parsed = _labels(values["labels"])
                await _save(ui.hub, current, parsed, values["description"], values["version"])
            except newcluster.Refused as refused:
                error = str(refused)
            else:
                return RedirectResponse(f"/clusters/{namespace}/{name}", status_code=303)
        return _page(
            "edit.html",
            {"title": f"Edit {name}", "session": session, "namespace": namespace, "name": name,
             "values": values, "error": error},
            status=422 if error else 200,
        )  # fmt: skip

    async def delete(request: Request, session: Session) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        error = ""
        if request.method == "POST":
            form = await request.form()
            if _text(form, "confirm") != name:
                error = f"type the Cluster's name, {name}, to delete it"
            else:
                try:
                    await ui.hub.delete(api.CLUSTERS, name, namespace=namespace)
                except NotFound:
                    pass
                except KubeError as exc:
                    error = str(
                        newcluster.api_error(f"cannot delete Cluster {namespace}/{name}", exc)
                    )
                else:
                    return RedirectResponse(f"/clusters?namespace={namespace}", status_code=303)
        return _page(
            "delete.html",
            {"title": f"Delete {name}", "session": session, "namespace": namespace,
             "name": name, "error": error,
             "secret": newcluster.kubeconfig_secret_name(name)},
            status=422 if error else 200,
        )  # fmt: skip

    async def new(request: Request, session: Session) -> Response:
        values: dict[str, str] = {
            "namespace": request.query_params.get("namespace", "") or ui.hub.namespace,
            "name": "",
            "how": "kubeconfig",
            "context": "",
            "server": "",
            "labels": "",
            "description": "",
        }
        errors: dict[str, str] = {}
        contexts: list[str] = []
        if request.method == "POST":
            form = await request.form()
            for key in values:
                values[key] = _text(form, key).strip()
            outcome = await _add(ui.hub, form, values)
            if isinstance(outcome, str):
                return RedirectResponse(outcome, status_code=303)
            errors, contexts = outcome
        return _page(
            "new.html",
            {"title": "New Cluster", "session": session, "values": values, "errors": errors,
             "contexts": contexts, "in_cluster_server": IN_CLUSTER_SERVER},
            status=422 if errors else 200,
        )  # fmt: skip

    async def environments(request: Request, session: Session) -> Response:
        namespace = request.query_params.get("namespace", "").strip()
        views: list[clusterview.EnvironmentView] = []
        error = ""
        try:
            envs = (await ui.hub.list(api.ENVIRONMENTS, namespace=namespace or None))["items"]
            by_namespace: dict[str, list[dict[str, Any]]] = {}
            for env in envs:
                ns = env["metadata"]["namespace"]
                if ns not in by_namespace:
                    by_namespace[ns] = (await ui.hub.list(api.CLUSTERS, namespace=ns))["items"]
                views.append(clusterview.environment_view(env, by_namespace[ns]))
        except KubeError as exc:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            error = str(newcluster.api_error(f"cannot list Environments in {where}", exc))
        views.sort(key=lambda v: (v.namespace, v.name))
        return _page(
            "environments.html",
            {"title": "Environments", "session": session, "views": views,
             "namespace": namespace, "error": error},
        )  # fmt: skip

    async def environment(request: Request, session: Session) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            env = await ui.hub.get(api.ENVIRONMENTS, name, namespace=namespace)
            items = (await ui.hub.list(api.CLUSTERS, namespace=namespace))["items"]
        except NotFound:
            missing = newcluster.Refused(f"no Environment {name} in namespace {namespace}")
            return _error(session, missing, status=404)
        except KubeError as exc:
            return _error(
                session, newcluster.api_error(f"cannot read Environment {namespace}/{name}", exc)
            )
        view = clusterview.environment_view(env, items)
        rows = {r.name: r for r in (clusterview.row(c, ui.clock()) for c in items)}
        return _page(
            "environment.html",
            {"title": f"Environment {name}", "session": session, "view": view, "rows": rows,
             "refresh": REFRESH},
        )  # fmt: skip

    routes = [
        Route("/", index),
        Route("/signin", sign_in),
        Route("/signout", signed_in(sign_out), methods=["POST"]),
        Route("/clusters", signed_in(clusters)),
        Route("/clusters/new", signed_in(new), methods=["GET", "POST"]),
        Route("/clusters/{namespace}/{name}", signed_in(cluster)),
        Route("/clusters/{namespace}/{name}/edit", signed_in(edit), methods=["GET", "POST"]),
        Route("/clusters/{namespace}/{name}/delete", signed_in(delete), methods=["GET", "POST"]),
        Route("/environments", signed_in(environments)),
        Route("/environments/{namespace}/{name}", signed_in(environment)),
        Mount("/static", StaticFiles(directory=str(_FILES / "static")), name="static"),
    ]
    return Guard(Starlette(routes=routes))


def _page(template: str, context: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    context = {"refresh": 0, "csrf": "", **context}
    session = context.get("session")
    if isinstance(session, Session):
        context["csrf"] = session.csrf
    return HTMLResponse(_ENV.get_template(template).render(**context), status_code=status)


def _error(session: Session, refused: newcluster.Refused, *, status: int = 502) -> HTMLResponse:
    return _page(
        "error.html", {"title": "Refused", "session": session, "message": str(refused)},
        status=status,
    )  # fmt: skip


def _missing(session: Session, namespace: str, name: str) -> HTMLResponse:
    return _error(
        session,
        newcluster.Refused(
            f"no Cluster {name} in namespace {namespace}: it was deleted, or you may not read it"
        ),
        status=404,
    )


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


async def _clusters(
    hub: Client, namespace: str | None, selector: str
) -> tuple[list[dict[str, Any]], str, str]:
    """The Clusters the user may list, where from, and why some may be missing (one line).

    All namespaces when the user may list them so; else each namespace they may see; else the
    kubeconfig's own namespace.
    """
    label_selector = selector or None
    if namespace:
        try:
            listing = await hub.list(
                api.CLUSTERS, namespace=namespace, label_selector=label_selector
            )
        except KubeError as exc:
            return (
                [],
                f"namespace {namespace}",
                str(newcluster.api_error(f"cannot list Clusters in namespace {namespace}", exc)),
            )
        return list(listing["items"]), f"namespace {namespace}", ""
    try:
        listing = await hub.list(api.CLUSTERS, label_selector=label_selector)
    except Forbidden:
        pass
    except KubeError as exc:
        return [], "all namespaces", str(newcluster.api_error("cannot list Clusters", exc))
    else:
        return list(listing["items"]), "all namespaces", ""
    try:
        names = [n["metadata"]["name"] for n in (await hub.list(NAMESPACES))["items"]]
    except KubeError:
        names = [hub.namespace]
    found: list[dict[str, Any]] = []
    seen: list[str] = []
    for name in names:
        try:
            listing = await hub.list(api.CLUSTERS, namespace=name, label_selector=label_selector)
        except Forbidden:
            continue
        except KubeError as exc:
            return found, "", str(newcluster.api_error(f"cannot list Clusters in {name}", exc))
        seen.append(name)
        found.extend(listing["items"])
    scope = "namespaces " + ", ".join(seen) if seen else "no namespace you may list"
    return found, scope, ""


def _cluster_context(
    facts: inspect.Facts, argocd_namespace: str, now: datetime.datetime
) -> dict[str, Any]:
    cluster = facts.cluster
    spec = cluster.get("spec") or {}
    ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
    ready = clusterview.ready_condition(cluster)
    events = sorted(
        facts.events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")
    )
    observed = (cluster.get("status") or {}).get("observedGeneration")
    generation = cluster["metadata"].get("generation")
    return {
        "row": clusterview.row(cluster, now),
        "secret": f"{ref['name']} (key {ref.get('key', newcluster.SECRET_KEY)})"
        if ref.get("name")
        else "",
        "since": str(ready.get("lastTransitionTime") or ""),
        "since_age": clusterview.age(ready.get("lastTransitionTime"), now) if ready else "",
        "stale": observed is not None and observed != generation,
        "registration": clusterview.registration(cluster, facts.argocd_secrets, argocd_namespace),
        "targets": clusterview.environment_targets(cluster, facts.clusters, facts.environments),
        "events": [
            {
                "time": str(e.get("lastTimestamp") or e.get("eventTime") or ""),
                "type": str(e.get("type", "")),
                "reason": str(e.get("reason", "")),
                "message": one_line(str(e.get("message", ""))),
            }
            for e in events[-10:]
        ],
    }


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        line = raw.strip()
        if not line:
            continue
        key, equals, value = line.partition("=")
        if not equals or not key.strip():
            raise newcluster.Refused(
                f"label {line[:80]!r} is not key=value: write it as fleet=edge"
            )
        labels[key.strip()] = value.strip()
    return labels


async def _save(
    hub: Client, current: dict[str, Any], labels: dict[str, str], description: str, version: str
) -> None:
    meta = current["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    if version != meta["resourceVersion"]:
        raise newcluster.Refused(
            f"Cluster {where} changed since this page was loaded: reload it and edit again"
        )
    updated = dict(current)
    updated["metadata"] = {**meta, "labels": labels}
    spec = dict(current.get("spec") or {})
    if description:
        spec["description"] = description
    else:
        spec.pop("description", None)
    updated["spec"] = spec
    try:
        await hub.replace(api.CLUSTERS, updated, namespace=meta["namespace"])
    except Conflict:
        raise newcluster.Refused(
            f"Cluster {where} changed since this page was loaded: reload it and edit again"
        ) from None
    except KubeError as exc:
        raise newcluster.api_error(f"cannot update Cluster {where}", exc) from None


async def _kubeconfig_text(form: FormData) -> str:
    upload = form.get("kubeconfig_file")
    if isinstance(upload, UploadFile) and upload.filename:
        data = await upload.read()
        if data:
            return data.decode("utf-8", "replace")
    return _text(form, "kubeconfig")


async def _add(
    hub: Client, form: FormData, values: dict[str, str]
) -> str | tuple[dict[str, str], list[str]]:
    """The New Cluster form's steps: the Cluster's page to go to, or (errors by field, contexts).

    Everything the form can check is checked before the first request, with the words the
    manager's status would use; then :func:`kokumi.workspace.newcluster.add_cluster` runs, as
    for ``kokumi cluster add``.
    """
    errors: dict[str, str] = {}
    contexts: list[str] = []
    name, namespace, how = values["name"], values["namespace"], values["how"]
    try:
        newcluster.check_name(name)
    except newcluster.Refused as refused:
        errors["name"] = str(refused)
    if not namespace:
        errors["namespace"] = "say which namespace (workspace) the Cluster goes in"
    try:
        labels = _labels(values["labels"])
    except newcluster.Refused as refused:
        errors["labels"] = str(refused)
        labels = {}
    source: newcluster.Source | None = None
    if how == "kubeconfig":
        text = await _kubeconfig_text(form)
        if not text.strip():
            errors["kubeconfig"] = "paste a kubeconfig, or choose its file"
        else:
            contexts = newcluster.context_names(text)
            try:
                minimal, server = newcluster.check_kubeconfig(text, values["context"] or None)
            except kubeconfig.KubeconfigRefused as refused:
                field = "context" if refused.refusal.code in _CONTEXT_CODES else "kubeconfig"
                errors[field] = f"{refused.refusal.code}: {refused.refusal.message}"
            else:
                source = newcluster.Source(server, minimal)
    elif how == "token":
        server = values["server"]
        token = _text(form, "token").strip()
        ca = _text(form, "ca").strip()
        if not server:
            errors["server"] = "give the API server's URL as the hub reaches it"
        if not token:
            errors["token"] = "give a bearer token of the cluster (a ServiceAccount's)"  # noqa: S105
        if server and token:
            try:
                text = newcluster.kubeconfig_of_token(
                    name or "cluster", server, ca.encode() if ca else None, token
                )
            except newcluster.Refused as refused:
                errors["server"] = str(refused)
            else:
                source = newcluster.Source(server, text)
    elif how == "incluster":
        source = newcluster.Source(IN_CLUSTER_SERVER)
    else:
        errors["how"] = "choose how Kokumi reaches the cluster"
    if source is not None:
        try:
            newcluster.refuse_argocds_own_cluster(source, "“The cluster Kokumi runs in”")
        except newcluster.Refused as refused:
            errors["how"] = str(refused)
    if errors or source is None:
        return errors, contexts
    try:
        await newcluster.add_cluster(
            hub, name, namespace, source, labels=labels, description=values["description"],
            update=False,
        )  # fmt: skip
    except newcluster.Refused as refused:
        return {"form": str(refused)}, contexts
    except KubeError as exc:
        return {
            "form": str(newcluster.api_error(f"cannot create Cluster {namespace}/{name}", exc))
        }, contexts
    log.info("created Cluster %s/%s from the New Cluster form", namespace, name)
    return f"/clusters/{namespace}/{name}"


_CONTEXT_CODES: Final = frozenset(
    {kubeconfig.Code.NO_CURRENT_CONTEXT, kubeconfig.Code.UNKNOWN_CONTEXT}
)
