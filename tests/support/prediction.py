"""What the spec predicts from the objects alone, once the manager has settled.

One predictor for every test that checks convergence: the model test (in-process manager on the fake
hub) and the chaos test (a real manager process on the real hub) both hand it the objects they read
and a ``probe`` that says what the check of a connection finds, and both get the same verdict. It
uses the pure core only (``kokumi.core.api``, ``kokumi.core.environments.selectors``,
``kokumi.core.kubeconfig``, ``kokumi.core.registry.ownership``, ``kokumi.core.registry.argocd``'s
naming), never the actors it judges.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from kokumi.core import api
from kokumi.core.environments import selectors, targets
from kokumi.core.environments.status import LISTED
from kokumi.core.kubeconfig.connection import Connection, Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.core.registry import argocd, handover
from kokumi.core.registry.carry import NOT_CARRYING, Carrying, Extras
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER, ClusterRef, normalise_server

__all__ = ["Counts", "Objects", "check_converged", "check_environments"]

Probe = Callable[[Connection], str]
"""The Ready reason a check of this connection finds: "Ready", "Unreachable", "Unauthorized"..."""


@attrs.frozen
class Objects:
    """The hub's objects that decide the outcome: Clusters, Environments, the workspaces'
    Secrets by (namespace, name), and every Secret in Argo CD's namespace."""

    clusters: list[dict[str, Any]]
    environments: list[dict[str, Any]]
    secrets: Mapping[tuple[str, str], dict[str, Any]]
    argocd_secrets: list[dict[str, Any]]
    argocd_namespace: str

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.secrets.get((namespace, name))


@attrs.define
class Counts:
    """What one convergence check saw, for tests that report how much they proved."""

    holders: int = 0
    waiters: int = 0
    blocked: int = 0


def _connection(objects: Objects, cluster: api.Cluster) -> Connection | Refusal | None:
    """The parsed kubeconfig of a Kubeconfig Cluster; None when its Secret or key is missing."""
    assert cluster.secret_ref is not None
    secret = objects.secret(cluster.metadata.namespace, cluster.secret_ref.name)
    raw = (secret or {}).get("data", {}).get(cluster.secret_ref.key)
    if raw is None:
        return None
    return parse(base64.b64decode(raw).decode())


def wants(objects: Objects) -> dict[ClusterRef, tuple[str, Connection]]:
    """Each Cluster that should hold or wait for a server now, per the objects alone."""
    environments: dict[str, list[selectors.Selector]] = {}
    for env in objects.environments:
        parsed = api.parse_environment(env)
        if isinstance(parsed, api.Environment):
            selector = selectors.parse(parsed.spec.cluster_selector)
            if isinstance(selector, selectors.Selector):
                environments.setdefault(parsed.metadata.namespace, []).append(selector)
    found: dict[ClusterRef, tuple[str, Connection]] = {}
    for obj in objects.clusters:
        cluster = api.parse_cluster(obj)
        if not isinstance(cluster, api.Cluster) or cluster.metadata.deletion_timestamp:
            continue
        ref = ClusterRef(cluster.metadata.namespace, cluster.metadata.name)
        chosen = any(
            sel.matches(cluster.metadata.labels) for sel in environments.get(ref.namespace, ())
        )
        if not chosen or cluster.secret_ref is None:
            continue
        connection = _connection(objects, cluster)
        if not isinstance(connection, Connection):
            continue
        server = normalise_server(connection.server)
        if server != IN_CLUSTER_SERVER:
            found[ref] = (server, connection)
    return found


def blocked(objects: Objects, servers: Iterable[str]) -> set[str]:
    """Servers a Secret that Kokumi did not write registers, or whose name it takes."""
    out: set[str] = set()
    for secret in objects.argocd_secrets:
        if argocd.is_ours(secret):
            continue
        server = argocd.server_of(secret)
        if server is not None:
            out.add(normalise_server(server))
        for candidate in servers:
            normal = normalise_server(candidate)
            if secret["metadata"]["name"] == argocd.secret_name(normal):
                out.add(normal)
    return out


def ours(objects: Objects) -> dict[str, dict[str, Any]]:
    return {
        secret["metadata"]["name"]: secret
        for secret in objects.argocd_secrets
        if argocd.is_ours(secret)
    }


def selecting(objects: Objects, cluster: api.Cluster) -> tuple[str, ...]:
    """The Environments of the Cluster's namespace that select it, by name."""
    names = set()
    for env in objects.environments:
        parsed = api.parse_environment(env)
        if not isinstance(parsed, api.Environment):
            continue
        if parsed.metadata.namespace != cluster.metadata.namespace:
            continue
        selector = selectors.parse(parsed.spec.cluster_selector)
        if isinstance(selector, selectors.Selector) and selector.matches(cluster.metadata.labels):
            names.add(parsed.metadata.name)
    return tuple(sorted(names))


def extras_of(objects: Objects, holder: ClusterRef, carry: Carrying) -> Extras:
    """What the holder's registration carries, per its object, its Environments and ``carry``."""
    for obj in objects.clusters:
        meta = obj["metadata"]
        if (meta["namespace"], meta["name"]) == (holder.namespace, holder.name):
            cluster = api.parse_cluster(obj, annotations=carry.annotations.matches)
            assert isinstance(cluster, api.Cluster), holder
            return carry.extras(cluster, selecting(objects, cluster))
    raise AssertionError(f"{holder} holds a server but has no object")


def _check_carried(secret: Mapping[str, Any], desired: Mapping[str, Any], holder: object) -> None:
    """The Secret carries exactly what the holder carries: each desired label and annotation,
    and no extra of Kokumi's beside them (a label somebody else put there may stay)."""
    labels = secret["metadata"].get("labels") or {}
    wanted = desired["metadata"]["labels"]
    for key in set(wanted) | argocd.carried_label_keys(secret):
        assert labels.get(key) == wanted.get(key), f"{holder}'s Secret: label {key}"
    annotations = secret["metadata"].get("annotations") or {}
    wanted = desired["metadata"].get("annotations") or {}
    for key in set(wanted) | argocd.carried_annotation_keys(secret):
        assert annotations.get(key) == wanted.get(key), f"{holder}'s Secret: annotation {key}"


def check_converged(
    objects: Objects, servers: Iterable[str], probe: Probe, carry: Carrying = NOT_CARRYING
) -> Counts:
    """Assert the settled state: exactly the servers wanted and not blocked have a Secret, held
    by one of their wanters with its current connection and what it carries (per ``carry``,
    the manager's allow-lists) and naming the others as waiting; holders carry the finalizer,
    and no Cluster that wants no server; no Cluster is stuck terminating; each Cluster's Ready
    reason is the one its objects and its spoke call for."""
    wanted = wants(objects)
    stopped = blocked(objects, servers)
    secrets = ours(objects)
    by_server: dict[str, list[ClusterRef]] = {}
    for ref, (server, _) in wanted.items():
        by_server.setdefault(server, []).append(ref)
    expected = {server for server in by_server if server not in stopped}
    have = {normalise_server(argocd.server_of(sec) or "") for sec in secrets.values()}
    assert have == expected, f"Secrets for {sorted(have)}, expected {sorted(expected)}"
    counts = Counts(len(have), len(wanted) - len(have), len(set(by_server) & stopped))
    holders: dict[ClusterRef, str] = {}
    for secret in secrets.values():
        server = normalise_server(argocd.server_of(secret) or "")
        holder = argocd.holder_of(secret)
        assert holder in by_server[server], f"{holder} holds {server} but does not want it"
        assert holder is not None
        holders[holder] = server
        desired = argocd.cluster_secret(
            wanted[holder][1],
            holder,
            objects.argocd_namespace,
            extras_of(objects, holder, carry),
        )
        assert secret["data"] == desired["data"], f"{holder}'s Secret has an old connection"
        _check_carried(secret, desired, holder)
        waiting = set(handover.waiting_of(secret))
        assert waiting == set(by_server[server]) - {holder}, f"{server}: waiting {waiting}"
    for obj in objects.clusters:
        cluster = api.parse_cluster(obj)
        ref = ClusterRef(cluster.metadata.namespace, cluster.metadata.name)
        assert not cluster.metadata.deletion_timestamp, f"{ref} is stuck terminating"
        has_finalizer = api.FINALIZER in cluster.metadata.finalizers
        if ref in holders or ref not in wanted:
            # A Cluster waiting in a server's line keeps a finalizer it had (the lifecycle's
            # finalizer_step); every other Cluster has one exactly while it holds.
            assert has_finalizer == (ref in holders), f"{ref}: finalizer {has_finalizer}"
        if not isinstance(cluster, api.Cluster):
            conditions = obj.get("status", {}).get("conditions") or []
            assert [c.get("reason") for c in conditions] == [cluster.reason], ref
            continue
        ready = cluster.ready
        assert ready is not None, f"{ref} has no Ready condition"
        expected_reason = reason(objects, cluster, ref, wanted, holders, probe)
        assert ready.reason == expected_reason, (
            f"{ref}: {ready.reason} (expected {expected_reason}): {ready.message}"
        )
    return counts


def reason(
    objects: Objects,
    cluster: api.Cluster,
    ref: ClusterRef,
    wanted: Mapping[ClusterRef, tuple[str, Connection]],
    holders: Mapping[ClusterRef, str],
    probe: Probe,
) -> str:
    """The Ready reason the spec calls for, from the objects, the spoke and who holds what."""
    if cluster.spec.connection == "InCluster":
        return "Ready"
    assert cluster.secret_ref is not None
    secret = objects.secret(ref.namespace, cluster.secret_ref.name)
    if secret is None:
        return "SecretNotFound"
    if cluster.secret_ref.key not in (secret.get("data") or {}):
        return "SecretKeyNotFound"
    parsed = _connection(objects, cluster)
    if not isinstance(parsed, Connection):
        return "InvalidKubeconfig"
    found = probe(parsed)
    if found != "Ready":
        return found
    if ref in wanted and ref not in holders:
        return "ClusterConflict"
    return "Ready"


def check_environments(objects: Objects) -> int:
    """Assert every Environment's status: its selected Clusters, their targets (by the pure
    ``kokumi.core.environments.targets`` from the Clusters' own statuses) and its Ready reason. How
    many targets it checked."""
    checked = 0
    clusters = [api.parse_cluster(obj) for obj in objects.clusters]
    for obj in objects.environments:
        environment = api.parse_environment(obj)
        assert isinstance(environment, api.Environment), obj["metadata"]
        ref = f"Environment {environment.metadata.namespace}/{environment.metadata.name}"
        status = environment.status
        assert status.observed_generation == environment.metadata.generation, ref
        selector = selectors.parse(environment.spec.cluster_selector)
        assert isinstance(selector, selectors.Selector), ref
        selected = sorted(
            (
                c
                for c in clusters
                if isinstance(c, api.Cluster)
                and c.metadata.namespace == environment.metadata.namespace
                and selector.matches(c.metadata.labels)
            ),
            key=lambda c: c.metadata.name,
        )
        found = targets.targets([targets.selected_cluster(c) for c in selected])
        # The status names only the Clusters that do not deploy (the first LISTED by name), and
        # counts the rest.
        expected = []
        for target, cluster in zip(found, selected, strict=True):
            if isinstance(target, targets.Deploy):
                continue
            reason_of: str = target.reason
            if isinstance(target, targets.ClusterNotReady):
                reason_of = cluster.ready.reason if cluster.ready is not None else "NotChecked"
            expected.append((target.cluster, target.reason, reason_of))
        have = [(t.name, t.target, t.reason) for t in status.clusters]
        assert have == expected[:LISTED], f"{ref}: targets {have}, expected {expected}"
        deploying = sum(1 for t in found if isinstance(t, targets.Deploy))
        counts = (status.selected, status.deploying, status.more)
        want_counts = (len(selected), deploying, max(0, len(expected) - LISTED))
        assert counts == want_counts, (
            f"{ref}: selected/deploying/more {counts}, expected {want_counts}"
        )
        ready = next((c for c in status.conditions if c.type == "Ready"), None)
        assert ready is not None, f"{ref} has no Ready condition"
        want = "NoClusters" if not selected else "NoClusterReady" if not deploying else "Ready"
        assert ready.reason == want, f"{ref}: {ready.reason}, expected {want}"
        checked += len(found)
    return checked
