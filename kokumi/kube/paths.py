"""The URL paths of a resource's collection, objects and subresources.

A resource's identity (``kokumi.objects.Resource``) is shared with the pure core; how it maps to
URLs, and the refusal of a name the server would read as something else, belong to the client,
which raises its own error for it.
"""

from __future__ import annotations

from urllib.parse import quote

from kokumi.kube.errors import InvalidName
from kokumi.objects import Resource

__all__ = ["resource_path"]


def resource_path(
    resource: Resource,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The URL path of the collection (``name`` unset) or of one object or its subresource.

    A namespaced collection without ``namespace`` spans all namespaces; one namespaced object
    always needs its namespace, and a cluster-scoped one never has one.
    """
    if resource.group:
        prefix = f"/apis/{resource.group}/{resource.version}"
    else:
        prefix = f"/api/{resource.version}"
    if resource.namespaced:
        if namespace:
            prefix += f"/namespaces/{_segment(namespace)}"
        elif name is not None:
            raise ValueError(f"{resource.kind} {name!r} is namespaced: give its namespace")
    elif namespace:
        raise ValueError(f"{resource.kind} is cluster-scoped: it has no namespace")
    path = f"{prefix}/{resource.plural}"
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
