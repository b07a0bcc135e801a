"""The web UI's app: its routes put together, and signing in.

The routes come in groups: signing in (here, since it differs by mode: the one-time link
locally, a bearer token or an authenticating proxy in a cluster), the Clusters
(:mod:`kokumi.ui.clusters`), the Environments (:mod:`kokumi.ui.environments`); what every page
shares is :mod:`kokumi.ui.pages`.
"""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from kokumi.core import sessioncookie
from kokumi.kube.client import Client
from kokumi.kube.errors import ConfigError, KubeError, Unauthorized
from kokumi.ui.clusters import cluster_routes
from kokumi.ui.environments import environment_routes
from kokumi.ui.incluster import Who, who_is
from kokumi.ui.pages import (
    FILES,
    UI,
    Endpoint,
    end_session,
    secure,
    signed_in,
    signin_page,
)
from kokumi.ui.security import (
    MAX_TOKEN,
    SESSION_PATH,
    Guard,
    SealedSessions,
    Session,
    Sessions,
    clear_cookie,
)

__all__ = ["create_app"]

log = logging.getLogger("kokumi.ui")


def create_app(ui: UI) -> Guard:
    """The ASGI app, wrapped in the guard that adds the headers and refuses cross-site writes."""

    async def index(request: Request) -> Response:
        return RedirectResponse("/clusters", status_code=303)

    async def healthz(request: Request) -> Response:
        # For the kubelet's probes, which come from no proxy and hold no session.
        return PlainTextResponse("ok")

    sign_in, sign_out = _sign_in_routes(ui)
    pages = [sign_out, *cluster_routes(ui), *environment_routes(ui)]
    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/healthz", healthz),
        sign_in,
        Mount("/static", StaticFiles(directory=str(FILES / "static")), name="static"),
    ]
    if ui.mode == "local":
        # The session's pages under its secret path; the same paths without it answer the
        # sign-in page, whatever cookie comes with them (see kokumi.ui.security).
        routes.append(Mount(SESSION_PATH + "/{key}", routes=pages))
    return Guard(Starlette(routes=[*routes, *pages]), ui.limits)


# --- signing in -------------------------------------------------------------------------------


def _sign_in_routes(ui: UI) -> tuple[BaseRoute, BaseRoute]:
    """The sign-in (at the root in every mode) and the sign-out (a page of the session's)."""

    async def local_sign_in(request: Request) -> Response:
        assert isinstance(ui.sessions, Sessions)
        exchanged = ui.sessions.exchange(request.query_params.get("token", ""))
        if exchanged is None:
            log.warning("refused a sign-in: the link was used already or is wrong")
            return signin_page(ui, status=403, spent=True)
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
                return signin_page(
                    ui,
                    status=400,
                    message="Refused: a token in a URL ends up in browser histories and logs: "
                    "paste it into this form instead, and make a new one, since this one was "
                    "exposed.",
                )
            return signin_page(ui, status=200)
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
            return signin_page(ui, status=status, message=f"Refused: {refusal}.")
        assert isinstance(ui.sessions, SealedSessions)
        cookie, _ = ui.sessions.start(who.user, token=token)
        if len(cookie) > sessioncookie.MAX_COOKIE:
            log.warning("refused a sign-in as %s: the token is too long for a cookie", who.user)
            return signin_page(
                ui,
                status=400,
                message="Refused: this token is too long to keep in a session cookie (at most "
                "about 2,800 characters): sign in with a ServiceAccount's token, or run the UI "
                "behind an authenticating proxy.",
            )
        log.info("signed in as %s with a bearer token", who.user)
        response = RedirectResponse("/clusters", status_code=303)
        response.headers.append(
            "set-cookie", ui.sessions.cookie_header(cookie, secure=secure(request))
        )
        return response

    async def proxy_sign_in(request: Request) -> Response:
        return RedirectResponse("/clusters", status_code=303)

    async def sign_out(request: Request, session: Session, hub: Client) -> Response:
        await end_session(ui, request)
        response = signin_page(ui, status=200, title="Signed out", out=True)
        response.headers.append("set-cookie", clear_cookie(secure=secure(request)))
        return response

    sign_in: Endpoint = {"local": local_sign_in, "token": token_sign_in}.get(ui.mode, proxy_sign_in)
    return (
        Route("/signin", sign_in, methods=["GET", "POST"] if ui.mode == "token" else ["GET"]),
        Route("/signout", signed_in(ui, sign_out), methods=["POST"]),
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
