"""Hypothesis strategies for the status and lifecycle tests of the Cluster and of the Environment.

Both files draw the same conditions, metadata and specs; the Environment's statuses and fleets
are here so that its tests and the Cluster's draw from one definition.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kokumi.core import api
from kokumi.core.cluster.status import Outcome
from kokumi.core.reasons import Reason

EARLY = "2026-11-30T12:00:00Z"
LATE = "2026-11-30T13:30:00Z"
words = st.text(st.characters(codec="utf-8"), max_size=12)
stamps = st.sampled_from(["", EARLY, LATE])
conditions = st.builds(
    api.Condition,
    type=st.sampled_from(["Ready", "Progressing"]),
    status=st.sampled_from(["True", "False", "Unknown"]),
    reason=st.sampled_from(list(Reason)) | words,
    message=words,
    last_transition_time=stamps,
    observed_generation=st.integers(0, 2**40),
)
condition_lists = st.lists(conditions, max_size=2, unique_by=lambda c: c.type).map(tuple)
target_statuses = st.builds(
    api.TargetStatus,
    name=words,
    target=st.sampled_from([Reason.DEPLOY, Reason.CLUSTER_NOT_READY, Reason.CLUSTER_CONFLICT]),
    reason=st.sampled_from(list(Reason)) | words,
    message=words,
)
environment_statuses = st.builds(
    api.EnvironmentStatus,
    observed_generation=st.none() | st.integers(0, 2**40),
    conditions=condition_lists,
    selected=st.integers(0, 10**6),
    deploying=st.integers(0, 10**6),
    clusters=st.lists(target_statuses, max_size=3).map(tuple),
    more=st.integers(0, 10**6),
)
metas = st.builds(
    api.Meta,
    name=st.sampled_from(["a", "b", "c", "d", "e"]),
    namespace=st.just("fleet"),
    uid=st.just("u"),
    generation=st.integers(1, 5),
    labels=st.sampled_from([{}, {"env": "prod"}, {"env": "dev"}]),
)
specs = st.sampled_from(
    [
        api.ClusterSpec("InCluster"),
        api.ClusterSpec("Kubeconfig", api.KubeconfigSource(api.SecretRef("kubeconfig"))),
    ]
)
ready_only = st.builds(
    api.Condition,
    type=st.just("Ready"),
    status=st.sampled_from(["True", "False"]),
    reason=st.sampled_from([Reason.READY, Reason.UNREACHABLE, Reason.CLUSTER_CONFLICT]),
    message=st.just("as found"),
    last_transition_time=st.just(EARLY),
)
fleet_clusters = st.builds(
    api.Cluster,
    metas,
    specs,
    st.builds(
        api.ClusterStatus,
        server=st.none() | st.sampled_from(["https://a.example:6443", "https://a.example:6443/"]),
        conditions=st.lists(ready_only, max_size=1).map(tuple),
    ),
)
fleets = st.lists(fleet_clusters, max_size=6, unique_by=lambda c: c.metadata.name).map(
    lambda found: sorted(found, key=lambda c: c.metadata.name)
)
selector_specs = st.sampled_from(
    [
        None,
        {},
        {"matchLabels": {"env": "prod"}},
        {"matchExpressions": [{"key": "env", "operator": "Has"}]},
    ]
)
environments = st.builds(
    api.Environment, metas, st.builds(api.EnvironmentSpec, selector_specs), environment_statuses
)
invalid_environments = st.builds(api.Invalid, metas, words, st.none() | environment_statuses)

# --- a Cluster's statuses, and what its checks find ---------------------------------------------

cluster_statuses = st.builds(
    api.ClusterStatus,
    server=st.none()
    | st.sampled_from(["https://a.example:6443", "https://kubernetes.default.svc"]),
    kubernetes_version=st.none() | st.sampled_from(["v1.36.3", "v1.28.0+k3s1"]),
    observed_generation=st.none() | st.integers(0, 2**40),
    conditions=condition_lists,
)
clusters = st.builds(api.Cluster, metas, specs, cluster_statuses)
invalid_clusters = st.builds(api.Invalid, metas, words, st.none() | cluster_statuses)
outcomes = st.sampled_from(list(Reason)).flatmap(
    lambda reason: st.builds(
        Outcome,
        ok=st.just(reason is Reason.READY),  # an Outcome holds ok exactly when Ready
        reason=st.just(reason),
        message=words,
        server=st.none() | st.sampled_from(["https://a.example:6443", "https://b.example/"]),
        kubernetes_version=st.none() | st.just("v1.36.3"),
    )
)
conflicts = st.none() | st.sampled_from(["server https://a.example:6443 is held by Cluster x/y"])
conflict_reasons = st.sampled_from([Reason.CLUSTER_CONFLICT, Reason.REGISTRATION_FAILED])
