"""Resource types and reading API objects' plain-dict forms: pure, no I/O.

The pure core names its resources and reads objects' metadata and Secrets through this module
alone, so that it never imports the client, Trio or httpx. The readers are lenient: an object
comes from a server or a user, and a missing or odd field reads as empty, never as an exception.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import attrs

from kokumi.kube.errors import InvalidName

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
    """One resource type of the API: enough to build its paths and name its objects."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The URL path of the collection (``name`` unset) or of one object or its subresource.

        A namespaced collection without ``namespace`` spans all namespaces; one namespaced object
        always needs its namespace, and a cluster-scoped one never has one.
        """
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            if namespace:
                prefix += f"/namespaces/{_segment(namespace)}"
            elif name is not None:
                raise ValueError(f"{self.kind} {name!r} is namespaced: give its namespace")
        elif namespace:
            raise ValueError(f"{self.kind} is cluster-scoped: it has no namespace")
        path = f"{prefix}/{self.plural}"
        if name is not None:
            path += f"/{_segment(name)}"
        if subresource:
            if name is None:
                raise ValueError("a subresource belongs to one object: give its name")
            path += f"/{_segment(subresource)}"
        return path


def _segment(value: str) -> str:
    """One path segment, quoted. ``.`` and ``..`` are refused: quoted or not, a server or
    proxy resolves them as dot-segments, and ``GET .../namespaces/team/clusters/..`` would ask
    for something else than the object named. No Kubernetes name can be either."""
    if value in ("", ".", ".."):
        raise InvalidName(f"{value!r} is not a name any Kubernetes object or namespace can have")
    return quote(value, safe="")


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
