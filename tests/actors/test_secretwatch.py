"""SecretWatches' bookkeeping and the fix it names without a server, and its cluster-wide mode live.

tests/deploy/test_manager.py runs it as the real ServiceAccount: refused, then bound, then
stopped with the namespace's last Kubeconfig Cluster.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from kokumi.actors.secretwatch import (
    SecretWatches,
    binding_command,
    not_readable_message,
    subject_flag,
)
from kokumi.core import limits
from kokumi.core.secretaccess import SecretScope
from kokumi.kube.resources import SECRETS
from kokumi.kube.watch import Resync, WatchEvent
from kokumi.testing.controlplane import APIServer
from kokumi.testing.spoke import BAD_TOKEN, Registration
from tests.support.manager import manager, wait_reason, workspace


def secret(namespace: str, name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version}}


def test_the_fix_names_the_manager_as_the_hub_knows_it() -> None:
    assert subject_flag("system:serviceaccount:ops:kokumi-clusters") == (
        "--serviceaccount=ops:kokumi-clusters"
    )
    assert subject_flag("jane@example.com") == "--user=jane@example.com"
    assert subject_flag(None) == "--serviceaccount=kokumi:kokumi"
    assert binding_command("platform", "system:serviceaccount:kokumi:kokumi") == (
        "kubectl -n platform create rolebinding kokumi-manager-secrets"
        " --clusterrole=kokumi-manager-secrets --serviceaccount=kokumi:kokumi"
    )
    message = not_readable_message("edge", "platform", None)
    assert message.startswith("Kokumi may not read Secret edge in namespace platform: bind it")


def test_where_a_binding_is_refused_the_fix_is_to_move_the_cluster() -> None:
    for namespace in ("ops-kokumi", "kokumi-signing"):
        message = not_readable_message("edge", namespace, None, own_namespace="ops-kokumi")
        assert message == (
            f"Kokumi may not read Secret edge in namespace {namespace}, and never will: the"
            " session signing key and login Secrets live there; keep Kubeconfig Clusters and"
            " their Secrets in a workspace of their own"
        )


def test_a_namespace_resync_touches_that_namespace_only() -> None:
    versions: dict[tuple[str, str], str] = {("b", "kept"): "5"}
    told: list[tuple[tuple[str, str], bool]] = []
    watches = SecretWatches(None, versions, lambda key, first: told.append((key, first)))  # type: ignore[arg-type]
    watches._apply("a", Resync((secret("a", "x", "1"), secret("a", "y", "2"))), True)
    assert versions == {("b", "kept"): "5", ("a", "x"): "1", ("a", "y"): "2"}
    assert sorted(told) == [(("a", "x"), True), (("a", "y"), True)]
    told.clear()
    watches._apply("a", WatchEvent("MODIFIED", secret("a", "x", "3")), False)
    assert told == [(("a", "x"), False)]
    told.clear()
    watches._apply("a", Resync((secret("a", "x", "3"),)), False)  # y deleted while away
    assert versions == {("b", "kept"): "5", ("a", "x"): "3"}
    assert told == [(("a", "y"), False)]


def test_the_labels_and_owners_of_kept_secrets_follow_every_change() -> None:
    """A ClusterSource imports a Secret only while its Cluster API cluster controls it: an owner
    taken away (a new version, no other change) must reach it as the owner given did."""
    label = "cluster.x-k8s.io/cluster-name"
    owner = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "w",
             "uid": "u", "controller": True}  # fmt: skip

    def capi(version: str, owners: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, Any]:
        body = secret("a", "w-kubeconfig", version)
        body["metadata"].update(labels=labels, ownerReferences=owners)
        return body

    watches = SecretWatches(
        None,  # type: ignore[arg-type]
        {},
        lambda key, first: None,
        keep_labels=frozenset({label}),
    )
    key = ("a", "w-kubeconfig")
    watches._apply("a", Resync((capi("1", [owner], {label: "w"}),)), True)
    assert (watches.labels[key], watches.owners[key]) == ({label: "w"}, [owner])
    watches._apply("a", WatchEvent("MODIFIED", capi("2", [], {label: "w"})), False)
    assert watches.owners[key] == []
    watches._apply("a", WatchEvent("MODIFIED", capi("3", [owner], {})), False)  # not kept
    assert key not in watches.labels and key not in watches.owners
    watches._apply("a", WatchEvent("MODIFIED", capi("4", [owner], {label: "w"})), False)
    watches._apply("a", WatchEvent("DELETED", capi("5", [owner], {label: "w"})), False)
    assert key not in watches.owners
    watches._apply("a", Resync((capi("6", [owner], {label: "w"}),)), False)
    watches._apply("a", Resync(()), False)  # deleted while away
    assert watches.owners == {}


def test_a_cluster_wide_resync_is_the_whole_truth() -> None:
    versions = {("b", "gone"): "5"}
    watches = SecretWatches(
        None,  # type: ignore[arg-type]
        versions,
        lambda key, first: None,
        scope=SecretScope.CLUSTER,
    )
    watches._apply(None, Resync((secret("a", "x", "1"),)), True)
    assert versions == {("a", "x"): "1"}
    watches.hold("uid", "a")  # one watch for every namespace: nothing to start
    assert watches.namespaces == frozenset()


# --- on the real hub, as the admin (tests/deploy/test_manager.py runs the real identity) ------


async def test_cluster_scope_follows_every_namespace_with_one_watch(
    hub: APIServer, crds: object, spoke_kubeconfig: Registration
) -> None:
    """The opt-in: one watch, and a changed kubeconfig is still seen at once."""
    options_changes = {"keep_in_cluster": False, "secrets_scope": SecretScope.CLUSTER}
    async with workspace(hub) as ws, manager(hub, ws.options(**options_changes)) as running:
        watches = running.dispatcher.secret_watches
        assert watches.namespaces == {None}
        ns = await ws.namespace()
        secret = await ws.kubeconfig_secret(ns, "kc", spoke_kubeconfig.kubeconfig)
        await ws.cluster(ns, "spoke", secret="kc")
        await wait_reason(ws, ns, "spoke", "Ready")
        assert watches.namespaces == {None}
        bad = spoke_kubeconfig.variant(token=BAD_TOKEN)
        secret["data"] = {"value": base64.b64encode(bad.encode()).decode()}
        await ws.client.replace(SECRETS, secret, namespace=ns)
        # Well before the minute's check: the watch told the Cluster.
        await wait_reason(ws, ns, "spoke", "Unauthorized", timeout=20)
        await ws.cleanup()


def test_a_labelled_secret_over_the_bounds_keeps_no_labels_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``from: Secrets`` source selects by any label, so every labelled Secret's labels are
    kept: one written with 90,000 of them must not be, in the watch's form or as read."""
    many = {f"k{i}": "v" for i in range(limits.LABELS_MAX + 1)}

    def labelled(version: str, labels: dict[str, str]) -> dict[str, Any]:
        body = secret("a", "big", version)
        body["metadata"]["labels"] = labels
        return body

    watches = SecretWatches(None, {}, lambda key, first: None, keep_labelled=True)  # type: ignore[arg-type]
    key = ("a", "big")
    with caplog.at_level(logging.WARNING, logger="kokumi.actors.secretwatch"):
        watches._apply("a", Resync((limits.kept(labelled("1", many)),)), True)
        watches._apply("a", WatchEvent("MODIFIED", labelled("2", many)), False)
    assert key not in watches.labels and key not in watches.owners
    assert watches.over_bounds == {key}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Secret a/big is not read by any ClusterSource: metadata.labels has 65" in warnings[0]
    assert "k0" not in warnings[0]
    watches._apply("a", WatchEvent("MODIFIED", limits.kept(labelled("3", {"k0": "v"}))), False)
    assert watches.labels[key] == {"k0": "v"} and watches.over_bounds == set()
