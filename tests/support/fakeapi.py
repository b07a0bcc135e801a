"""An in-process Kubernetes API server that tests can break on command.

``FakeApi`` is an ``httpx.AsyncBaseTransport``: give it to ``kokumi.kube.Client(transport=...)``
and every request the client sends is answered here, in the caller's Trio task, with no socket.
It keeps what the real apiserver keeps and a controller relies on: one global integer
``resourceVersion``; uid, creationTimestamp and generation; AlreadyExists, stale-update and
precondition conflicts; the status subresource; finalizers and ``deletionTimestamp``; label and
field selectors; metadata-only answers; and watches with history, bookmarks and 410 once the
history is gone. ``tests/support/test_contract.py`` runs the same assertions against this fake and
against the real hub, so where they differ the fake is the one to fix.

Everything time-related uses Trio's clock (``trio.current_time``, ``trio.sleep``), so the fake
runs under ``trio.testing.MockClock``. The fault API (``fail``, ``reset``, ``delay``,
``drop_watches``, ``stall_watches``, ``expire_next_watches``, ``compact``, ``down``) is plain
synchronous calls that take effect on the next request, so a test step is deterministic.

Stored objects are never mutated: a write builds a new dict and replaces the old, so the watch
history and in-flight answers can share them without copying. Known simplifications, none of
which Kokumi relies on: no schema validation of custom resources, no admission or RBAC (faults
stand in for a 403), ``limit`` is ignored (one page, which the API allows), server-side apply is
a merge that never removes fields, ``propagationPolicy`` is ignored (no garbage collector), and
deleting a namespace removes its objects at once.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import random
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import attrs
import httpx
import trio

__all__ = ["CAPI_CLUSTERS", "DEFAULT_KINDS", "Call", "FakeApi", "Kind", "Rule", "Write"]

Obj = dict[str, Any]

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
GIT_VERSION = "v1.36.3"


@attrs.frozen
class Kind:
    """One resource type the fake serves; ``generation`` is set for custom resources only."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    generation: bool = False
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """How the apiserver names the type in messages: ``secrets``, ``clusters.delivery...``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _crd(plural: str, kind: str) -> Kind:
    return Kind(
        "delivery.kokumi.dev",
        "v1alpha1",
        plural,
        kind,
        status_subresource=True,
        generation=True,
        custom=True,
    )


DEFAULT_KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True),
    Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "events", "Event"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("coordination.k8s.io", "v1", "leases", "Lease"),
    _crd("clusters", "Cluster"),
    _crd("environments", "Environment"),
    _crd("clustersources", "ClusterSource"),
)

CAPI_CLUSTERS = Kind(
    "cluster.x-k8s.io", "v1beta1", "clusters", "Cluster", generation=True, custom=True
)
"""Cluster API's clusters, for a test that serves them beside Kokumi's (same plural)."""

_WRITE_VERBS = frozenset(("create", "update", "patch", "delete", "deletecollection"))
_META_LIST = "PartialObjectMetadataList"
_META = "PartialObjectMetadata"


@attrs.frozen
class Call:
    """One request as the fault rules see it."""

    method: str
    verb: str  # get list watch create update patch delete deletecollection, or "" (non-resource)
    path: str
    resource: str | None  # the plural, e.g. "secrets": a rule on "clusters" matches every group's
    namespace: str | None
    name: str | None
    subresource: str | None


@attrs.frozen
class Write:
    """One write request and the HTTP status it got (0: the connection failed)."""

    verb: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None
    code: int


@attrs.define
class Rule:
    """A fault: what it matches, how many more requests it hits (None: all), what it does."""

    match: Callable[[Call], bool]
    remaining: int | None
    status: int | None = None
    retry_after: int | None = None
    reset: str | None = None  # "before": never reached the server; "after": done, reply lost
    delay: float = 0.0
    hits: int = 0


class _Failure(Exception):
    def __init__(self, status: Obj, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status.get("message"))
        self.status = status
        self.headers = dict(headers or {})


def _status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


def _details(kind: Kind, name: str | None) -> Obj:
    details: Obj = {}
    if name is not None:
        details["name"] = name
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.plural
    return details


def _not_found(kind: Kind, name: str) -> _Failure:
    return _Failure(
        _status(404, "NotFound", f'{kind.group_resource} "{name}" not found', _details(kind, name))
    )


def _conflict(kind: Kind, name: str, why: str) -> _Failure:
    return _Failure(
        _status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {kind.group_resource} "{name}": {why}',
            _details(kind, name),
        )
    )


def _precondition(kind: Kind, name: str, what: str, given: str, actual: str, hint: str) -> _Failure:
    return _Failure(
        _status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {kind.kind} "{name}": the {what} in the'
            f" precondition ({given}) does not match the {what} in record ({actual})."
            f" The object might have been {hint}",
            _kind_details(kind, name),
        )
    )


_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _bad_request(message: str) -> _Failure:
    return _Failure(_status(400, "BadRequest", message))


def _kind_details(kind: Kind, name: str | None) -> Obj:
    """Details naming the Kind, as Invalid and precondition Conflicts do (others: the plural)."""
    details = _details(kind, name or None)
    details["kind"] = kind.kind
    return details


def _invalid(
    kind: Kind, name: str, field: str, message: str, reason: str = "FieldValueInvalid"
) -> _Failure:
    details = _kind_details(kind, name)
    details["causes"] = [{"reason": reason, "message": message, "field": field}]
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    return _Failure(
        _status(422, "Invalid", f'{qualified} "{name}" is invalid: {field}: {message}', details)
    )


_NO_RESOURCE = _status(404, "NotFound", "the server could not find the requested resource", {})


# --- JSON helpers ---------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _apply_merge(target: Any, patch: Any) -> Any:
    """Server-side apply, simplified: maps merge, lists and scalars replace, nothing is removed."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _copy(patch)
    result = dict(target)
    for key, value in patch.items():
        if value is not None:
            result[key] = _apply_merge(result.get(key), value)
    return result


class _PatchError(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise _PatchError(f"the path {'/' + '/'.join(parts)!r} does not exist")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _PatchError(f"index {last!r} is out of range")
    else:
        raise _PatchError("the parent of the path is not a container")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise _PatchError("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise _PatchError(f"the path {'/' + '/'.join(parts)!r} does not exist")


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of ``doc``; a failed ``test`` raises like any other failed operation."""
    if not isinstance(operations, list):
        raise _PatchError("a JSON patch is a list of operations")
    doc = _copy(doc)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise _PatchError("every operation needs an op and a path")
        name = op.get("op")
        parts = _pointer(op["path"])
        if name == "add":
            doc = _add(doc, parts, _copy(op.get("value")))
        elif name == "remove":
            _remove(doc, parts)
        elif name == "replace":
            _resolve(doc, parts)
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, _copy(op.get("value")))
        elif name in ("move", "copy"):
            source = _pointer(str(op.get("from", "")))
            value = _copy(_resolve(doc, source))
            if name == "move":
                _remove(doc, source)
            doc = _add(doc, parts, value)
        elif name == "test":
            if _resolve(doc, parts) != op.get("value"):
                raise _PatchError(f"testing value {op['path']} failed")
        else:
            raise _PatchError(f"unknown operation {name!r}")
    return doc


# --- selectors ------------------------------------------------------------------------------

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def _label_value_ok(value: str) -> bool:
    return value == "" or bool(_LABEL_NAME.match(value))


Requirement = tuple[str, str, tuple[str, ...]]  # key, operator, values


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


_SET_REQ = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
_CMP_REQ = re.compile(r"^([^=!<>\s]+)\s*(==|=|!=|<|>)\s*(.*)$")


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """The requirements of a label selector; ValueError names the one that does not parse."""
    requirements: list[Requirement] = []
    if not text.strip():
        return ()
    for raw in _split_top(text):
        part = raw.strip()
        values: tuple[str, ...]
        if not part:
            raise ValueError("found ',', expected: !, identifier, or 'end of string'")
        if part.startswith("!"):
            key, op, values = part[1:].strip(), "!", ()
        elif match := _SET_REQ.match(part):
            key, op = match.group(1), match.group(2)
            # "in ()" is "in ('')", as the real parser reads it.
            values = tuple(v.strip() for v in match.group(3).split(","))
        elif match := _CMP_REQ.match(part):
            key, op, values = match.group(1), match.group(2), (match.group(3).strip(),)
            if op == "==":
                op = "="
            if op in ("<", ">") and not re.fullmatch(r"-?\d+", values[0]):
                raise ValueError(f"for 'Gt', 'Lt' operators, the value must be an integer: {part}")
        elif re.fullmatch(r"\S+", part):
            key, op, values = part, "exists", ()
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
        if not _label_key_ok(key):
            raise ValueError(f"unable to parse requirement: invalid label key {key!r}")
        for value in values:
            if op not in ("<", ">") and not _label_value_ok(value):
                raise ValueError(f"unable to parse requirement: invalid label value {value!r}")
        requirements.append((key, op, values))
    return tuple(requirements)


def _labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op == "exists":
            ok = present
        elif op == "!":
            ok = not present
        elif op == "=":
            ok = present and value == values[0]
        elif op == "!=":
            ok = not present or value != values[0]
        elif op == "in":
            ok = present and value in values
        elif op == "notin":
            ok = not present or value not in values
        else:  # < and >: an integer label compared with the integer given
            try:
                number = int(value or "")
            except ValueError:
                ok = False
            else:
                ok = number < int(values[0]) if op == "<" else number > int(values[0])
        if not ok:
            return False
    return True


FieldRequirement = tuple[str, bool, str]  # field, equal?, value
_FIELDS = ("metadata.name", "metadata.namespace")


def parse_field_selector(text: str, kind: Kind) -> tuple[FieldRequirement, ...]:
    result: list[FieldRequirement] = []
    if not text.strip():
        return ()
    for raw in text.split(","):
        match = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", raw)
        if not match:
            raise ValueError(f"invalid selector: {raw!r}; can't understand {raw!r}")
        field, op, value = match.groups()
        known = _FIELDS + (("type",) if kind.plural == "secrets" else ())
        if field not in known:
            only = ", ".join(f'"{k}"' for k in known)
            raise ValueError(f'"{field}" is not a known field selector: only {only}')
        result.append((field, op != "!=", value))
    return tuple(result)


def _field_value(obj: Mapping[str, Any], field: str) -> str:
    if field == "type":
        return str(obj.get("type") or "")
    return str(obj["metadata"].get(field.split(".", 1)[1]) or "")


# --- watches --------------------------------------------------------------------------------


@attrs.frozen
class _Filter:
    """What one list or watch selects: a namespace (or all), labels and fields."""

    kind: Kind
    namespace: str | None
    labels: tuple[Requirement, ...]
    fields: tuple[FieldRequirement, ...]

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels and not _labels_match(self.labels, meta.get("labels") or {}):
            return False
        return all((_field_value(obj, f) == v) == eq for f, eq, v in self.fields)


@attrs.define(eq=False)
class _Watcher:
    filter: _Filter
    metadata_only: bool
    send: trio.MemorySendChannel[bytes]
    receive: trio.MemoryReceiveChannel[bytes]
    ended: trio.Event = attrs.Factory(trio.Event)
    stalled: bool = False
    broken: bool = False

    @property
    def kind(self) -> Kind:
        return self.filter.kind

    def matches(self, obj: Obj | None) -> bool:
        return self.filter.matches(obj)

    def line(self, kind: str, obj: Obj) -> bytes:
        shown = _metadata_only(obj) if self.metadata_only else obj
        return b'{"type":"' + kind.encode() + b'","object":' + _dumps(shown) + b"}\n"

    def translate(self, etype: str, obj: Obj, prev: Obj | None) -> bytes | None:
        """The event this watcher sees, as the watch cache filters it, or None."""
        now = self.matches(obj)
        if etype != "MODIFIED":
            return self.line(etype, obj) if now else None
        before = self.matches(prev)
        if now:
            return self.line("MODIFIED" if before else "ADDED", obj)
        if before and prev is not None:
            # Leaving the selection is a deletion for this watcher: the old state, new version.
            gone = dict(prev)
            gone["metadata"] = {
                **prev["metadata"],
                "resourceVersion": obj["metadata"]["resourceVersion"],
            }
            return self.line("DELETED", gone)
        return None


def _metadata_only(obj: Obj) -> Obj:
    return {"kind": _META, "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


class _WatchStream(httpx.AsyncByteStream):
    """The body of one watch response: event lines as they come, bookmarks, then the end.

    An iterator object, not an async generator: a generator must not yield inside a cancel
    scope, and one that the client stops reading is left for the garbage collector.
    """

    def __init__(self, api: FakeApi, watcher: _Watcher, deadline: float, bookmarks: bool) -> None:
        self._api = api
        self._watcher = watcher
        self._deadline = deadline
        self._bookmarks = bookmarks
        self._next_bookmark = math.inf
        self._closing = False
        self._started = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if not self._started:
            self._started = True
            self._schedule_bookmark()
        line = await self._next()
        if line is not None:
            return line
        self._api._watchers.pop(self._watcher, None)
        if self._watcher.broken:
            raise httpx.ReadError("connection reset by peer (the fake API server went down)")
        raise StopAsyncIteration

    async def _next(self) -> bytes | None:
        watcher = self._watcher
        if self._closing:
            return None
        while True:
            if watcher.stalled:
                await watcher.ended.wait()
                return None
            until = min(self._deadline, self._next_bookmark) if self._bookmarks else self._deadline
            with trio.move_on_at(until):
                try:
                    line = await watcher.receive.receive()
                except trio.EndOfChannel:
                    return None
                if watcher.stalled:
                    continue  # stalled while this event was on its way: it never arrives
                return line
            if trio.current_time() >= self._deadline:
                self._closing = True  # the server's timeout ends the stream
                return None
            self._schedule_bookmark()
            return self._api._bookmark_line(watcher)

    def _schedule_bookmark(self) -> None:
        """Bookmarks come every interval, and one 2 s before the timeout, as the cacher sends."""
        now = trio.current_time()
        when = min(now + self._api.bookmark_interval, self._deadline - 2)
        self._next_bookmark = when if when > now else math.inf

    async def aclose(self) -> None:
        self._api._watchers.pop(self._watcher, None)
        self._watcher.receive.close()


# --- the server -----------------------------------------------------------------------------


class FakeApi(httpx.AsyncBaseTransport):
    """An in-process API server; see the module docstring for what it keeps and what it skips.

    ``history`` bounds the watch events kept per resource type: a watch resuming from a version
    older than that gets 410 Expired, as from the real watch cache. ``user`` is who the
    SelfSubjectReview says is asking. ``seed`` makes uids and generated names reproducible.
    """

    def __init__(
        self,
        *,
        kinds: Iterable[Kind] = DEFAULT_KINDS,
        namespaces: Iterable[str] = ("default", "kube-system", "kube-public", "kube-node-lease"),
        history: int = 1000,
        bookmark_interval: float = 60.0,
        user: str = "kokumi-admin",
        groups: tuple[str, ...] = ("system:masters", "system:authenticated"),
        seed: int = 0,
    ) -> None:
        self.kinds = {(k.group, k.version, k.plural): k for k in kinds}
        # Stored by group and plural: Cluster API's clusters and Kokumi's share a plural.
        self._by_key = {k.group_resource: k for k in self.kinds.values()}
        self._objects: dict[str, dict[tuple[str | None, str], Obj]] = {
            k.group_resource: {} for k in self.kinds.values()
        }
        self._history: dict[str, deque[tuple[int, str, Obj, Obj | None]]] = {
            k.group_resource: deque() for k in self.kinds.values()
        }
        self._compacted: dict[str, int] = {k.group_resource: 0 for k in self.kinds.values()}
        self.history_size = history
        self.bookmark_interval = bookmark_interval
        self.user = user
        self.groups = groups
        self._random = random.Random(seed)
        self._rv = 1
        # Insertion-ordered, not a set: a set of objects iterates in the order of their ids
        # (memory addresses), and which stream is fed or ended first would then change from
        # one replay of a model test's example to the next.
        self._watchers: dict[_Watcher, None] = {}
        self._rules: list[Rule] = []
        self._expire_watches = 0
        self._down = False
        self.requests = 0
        self.writes: list[Write] = []
        self._created: str | None = None
        for name in namespaces:
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        # Like a freshly started watch cache: it holds nothing older than its first list.
        self.compact()

    # -- faults ---------------------------------------------------------------------------------

    def fail(
        self,
        status: int = 500,
        *,
        times: int | None = 1,
        retry_after: int | None = None,
        **match: Any,
    ) -> Rule:
        """Answer the next ``times`` matching requests (None: all) with ``status``, not done.

        ``match`` takes ``verb``, ``method``, ``resource``, ``namespace``, ``name``,
        ``subresource`` or ``when`` (a predicate on the ``Call``). A 429 carries Retry-After.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        return self._add(Rule(_matcher(**match), times, status=status, retry_after=retry_after))

    def reset(self, *, after: bool = False, times: int | None = 1, **match: Any) -> Rule:
        """Cut the connection of matching requests: before the server sees them (ConnectError),
        or with ``after`` once the request is done, so only the reply is lost (ReadError)."""
        return self._add(Rule(_matcher(**match), times, reset="after" if after else "before"))

    def delay(self, seconds: float, *, times: int | None = None, **match: Any) -> Rule:
        """Hold matching requests for ``seconds`` of Trio time before handling them."""
        return self._add(Rule(_matcher(**match), times, delay=seconds))

    def clear_faults(self) -> None:
        self._rules.clear()
        self._expire_watches = 0

    def _add(self, rule: Rule) -> Rule:
        self._rules.append(rule)
        return rule

    def drop_watches(self, resource: Any = None) -> int:
        """End open watch streams cleanly, as the server does at a timeout; how many."""
        return self._end_watches(resource, broken=False)

    def stall_watches(self, resource: Any = None) -> int:
        """Open watch streams go silent but stay open, like a half-dead TCP connection."""
        count = 0
        for watcher in list(self._watchers):
            if resource is None or watcher.kind.group_resource == self._key(resource):
                watcher.stalled = True
                count += 1
        return count

    def expire_next_watches(self, times: int = 1) -> None:
        """The next ``times`` watches that resume from a version get 410 Expired."""
        self._expire_watches += times

    def compact(self) -> None:
        """Forget all watch history: every resume from an older version gets 410."""
        for key, events in self._history.items():
            events.clear()
            self._compacted[key] = self._rv

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        """While down every request fails to connect; going down breaks open watch streams."""
        self._down = value
        if value:
            self._end_watches(None, broken=True)

    def restart(self) -> None:
        """A hub restart: open watches break and the new watch cache has no history."""
        self._end_watches(None, broken=True)
        self.compact()
        self._down = False

    def _end_watches(self, resource: Any, broken: bool) -> int:
        count = 0
        for watcher in list(self._watchers):
            if resource is None or watcher.kind.group_resource == self._key(resource):
                watcher.broken = broken
                watcher.send.close()
                watcher.ended.set()
                self._watchers.pop(watcher, None)
                count += 1
        return count

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    # -- what a test reads ----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def count(
        self,
        verb: str | None = None,
        resource: Any = None,
        name: str | None = None,
        *,
        namespace: str | None = None,
        ok: bool | None = True,
    ) -> int:
        """How many writes matched (``ok``: succeeded; False: failed; None: either)."""
        plural = _plural(resource) if resource is not None else None
        return sum(
            1
            for w in self.writes
            if (verb is None or w.verb == verb)
            and (plural is None or w.resource == plural)
            and (name is None or w.name == name)
            and (namespace is None or w.namespace == namespace)
            and (ok is None or (0 < w.code < 400) == ok)
        )

    def _key(self, resource: Any) -> str:
        """The stored type ``resource`` names: a resource object by its group and plural; a
        string by its plural (or ``plural.group``), which must then name one kind alone."""
        if isinstance(resource, str):
            found = {
                k.group_resource
                for k in self.kinds.values()
                if resource in (k.plural, k.group_resource)
            }
            if len(found) != 1:
                raise ValueError(f"{resource!r} names {len(found)} kinds here: {sorted(found)}")
            return found.pop()
        plural, group = getattr(resource, "plural", None), getattr(resource, "group", "")
        if not isinstance(plural, str) or not isinstance(group, str):
            raise TypeError(f"not a resource: {resource!r}")
        return f"{plural}.{group}" if group else plural

    def objects(self, resource: Any, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of one type, sorted as a list would be."""
        store = self._objects[self._key(resource)]
        return [
            _copy(obj)
            for key, obj in sorted(store.items(), key=_sort_key)
            if namespace is None or key[0] == namespace
        ]

    def object(self, resource: Any, name: str, namespace: str | None = None) -> Obj | None:
        obj = self._objects[self._key(resource)].get((namespace, name))
        return None if obj is None else _copy(obj)

    def put(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace an object directly (seeding a scenario), with events as usual.

        Unlike a request, this keeps the given status and needs no fault to be cleared first.
        """
        body = _drop_nulls(_copy(dict(obj)))
        api_version = str(body.get("apiVersion", "v1"))
        group = api_version.rpartition("/")[0]
        kind = next(
            (k for k in self.kinds.values() if k.group == group and k.kind == body.get("kind")),
            None,
        )
        if kind is None:
            raise ValueError(f"the fake serves no kind {body.get('kind')!r} in {api_version}")
        meta = body.setdefault("metadata", {})
        key = (meta.get("namespace") if kind.namespaced else None, meta["name"])
        old = self._objects[kind.group_resource].get(key)
        if old is None:
            return self._create_object(kind, key[0], body, keep_status=True)
        new = self._prepare_update(kind, old, body, None)
        if kind.status_subresource and "status" in body:
            new["status"] = body["status"]  # a seed sets the status too
        return self._commit_update(kind, old, new)

    def remove(self, resource: Any, name: str, namespace: str | None = None) -> bool:
        """Delete an object directly, as a user's DELETE would (finalizers hold it); whether it
        was there. Like :meth:`put`, it bypasses the faults: the test's own hand never fails."""
        kind = self._by_key[self._key(resource)]
        try:
            self._delete(kind, namespace if kind.namespaced else None, name, {})
        except _Failure:
            return False
        return True

    # -- the transport ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Clients come and go (a manager restart); the server outlives them."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self._down:
            raise httpx.ConnectError(
                "connection refused (the fake API server is down)", request=request
            )
        content = await request.aread()
        call, kind = self._parse(request)
        self._created = None
        failing: Rule | None = None
        delay = 0.0
        for rule in self._rules:
            if rule.remaining == 0 or not rule.match(call):
                continue
            if rule.delay:
                delay += rule.delay
            elif failing is None:
                failing = rule
            else:
                continue
            rule.hits += 1
            if rule.remaining is not None:
                rule.remaining -= 1
        if delay:
            await trio.sleep(delay)
            if self._down:
                raise httpx.ReadError(
                    "connection reset by peer (the fake API server went down)", request=request
                )
        if failing is not None and failing.reset == "before":
            self._log(call, 0, content)
            raise httpx.ConnectError("connection reset by peer (injected)", request=request)
        if failing is not None and failing.status is not None:
            status = _injected(call, kind, failing.status, self.user, failing.retry_after)
            headers = {}
            if failing.retry_after is not None:
                headers["Retry-After"] = str(failing.retry_after)
            self._log(call, failing.status, content)
            return _respond(request, failing.status, status, headers)
        try:
            response = self._dispatch(request, call, kind, content)
        except _Failure as failure:
            code = int(failure.status["code"])
            self._log(call, code, content)
            return _respond(request, code, failure.status, failure.headers)
        self._log(call, response.status_code, content)
        if failing is not None and failing.reset == "after":
            await response.aclose()
            raise httpx.ReadError(
                "connection reset by peer (injected, after the request was done)", request=request
            )
        return response

    def _log(self, call: Call, code: int, content: bytes) -> None:
        if call.verb not in _WRITE_VERBS or call.resource is None:
            return
        name = call.name
        if call.verb == "create":
            # A create names its object in the body; a generated name only the answer knows.
            if 0 < code < 400 and self._created is not None:
                name = self._created
            else:
                try:
                    meta = json.loads(content).get("metadata") or {}
                    name = meta.get("name") or meta.get("generateName")
                except (ValueError, AttributeError):
                    name = None
        self.writes.append(
            Write(call.verb, call.resource, call.namespace, name, call.subresource, code)
        )

    def _parse(self, request: httpx.Request) -> tuple[Call, Kind | None]:
        method = request.method
        path = request.url.path
        segments = [s for s in path.split("/") if s]
        kind: Kind | None = None
        namespace = name = subresource = None
        rest: list[str] = []
        if len(segments) >= 2 and segments[0] == "api":
            group, version, rest = "", segments[1], segments[2:]
        elif len(segments) >= 3 and segments[0] == "apis":
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            group = version = ""
        if (
            rest
            and rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if rest and len(rest) <= 3:
            kind = self.kinds.get((group, version, rest[0]))
            name = rest[1] if len(rest) > 1 else None
            subresource = rest[2] if len(rest) > 2 else None
        verb = ""
        if kind is not None:
            if method == "GET":
                watch = request.url.params.get("watch") in ("true", "1")
                verb = "get" if name else ("watch" if watch else "list")
            else:
                verb = {
                    "POST": "create",
                    "PUT": "update",
                    "PATCH": "patch",
                    "DELETE": "delete" if name else "deletecollection",
                }.get(method, "")
        call = Call(
            method,
            verb,
            path,
            kind.plural if kind else None,
            namespace,
            name,
            subresource,
        )
        return call, kind

    # -- dispatch ---------------------------------------------------------------------------------

    def _dispatch(
        self, request: httpx.Request, call: Call, kind: Kind | None, content: bytes
    ) -> httpx.Response:
        if kind is None:
            return self._non_resource(request, call, content)
        if kind.namespaced and call.name is not None and call.namespace is None:
            raise _Failure(_NO_RESOURCE)
        if not kind.namespaced and call.namespace is not None:
            raise _Failure(_NO_RESOURCE)
        if call.subresource is not None and not (
            call.subresource == "status" and kind.status_subresource
        ):
            raise _Failure(_NO_RESOURCE)
        params = request.url.params
        accept = request.headers.get("accept", "")
        metadata_only = f"as={_META}" in accept
        if call.verb == "get":
            assert call.name is not None
            obj = self._get(kind, call.namespace, call.name)
            return _respond(request, 200, _metadata_only(obj) if metadata_only else obj)
        if call.verb == "list":
            return _respond(request, 200, self._list(kind, call.namespace, params, metadata_only))
        if call.verb == "watch":
            return self._watch(request, kind, call.namespace, params, metadata_only)
        if call.verb == "create":
            if call.name is not None:
                raise _Failure(_NO_RESOURCE)
            body = _body(content)
            return _respond(request, 201, self._create(kind, call.namespace, body))
        if call.verb == "update":
            assert call.name is not None
            return _respond(
                request,
                200,
                self._update(kind, call.namespace, call.name, call.subresource, _body(content)),
            )
        if call.verb == "patch":
            assert call.name is not None
            ctype = request.headers.get("content-type", "").split(";")[0].strip()
            code, obj = self._patch(
                kind, call.namespace, call.name, call.subresource, ctype, content
            )
            return _respond(request, code, obj)
        if call.verb == "delete":
            assert call.name is not None
            options = _body(content) if content else {}
            return _respond(request, 200, self._delete(kind, call.namespace, call.name, options))
        if call.verb == "deletecollection":
            return _respond(request, 200, self._delete_collection(kind, call.namespace, params))
        raise _Failure(
            _status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        )

    def _non_resource(self, request: httpx.Request, call: Call, content: bytes) -> httpx.Response:
        if call.method == "GET" and call.path.rstrip("/") == "/version":
            major, minor = GIT_VERSION[1:].split(".")[:2]
            return _respond(
                request,
                200,
                {
                    "major": major,
                    "minor": minor,
                    "emulationMajor": major,
                    "emulationMinor": minor,
                    "minCompatibilityMajor": major,
                    "minCompatibilityMinor": str(int(minor) - 1),
                    "gitVersion": GIT_VERSION,
                    "gitCommit": "$Format:%H$",
                    "gitTreeState": "",
                    "buildDate": "1970-01-01T00:00:00Z",
                    "goVersion": "go1.26.8",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        if (
            call.method == "POST"
            and call.path == "/apis/authentication.k8s.io/v1/selfsubjectreviews"
        ):
            return _respond(
                request,
                201,
                {
                    "kind": "SelfSubjectReview",
                    "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"creationTimestamp": self._now()},
                    "status": {"userInfo": {"username": self.user, "groups": list(self.groups)}},
                },
            )
        raise _Failure(_NO_RESOURCE)

    # -- reads ------------------------------------------------------------------------------------

    def _get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        obj = self._objects[kind.group_resource].get((namespace, name))
        if obj is None:
            raise _not_found(kind, name)
        return obj

    def _select(self, kind: Kind, namespace: str | None, params: httpx.QueryParams) -> _Filter:
        try:
            labels = parse_label_selector(params.get("labelSelector", ""))
            fields = parse_field_selector(params.get("fieldSelector", ""), kind)
        except ValueError as exc:
            raise _bad_request(str(exc)) from None
        return _Filter(kind, namespace, labels, fields)

    def _matching(self, kind: Kind, namespace: str | None, params: httpx.QueryParams) -> list[Obj]:
        probe = self._select(kind, namespace, params)
        return [
            obj
            for key, obj in sorted(self._objects[kind.group_resource].items(), key=_sort_key)
            if probe.matches(obj)
        ]

    def _list(
        self, kind: Kind, namespace: str | None, params: httpx.QueryParams, metadata_only: bool
    ) -> Obj:
        items = self._matching(kind, namespace, params)
        if metadata_only:
            return {
                "kind": _META_LIST,
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": [_metadata_only(o) for o in items],
            }
        if not kind.custom:  # typed lists leave kind and apiVersion out of their items
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        metadata: Obj = {"resourceVersion": str(self._rv)}
        if kind.custom:
            metadata["continue"] = ""
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": metadata,
            "items": items,
        }

    def _watch(
        self,
        request: httpx.Request,
        kind: Kind,
        namespace: str | None,
        params: httpx.QueryParams,
        metadata_only: bool,
    ) -> httpx.Response:
        selection = self._select(kind, namespace, params)
        send, receive = trio.open_memory_channel[bytes](math.inf)
        watcher = _Watcher(selection, metadata_only, send, receive)
        raw_version = params.get("resourceVersion", "")
        try:
            since = int(raw_version) if raw_version else 0
        except ValueError:
            raise _bad_request(f"invalid resource version: {raw_version!r}") from None
        timeout = params.get("timeoutSeconds")
        deadline = trio.current_time() + (float(timeout) if timeout else 1800.0)
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        stream = _WatchStream(self, watcher, deadline, bookmarks)
        headers = {"content-type": "application/json", "transfer-encoding": "chunked"}
        if since == 0:
            # No version: the current state as synthetic ADDED events, then the changes.
            for _, obj in sorted(self._objects[kind.group_resource].items(), key=_sort_key):
                if watcher.matches(obj):
                    send.send_nowait(watcher.line("ADDED", obj))
        else:
            oldest = self._compacted[kind.group_resource]
            if self._expire_watches > 0 or since < oldest:
                if self._expire_watches > 0:
                    self._expire_watches -= 1
                    oldest = max(oldest, self._rv)
                expired = _status(410, "Expired", f"too old resource version: {since} ({oldest})")
                send.send_nowait(b'{"type":"ERROR","object":' + _dumps(expired) + b"}\n")
                send.close()
                return httpx.Response(200, headers=headers, stream=stream, request=request)
            for rv, etype, obj, prev in self._history[kind.group_resource]:
                if rv > since:
                    line = watcher.translate(etype, obj, prev)
                    if line is not None:
                        send.send_nowait(line)
        self._watchers[watcher] = None
        return httpx.Response(200, headers=headers, stream=stream, request=request)

    def _bookmark_line(self, watcher: _Watcher) -> bytes:
        kind = watcher.kind
        obj = {
            "kind": _META if watcher.metadata_only else kind.kind,
            "apiVersion": "meta.k8s.io/v1" if watcher.metadata_only else kind.api_version,
            "metadata": {
                "resourceVersion": str(self._rv),
                "creationTimestamp": None,
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }
        return b'{"type":"BOOKMARK","object":' + _dumps(obj) + b"}\n"

    # -- writes -----------------------------------------------------------------------------------

    def _now(self) -> str:
        try:
            seconds = trio.current_time()
        except RuntimeError:
            seconds = 0.0
        moment = EPOCH + datetime.timedelta(seconds=math.floor(seconds))
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def _commit(self, kind: Kind, etype: str, obj: Obj, prev: Obj | None) -> Obj:
        self._rv += 1
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self._rv)}
        key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if etype == "DELETED":
            self._objects[kind.group_resource].pop(key, None)
        else:
            self._objects[kind.group_resource][key] = obj
        history = self._history[kind.group_resource]
        history.append((self._rv, etype, obj, prev))
        while len(history) > self.history_size:
            dropped = history.popleft()
            self._compacted[kind.group_resource] = dropped[0]
        for watcher in list(self._watchers):
            if watcher.kind is kind:
                line = watcher.translate(etype, obj, prev)
                if line is not None:
                    try:
                        watcher.send.send_nowait(line)
                    except (trio.ClosedResourceError, trio.BrokenResourceError):
                        self._watchers.pop(watcher, None)
        return obj

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if kind.namespaced and ("", namespace) not in self._ns_keys():
            ns_kind = self._by_key["namespaces"]
            raise _not_found(ns_kind, namespace or "")

    def _ns_keys(self) -> set[tuple[str, str]]:
        return {("", name) for _, name in self._objects["namespaces"]}

    def _validate(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        pattern = _DNS_LABEL if kind.plural == "namespaces" else _DNS_SUBDOMAIN
        if not pattern.match(name) or len(name) > 253:
            raise _invalid(
                kind,
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 '
                + ("label" if kind.plural == "namespaces" else "subdomain")
                + " must consist of lower case alphanumeric characters, '-' or '.', and must"
                " start and end with an alphanumeric character",
            )
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            raise _bad_request("metadata.labels must be a map of strings")
        for key, value in labels.items():
            if not isinstance(value, str):
                raise _bad_request("metadata.labels must be a map of strings")
            if not _label_key_ok(key):
                raise _invalid(
                    kind,
                    name,
                    "metadata.labels",
                    f'Invalid value: "{key}": name part must consist of alphanumeric characters',
                )
            if not _label_value_ok(value):
                raise _invalid(
                    kind,
                    name,
                    "metadata.labels",
                    f'Invalid value: "{value}": a valid label must be an empty string or consist'
                    " of alphanumeric characters, '-', '_' or '.'",
                )

    def _normalize(self, kind: Kind, body: Obj) -> Obj:
        body["apiVersion"] = kind.api_version
        body["kind"] = kind.kind
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        for field in ("managedFields", "selfLink"):
            meta.pop(field, None)
        if kind.plural == "secrets":
            string_data = body.pop("stringData", None) or {}
            if string_data:
                data = dict(body.get("data") or {})
                for key, value in string_data.items():
                    data[key] = base64.b64encode(str(value).encode()).decode()
                body["data"] = data
            body.setdefault("type", "Opaque")
        return body

    def _check_kind(self, kind: Kind, body: Obj) -> None:
        if not isinstance(body, dict):
            raise _bad_request("the body is not a JSON object")
        if kind.custom and not body.get("kind"):
            raise _bad_request(
                f"the object provided is unrecognized (must be of type {kind.kind}):"
                " Object 'Kind' is missing in the request body"
            )
        api_version = body.get("apiVersion")
        if api_version and api_version != kind.api_version:
            raise _bad_request(
                f"the API version in the data ({api_version}) does not match the expected API"
                f" version ({kind.api_version})"
            )
        if body.get("kind") and body["kind"] != kind.kind:
            raise _bad_request(
                f"the kind in the data ({body['kind']}) does not match the expected kind"
                f" ({kind.kind})"
            )

    def _create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        self._check_kind(kind, body)
        meta = body.get("metadata") or {}
        if meta.get("resourceVersion"):
            raise _Failure(
                _status(500, "", "resourceVersion should not be set on objects to be created")
            )
        if kind.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent on"
                    " the request"
                )
        return self._create_object(kind, namespace, body, keep_status=False)

    def _create_object(
        self, kind: Kind, namespace: str | None, body: Obj, keep_status: bool
    ) -> Obj:
        obj = self._normalize(kind, _drop_nulls(body))
        meta = obj["metadata"]
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise _invalid(
                    kind,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                    reason="FieldValueRequired",
                )
            alphabet = "bcdfghjklmnpqrstvwxz2456789"
            meta["name"] = prefix + "".join(self._random.choice(alphabet) for _ in range(5))
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace")
            self._check_namespace(kind, meta["namespace"])
        else:
            meta.pop("namespace", None)
        self._validate(kind, obj)
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta["uid"] = self._uid()
        meta["creationTimestamp"] = self._now()
        if kind.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if kind.plural == "namespaces":
            meta["labels"] = {
                **(meta.get("labels") or {}),
                "kubernetes.io/metadata.name": meta["name"],
            }
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif kind.status_subresource and not keep_status:
            obj.pop("status", None)
        key = (meta.get("namespace"), meta["name"])
        if key in self._objects[kind.group_resource]:
            raise _Failure(
                _status(
                    409,
                    "AlreadyExists",
                    f'{kind.group_resource} "{meta["name"]}" already exists',
                    _details(kind, meta["name"]),
                )
            )
        self._created = meta["name"]
        return self._commit(kind, "ADDED", obj, None)

    def _prepare_update(self, kind: Kind, old: Obj, body: Obj, subresource: str | None) -> Obj:
        """The object an update of ``old`` to ``body`` stores, as the resource's strategy says."""
        if subresource == "status":
            new = dict(old)
            if "status" in body and body["status"] is not None:
                new["status"] = _drop_nulls(_copy(body["status"]))
            else:
                new.pop("status", None)
            return new
        new = self._normalize(kind, _drop_nulls(body))
        meta = new["metadata"]
        old_meta = old["metadata"]
        for field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("generateName", None) if "generateName" not in old_meta else None
        if kind.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        self._validate(kind, new)
        if old_meta.get("deletionTimestamp"):
            added = [
                f
                for f in meta.get("finalizers") or []
                if f not in (old_meta.get("finalizers") or [])
            ]
            if added:
                raise _invalid(
                    kind,
                    meta["name"],
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted,"
                    f" found new finalizers []string{{{', '.join(json.dumps(f) for f in added)}}}",
                    reason="FieldValueForbidden",
                )
        if kind.generation and _spec(new, kind) != _spec(old, kind):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        return new

    def _commit_update(self, kind: Kind, old: Obj, new: Obj) -> Obj:
        new_meta = {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}
        old_meta = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
        if new_meta == old_meta and {k: v for k, v in new.items() if k != "metadata"} == {
            k: v for k, v in old.items() if k != "metadata"
        }:
            return old  # nothing changed: no new version, no event
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            # The last finalizer went: the object is deleted as it was last stored (what the
            # DELETED event shows); the answer is the update as it would have been, with the
            # version it was made on.
            self._commit(kind, "DELETED", dict(old), old)
            version = old["metadata"]["resourceVersion"]
            new["metadata"] = {**new["metadata"], "resourceVersion": version}
            return new
        return self._commit(kind, "MODIFIED", new, old)

    def _update(
        self, kind: Kind, namespace: str | None, name: str, subresource: str | None, body: Obj
    ) -> Obj:
        self._check_kind(kind, body)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise _bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL"
                f" ({name})"
            )
        if kind.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request(
                "the namespace of the provided object does not match the namespace sent on the"
                " request"
            )
        old = self._get(kind, namespace, name)
        version = meta.get("resourceVersion")
        if version and version != old["metadata"]["resourceVersion"]:
            raise _conflict(kind, name, _MODIFIED)
        if not version:
            _require_version(kind, name)
        return self._commit_update(kind, old, self._prepare_update(kind, old, body, subresource))

    def _patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        subresource: str | None,
        content_type: str,
        content: bytes,
    ) -> tuple[int, Obj]:
        patch = _body(content, any_json=True)
        old = self._objects[kind.group_resource].get((namespace, name))
        if content_type == "application/apply-patch+yaml":
            if not isinstance(patch, dict):
                raise _bad_request("an apply patch is one object")
            self._check_kind(kind, patch)
            if not patch.get("kind") or not patch.get("apiVersion"):
                raise _bad_request("apiVersion and kind must be set in an apply patch")
            if old is None:
                if subresource is not None:
                    raise _not_found(kind, name)
                body = _copy(patch)
                body.setdefault("metadata", {})["name"] = name
                return 201, self._create_object(kind, namespace, body, keep_status=False)
            patched = _apply_merge(old, patch)
        elif old is None:
            raise _not_found(kind, name)
        elif content_type == "application/merge-patch+json":
            if not isinstance(patch, dict):
                raise _bad_request("a merge patch for an object must be a JSON object")
            patched = merge_patch(old, patch)
        elif content_type == "application/json-patch+json":
            try:
                patched = json_patch(old, patch)
            except _PatchError:
                # The real server says no more than this, whichever operation failed.
                raise _Failure(
                    _status(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                    )
                ) from None
        else:
            raise _Failure(
                _status(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types"
                    " include: application/json-patch+json, application/merge-patch+json,"
                    " application/apply-patch+yaml",
                )
            )
        if not isinstance(patched, dict):
            raise _bad_request("the patched object is not an object")
        meta = patched.get("metadata")
        if not isinstance(meta, dict):
            raise _bad_request("the patched object has no metadata")
        version = meta.get("resourceVersion")
        if version and version != old["metadata"]["resourceVersion"]:
            raise _conflict(kind, name, _MODIFIED)
        if not version:  # the patch removed it
            _require_version(kind, name)
        if subresource is None and meta.get("uid") and meta["uid"] != old["metadata"].get("uid"):
            # The uid cannot change; the status subresource keeps the object's own metadata, so
            # there a uid in the patch is no precondition at all (a JSON patch's test is).
            raise _invalid(
                kind, name, "metadata.uid", f'Invalid value: "{meta["uid"]}": field is immutable'
            )
        return 200, self._commit_update(
            kind, old, self._prepare_update(kind, old, patched, subresource)
        )

    def _delete(self, kind: Kind, namespace: str | None, name: str, options: Obj) -> Obj:
        old = self._get(kind, namespace, name)
        meta = old["metadata"]
        preconditions = options.get("preconditions") or {}
        uid = preconditions.get("uid")
        if uid and uid != meta.get("uid"):
            raise _precondition(
                kind, name, "UID", uid, meta.get("uid", ""), "deleted and then recreated"
            )
        version = preconditions.get("resourceVersion")
        if version and version != meta.get("resourceVersion"):
            raise _precondition(
                kind, name, "ResourceVersion", version, meta["resourceVersion"], "modified"
            )
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old
            new = dict(old)
            new_meta = {**meta, "deletionTimestamp": self._now(), "deletionGracePeriodSeconds": 0}
            if kind.generation:
                new_meta["generation"] = int(meta.get("generation") or 0) + 1
            new["metadata"] = new_meta
            return self._commit(kind, "MODIFIED", new, old)
        if kind.plural == "namespaces":
            for other in self.kinds.values():
                if other.namespaced:
                    for key, obj in sorted(
                        self._objects[other.group_resource].items(), key=_sort_key
                    ):
                        if key[0] == name:
                            self._commit(other, "DELETED", dict(obj), obj)
        gone = self._commit(kind, "DELETED", dict(old), old)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {**_details(kind, name), "uid": gone["metadata"].get("uid")},
        }

    def _delete_collection(
        self, kind: Kind, namespace: str | None, params: httpx.QueryParams
    ) -> Obj:
        items = []
        for obj in self._matching(kind, namespace, params):
            meta = obj["metadata"]
            result = self._delete(kind, meta.get("namespace"), meta["name"], {})
            items.append(result if result.get("kind") != "Status" else obj)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }


# --- small helpers --------------------------------------------------------------------------


def _require_version(kind: Kind, name: str) -> None:
    """Custom resources refuse unconditional updates; built-in types here all allow them."""
    if kind.custom:
        details = _details(kind, name)
        details["causes"] = [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0: must be specified for an update",
                "field": "metadata.resourceVersion",
            }
        ]
        raise _Failure(
            _status(
                422,
                "Invalid",
                f'{kind.group_resource} "{name}" is invalid: metadata.resourceVersion: Invalid'
                " value: 0: must be specified for an update",
                details,
            )
        )


def _spec(obj: Obj, kind: Kind) -> Obj:
    skip = ("metadata", "status") if kind.status_subresource else ("metadata",)
    return {k: v for k, v in obj.items() if k not in skip}


def _sort_key(item: tuple[tuple[str | None, str], Obj]) -> tuple[str, str]:
    (namespace, name), _ = item
    return (namespace or "", name)


def _plural(resource: Any) -> str:
    if isinstance(resource, str):
        return resource
    plural = getattr(resource, "plural", None)
    if not isinstance(plural, str):
        raise TypeError(f"not a resource: {resource!r}")
    return plural


def _matcher(
    *,
    verb: str | Iterable[str] | None = None,
    method: str | None = None,
    resource: Any = None,
    namespace: str | None = None,
    name: str | None = None,
    subresource: Any = ...,
    when: Callable[[Call], bool] | None = None,
) -> Callable[[Call], bool]:
    verbs = {verb} if isinstance(verb, str) else (set(verb) if verb is not None else None)
    plural = _plural(resource) if resource is not None else None

    def match(call: Call) -> bool:
        return (
            (verbs is None or call.verb in verbs)
            and (method is None or call.method == method)
            and (plural is None or call.resource == plural)
            and (namespace is None or call.namespace == namespace)
            and (name is None or call.name == name)
            and (subresource is ... or call.subresource == subresource)
            and (when is None or when(call))
        )

    return match


def _injected(call: Call, kind: Kind | None, code: int, user: str, retry_after: int | None) -> Obj:
    """The Status the real server sends for ``code`` on this request."""
    name = call.name or ""
    target = f'{kind.group_resource} "{name}"' if kind is not None and name else "the request"
    details: Obj = _details(kind, call.name) if kind is not None else {}
    if code == 403:
        group = kind.group if kind is not None else ""
        where = f' in the namespace "{call.namespace}"' if call.namespace else ""
        return _status(
            403,
            "Forbidden",
            f'{target} is forbidden: User "{user}" cannot {call.verb or call.method.lower()}'
            f' resource "{call.resource}" in API group "{group}"{where}',
            details,
        )
    if code == 404:
        return _status(404, "NotFound", f"{target} not found", details)
    if code == 409:
        return _status(
            409, "Conflict", f"Operation cannot be fulfilled on {target}: {_MODIFIED}", details
        )
    if code == 410:
        return _status(410, "Expired", "too old resource version", details)
    if code == 429:
        details = {**details, "retryAfterSeconds": retry_after or 1}
        return _status(
            429, "TooManyRequests", "Too many requests, please try again later.", details
        )
    if code == 503:
        return _status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            details,
        )
    if code == 504:
        return _status(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted",
            details,
        )
    if code >= 500:
        details = {**details, "causes": [{"message": "injected fault"}]}
        return _status(code, "InternalError", "Internal error occurred: injected fault", details)
    return _status(code, "BadRequest" if code == 400 else "", f"injected {code}", details)


def _respond(
    request: httpx.Request, code: int, body: Obj, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    # A ByteStream, not content=: httpx's encoding of content costs ten times the whole answer.
    all_headers = _JSON_HEADERS
    if headers:
        all_headers = [*all_headers, *((k.encode(), v.encode()) for k, v in headers.items())]
    return httpx.Response(
        code, headers=all_headers, stream=httpx.ByteStream(_dumps(body)), request=request
    )


_JSON_HEADERS = [(b"content-type", b"application/json")]


def _body(content: bytes, any_json: bool = False) -> Any:
    try:
        body = json.loads(content) if content else None
    except ValueError:
        raise _bad_request("the request body is not valid JSON") from None
    if not any_json and not isinstance(body, dict):
        raise _bad_request("the request body is not a JSON object")
    return body
