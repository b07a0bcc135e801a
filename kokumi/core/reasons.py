"""Every Reason Kokumi writes: one vocabulary for conditions, targets and Events.

A Reason is API: ``kubectl get`` shows it, alerts and Argo CD health checks match it, so its
spelling never changes. Keeping them in one enum makes a typo a type error, and lets a test hold
``docs/reasons.md`` to exactly this list, both ways. Which reason a situation gets is decided where
the situation is understood (the diagnosis, core.cluster.status, the registry, the Environment
actor); this module only names them.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["PROBE_REASONS", "Reason"]


class Reason(enum.StrEnum):
    """A Reason, as written into a status or an Event; its value is the exact string."""

    # The Cluster's Ready condition, as a check of the server finds it.
    READY = "Ready"
    UNREACHABLE = "Unreachable"
    """No HTTP answer: refused, DNS, timeout, proxy, reset. The network or the URL is wrong."""
    TLS_ERROR = "TLSError"
    """The TLS handshake failed or could not start: CA, server name, client certificate."""
    UNAUTHORIZED = "Unauthorized"
    """The server refuses the credential (401), or there is none to send."""
    FORBIDDEN = "Forbidden"
    """The credential authenticates, but its user may not create even a SelfSubjectReview."""
    SERVER_ERROR = "ServerError"
    """Something answered, but not as a healthy Kubernetes API server does."""
    EGRESS_DENIED = "EgressDenied"
    """The server (or its proxy) is, or resolves to, an address the manager does not connect to."""
    NAMESPACES_REQUIRED = "NamespacesRequired"
    """The credential may not list cluster-wide, and no spec.scope.namespaces tells Argo CD where
    to work instead: Argo CD's cluster cache, which lists every kind cluster-wide, would fail."""

    # The Cluster's Ready condition, before any check: its spec, its Secret, its registration.
    INVALID_KUBECONFIG = "InvalidKubeconfig"
    SECRET_NOT_FOUND = "SecretNotFound"
    SECRET_KEY_NOT_FOUND = "SecretKeyNotFound"
    SECRET_NOT_READABLE = "SecretNotReadable"
    CLUSTER_CONFLICT = "ClusterConflict"
    """Also a target: the Environment holds a Cluster whose server another of its Clusters has."""
    REGISTRATION_FAILED = "RegistrationFailed"
    REGISTRATION_PENDING = "RegistrationPending"
    INVALID_SPEC = "InvalidSpec"
    """Also an Environment's: the object does not fit its schema."""
    OBJECT_TOO_LARGE = "ObjectTooLarge"
    """Also an Environment's and a ClusterSource's: its labels or annotations are over the bounds
    of kokumi.core.limits, and the manager keeps nothing of it but its name and status."""

    # An Event on the Cluster that takes a server over.
    ARGOCD_NAME_CHANGED = "ArgoCDNameChanged"

    # The Environment's Ready condition.
    NO_CLUSTERS = "NoClusters"
    NO_CLUSTER_READY = "NoClusterReady"
    INVALID_SELECTOR = "InvalidSelector"

    # A ClusterSource's Ready condition, and its list of Secrets not imported.
    NOT_ALL_IMPORTED = "NotAllImported"
    CLUSTER_API_NOT_READABLE = "ClusterAPINotReadable"
    CLUSTER_WRITE_FAILED = "ClusterWriteFailed"
    """The API server refused the source's create or update of a Cluster; retried with backoff."""
    INVALID_CLUSTER_NAME = "InvalidClusterName"
    """A matched Secret's name (or naming label) makes no valid Cluster name."""
    SECRET_NOT_OWNED = "SecretNotOwned"
    """No Cluster API cluster of the Secret's name controls it (or no vcluster of its name runs
    beside it): whoever may write Secrets could have written it, so it lends no credential to
    the namespace's Environments."""
    VCLUSTER_NOT_READABLE = "VClusterNotReadable"
    """The manager may not list vcluster's Services, which tell vcluster's Secrets from others."""
    TOO_MANY_CONTEXTS = "TooManyContexts"
    """A Secret read with contexts All has more contexts than the manager turns into Clusters
    (``--max-contexts-per-secret``): those past the first by name have none."""
    TOO_MANY_CLUSTERS = "TooManyClusters"
    """The source keeps as many Clusters as the manager lets one source keep
    (``--max-clusters-per-source``): the matched Secrets past them have none yet."""

    # An Environment's targets.
    DEPLOY = "Deploy"
    CLUSTER_NOT_READY = "ClusterNotReady"
    NOT_CHECKED = "NotChecked"
    """A held target's reason while its Cluster has no Ready condition: no check reported yet."""


PROBE_REASONS: Final = frozenset(
    {
        Reason.READY,
        Reason.UNREACHABLE,
        Reason.TLS_ERROR,
        Reason.UNAUTHORIZED,
        Reason.FORBIDDEN,
        Reason.SERVER_ERROR,
        Reason.EGRESS_DENIED,
        Reason.NAMESPACES_REQUIRED,
    }
)
"""The reasons a check of a server can find; a status holding one of them was written by a check."""
