"""A thin Kubernetes client on httpx and Trio. It knows nothing of Kokumi.

Each submodule is the home of the names it defines, and Kokumi's own code imports them from
there. This package is the flat face for programs that embed the client, as httpx's ``__all__``
is: every public name in one place, each re-exported from its home. It imports them all at once:
nothing pure needs this package (the object shapes the core reads are ``kokumi.objects``, below
it), so a lazy face would buy nothing, and importing ``watch`` after its submodule keeps
``kokumi.kube.watch`` the function, whatever imported the submodule first.
"""

from kokumi.objects import Resource

from .client import Client
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
    TooLarge,
    TooManyRequests,
    TransportError,
    Unauthorized,
    WriteRefused,
)
from .identity import Identity
from .observer import Observer
from .paths import resource_path
from .resources import (
    CONFIG_MAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
)
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
    "TooLarge",
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
