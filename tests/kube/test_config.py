"""In-cluster config against the real hub, with real bound service-account tokens that rotate."""

from __future__ import annotations

import contextlib
from pathlib import Path

import attrs
import pytest
import trio

from kokumi.kube import (
    SERVICE_ACCOUNTS,
    Client,
    Config,
    ConfigError,
    FileToken,
    Unauthorized,
)
from kokumi.testing.controlplane import APIServer

WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


async def whoami(client: Client) -> str:
    review = await client.request(
        "POST", WHOAMI, json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    username: str = review["status"]["userInfo"]["username"]
    return username


async def issue_token(admin: Client, namespace: str, account: str) -> str:
    """A bound token from the TokenRequest API, as the kubelet would project it."""
    await admin.create(SERVICE_ACCOUNTS, {"metadata": {"name": account}}, namespace=namespace)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    answer = await admin.create(
        SERVICE_ACCOUNTS, request, namespace=namespace, name=account, subresource="token"
    )
    token: str = answer["status"]["token"]
    return token


@pytest.fixture
def mount(tmp_path: Path, hub: APIServer, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A service-account mount and the environment a pod on the hub would see."""
    root = tmp_path / "serviceaccount"
    root.mkdir()
    (root / "ca.crt").write_bytes(hub.ca_pem)
    (root / "namespace").write_text(namespace)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(hub.port))
    return root


async def test_in_cluster_follows_a_rotated_token_file(
    hub: APIServer, namespace: str, mount: Path
) -> None:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        first = await issue_token(admin, namespace, "first")
        second = await issue_token(admin, namespace, "second")
    (mount / "token").write_text(first)

    config = Config.in_cluster(mount, token_max_age=1.0)
    assert config.server == f"https://127.0.0.1:{hub.port}"
    assert config.namespace == namespace
    assert isinstance(config.token, FileToken)
    loaded = Config.load(root=mount)
    assert (loaded.server, loaded.certificate_authority, loaded.namespace) == (
        config.server,
        hub.ca_pem,
        namespace,
    )

    async with Client(config) as client:
        assert client.namespace == namespace
        assert await whoami(client) == f"system:serviceaccount:{namespace}:first"
        (mount / "token").write_text(second)  # the kubelet rotates the projected token
        await trio.sleep(1.1)
        assert await whoami(client) == f"system:serviceaccount:{namespace}:second"


@attrs.define
class CountingToken:
    """Counts how often the client asks the file provider for a token and for a newer one."""

    inner: FileToken
    refreshes: int = 0

    async def token(self) -> str:
        return await self.inner.token()

    async def refresh(self) -> str | None:
        self.refreshes += 1
        return await self.inner.refresh()


async def test_a_401_rereads_the_token_file_and_retries_once(
    hub: APIServer, namespace: str, mount: Path
) -> None:
    async with Client(Config.from_kubeconfig(hub.admin_kubeconfig)) as admin:
        valid = await issue_token(admin, namespace, "rotated")
    token_file = mount / "token"
    # The server refuses an expired token and a garbage one alike: garbage stands in for the
    # expired token here, so the test need not wait out a token's life or a revocation cache.
    token_file.write_text("expired-token-1")
    provider = CountingToken(FileToken(token_file))  # re-read every minute only
    config = attrs.evolve(Config.in_cluster(mount), token=provider)
    async with Client(config) as client:
        # Nothing newer in the file: the 401 stands, after one look at the file.
        with pytest.raises(Unauthorized):
            await whoami(client)
        assert provider.refreshes == 1

        # Something newer but refused too: one retry, not a loop.
        token_file.write_text("expired-token-2")
        with pytest.raises(Unauthorized):
            await whoami(client)
        assert provider.refreshes == 2

        # The kubelet wrote a fresh token: the refused request is retried with it and succeeds.
        token_file.write_text(valid)
        assert await whoami(client) == f"system:serviceaccount:{namespace}:rotated"
        assert provider.refreshes == 3
        assert await whoami(client) == f"system:serviceaccount:{namespace}:rotated"
        assert provider.refreshes == 3


@attrs.define
class ConnectProxy:
    """A loopback HTTP CONNECT proxy, as a kubeconfig's proxy-url would name."""

    tunnels: list[str] = attrs.Factory(list)
    port: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, downstream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await downstream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        request, rest = head.split(b"\r\n\r\n", 1)
        method, target, _ = request.split(b"\r\n", 1)[0].decode().split(" ")
        host, port = target.rsplit(":", 1)
        if method != "CONNECT" or host != "127.0.0.1":  # loopback only
            await downstream.send_all(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            return
        self.tunnels.append(target)
        upstream = await trio.open_tcp_stream(host, int(port))
        await downstream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            await upstream.send_all(rest)

        async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                async for data in source:
                    await sink.send_all(data)
            nursery.cancel_scope.cancel()

        async with downstream, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pump, downstream, upstream)
            nursery.start_soon(pump, upstream, downstream)


async def test_proxy_url_tunnels_to_the_server(hub: APIServer) -> None:
    proxy = ConnectProxy()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        config = attrs.evolve(
            Config.from_kubeconfig(hub.admin_kubeconfig), proxy_url=f"http://127.0.0.1:{proxy.port}"
        )
        async with Client(config) as client:
            assert (await client.request("GET", "/version"))["gitVersion"] == hub.version
        assert proxy.tunnels == [f"127.0.0.1:{hub.port}"]
        with pytest.raises(ConfigError, match="tls-server-name"):
            Client(attrs.evolve(config, tls_server_name="kubernetes"))
        nursery.cancel_scope.cancel()
