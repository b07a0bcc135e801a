"""``kokumi cluster import --from argocd``: Argo CD's cluster Secrets become Clusters, and the
report of what the new registration carries before anybody deletes the old Secret.

An ApplicationSet's cluster generator selects clusters by the labels of their Argo CD Secrets and
hands their labels and annotations to templates. Kokumi's Secret for the new Cluster carries only
what the manager's allow-list names (``--carry-labels``, ``--carry-annotations``,
:mod:`kokumi.core.registry.carry`), so deleting the old Secret while one of its labels is not
carried can make an ApplicationSet stop matching the cluster, and Argo CD then deletes the
Applications it generated, and with its resources finalizer what they deployed. The import says,
per Secret, what is carried and what is not, and withholds the deletion while a label would be
lost. Argo CD's ``namespaces`` and ``clusterResources`` become the Cluster's ``spec.scope``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kokumi.cmd.cluster.errors import api_error
from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection, KubeconfigRefused
from kokumi.core.kubeconfig.reader import minimise, render
from kokumi.core.registry import argocd
from kokumi.core.registry.carry import NOTHING, Carry, is_reserved
from kokumi.core.registry.ownership import is_argocd_own
from kokumi.kube.client import Client
from kokumi.kube.errors import KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.objects import secret_data
from kokumi.workspace.newcluster import (
    SECRET_KEY,
    Refused,
    Source,
    add_cluster,
    check_cluster,
    cluster_object,
    kubeconfig_secret_name,
)

__all__ = [
    "Carried",
    "ImportResult",
    "argocd_connection",
    "carried",
    "cluster_name_for",
    "import_argocd",
    "in_the_way",
    "scope_of",
]


@attrs.frozen
class ImportResult:
    """What became of one Secret found by ``import``: imported, kept, or why not."""

    source: str  # namespace/name of the Secret
    cluster: str | None  # the Cluster it became (or would become)
    state: str  # imported, updated, exists, not importable, failed
    detail: str = ""
    next_step: str = ""
    report: tuple[str, ...] = ()  # what the new registration carries of the old, line by line
    withheld: bool = False  # the old Secret must stay: deleting it would lose a label

    def lines(self, dry_run: bool) -> list[str]:
        if self.cluster is not None and self.state in ("imported", "updated"):
            verb = "would be imported" if dry_run else self.state
            head = f"{self.source}: {verb} as Cluster {self.cluster}"
        else:
            head = f"{self.source}: {self.state}"
        lines = [f"{head}: {self.detail}" if self.detail else head]
        lines += [f"  {line}" for line in self.report]
        if self.next_step:
            lines.append(f"  {'keep it' if self.withheld else 'next'}: {self.next_step}")
        return lines


_ARGOCD_LABELS: Final = "argocd.argoproj.io/"
# Annotations tools write for themselves: Argo CD's mark on the Secrets it writes, kubectl's copy
# of what was applied (which holds the Secret's config). Never a template's input; not reported.
_TOOLS_ANNOTATIONS: Final = ("kubectl.kubernetes.io/", "managed-by")

_INSTEAD: Final = "use kokumi cluster add --create-service-account"


def argocd_connection(secret: Mapping[str, Any]) -> Connection | str:
    """The connection an Argo CD cluster Secret describes, or why Kokumi cannot carry it over.

    Read as Argo CD reads it (:func:`kokumi.core.registry.argocd.config_from_secret`), in Argo CD's
    order of precedence: AWS authentication, then an exec plugin, then basic auth or a bearer token.
    """
    server = argocd.server_of(secret)
    if server is None:
        return "it names no server: Argo CD ignores it too"
    if is_argocd_own(server):
        return (
            f"it is Argo CD's own cluster ({server}), reached with Argo CD's own "
            "connection: add a Cluster with --in-cluster instead"
        )
    try:
        config = argocd.config_from_secret(secret)
    except ValueError as exc:
        return f"Argo CD cannot read its config either ({exc})"
    if config["awsAuthConfig"]:
        return (
            "it signs in with awsAuthConfig (AWS IAM), which runs a program Kokumi does not "
            f"run: {_INSTEAD}"
        )
    if config["execProviderConfig"]:
        return (
            "it signs in with execProviderConfig (an exec credential plugin), which Kokumi does "
            f"not run: {_INSTEAD}"
        )
    if config["username"] or config["password"]:
        return (
            f"it signs in with username and password, which Kubernetes does not offer: {_INSTEAD}"
        )
    tls = config["tlsClientConfig"]
    return Connection(
        server=server,
        token=config["bearerToken"] or None,
        client_certificate=tls["certData"] or None,
        client_key=tls["keyData"] or None,
        certificate_authority=tls["caData"] or None,
        tls_server_name=tls["serverName"] or None,
        insecure_skip_tls_verify=tls["insecure"],
        proxy_url=config["proxyUrl"] or None,
    )


def cluster_name_for(text: str) -> str:
    """A DNS label from an Argo CD cluster name: lowercase, '-' for the rest, at most 63."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].strip("-") or "cluster"


def scope_of(secret: Mapping[str, Any]) -> api.Scope | None:
    """The ``spec.scope`` of Argo CD's ``namespaces`` (comma-separated) and ``clusterResources``.

    Without namespaces Argo CD works cluster-wide and ignores ``clusterResources``: no scope.
    """
    text = (secret_data(secret, "namespaces") or b"").decode("utf-8", "replace")
    namespaces = tuple(n.strip() for n in text.split(",") if n.strip())
    if not namespaces:
        return None
    whole = (secret_data(secret, "clusterResources") or b"").decode("utf-8", "replace")
    return api.Scope(namespaces, whole.strip().lower() == "true")


@attrs.frozen
class Carried:
    """What the new registration's Argo CD Secret carries of the old one's labels and
    annotations, by key (values are never shown: an annotation may hold anything)."""

    labels: tuple[str, ...]
    labels_lost: tuple[str, ...]
    annotations: tuple[str, ...]
    annotations_lost: tuple[str, ...]

    def report(self) -> list[str]:
        def keys(found: Sequence[str]) -> str:
            return ", ".join(found) if found else "none"

        lines = [f"labels carried onto its Argo CD Secret: {keys(self.labels)}"]
        if self.labels_lost:
            lines.append(f"labels not carried: {keys(self.labels_lost)}")
        if self.annotations or self.annotations_lost:
            lines.append(f"annotations carried: {keys(self.annotations)}")
        if self.annotations_lost:
            lines.append(
                f"annotations not carried: {keys(self.annotations_lost)} (a template reading "
                "them gets nothing: add them to the manager's --carry-annotations and here)"
            )
        return lines


def carried(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    carry_labels: Carry,
    carry_annotations: Carry,
) -> Carried:
    """Which of the old Secret's labels and annotations the manager's allow-lists carry.

    Argo CD's own keys (``argocd.argoproj.io/*``) and Kokumi's are never lost: Kokumi's Secret
    writes its own. Neither are the annotations tools write for themselves.
    """
    label_keys = sorted(k for k in labels if not is_reserved(k))
    annotation_keys = sorted(
        k
        for k in annotations
        if not is_reserved(k) and not any(k.startswith(t) for t in _TOOLS_ANNOTATIONS)
    )
    return Carried(
        tuple(k for k in label_keys if carry_labels.matches(k)),
        tuple(k for k in label_keys if not carry_labels.matches(k)),
        tuple(k for k in annotation_keys if carry_annotations.matches(k)),
        tuple(k for k in annotation_keys if not carry_annotations.matches(k)),
    )


def _withheld(lost: Sequence[str], carry_labels: Carry) -> str:
    """Why the old Secret must stay, and the fix: the lost labels in both allow-lists."""
    wanted = ",".join([*carry_labels.patterns(), *lost])
    return (
        f"do not delete the old Argo CD Secret yet: its labels {', '.join(lost)} would be lost, "
        "and an ApplicationSet selecting on them would stop matching the cluster and delete the "
        f"Applications it made; add them to the manager's --carry-labels, then run this import "
        f"again with --carry-labels {wanted}"
    )


async def in_the_way(
    hub: Client,
    namespace: str,
    name: str,
    secret: str,
    key: str = SECRET_KEY,
    context: str | None = None,
) -> tuple[bool, str | None]:
    """Whether the Cluster ``name`` exists, and why an import may not write it (None: it may).

    An import never re-points a Cluster somebody made otherwise: that would swap its credential.
    A Cluster that reads ``secret`` already is the one an earlier import made.
    """
    where = f"{namespace}/{name}"
    try:
        existing = await hub.get(api.CLUSTERS, name, namespace=namespace)
    except NotFound:
        return False, None
    except KubeError as exc:
        return False, str(api_error(f"cannot read Cluster {where}", exc))
    kubeconfig = (existing.get("spec") or {}).get("kubeconfig") or {}
    ref = kubeconfig.get("secretRef") or {}
    if (
        ref.get("name") == secret
        and ref.get("key", SECRET_KEY) == key
        and kubeconfig.get("context") == context
    ):
        return True, None
    return True, (
        f"Cluster {where} exists and reads another Secret: rename or delete it to import this one"
    )


async def import_argocd(
    hub: Client,
    namespace: str,
    argocd_namespace: str,
    *,
    dry_run: bool,
    carry_labels: Carry = NOTHING,
    carry_annotations: Carry = NOTHING,
) -> list[ImportResult]:
    """Each cluster Secret of Argo CD's that Kokumi did not write becomes a kubeconfig + Cluster.

    The old Secret is left alone: Kokumi never takes over a cluster Argo CD already knows. Until
    somebody deletes it, the new Cluster reports ClusterConflict naming it, hence the next step,
    which is withheld while a label of the old Secret would not be carried.
    ``carry_labels`` and ``carry_annotations`` are the manager's allow-lists, as the user says.
    """
    try:
        listing = await hub.list(
            SECRETS,
            namespace=argocd_namespace,
            label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
        )
    except KubeError as exc:
        what = f"cannot list Argo CD's cluster Secrets in {argocd_namespace}"
        raise api_error(what, exc) from None
    outcomes = []
    taken: set[str] = set()
    for secret in sorted(listing["items"], key=lambda s: s["metadata"]["name"]):
        meta = secret["metadata"]
        if argocd.is_ours(secret):
            continue
        source = f"{argocd_namespace}/{meta['name']}"
        found = argocd_connection(secret)
        if isinstance(found, str):
            outcomes.append(ImportResult(source, None, "not importable", found))
            continue
        label = (secret_data(secret, "name") or b"").decode("utf-8", "replace")
        name = base = cluster_name_for(label or meta["name"])
        number = 2
        while name in taken:
            suffix = f"-{number}"
            name, number = base[: 63 - len(suffix)] + suffix, number + 1
        taken.add(name)
        outcomes.append(
            await _import_one(
                hub, namespace, secret, name, found, dry_run, carry_labels, carry_annotations
            )
        )
    return outcomes


async def _import_one(
    hub: Client,
    namespace: str,
    secret: Mapping[str, Any],
    name: str,
    found: Connection,
    dry_run: bool,
    carry_labels: Carry,
    carry_annotations: Carry,
) -> ImportResult:
    meta = secret["metadata"]
    source = f"{meta.get('namespace')}/{meta['name']}"
    where = f"{namespace}/{name}"
    try:
        text = minimise(render(found, context=name, cluster=name, user=name))
    except KubeconfigRefused as refused:
        return ImportResult(source, None, "not importable", refused.refusal.message)
    scope = scope_of(secret)
    if scope is not None:
        try:
            check_cluster(
                cluster_object(name, namespace, secret=kubeconfig_secret_name(name), scope=scope)
            )
        except Refused as refused:
            said = str(refused).replace("spec.scope.namespaces", "its namespaces")
            return ImportResult(source, where, "not importable", said)
    labels = {
        k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(_ARGOCD_LABELS)
    }
    annotations = meta.get("annotations") or {}
    # The Cluster takes the annotations the manager carries, so that its Secret has them again.
    kept = carry_annotations.pick(
        {k: v for k, v in annotations.items() if not k.startswith(_TOOLS_ANNOTATIONS)}
    )
    _, blocked = await in_the_way(hub, namespace, name, kubeconfig_secret_name(name))
    if blocked is not None:
        return ImportResult(source, where, "failed", blocked)
    state = "imported"
    if not dry_run:
        try:
            added = await add_cluster(
                hub,
                name,
                namespace,
                Source(found.server, text),
                labels=labels,
                description=f"Imported from Argo CD Secret {source}",
                scope=scope,
                annotations=kept,
            )
        except Refused as error:
            return ImportResult(source, where, "failed", str(error))
        state = "imported" if added.cluster_created else "updated"
    detail = f"Secret {kubeconfig_secret_name(name)}, server {found.server}"
    what = carried(labels, annotations, carry_labels, carry_annotations)
    report = what.report()
    if scope is not None:
        also = " and cluster-scoped resources" if scope.cluster_resources else ""
        report.append(
            f"namespaces {','.join(scope.namespaces)}{also}: kept as the Cluster's spec.scope"
        )
    if what.labels_lost:
        return ImportResult(
            source, where, state, detail, _withheld(what.labels_lost, carry_labels),
            tuple(report), withheld=True,
        )  # fmt: skip
    next_step = (
        "delete the old Argo CD Secret so Kokumi can take the server over: "
        f"kubectl delete secret {meta['name']} -n {meta.get('namespace')}"
    )
    return ImportResult(source, where, state, detail, next_step, tuple(report))
