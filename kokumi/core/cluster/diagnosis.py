"""What a check finds, in one line: every decision of the probe, apart from its I/O.

:mod:`kokumi.runtime.probe` asks the API server and catches what goes wrong; this module decides
which Reason that is and what the message says, from plain values: the exception chain (with the
HTTP client's and Trio's own exceptions turned into the small markers below), host and port
strings, HTTP status codes and bodies, and what the answers say (:func:`version_answer`,
:func:`review_answer`, :func:`cluster_wide_answer`). Keeping it free of Trio and httpx lets
every message be tested without a socket, and keeps a library upgrade from changing a message
unnoticed.

Messages name hosts, ports and reasons only: a server URL may carry user info and a proxy URL a
password, so callers pass ``host:port`` strings, never URLs.
"""

from __future__ import annotations

import errno
import json
import socket
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from kokumi.core.reasons import Reason

__all__ = [
    "NoHTTPAnswer",
    "ProxyRefused",
    "TimedOut",
    "Verdict",
    "anonymous",
    "answered",
    "bad_token",
    "chain",
    "cluster_wide_answer",
    "credential_refused",
    "forbidden",
    "from_failure",
    "invalid_tls_material",
    "invalid_url",
    "json_object",
    "namespaces_required",
    "no_socks_support",
    "not_http_url",
    "not_kubernetes",
    "ready",
    "review_answer",
    "status_message",
    "timed_out",
    "unauthorized",
    "unknown_proxy_scheme",
    "unreadable_token",
    "version_answer",
]

Verdict: TypeAlias = tuple[Reason, str]
"""A check's Reason and its one-line message."""


class ProxyRefused(Exception):
    """The proxy answered, but would not connect onward; the text is the proxy's answer."""


class TimedOut(Exception):
    """The HTTP client or a Trio deadline gave up waiting."""


class NoHTTPAnswer(Exception):
    """The connection closed without an HTTP answer."""


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it was raised from, exception groups included, breadth first."""
    seen: set[int] = set()
    queue = [exc]
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            queue.extend(current.exceptions)
        if current.__cause__ is not None:
            queue.append(current.__cause__)
        if current.__context__ is not None:
            queue.append(current.__context__)


def from_failure(
    causes: Sequence[BaseException],
    *,
    failed: str,
    where: str,
    host: str,
    proxy: str,
    proxy_host: str,
    tls_server_name: str | None,
    certificate_authority: bytes | None,
    timeout: float,
) -> Verdict:
    """A failed request's Verdict, by the most telling exception in its chain.

    The HTTP client wraps what went wrong (Trio wraps it too, and happy eyeballs groups the
    attempts), so the cause is looked for in the whole chain, most specific kind first.
    ``failed`` is the outermost exception's type name, ``where`` the server's ``host:port``,
    ``proxy`` the proxy's ``host:port`` or ``""``.
    """
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return Reason.TLS_ERROR, _verify_message(
                cause, host, tls_server_name, certificate_authority
            )
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            return Reason.TLS_ERROR, _handshake_message(cause, where)
    for cause in causes:
        if isinstance(cause, ProxyRefused):
            return Reason.UNREACHABLE, (
                f"proxy failed: the proxy {proxy} would not connect to {where} ({cause});"
                " check proxy-url and the proxy's rules"
            )
    # Before any TLS, with a proxy, everything that fails is the way to the proxy.
    prefix = f"proxy failed: the proxy {proxy} is unreachable, " if proxy else ""
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            name = proxy_host if proxy else host
            fix = "check proxy-url" if proxy else "check the host name in the server URL and DNS"
            return Reason.UNREACHABLE, f"{prefix}DNS lookup failed for {name}: {fix}"
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
        ):
            fix = (
                "check proxy-url"
                if proxy
                else "check the port in the server URL and that the API server runs"
            )
            return Reason.UNREACHABLE, f"{prefix}connection refused by {proxy or where}: {fix}"
    for cause in causes:
        if isinstance(cause, TimedOut | TimeoutError):
            return timed_out(timeout, proxy or where)
    for cause in causes:
        if isinstance(cause, NoHTTPAnswer):
            return Reason.UNREACHABLE, (
                f"{where} closed the connection without an HTTP answer: check that the server URL"
                " points at the API server"
            )
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return Reason.UNREACHABLE, (
                f"{prefix}{cause.strerror.lower()} ({proxy or where}): check the network path"
            )
    return Reason.UNREACHABLE, (
        f"{prefix}the connection to {proxy or where} failed ({failed}): check the"
        " server URL and the network path"
    )


def ready(username: object) -> Verdict:
    """Both answers were good; ``username`` is whom the review says we are, if it said."""
    who = f" as {username}" if isinstance(username, str) and username else ""
    return Reason.READY, f"the API server answers and accepts the credential{who}"


def credential_refused(reason: Reason) -> bool:
    """Whether a check found the credential refused, so that a rotating token is worth a re-read."""
    return reason is Reason.UNAUTHORIZED


def invalid_url() -> Verdict:
    return Reason.UNREACHABLE, "the server URL is not a valid URL: correct it"


def not_http_url() -> Verdict:
    return Reason.UNREACHABLE, "the server URL is not an http(s) URL: correct it"


def no_socks_support() -> Verdict:
    return Reason.UNREACHABLE, (
        "proxy failed: SOCKS proxies need httpx's socks extra (socksio) in Kokumi;"
        " use an HTTP(S) proxy"
    )


def unknown_proxy_scheme() -> Verdict:
    return Reason.UNREACHABLE, (
        "proxy failed: the proxy URL's scheme is not http, https or socks5: correct it"
    )


def invalid_tls_material(problem: str, *, own: bool) -> Verdict:
    """The CA, client certificate or key cannot make a TLS context; ``problem`` says which, and
    never quotes the PEM."""
    where = "the manager's configuration" if own else "the kubeconfig"
    return Reason.TLS_ERROR, f"{problem}: correct it in {where}"


def bad_token() -> Verdict:
    """A token that cannot go into an HTTP header (the kubeconfig parser refuses those too)."""
    return Reason.UNAUTHORIZED, (
        "the token has spaces or characters that cannot go into an HTTP header: copy the"
        " token as its Secret holds it, decoded from base64"
    )


def unreadable_token(problem: str) -> Verdict:
    """The manager's own token file could not be read; ``problem`` names the file, not its text."""
    return Reason.UNAUTHORIZED, f"{problem}: check the manager's mounts"


def version_answer(
    status: int, phrase: str, body: bytes, *, has_credential: bool, own: bool
) -> Verdict | str | None:
    """What ``GET /version`` answered: the server's version to go on with, ``None`` to go on
    without one (a 403: ``/version`` is not public here, and the review still tells), or the
    check's Verdict.

    ``phrase`` is the status's reason phrase, ``""`` when the code has none.
    """
    if status == 401:
        return unauthorized(has_credential, own=own)
    if 200 <= status < 300:
        version = json_object(body).get("gitVersion")
        if not isinstance(version, str) or not version:
            return not_kubernetes("GET /version answered without a gitVersion")
        return version
    if status == 403:
        return None
    return answered("GET /version", status, phrase, body)


def review_answer(
    status: int, phrase: str, body: bytes, *, has_credential: bool, own: bool
) -> Verdict:
    """The check's Verdict from the answer to the SelfSubjectReview (or its older stand-in).

    Without a credential, a 403 or ``system:anonymous`` means there was none to accept, so the
    fix is to add one, not to bind a role.
    """
    if status == 401:
        return unauthorized(has_credential, own=own)
    if status == 403:
        if not has_credential:
            return unauthorized(has_credential=False, own=own)
        return forbidden(own=own)
    if not 200 <= status < 300:
        return answered("POST selfsubjectreviews", status, phrase, body)
    review_status = json_object(body).get("status")
    user = review_status.get("userInfo") if isinstance(review_status, Mapping) else None
    username = user.get("username") if isinstance(user, Mapping) else None
    if username == "system:anonymous":
        if not has_credential:
            return unauthorized(has_credential=False, own=own)
        return anonymous()
    return ready(username)


def cluster_wide_answer(
    status: int, phrase: str, body: bytes, *, ready: Verdict, has_credential: bool, own: bool
) -> Verdict:
    """The check's Verdict once the review found the credential good (``ready``), from the
    answer to the SelfSubjectAccessReview of listing every resource cluster-wide.

    Asked only for a Cluster without ``spec.scope.namespaces``, whose Argo CD Secret then names
    no namespaces: Argo CD's cluster cache lists and watches every kind cluster-wide, and fails
    with a credential that may not. Every user may create the review (``system:basic-user``),
    so a 403 is :func:`forbidden`, as for the SelfSubjectReview; an answer that is not a
    review (no boolean ``status.allowed``) is no Kubernetes answer, and never taken for a yes.
    """
    what = "POST selfsubjectaccessreviews"
    if status == 401:
        return unauthorized(has_credential, own=own)
    if status == 403:
        return forbidden(own=own, review="SelfSubjectAccessReview")
    if not 200 <= status < 300:
        return answered(what, status, phrase, body)
    review_status = json_object(body).get("status")
    allowed = review_status.get("allowed") if isinstance(review_status, Mapping) else None
    if not isinstance(allowed, bool):
        return not_kubernetes(f"{what} answered without status.allowed")
    return ready if allowed else namespaces_required()


def namespaces_required() -> Verdict:
    """The credential may not list cluster-wide, and the Cluster names no namespaces."""
    return Reason.NAMESPACES_REQUIRED, (
        "the credential may not list every resource cluster-wide, which Argo CD does unless"
        " told which namespaces to use: set spec.scope.namespaces to the namespaces Argo CD"
        " may use there, or grant the credential list and watch on all resources cluster-wide"
    )


def timed_out(timeout: float, where: str) -> Verdict:
    return Reason.UNREACHABLE, (
        f"timed out after {timeout:g} s: {where} did not answer in time; check"
        " firewalls, the network path and the server URL's port"
    )


def unauthorized(has_credential: bool, *, own: bool) -> Verdict:
    """A 401, or no credential at all; ``own``: the manager's own connection, not a kubeconfig's."""
    if not has_credential:
        return Reason.UNAUTHORIZED, (
            "Kokumi runs without a credential: give the manager a ServiceAccount token"
            if own
            else "the kubeconfig has no credential: add a token, or a client certificate and key"
        )
    fix = (
        "check the manager's ServiceAccount token, or the kubeconfig it runs with"
        if own
        else "write a current credential into the kubeconfig Secret"
    )
    return Reason.UNAUTHORIZED, (
        "the API server refuses the credential (401): the token is invalid or expired, or the"
        f" client certificate is not signed by a CA it trusts; {fix}"
    )


def anonymous() -> Verdict:
    return Reason.UNAUTHORIZED, (
        "the API server takes the credential for system:anonymous: use the token or client"
        " certificate of a ServiceAccount or user"
    )


def forbidden(*, own: bool, review: str = "SelfSubjectReview") -> Verdict:
    """A 403 on ``review``, which every authenticated user may create."""
    fix = (
        "restore the system:basic-user binding"
        if own
        else "bind it the roles Argo CD needs there (cluster-admin, or less)"
    )
    return Reason.FORBIDDEN, (
        f"the credential authenticates, but its user may not create a {review} (403),"
        f" which every user may: {fix}"
    )


def not_kubernetes(what: str) -> Verdict:
    return Reason.SERVER_ERROR, (
        f"{what}: this is not a Kubernetes API server; check the server URL and its path"
    )


def answered(what: str, status: int, phrase: str, body: bytes) -> Verdict:
    """Any answer that is neither success nor 401/403: say what answered and how.

    ``phrase`` is the status's reason phrase, ``""`` when the code has none.
    """
    said_status = f"{status} {phrase}".strip()
    if status >= 500 or status == 429:
        said = status_message(body)
        text = f"the API server failed {what} with {said_status}" + (f" ({said})" if said else "")
        return Reason.SERVER_ERROR, f"{text}; look at the API server's health and load"
    return not_kubernetes(f"{what} answered {said_status}")


def json_object(body: bytes) -> Mapping[str, Any]:
    """The body as a JSON object, or ``{}``: an answer that is not one says nothing."""
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def status_message(body: bytes) -> str:
    """The server's own sentence from a ``Status``, short, on one line; nothing else of the body."""
    status = json_object(body)
    message = status.get("message") if status.get("kind") == "Status" else None
    return " ".join(message.split())[:160] if isinstance(message, str) else ""


_CN_IGNORED = "a name only in the CN counts neither for Kokumi nor for Go's TLS (Argo CD, kubectl)"


def _verify_message(
    exc: ssl.SSLCertVerificationError,
    host: str,
    name: str | None,
    certificate_authority: bytes | None,
) -> str:
    code = exc.verify_code
    if code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
        # The failure does not say whether the certificate holds the name in its CN, or has a
        # subjectAltName at all: the words are true whichever it is. A certificate with the name
        # only in the CN is the case that most needs them, since it once worked everywhere.
        if name:
            return (
                f"the server's certificate is not valid for the TLS server name {name}: none of"
                f" its subjectAltNames matches it, and {_CN_IGNORED}; set tls-server-name to a"
                f" name a subjectAltName holds, or reissue the certificate with {name} as a"
                " subjectAltName"
            )
        return (
            f"the server's certificate is not valid for {host}: none of its subjectAltNames"
            f" matches it, and {_CN_IGNORED}; use a host a subjectAltName holds in the server"
            f" URL, set tls-server-name to one, or reissue the certificate with {host} as a"
            " subjectAltName"
        )
    if code in (9, 10):  # X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED
        return (
            f"the server's certificate {exc.verify_message}: renew the API server's certificate"
            " or correct the clock"
        )
    if certificate_authority is None:
        return (
            f"the server's certificate is not trusted ({exc.verify_message}) and no CA is"
            " configured: add the cluster's CA as certificate-authority-data"
        )
    return (
        f"the server's certificate is not signed by the configured CA ({exc.verify_message}):"
        " put the cluster's CA into certificate-authority-data"
    )


def _handshake_message(exc: ssl.SSLError, where: str) -> str:
    reason = exc.reason or ""
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"{where} does not speak TLS: check the server URL's scheme and port"
    text = reason.replace("_", " ").lower() if reason else type(exc).__name__
    if "CERTIFICATE" in reason:
        return (
            f"the TLS handshake with {where} failed ({text}): the server does not accept the"
            " client certificate; use one its client CA signed"
        )
    return (
        f"the TLS handshake with {where} failed ({text}): check that the server URL points at"
        " the API server's HTTPS port"
    )
