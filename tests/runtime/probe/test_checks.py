"""kokumi.runtime.probe against the real spoke, registered as the spec's steps register a cluster.

Every way a connection goes wrong is produced for real (a refused port, a silent listener, a name
under .invalid, a foreign CA, a refused token) and must become the right Outcome, in time, without
a credential in it.
"""

from __future__ import annotations

import base64
import functools
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio
import yaml

from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.reasons import Reason
from kokumi.kube import Client, Config, FileToken, StaticToken
from kokumi.runtime.probe.checks import check, check_client, check_config
from kokumi.testing import Kubectl, canary
from kokumi.testing.controlplane import APIServer, CertificateAuthority
from kokumi.testing.spoke import (
    BAD_TOKEN,
    Registration,
    closed_port_server,
    foreign_ca_pem,
    register,
)

pytestmark = pytest.mark.cluster


def connection_of(kubeconfig: str) -> Connection:
    connection = parse(kubeconfig)
    assert isinstance(connection, Connection), connection
    return connection


def assert_no_secret(finding: Outcome, registration: Registration) -> None:
    assert registration.token not in repr(finding)
    assert registration.token not in finding.message


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections (the kernel does, from the backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"


# --- the registration itself ---------------------------------------------------------------


def test_registration_is_self_contained(
    spoke: APIServer, spoke_kubeconfig: Registration, kubectl: Kubectl
) -> None:
    document = yaml.safe_load(spoke_kubeconfig.kubeconfig)
    cluster = document["clusters"][0]["cluster"]
    user = document["users"][0]["user"]
    assert document["current-context"] == "spoke"
    assert cluster["server"] == spoke.url == spoke_kubeconfig.server
    assert base64.b64decode(cluster["certificate-authority-data"]) == spoke.ca_pem
    assert "certificate-authority" not in cluster  # embedded, no file path
    assert user == {"token": spoke_kubeconfig.token}
    assert spoke_kubeconfig.path.stat().st_mode & 0o077 == 0
    assert spoke_kubeconfig.token not in repr(spoke_kubeconfig)
    # Registering again is harmless and yields the same credential.
    again = register(spoke, kubectl)
    assert again.token == spoke_kubeconfig.token
    assert again.kubeconfig == spoke_kubeconfig.kubeconfig


def test_variants_change_one_thing(spoke_kubeconfig: Registration) -> None:
    server = closed_port_server()
    changed = yaml.safe_load(spoke_kubeconfig.variant(server=server, token=BAD_TOKEN))
    assert changed["clusters"][0]["cluster"]["server"] == server
    assert changed["users"][0]["user"] == {"token": BAD_TOKEN}
    plugin = yaml.safe_load(spoke_kubeconfig.variant(exec_plugin=True))
    assert "token" not in plugin["users"][0]["user"]
    assert plugin["users"][0]["user"]["exec"]["command"] == "kokumi-credential-helper"
    assert parse(spoke_kubeconfig.variant(exec_plugin=True)).code == "ExecPlugin"  # type: ignore[union-attr]


# --- Ready -----------------------------------------------------------------------------------


async def test_registered_kubeconfig_is_ready(
    spoke: APIServer, spoke_kubeconfig: Registration
) -> None:
    connection = connection_of(spoke_kubeconfig.kubeconfig)
    started = time.monotonic()
    finding = await check(connection)
    elapsed = time.monotonic() - started
    assert finding == Outcome(
        ok=True,
        reason=Reason.READY,
        message="the API server answers and accepts the credential as"
        " system:serviceaccount:kube-system:kokumi",
        server=spoke.url,
        kubernetes_version=spoke.version,
    )
    assert elapsed < 5.0  # of the 10 s budget; a few ms on an idle machine
    assert_no_secret(finding, spoke_kubeconfig)


async def test_client_certificate_identity_is_ready(
    spoke: APIServer, spoke_kubeconfig: Registration
) -> None:
    cert, key = spoke.identity("kokumi-probe-user", ["kokumi-probe-group", "system:masters"])
    connection = Connection(
        server=spoke.url,
        client_certificate=cert,
        client_key=key,
        certificate_authority=spoke.ca_pem,
    )
    finding = await check(connection)
    assert finding.ok, finding
    assert finding.message.endswith("as kokumi-probe-user")
    assert finding.kubernetes_version == spoke.version


# --- a credential granted less than cluster-admin ---------------------------------------------

NAMESPACES_REQUIRED = (
    "the credential may not list every resource cluster-wide, which Argo CD does unless told"
    " which namespaces to use: set spec.scope.namespaces to the namespaces Argo CD may use there,"
    " or grant the credential list and watch on all resources cluster-wide"
)


async def test_a_credential_bound_to_one_namespace_needs_namespaces(
    spoke: APIServer, narrow_spoke_kubeconfig: Registration
) -> None:
    """The spec's advice followed: admin in one namespace only. Argo CD would list cluster-wide
    with it and fail, so the check says so rather than Ready."""
    finding = await check(connection_of(narrow_spoke_kubeconfig.kubeconfig))
    assert finding == Outcome(
        ok=False,
        reason=Reason.NAMESPACES_REQUIRED,
        message=NAMESPACES_REQUIRED,
        server=spoke.url,
        kubernetes_version=spoke.version,
    )
    assert_no_secret(finding, narrow_spoke_kubeconfig)


async def test_the_same_credential_with_namespaces_is_ready(
    spoke: APIServer, narrow_spoke_kubeconfig: Registration
) -> None:
    finding = await check(connection_of(narrow_spoke_kubeconfig.kubeconfig), cluster_wide=False)
    assert finding.ok, finding
    assert finding.message.endswith("as system:serviceaccount:kube-system:kokumi-narrow")


async def test_cluster_admin_may_list_cluster_wide(spoke_kubeconfig: Registration) -> None:
    finding = await check(connection_of(spoke_kubeconfig.kubeconfig), cluster_wide=True)
    assert finding.ok, finding


async def test_a_user_bound_nothing_needs_namespaces(spoke: APIServer) -> None:
    """A client certificate of a user no binding names: it may create reviews, and no more."""
    cert, key = spoke.identity("kokumi-unbound-user", ["kokumi-probe-group"])
    connection = Connection(
        server=spoke.url,
        client_certificate=cert,
        client_key=key,
        certificate_authority=spoke.ca_pem,
    )
    finding = await check(connection)
    assert finding.reason is Reason.NAMESPACES_REQUIRED
    assert (await check(connection, cluster_wide=False)).ok


async def test_own_connection_is_not_asked_to_list_cluster_wide(
    spoke: APIServer, narrow_spoke_kubeconfig: Registration
) -> None:
    """InCluster registers nothing: the manager's own rights say nothing of Argo CD's."""
    finding = await check_config(Config.from_kubeconfig(narrow_spoke_kubeconfig.path))
    assert finding.ok, finding


async def test_insecure_skip_tls_verify_without_ca_is_ready(
    spoke_kubeconfig: Registration,
) -> None:
    connection = attrs.evolve(
        connection_of(spoke_kubeconfig.kubeconfig),
        certificate_authority=None,
        insecure_skip_tls_verify=True,
    )
    finding = await check(connection)
    assert finding.ok, finding


async def test_tls_server_name_is_sent_and_verified(spoke_kubeconfig: Registration) -> None:
    connection = connection_of(spoke_kubeconfig.kubeconfig)
    assert connection.server.startswith("https://127.0.0.1:")
    # The serving certificate holds "kubernetes": SNI and verification use that name...
    named = await check(attrs.evolve(connection, tls_server_name="kubernetes"))
    assert named.ok, named
    # ...and not the URL's host, which the certificate holds too: so a wrong name must fail.
    wrong = await check(attrs.evolve(connection, tls_server_name="wrong.example"))
    assert wrong.reason is Reason.TLS_ERROR
    assert "not valid for the TLS server name wrong.example" in wrong.message
    assert "tls-server-name" in wrong.message


# --- the credential --------------------------------------------------------------------------


async def test_bad_token_is_unauthorized(spoke_kubeconfig: Registration) -> None:
    finding = await check(connection_of(spoke_kubeconfig.variant(token=BAD_TOKEN)))
    assert finding.reason is Reason.UNAUTHORIZED
    assert not finding.ok
    assert "refuses the credential (401)" in finding.message
    assert BAD_TOKEN not in finding.message
    assert_no_secret(finding, spoke_kubeconfig)


@pytest.mark.parametrize("token", ["new\nline", "s\u00e9cret", "two words"])
async def test_token_unfit_for_a_header_is_unauthorized(spoke: APIServer, token: str) -> None:
    finding = await check(Connection(spoke.url, token=token, certificate_authority=spoke.ca_pem))
    assert finding.reason is Reason.UNAUTHORIZED
    assert "cannot go into an HTTP header" in finding.message
    assert token not in repr(finding)


async def test_certificate_from_a_foreign_ca_is_unauthorized(spoke: APIServer) -> None:
    cert, key = CertificateAuthority.create("kokumi-foreign-client-ca").issue("intruder")
    connection = Connection(
        server=spoke.url,
        client_certificate=cert,
        client_key=key,
        certificate_authority=spoke.ca_pem,
    )
    finding = await check(connection)
    assert finding.reason is Reason.UNAUTHORIZED


async def test_no_credential_is_unauthorized_but_the_version_is_known(spoke: APIServer) -> None:
    """The spoke serves /version anonymously: proof that /version alone proves nothing."""
    finding = await check(Connection(server=spoke.url, certificate_authority=spoke.ca_pem))
    assert finding.reason is Reason.UNAUTHORIZED
    assert "no credential" in finding.message
    assert finding.kubernetes_version == spoke.version


# --- TLS -------------------------------------------------------------------------------------


async def test_wrong_ca_is_tls_error(spoke_kubeconfig: Registration) -> None:
    finding = await check(connection_of(spoke_kubeconfig.variant(ca_pem=foreign_ca_pem())))
    assert finding.reason is Reason.TLS_ERROR
    assert "not signed by the configured CA" in finding.message
    assert "certificate-authority-data" in finding.message


@pytest.mark.parametrize(
    ("ca_pem", "says"),
    [
        (b"not a certificate", "the certificate authority is not valid PEM"),
        # Never the system's CAs instead: an empty CA must not quietly trust the whole world.
        (b"", "the certificate authority is empty"),
    ],
)
async def test_unusable_ca_is_tls_error(
    spoke_kubeconfig: Registration, ca_pem: bytes, says: str
) -> None:
    connection = attrs.evolve(
        connection_of(spoke_kubeconfig.kubeconfig), certificate_authority=ca_pem
    )
    finding = await check(connection)
    assert finding.reason is Reason.TLS_ERROR
    assert finding.message.startswith(says)


async def test_a_server_without_tls_is_tls_error(spoke: APIServer) -> None:
    """etcd's plain-HTTP client port, addressed as https://."""
    server = spoke.etcd_url.replace("http://", "https://")
    finding = await check(Connection(server=server, token="x", certificate_authority=spoke.ca_pem))
    assert finding.reason is Reason.TLS_ERROR


async def test_something_else_than_kubernetes_is_server_error(spoke: APIServer) -> None:
    """etcd answers GET /version, but with no gitVersion."""
    finding = await check(Connection(server=spoke.etcd_url, token="x"))
    assert finding.reason is Reason.SERVER_ERROR
    assert "not a Kubernetes API server" in finding.message
    assert finding.kubernetes_version is None


# --- Unreachable -----------------------------------------------------------------------------


async def test_closed_port_is_unreachable_at_once(spoke_kubeconfig: Registration) -> None:
    server = closed_port_server()
    started = time.monotonic()
    finding = await check(connection_of(spoke_kubeconfig.variant(server=server)))
    elapsed = time.monotonic() - started
    assert finding.reason is Reason.UNREACHABLE
    assert finding.message.startswith("connection refused by 127.0.0.1:")
    assert finding.server == server
    assert elapsed < 2.0  # refused is known at once, not after the 10 s budget


async def test_silent_server_times_out_within_the_budget(
    spoke_kubeconfig: Registration, silent_server: str
) -> None:
    connection = connection_of(spoke_kubeconfig.variant(server=silent_server))
    started = time.monotonic()
    finding = await check(connection, timeout=0.5)
    elapsed = time.monotonic() - started
    assert finding.reason is Reason.UNREACHABLE
    assert finding.message.startswith("timed out after 0.5 s")
    assert 0.5 <= elapsed < 3.0


async def test_dns_failure_is_unreachable(spoke_kubeconfig: Registration) -> None:
    server = "https://kokumi-probe.invalid:6443"
    # The whole budget: the resolver answers at once, but a lost UDP reply costs glibc 5 s.
    finding = await check(connection_of(spoke_kubeconfig.variant(server=server)))
    assert finding.reason is Reason.UNREACHABLE
    assert finding.message.startswith("DNS lookup failed for kokumi-probe.invalid")


# --- proxies ---------------------------------------------------------------------------------


async def connect_proxy(stream: trio.SocketStream, seen: list[str], refuse: bool) -> None:
    """A minimal HTTP CONNECT proxy: enough to prove that proxy-url is where the check goes."""
    async with stream:
        head = b""
        while b"\r\n\r\n" not in head:
            data = await stream.receive_some(4096)
            if not data:
                return
            head += data
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        seen.append(f"{method} {target}")
        if refuse or method != "CONNECT":
            await stream.send_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        host, port = target.rsplit(":", 1)
        async with await trio.open_tcp_stream(host, int(port)) as upstream:
            await stream.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            async with trio.open_nursery() as nursery:

                async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
                    try:
                        async for chunk in source:
                            await sink.send_all(chunk)
                    except trio.BrokenResourceError:
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(pump, stream, upstream)
                nursery.start_soon(pump, upstream, stream)


@pytest.mark.parametrize("refuse", [False, True], ids=["tunnels", "refuses"])
async def test_proxy_url_is_used(spoke_kubeconfig: Registration, refuse: bool) -> None:
    seen: list[str] = []

    async def handler(stream: trio.SocketStream) -> None:
        await connect_proxy(stream, seen, refuse)

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        connection = attrs.evolve(
            connection_of(spoke_kubeconfig.kubeconfig),
            proxy_url=canary.proxy_url(f"127.0.0.1:{port}"),
        )
        finding = await check(connection)
        nursery.cancel_scope.cancel()
    target = spoke_kubeconfig.server.removeprefix("https://")
    assert seen == [f"CONNECT {target}"]
    assert canary.found(finding.message) == []
    if refuse:
        assert finding.reason is Reason.UNREACHABLE
        assert finding.message.startswith(f"proxy failed: the proxy 127.0.0.1:{port} would not")
    else:
        assert finding.ok, finding


@pytest.mark.parametrize("scheme", ["http", "socks5"])
async def test_unreachable_proxy_says_proxy_failed(
    spoke_kubeconfig: Registration, scheme: str
) -> None:
    proxy = canary.proxy_url(closed_port_server().removeprefix("https://"))
    proxy = proxy.replace("http://", f"{scheme}://")
    connection = attrs.evolve(connection_of(spoke_kubeconfig.kubeconfig), proxy_url=proxy)
    finding = await check(connection)
    assert finding.reason is Reason.UNREACHABLE
    assert finding.message.startswith("proxy failed")
    assert canary.found(finding.message) == []


# --- the manager's own connection ------------------------------------------------------------


async def test_own_connection_is_ready(spoke: APIServer, spoke_kubeconfig: Registration) -> None:
    async with Client(Config.from_kubeconfig(spoke_kubeconfig.path)) as client:
        finding = await check_client(client)
    assert finding.ok, finding
    assert finding.kubernetes_version == spoke.version
    assert finding.server == spoke.url


async def test_own_refused_token_points_at_the_manager(spoke_kubeconfig: Registration) -> None:
    config = attrs.evolve(
        Config.from_kubeconfig(spoke_kubeconfig.path), token=StaticToken(BAD_TOKEN)
    )
    finding = await check_config(config)
    assert finding.reason is Reason.UNAUTHORIZED
    assert "the manager's ServiceAccount token" in finding.message


async def test_own_rotated_token_is_reread_after_401(
    spoke_kubeconfig: Registration, tmp_path: Path
) -> None:
    """The kubelet rotated the token since the last read: one 401, one re-read, Ready."""
    token_file = tmp_path / "token"
    token_file.write_text(BAD_TOKEN)
    provider = FileToken(token_file)
    assert await provider.token() == BAD_TOKEN  # cached for a minute
    token_file.write_text(spoke_kubeconfig.token)
    config = attrs.evolve(Config.from_kubeconfig(spoke_kubeconfig.path), token=provider)
    finding = await check_config(config)
    assert finding.ok, finding
