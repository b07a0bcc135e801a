"""What can go wrong when talking to an API server, as a small typed hierarchy.

Callers branch on the class (``except Conflict``: re-read and retry; ``except AlreadyExists``:
somebody else holds the name), never on a message. The texts are built from the method, the path
and the server's ``Status``; a request body never enters them, because it may hold a Secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Fenced",
    "Forbidden",
    "Gone",
    "Invalid",
    "InvalidName",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "ServerError",
    "ServerTimeout",
    "ServiceUnavailable",
    "TooLarge",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "WriteRefused",
    "ConfigError",
    "error_from_status",
]


class KubeError(Exception):
    """Everything this package raises on purpose derives from this."""


class ConfigError(KubeError):
    """The connection cannot be built: a kubeconfig or a service-account mount is unusable."""


class TransportError(KubeError):
    """No answer came from the server: refused, reset, TLS failure, timeout or a broken stream.

    Worth retrying after a pause; the request may or may not have reached the server.
    """


class TooLarge(TransportError):
    """The answer was larger than the caller said it would read: cut off, nothing of it kept.

    A list of Secrets is bounded in objects, not bytes, and a namespace's author decides how big
    its Secrets are: the caller that reads such a list names a byte cap and reads another way
    when it is reached.
    """


class Fenced(KubeError):
    """A write was not sent: the client's fence said its caller may not write any more.

    Nothing reached the server. Raised by a client made with :meth:`Client.fenced` when, at the
    moment the request would go out, its caller no longer holds what lets it write (a Lease).
    """


class WriteRefused(KubeError):
    """A write was not sent: the client may not write in that namespace
    (:meth:`Client.read_only_in`). Nothing reached the server."""


class InvalidName(KubeError, ValueError):
    """A name no Kubernetes object can have (``.``, ``..``, empty) was to become a path segment.

    Nothing was sent: quoted or not, servers and proxies resolve ``.`` and ``..`` as
    dot-segments, and the request would have named another resource than the one meant.
    """


class ApiError(KubeError):
    """The server answered with a failure ``Status``.

    ``code`` is the HTTP status, ``reason`` the machine-readable ``Status.reason`` (``NotFound``,
    ``AlreadyExists``, ``Conflict``, ...), ``message`` the server's own sentence and ``details``
    the ``Status.details`` mapping (name, kind, causes, retryAfterSeconds) when given.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        super().__init__(code, reason, message)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.reason!r}, {self.message!r})"


class BadRequest(ApiError):
    """400: the request itself is malformed (a bad selector, an unparsable body)."""


class Unauthorized(ApiError):
    """401: the credentials were refused (an expired token, a revoked certificate)."""


class Forbidden(ApiError):
    """403: RBAC or an admission check said no."""


class NotFound(ApiError):
    """404: no such object, namespace, or resource type."""


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb."""


class Conflict(ApiError):
    """409 from a stale ``resourceVersion`` or a precondition: re-read, then retry."""


class AlreadyExists(ApiError):
    """409 on create: the name is taken. Not a ``Conflict``: retrying the create cannot help."""


class Gone(ApiError):
    """410: the resourceVersion or continue token is older than the server keeps. Relist."""


class Invalid(ApiError):
    """422: validation refused the object; ``causes`` say which fields and why."""

    @property
    def causes(self) -> list[Mapping[str, Any]]:
        causes = self.details.get("causes") or []
        return [c for c in causes if isinstance(c, Mapping)]


class TooManyRequests(ApiError):
    """429: API priority and fairness turned the request away; it was not executed."""


class ServerError(ApiError):
    """5xx: the server failed; a pause and a retry often help."""


class ServerTimeout(ServerError):
    """The server gave up in time (reason ``ServerTimeout`` or ``Timeout``, or HTTP 504)."""


class ServiceUnavailable(ServerError):
    """503: the server (or an aggregated API behind it) is not ready."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    503: ServiceUnavailable,
    504: ServerTimeout,
}

_BY_REASON: dict[str, type[ApiError]] = {
    "AlreadyExists": AlreadyExists,
    "Expired": Gone,
    "Gone": Gone,
    "ServerTimeout": ServerTimeout,
    "Timeout": ServerTimeout,
}


def error_from_status(
    code: int,
    status: Mapping[str, Any] | None,
    *,
    context: str = "",
    retry_after: float | None = None,
) -> ApiError:
    """Build the typed error for an HTTP status and the server's ``Status`` object (if any).

    ``status`` may be anything the server sent; only the fields of a ``Status`` are read, so an
    echoed request body can never end up in the text. ``context`` (method and path) is prefixed to
    the message so a log line says what was being attempted.
    """
    reason = ""
    message = ""
    details: Mapping[str, Any] | None = None
    if status is not None and status.get("kind") == "Status":
        code = _int(status.get("code")) or code
        reason = _str(status.get("reason"))
        message = _str(status.get("message"))
        raw_details = status.get("details")
        if isinstance(raw_details, Mapping):
            details = raw_details
            if retry_after is None:
                retry_after = _float(raw_details.get("retryAfterSeconds"))
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code)
    if cls is None:
        cls = ServerError if code >= 500 else ApiError
    if not reason:
        reason = cls.__name__ if cls not in (ApiError, ServerError) else f"HTTP{code}"
    if not message:
        message = "the server gave no Status"
    if context:
        message = f"{context}: {message}"
    return cls(code, reason, message, details=details, retry_after=retry_after)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None
