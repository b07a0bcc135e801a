"""deploy/ui/optional/oauth2-proxy.yaml's wiring, served for real with a stand-in for oauth2-proxy.

The UI runs with the example's own flags (``--listen`` host, ``--trusted-proxy``) on the real
hub; in front of it, over real sockets, a small proxy does to each request what the example's
oauth2-proxy flags make oauth2-proxy do: remove the client's copies of the identity headers
(``--skip-auth-strip-headers``), then name the signed-in user by email in ``X-Forwarded-User``
(``--prefer-email-to-user``) and add one ``X-Forwarded-Groups`` header per group, as oauth2-proxy
calls ``Header.Add`` once per group; ``--skip-auth-route`` paths pass with no user at all.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
import yaml
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from kokumi.testing import Kubectl
from kokumi.testing.controlplane import APIServer
from kokumi.ui.incluster import ProxyTrust
from kokumi.ui.serve import serve_in_cluster
from tests.support.deploy import apply, wait_until
from tests.support.ui import UI_ACCOUNT, UI_FILES, install_ui_account

EXAMPLE = UI_FILES / "optional" / "oauth2-proxy.yaml"
IDENTITY = ("x-forwarded-user", "x-forwarded-groups", "x-forwarded-email",
            "x-forwarded-preferred-username", "authorization")  # fmt: skip
HOP = ("connection", "keep-alive", "transfer-encoding", "content-length", "host")
CLUSTER = """apiVersion: delivery.kokumi.dev/v1alpha1
kind: Cluster
metadata: {{name: {name}, namespace: {namespace}}}
spec: {{connection: InCluster}}
"""


def _flags(args: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for arg in args:
        name, _, value = arg.partition("=")
        found.setdefault(name, []).append(value)
    return found


def _example() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    deployment = next(yaml.safe_load_all(EXAMPLE.read_text()))
    ui, proxy = deployment["spec"]["template"]["spec"]["containers"]
    return _flags(ui["args"]), _flags(proxy["args"])


def stand_in(upstream: str, flags: dict[str, list[str]], email: str, groups: list[str]) -> Any:
    """An ASGI app doing to each request what oauth2-proxy with ``flags`` does for a user
    signed in as ``email`` in ``groups``, forwarding it to ``upstream``."""
    skip = [route.split("=", 1) for route in flags.get("--skip-auth-route", [])]
    assert flags["--skip-auth-strip-headers"] == ["true"]
    assert flags["--pass-user-headers"] == ["true"]
    assert flags["--prefer-email-to-user"] == ["true"]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = (await receive())["type"].rpartition(".")[2]
                await send({"type": f"lifespan.{event}.complete"})
                if event == "shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in (*IDENTITY, *HOP[:-1])]  # fmt: skip
        path = scope["path"]
        if not any(method == scope["method"] and re.search(rx, path) for method, rx in skip):
            headers += [("X-Forwarded-User", email), ("X-Forwarded-Email", email),
                        ("X-Forwarded-Preferred-Username", email.partition("@")[0])]  # fmt: skip
            headers += [("X-Forwarded-Groups", group) for group in groups]
        query = scope["query_string"].decode()
        async with httpx.AsyncClient(base_url=upstream) as client:
            answer = await client.request(
                scope["method"], path + (f"?{query}" if query else ""), headers=headers,
                content=body,
            )  # fmt: skip
        out = [(k.encode(), v.encode()) for k, v in answer.headers.multi_items()
               if k.lower() not in HOP and k.lower() != "content-encoding"]  # fmt: skip
        out.append((b"content-length", str(len(answer.content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})

    return app


@asynccontextmanager
async def fronted_ui(hub: APIServer, email: str, groups: list[str]) -> AsyncIterator[str]:
    """The UI with the example's flags, and the stand-in in front: the stand-in's URL."""
    ui_flags, proxy_flags = _example()
    own = install_ui_account(hub)
    host = ui_flags["--listen"][0].rpartition(":")[0]
    trust = ProxyTrust.parse(ui_flags["--trusted-proxy"], "X-Forwarded-User", "X-Forwarded-Groups")
    # The sidecar's upstream is the UI's --listen: the same address, here on a free port.
    assert proxy_flags["--upstream"] == [f"http://{ui_flags['--listen'][0]}/"]
    async with trio.open_nursery() as nursery:
        ui = await nursery.start(
            functools.partial(serve_in_cluster, own, bind=f"{host}:0", proxy=trust)
        )
        config = HypercornConfig()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        binds = await nursery.start(
            functools.partial(serve, stand_in(ui, proxy_flags, email, groups), config)
        )
        yield binds[0]
        nursery.cancel_scope.cancel()


async def test_oauth2_proxys_user_and_groups_reach_the_ui_and_the_clients_copies_do_not(
    hub: APIServer, crds: object, namespace: str, kubectl: Kubectl
) -> None:
    install_ui_account(hub)
    apply(hub, UI_FILES / "optional" / "impersonate.yaml")
    # A second group the proxy passes on, granted here the way impersonate.yaml grants its one.
    kubectl(hub, "create", "clusterrole", f"{namespace}-impersonate", "--verb=impersonate",
            "--resource=groups", f"--resource-name={namespace}-team")  # fmt: skip
    kubectl(hub, "create", "clusterrolebinding", f"{namespace}-impersonate",
            f"--clusterrole={namespace}-impersonate",
            "--serviceaccount=kokumi:kokumi-clusters-ui")  # fmt: skip
    kubectl(hub, "-n", namespace, "create", "role", "readers", "--verb=get,list",
            "--resource=clusters.delivery.kokumi.dev")  # fmt: skip
    kubectl(hub, "-n", namespace, "create", "rolebinding", "readers", "--role=readers",
            "--group=kokumi-clusters-users")  # fmt: skip
    kubectl(hub, "apply", "-f", "-", input=CLUSTER.format(name="edge", namespace=namespace))

    def granted() -> bool | None:
        can = kubectl(hub, "auth", "can-i", "impersonate", f"groups/{namespace}-team",
                      f"--as={UI_ACCOUNT}", check=False)  # fmt: skip
        return True if can.stdout.strip() == "yes" else None

    wait_until(granted, "the UI may impersonate the second group")
    email = "dana@example.com"
    try:
        async with (
            fronted_ui(hub, email, [f"{namespace}-team", "kokumi-clusters-users"]) as url,
            httpx.AsyncClient(base_url=url) as browser,
        ):
            # The Role is the second group's: both group headers were read.
            path = f"/clusters?namespace={namespace}"
            page = await browser.get(path)
            assert page.status_code == 200, page.text
            assert f"cluster-{namespace}-edge" in page.text and f">{email}<" in page.text
            assert "HttpOnly; SameSite=Strict" in page.headers["set-cookie"]
            # What the client says of itself is removed before the UI sees it.
            forged = await browser.get(path, headers={
                "X-Forwarded-User": "system:admin", "X-Forwarded-Groups": "system:masters",
            })  # fmt: skip
            assert forged.status_code == 200 and f">{email}<" in forged.text
            assert "system:" not in forged.text.split("<main>", 1)[0]
            # The probes' path passes with no user, and the UI answers it without one.
            assert (await browser.get("/healthz")).text == "ok"
    finally:
        kubectl(hub, "delete", "clusterrolebinding,clusterrole", f"{namespace}-impersonate",
                "--ignore-not-found")  # fmt: skip
