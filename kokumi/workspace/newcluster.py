"""A new Cluster and its ``<name>-kubeconfig`` Secret, created as the signed-in user.

This is the one code path that registers a cluster: ``kokumi cluster add`` and ``import`` call it,
and so does the New Cluster form of ``kokumi ui``, so that both check and write exactly alike.
Nothing here parses a command line, prints or renders.

It builds the objects, checks the kubeconfig with :mod:`kokumi.core.kubeconfig` (the manager's own
reader, so a kubeconfig accepted here is one the manager accepts, and a refusal reads the same in
both places), refuses a ``<name>-kubeconfig`` Secret it did not write (overwriting it would hand
another credential to the Cluster), creates the Cluster first and then the Secret owned by it (so
that the Secret is deleted with the Cluster), deletes the Cluster again when the Secret cannot be
written, and turns a refusal of the API server or of an admission policy into one line
(:class:`Refused`). It never puts a token, a key or a kubeconfig into an error.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs

from kokumi.core import api
from kokumi.core.kubeconfig.connection import Connection, KubeconfigRefused, Refusal
from kokumi.core.kubeconfig.reader import examine, minimise, parse, render
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import is_argocd_own, normalise_server
from kokumi.core.text import one_line, quoted
from kokumi.kube.client import Client
from kokumi.kube.errors import AlreadyExists, ApiError, Conflict, Forbidden, KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.objects import Resource, metadata_of

__all__ = [
    "Added",
    "FIELD_MANAGER",
    "MAX_CLUSTER_NAME",
    "Refused",
    "SECRET_KEY",
    "SERVICE_ACCOUNT",
    "Source",
    "add_cluster",
    "api_error",
    "argocd_only",
    "check_cluster",
    "check_kubeconfig",
    "check_name",
    "check_namespace",
    "check_object_name",
    "cluster_object",
    "examine_kubeconfig",
    "kubeconfig_of_token",
    "kubeconfig_secret",
    "kubeconfig_secret_name",
    "refuse_argocds_own_cluster",
    "scope_object",
    "write",
    "written_here",
]

SECRET_KEY: Final = "value"  # noqa: S105 - a key's name, not a password
"""The key of the kubeconfig in the Secret: Cluster API's format, which Flux and Sveltos read."""

LABEL_MANAGED_BY: Final = argocd.LABEL_MANAGED_BY
WRITTEN_BY: Final = "kokumi-cli"
"""The mark of a kubeconfig Secret this tool wrote: only such a Secret may be overwritten."""

LABEL_CLUSTER: Final = argocd.LABEL_CLUSTER
FIELD_MANAGER: Final = "kokumi-cli"

SERVICE_ACCOUNT: Final = "kokumi"
"""Kokumi's ServiceAccount on a cluster, and the user's name in a kubeconfig of a token."""


_CONTEXT_PREFIX: Final = re.compile(r"^[A-Z]+ /\S*: ")


class Refused(Exception):
    """What was refused, in one line that says how to fix it; never a credential.

    The command line says it as ``kokumi: <line>`` and exits 1 (or 2 when nothing ran yet); the
    web UI shows it beside the form.
    """

    def __str__(self) -> str:
        return one_line(super().__str__())


def api_error(what: str, exc: KubeError) -> Refused:
    """The server's own words (an admission policy's message among them) after what was tried."""
    if isinstance(exc, ApiError):
        return Refused(f"{what}: {exc.reason}: {_CONTEXT_PREFIX.sub('', exc.message)}")
    return Refused(f"{what}: {exc}")


_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_CLUSTER_NAME: Final = 63
"""The longest Cluster name: Kokumi puts it into labels (the CRD refuses a longer one)."""


def check_name(name: str) -> None:
    """A Cluster's name must be a DNS label: refused before any request, in one line."""
    if len(name) > MAX_CLUSTER_NAME or not _NAME.fullmatch(name):
        raise Refused(
            f"Cluster name {name!r} is not a DNS label: use at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit"
        )


_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_RULE: Final = "at most 63 lowercase letters, digits and '-', starting and ending with one"


def check_namespace(namespace: str) -> None:
    """A namespace's name is a DNS label (RFC 1123), as Kubernetes validates it: refused in
    one line before it becomes part of a request's path, where ``..`` or ``.`` would name
    another resource than the one asked for."""
    if len(namespace) > 63 or not _NAME.fullmatch(namespace):
        raise Refused(
            f"namespace {quoted(namespace)} is not a DNS label, so no namespace has that name: "
            f"a namespace's name is {_LABEL_RULE}"
        )


def check_object_name(kind: str, name: str, limit: int = 253) -> None:
    """An object's name is a DNS subdomain (RFC 1123) of at most ``limit`` characters, as the
    API server validates a custom resource's (a Cluster's CRD also says 63): refused in one line
    before it becomes part of a request's path."""
    if len(name) > limit or not _SUBDOMAIN.fullmatch(name):
        raise Refused(
            f"{kind} name {quoted(name)} is not a DNS subdomain of at most {limit} characters, "
            f"so no {kind} has that name: a name is lowercase letters, digits, '-' and '.', "
            "each dot-separated part starting and ending with a letter or digit"
        )


def argocd_only(namespace: str) -> str:
    """Why ``kokumi cluster`` and ``kokumi ui`` never write in Argo CD's namespace, as their
    refusal says it (see :meth:`kokumi.kube.Client.read_only_in`)."""
    return (
        f"namespace {namespace} is Argo CD's, where only Kokumi's manager writes (the cluster "
        "Secrets Argo CD reads): put Clusters and their kubeconfig Secrets in a workspace namespace"
    )


def refuse_argocds_own_cluster(source: Source, how: str = "--in-cluster") -> None:
    """A kubeconfig of https://kubernetes.default.svc is Argo CD's own cluster: InCluster."""
    if source.server and is_argocd_own(source.server) and source.kubeconfig:
        raise Refused(
            f"server {normalise_server(source.server)} is the cluster Argo CD runs in: register "
            f"it with {how}"
        )


def kubeconfig_secret_name(cluster: str) -> str:
    """The Secret ``add`` keeps a Cluster's kubeconfig in, as the UI names it too."""
    return f"{cluster}-kubeconfig"


def cluster_object(
    name: str,
    namespace: str,
    *,
    secret: str | None,
    labels: Mapping[str, str] | None = None,
    description: str = "",
    scope: api.Scope | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Cluster reached with the kubeconfig in ``secret`` (key ``value``), or InCluster."""
    spec: dict[str, Any] = {"connection": "InCluster"}
    if secret is not None:
        spec = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": secret}}}
    if description:
        spec["description"] = description
    if scope is not None:
        spec["scope"] = scope_object(scope)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": api.API_VERSION, "kind": "Cluster", "metadata": metadata, "spec": spec}


def scope_object(scope: api.Scope) -> dict[str, Any]:
    """``spec.scope`` as the CRD writes it: ``clusterResources`` only when true, so that an
    object written here reads back as one written by hand with the same meaning."""
    written: dict[str, Any] = {"namespaces": list(scope.namespaces)}
    if scope.cluster_resources:
        written["clusterResources"] = True
    return written


def check_cluster(body: Mapping[str, Any]) -> None:
    """Refuse a would-be Cluster whose spec the manager would call Invalid, in the manager's own
    words (:func:`kokumi.core.api.parse_cluster`), before anything is written: the spec's rules
    live there once. Its labels are the API server's to judge, as they always were."""
    meta = metadata_of(body)
    parsed = api.parse_cluster(
        {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
         "spec": body.get("spec")}
    )  # fmt: skip
    if isinstance(parsed, api.Invalid):
        raise Refused(parsed.message)


def kubeconfig_secret(
    cluster: str, namespace: str, text: str, owner_uid: str | None = None
) -> dict[str, Any]:
    """The Secret ``<cluster>-kubeconfig``, marked as written by this tool, owned by the Cluster.

    The ownerReference makes the garbage collector delete the Secret with the Cluster; the mark
    is what a later ``add`` checks before it overwrites the Secret.
    """
    metadata: dict[str, Any] = {
        "name": kubeconfig_secret_name(cluster),
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: WRITTEN_BY, LABEL_CLUSTER: cluster},
    }
    if owner_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": api.API_VERSION, "kind": "Cluster", "name": cluster, "uid": owner_uid}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(text.encode()).decode("ascii")},
    }


def written_here(secret: Mapping[str, Any], cluster: str) -> bool:
    """Whether this tool wrote the Secret for this Cluster, and may therefore overwrite it."""
    labels = metadata_of(secret).get("labels") or {}
    return bool(labels.get(LABEL_MANAGED_BY) == WRITTEN_BY and labels.get(LABEL_CLUSTER) == cluster)


@attrs.frozen
class Source:
    """What ``add`` stores: a kubeconfig (text never shown) and its server, or InCluster."""

    server: str | None
    kubeconfig: str | None = attrs.field(default=None, repr=False)
    what: str = ""  # for --dry-run: where the kubeconfig comes from


def kubeconfig_of_token(
    name: str, server: str, ca: bytes | None, token: str, *, user: str = SERVICE_ACCOUNT
) -> str:
    """A kubeconfig of a server, its CA and a bearer token, checked as the manager checks it."""
    connection = Connection(server=server, token=token, certificate_authority=ca)
    text = render(connection, context=name, cluster=name, user=user)
    try:
        return minimise(text)
    except KubeconfigRefused as refused:
        raise Refused(f"the kubeconfig cannot be used: {refused.refusal.message}") from None


def check_kubeconfig(text: str, context: str | None = None) -> tuple[str, str]:
    """The kubeconfig as it is stored (one context, the current one by default) and its server.

    :class:`kokumi.core.kubeconfig.connection.KubeconfigRefused` says why not, in the manager's
    own words: a caller adds what its user can do about it.
    """
    minimal = minimise(text, context)
    connection = parse(minimal)
    assert isinstance(connection, Connection)  # minimise accepted it
    return minimal, connection.server


@attrs.frozen
class Added:
    cluster: dict[str, Any]
    cluster_created: bool
    secret_created: bool | None  # None: no Secret (InCluster)


MAX_CONTEXT_NAMES: Final = 50
"""The most context names offered: a list to pick from, not a kubeconfig's size again in a page."""


def examine_kubeconfig(text: str, context: str | None = None) -> tuple[list[str], Source | Refusal]:
    """The kubeconfig's context names, for a form to offer, and what ``add`` stores or why not.

    One read, by the manager's reader: a form's kubeconfig is anybody's text, and the reader
    bounds its size and CPU and refuses aliases, where a general YAML loader spends seconds on a
    flow list of a MiB. Still CPU-bound: a server calls this in a worker thread. Names longer
    than a DNS name are left out of the offer, as are all past the first ``MAX_CONTEXT_NAMES``.
    """
    names, read = examine(text, context)
    offered = [name for name in names if len(name) <= 253][:MAX_CONTEXT_NAMES]
    if isinstance(read, Refusal):
        return offered, read
    minimal, server = read
    return offered, Source(server, minimal)


async def add_cluster(
    hub: Client,
    name: str,
    namespace: str,
    source: Source,
    *,
    labels: Mapping[str, str] | None = None,
    description: str = "",
    scope: api.Scope | None = None,
    annotations: Mapping[str, str] | None = None,
    update: bool = True,
) -> Added:
    """Create or update the Cluster and its kubeconfig Secret, as the hub's user.

    The Secret's name is checked first: one this tool did not write is refused before anything is
    created. A new Cluster is created first (the Secret is owned by it) and deleted again when
    its Secret cannot be written. An existing Cluster is re-pointed last: its Secret is written
    first, and restored when the Cluster cannot be updated, so a failed ``add`` never leaves a
    Cluster pointing at a Secret that is not there. Every partial failure says what was changed
    and what was not. Without ``update`` (a form for new Clusters), an existing Cluster of that
    name is refused, and nothing is written. ``scope`` None keeps an existing Cluster's scope, as
    an empty ``description`` keeps its description.
    """
    secret = kubeconfig_secret_name(name)
    existing_secret: dict[str, Any] | None = None
    if source.kubeconfig is not None:
        existing_secret = await _own_secret_or_none(hub, namespace, name)
    body = cluster_object(
        name,
        namespace,
        secret=secret if source.kubeconfig is not None else None,
        labels=labels,
        description=description,
        scope=scope,
        annotations=annotations,
    )
    if scope is not None:
        check_cluster(body)
    current: dict[str, Any] | None = None
    if source.kubeconfig is not None:
        try:
            current = await hub.get(api.CLUSTERS, name, namespace=namespace)
        except NotFound:
            current = None
        except KubeError as exc:
            raise api_error(f"cannot read Cluster {namespace}/{name}", exc) from None
    if current is not None:
        if not update:
            raise _exists_already(namespace, name)
        assert source.kubeconfig is not None
        return await _update_secret_then_cluster(
            hub, body, current, source.kubeconfig, existing_secret
        )
    cluster, created = await _create_or_update_cluster(hub, body, update=update)
    if source.kubeconfig is None:
        return Added(cluster, created, None)
    uid = cluster["metadata"]["uid"]
    wanted = kubeconfig_secret(name, namespace, source.kubeconfig, owner_uid=uid)
    try:
        if existing_secret is None:
            await write(hub, "create", SECRETS, wanted, hub.create)
        else:
            wanted["metadata"]["resourceVersion"] = existing_secret["metadata"]["resourceVersion"]
            await write(hub, "update", SECRETS, wanted, hub.replace)
    except Refused as error:
        if created:
            try:
                await hub.delete(api.CLUSTERS, name, namespace=namespace)
            except KubeError:
                raise Refused(
                    f"{error}; the Cluster {namespace}/{name} it was for remains: delete it"
                ) from None
            raise Refused(f"{error}; the Cluster {namespace}/{name} was deleted again") from None
        raise
    return Added(cluster, created, existing_secret is None)


async def _update_secret_then_cluster(
    hub: Client,
    body: dict[str, Any],
    current: dict[str, Any],
    text: str,
    existing_secret: dict[str, Any] | None,
) -> Added:
    """An existing Cluster: the Secret first (owned by it), the Cluster last, or the Secret back."""
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    where = f"Cluster {namespace}/{name}"
    secret_where = f"Secret {namespace}/{kubeconfig_secret_name(name)}"
    wanted = kubeconfig_secret(name, namespace, text, owner_uid=current["metadata"]["uid"])
    try:
        if existing_secret is None:
            written = await write(hub, "create", SECRETS, wanted, hub.create)
        else:
            wanted["metadata"]["resourceVersion"] = existing_secret["metadata"]["resourceVersion"]
            written = await write(hub, "update", SECRETS, wanted, hub.replace)
    except Refused as error:
        raise Refused(f"{error}; nothing was changed: the {where} is as it was") from None
    try:
        cluster, _ = await _create_or_update_cluster(hub, body, update=True)
    except Refused as error:
        try:
            if existing_secret is None:
                meta = written["metadata"]
                await hub.delete(
                    SECRETS,
                    meta["name"],
                    namespace=namespace,
                    uid=meta.get("uid"),
                    resource_version=meta.get("resourceVersion"),
                )
                undone = f"the {secret_where} written for it was deleted again"
            else:
                restored = dict(existing_secret)
                restored["metadata"] = {
                    **existing_secret["metadata"],
                    "resourceVersion": written["metadata"]["resourceVersion"],
                }
                await hub.replace(SECRETS, restored, namespace=namespace)
                undone = f"the {secret_where} was restored to its old kubeconfig"
        except KubeError:
            raise Refused(
                f"{error}; the {where} was not changed, but the {secret_where} now holds the new "
                "kubeconfig and could not be restored: run add again, or correct the Secret"
            ) from None
        raise Refused(f"{error}; the {where} was not changed and {undone}") from None
    return Added(cluster, False, existing_secret is None)


async def _own_secret_or_none(hub: Client, namespace: str, cluster: str) -> dict[str, Any] | None:
    """The Secret ``<cluster>-kubeconfig`` if this tool wrote it, None if there is none.

    A user who may not read Secrets gets None: the admission policy then refuses the Cluster, in
    its own words, which say what access is missing.
    """
    name = kubeconfig_secret_name(cluster)
    try:
        secret = await hub.get(SECRETS, name, namespace=namespace)
    except (NotFound, Forbidden):
        return None
    except KubeError as exc:
        raise api_error(f"cannot read Secret {namespace}/{name}", exc) from None
    if not written_here(secret, cluster):
        raise Refused(
            f"Secret {namespace}/{name} exists and kokumi did not write it (it lacks the labels "
            f"{LABEL_MANAGED_BY}={WRITTEN_BY} and {LABEL_CLUSTER}={cluster}), so nothing was "
            "created: choose another Cluster name, or delete that Secret if nothing uses it"
        )
    return secret


def _exists_already(namespace: str, name: str) -> Refused:
    return Refused(
        f"Cluster {namespace}/{name} exists already, so nothing was written: choose another "
        "name, or edit that Cluster on its page"
    )


async def _create_or_update_cluster(
    hub: Client, body: dict[str, Any], *, update: bool
) -> tuple[dict[str, Any], bool]:
    meta = body["metadata"]
    try:
        return await hub.create(api.CLUSTERS, body, namespace=meta["namespace"]), True
    except AlreadyExists:
        if not update:
            raise _exists_already(meta["namespace"], meta["name"]) from None
    except KubeError as exc:
        raise api_error(f"cannot create Cluster {meta['namespace']}/{meta['name']}", exc) from None
    for _attempt in range(5):
        try:
            current = await hub.get(api.CLUSTERS, meta["name"], namespace=meta["namespace"])
        except KubeError as exc:
            raise api_error(
                f"cannot read Cluster {meta['namespace']}/{meta['name']}", exc
            ) from None
        updated = dict(current)
        metadata = dict(current["metadata"])
        metadata["labels"] = {**(metadata.get("labels") or {}), **(meta.get("labels") or {})}
        if meta.get("annotations"):
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **meta["annotations"]}
        updated["metadata"] = metadata
        spec = dict(body["spec"])
        old_description = (current.get("spec") or {}).get("description")
        if "description" not in spec and old_description:
            spec["description"] = old_description
        old_scope = (current.get("spec") or {}).get("scope")
        if "scope" not in spec and old_scope is not None and spec["connection"] != "InCluster":
            spec["scope"] = old_scope
        updated["spec"] = spec
        try:
            return await hub.replace(api.CLUSTERS, updated, namespace=meta["namespace"]), False
        except Conflict:
            continue
        except KubeError as exc:
            raise api_error(
                f"cannot update Cluster {meta['namespace']}/{meta['name']}", exc
            ) from None
    raise Refused(
        f"Cluster {meta['namespace']}/{meta['name']} kept changing while being updated: run again"
    )


async def write(
    client: Client,
    verb: str,
    resource: Resource,
    body: dict[str, Any],
    call: Callable[..., Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    meta = body["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    try:
        return await call(resource, body, namespace=meta.get("namespace"))
    except KubeError as exc:
        raise api_error(f"cannot {verb} {resource.kind} {where}", exc) from None
