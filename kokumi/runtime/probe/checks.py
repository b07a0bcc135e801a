"""One check of one cluster connection: the probe's public face, and the path through httpx.

:func:`check` checks a kubeconfig's connection, :func:`check_config` (and :func:`check_client`)
the manager's own. Without a proxy the check goes the lean way (:mod:`.lean`); behind a
``proxy-url`` it goes through httpx, which speaks CONNECT and SOCKS, over Kokumi's transport
(:mod:`kokumi.kube.transport`) and its httpcore backend (:mod:`kokumi.kube.backend`), which
judges every address it connects to and closes every socket at the end. The package's
docstring says what the two questions are and why.
"""

from __future__ import annotations

import collections
import functools
import logging
import ssl
from collections.abc import Callable

import httpx
import trio

from kokumi.core.cluster import diagnosis, findings
from kokumi.core.cluster.egress import EgressPolicy, judge
from kokumi.core.cluster.schedule import CHECK_TIMEOUT
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.kube.backend import Backend
from kokumi.kube.client import Client
from kokumi.kube.config import Config
from kokumi.kube.errors import ConfigError
from kokumi.kube.tls import ssl_context
from kokumi.kube.transport import Transport
from kokumi.runtime.probe.lean import lean_check
from kokumi.runtime.probe.questions import (
    Budget,
    Outcomes,
    Question,
    Refused,
    ask,
    from_failure,
)

__all__ = ["check", "check_client", "check_config"]

# The probe's one logger, whichever of its modules logs (the name is documented).
log = logging.getLogger("kokumi.runtime.probe")


async def check(
    connection: Connection,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
    egress: EgressPolicy | None = None,
    cluster_wide: bool = True,
) -> Outcome:
    """Check ``connection`` within ``timeout`` seconds, all included: DNS, TLS, every request.

    The budget is a parameter, not the caller's cancel scope, because it is part of the answer:
    running out of it is an Outcome ("timed out after 10 s"), never a cancellation.

    The TLS settings are honoured as kubectl and Argo CD honour them: the CA (else the system's
    CAs), ``tls-server-name`` for SNI and verification, ``insecure-skip-tls-verify``, the client
    certificate and key, and ``proxy-url``. Nothing comes from the environment (no
    ``HTTPS_PROXY``, no ``.netrc``): the kubeconfig is the whole truth, as for the manager's own
    connection. Behind an HTTP(S) proxy the TLS server name is not sent, because httpx's tunnel
    always uses the URL's host; SOCKS proxies need httpx's ``socks`` extra.

    ``egress`` (default: :class:`EgressPolicy`'s, which refuses link-local and metadata addresses)
    is applied where the probe connects: to the server's literal address before anything else,
    and to every address a host name resolves to, before a socket is opened to it. A proxy's own
    address is judged the same way; a host name behind a proxy is resolved by the proxy, out of
    the probe's sight, which is what the example NetworkPolicy in deploy/optional is for.

    ``cluster_wide``: Argo CD would list and watch cluster-wide with this credential (its Cluster
    has no ``spec.scope.namespaces``: :func:`kokumi.core.cluster.findings.lists_cluster_wide`),
    so a good credential is also asked whether it may (``NamespacesRequired`` if not). A yes is
    kept for the connection for :data:`~kokumi.core.cluster.findings.CLUSTER_WIDE_KEPT`, and the
    question not asked again meanwhile; a no is never kept.
    """
    answers = _answers_of_run()
    ask = cluster_wide and not answers.holds(connection, trio.current_time())
    outcome = await _check(
        Outcomes(connection.server, timeout, own=False),
        cluster_wide=ask,
        egress=egress or _DEFAULT_EGRESS,
        token=connection.token,
        client_certificate=connection.client_certificate,
        client_key=connection.client_key,
        certificate_authority=connection.certificate_authority,
        tls_server_name=connection.tls_server_name,
        insecure_skip_tls_verify=connection.insecure_skip_tls_verify,
        proxy_url=connection.proxy_url,
    )
    if ask:
        # Ready after asking is a yes (the diagnosis takes nothing else for one); anything else
        # is a no, or no answer: asked again at the next check.
        answers.note(connection, trio.current_time(), yes=outcome.ok)
    return outcome


async def check_client(
    client: Client,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
) -> Outcome:
    """Check the cluster the manager runs in, through the connection ``client`` is configured with.

    Shorthand for :func:`check_config` with ``client.config``.
    """
    return await check_config(client.config, timeout=timeout)


async def check_config(
    config: Config,
    *,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
) -> Outcome:
    """Check the manager's own connection (the cluster Kokumi runs in) as :func:`check` does.

    Same two questions and reasons, so an InCluster Cluster reads like any other; the messages
    point at the manager's credential instead of a kubeconfig Secret. It is not asked whether
    it may list cluster-wide: Kokumi registers nothing for its own cluster, where Argo CD uses
    its own ServiceAccount, so the manager's rights say nothing of Argo CD's. Pass
    ``client.config`` of the shared :class:`kokumi.kube.Client`. The check opens a connection
    of its own rather than borrowing the client's pool: it must prove that a new connection
    works, not that an old one still does. A rotating token that the server refuses is re-read
    once, as the client does.
    """
    outcomes = Outcomes(config.server, timeout, own=True)
    with trio.move_on_after(timeout):
        provider = config.token
        try:
            token = await provider.token() if provider is not None else None
        except ConfigError as exc:
            return outcomes.of(diagnosis.unreadable_token(str(exc)))
        while True:
            outcome = await _check(
                outcomes,
                cluster_wide=False,
                token=token,
                client_certificate=config.client_certificate,
                client_key=config.client_key,
                certificate_authority=config.certificate_authority,
                tls_server_name=config.tls_server_name,
                insecure_skip_tls_verify=config.insecure_skip_tls_verify,
                proxy_url=config.proxy_url,
            )
            if not diagnosis.credential_refused(outcome.reason) or provider is None:
                return outcome
            token = await provider.refresh()
            if token is None:
                return outcome
            provider = None  # one re-read, as the client does
    return outcomes.timed_out()


async def _check(
    outcomes: Outcomes,
    *,
    cluster_wide: bool,
    token: str | None,
    client_certificate: bytes | None,
    client_key: bytes | None,
    certificate_authority: bytes | None,
    tls_server_name: str | None,
    insecure_skip_tls_verify: bool,
    proxy_url: str | None,
    egress: EgressPolicy | None = None,
) -> Outcome:
    outcomes.version = None
    if egress is not None:
        # A literal address, in any spelling the resolver reads, is judged before anything
        # else, the server's and the proxy's: no proxy, DNS or socket sees it (and Argo CD
        # is never lent it either: the registry asks the same question).
        literal = judge(egress, outcomes.server, proxy_url)
        if literal is not None:
            return outcomes.of(literal)
    base = _base_url(outcomes.server)
    if base is None:
        return outcomes.of(diagnosis.invalid_url())
    if base.scheme not in ("https", "http") or not base.host:
        return outcomes.of(diagnosis.not_http_url())
    try:
        context = _contexts.get(
            certificate_authority, client_certificate, client_key, insecure_skip_tls_verify
        )
    except ConfigError as exc:
        return outcomes.of(diagnosis.invalid_tls_material(str(exc), own=outcomes.own))
    if token and not _header_safe(token):
        # httpx would raise, quoting the offending character.
        return outcomes.of(diagnosis.bad_token())
    headers = {"Accept": "application/json", "User-Agent": "kokumi-probe"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    extensions = {"sni_hostname": tls_server_name} if tls_server_name else {}
    question = Question(
        base,
        headers,
        extensions,
        has_credential=bool(token) or bool(client_certificate),
        cluster_wide=cluster_wide,
    )
    started = trio.current_time()
    with trio.move_on_after(outcomes.timeout):
        if proxy_url is None and _LEAN:
            try:
                outcome = await lean_check(
                    question, outcomes, context, base, tls_server_name, egress, started
                )
            except Refused as refused:
                outcome = outcomes.of(refused.verdict)
            except (OSError, diagnosis.NoHTTPAnswer) as exc:
                outcome = from_failure(
                    exc, outcomes, base, tls_server_name, proxy_url, certificate_authority
                )
            return _logged(outcome, outcomes, started)
        try:
            # Every address judged where the pool connects (the server's, or the proxy's), every
            # read counted in the answer's budget, and every socket closed at the end, even when
            # the deadline fires mid-handshake or mid-read.
            budget = Budget()
            sockets = Backend(
                admit=_admission(egress) if egress is not None else None,
                track=True,
                meter=budget,
            )
            transport = Transport(ssl_context=context, proxy=proxy_url or None, backend=sockets)
            client = httpx.AsyncClient(
                transport=transport,
                trust_env=False,  # no proxy, CA bundle or .netrc from the environment
                timeout=outcomes.timeout,
                follow_redirects=False,
            )
        except ImportError:
            return outcomes.of(diagnosis.no_socks_support())
        except ValueError:
            return outcomes.of(diagnosis.unknown_proxy_scheme())
        try:
            async with client:
                outcome = await ask(client, question, outcomes, budget)
        except Refused as refused:
            outcome = outcomes.of(refused.verdict)
        except (httpx.HTTPError, OSError, trio.BrokenResourceError, diagnosis.NoHTTPAnswer) as exc:
            outcome = from_failure(
                exc, outcomes, base, tls_server_name, proxy_url, certificate_authority
            )
        finally:
            await sockets.close_all()
        return _logged(outcome, outcomes, started)
    return outcomes.timed_out()


_CACHED_URL = 512
"""The longest server kept parsed. A real API server's URL is well under 100 characters; a
kubeconfig may spell one of any length, and the cache would keep it after its Cluster went."""


def _base_url(server: str) -> httpx.URL | None:
    """The server's URL, None if it is none; parsed once per server, not at every check (a
    URL is immutable), but for one longer than :data:`_CACHED_URL`."""
    if len(server) > _CACHED_URL:
        return _parse_url(server)
    return _parsed_url(server)


def _parse_url(server: str) -> httpx.URL | None:
    try:
        return httpx.URL(server.rstrip("/"))
    except httpx.InvalidURL:
        return None


_parsed_url = functools.lru_cache(maxsize=16384)(_parse_url)
"""At most 16,384 servers of at most 512 characters: about 6 MB for a fleet of 10,000, 25 MB at
worst."""


class _ContextCache:
    """TLS client contexts by their material, least recently used first out.

    Building one costs about a millisecond of OpenSSL (more than the rest of a check's own code)
    and the material only changes with the kubeconfig Secret, so a steady fleet reuses them. The
    context only holds what to trust and what to present; every check still opens a new
    connection and handshakes anew, so it still proves the server and the credential. About
    18 KB each: the bound keeps a fleet of distinct CAs under about 75 MB.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._contexts: collections.OrderedDict[
            tuple[bytes | None, bytes | None, bytes | None, bool], ssl.SSLContext
        ] = collections.OrderedDict()

    def get(
        self,
        certificate_authority: bytes | None,
        client_certificate: bytes | None,
        client_key: bytes | None,
        insecure_skip_tls_verify: bool,
    ) -> ssl.SSLContext:
        key = (certificate_authority, client_certificate, client_key, insecure_skip_tls_verify)
        context = self._contexts.get(key)
        if context is not None:
            self._contexts.move_to_end(key)
            return context
        context = ssl_context(
            certificate_authority, client_certificate, client_key, insecure_skip_tls_verify
        )  # raises ConfigError: no entry
        self._contexts[key] = context
        if len(self._contexts) > self._size:
            self._contexts.popitem(last=False)
        return context


_contexts = _ContextCache(4096)


class _Answers:
    """The connections whose credential said yes to the cluster-wide question, and when: the
    last :data:`_ANSWERS` of them, least recently asked first out.

    Keyed by the connection itself (server, credential and TLS settings, compared by value): a
    changed kubeconfig is a new key, asked at once. An entry holds a reference to the connection,
    which its Cluster holds too while its kubeconfig stands.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._at: collections.OrderedDict[Connection, float] = collections.OrderedDict()

    def holds(self, connection: Connection, now: float) -> bool:
        at = self._at.get(connection)
        if at is None:
            return False
        if now - at < findings.CLUSTER_WIDE_KEPT:
            return True
        del self._at[connection]
        return False

    def note(self, connection: Connection, now: float, *, yes: bool) -> None:
        if not yes:
            self._at.pop(connection, None)
            return
        self._at[connection] = now
        self._at.move_to_end(connection)
        if len(self._at) > self._size:
            self._at.popitem(last=False)

    def clear(self) -> None:
        self._at.clear()


_ANSWERS = 16384
"""Connections whose yes is kept: a fleet of 10,000 and some changed kubeconfigs; about 100
bytes each beyond the connections themselves."""
_ANSWERS_OF_RUN: trio.lowlevel.RunVar[_Answers] = trio.lowlevel.RunVar("kokumi_probe_answers")


def _answers_of_run() -> _Answers:
    """The yes answers kept in this Trio run (whose clock their times are on)."""
    try:
        return _ANSWERS_OF_RUN.get()
    except LookupError:
        answers = _Answers(_ANSWERS)
        _ANSWERS_OF_RUN.set(answers)
        return answers


def _header_safe(token: str) -> bool:
    """Whether every character of ``token`` is visible ASCII (``!`` to ``~``), as a header's
    value must be: the C string methods' answer, where a loop over a service account's
    thousand characters took tens of microseconds of every check."""
    return token.isascii() and token.isprintable() and " " not in token


def _logged(outcome: Outcome, outcomes: Outcomes, started: float) -> Outcome:
    """The outcome, logged at debug with the check's time, whichever path found it."""
    log.debug(
        "checked %s in %.0f ms: %s",
        outcomes.server,
        (trio.current_time() - started) * 1000,
        outcome.reason,
    )
    return outcome


def _admission(egress: EgressPolicy) -> Callable[[str, str], None]:
    """The egress policy as the backend asks it, for each address a host resolves to."""

    def admit(host: str, address: str) -> None:
        verdict = judge(egress, host, address=address)
        if verdict is not None:
            raise Refused(verdict)

    return admit


# The policy of a check that names none: one instance, so that its answers are remembered.
_DEFAULT_EGRESS = EgressPolicy()
_LEAN = True
"""Checks without a proxy take the lean path; false sends every check through httpx (tests
compare the two)."""
