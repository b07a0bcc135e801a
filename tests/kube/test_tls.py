"""Server certificates as Go's TLS judges them, on every TLS context Kokumi makes.

Argo CD, kubectl and client-go match the server's name against the certificate's subjectAltName
only, never its CN; Python's ``ssl`` falls back to the CN of a certificate that has no DNS name
there. A Cluster must not be Ready where Argo CD cannot connect, so Kokumi judges as Go does: the
probe on both its paths (lean and httpx), the check of the manager's own connection, and the
manager's client. Each server here is a real local TLS server that answers as a healthy API server
does, so whatever gets past the handshake is Ready: only the certificate decides.
"""

from __future__ import annotations

import functools
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.reasons import Reason
from kokumi.kube import Client, Config, StaticToken, TransportError
from kokumi.kube.tls import ssl_context
from kokumi.runtime.probe.checks import check_config
from kokumi.testing import canary
from kokumi.testing.controlplane import CertificateAuthority
from tests.support.spoke_answers import answer_checks, both

TOKEN = canary.token("tls")
HOST = "spoke.test"
VERSION = b'{"major":"1","minor":"36","gitVersion":"v1.36.0-tls"}'

NOT_FOR_HOST = (
    f"the server's certificate is not valid for {HOST}: none of its subjectAltNames matches it,"
    " and a name only in the CN counts neither for Kokumi nor for Go's TLS (Argo CD, kubectl);"
    " use a host a subjectAltName holds in the server URL, set tls-server-name to one, or"
    f" reissue the certificate with {HOST} as a subjectAltName"
)
NOT_FOR_NAME = (
    f"the server's certificate is not valid for the TLS server name {HOST}: none of its"
    " subjectAltNames matches it, and a name only in the CN counts neither for Kokumi nor for"
    " Go's TLS (Argo CD, kubectl); set tls-server-name to a name a subjectAltName holds, or"
    f" reissue the certificate with {HOST} as a subjectAltName"
)


@attrs.frozen
class Pki:
    authority: CertificateAuthority
    folder: Path

    def server_context(self, cert: bytes, key: bytes) -> ssl.SSLContext:
        chain = self.folder / f"server-{len(list(self.folder.iterdir()))}.pem"
        chain.write_bytes(cert + key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(chain)
        return context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(CertificateAuthority.create("kokumi-tls-ca"), tmp_path_factory.mktemp("tls"))


# The certificates under test: the host in the CN only, with no subjectAltName at all; the host
# in the CN beside a subjectAltName that names only the address (so "no subjectAltName" would be
# a false thing to say); and the control, the host as a subjectAltName.
CERTIFICATES: dict[str, Callable[[CertificateAuthority], tuple[bytes, bytes]]] = {
    "cn-only": lambda ca: ca.issue(HOST, serving=True),
    "cn-and-an-address": lambda ca: ca.issue(HOST, server_names=["127.0.0.1"]),
    "subject-alt-name": lambda ca: ca.issue("kokumi-tls-server", server_names=[HOST]),
}

Serve = Callable[[str], Awaitable[int]]


@pytest.fixture
async def serve(pki: Pki) -> AsyncIterator[Serve]:
    """Start a TLS server with one of :data:`CERTIFICATES`, answering as an API server; its port.

    ``spoke.test`` resolves to it, through Trio's resolver, which the probe (both paths) and the
    client ask.
    """
    trio.socket.set_custom_hostname_resolver(Loopback())
    async with trio.open_nursery() as nursery:

        async def start(certificate: str) -> int:
            context = pki.server_context(*CERTIFICATES[certificate](pki.authority))
            listeners = await nursery.start(
                functools.partial(
                    trio.serve_ssl_over_tcp,
                    kubernetes,
                    0,
                    context,
                    host="127.0.0.1",
                    https_compatible=True,
                )
            )
            return int(listeners[0].transport_listener.socket.getsockname()[1])

        yield start
        nursery.cancel_scope.cancel()


class Loopback(trio.abc.HostnameResolver):
    async def getaddrinfo(
        self, host: bytes | None, port: bytes | str | int | None, *args: object, **kwargs: object
    ) -> list[tuple[Any, ...]]:
        assert host in (HOST.encode(), b"127.0.0.1"), host
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 443)))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        raise NotImplementedError


kubernetes = functools.partial(answer_checks, version=VERSION, username="tls-user", token=TOKEN)


def ready(server: str) -> Outcome:
    return Outcome(
        ok=True,
        reason=Reason.READY,
        message="the API server answers and accepts the credential as tls-user",
        server=server,
        kubernetes_version="v1.36.0-tls",
    )


def refused(server: str, message: str) -> Outcome:
    return Outcome(ok=False, reason=Reason.TLS_ERROR, message=message, server=server)


# --- the probe, both paths --------------------------------------------------------------------


@pytest.mark.parametrize("certificate", ["cn-only", "cn-and-an-address"])
async def test_a_host_named_only_in_the_cn_is_refused_on_both_paths(
    pki: Pki, serve: Serve, certificate: str
) -> None:
    port = await serve(certificate)
    server = f"https://{HOST}:{port}"
    finding = await both(Connection(server, token=TOKEN, certificate_authority=pki.authority.pem))
    assert finding == refused(server, NOT_FOR_HOST)


@pytest.mark.parametrize("certificate", ["cn-only", "cn-and-an-address"])
async def test_a_tls_server_name_only_in_the_cn_is_refused_on_both_paths(
    pki: Pki, serve: Serve, certificate: str
) -> None:
    port = await serve(certificate)
    server = f"https://127.0.0.1:{port}"
    target = Connection(
        server, token=TOKEN, certificate_authority=pki.authority.pem, tls_server_name=HOST
    )
    assert await both(target) == refused(server, NOT_FOR_NAME)


async def test_the_host_as_a_subject_alt_name_is_ready_on_both_paths(
    pki: Pki, serve: Serve
) -> None:
    """The control: the same server and check, with the name where Go looks for it."""
    port = await serve("subject-alt-name")
    server = f"https://{HOST}:{port}"
    target = Connection(server, token=TOKEN, certificate_authority=pki.authority.pem)
    assert await both(target) == ready(server)
    named = Connection(
        f"https://127.0.0.1:{port}",
        token=TOKEN,
        certificate_authority=pki.authority.pem,
        tls_server_name=HOST,
    )
    assert await both(named) == ready(named.server)


# --- the manager's own connection -------------------------------------------------------------


def own_config(pki: Pki, server: str) -> Config:
    return Config(server=server, certificate_authority=pki.authority.pem, token=StaticToken(TOKEN))


async def test_the_check_of_the_managers_own_connection_refuses_it_too(
    pki: Pki, serve: Serve
) -> None:
    refused_port = await serve("cn-only")
    server = f"https://{HOST}:{refused_port}"
    assert await check_config(own_config(pki, server), timeout=5) == refused(server, NOT_FOR_HOST)
    control = f"https://{HOST}:{await serve('subject-alt-name')}"
    assert await check_config(own_config(pki, control), timeout=5) == ready(control)


async def test_the_managers_client_refuses_a_host_named_only_in_the_cn(
    pki: Pki, serve: Serve
) -> None:
    refused_port = await serve("cn-only")
    async with Client(own_config(pki, f"https://{HOST}:{refused_port}"), max_retries=0) as client:
        with pytest.raises(TransportError, match="certificate verify failed: Hostname mismatch"):
            await client.request("GET", "/version")
    control = f"https://{HOST}:{await serve('subject-alt-name')}"
    async with Client(own_config(pki, control), max_retries=0) as client:
        assert (await client.request("GET", "/version"))["gitVersion"] == "v1.36.0-tls"


# --- every context --------------------------------------------------------------------------


@pytest.mark.parametrize("insecure", [False, True])
@pytest.mark.parametrize("with_ca", [False, True])
@pytest.mark.parametrize("with_client_certificate", [False, True])
def test_no_context_falls_back_to_the_cn(
    pki: Pki, insecure: bool, with_ca: bool, with_client_certificate: bool
) -> None:
    """Whatever the material, the one builder of contexts leaves the CN out of name checks."""
    cert, key = (
        pki.authority.issue("kokumi-tls-client") if with_client_certificate else (None, None)
    )
    ca = pki.authority.pem if with_ca else None
    context = ssl_context(ca, cert, key, insecure)
    assert context.hostname_checks_common_name is False
    assert context.check_hostname is not insecure
    config = Config(
        server="https://spoke.test",
        certificate_authority=ca,
        client_certificate=cert,
        client_key=key,
        insecure_skip_tls_verify=insecure,
    )
    assert config.ssl_context().hostname_checks_common_name is False
