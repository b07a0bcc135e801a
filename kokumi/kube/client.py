"""Plain-dict CRUD over one ``httpx.AsyncClient``: the verbs a controller needs, nothing more.

Objects stay dicts (the JSON the server sent): the layers above decide which fields they trust.
Failures are the typed errors of :mod:`kokumi.kube.errors`; a 401 re-reads a rotating token and
retries once, and a 429 or a server timeout is retried a bounded number of times after the delay
the server asked for.

The module is the class: the resources it is asked about are :mod:`.resources`, whom a request
acts for :mod:`.identity`, who counts its work :mod:`.observer`, and what its requests and
answers carry :mod:`.wire`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import trio

from kokumi.objects import Resource, metadata_of

from .config import Config
from .errors import (
    ApiError,
    ConfigError,
    Fenced,
    TooLarge,
    TransportError,
    WriteRefused,
    error_from_status,
)
from .identity import Identity
from .observer import Observer, Unobserved
from .paths import resource_path
from .transport import Transport
from .wire import (
    JSON,
    METADATA_LIST,
    METADATA_OBJECT,
    READS,
    Obj,
    delete_options,
    describe,
    dumps,
    loads,
    namespace_for,
    namespace_in,
    required_name,
    retry_after,
    retryable,
    status_of,
)

__all__ = ["Client"]


log = logging.getLogger(__name__)


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
        self.observer: Observer = Unobserved()
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

    def lane(self, max_requests: int) -> Client:
        """This connection with request slots of its own, for what must not queue behind the rest.

        A Lease's renewal has its renew deadline, seconds, to go out; onboarding thousands of
        Clusters keeps every shared slot taken for longer, and a Lease lost to that queue stops
        every actor of its shard. The lane's requests wait only for each other. Shares the pool
        and the observer; closing it closes nothing.
        """
        clone = copy.copy(self)
        clone._requests = trio.CapacityLimiter(max_requests)
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
        namespace = namespace_for(resource, body, namespace)
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
        namespace = namespace_for(resource, body, namespace)
        path = resource_path(
            resource, namespace=namespace, name=required_name(body), subresource=subresource
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
        namespace = namespace_for(resource, body, namespace)
        path = resource_path(
            resource, namespace=namespace, name=required_name(body), subresource=subresource
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
            json=delete_options(propagation_policy, uid, resource_version, grace_period_seconds),
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
            json=delete_options(propagation_policy, None, None, None),
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
        body = None if json is None else dumps(json)
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
            data = loads(response.content)
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
            raise TransportError(f"{method} {path}: {describe(exc)}") from exc
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
        if method not in READS and self._read_only:
            refused = self._read_only.get(namespace_in(path) or "")
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
                        if self._fence is not None and method not in READS and not self._fence():
                            raise Fenced(f"{context}: not sent, this replica may not write now")
                        if max_bytes is None:
                            response = await self._http.send(request)
                        else:
                            response = await self._send_within(request, max_bytes, context)
            except httpx.HTTPError as exc:
                self.observer.request(verb, "error")
                raise TransportError(f"{context}: {describe(exc)}") from exc
            self.observer.request(verb, str(response.status_code))
            if response.status_code < 400:
                return response
            try:
                raw = await response.aread()
            except httpx.HTTPError as exc:
                raise TransportError(f"{context}: {describe(exc)}") from exc
            finally:
                await response.aclose()

            if response.status_code == 401 and provider is not None and not token_refreshed:
                token_refreshed = True
                if await provider.refresh() is not None:
                    continue
            error = error_from_status(
                response.status_code,
                status_of(raw),
                context=context,
                retry_after=retry_after(response.headers.get("Retry-After")),
            )
            if retries < self._max_retries and retryable(error):
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
