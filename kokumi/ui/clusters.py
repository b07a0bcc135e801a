"""The Clusters' pages and the New Cluster form; every call as the signed-in user.

What a page shows is what ``kubectl get kcl`` and ``kokumi cluster describe`` show, computed by
:mod:`kokumi.core.clusterview`; New Cluster calls :mod:`kokumi.workspace.newcluster`, the steps
``kokumi cluster add`` takes. Apart from the Environments' pages, since only these read
credentials: the form's limits and its reader live here. What the list and the Overview read
from the hub, and how, is :mod:`kokumi.ui.clusterlist`.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from kokumi.core import api, clusterview, sessioncookie
from kokumi.core.environments import selectors
from kokumi.core.kubeconfig.connection import Code, Refusal
from kokumi.core.overview import overview as overview_of
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.core.sources.spec import SOURCE_LABEL
from kokumi.core.text import one_line
from kokumi.kube.client import Client
from kokumi.kube.errors import Conflict, KubeError, NotFound
from kokumi.ui.clusterlist import cluster_sources, every_cluster, list_page
from kokumi.ui.live import Streams, live_response, live_url
from kokumi.ui.pages import (
    REFRESH,
    UI,
    Lists,
    error_page,
    listed_namespace,
    named,
    page,
    signed_in,
    still_signed_in,
)
from kokumi.ui.security import MAX_TOKEN, Session
from kokumi.workspace import inspect, newcluster

__all__ = ["MAX_CA", "MAX_KUBECONFIG", "cluster_routes"]

log = logging.getLogger("kokumi.ui")

MAX_KUBECONFIG: Final = 512 * 1024
"""The largest kubeconfig the New Cluster form reads. A form's kubeconfig is anybody's text and
costs CPU in proportion to its size (about half a second per MiB of the worst kind); one context
with its cluster and user is a few KiB, a whole ~/.kube/config of many contexts rarely 100."""

MAX_CA: Final = 64 * 1024
"""The largest certificate authority (PEM) the New Cluster form reads: a cluster's CA and its
intermediates are a few KiB."""


def cluster_routes(ui: UI) -> list[BaseRoute]:
    streams = Streams()

    async def live(request: Request, session: Session, hub: Client) -> Response:
        async def alive() -> bool:
            return await still_signed_in(ui, request)

        # Each response ends before Hypercorn closes a connection silent for read_seconds.
        lifetime = ui.limits.read_seconds * 0.8
        owner = Lists.owner(session)
        return await live_response(request, session, hub, streams=streams, owner=owner,
                                   alive=alive, clock=ui.clock, lifetime=lifetime)  # fmt: skip

    async def clusters(request: Request, session: Session, hub: Client) -> Response:
        query = clusterview.parse_query(request.query_params)
        if isinstance(query, str):
            return error_page(session, newcluster.Refused(query), status=400)
        if (refused := listed_namespace(session, query.namespace)) is not None:
            return refused
        shown, scope, error, age, looked = await list_page(ui, session, hub, query)
        if query.namespace and not error:
            session.namespaces = sessioncookie.remembered(session.namespaces, query.namespace)
        return page(
            "clusters.html",
            {
                "title": "Clusters",
                "session": session,
                "shown": shown,
                "rows": shown.rows,
                "q": query,
                "namespace": query.namespace,
                "selector": query.selector,
                "reason": query.reason,
                "reasons": clusterview.READY_REASONS,
                "readies": clusterview.READIES,
                "sorts": clusterview.SORTS,
                "scope": scope,
                "looked": looked,
                "error": error,
                "age": age,
                "refresh": REFRESH,
                "live": live_url(session.base, shown.rows),
                "checking": clusterview.CHECKING,
                "now": _stamp(ui.clock()),
            },
        )

    async def overview(request: Request, session: Session, hub: Client) -> Response:
        params = request.query_params
        query = clusterview.parse_query(
            {"namespace": params.get("namespace", ""), "selector": params.get("selector", "")}
        )
        keys = [k.strip() for k in params.get("labels", "").split(",") if k.strip()]
        refused = query if isinstance(query, str) else _label_key_problem(keys)
        if refused:
            return error_page(session, newcluster.Refused(refused), status=400)
        assert isinstance(query, clusterview.Query)
        if (wrong := listed_namespace(session, query.namespace)) is not None:
            return wrong
        listed, error, age = await every_cluster(ui, session, hub, query.namespace, query.selector)
        sources, note = await cluster_sources(hub, query.namespace, listed.rows)
        view = overview_of(listed.rows, sources, label_keys=keys, source_label=SOURCE_LABEL)
        return page(
            "overview.html",
            {"title": "Overview", "session": session, "view": view, "q": query,
             "labels": ",".join(keys), "scope": listed.scope, "error": error, "note": note,
             "counted_in": clusterview.narrowed(view.total, listed.scope, query.selector),
             "age": age, "refresh": REFRESH, "checking": clusterview.CHECKING},
        )  # fmt: skip

    async def cluster(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            facts = await inspect.cluster_facts(hub, namespace, name, ui.argocd_namespace)
        except NotFound:
            return _missing(session, namespace, name)
        except KubeError as exc:
            return error_page(
                session, newcluster.api_error(f"cannot read Cluster {namespace}/{name}", exc)
            )
        except newcluster.Refused as refused:
            return error_page(session, refused)
        now = ui.clock()
        context = _cluster_context(facts, ui.argocd_namespace, now)
        return page(
            "cluster.html",
            {"title": f"Cluster {name}", "session": session, "refresh": REFRESH,
             "now": _stamp(now), "argocd_namespace": ui.argocd_namespace,
             "live": live_url(session.base, [context["row"]]), **context},
        )  # fmt: skip

    async def edit(request: Request, session: Session, hub: Client) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        try:
            current = await hub.get(api.CLUSTERS, name, namespace=namespace)
        except NotFound:
            return _missing(session, namespace, name)
        except KubeError as exc:
            return error_page(
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
                ui.lists.forget(session)
                return RedirectResponse(
                    f"{session.base}/clusters/{namespace}/{name}", status_code=303
                )
        return page(
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
                    ui.lists.forget(session)
                    return RedirectResponse(
                        f"{session.base}/clusters?namespace={namespace}", status_code=303
                    )
        return page(
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
            "scope_namespaces": "",
            "cluster_resources": "",
        }
        errors: dict[str, str] = {}
        contexts: list[str] = []
        if request.method == "POST":
            form = await request.form()
            for key in values:
                values[key] = _text(form, key).strip()
            outcome = await _add(ui, hub, form, values)
            if isinstance(outcome, str):
                ui.lists.forget(session)
                return RedirectResponse(session.base + outcome, status_code=303)
            errors, contexts = outcome
        return page(
            "new.html",
            {"title": "New Cluster", "session": session, "values": values, "errors": errors,
             "contexts": contexts, "in_cluster_server": IN_CLUSTER_SERVER},
            status=422 if errors else 200,
        )  # fmt: skip

    both = ["GET", "POST"]
    limit = newcluster.MAX_CLUSTER_NAME
    return [
        Route("/clusters", signed_in(ui, clusters)),
        Route("/clusters/live", signed_in(ui, live)),
        Route("/overview", signed_in(ui, overview)),
        Route("/clusters/new", signed_in(ui, new), methods=both),
        Route("/clusters/{namespace}/{name}", signed_in(ui, named("Cluster", cluster, limit))),
        Route("/clusters/{namespace}/{name}/edit", signed_in(ui, named("Cluster", edit, limit)),
              methods=both),
        Route("/clusters/{namespace}/{name}/delete",
              signed_in(ui, named("Cluster", delete, limit)), methods=both),
    ]  # fmt: skip


def _missing(session: Session, namespace: str, name: str) -> HTMLResponse:
    return error_page(
        session,
        newcluster.Refused(
            f"no Cluster {name} in namespace {namespace}: it was deleted, or you may not read it"
        ),
        status=404,
    )


def _stamp(now: datetime.datetime) -> str:
    """The server's time as the page's ages count from (``data-now``), in the API's format."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


def _label_key_problem(keys: list[str]) -> str:
    """Why ``?labels=`` cannot be counted (one line), or ``""``: each must be a label key."""
    if len(keys) > 20:
        return "labels names at most 20 label keys to count: name the ones to see"
    for key in keys:
        parsed = selectors.parse(
            {"matchExpressions": [{"key": key, "operator": "Exists"}]}, "labels"
        )
        if isinstance(parsed, selectors.SelectorError):
            return f"{parsed}: name label keys such as region or topology.kubernetes.io/zone"
    return ""


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
        "argocd_scope": ""
        if spec.get("connection") == "InCluster"
        else clusterview.scope_text(cluster),
        "registration_by_status": facts.argocd_secrets is None,
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


_SCOPE_WORDS: Final = (
    ("spec.scope.namespaces", "Argo CD namespaces"),
    ("spec.scope.clusterResources", "cluster-scoped resources"),
    ("remove spec.scope", "leave Argo CD namespaces empty"),
    ("spec.scope", "Argo CD namespaces"),
)


def _scope(values: Mapping[str, str]) -> api.Scope | str | None:
    """The form's Argo CD namespaces and cluster-scoped box as ``spec.scope``; or why not, read
    by the manager's own parser of the would-be Cluster, in the form's words."""
    namespaces = tuple(n for n in values["scope_namespaces"].replace(",", " ").split() if n)
    whole = bool(values["cluster_resources"])
    if not namespaces and not whole:
        return None
    scope = api.Scope(namespaces, whole)
    name = values["name"] or "cluster"
    body = newcluster.cluster_object(
        name,
        values["namespace"] or "default",
        secret=None if values["how"] == "incluster" else newcluster.kubeconfig_secret_name(name),
        scope=scope,
    )
    try:
        newcluster.check_cluster(body)
    except newcluster.Refused as refused:
        text = str(refused)
        for field, words in _SCOPE_WORDS:
            text = text.replace(field, words)
        return text
    return scope


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
            if isinstance(read, Refusal):
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
    scope = _scope(values)
    if isinstance(scope, str):
        errors["scope"] = scope
        scope = None
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
            scope=scope, update=False,
        )  # fmt: skip
    except newcluster.Refused as refused:
        return {"form": str(refused)}, contexts
    except KubeError as exc:
        return {
            "form": str(newcluster.api_error(f"cannot create Cluster {namespace}/{name}", exc))
        }, contexts
    log.info("created Cluster %s/%s from the New Cluster form", namespace, name)
    return f"/clusters/{namespace}/{name}"


_CONTEXT_CODES: Final = frozenset({Code.NO_CURRENT_CONTEXT, Code.UNKNOWN_CONTEXT})
