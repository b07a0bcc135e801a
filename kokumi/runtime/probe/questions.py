"""The probe's two questions, and the one Outcome their answers or failures become.

Both ways of asking (the lean reader and httpx) ask these same questions, and hand what they get
back, an answer or an exception, to the same functions here, which ask
:mod:`kokumi.core.cluster.diagnosis` what it means: so both paths find the same Outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio

from kokumi.core.cluster import diagnosis
from kokumi.core.cluster.status import Outcome
from kokumi.core.reasons import Reason

_MAX_BODY = 1 << 20
"""Answers to our two questions are a few hundred bytes; a server that sends more is cut off."""

_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_ACCESS_REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}},
}


@attrs.frozen
class _Question:
    base: httpx.URL
    headers: Mapping[str, str]
    extensions: Mapping[str, Any]
    has_credential: bool


@attrs.define
class _Outcomes:
    """Builds the Outcomes of one check; remembers the version once ``/version`` told it.

    ``own`` is true for the manager's own connection, whose credential is fixed elsewhere than
    in a kubeconfig Secret.
    """

    server: str
    timeout: float
    own: bool
    version: str | None = None

    def of(self, verdict: diagnosis.Verdict) -> Outcome:
        reason, message = verdict
        return Outcome(reason is Reason.READY, reason, message, self.server, self.version)

    def timed_out(self) -> Outcome:
        return self.of(diagnosis.timed_out(self.timeout, _host_port(httpx.URL(self.server))))


async def _ask(client: httpx.AsyncClient, question: _Question, outcomes: _Outcomes) -> Outcome:
    """Ask both questions; what each answer means is the diagnosis's."""
    said = {"has_credential": question.has_credential, "own": outcomes.own}
    status, body = await _send(client, "GET", "/version", question)
    version = diagnosis.version_answer(status, _phrase(status), body, **said)
    if isinstance(version, tuple):
        return outcomes.of(version)
    outcomes.version = version

    status, body = await _send(client, "POST", _REVIEW_PATH, question, _REVIEW)
    if status == 404:  # before Kubernetes 1.28
        status, body = await _send(client, "POST", _ACCESS_REVIEW_PATH, question, _ACCESS_REVIEW)
    return outcomes.of(diagnosis.review_answer(status, _phrase(status), body, **said))


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    question: _Question,
    body: Mapping[str, Any] | None = None,
) -> tuple[int, bytes]:
    """Status and (at most ``_MAX_BODY`` of the) body; the server URL's own path is kept."""
    url = question.base.copy_with(raw_path=question.base.raw_path.rstrip(b"/") + path.encode())
    request = client.build_request(
        method,
        url,
        headers=question.headers,
        json=body,
        extensions=dict(question.extensions),
    )
    response = await client.send(request, stream=True)
    try:
        content = b""
        async for chunk in response.aiter_bytes():
            content += chunk
            if len(content) > _MAX_BODY:
                break
        return response.status_code, content
    finally:
        await response.aclose()


def _from_failure(
    exc: BaseException,
    outcomes: _Outcomes,
    base: httpx.URL,
    tls_server_name: str | None,
    proxy_url: str | None,
    certificate_authority: bytes | None,
) -> Outcome:
    """Map a failed request to an Outcome: :mod:`kokumi.core.cluster.diagnosis` decides, from plain
    values."""
    proxy = httpx.URL(proxy_url) if proxy_url else None
    verdict = diagnosis.from_failure(
        [_marker(cause) for cause in diagnosis.chain(exc)],
        failed=type(exc).__name__,
        where=_host_port(base),
        host=base.host,
        proxy=_host_port(proxy) if proxy is not None else "",
        proxy_host=proxy.host if proxy is not None else "",
        tls_server_name=tls_server_name,
        certificate_authority=certificate_authority,
        timeout=outcomes.timeout,
    )
    return outcomes.of(verdict)


def _marker(cause: BaseException) -> BaseException:
    """httpx's and Trio's exceptions as the diagnosis knows them; the standard library's as is."""
    if isinstance(cause, httpx.ProxyError):
        return diagnosis.ProxyRefused(str(cause))
    if isinstance(cause, httpx.TimeoutException | trio.TooSlowError):
        return diagnosis.TimedOut()
    if isinstance(cause, httpx.RemoteProtocolError):
        return diagnosis.NoHTTPAnswer()
    return cause


def _host_port(url: httpx.URL) -> str:
    """``host:port`` only: a URL may carry user info, which must not reach a message."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{host}:{port}"


def _phrase(status: int) -> str:
    return httpx.codes.get_reason_phrase(status)


class _Refused(Exception):
    """A connection the egress policy refuses, with its verdict; no credential, only where."""

    def __init__(self, verdict: diagnosis.Verdict) -> None:
        super().__init__(verdict[1])
        self.verdict = verdict
