"""The UI in a cluster, on the hub: deploy/ui/'s account and RBAC, tokens, users, the app.

The UI's ServiceAccount kokumi:kokumi-clusters-ui gets exactly deploy/ui/'s Role and admission
policy (applied for real: they are what is tested), and signs in with a token from the
TokenRequest API, as its pod would. Users are ServiceAccounts of the test's namespace with a Role
of their own, signing in with their tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import httpx
import trio

from kokumi.core import api
from kokumi.core.sessioncookie import Keys
from kokumi.kube.client import Client
from kokumi.kube.config import Config, StaticToken
from kokumi.kube.errors import Forbidden, NotFound, Unauthorized
from kokumi.kube.resources import SECRETS
from kokumi.testing import run_kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.ui.app import create_app
from kokumi.ui.incluster import KEY_NAMESPACE, KEY_SECRET, ProxyTrust, SignOuts, session_key
from kokumi.ui.pages import UI
from kokumi.ui.security import SealedSessions
from kokumi.workspace.newcluster import FIELD_MANAGER
from tests.support.deploy import (
    DEPLOY,
    apply,
    ensure_namespace,
    service_account_kubeconfig,
    wait_until,
)

UI_ACCOUNT = "system:serviceaccount:kokumi:kokumi-clusters-ui"
UI_FILES = DEPLOY / "ui"


def token(hub: APIServer, namespace: str, account: str, seconds: int = 3600) -> str:
    """A bound token of ``namespace/account`` from the TokenRequest API."""
    return run_kubectl(
        hub, "-n", namespace, "create", "token", account, f"--duration={seconds}s"
    ).stdout.strip()


def config_for(hub: APIServer, bearer: str, namespace: str = "kokumi") -> Config:
    return Config(
        server=hub.url,
        token=StaticToken(bearer),
        certificate_authority=hub.ca_pem,
        namespace=namespace,
    )


_INSTALLED: set[int] = set()
"""The hubs (by port) deploy/ui/'s account is applied on already, this session."""


def install_ui_account(hub: APIServer) -> Config:
    """deploy/ui/'s ServiceAccount, Role and policy on the hub, enforced; the account's Config."""
    if hub.port not in _INSTALLED:
        ensure_namespace(hub, "kokumi")
        ensure_namespace(hub, KEY_NAMESPACE)
        apply(
            hub,
            UI_FILES / "service-account.yaml",
            UI_FILES / "session-key.yaml",
            UI_FILES / "session-key-policy.yaml",
        )
        _INSTALLED.add(hub.port)
    own = token(hub, "kokumi", "kokumi-clusters-ui")
    kubeconfig = service_account_kubeconfig(hub, own, hub.workdir / "ui-account.kubeconfig")

    def enforced() -> bool | None:
        created = run_kubectl(kubeconfig, "-n", KEY_NAMESPACE, "create", "secret", "generic",
                              "planted", "--dry-run=server", check=False)  # fmt: skip
        return True if "kokumi-clusters-ui-session-key" in created.stderr else None

    wait_until(enforced, "the UI's session-key policy is enforced", timeout=90)
    return config_for(hub, own)


def user(hub: APIServer, namespace: str, name: str, verbs: str = "get,list,create") -> str:
    """A ServiceAccount ``name`` of ``namespace`` that may ``verbs`` Clusters there; its token."""
    run_kubectl(hub, "-n", namespace, "create", "serviceaccount", name)
    run_kubectl(hub, "-n", namespace, "create", "role", name, f"--verb={verbs}",
                "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
    run_kubectl(hub, "-n", namespace, "create", "rolebinding", name, f"--role={name}",
                f"--serviceaccount={namespace}:{name}")  # fmt: skip
    bearer = token(hub, namespace, name)

    def granted() -> bool | None:
        can = run_kubectl(hub, "auth", "can-i", "list", "clusters.delivery.kokumi.dev", "-n",
                          namespace, f"--as=system:serviceaccount:{namespace}:{name}",
                          check=False)  # fmt: skip
        return True if can.stdout.strip() == "yes" else None

    wait_until(granted, f"{name}'s Role reaches the authorizer")
    return bearer


@attrs.define
class App:
    """One UI replica: its sessions, and a browser (httpx) talking to it."""

    sessions: SealedSessions
    browser: httpx.AsyncClient


@asynccontextmanager
async def in_cluster_app(
    own: Config,
    *,
    proxy: ProxyTrust | None = None,
    base_url: str = "http://kokumi-ui.kokumi.svc",
    client: tuple[str, int] = ("10.1.2.3", 40000),
    namespaces: tuple[str, ...] = (),
) -> AsyncIterator[App]:
    """A replica as serve_in_cluster builds it, the session key read from (or made in) its
    Secret by the UI's own account; ``client`` is the address requests come from."""
    async with Client(own, field_manager=FIELD_MANAGER) as account:
        keys = Keys(await session_key(account))
        sessions = SealedSessions(keys)
        shared = SignOuts(account)
        if proxy is not None:
            ui = UI(account, sessions, proxy=proxy, namespaces=namespaces, sign_outs=shared)
            async with _browser(ui, base_url, client) as browser:
                yield App(sessions, browser)
            return
        bare = attrs.evolve(own, token=None, client_certificate=None, client_key=None)
        async with (
            Client(bare, field_manager=FIELD_MANAGER) as users,
            _browser(
                UI(users, sessions, namespaces=namespaces, sign_outs=shared), base_url, client
            ) as browser,
        ):
            yield App(sessions, browser)


@asynccontextmanager
async def _browser(
    ui: UI, base_url: str, client: tuple[str, int]
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(ui), client=client)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as browser:
        yield browser


async def delete_session_key(admin: Client) -> None:
    try:
        await admin.delete(SECRETS, KEY_SECRET, namespace=KEY_NAMESPACE)
    except NotFound:
        pass


async def refused_by_the_hub(hub: APIServer, bearer: str) -> None:
    """Until the API server refuses ``bearer`` (its ServiceAccount deleted): 401, not 403."""
    async with Client(config_for(hub, bearer)) as theirs:
        with trio.fail_after(60):
            while True:
                try:
                    await theirs.list(api.CLUSTERS, namespace="default")
                except Unauthorized:
                    return
                except Forbidden:
                    pass
                await trio.sleep(0.2)
