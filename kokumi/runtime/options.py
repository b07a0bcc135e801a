"""The manager's options: one frozen value that every actor reads, kept apart from the actors so
that a program that embeds the manager, the CLI and the actors all name one home for it."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from kokumi.core import api
from kokumi.core.cluster import schedule
from kokumi.core.cluster.egress import EgressPolicy
from kokumi.core.fleet.leader import LeaderElection
from kokumi.core.fleet.shards import Sharding
from kokumi.core.registry.carry import NOT_CARRYING, Carrying
from kokumi.core.secretaccess import SecretScope
from kokumi.core.sources.bounds import Bounds
from kokumi.kube.backoff import Backoff

__all__ = ["Options"]


@attrs.frozen
class Options:
    """How the manager behaves; every default is what the spec asks for.

    ``check_jitter``: each check comes a minute to a minute and 6 s (a tenth of the interval)
    after the last one began, never sooner: "a little later than the minute at random". Each
    Cluster has its own place in the period (a minute plus half the jitter: a hash of its
    identity, :mod:`kokumi.core.cluster.schedule`), which spreads the fleet's checks evenly from
    the first one, and each check comes up to half the jitter after it, at random: that keeps two
    Clusters whose places are close from meeting every time, and a tenth keeps "about once a
    minute" true.
    """

    namespace: str = "kokumi"
    argocd_namespace: str = "argocd"
    check_interval: float = schedule.CHECK_INTERVAL
    check_jitter: float = schedule.CHECK_JITTER
    probe_timeout: float = schedule.CHECK_TIMEOUT
    max_concurrent_checks: int = schedule.CHECK_SLOTS
    reuse_window: float = schedule.REUSE_WINDOW
    keep_in_cluster: bool = True
    field_manager: str = "kokumi"
    #: Retries of refused or failed API requests wait from ``retry_initial`` up to
    #: ``retry_max`` seconds, doubling, with jitter; per Cluster and per kind of request.
    retry_initial: float = 1.0
    retry_max: float = 120.0
    # Where Secrets are followed: "namespace" (per namespace holding Kubeconfig Clusters, with a
    # RoleBinding of kokumi-manager-secrets in each) or "cluster" (an explicit, wider opt-in).
    secrets_scope: SecretScope = SecretScope.NAMESPACE
    # Addresses the probe of a Kubeconfig Cluster may connect to (kokumi/core/cluster/egress.py).
    probe_egress: EgressPolicy = attrs.field(factory=EgressPolicy)
    # Run only while holding a Lease in ``namespace`` (None: always, the embedding default).
    leader_election: LeaderElection | None = None
    # Share the Clusters with other replicas through one Lease per shard (None: one process
    # serves them all, inside ``leader_election`` if set). See docs/scale.md, Shards.
    sharding: Sharding | None = None
    # Serve /healthz, /readyz and /metrics on this port (None: not at all; 0: any free port).
    health_port: int | None = None
    #: Reads of one namespace's Secrets waiting together that make one paged list of them
    #: instead of GETs (kokumi/actors/secretreads.py); the model test lowers it to list often.
    secret_list_at: int = schedule.SECRET_LIST_AT
    # Freeze the heap as the fleet grows (kokumi/runtime/heap.py): ``kokumi manager`` sets it,
    # since it touches the whole process, which an embedding program owns.
    freeze_heap: bool = False
    #: What one ClusterSource may make: contexts of a Secret, Clusters of a source
    #: (kokumi/core/sources/bounds.py, docs/clustersource.md).
    source_bounds: Bounds = attrs.field(factory=Bounds)
    #: Which of a holding Cluster's labels and annotations its Argo CD Secret carries
    #: (``--carry-labels``, ``--carry-annotations``; docs/argocd.md): nothing unless named.
    carry: Carrying = NOT_CARRYING

    def check_lateness(self) -> float:
        """How much later than its place a check comes this time: the spec's random lateness,
        up to half the jitter (the other half is how far the places are more than a minute
        apart, :func:`kokumi.core.cluster.schedule.period_of`)."""
        return random.uniform(0.0, self.check_jitter / 2)  # noqa: S311

    def parse_cluster(self, obj: Mapping[str, Any]) -> api.Cluster | api.Invalid:
        """A Cluster typed with the annotations it may carry, and no other (memory, at scale)."""
        return api.parse_cluster(obj, annotations=self.carried_annotation())

    def carried_annotation(self) -> Callable[[str], bool] | None:
        """Which annotation keys a Cluster's registration may carry (None: none)."""
        return self.carry.annotations.matches if self.carry.annotations else None

    def backoff(self) -> Backoff:
        return Backoff(self.retry_initial, self.retry_max)
