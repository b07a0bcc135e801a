"""Follow a resource without ever losing a change: list, watch, and relist when history is gone.

The watcher is a task feeding a Trio memory channel, not an async generator: a generator cannot
own the nursery and cancel scopes a watch needs (PEP 789), and a channel gives the consumer
backpressure for free.

The consumer's contract:

- ``Resync(objects)`` comes after every list, the first one included. It is the complete truth at
  that moment: whatever the consumer knew that is absent was deleted meanwhile. After the first
  list this only happens when the server no longer has the history to resume from (410), so a
  deletion missed while disconnected is still noticed.
- ``WatchEvent(type, object)`` follows for each change, in the server's order.

The version to resume from is taken from every event, bookmarks included, and is only ever
dropped by a 410 followed by a relist, never silently. A stream that says nothing for
``inactivity_timeout`` seconds may be dead (a half-open TCP connection never says so): it is
dropped and the watch resumed from the same version. Bookmarks keep a busy stream talking, but a
quiet resource may get none for minutes, so the expiry is routine, not an error: it costs one
request on an idle watch. Transport failures and 5xx answers are retried with jittered exponential
backoff, forever. Objects come without ``metadata.managedFields`` unless asked for.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import attrs
import trio

from kokumi.objects import Resource, kept_form, name_of, namespace_of, resource_version

from .backoff import Backoff, FailureLog
from .client import Client
from .errors import BadRequest, Gone, Invalid, KubeError, TransportError, error_from_status
from .paths import resource_path
from .wire import METADATA_OBJECT

__all__ = ["Resync", "Store", "WatchEvent", "start_watch", "watch"]

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
_CHANGES: frozenset[str] = frozenset(("ADDED", "MODIFIED", "DELETED"))


@attrs.frozen
class WatchEvent:
    """One change, as the server reported it (``object`` is the new state, or the last one)."""

    type: EventType
    object: dict[str, Any]


@attrs.frozen
class Resync:
    """Everything that exists right now; anything the consumer knows beyond this is gone."""

    objects: tuple[dict[str, Any], ...]


Key = tuple[str | None, str]


class Store:
    """The latest state of every watched object, keyed by (namespace, name).

    The watcher updates it before it sends the matching event, so a reader never sees a state
    older than the events it has received. Cluster-scoped objects have the namespace ``None``.
    """

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        # The same objects by namespace, so that a consumer that works one namespace at a time
        # never walks the whole fleet for it.
        self._by_namespace: dict[str | None, dict[str, dict[str, Any]]] = {}
        self._synced = trio.Event()

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._objects.get((namespace or None, name))

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._objects))

    def values(self) -> list[dict[str, Any]]:
        return list(self._objects.values())

    def in_namespace(self, namespace: str | None) -> list[dict[str, Any]]:
        """The objects of one namespace (``None``: the cluster-scoped ones)."""
        return list(self._by_namespace.get(namespace or None, {}).values())

    def named_in_namespace(self, namespace: str | None) -> dict[str, dict[str, Any]]:
        """The objects of one namespace by name, as a copy taken now."""
        return dict(self._by_namespace.get(namespace or None, {}))

    @property
    def synced(self) -> bool:
        """True once the first list is in."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def _replace(self, objects: tuple[dict[str, Any], ...]) -> None:
        self._objects = {_key(o): o for o in objects}
        self._by_namespace = {}
        for (namespace, name), obj in self._objects.items():
            self._by_namespace.setdefault(namespace, {})[name] = obj
        self._synced.set()

    def _apply(self, event: WatchEvent) -> None:
        key = _key(event.object)
        namespace, name = key
        if event.type == "DELETED":
            self._objects.pop(key, None)
            same = self._by_namespace.get(namespace)
            if same is not None:
                same.pop(name, None)
                if not same:
                    del self._by_namespace[namespace]
        else:
            self._objects[key] = event.object
            self._by_namespace.setdefault(namespace, {})[name] = event.object


def _key(obj: Mapping[str, Any]) -> Key:
    return (namespace_of(obj) or None, name_of(obj))


async def start_watch(
    nursery: trio.Nursery,
    client: Client,
    resource: Resource,
    *,
    buffer: int = 64,
    **options: Any,
) -> trio.MemoryReceiveChannel[WatchEvent | Resync]:
    """Start :func:`watch` in ``nursery`` and return the channel it feeds, once its first list is
    in: the one way the actors open a watch, so that each says only what it watches and how.

    ``options`` are :func:`watch`'s own (``namespace``, ``label_selector``, ``metadata_only``,
    ``store``, ``backoff_max``, ...). The channel holds ``buffer`` events; the caller owns it.
    """
    send, receive = trio.open_memory_channel[WatchEvent | Resync](buffer)
    await nursery.start(functools.partial(watch, client, resource, send, **options))
    return receive


async def watch(
    client: Client,
    resource: Resource,
    send: trio.MemorySendChannel[WatchEvent | Resync],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    metadata_only: bool = False,
    store: Store | None = None,
    managed_fields: bool = False,
    form: Callable[[Mapping[str, Any]], dict[str, Any]] = kept_form,
    inactivity_timeout: float = 70.0,
    timeout_seconds: int | None = None,
    backoff_initial: float = 0.5,
    backoff_max: float = 30.0,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Feed ``send`` with the state of ``resource`` and its changes until cancelled.

    Use with ``await nursery.start(watch, ...)``: it returns once the first list is in ``store``,
    just before that list's ``Resync`` is sent (so an unbuffered channel cannot deadlock the
    caller). The channel belongs to the caller and is not closed here. The task returns early
    only when the receiving end is closed; a selector the server refuses (400/422) raises.
    Everything else (the server down, a resource type not served yet, RBAC not granted yet) is
    logged and retried, since a controller has nothing better to do than wait for it.

    ``metadata_only`` asks for ``PartialObjectMetadata``: the objects carry metadata alone, so
    following Secrets never holds their data. Objects come in their
    :func:`~kokumi.objects.kept_form` (no ``metadata.managedFields``, which no consumer of the
    manager's reads; keys and repeated values shared: a store holds them for as long as they
    live); ``managed_fields`` passes them on as decoded, for a test that tells writers apart by
    their field managers. ``form`` is what is kept of each object instead (a caller that knows
    what it reads keeps less: see ``kokumi.core.limits.kept``), applied as each list page and
    event comes in, so an object is held as decoded only until then. ``timeout_seconds`` is the
    server-side lifetime of
    one watch request (default: 5 to 10 minutes, jittered so that many watchers do not reconnect
    together).
    """
    watcher = _Watcher(
        client=client,
        resource=resource,
        send=send,
        namespace=namespace,
        label_selector=label_selector,
        field_selector=field_selector,
        metadata_only=metadata_only,
        store=store,
        managed_fields=managed_fields,
        form=form,
        inactivity_timeout=inactivity_timeout,
        timeout_seconds=timeout_seconds,
        backoff=Backoff(backoff_initial, backoff_max),
    )
    try:
        await watcher.run(task_status)
    except trio.BrokenResourceError:
        log.debug("watch %s: the consumer went away", watcher.path)


@attrs.define
class _Watcher:
    client: Client
    resource: Resource
    send: trio.MemorySendChannel[WatchEvent | Resync]
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    metadata_only: bool
    store: Store | None
    managed_fields: bool
    form: Callable[[Mapping[str, Any]], dict[str, Any]]
    inactivity_timeout: float
    timeout_seconds: int | None
    backoff: Backoff
    resource_version: str | None = None
    failures: FailureLog = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.failures = FailureLog(log, f"watch {self.path}")

    @property
    def path(self) -> str:
        return resource_path(self.resource, namespace=self.namespace)

    async def run(self, task_status: trio.TaskStatus[None]) -> None:
        started = False
        while True:
            try:
                if self.resource_version is None:
                    objects = await self._list()
                    if self.store is not None:
                        self.store._replace(objects)
                    if not started:
                        task_status.started()
                        started = True
                    await self.send.send(Resync(objects))
                healthy = await self._follow()
            except Gone as exc:
                # The history we would resume from is gone: only a fresh list can tell what was
                # deleted meanwhile, and the Resync hands that to the consumer.
                log.info("watch %s: %s; listing again", self.path, exc)
                self.client.observer.watch_restarted(self.resource.plural, "gone")
                if self.resource_version is None:  # the list itself failed so: do not spin
                    await trio.sleep(self.backoff.next())
                self.resource_version = None
                continue
            except (BadRequest, Invalid):
                raise
            except KubeError as exc:
                # Logged once per change of error, not per attempt: a hub down for an hour
                # costs a line, not a thousand.
                delay = self.backoff.next()
                self.failures.failed(exc, retry_in=delay)
                self.client.observer.watch_restarted(self.resource.plural, "error")
                await trio.sleep(delay)
                continue
            if healthy:
                self.backoff.reset()
                self.failures.recovered()
            else:
                await trio.sleep(self.backoff.next())

    async def _list(self) -> tuple[dict[str, Any], ...]:
        result = await self.client.list(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            metadata_only=self.metadata_only,
            keep=None if self.managed_fields else self.form,
        )
        version = resource_version(result)
        if not version:
            raise TransportError(f"list {self.path}: the list has no resourceVersion")
        self.resource_version = version
        self.backoff.reset()
        return tuple(result["items"])

    async def _follow(self) -> bool:
        """One watch request, from the current version until it ends; True if it was useful.

        Raises ``Gone`` when the version is too old, ``TransportError`` when the stream dies.
        Silence past the inactivity deadline ends the request quietly: resuming at once is right
        for an idle stream and for a dead one alike.
        """
        assert self.resource_version is not None
        params = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(
                self.timeout_seconds
                if self.timeout_seconds is not None
                else random.randint(300, 600)  # noqa: S311  (spread reconnects, not a secret)
            ),
        }
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        accept = METADATA_OBJECT if self.metadata_only else "application/json"
        received = 0
        opened = trio.current_time()
        with trio.CancelScope() as deadline:
            deadline.deadline = trio.current_time() + self.inactivity_timeout
            async with self.client.stream("GET", self.path, params=params, accept=accept) as resp:
                pending = b""
                async for chunk in resp.aiter_bytes():
                    deadline.deadline = trio.current_time() + self.inactivity_timeout
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if not line.strip():
                            continue
                        received += 1
                        event = self._parse(line)
                        if event is None:
                            continue
                        # Time spent waiting for a slow consumer is not silence of the server.
                        deadline.deadline = math.inf
                        await self.send.send(event)
                        deadline.deadline = trio.current_time() + self.inactivity_timeout
        if deadline.cancelled_caught:
            log.debug(
                "watch %s: nothing received for %g s; resuming from %s",
                self.path,
                self.inactivity_timeout,
                self.resource_version,
            )
            return True
        # A stream the server ends at once, having said nothing, must not become a busy loop.
        return received > 0 or trio.current_time() - opened >= 1.0

    def _parse(self, line: bytes) -> WatchEvent | None:
        """Track the version of one event line; the change to forward, if it is one."""
        try:
            raw = json.loads(line)
            kind = raw["type"]
            obj = raw["object"]
        except (ValueError, KeyError, TypeError):
            raise TransportError(f"watch {self.path}: an event is not valid JSON") from None
        if not isinstance(obj, dict):
            raise TransportError(f"watch {self.path}: an event carries no object")
        if kind == "ERROR":
            code = obj.get("code")
            error = error_from_status(
                code if isinstance(code, int) else 500, obj, context=f"watch {self.path}"
            )
            raise error
        version = resource_version(obj)
        if version:
            self.resource_version = version
        if kind not in _CHANGES:
            return None  # BOOKMARK, or a type this client does not know: only the version counts
        event = WatchEvent(kind, obj if self.managed_fields else self.form(obj))
        if self.store is not None:
            self.store._apply(event)
        return event
