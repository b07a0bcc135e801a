"""A thin Kubernetes client on httpx and Trio. It knows nothing of Kokumi.

Each submodule is the home of the names it defines, and Kokumi's own code imports them from
there. This package is the flat face for programs that embed the client, as httpx's ``__all__``
is: every public name in one place, each re-exported from its home and imported on first use
(PEP 562), so that ``kokumi.objects``, the pure part the core reads, loads neither the
client, Trio nor httpx with its package.
"""

import sys as _sys
import types as _types
import typing as _typing

from . import lazy as _lazy

if _typing.TYPE_CHECKING:
    # What mypy and IDEs see; tests/test_exports.py holds it equal to ``_HOMES``.
    from kokumi.objects import Resource

    from .client import (
        CONFIG_MAPS,
        CUSTOM_RESOURCE_DEFINITIONS,
        EVENTS,
        LEASES,
        NAMESPACES,
        PODS,
        SECRETS,
        SERVICE_ACCOUNTS,
        Client,
        Identity,
        Observer,
    )
    from .config import (
        SERVICE_ACCOUNT_ROOT,
        Config,
        ExecToken,
        FileToken,
        StaticToken,
        TokenProvider,
        flatten_context,
    )
    from .errors import (
        AlreadyExists,
        ApiError,
        BadRequest,
        ConfigError,
        Conflict,
        Fenced,
        Forbidden,
        Gone,
        Invalid,
        InvalidName,
        KubeError,
        MethodNotAllowed,
        NotFound,
        ServerError,
        ServerTimeout,
        ServiceUnavailable,
        TooManyRequests,
        TransportError,
        Unauthorized,
        WriteRefused,
    )
    from .paths import resource_path
    from .watch import Resync, Store, WatchEvent, start_watch, watch

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "CONFIG_MAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "Client",
    "Config",
    "ConfigError",
    "Conflict",
    "EVENTS",
    "ExecToken",
    "Fenced",
    "FileToken",
    "Forbidden",
    "Gone",
    "Identity",
    "Invalid",
    "InvalidName",
    "KubeError",
    "LEASES",
    "MethodNotAllowed",
    "NAMESPACES",
    "NotFound",
    "Observer",
    "PODS",
    "Resource",
    "Resync",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    "SERVICE_ACCOUNT_ROOT",
    "ServerError",
    "ServerTimeout",
    "ServiceUnavailable",
    "StaticToken",
    "Store",
    "TokenProvider",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "WatchEvent",
    "WriteRefused",
    "flatten_context",
    "resource_path",
    "start_watch",
    "watch",
]

_BY_HOME = {
    "client": (
        "CONFIG_MAPS",
        "CUSTOM_RESOURCE_DEFINITIONS",
        "Client",
        "EVENTS",
        "Identity",
        "LEASES",
        "NAMESPACES",
        "Observer",
        "PODS",
        "SECRETS",
        "SERVICE_ACCOUNTS",
    ),
    "config": (
        "Config",
        "ExecToken",
        "FileToken",
        "SERVICE_ACCOUNT_ROOT",
        "StaticToken",
        "TokenProvider",
        "flatten_context",
    ),
    "errors": (
        "AlreadyExists",
        "ApiError",
        "BadRequest",
        "ConfigError",
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
        "TooManyRequests",
        "TransportError",
        "Unauthorized",
        "WriteRefused",
    ),
    "paths": ("resource_path",),
    "watch": ("Resync", "Store", "WatchEvent", "start_watch", "watch"),
}
#: Each public name -> the module that defines it.
_HOMES = {name: f"{__name__}.{home}" for home, names in _BY_HOME.items() for name in names}
_HOMES["Resource"] = "kokumi.objects"  # shared with the pure core, below both


class _Face(_types.ModuleType):
    """The package, whose ``watch`` stays the function when its submodule ``watch`` loads.

    Loading a submodule binds it on its package, which would make ``kokumi.kube.watch`` (and
    ``from kokumi.kube import watch``) the module whenever Kokumi's code had imported the module
    first. When the package imported everything at once it bound the function after the module,
    so the function it was, and the function it stays.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, _types.ModuleType) and name in _HOMES:
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Face

# Hidden from mypy, which would otherwise take any attribute of the package for one that exists.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy.face(__name__, _HOMES, __all__)
