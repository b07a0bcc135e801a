"""Plain-dict CRUD over one ``httpx.AsyncClient``: the verbs a controller needs, nothing more.

Objects stay dicts (the JSON the server sent): the layers above decide which fields they trust.
Failures are the typed errors of :mod:`kokumi.kube.errors`; a 401 re-reads a rotating token and
retries once, and a 429 or a server timeout is retried a bounded number of times after the delay
the server asked for.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, Self

import attrs
import httpx
import trio

from kokumi.objects import Resource, metadata_of, name_of, namespace_of

from .config import Config
from .errors import (
    ApiError,
    ConfigError,
    Fenced,
    ServerError,
    ServerTimeout,
    TooLarge,
    TooManyRequests,
    TransportError,
    WriteRefused,
    error_from_status,
)
from .paths import resource_path
from .transport import Transport

__all__ = [
    "CONFIG_MAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "PODS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "Client",
    "Identity",
    "Observer",
]


log = logging.getLogger(__name__)

JSON = "application/json"
# What a fence never stops: a replica that may not write still reads and watches.
_READS = frozenset({"GET", "HEAD"})


def _namespace_in(path: str) -> str | None:
    """The namespace a request's path is in, or names (``/api/v1/namespaces/N``); None for a
    cluster-scoped one. Segments are quoted, and a namespace is a DNS label: no quoting."""
    parts = path.split("/")
    for index, part in enumerate(parts[:-1]):
        if part == "namespaces" and index in (3, 4):  # /api/v1/namespaces, /apis/g/v/namespaces
            return parts[index + 1]
    return None


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Obj = dict[str, Any]


CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PODS = Resource("", "v1", "pods", "Pod")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)


def _header_value(what: str, longest: int = 1024) -> Any:
    def check(instance: Any, attribute: Any, value: str) -> None:
        if not value or len(value) > longest or not value.isprintable() or not value.isascii():
            raise ConfigError(
                f"{what} must be 1 to {longest:,} printable ASCII characters, as an HTTP header "
                "carries"
            )

    return check


def _groups(instance: Identity, attribute: Any, value: tuple[str, ...]) -> None:
    check = _header_value("an impersonated group")
    for group in value:
        check(instance, attribute, group)
    if value and instance.user is None:
        raise ConfigError("groups are impersonated together with a user: name the user too")


@attrs.frozen
class Identity:
    """Whom one request acts for, instead of the connection's own user.

    Either ``token``, a bearer token of that user's own (sent in place of the connection's
    credentials), or ``user`` with ``groups``, which the connection's user impersonates with
    ``Impersonate-User`` and ``Impersonate-Group`` (it needs the ``impersonate`` verb on them).
    A web front end serving many users makes each of its calls as one of them, so that their
    RBAC, not the front end's, decides.
    """

    token: str | None = attrs.field(
        default=None,
        repr=False,
        # An identity provider's ID token is often 1-2 KB with its claims; 16 KiB is far
        # above any token a login hands out and below what servers take in a header.
        validator=attrs.validators.optional(_header_value("a bearer token", 16 * 1024)),
    )
    user: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_header_value("an impersonated user"))
    )
    groups: tuple[str, ...] = attrs.field(default=(), validator=_groups)

    def __attrs_post_init__(self) -> None:
        if (self.token is None) == (self.user is None):
            raise ConfigError("an identity is a token or a user to impersonate: give one of them")

    def headers(self) -> list[tuple[str, str]]:
        if self.token is not None:
            return [("Authorization", f"Bearer {self.token}")]
        assert self.user is not None
        return [("Impersonate-User", self.user)] + [
            ("Impersonate-Group", group) for group in self.groups
        ]


class Observer(Protocol):
    """What a program may want to count about a client's work (``client.observer = ...``).

    Each method is called inline on the request path, so it must be quick and must not raise.
    The default observer counts nothing.
    """

    def request(self, verb: str, code: str) -> None:
        """One answer (``code``: the HTTP status, or ``error`` without one); retries count."""

    def watch_restarted(self, resource: str, reason: str) -> None:
        """A watch of ``resource`` starts again: ``gone`` after a 410, ``error`` after a failure."""


class _Unobserved:
    def request(self, verb: str, code: str) -> None:
        pass

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass


class Client:
    """An API server connection shared by every caller in the process.

    Use it as ``async with Client(config) as client:``. ``field_manager`` names this program in
    ``managedFields`` for every write (server-side apply needs one; other writes are clearer
    with one). ``timeout`` bounds each non-streaming request. ``transport`` replaces the network
    (httpx's own injection point), so tests can run the client against an in-process server.
    """

    def __init__(
        self,
        config: Config,
        *,
        field_manager: str = "kokumi",
        timeout: float = 30.0,
        user_agent: str = "kokumi",
        max_retries: int = 3,
        max_retry_delay: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_requests: int = 32,
    ) -> None:
        self._config = config
        # Requests in flight, and so connections to the API server, besides the watches (which
        # hold theirs for minutes and must never wait for a slot). Thousands of actors asking at
        # once, as after a restart, then queue here instead of opening thousands of connections.
        self._requests = trio.CapacityLimiter(max_requests)
        self._field_manager = field_manager
        self._timeout = httpx.Timeout(timeout)
        # A watch may rightly be silent for long; the watcher's own inactivity deadline
        # decides when it is dead, so the read timeout is off for streams.
        self._stream_timeout = httpx.Timeout(timeout, read=None)
        self._max_retries = max_retries
        self._max_retry_delay = max_retry_delay
        self._extensions: dict[str, Any] = {}
        self._identity: Identity | None = None
        self._fence: Callable[[], bool] | None = None
        self._read_only: dict[str, str] = {}  # namespace -> why no write is sent there
        self._shared = False
        self.observer: Observer = _Unobserved()
        if config.tls_server_name and config.proxy_url:
            # Through a CONNECT tunnel httpx sends SNI for the URL's host and checks that name:
            # refusing beats failing later on a certificate that "does not match".
            raise ConfigError("tls-server-name cannot be combined with proxy-url")
        if config.tls_server_name:
            # SNI and certificate verification then use this name, not the URL's host.
            self._extensions["sni_hostname"] = config.tls_server_name
        if transport is None:
            # The kubeconfig is the whole truth: no proxy or CA bundle from the environment.
            # Its backend closes a cancelled handshake's socket.
            transport = Transport(
                ssl_context=config.ssl_context(),
                proxy=config.proxy_url,
                # As many kept as requests may be in flight: onboarding's writes then reuse
                # their connections instead of each handshaking with the API server anew.
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=max_requests),
                keep=True,  # a pool that keeps them, at no cost a request
            )
        self._http = httpx.AsyncClient(
            base_url=config.server,
            trust_env=False,
            headers={"User-Agent": user_agent, "Accept": JSON},
            timeout=self._timeout,
            transport=transport,
        )

    @property
    def config(self) -> Config:
        return self._config

    @property
    def namespace(self) -> str:
        """The namespace of the connection (the pod's own, or the kubeconfig context's)."""
        return self._config.namespace

    @property
    def identity(self) -> Identity | None:
        """Whom this client's requests act for; None: the connection's own user."""
        return self._identity

    def acting_as(self, identity: Identity) -> Client:
        """This connection, each request made as ``identity``; cheap enough for every request.

        The result shares the connection pool, the limiter and the observer with this client,
        and closing it closes nothing: close this one. A token of the user's own is refused over
        a connection that presents a client certificate, since the API server would take the
        certificate's user and never look at the token; connect without one for that.
        """
        if identity.token is not None and self._config.client_certificate is not None:
            raise ConfigError(
                "a user's own token cannot be sent over a connection with a client certificate: "
                "the API server would act as the certificate's user; connect without one"
            )
        clone = copy.copy(self)
        clone._identity = identity
        clone._shared = True
        return clone

    def fenced(self, may_write: Callable[[], bool]) -> Client:
        """This connection, each write sent only while ``may_write()`` says so.

        The check is made at the last moment, after the wait for a request slot and with no
        await between it and the request going out, so that a replica that lost a Lease
        while a write of its waited cannot send it (a check before the call leaves every await
        on the way, the slot's included, for the Lease to go). A write refused so raises
        :class:`~kokumi.kube.errors.Fenced`; reads and watches are never fenced. Shares what
        :meth:`acting_as` shares.
        """
        clone = copy.copy(self)
        clone._fence = may_write
        clone._shared = True
        return clone

    def read_only_in(self, namespace: str, because: str) -> Client:
        """This connection, refusing to send any write in ``namespace`` (the namespace object
        itself included): :class:`~kokumi.kube.errors.WriteRefused`, which says ``because``,
        and nothing sent.

        For the tools people use as themselves (``kokumi cluster``, ``kokumi ui``): Argo CD's
        namespace is written by the manager alone, under its admission policy, and a user who
        may write there must not do it through Kokumi by naming it as a workspace. Shares what
        :meth:`acting_as` shares, and the clones made from it keep the rule.
        """
        clone = copy.copy(self)
        clone._read_only = {**self._read_only, namespace: because}
        clone._shared = True
        return clone

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if not self._shared:
            await self._http.aclose()

    # -- reads ------------------------------------------------------------------------------

    async def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        metadata_only: bool = False,
    ) -> Obj:
        path = resource_path(resource, namespace=namespace, name=name, subresource=subresource)
        return await self.request("GET", path, accept=METADATA_OBJECT if metadata_only else JSON)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        metadata_only: bool = False,
        keep: Callable[[Obj], Obj] | None = None,
    ) -> Obj:
        """Every matching object, read in pages of ``limit`` but returned as one list.

        All pages come from the snapshot of the first, so ``metadata.resourceVersion`` is the
        version to watch from. Items get ``apiVersion`` and ``kind`` (lists leave them out), so a
        listed object looks like a watched one. When a continue token expires mid-way the list
        starts over in one unpaged request. ``keep`` makes each item what the caller keeps of
        it as its page comes in: the decoded pages are then never held all at once.
        """
        path = resource_path(resource, namespace=namespace)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        accept = METADATA_LIST if metadata_only else JSON
        api_version, kind = (
            ("meta.k8s.io/v1", "PartialObjectMetadata")
            if metadata_only
            else (resource.api_version, resource.kind)
        )

        def typed(item: Obj) -> Obj:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            return keep(item) if keep is not None else item

        try:
            result = await self._list_pages(path, params, limit, accept, typed)
        except ApiError as exc:
            if exc.code != 410 or limit <= 0:
                raise
            log.info("list %s: continue token expired; listing again in one request", path)
            result = await self._list_pages(path, params, 0, accept, typed)
        return result

    async def pages(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        limit: int = 500,
        max_bytes: int | None = None,
    ) -> AsyncGenerator[Sequence[Obj], None]:
        """The objects of ``resource`` a page of ``limit`` at a time, for a caller that keeps what
        it needs of each page and drops the rest: every Secret of a namespace, kubeconfigs and
        all, is then never held at once. An expired continue token raises its ``ApiError`` (410)
        mid-way; :meth:`list` starts over instead, since it returns nothing before the end. A
        page over ``max_bytes`` raises :class:`TooLarge` (see :meth:`request`)."""
        path = resource_path(resource, namespace=namespace)
        # Closed with this one: a caller that stops early leaves no request half-read.
        async with contextlib.aclosing(self._pages(path, {}, limit, JSON, max_bytes)) as pages:
            async for page in pages:
                yield page.get("items") or []

    async def _pages(
        self,
        path: str,
        params: dict[str, str],
        limit: int,
        accept: str,
        max_bytes: int | None = None,
    ) -> AsyncGenerator[Obj, None]:
        token = ""
        while True:
            page_params = dict(params)
            if limit > 0:
                page_params["limit"] = str(limit)
            if token:
                page_params["continue"] = token
            page = await self.request(
                "GET", path, params=page_params, accept=accept, max_bytes=max_bytes
            )
            yield page
            token = metadata_of(page).get("continue") or ""
            if not token:
                return

    async def _list_pages(
        self,
        path: str,
        params: dict[str, str],
        limit: int,
        accept: str,
        typed: Callable[[Obj], Obj],
    ) -> Obj:
        first: Obj | None = None
        items: list[Obj] = []
        async for page in self._pages(path, params, limit, accept):
            items.extend(typed(item) for item in page.get("items") or [])
            if first is None:
                # Without its items: the page as decoded is not held while the next comes.
                first = {key: value for key, value in page.items() if key != "items"}
        assert first is not None  # _pages yields at least one page or raises
        metadata = dict(metadata_of(first))
        metadata.pop("continue", None)
        metadata.pop("remainingItemCount", None)
        return {**first, "metadata": metadata, "items": items}

    # -- writes -----------------------------------------------------------------------------

    async def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """POST a new object; with ``subresource`` (and the parent's ``name``), POST to it.

        ``subresource`` covers requests such as a TokenRequest (``serviceaccounts/NAME/token``).
        """
        namespace = _namespace_of(resource, body, namespace)
        path = resource_path(
            resource,
            namespace=namespace,
            name=name if subresource else None,
            subresource=subresource,
        )
        return await self.request("POST", path, json=body, params=self._manager_params())

    async def replace(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """PUT the whole object; its ``metadata.resourceVersion`` makes a stale write a Conflict."""
        namespace = _namespace_of(resource, body, namespace)
        path = resource_path(
            resource, namespace=namespace, name=_name_of(body), subresource=subresource
        )
        return await self.request("PUT", path, json=body, params=self._manager_params())

    async def patch_merge(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch (RFC 7386): maps merge, ``None`` deletes a key, lists are replaced."""
        path = resource_path(resource, namespace=namespace, name=name, subresource=subresource)
        return await self.request(
            "PATCH",
            path,
            json=patch,
            content_type="application/merge-patch+json",
            params=self._manager_params(),
        )

    async def patch_json(
        self,
        resource: Resource,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """JSON patch (RFC 6902); a ``test`` operation makes the patch conditional."""
        path = resource_path(resource, namespace=namespace, name=name, subresource=subresource)
        return await self.request(
            "PATCH",
            path,
            json=list(operations),
            content_type="application/json-patch+json",
            params=self._manager_params(),
        )

    async def apply(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = True,
    ) -> Obj:
        """Server-side apply: the server merges the fields this manager owns, creating if needed.

        ``force`` takes fields over from other managers, as a controller should for the fields
        it is responsible for. ``managedFields`` is dropped from the body (the server refuses it).
        """
        namespace = _namespace_of(resource, body, namespace)
        path = resource_path(
            resource, namespace=namespace, name=_name_of(body), subresource=subresource
        )
        metadata = metadata_of(body)
        if "managedFields" in metadata:
            body = {
                **body,
                "metadata": {k: v for k, v in metadata.items() if k != "managedFields"},
            }
        params = {"fieldManager": field_manager or self._field_manager}
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH",
            path,
            json=body,
            # JSON is YAML, so the apply content type takes a JSON body as it is.
            content_type="application/apply-patch+yaml",
            params=params,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """Delete one object; ``uid``/``resource_version`` make it conditional (else Conflict).

        Returns what the server returns: the object while finalizers hold it, else a Status.
        """
        path = resource_path(resource, namespace=namespace, name=name)
        return await self.request(
            "DELETE",
            path,
            json=_delete_options(propagation_policy, uid, resource_version, grace_period_seconds),
        )

    async def delete_collection(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        path = resource_path(resource, namespace=namespace)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        return await self.request(
            "DELETE",
            path,
            params=params,
            json=_delete_options(propagation_policy, None, None, None),
        )

    # -- raw --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        max_bytes: int | None = None,
    ) -> Obj:
        """Any request whose answer is a JSON object, e.g. ``request("GET", "/version")``.

        With ``max_bytes``, an answer whose body (decoded) grows past it is cut off as it
        arrives and raises :class:`TooLarge`: the caller never holds more than that.
        """
        body = None if json is None else _dumps(json)
        response = await self._send(
            method,
            path,
            params=params,
            content=body,
            content_type=content_type,
            accept=accept,
            stream=False,
            max_bytes=max_bytes,
        )
        try:
            data = _loads(response.content)
        except ValueError:
            raise TransportError(f"{method} {path}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise TransportError(f"{method} {path}: the answer is not a JSON object")
        return data

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        accept: str = JSON,
    ) -> AsyncIterator[httpx.Response]:
        """An open response whose body the caller reads as it arrives (watches, logs).

        Errors before the body (4xx/5xx) raise like :meth:`request`. No read timeout applies:
        the caller sets its own deadline.
        """
        response = await self._send(
            method,
            path,
            params=params,
            content=None,
            content_type=JSON,
            accept=accept,
            stream=True,
        )
        try:
            yield response
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {path}: {_describe(exc)}") from exc
        finally:
            await response.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        content: bytes | None,
        content_type: str,
        accept: str,
        stream: bool,
        max_bytes: int | None = None,
    ) -> httpx.Response:
        context = f"{method} {path}"
        if method not in _READS and self._read_only:
            refused = self._read_only.get(_namespace_in(path) or "")
            if refused is not None:
                raise WriteRefused(f"{context}: not sent: {refused}")
        retries = 0
        token_refreshed = False
        identity = self._identity
        # A user's own token replaces the connection's credentials; impersonation adds to them.
        provider = None if identity is not None and identity.token else self._config.token
        while True:
            headers = [("Accept", accept)]
            if content is not None:
                headers.append(("Content-Type", content_type))
            if provider is not None:
                headers.append(("Authorization", f"Bearer {await provider.token()}"))
            if identity is not None:
                headers.extend(identity.headers())
            request = self._http.build_request(
                method,
                path,
                params=params,
                content=content,
                headers=headers,
                extensions=dict(self._extensions),
                timeout=self._stream_timeout if stream else self._timeout,
            )
            verb = "WATCH" if stream and (params or {}).get("watch") == "true" else method
            try:
                if stream:
                    response = await self._http.send(request, stream=True)
                else:
                    async with self._requests:
                        if self._fence is not None and method not in _READS and not self._fence():
                            raise Fenced(f"{context}: not sent, this replica may not write now")
                        if max_bytes is None:
                            response = await self._http.send(request)
                        else:
                            response = await self._send_within(request, max_bytes, context)
            except httpx.HTTPError as exc:
                self.observer.request(verb, "error")
                raise TransportError(f"{context}: {_describe(exc)}") from exc
            self.observer.request(verb, str(response.status_code))
            if response.status_code < 400:
                return response
            try:
                raw = await response.aread()
            except httpx.HTTPError as exc:
                raise TransportError(f"{context}: {_describe(exc)}") from exc
            finally:
                await response.aclose()

            if response.status_code == 401 and provider is not None and not token_refreshed:
                token_refreshed = True
                if await provider.refresh() is not None:
                    continue
            error = error_from_status(
                response.status_code,
                _status_of(raw),
                context=context,
                retry_after=_retry_after(response.headers.get("Retry-After")),
            )
            if retries < self._max_retries and _retryable(error):
                retries += 1
                delay = min(error.retry_after or 1.0, self._max_retry_delay)
                log.info("%s; retrying in %.1f s", error, delay)
                await trio.sleep(delay)
                continue
            raise error from None

    async def _send_within(
        self, request: httpx.Request, max_bytes: int, context: str
    ) -> httpx.Response:
        """The answer to ``request``, read as it arrives up to ``max_bytes`` (an error's answer
        is left for the caller to read, as a streamed one is)."""
        response = await self._http.send(request, stream=True)
        if response.status_code >= 400:
            return response
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"{context}: the answer is over {max_bytes} bytes; not read")
                chunks.append(chunk)
        finally:
            await response.aclose()
        # The body is decoded already: its encoding and length headers describe another body.
        headers = [
            (key, value)
            for key, value in response.headers.multi_items()
            if key.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(
            response.status_code, headers=headers, content=b"".join(chunks), request=request
        )

    def _manager_params(self) -> dict[str, str]:
        return {"fieldManager": self._field_manager}


def _retryable(error: ApiError) -> bool:
    """429 was never executed; a server timeout or 5xx with Retry-After asks for a retry."""
    if isinstance(error, TooManyRequests | ServerTimeout):
        return True
    return isinstance(error, ServerError) and error.retry_after is not None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the API server never sends one
    return seconds if seconds >= 0 else None


def _status_of(raw: bytes) -> dict[str, Any] | None:
    try:
        data = _loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _delete_options(
    propagation_policy: str | None,
    uid: str | None,
    resource_version: str | None,
    grace_period_seconds: int | None,
) -> Obj:
    options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if propagation_policy:
        options["propagationPolicy"] = propagation_policy
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    preconditions = {}
    if uid:
        preconditions["uid"] = uid
    if resource_version:
        preconditions["resourceVersion"] = resource_version
    if preconditions:
        options["preconditions"] = preconditions
    return options


def _namespace_of(resource: Resource, body: Mapping[str, Any], namespace: str | None) -> str | None:
    if namespace or not resource.namespaced:
        return namespace
    return namespace_of(body) or None


def _name_of(body: Mapping[str, Any]) -> str:
    name = name_of(body)
    if not name:
        raise ValueError("the object has no metadata.name")
    return name


def _describe(exc: httpx.HTTPError) -> str:
    """The class and message of a transport failure; httpx never puts a body in them.

    httpx often wraps the real cause (a refused connection, a certificate that does not verify)
    in an exception with no text of its own: the cause's words are what an operator needs.
    """
    text = str(exc)
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while not text and cause is not None:
        text = str(cause)
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads(raw: bytes) -> Any:
    return json.loads(raw)
