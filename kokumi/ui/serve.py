"""The UI on Hypercorn's Trio worker, inside the Trio program that runs it.

``kokumi ui`` runs it alone; ``kokumi demo --ui`` beside the manager, in the same event loop.
Locally it binds 127.0.0.1 only: local mode signs in with a one-time link, which is only as
private as the address it is served on. ``kokumi ui --in-cluster`` (:func:`serve_in_cluster`)
listens where it is told, for users who sign in with their own token or through a trusted proxy.
Hypercorn's access log stays off, since the local sign-in URL carries a token.
"""

from __future__ import annotations

import logging

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from kokumi.core.registry import argocd
from kokumi.core.sessioncookie import Keys
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.ui.app import create_app
from kokumi.ui.incluster import KEY_NAMESPACE, KEY_SECRET, ProxyTrust, SignOuts, session_key
from kokumi.ui.pages import UI
from kokumi.ui.security import CLUSTER_SESSION_SECONDS, SealedSessions, Sessions
from kokumi.workspace.newcluster import FIELD_MANAGER

__all__ = ["Running", "serve_app", "serve_in_cluster", "serve_ui"]

log = logging.getLogger("kokumi.ui")

HOST = "127.0.0.1"


@attrs.frozen
class Running:
    """Where the UI listens, and the one-time link that signs in (print it to the user only)."""

    url: str
    sign_in_url: str = attrs.field(repr=False)


async def serve_ui(
    config: Config,
    *,
    port: int = 0,
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE,
    namespaces: tuple[str, ...] = (),
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, as the user of ``config``; started() gives the sign-in link."""
    sessions = Sessions()
    async with (
        Client(config, field_manager=FIELD_MANAGER) as hub,
        trio.open_nursery() as nursery,
    ):
        ui = UI(hub, sessions, argocd_namespace, namespaces=namespaces)
        url = await nursery.start(serve_app, ui, f"{HOST}:{port}")
        task_status.started(Running(url, f"{url}/signin?token={sessions.sign_in_token}"))


async def serve_app(
    ui: UI,
    bind: str,
    *,
    tls: tuple[str, str] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``ui`` on ``bind`` until cancelled, with its limits; started() gives the URL."""
    hypercorn = HypercornConfig()
    hypercorn.bind = [bind]
    if tls is not None:
        hypercorn.certfile, hypercorn.keyfile = tls
    hypercorn.accesslog = None
    hypercorn.errorlog = logging.getLogger("kokumi.ui.server")
    hypercorn.include_server_header = False
    # Headers and request line: enough for a sealed cookie and a proxy's groups, no more.
    hypercorn.h11_max_incomplete_size = 64 * 1024
    # A head that does not arrive, or a client silent mid-request, is closed here; the app
    # (its Guard) bounds the whole arrival of a body that trickles in.
    hypercorn.keep_alive_timeout = ui.limits.idle_seconds
    hypercorn.read_timeout = ui.limits.read_seconds
    # Over TLS the handshake comes before any of those: Hypercorn's own bound on it is 60 s,
    # so a silent TCP connection to the HTTPS port held its slot twelve times as long as one to
    # plain HTTP. A client gets the same time to finish the handshake as to send a request head.
    hypercorn.ssl_handshake_timeout = ui.limits.idle_seconds
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, create_app(ui), hypercorn)
        log.info("serving the UI on %s (%s sign-in)", binds[0], ui.mode)
        task_status.started(binds[0])


async def serve_in_cluster(
    own: Config,
    *,
    bind: str = "0.0.0.0:8080",
    proxy: ProxyTrust | None = None,
    key_secret: tuple[str, str] = (KEY_NAMESPACE, KEY_SECRET),
    lifetime: float = CLUSTER_SESSION_SECONDS,
    secure_cookies: bool = False,
    tls: tuple[str, str] | None = None,
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE,
    namespaces: tuple[str, ...] = (),
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, every page as its signed-in user; started() gives the URL.

    ``own`` is the UI's own identity (its ServiceAccount): it reads the session key, keeps the
    sessions signed out beside it, and with a ``proxy`` it impersonates the users the proxy
    names. Without one, users sign in with a bearer token, sent on a connection that carries no
    credentials of the UI's. ``tls`` is a
    (certificate file, key file) pair to serve HTTPS with; cookies are then always Secure.
    ``namespaces`` are where to look for a user's Clusters besides their own (``--namespaces``).
    """
    async with Client(own, field_manager=FIELD_MANAGER) as ui_account:
        keys = Keys(await session_key(ui_account, *key_secret))
        sessions = SealedSessions(keys, lifetime=lifetime, secure=secure_cookies or tls is not None)
        shared = SignOuts(ui_account, *key_secret)
        if proxy is not None:
            ui = UI(ui_account, sessions, argocd_namespace, proxy=proxy, namespaces=namespaces,
                    sign_outs=shared)  # fmt: skip
            await serve_app(ui, bind, tls=tls, task_status=task_status)
            return
        bare = attrs.evolve(own, token=None, client_certificate=None, client_key=None)
        async with Client(bare, field_manager=FIELD_MANAGER) as users:
            ui = UI(users, sessions, argocd_namespace, namespaces=namespaces, sign_outs=shared)
            await serve_app(ui, bind, tls=tls, task_status=task_status)
