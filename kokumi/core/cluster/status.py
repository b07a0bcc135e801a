"""What a Cluster's status should say, as typed values; a check's outcome in its terms.

Pure: no I/O, no Trio, no clock unless asked for (``now=None`` reads it, the one impure input; pass
``now`` and every function here is a function of its arguments). The actors hold the values that
go in (a Cluster's last check, the Clusters an Environment may select) and the API server; these
functions hold the decisions: which Ready condition, which targets are listed, what a status
change is worth an Event. An actor compares the ``api.ClusterStatus`` or ``api.EnvironmentStatus``
it gets with what the object says and what it last wrote, and writes only when they differ, so a
quiet fleet writes nothing ("the status changes only when what the check finds changes"); the JSON
is made once, at the write, by ``kokumi.core.api.unstructured``.
"""

from __future__ import annotations

from typing import overload

import attrs

from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection, Refusal
from kokumi.core.reasons import PROBE_REASONS, Reason
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, is_argocd_own, normalise_server
from kokumi.core.secretaccess import not_readable_message

__all__ = [
    "Outcome",
    "SecretRead",
    "claim_stands",
    "cluster_outcome",
    "cluster_status",
    "observed_cluster_status",
    "ready_event",
    "seeded_outcome",
]


@attrs.frozen
class Outcome:
    """What a check found, in the terms of the Ready condition; the probe's one answer.

    Also what the Cluster actor decides before any check: a missing Secret, a refused kubeconfig,
    an invalid spec. ``message`` is one line: what is wrong and how to fix it. A check's outcome
    names its ``server``, and ``kubernetes_version`` is the server's ``gitVersion`` whenever
    ``/version`` answered, also when the credential was then refused, and ``None`` when it is
    unknown. ``ok`` is true exactly when ``reason`` is ``Ready``.
    """

    ok: bool
    reason: Reason
    message: str
    server: str | None = None
    kubernetes_version: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.ok != (self.reason is Reason.READY):
            raise ValueError(f"an Outcome with reason {self.reason} cannot have ok={self.ok}")


# --- the Cluster --------------------------------------------------------------------------------


@attrs.frozen
class SecretRead:
    """What one GET of a Kubeconfig Cluster's Secret gave, as plain values: the I/O is done.

    ``found`` is false for a 404 and ``readable`` for a 403; ``keys`` are the Secret's data keys
    and ``kubeconfig`` what the value under ``key`` parses to, ``None`` when there is no such
    key (or its value is not base64). ``namespace`` is the Cluster's, where its Secret lives.
    """

    name: str
    key: str
    namespace: str
    found: bool = True
    readable: bool = True
    keys: tuple[str, ...] = ()
    kubeconfig: Connection | Refusal | None = attrs.field(default=None, repr=False)


@overload
def cluster_outcome(cluster: api.Invalid) -> Outcome: ...


@overload
def cluster_outcome(
    cluster: api.Cluster | api.Invalid,
    secret: SecretRead | None = None,
    *,
    username: str | None = None,
    own_namespace: str = "kokumi",
) -> Outcome | None: ...


def cluster_outcome(
    cluster: api.Cluster | api.Invalid,
    secret: SecretRead | None = None,
    *,
    username: str | None = None,
    own_namespace: str = "kokumi",
) -> Outcome | None:
    """What the Ready condition makes of a Cluster, its Secret and its kubeconfig, before a check.

    Every decision the Cluster actor would otherwise take itself, so that it only carries the
    values: the first objection wins, in the order a user fixes them, the spec
    (``InvalidSpec``), the Secret (``SecretNotFound``, ``SecretNotReadable`` with the binding
    that fixes it, ``SecretKeyNotFound``), the kubeconfig (the refusal's own Reason, or a server
    that is Argo CD's own cluster). ``None``: nothing objects, the connection is to be checked,
    and the check's finding is the outcome. ``secret`` is given for a Kubeconfig Cluster once its
    Secret was read; ``username`` and ``own_namespace`` (the manager's) shape the fix of a
    Secret Kokumi may not read. What the registry says goes over the outcome in
    :func:`cluster_status`.
    """
    if isinstance(cluster, api.Invalid):
        return Outcome(False, cluster.reason, cluster.message, None, None)
    if secret is None:
        return None
    return _kubeconfig_objection(secret, username, own_namespace)


def _kubeconfig_objection(
    secret: SecretRead, username: str | None, own_namespace: str
) -> Outcome | None:
    name, key, namespace = secret.name, secret.key, secret.namespace
    if not secret.found:
        message = (
            f"Secret {name} not found in namespace {namespace}: create it with the kubeconfig "
            f"under key {key} (kubectl create secret generic {name} -n {namespace}"
            f" --from-file={key}=...)"
        )
        return Outcome(False, Reason.SECRET_NOT_FOUND, message, None, None)
    if not secret.readable:
        message = not_readable_message(name, namespace, username, own_namespace)
        return Outcome(False, Reason.SECRET_NOT_READABLE, message, None, None)
    parsed = secret.kubeconfig
    if parsed is None:
        keys = ", ".join(sorted(secret.keys)) or "none"
        message = (
            f"Secret {name} has no key {key} (its keys: {keys}): store the kubeconfig "
            f"under {key}, or set spec.kubeconfig.secretRef.key"
        )
        return Outcome(False, Reason.SECRET_KEY_NOT_FOUND, message, None, None)
    if isinstance(parsed, Refusal):
        return Outcome(False, parsed.reason, f"Secret {name} key {key}: {parsed.message}")
    if is_argocd_own(parsed.server):
        message = (
            f"server {normalise_server(parsed.server)} is Argo CD's own cluster, reached "
            "in-cluster: registering it would replace that connection for every Application; "
            "use connection: InCluster instead"
        )
        return Outcome(False, Reason.CLUSTER_CONFLICT, message, parsed.server)
    return None


def claim_stands(outcome: Outcome) -> bool:
    """Whether a Cluster keeps its claim on its server whatever its connection: Kokumi may not
    read the Secret just now (RBAC, or the API server said no).

    That says nothing about the kubeconfig, so the claim stands, as through an outage. A
    registration that came and went with a RoleBinding would make Argo CD see the cluster
    vanish, and ApplicationSets delete what they deployed there.
    """
    return outcome.reason == Reason.SECRET_NOT_READABLE


def seeded_outcome(cluster: api.Cluster | api.Invalid) -> Outcome | None:
    """The finding a Cluster's status holds, if a check of the current spec wrote it.

    A manager that restarts takes it as the Cluster's first check rather than checking every
    Cluster at once; a status some other decision wrote (a Secret, a conflict), or one of an
    older spec, is no finding.
    """
    if not isinstance(cluster, api.Cluster) or cluster.metadata.deletion_timestamp:
        return None
    ready = cluster.ready
    status = cluster.status
    if ready is None or ready.reason not in PROBE_REASONS or status.server is None:
        return None
    if ready.observed_generation != cluster.metadata.generation:
        return None
    ok = ready.status == "True"
    if ok != (ready.reason == Reason.READY):
        return None
    return Outcome(
        ok, Reason(ready.reason), ready.message, status.server, status.kubernetes_version
    )


def cluster_status(
    cluster: api.Cluster | api.Invalid,
    outcome: Outcome,
    *,
    conflict: str | None = None,
    conflict_reason: str = Reason.CLUSTER_CONFLICT,
    now: str | None = None,
    written: api.ClusterStatus | None = None,
) -> api.ClusterStatus:
    """The status ``cluster`` should have after ``outcome``.

    A check that failed says why; a check that passed but whose server the registry will not give
    this Cluster (``conflict``, with its ``conflict_reason``) is not Ready either, since Argo CD
    cannot deploy through it. The Ready condition keeps its transition time while its status
    holds. An InCluster Cluster's server is Argo CD's name for its own cluster, whatever the
    manager reached it by.

    ``written`` is the status this manager wrote last, which the watch may not have brought back
    yet: the transition time is kept from it. From the object alone, a second pass a second
    after the first write (the registry's word came while the write's event was on its way)
    stamped the same status anew and wrote it again: 1.3-1.6 status writes per new Cluster
    while a fleet onboarded.
    """
    generation = cluster.metadata.generation
    status: api.ConditionStatus
    reason: str
    if not outcome.ok:
        status, reason, message = "False", outcome.reason, outcome.message
    elif conflict:
        status, reason, message = "False", conflict_reason, conflict
    else:
        status, reason, message = "True", Reason.READY, outcome.message
    server = outcome.server
    if isinstance(cluster, api.Cluster) and cluster.spec.connection == "InCluster":
        server = IN_CLUSTER_SERVER
    condition = api.Condition(
        type="Ready",
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
    )
    return api.ClusterStatus(
        server=server,
        kubernetes_version=outcome.kubernetes_version,
        observed_generation=generation,
        conditions=api.set_condition(_base_conditions(cluster, written), condition, now),
    )


def _base_conditions(
    cluster: api.Cluster | api.Invalid, written: api.ClusterStatus | None
) -> tuple[api.Condition, ...]:
    """The conditions a new Ready condition is set among: the manager's last write, which is
    the newest (only it writes a Cluster's status), else what the object says."""
    return (written if written is not None else _cluster_status_of(cluster)).conditions


def observed_cluster_status(cluster: api.Cluster | api.Invalid) -> api.ClusterStatus | None:
    """The status the object has, an invalid one's too; ``None`` when it has none yet."""
    status = _cluster_status_of(cluster)
    return None if status == api.ClusterStatus() else status


def ready_event(old: api.ClusterStatus | None, new: api.ClusterStatus) -> api.Condition | None:
    """The Ready condition of ``new`` when it is worth an Event: its status or reason changed.

    A new message with the same reason (another address, another user) is no transition: the
    Events a user sees in ``kubectl describe`` are the changes of state. A Cluster's first
    report that it is Ready is none either: it is what creating the Cluster asked for, and its
    condition's lastTransitionTime says when. An Event for it would be a fourth write per new
    Cluster beside its status, its finalizer and its Argo CD Secret (10,000 Events for a fleet
    a ClusterSource brings in at once). A first report that it is not Ready is a Warning a
    user must see.
    """
    after = api.ready_condition(new.conditions)
    if after is None:
        return None
    before = api.ready_condition(old.conditions) if old is not None else None
    if before is None:
        return None if after.status == "True" else after
    if (before.status, before.reason) == (after.status, after.reason):
        return None
    return after


def _cluster_status_of(cluster: api.Cluster | api.Invalid) -> api.ClusterStatus:
    if isinstance(cluster, api.Cluster):
        return cluster.status
    return cluster.status if isinstance(cluster.status, api.ClusterStatus) else api.ClusterStatus()
