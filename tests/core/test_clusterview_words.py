"""What the Clusters' pages say in words, decided in :mod:`kokumi.core.clusterview`: the
registration a namespace user can know, where a list came from, a narrowed count, an RBAC
refusal. Each is what a person reads on the page, so each is checked as the sentence."""

from __future__ import annotations

from typing import Any

import pytest

from kokumi.core import api, clusterview
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import ClusterRef

SERVER = "https://10.9.8.7:6443"


def _cluster(reason: str = "", message: str = "", *, holding: bool = False) -> dict[str, Any]:
    conditions = (
        [{"type": "Ready", "status": "True" if reason == "Ready" else "False", "reason": reason,
          "message": message}] if reason else []
    )  # fmt: skip
    return {
        "metadata": {"name": "edge", "namespace": "team-a",
                     "finalizers": [api.FINALIZER] if holding else []},
        "spec": {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": "edge"}}},
        "status": {"server": SERVER, "conditions": conditions},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("cluster", "said"),
    [
        (_cluster("Ready", "connected", holding=True), "registered: Secret argocd/"),
        (_cluster("Unreachable", "refused", holding=True), "registered: Secret argocd/"),
        (_cluster("ClusterConflict", f"server {SERVER} is held by Cluster team-b/core; this "
                  "Cluster takes it over once that Cluster lets go of it"),
         f"waiting: server {SERVER} is held by Cluster team-b/core"),
        (_cluster("RegistrationPending", "handed"), f"waiting: {SERVER} is handed to this"),
        (_cluster("RegistrationFailed", "registering with Argo CD failed (ServerError, HTTP "
                  "500); Kokumi retries"), "not registered yet: registering with Argo CD failed"),
        (_cluster("Ready", "connected"), "not registered: Kokumi registers the Cluster with "
         "Argo CD once an Environment selects it"),
        (_cluster("TLSError", "bad CA"), "not registered: Kokumi registers the Cluster once it "
         "is Ready (TLSError now)"),
    ],
)  # fmt: skip
def test_a_user_who_may_not_read_argocd_is_told_the_registration_from_the_status(
    cluster: dict[str, Any], said: str
) -> None:
    line = clusterview.registration(cluster, None, "argocd")
    assert line.startswith(said), line
    assert "unknown" not in line and "may not" not in line


def test_registered_names_the_secret_argo_cd_reads() -> None:
    line = clusterview.registration(_cluster("Ready", "ok", holding=True), None, "argocd")
    name = argocd.secret_name(SERVER)
    assert line == (
        f"registered: Secret argocd/{name} registers this Cluster with Argo CD as "
        f"{argocd.cluster_name(ClusterRef('team-a', 'edge'), SERVER)}"
    )


def test_one_namespace_is_said_as_one() -> None:
    assert clusterview.scope(["team-a"], ["team-a", "team-b"]) == "namespace team-a"
    assert clusterview.scope(["team-a", "team-b"], ["team-a", "team-b"]) == (
        "namespaces team-a, team-b"
    )
    assert clusterview.scope([], ["team-a"]) == "the namespace looked in"
    assert clusterview.scope([], ["a", "b"]) == "the 2 looked in"
    assert clusterview.scope([], []) == "no namespace you may list"


def test_a_count_narrowed_by_a_selector_says_so() -> None:
    assert clusterview.narrowed(3, "all namespaces", "env=prod") == (
        "3 Clusters matching env=prod in all namespaces"
    )
    assert clusterview.narrowed(1, "namespace a", "") == "1 Cluster in namespace a"
    assert clusterview.narrowed(30_000, "all namespaces", "") == "30,000 Clusters in all namespaces"
    assert clusterview.narrowed(2, "all namespaces", "", status_filtered=True) == (
        "2 Clusters matching the filter in all namespaces"
    )


def test_a_refusal_by_rbac_names_the_namespace_and_the_grant_missing() -> None:
    line = clusterview.forbidden("list", "Clusters", "team-b", "alice@example.com")
    assert line.startswith(
        "You may not list Clusters in namespace team-b: your RBAC grants no list on "
        "clusters.delivery.kokumi.dev there."
    )
    assert (
        "kubectl -n team-b create rolebinding kokumi-view --clusterrole=kokumi-delivery-view "
        "--user=alice@example.com" in line
    )
    assert "\n" not in line and "forbidden" not in line
