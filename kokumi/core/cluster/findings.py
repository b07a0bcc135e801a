"""What a check of one Cluster found, what a read of its kubeconfig Secret gave, and which
version of the Secret each is of: the values a Cluster's lifecycle
(:mod:`kokumi.core.cluster.lifecycle`) reuses while that version holds.
"""

from __future__ import annotations

import attrs

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection

__all__ = [
    "CLUSTER_WIDE_KEPT",
    "SECRET_REREAD",
    "Check",
    "Read",
    "lists_cluster_wide",
    "secret_key",
    "secret_version",
    "version_of",
]

SECRET_REREAD = 600.0
"""Seconds a kubeconfig read is reused at least while the Secret watch reports the same version.

Past this (and a random share of it again, so that Clusters created together do not all read at
once ten minutes later), the next check reads the Secret again, so a RoleBinding removed
meanwhile shows as SecretNotReadable within twenty minutes (the metadata watch keeps its last
versions when it is refused).
"""


CLUSTER_WIDE_KEPT = 600.0
"""Seconds a yes to "may this credential list cluster-wide?" is kept for its connection (the
same server, credential and TLS settings), so that a steady Ready fleet does not ask it at every
check: it is a third request on every check's connection, 15-35 % of a check's CPU
(benchmarks/README.md). Only a yes is kept: a Cluster that is ``NamespacesRequired`` asks at
every check, so a binding granted on the spoke shows within a minute; a binding taken away shows
within ten minutes, as a RoleBinding taken from the manager shows as SecretNotReadable within
:data:`SECRET_REREAD` and twice that. A new credential, or a kubeconfig Secret read anew into
another connection, asks at once.
"""


@attrs.frozen
class Check:
    """What one check found, when, and from which version of the kubeconfig Secret."""

    outcome: Outcome
    at: float
    secret_version: str | None
    connection: Connection | None = attrs.field(default=None, repr=False)
    #: When its probe had its slot and began, if it asked the server: the next check is due a
    #: minute after that, so that the spoke sees a minute between two checks whatever the wait.
    began: float | None = None
    #: How many words of a changed Secret the actor had heard when its read began: a word
    #: that comes during the check (after the read) makes the next reconcile check again.
    heard: int = 0


@attrs.frozen
class Read:
    """One read of the kubeconfig Secret: its version, and the connection or why there is none."""

    version: str | None
    at: float
    connection: Connection | None = attrs.field(repr=False)
    outcome: Outcome | None
    #: Reused until ``at + keep``: SECRET_REREAD to twice that, drawn by whoever read it.
    keep: float = SECRET_REREAD
    #: The actor's count of words of a changed Secret when the read began (see Check.heard).
    news: int = 0
    #: False when the Secret could not be read (missing, or forbidden): the next check reads
    #: again, and nothing of it serves.
    reusable: bool = True


def secret_key(cluster: api.Cluster | api.Invalid) -> tuple[str, str] | None:
    """The (namespace, name) of the Secret ``cluster``'s kubeconfig is read from, if any."""
    if not isinstance(cluster, api.Cluster) or cluster.secret_ref is None:
        return None
    return cluster.metadata.namespace, cluster.secret_ref.name


def version_of(cluster: api.Cluster, version: str | None) -> str:
    """What a read or a check of ``cluster``'s kubeconfig is of: the Secret's key and version and
    the context read, in one spelling, so that a read is reused exactly while all three hold."""
    ref = cluster.secret_ref
    assert ref is not None
    return f"{ref.name}/{ref.key}/{cluster.kubeconfig_context or ''}@{version}"


def secret_version(cluster: api.Cluster | api.Invalid, watched: str | None) -> str | None:
    """The version of the kubeconfig the watch says ``cluster`` would read now."""
    if not isinstance(cluster, api.Cluster) or cluster.secret_ref is None:
        return None
    return version_of(cluster, watched)


def lists_cluster_wide(cluster: api.Cluster) -> bool:
    """Whether Argo CD would list and watch cluster-wide with ``cluster``'s credential, so that
    its check asks whether the credential may (``NamespacesRequired`` if not).

    A Kubeconfig Cluster without ``spec.scope.namespaces``: its Argo CD Secret names no
    namespaces, and Argo CD's cluster cache then lists every kind cluster-wide. With namespaces
    it lists in those only, and a credential granted less than that is the user's choice, not
    asked. An InCluster Cluster registers nothing: Argo CD uses its own ServiceAccount there.
    A change of the scope is a change of the spec, which the lifecycle checks afresh.
    """
    if cluster.spec.connection != "Kubeconfig":
        return False
    scope = cluster.spec.scope
    return scope is None or not scope.namespaces
