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
