"""The pages: Clusters, a Cluster, Environments, New Cluster; every call as the signed-in user.

Server-rendered HTML (Jinja2, autoescaped) and no script, so the Content-Security-Policy can
forbid all of it. What a page shows is what ``kubectl get kcl`` and ``kokumi cluster describe``
show, computed by :mod:`kokumi.core.clusterview`; New Cluster calls
:mod:`kokumi.workspace.newcluster`, the steps ``kokumi cluster add`` takes. A refusal is one line
under the field it is about; a kubeconfig, a token or a key is never put back into a page, not
even into the form after a failed attempt.

The routes come in groups: signing in (which differs by mode: the one-time link locally, a
bearer token or an authenticating proxy in a cluster), the Clusters, the Environments. Every page
but the sign-in's goes through :func:`_signed_in`, which finds the session, checks the CSRF token
of an unsafe request, and hands the page the client that acts as the session's user.
"""

from __future__ import annotations

import datetime
import importlib.resources
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import jinja2
import trio
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from kokumi.core import api, argocd, clusterview, kubeconfig, sessioncookie
from kokumi.core.ownership import IN_CLUSTER_SERVER
from kokumi.core.text import one_line
from kokumi.kube.client import NAMESPACES, Client
from kokumi.kube.errors import ConfigError, Conflict, Forbidden, KubeError, NotFound, Unauthorized
from kokumi.ui.incluster import ProxyRefusal, ProxyTrust, Who, who_is
from kokumi.ui.security import (
    COOKIE,
    MAX_TOKEN,
    SESSION_PATH,
    Guard,
    Limits,
    SealedSessions,
    Session,
    Sessions,
    clear_cookie,
    shown_path,
)
from kokumi.workspace import inspect, newcluster

__all__ = ["MAX_CA", "MAX_KUBECONFIG", "MAX_TOKEN", "UI", "create_app"]

log = logging.getLogger("kokumi.ui")

REFRESH: Final = 10
"""Seconds between reloads of the list and a Cluster's page: a check runs about once a minute."""

MAX_KUBECONFIG: Final = 512 * 1024
"""The largest kubeconfig the New Cluster form reads. A form's kubeconfig is anybody's text and
costs CPU in proportion to its size (about half a second per MiB of the worst kind); one context
with its cluster and user is a few KiB, a whole ~/.kube/config of many contexts rarely 100."""

MAX_CA: Final = 64 * 1024
"""The largest certificate authority (PEM) the New Cluster form reads: a cluster's CA and its
intermediates are a few KiB."""

PARSERS: Final = 1
"""New Cluster forms whose credentials are read at once, each in a worker thread. The reader is
mostly Python, so a second thread would add no speed under the GIL, only take more of it from
the event loop that serves every other page."""

_FILES = importlib.resources.files("kokumi.ui")
_ENV: Final = jinja2.Environment(
    loader=jinja2.FunctionLoader(lambda name: (_FILES / "templates" / name).read_text("utf-8")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)

Handler = Callable[[Request, Session, Client], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


@attrs.define
class UI:
    """What the pages need: the connection to the hub, the sessions, Argo CD's namespace.

    Locally ``hub`` is the user's own connection and ``sessions`` the one-time link's. In a
    cluster ``sessions`` are :class:`SealedSessions`, and ``hub`` is the connection each request
    acts through as its user: without credentials of its own when users sign in with a token,
    the UI's ServiceAccount (which impersonates) when ``proxy`` names an authenticating proxy.
    ``limits`` bound what a connection may send (the server and the app read them both);
    ``parsers`` is how many New Cluster forms' credentials are read at once.
    """

    hub: Client
    sessions: Sessions | SealedSessions
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    proxy: ProxyTrust | None = None
    limits: Limits = attrs.field(factory=Limits)
    parsers: trio.CapacityLimiter = attrs.field(
        factory=lambda: trio.CapacityLimiter(PARSERS), repr=False
    )

    def __attrs_post_init__(self) -> None:
        # Every request the pages make, as whichever user: never a write in Argo CD's
        # namespace (the manager's alone, under its admission policy), whatever a user may.
        self.hub = self.hub.read_only_in(
            self.argocd_namespace, newcluster.argocd_only(self.argocd_namespace)
        )

    @property
    def mode(self) -> str:
        """``local``, ``token`` (in a cluster, bearer sign-in) or ``proxy``."""
        if isinstance(self.sessions, Sessions):
            return "local"
        return "token" if self.proxy is None else "proxy"

    def client_for(self, session: Session) -> Client:
        return self.hub if session.identity is None else self.hub.acting_as(session.identity)


def create_app(ui: UI) -> Guard:
    """The ASGI app, wrapped in the guard that adds the headers and refuses cross-site writes."""

    async def index(request: Request) -> Response:
        return RedirectResponse("/clusters", status_code=303)

    async def healthz(request: Request) -> Response:
        # For the kubelet's probes, which come from no proxy and hold no session.
        return PlainTextResponse("ok")

    sign_in, sign_out = _sign_in_routes(ui)
    pages = [sign_out, *_cluster_routes(ui), *_environment_routes(ui)]
    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/healthz", healthz),
        sign_in,
        Mount("/static", StaticFiles(directory=str(_FILES / "static")), name="static"),
    ]
    if ui.mode == "local":
        # The session's pages under its secret path; the same paths without it answer the
        # sign-in page, whatever cookie comes with them (see kokumi.ui.security).
        routes.append(Mount(SESSION_PATH + "/{key}", routes=pages))
    return Guard(Starlette(routes=[*routes, *pages]), ui.limits)


# --- sessions ---------------------------------------------------------------------------------


def _secure(request: Request) -> bool:
    """Whether the browser reached us over TLS: directly, or through a proxy that says so."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _refused(text: str, status: int) -> Response:
    return PlainTextResponse(text, status_code=status)


def _signin_page(ui: UI, *, status: int = 401, **context: Any) -> HTMLResponse:
    return _page(
        "signin.html",
        {"title": "Sign in", "session": None, "mode": ui.mode, "message": "", **context},
        status=status,
    )


def _proxy_session(ui: UI, request: Request) -> tuple[Session, str | None] | Response:
    """The proxy's user for this request, and their session (a new one when the user changed)."""
    assert ui.proxy is not None and isinstance(ui.sessions, SealedSessions)
    identity = ui.proxy.identity(request)
    if isinstance(identity, ProxyRefusal):
        path = shown_path(request.url.path)
        log.warning("refused %s %s: %s", request.method, path, identity.message)
        return _refused(identity.message + ".", identity.status)
    assert identity.user is not None
    session = ui.sessions.get(request.cookies.get(COOKIE))
    fresh = None
    if session is None or session.user != identity.user:
        cookie, session = ui.sessions.start(identity.user, groups=identity.groups)
        fresh = ui.sessions.cookie_header(cookie, secure=_secure(request))
    return attrs.evolve(session, identity=identity), fresh


def _signed_in(ui: UI, handler: Handler) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        fresh = None
        if ui.proxy is not None:
            found = _proxy_session(ui, request)
            if isinstance(found, Response):
                return found
            session, fresh = found
        else:
            cookie = request.cookies.get(COOKIE)
            if isinstance(ui.sessions, Sessions):
                key = request.path_params.get("key")
                base = f"{SESSION_PATH}/{key}" if isinstance(key, str) else ""
                looked_up = ui.sessions.get(cookie, base)
            else:
                looked_up = ui.sessions.get(cookie)
            if looked_up is None:
                return _signin_page(ui)
            session = looked_up
        hub = ui.client_for(session)
        if request.method != "POST":
            response = await handler(request, session, hub)
        else:
            # Parsed once, here, with its limits; the handler's request.form() returns it.
            form = await request.form(max_files=1, max_fields=40)
            try:
                given = form.get("csrf")
                if not isinstance(given, str) or not ui.sessions.csrf_ok(session, given):
                    log.warning(
                        "refused %s %s: no valid CSRF token",
                        request.method,
                        shown_path(request.url.path),
                    )
                    return _refused(
                        "Refused: the form is not from this session: reload the page and try "
                        "again.",
                        403,
                    )
                response = await handler(request, session, hub)
            finally:
                await form.close()
        if fresh is not None:
            response.headers.append("set-cookie", fresh)
        return response

    return endpoint


# --- signing in -------------------------------------------------------------------------------


def _sign_in_routes(ui: UI) -> tuple[BaseRoute, BaseRoute]:
    """The sign-in (at the root in every mode) and the sign-out (a page of the session's)."""

    async def local_sign_in(request: Request) -> Response:
        assert isinstance(ui.sessions, Sessions)
        exchanged = ui.sessions.exchange(request.query_params.get("token", ""))
        if exchanged is None:
            log.warning("refused a sign-in: the link was used already or is wrong")
            return _signin_page(ui, status=403, spent=True)
        cookie, session = exchanged
        log.info("signed in with the one-time link")
        response = RedirectResponse(f"{session.base}/clusters", status_code=303)
        response.headers.append("set-cookie", ui.sessions.cookie_header(cookie))
        return response

    async def token_sign_in(request: Request) -> Response:
        if request.method != "POST":
            if "token" in request.query_params:
                # Said without the token: a URL ends up in histories, proxies' logs, Referers.
                log.warning("refused a sign-in: a token in the URL")
                return _signin_page(
                    ui,
                    status=400,
                    message="Refused: a token in a URL ends up in browser histories and logs: "
                    "paste it into this form instead, and make a new one, since this one was "
                    "exposed.",
                )
            return _signin_page(ui, status=200)
        form = await request.form(max_files=0, max_fields=4, max_part_size=MAX_TOKEN)
        try:
            given = form.get("token")
            token = given.strip() if isinstance(given, str) else ""
        finally:
            await form.close()
        who = await _who(ui, token)
        if isinstance(who, tuple):
            refusal, status = who
            log.warning("refused a sign-in: %s", refusal)
            return _signin_page(ui, status=status, message=f"Refused: {refusal}.")
        assert isinstance(ui.sessions, SealedSessions)
        cookie, _ = ui.sessions.start(who.user, token=token)
        if len(cookie) > sessioncookie.MAX_COOKIE:
            log.warning("refused a sign-in as %s: the token is too long for a cookie", who.user)
            return _signin_page(
                ui,
                status=400,
                message="Refused: this token is too long to keep in a session cookie (at most "
                "about 2,800 characters): sign in with a ServiceAccount's token, or run the UI "
                "behind an authenticating proxy.",
            )
        log.info("signed in as %s with a bearer token", who.user)
        response = RedirectResponse("/clusters", status_code=303)
        response.headers.append(
            "set-cookie", ui.sessions.cookie_header(cookie, secure=_secure(request))
        )
        return response

    async def proxy_sign_in(request: Request) -> Response:
        return RedirectResponse("/clusters", status_code=303)

    async def sign_out(request: Request, session: Session, hub: Client) -> Response:
        ui.sessions.end(request.cookies.get(COOKIE))
        response = _signin_page(ui, status=200, title="Signed out", out=True)
        response.headers.append("set-cookie", clear_cookie(secure=_secure(request)))
        return response

    sign_in: Endpoint = {"local": local_sign_in, "token": token_sign_in}.get(ui.mode, proxy_sign_in)
    return (
        Route("/signin", sign_in, methods=["GET", "POST"] if ui.mode == "token" else ["GET"]),
        Route("/signout", _signed_in(ui, sign_out), methods=["POST"]),
    )


async def _who(ui: UI, token: str) -> Who | tuple[str, int]:
    """Whom ``token`` signs in, or why it signs no one in (one line, never the token), and the
    status to answer with."""
    if not token:
        return "paste a bearer token, e.g. from kubectl create token NAME -n NAMESPACE", 400
    if len(token) > MAX_TOKEN:
        return f"a bearer token is at most {MAX_TOKEN // 1024} KiB", 400
    try:
        who = await who_is(ui.hub, token)
    except ConfigError:
        return "a bearer token is one line of printable characters: paste it again", 400
    except Unauthorized:
        return (
            "the API server does not accept this token: it is wrong, expired or revoked; "
            "make a new one, e.g. with kubectl create token NAME -n NAMESPACE"
        ), 401
    except KubeError as exc:
        return f"cannot ask the API server whom this token names: {exc}", 502
    if not who.user or who.user == "system:anonymous":
        return "the API server takes this token for no user: sign in with a user's token", 401
    return who


# --- the Clusters -----------------------------------------------------------------------------


def _cluster_routes(ui: UI) -> list[BaseRoute]:
    async def clusters(request: Request, session: Session, hub: Client) -> Response:
        namespace = request.query_params.get("namespace", "").strip()
        selector = request.query_params.get("selector", "").strip()
        reason = request.query_params.get("reason", "").strip()
        if (refused := _listed_namespace(session, namespace)) is not None:
            return refused
        items, scope, error = await _clusters(hub, namespace or None, selector)
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

    async def cluster(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            facts = await inspect.cluster_facts(hub, namespace, name, ui.argocd_namespace)
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

    async def edit(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            current = await hub.get(api.CLUSTERS, name, namespace=namespace)
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
                await _save(hub, current, parsed, values["description"], values["version"])
            except newcluster.Refused as refused:
                error = str(refused)
            else:
                return RedirectResponse(
                    f"{session.base}/clusters/{namespace}/{name}", status_code=303
                )
        return _page(
            "edit.html",
            {"title": f"Edit {name}", "session": session, "namespace": namespace, "name": name,
             "values": values, "error": error},
            status=422 if error else 200,
        )  # fmt: skip

    async def delete(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        error = ""
        if request.method == "POST":
            form = await request.form()
            if _text(form, "confirm") != name:
                error = f"type the Cluster's name, {name}, to delete it"
            else:
                try:
                    await hub.delete(api.CLUSTERS, name, namespace=namespace)
                except NotFound:
                    pass
                except KubeError as exc:
                    error = str(
                        newcluster.api_error(f"cannot delete Cluster {namespace}/{name}", exc)
                    )
                else:
                    return RedirectResponse(
                        f"{session.base}/clusters?namespace={namespace}", status_code=303
                    )
        return _page(
            "delete.html",
            {"title": f"Delete {name}", "session": session, "namespace": namespace,
             "name": name, "error": error,
             "secret": newcluster.kubeconfig_secret_name(name)},
            status=422 if error else 200,
        )  # fmt: skip

    async def new(request: Request, session: Session, hub: Client) -> Response:
        values: dict[str, str] = {
            "namespace": request.query_params.get("namespace", "") or hub.namespace,
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
            outcome = await _add(ui, hub, form, values)
            if isinstance(outcome, str):
                return RedirectResponse(session.base + outcome, status_code=303)
            errors, contexts = outcome
        return _page(
            "new.html",
            {"title": "New Cluster", "session": session, "values": values, "errors": errors,
             "contexts": contexts, "in_cluster_server": IN_CLUSTER_SERVER},
            status=422 if errors else 200,
        )  # fmt: skip

    both = ["GET", "POST"]
    limit = newcluster.MAX_CLUSTER_NAME
    return [
        Route("/clusters", _signed_in(ui, clusters)),
        Route("/clusters/new", _signed_in(ui, new), methods=both),
        Route("/clusters/{namespace}/{name}", _signed_in(ui, _named("Cluster", cluster, limit))),
        Route("/clusters/{namespace}/{name}/edit", _signed_in(ui, _named("Cluster", edit, limit)),
              methods=both),
        Route("/clusters/{namespace}/{name}/delete",
              _signed_in(ui, _named("Cluster", delete, limit)), methods=both),
    ]  # fmt: skip


# --- the Environments -------------------------------------------------------------------------


def _environment_routes(ui: UI) -> list[BaseRoute]:
    async def environments(request: Request, session: Session, hub: Client) -> Response:
        namespace = request.query_params.get("namespace", "").strip()
        if (refused := _listed_namespace(session, namespace)) is not None:
            return refused
        views: list[clusterview.EnvironmentView] = []
        error = ""
        try:
            envs = (await hub.list(api.ENVIRONMENTS, namespace=namespace or None))["items"]
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
        return _page(
            "environments.html",
            {"title": "Environments", "session": session, "views": views,
             "namespace": namespace, "error": error},
        )  # fmt: skip

    async def environment(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            env = await hub.get(api.ENVIRONMENTS, name, namespace=namespace)
            items = (await hub.list(api.CLUSTERS, namespace=namespace))["items"]
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

    return [
        Route("/environments", _signed_in(ui, environments)),
        Route(
            "/environments/{namespace}/{name}", _signed_in(ui, _named("Environment", environment))
        ),
    ]


def _named(kind: str, handler: Handler, limit: int = 253) -> Handler:
    """``handler`` of a route that names one object: a namespace or a name that no object can
    have (``..``, ``.``, ``Upper``) is a 404 page, never a segment of a request's path, where a
    dot-segment would name another resource than the one asked for."""

    async def named(request: Request, session: Session, hub: Client) -> Response:
        try:
            newcluster.check_namespace(request.path_params["namespace"])
            newcluster.check_object_name(kind, request.path_params["name"], limit)
        except newcluster.Refused as refused:
            return _error(session, refused, status=404)
        return await handler(request, session, hub)

    return named


def _listed_namespace(session: Session, namespace: str) -> HTMLResponse | None:
    """The 400 page for a ``?namespace=`` that no namespace can have; None for a good one."""
    try:
        if namespace:
            newcluster.check_namespace(namespace)
    except newcluster.Refused as refused:
        return _error(session, refused, status=400)
    return None


def _page(template: str, context: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    context = {"refresh": 0, "csrf": "", "base": "", **context}
    session = context.get("session")
    if isinstance(session, Session):
        context["csrf"] = session.csrf
        context["base"] = session.base
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


@attrs.frozen
class _Credentials:
    """What the New Cluster form was given to reach the cluster with: never shown, never logged."""

    kubeconfig: str = attrs.field(repr=False)
    token: str = attrs.field(repr=False)
    ca: str = attrs.field(repr=False)


async def _credentials(form: FormData) -> _Credentials | dict[str, str]:
    """The form's credential fields, or (by field) which is too large to be read at all.

    The sizes are checked here, before anything is parsed: a kubeconfig is tenant input that
    costs CPU in proportion to its size, and the form holds it in memory meanwhile.
    """
    text = _text(form, "kubeconfig")
    upload = form.get("kubeconfig_file")
    if isinstance(upload, UploadFile) and upload.filename:
        data = await upload.read()
        if data:
            if len(data) > MAX_KUBECONFIG:
                return {"kubeconfig": _kubeconfig_too_large()}
            text = data.decode("utf-8", "replace")
    token, ca = _text(form, "token").strip(), _text(form, "ca").strip()
    errors: dict[str, str] = {}
    if len(text) > MAX_KUBECONFIG or len(text.encode("utf-8", "replace")) > MAX_KUBECONFIG:
        errors["kubeconfig"] = _kubeconfig_too_large()
    if len(token) > MAX_TOKEN:
        errors["token"] = (
            f"a bearer token is at most {MAX_TOKEN // 1024} KiB: give a ServiceAccount's token"
        )
    if len(ca) > MAX_CA:
        errors["server"] = (
            f"the certificate authority is at most {MAX_CA // 1024} KiB of PEM: give the "
            "certificates that signed the cluster's, not a whole bundle"
        )
    return errors or _Credentials(text, token, ca)


def _kubeconfig_too_large() -> str:
    return (
        f"the kubeconfig is larger than {MAX_KUBECONFIG // 1024} KiB: keep only the context the "
        "Cluster uses, e.g. with kubectl config view --minify --flatten --context NAME"
    )


def _source(
    values: Mapping[str, str], given: _Credentials
) -> tuple[newcluster.Source | None, dict[str, str], list[str]]:
    """What the Cluster will be reached with, or why not (by field), and the contexts to offer.

    CPU-bound on text anybody may send, so called in a worker thread (:func:`_add`): it reads a
    kubeconfig with the manager's reader (a CPU budget, no aliases), or builds and checks one.
    """
    errors: dict[str, str] = {}
    contexts: list[str] = []
    source: newcluster.Source | None = None
    how, name = values["how"], values["name"]
    if how == "kubeconfig":
        if not given.kubeconfig.strip():
            errors["kubeconfig"] = "paste a kubeconfig, or choose its file"
        else:
            contexts, read = newcluster.examine_kubeconfig(
                given.kubeconfig, values["context"] or None
            )
            if isinstance(read, kubeconfig.Refusal):
                field = "context" if read.code in _CONTEXT_CODES else "kubeconfig"
                errors[field] = f"{read.code}: {read.message}"
            else:
                source = read
    elif how == "token":
        server = values["server"]
        if not server:
            errors["server"] = "give the API server's URL as the hub reaches it"
        if not given.token:
            errors["token"] = "give a bearer token of the cluster (a ServiceAccount's)"  # noqa: S105
        if server and given.token:
            ca = given.ca.encode() if given.ca else None
            try:
                text = newcluster.kubeconfig_of_token(name or "cluster", server, ca, given.token)
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
    return source, errors, contexts


async def _add(
    ui: UI, hub: Client, form: FormData, values: dict[str, str]
) -> str | tuple[dict[str, str], list[str]]:
    """The New Cluster form's steps: the Cluster's page to go to, or (errors by field, contexts).

    Everything the form can check is checked before the first request, with the words the
    manager's status would use; then :func:`kokumi.workspace.newcluster.add_cluster` runs, as
    for ``kokumi cluster add``. The credentials are read in a worker thread, one form at a time
    (``ui.parsers``): a hostile kubeconfig then delays other New Cluster forms, never every
    other page of every user.
    """
    errors: dict[str, str] = {}
    name, namespace = values["name"], values["namespace"]
    try:
        newcluster.check_name(name)
    except newcluster.Refused as refused:
        errors["name"] = str(refused)
    if not namespace:
        errors["namespace"] = "say which namespace (workspace) the Cluster goes in"
    else:
        try:
            newcluster.check_namespace(namespace)
        except newcluster.Refused as refused:
            errors["namespace"] = str(refused)
    try:
        labels = _labels(values["labels"])
    except newcluster.Refused as refused:
        errors["labels"] = str(refused)
        labels = {}
    given = await _credentials(form)
    if not isinstance(given, _Credentials):
        return {**errors, **given}, []
    source, refused_by_field, contexts = await trio.to_thread.run_sync(
        _source, values, given, limiter=ui.parsers
    )
    errors.update(refused_by_field)
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
