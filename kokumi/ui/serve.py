"""The UI on Hypercorn's Trio worker, inside the Trio program that runs it.

``kokumi ui`` runs it alone; ``kokumi demo --ui`` beside the manager, in the same event loop. It
binds 127.0.0.1 only: local mode signs in with a one-time link, which is only as private as the
address it is served on. Hypercorn's access log stays off, since the sign-in URL carries a token.
"""

from __future__ import annotations

import logging

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from kokumi.core import argocd
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.ui.app import UI, create_app
from kokumi.ui.security import Sessions
from kokumi.workspace.newcluster import FIELD_MANAGER

__all__ = ["Running", "serve_ui"]

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
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled, as the user of ``config``; started() gives the sign-in link."""
    hypercorn = HypercornConfig()
    hypercorn.bind = [f"{HOST}:{port}"]
    hypercorn.accesslog = None
    hypercorn.errorlog = logging.getLogger("kokumi.ui.server")
    hypercorn.include_server_header = False
    hypercorn.h11_max_incomplete_size = 64 * 1024
    sessions = Sessions()
    async with Client(config, field_manager=FIELD_MANAGER) as hub:
        app = create_app(UI(hub, sessions, argocd_namespace))
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, app, hypercorn)
            url = binds[0]
            log.info("serving the UI on %s", url)
            task_status.started(Running(url, f"{url}/signin?token={sessions.sign_in_token}"))
