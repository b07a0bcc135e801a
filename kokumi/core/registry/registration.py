"""The registry's public face: its answer to a Cluster, a value any actor may hold.

The Cluster actors and the context read it without importing the registry, so the actors stay
independent of each other (docs/architecture.md, checked by import-linter).
"""

from __future__ import annotations

import attrs

from kokumi.core.reasons import Reason

__all__ = ["NOT_REGISTERED", "Registration"]


@attrs.frozen
class Registration:
    """The registry's word on one Cluster.

    ``holding``: a Secret of Kokumi's names this Cluster now (its finalizer must stay).
    ``conflict``: why the Cluster is not registered as it should be, for its Ready condition;
    ``None`` when it is (or when it wants nothing). ``reason`` goes with ``conflict``.
    """

    holding: bool
    server: str | None = None
    conflict: str | None = None
    reason: Reason = Reason.CLUSTER_CONFLICT


NOT_REGISTERED = Registration(holding=False)
