"""Resource types and reading API objects' plain-dict forms: pure, no I/O.

Both the pure core and the client name resources and read objects' metadata and Secrets, and
neither may import the other; so these shapes sit below both, and the core never loads the
client, Trio or httpx. The readers are lenient: an object comes from a server or a user, and a
missing or odd field reads as empty, never as an exception. The URL paths of a resource are the
client's business (``kokumi.kube.paths``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "Resource",
    "kept_form",
    "metadata_of",
    "name_of",
    "namespace_of",
    "resource_version",
    "secret_data",
    "secret_keys",
]


@attrs.frozen
class Resource:
    """One resource type of the API: enough to name its objects and, in the client, its paths."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's (or a list's) ``metadata``; empty when it has none or it is no mapping."""
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name``; ``""`` when there is none."""
    name = metadata_of(obj).get("name")
    return name if isinstance(name, str) else ""


def namespace_of(obj: Mapping[str, Any]) -> str:
    """``metadata.namespace``; ``""`` for a cluster-scoped object, or when there is none."""
    namespace = metadata_of(obj).get("namespace")
    return namespace if isinstance(namespace, str) else ""


def resource_version(obj: Mapping[str, Any]) -> str | None:
    """``metadata.resourceVersion``; ``None`` when the object (or list) carries none."""
    version = metadata_of(obj).get("resourceVersion")
    return version if isinstance(version, str) else None


def secret_keys(secret: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of a Secret's ``data``, sorted: what a message may name, never the values."""
    data = secret.get("data")
    return tuple(sorted(str(key) for key in data)) if isinstance(data, Mapping) else ()


def secret_data(secret: Mapping[str, Any], key: str) -> bytes | None:
    """The decoded value under ``key`` of a Secret's ``data``; None if absent or not base64.

    Secrets come from users, so anything may sit there; an answer beats an exception.
    """
    data = secret.get("data")
    if not isinstance(data, Mapping):
        return None
    value = data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


# Values that tell one object from another (or are Secret data): kept as they are, they never
# take a place in the table of shared strings.
_OWN_VALUES = frozenset(
    {
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "lastTransitionTime",
        "time",
        "server",
        "data",
        "stringData",
    }
)
# Longer strings are rarely repeated word for word (a message naming its object, a certificate).
_SHARED_UP_TO = 64
# The table of shared strings starts afresh when it holds this many: a string that comes back
# after that is shared again from its next copy on. Bounded, unlike ``sys.intern`` (whose
# strings never die from Python 3.12 on), so that a fleet's churn of names leaks nothing.
_TABLE_SIZE = 8192
_table: dict[str, str] = {}
# Deeper than this, a value is kept as decoded: no object the manager keeps nests so far, and
# a walk as deep as an object's nesting must not meet the interpreter's recursion limit.
_SHARED_DEPTH = 32


def kept_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as a store keeps it for as long as the object lives: without
    ``metadata.managedFields``, and with its keys and short repeated values shared.

    ``json.loads`` gives every decoded object its own copy of each key and value: a watched
    Cluster took 4.6 KB, six times its JSON text, and a store of 10,000 Clusters (and the
    registry's 10,000 Argo CD Secrets) was a fifth of the manager's memory. Keys
    (``metadata``, ``lastTransitionTime``, a label's key) and values such as an apiVersion, a
    namespace, a condition's reason or a label's value are the same in thousands of objects,
    so they are shared through one table of strings; names, uids, versions, times and Secret
    data are left as they are. The managedFields go as client-go's informers are told to drop
    them: no reader here reads them, and a Cluster written by its creator, the manager's
    status and its finalizer carries three entries of nested field sets. Equal to ``obj`` in
    every other field.
    """
    kept: dict[str, Any] = {}
    for key, value in obj.items():
        part = value
        if key == "metadata" and isinstance(value, Mapping):
            part = {k: v for k, v in value.items() if k != "managedFields"}
        kept[_share(key)] = _shared(part, shared_values=key not in _OWN_VALUES, depth=1)
    return kept


def _shared(value: Any, *, shared_values: bool, depth: int) -> Any:
    if depth > _SHARED_DEPTH:
        return value
    if isinstance(value, dict):
        return {
            _share(key): _shared(
                item, shared_values=shared_values and key not in _OWN_VALUES, depth=depth + 1
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_shared(item, shared_values=shared_values, depth=depth + 1) for item in value]
    if shared_values and type(value) is str and len(value) <= _SHARED_UP_TO:
        return _share(value)
    return value


def _share(text: str) -> str:
    found = _table.get(text)
    if found is not None:
        return found
    if len(_table) >= _TABLE_SIZE:
        _table.clear()
    _table[text] = text
    return text
