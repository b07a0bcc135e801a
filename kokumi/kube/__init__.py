"""A thin Kubernetes client on httpx and Trio. It knows nothing of Kokumi.

The public names are all here; the submodules are where they live, not a second way in.
"""

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
    Observer,
    Resource,
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
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    MethodNotAllowed,
    NotFound,
    ServerError,
    ServerTimeout,
    ServiceUnavailable,
    TooManyRequests,
    TransportError,
    Unauthorized,
)
from .watch import Resync, Store, WatchEvent, watch

__all__ = [
    # client
    "Client",
    "Observer",
    "Resource",
    "CONFIG_MAPS",
    "CUSTOM_RESOURCE_DEFINITIONS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "PODS",
    "SECRETS",
    "SERVICE_ACCOUNTS",
    # config
    "Config",
    "ExecToken",
    "FileToken",
    "SERVICE_ACCOUNT_ROOT",
    "StaticToken",
    "TokenProvider",
    "flatten_context",
    # watch
    "Resync",
    "Store",
    "WatchEvent",
    "watch",
    # errors
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "ServerError",
    "ServerTimeout",
    "ServiceUnavailable",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
]
