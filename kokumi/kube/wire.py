"""What a request and its answer carry: media types, bodies, and what an answer says.

The pure helpers of :class:`kokumi.kube.client.Client`'s verbs, beside it rather than in it, so
that the client's module is its class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from kokumi.objects import Resource, name_of, namespace_of

from .errors import ApiError, ServerError, ServerTimeout, TooManyRequests

__all__ = [
    "JSON",
    "METADATA_LIST",
    "METADATA_OBJECT",
    "READS",
    "Obj",
    "delete_options",
    "describe",
    "dumps",
    "loads",
    "namespace_for",
    "namespace_in",
    "required_name",
    "retry_after",
    "retryable",
    "status_of",
]

JSON = "application/json"


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Obj = dict[str, Any]

# What a fence never stops: a replica that may not write still reads and watches.
READS = frozenset({"GET", "HEAD"})


def namespace_in(path: str) -> str | None:
    """The namespace a request's path is in, or names (``/api/v1/namespaces/N``); None for a
    cluster-scoped one. Segments are quoted, and a namespace is a DNS label: no quoting."""
    parts = path.split("/")
    for index, part in enumerate(parts[:-1]):
        if part == "namespaces" and index in (3, 4):  # /api/v1/namespaces, /apis/g/v/namespaces
            return parts[index + 1]
    return None


def retryable(error: ApiError) -> bool:
    """429 was never executed; a server timeout or 5xx with Retry-After asks for a retry."""
    if isinstance(error, TooManyRequests | ServerTimeout):
        return True
    return isinstance(error, ServerError) and error.retry_after is not None


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for; None when absent or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the API server never sends one
    return seconds if seconds >= 0 else None


def status_of(raw: bytes) -> dict[str, Any] | None:
    """An error answer's body as the ``Status`` object it should be; None when it is not JSON
    (a proxy's page, say), so that the error still gets its class from the HTTP code."""
    try:
        data = loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def delete_options(
    propagation_policy: str | None,
    uid: str | None,
    resource_version: str | None,
    grace_period_seconds: int | None,
) -> Obj:
    """The ``DeleteOptions`` body of a delete: only what the caller set, so that the server's
    defaults hold for the rest."""
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


def namespace_for(resource: Resource, body: Mapping[str, Any], namespace: str | None) -> str | None:
    """The namespace a write of ``body`` goes to: the caller's, else the object's own."""
    if namespace or not resource.namespaced:
        return namespace
    return namespace_of(body) or None


def required_name(body: Mapping[str, Any]) -> str:
    """The object's name, which a write by name needs: refused here rather than by the server."""
    name = name_of(body)
    if not name:
        raise ValueError("the object has no metadata.name")
    return name


def describe(exc: httpx.HTTPError) -> str:
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


def dumps(value: Any) -> bytes:
    """JSON as compact as the server writes it, UTF-8 left unescaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads(raw: bytes) -> Any:
    """The JSON of an answer (``ValueError`` when it is not JSON)."""
    return json.loads(raw)
