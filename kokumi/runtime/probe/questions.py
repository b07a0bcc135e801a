"""The probe's questions, and the one Outcome their answers or failures become.

Both ways of asking (the lean reader and httpx) ask these same questions, and hand what they get
back, an answer or an exception, to the same functions here, which ask
:mod:`kokumi.core.cluster.diagnosis` what it means: so both paths find the same Outcome.
What this module exports is what the two paths (:mod:`~kokumi.runtime.probe.checks` and
:mod:`~kokumi.runtime.probe.lean`) share: the questions, their bounds and the Outcome they make.
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

__all__ = [
    "ACCESS_REVIEW",
    "ACCESS_REVIEW_PATH",
    "CLUSTER_WIDE",
    "MAX_ANSWER",
    "MAX_HEAD",
    "REVIEW",
    "REVIEW_PATH",
    "Budget",
    "Outcomes",
    "Overlong",
    "Question",
    "Refused",
    "ask",
    "from_failure",
    "phrase",
]

MAX_HEAD = 16 * 1024
"""An answer's heads, every interim answer's included, together: as much as h11 (under httpx)
allows one head. More is no answer."""

MAX_ANSWER = 64 * 1024
"""Bytes one answer may take on the wire: its heads, its body and the body's chunk framing
together. Answers to our questions are under 1 KiB; a server that sends more is not answering
them."""

_MAX_READS = 64
"""Reads of the socket one answer may take. An API server's answer comes in one or two; a server
that sends it a byte at a time would otherwise cost a read and a parse per byte (seconds of CPU
per check, each read a wake-up of the event loop on the path through httpx, and the GIL held
by the lean path's thread), until the check's deadline."""

_MAX_EVENTS = 256
"""Parser events (h11's: heads, pieces of the body, its end) one answer may take. Bytes and reads
alone do not bound them: 64 KiB of 1-byte chunks read at once are 11,000 pieces."""

REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
ACCESS_REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"nonResourceAttributes": {"path": "/version", "verb": "get"}},
}
"""The second question and, before Kubernetes 1.28, its older form: written once here, sent as
they are by httpx and as bytes by the lean path."""
CLUSTER_WIDE = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SelfSubjectAccessReview",
    "spec": {"resourceAttributes": {"verb": "list", "group": "*", "resource": "*"}},
}
"""The third question, for a Cluster without ``spec.scope.namespaces``: may the credential list
every resource of every group, in no namespace (cluster-wide), as Argo CD's cluster cache does?
RBAC grants it only by a ClusterRoleBinding to a rule of ``*`` groups and resources (as
cluster-admin's), never by rules that name kinds or by RoleBindings. ``list`` stands for
``list`` and ``watch``, which roles grant together: a fourth request for every Ready Cluster
would tell apart only a role that grants one without the other."""


@attrs.frozen
class Question:
    """Where and how to ask, the same for both paths."""

    base: httpx.URL
    headers: Mapping[str, str]
    extensions: Mapping[str, Any]
    has_credential: bool
    #: Ask the third question (:data:`CLUSTER_WIDE`) once the review found the credential good.
    cluster_wide: bool = False


@attrs.define
class Outcomes:
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


class Overlong(Exception):
    """An answer over one of the bounds of :class:`Budget`; ``how`` says which, in a few words."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how

    def verdict(self, what: str) -> diagnosis.Verdict:
        """The check's Verdict, ``what`` being the question (``GET /version``) so answered."""
        return diagnosis.not_kubernetes(f"{what} answered {self.how}")


class Budget:
    """What one answer may take of the wire, counted as it is read, on either path.

    The bounds are on what the server controls: bytes on the wire (heads, body and chunk
    framing, not only the body), reads of the socket, and parser events. Each read asks for no
    more than is left, so a check reads at most :data:`MAX_ANSWER` bytes in at most
    :data:`_MAX_READS` reads an answer, and its CPU is bounded with them (a read and a parse a
    byte is what a hostile server aims at). :meth:`room` and :meth:`took` wrap every read
    (:meth:`room` raises before a read the budget has no room for), :meth:`event` every parser
    event; :meth:`start` opens the next answer's budget. While ``head`` is true the answer's
    head is not in yet and :data:`MAX_HEAD` bounds what is read.
    """

    __slots__ = ("events", "head", "reads", "received")

    def __init__(self) -> None:
        self.reads = self.received = self.events = 0
        self.head = True

    def start(self) -> None:
        self.reads = self.received = self.events = 0
        self.head = True

    def room(self, wanted: int) -> int:
        """How many bytes the next read may ask for; raises when the answer may take no more."""
        if self.head and self.received > MAX_HEAD:
            raise diagnosis.NoHTTPAnswer()  # all of it heads, and more than one may be
        if self.reads >= _MAX_READS:
            raise Overlong(f"in more than {_MAX_READS} reads")
        left = (MAX_HEAD + 1 if self.head else MAX_ANSWER) - self.received
        if left <= 0:
            raise Overlong(f"with more than {MAX_ANSWER // 1024} KiB")
        return min(wanted, left)

    def took(self, size: int) -> None:
        self.reads += 1
        self.received += size

    def event(self) -> None:
        self.events += 1
        if self.events > _MAX_EVENTS:
            raise Overlong(f"in more than {_MAX_EVENTS} parts")


async def ask(
    client: httpx.AsyncClient, question: Question, outcomes: Outcomes, budget: Budget
) -> Outcome:
    """Ask the questions; what each answer means is the diagnosis's. ``budget`` is the one the
    client's network backend counts its reads in."""
    said = {"has_credential": question.has_credential, "own": outcomes.own}
    what = "GET /version"
    try:
        status, body = await _send(client, "GET", "/version", question, budget)
        version = diagnosis.version_answer(status, phrase(status), body, **said)
        if isinstance(version, tuple):
            return outcomes.of(version)
        outcomes.version = version

        what = "POST selfsubjectreviews"
        status, body = await _send(client, "POST", REVIEW_PATH, question, budget, REVIEW)
        if status == 404:  # before Kubernetes 1.28
            what = "POST selfsubjectaccessreviews"
            status, body = await _send(
                client, "POST", ACCESS_REVIEW_PATH, question, budget, ACCESS_REVIEW
            )
        verdict = diagnosis.review_answer(status, phrase(status), body, **said)
        if verdict[0] is not Reason.READY or not question.cluster_wide:
            return outcomes.of(verdict)

        what = "POST selfsubjectaccessreviews"
        status, body = await _send(
            client, "POST", ACCESS_REVIEW_PATH, question, budget, CLUSTER_WIDE
        )
    except Overlong as overlong:
        return outcomes.of(overlong.verdict(what))
    return outcomes.of(
        diagnosis.cluster_wide_answer(status, phrase(status), body, ready=verdict, **said)
    )


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    question: Question,
    budget: Budget,
    body: Mapping[str, Any] | None = None,
) -> tuple[int, bytes]:
    """Status and body, within ``budget``; the server URL's own path is kept.

    The body is read raw, as the lean path reads it: asked for no encoding and decoded from
    none, so a few compressed bytes cannot become megabytes. Each piece of it is an event of the
    budget: they are h11's, which httpcore hands on one by one, without a checkpoint between
    them, on the event loop.
    """
    url = question.base.copy_with(raw_path=question.base.raw_path.rstrip(b"/") + path.encode())
    request = client.build_request(
        method,
        url,
        headers={**question.headers, "Accept-Encoding": "identity"},
        json=body,
        extensions=dict(question.extensions),
    )
    budget.start()
    response = await client.send(request, stream=True)
    try:
        budget.head = False
        budget.event()  # the head
        content = bytearray()
        async for chunk in response.aiter_raw():
            budget.event()
            content += chunk
        return response.status_code, bytes(content)
    finally:
        await response.aclose()


def from_failure(
    exc: BaseException,
    outcomes: Outcomes,
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


def phrase(status: int) -> str:
    """The reason phrase both paths give the diagnosis, whatever the server sent."""
    return httpx.codes.get_reason_phrase(status)


class Refused(Exception):
    """A connection the egress policy refuses, with its verdict; no credential, only where."""

    def __init__(self, verdict: diagnosis.Verdict) -> None:
        super().__init__(verdict[1])
        self.verdict = verdict
