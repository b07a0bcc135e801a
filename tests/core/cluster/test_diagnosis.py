"""The probe's diagnosis, without a socket: exception chains and answers in, Reason and message out.

The probe's own tests reach real servers, proxies and sockets for each of these; here the
decisions alone, including the orders of precedence that a real failure rarely shows together.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
import ssl
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.cluster import diagnosis, egress
from kokumi.core.reasons import PROBE_REASONS, Reason


def diagnose(causes: Sequence[BaseException], proxy: str = "") -> diagnosis.Verdict:
    return diagnosis.from_failure(
        causes,
        failed="ConnectError",
        where="spoke.example:6443",
        host="spoke.example",
        proxy=proxy,
        proxy_host=proxy.rsplit(":", 1)[0],
        tls_server_name=None,
        certificate_authority=None,
        timeout=10,
    )


def test_the_chain_walks_causes_contexts_and_groups_once_each() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    group = ExceptionGroup("happy eyeballs", [OSError(errno.ENETUNREACH, "unreachable"), refused])
    try:
        try:
            raise group
        except ExceptionGroup as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        found = list(diagnosis.chain(outer))
    assert found[:2] == [found[0], group]
    assert refused in found
    assert len(found) == len({id(e) for e in found})


@pytest.mark.parametrize(
    ("causes", "proxy", "message"),
    [
        (
            [diagnosis.ProxyRefused("403 Forbidden")],
            "proxy.example:3128",
            "proxy failed: the proxy proxy.example:3128 would not connect to spoke.example:6443"
            " (403 Forbidden); check proxy-url and the proxy's rules",
        ),
        (
            [socket.gaierror(socket.EAI_NONAME, "Name or service not known")],
            "",
            "DNS lookup failed for spoke.example: check the host name in the server URL and DNS",
        ),
        (
            [socket.gaierror(socket.EAI_NONAME, "Name or service not known")],
            "proxy.example:3128",
            "proxy failed: the proxy proxy.example:3128 is unreachable, DNS lookup failed for"
            " proxy.example: check proxy-url",
        ),
        (
            [OSError(errno.ECONNREFUSED, "Connection refused")],
            "",
            "connection refused by spoke.example:6443: check the port in the server URL and that"
            " the API server runs",
        ),
        (
            [diagnosis.TimedOut()],
            "",
            "timed out after 10 s: spoke.example:6443 did not answer in time; check firewalls,"
            " the network path and the server URL's port",
        ),
        (
            [diagnosis.NoHTTPAnswer()],
            "",
            "spoke.example:6443 closed the connection without an HTTP answer: check that the"
            " server URL points at the API server",
        ),
        (
            [OSError(errno.EHOSTUNREACH, "No route to host")],
            "",
            "no route to host (spoke.example:6443): check the network path",
        ),
        (
            [RuntimeError("odd")],
            "",
            "the connection to spoke.example:6443 failed (ConnectError): check the server URL and"
            " the network path",
        ),
    ],
)
def test_each_failure_has_its_message(
    causes: list[BaseException], proxy: str, message: str
) -> None:
    assert diagnose(causes, proxy) == (Reason.UNREACHABLE, message)


def test_tls_comes_before_anything_else_in_the_chain() -> None:
    handshake = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    handshake.reason = "WRONG_VERSION_NUMBER"
    reason, message = diagnose([diagnosis.TimedOut(), handshake])
    assert reason is Reason.TLS_ERROR
    assert (
        message == "spoke.example:6443 does not speak TLS: check the server URL's scheme and port"
    )


def test_a_server_error_quotes_only_the_status_message_on_one_line() -> None:
    body = json.dumps({"kind": "Status", "message": "etcd\n  is   down", "token": "t0k3n"}).encode()
    assert diagnosis.answered("GET /version", 503, "Service Unavailable", body) == (
        Reason.SERVER_ERROR,
        "the API server failed GET /version with 503 Service Unavailable (etcd is down); look at"
        " the API server's health and load",
    )
    assert diagnosis.answered("GET /version", 404, "Not Found", b"<html>") == (
        Reason.SERVER_ERROR,
        "GET /version answered 404 Not Found: this is not a Kubernetes API server; check the"
        " server URL and its path",
    )


def test_egress_names_the_address_and_why() -> None:
    network = ipaddress.ip_network("169.254.0.0/16")
    reason, message = egress.denied("meta.example", "169.254.169.254", network)
    assert reason is Reason.EGRESS_DENIED
    assert message.startswith("meta.example resolves to 169.254.169.254, in 169.254.0.0/16, where")
    assert "link-local" in message


# --- the two answers ----------------------------------------------------------------------------


def test_version_answer_goes_on_with_the_version_or_says_why_not() -> None:
    def answer(status: int, body: bytes = b"") -> object:
        return diagnosis.version_answer(status, "", body, has_credential=True, own=False)

    assert answer(200, b'{"gitVersion": "v1.36.3"}') == "v1.36.3"
    assert answer(403) is None
    assert answer(401) == diagnosis.unauthorized(True, own=False)
    assert answer(200, b"{}") == diagnosis.not_kubernetes(
        "GET /version answered without a gitVersion"
    )
    assert answer(404) == diagnosis.answered("GET /version", 404, "", b"")


@pytest.mark.parametrize("own", [False, True])
def test_review_answer_tells_a_credential_from_none(own: bool) -> None:
    def answer(status: int, body: bytes = b"", has_credential: bool = True) -> diagnosis.Verdict:
        return diagnosis.review_answer(status, "", body, has_credential=has_credential, own=own)

    anonymous = b'{"status": {"userInfo": {"username": "system:anonymous"}}}'
    assert answer(201, b'{"status": {"userInfo": {"username": "u"}}}') == (
        Reason.READY,
        "the API server answers and accepts the credential as u",
    )
    assert answer(201, b"{}") == (Reason.READY, "the API server answers and accepts the credential")
    assert answer(401) == diagnosis.unauthorized(True, own=own)
    assert answer(403) == diagnosis.forbidden(own=own)
    assert answer(403, has_credential=False) == diagnosis.unauthorized(False, own=own)
    assert answer(201, anonymous) == diagnosis.anonymous()
    assert answer(201, anonymous, has_credential=False) == diagnosis.unauthorized(False, own=own)
    assert answer(500)[0] == Reason.SERVER_ERROR


READY = diagnosis.ready("u")


@pytest.mark.parametrize("own", [False, True])
def test_cluster_wide_answer_needs_namespaces_only_on_a_clear_no(own: bool) -> None:
    def answer(status: int, body: bytes = b"") -> diagnosis.Verdict:
        return diagnosis.cluster_wide_answer(
            status, "", body, ready=READY, has_credential=True, own=own
        )

    assert answer(201, b'{"status": {"allowed": true}}') == READY
    assert answer(201, b'{"status": {"allowed": false, "reason": "no"}}') == (
        diagnosis.namespaces_required()
    )
    assert answer(401) == diagnosis.unauthorized(True, own=own)
    assert answer(403) == diagnosis.forbidden(own=own, review="SelfSubjectAccessReview")
    assert answer(500)[0] == Reason.SERVER_ERROR
    assert answer(429)[0] == Reason.SERVER_ERROR
    assert answer(404) == diagnosis.not_kubernetes("POST selfsubjectaccessreviews answered 404")
    no_answer = diagnosis.not_kubernetes(
        "POST selfsubjectaccessreviews answered without status.allowed"
    )
    for body in (b"", b"null", b"[]", b'{"status": null}', b'{"status": {"allowed": "false"}}'):
        assert answer(201, body) == no_answer


def test_namespaces_required_says_what_is_wrong_and_both_fixes_on_one_line() -> None:
    reason, message = diagnosis.namespaces_required()
    assert reason is Reason.NAMESPACES_REQUIRED
    assert "\n" not in message
    assert "may not list every resource cluster-wide" in message
    assert "set spec.scope.namespaces" in message
    assert "grant the credential list and watch on all resources cluster-wide" in message


@given(
    status=st.integers(100, 599),
    body=st.binary(max_size=256)
    | st.builds(
        lambda value: json.dumps({"status": {"allowed": value}}).encode(),
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    ),
    own=st.booleans(),
)
def test_cluster_wide_answer_is_ready_only_for_a_true_allowed(
    status: int, body: bytes, own: bool
) -> None:
    """Whatever a server answers, a Verdict of the probe's own, on one line; Ready (the review's
    verdict, unchanged) only for a 2xx whose ``status.allowed`` is the boolean true."""
    reason, message = diagnosis.cluster_wide_answer(
        status, "", body, ready=READY, has_credential=True, own=own
    )
    assert reason in PROBE_REASONS
    assert "\n" not in message
    try:
        allowed = json.loads(body)["status"]["allowed"]
    except (ValueError, TypeError, KeyError):
        allowed = None
    said_yes = 200 <= status < 300 and allowed is True
    assert ((reason, message) == READY) == said_yes
    if reason is Reason.NAMESPACES_REQUIRED:
        assert 200 <= status < 300 and allowed is False


def test_the_probes_own_refusals_keep_their_words() -> None:
    assert diagnosis.invalid_tls_material("the certificate authority is empty", own=True) == (
        Reason.TLS_ERROR,
        "the certificate authority is empty: correct it in the manager's configuration",
    )
    assert diagnosis.unreadable_token("cannot read /t") == (
        Reason.UNAUTHORIZED,
        "cannot read /t: check the manager's mounts",
    )
    assert diagnosis.credential_refused(diagnosis.bad_token()[0])
    assert not diagnosis.credential_refused(diagnosis.invalid_url()[0])


def name_mismatch(code: int) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, "certificate verify failed")
    exc.verify_code = code
    exc.verify_message = "Hostname mismatch"
    return exc


@pytest.mark.parametrize("code", [62, 64])  # a host name, an address
def test_a_name_mismatch_says_only_the_subject_alt_name_counts(code: int) -> None:
    """OpenSSL reports no more than a mismatch, so the words hold for a certificate with the
    name in its CN, with no subjectAltName, or with other names only."""
    host = "spoke.example" if code == 62 else "192.0.2.7"

    def diagnosed(tls_server_name: str | None) -> diagnosis.Verdict:
        return diagnosis.from_failure(
            [name_mismatch(code)],
            failed="ConnectError",
            where=f"{host}:6443",
            host=host,
            proxy="",
            proxy_host="",
            tls_server_name=tls_server_name,
            certificate_authority=None,
            timeout=10,
        )

    cn = "a name only in the CN counts neither for Kokumi nor for Go's TLS (Argo CD, kubectl)"
    assert diagnosed(None) == (
        Reason.TLS_ERROR,
        f"the server's certificate is not valid for {host}: none of its subjectAltNames matches"
        f" it, and {cn}; use a host a subjectAltName holds in the server URL, set tls-server-name"
        f" to one, or reissue the certificate with {host} as a subjectAltName",
    )
    assert diagnosed("k8s") == (
        Reason.TLS_ERROR,
        "the server's certificate is not valid for the TLS server name k8s: none of its"
        f" subjectAltNames matches it, and {cn}; set tls-server-name to a name a subjectAltName"
        " holds, or reissue the certificate with k8s as a subjectAltName",
    )
