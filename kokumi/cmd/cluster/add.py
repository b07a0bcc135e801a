"""``kokumi cluster add | list | describe | import``: register and inspect Clusters from a shell.

Every command acts as the user of the current kubeconfig (or ``--hub-kubeconfig``), never as the
manager: their own RBAC applies, and the admission policy kokumi-cluster-secret-access sees who
names which Secret. ``add`` does what the spec's "Register a cluster" steps and the UI's New
Cluster form do: the Cluster first, then the Secret ``<name>-kubeconfig`` owned by it, so that the
Secret is deleted with the Cluster. A Secret of that name that this tool did not write is refused
before anything is created, since overwriting it would hand another credential to the Cluster.

Kubeconfigs are checked with :mod:`kokumi.core.kubeconfig`, the manager's own reader, so a
kubeconfig
that ``add`` accepts is one the manager accepts, and a refusal reads the same in both places.
Nothing here prints a token, a key or a kubeconfig: ``--dry-run`` shows the Secret without it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import os
import re
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs
import trio
import yaml

from kokumi.core import api, argocd, kubeconfig, selectors, targets
from kokumi.core.ownership import IN_CLUSTER_SERVER, ClusterRef, normalise_server
from kokumi.kube.client import EVENTS, SECRETS, SERVICE_ACCOUNTS, Client, Resource
from kokumi.kube.config import Config, flatten_context
from kokumi.kube.errors import AlreadyExists, ApiError, Conflict, Forbidden, KubeError, NotFound
from kokumi.kube.objects import secret_data

__all__ = ["CliError", "add_parser"]

SECRET_KEY: Final = "value"  # noqa: S105 - a key's name, not a password
"""The key of the kubeconfig in the Secret: Cluster API's format, which Flux and Sveltos read."""

LABEL_MANAGED_BY: Final = argocd.LABEL_MANAGED_BY
WRITTEN_BY: Final = "kokumi-cli"
"""The mark of a kubeconfig Secret this tool wrote: only such a Secret may be overwritten."""

LABEL_CLUSTER: Final = argocd.LABEL_CLUSTER
CAPI_CLUSTER_NAME: Final = "cluster.x-k8s.io/cluster-name"
FIELD_MANAGER: Final = "kokumi-cli"

SERVICE_ACCOUNT: Final = "kokumi"
SERVICE_ACCOUNT_NAMESPACE: Final = "kube-system"


def token_secret(account: str) -> str:
    """The service-account-token Secret of ``account``: kokumi-token, as in the spec's steps."""
    return f"{account}-token"


CLUSTER_ROLE_BINDINGS: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)

_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONTEXT_PREFIX: Final = re.compile(r"^[A-Z]+ /\S*: ")
_NOT_SHOWN: Final = "# data.value: the kubeconfig ({what}), not shown\n"


class CliError(Exception):
    """What went wrong, in one line that says how to fix it; the command exits non-zero."""

    def __str__(self) -> str:
        return _one_line(super().__str__())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _api_error(what: str, exc: KubeError) -> CliError:
    """The server's own words (an admission policy's message among them) after what was tried."""
    if isinstance(exc, ApiError):
        return CliError(f"{what}: {exc.reason}: {_CONTEXT_PREFIX.sub('', exc.message)}")
    return CliError(f"{what}: {exc}")


def _warn(text: str) -> None:
    print(f"kokumi: warning: {_one_line(text)}", file=sys.stderr)


# --- the objects --------------------------------------------------------------------------------


def secret_name(cluster: str) -> str:
    """The Secret ``add`` keeps a Cluster's kubeconfig in, as the UI names it too."""
    return f"{cluster}-kubeconfig"


def cluster_object(
    name: str,
    namespace: str,
    *,
    secret: str | None,
    labels: Mapping[str, str] | None = None,
    description: str = "",
) -> dict[str, Any]:
    """A Cluster reached with the kubeconfig in ``secret`` (key ``value``), or InCluster."""
    spec: dict[str, Any] = {"connection": "InCluster"}
    if secret is not None:
        spec = {"connection": "Kubeconfig", "kubeconfig": {"secretRef": {"name": secret}}}
    if description:
        spec["description"] = description
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": api.API_VERSION, "kind": "Cluster", "metadata": metadata, "spec": spec}


def kubeconfig_secret(
    cluster: str, namespace: str, text: str, owner_uid: str | None = None
) -> dict[str, Any]:
    """The Secret ``<cluster>-kubeconfig``, marked as written by this tool, owned by the Cluster.

    The ownerReference makes the garbage collector delete the Secret with the Cluster; the mark
    is what a later ``add`` checks before it overwrites the Secret.
    """
    metadata: dict[str, Any] = {
        "name": secret_name(cluster),
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
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(LABEL_MANAGED_BY) == WRITTEN_BY and labels.get(LABEL_CLUSTER) == cluster)


# --- where the kubeconfig comes from ------------------------------------------------------------


@attrs.frozen
class Source:
    """What ``add`` stores: a kubeconfig (text never shown) and its server, or InCluster."""

    server: str | None
    kubeconfig: str | None = attrs.field(default=None, repr=False)
    what: str = ""  # for --dry-run: where the kubeconfig comes from


_SERVICE_ACCOUNT_HINT: Final = (
    "; or let kokumi create a ServiceAccount with a token on that cluster and store its "
    "kubeconfig instead: add --create-service-account"
)
_NEED_SERVICE_ACCOUNT: Final = frozenset(
    {kubeconfig.Code.EXEC_PLUGIN, kubeconfig.Code.AUTH_PROVIDER, kubeconfig.Code.BASIC_AUTH}
)


def kubeconfig_of_context(path: str | None, context: str | None) -> Source:
    """The self-contained kubeconfig of one context and its server, files read and inlined.

    Checked by the manager's own reader, so a refusal is the manager's own reason; where the
    context signs in with something only a person can run, the fix is a ServiceAccount of Kokumi's.
    """
    try:
        name, document = flatten_context(path, context)
    except KubeError as exc:
        raise CliError(str(exc)) from None
    text = yaml.safe_dump(document, sort_keys=False)
    try:
        minimal = kubeconfig.minimise(text)
    except kubeconfig.KubeconfigRefused as refused:
        hint = _SERVICE_ACCOUNT_HINT if refused.refusal.code in _NEED_SERVICE_ACCOUNT else ""
        raise CliError(
            f"context {name!r} cannot be stored: {refused.refusal.message}{hint}"
        ) from None
    server = _server_of(minimal)
    return Source(server, minimal, f"context {name}, server {server}")


def kubeconfig_of_token(
    name: str, server: str, ca: bytes | None, token: str, *, user: str = SERVICE_ACCOUNT
) -> str:
    """A kubeconfig of a server, its CA and a bearer token, checked as the manager checks it."""
    connection = kubeconfig.Connection(server=server, token=token, certificate_authority=ca)
    text = kubeconfig.render(connection, context=name, cluster=name, user=user)
    try:
        return kubeconfig.minimise(text)
    except kubeconfig.KubeconfigRefused as refused:
        raise CliError(f"the kubeconfig cannot be used: {refused.refusal.message}") from None


def _server_of(text: str) -> str:
    connection = kubeconfig.parse(text)
    assert isinstance(connection, kubeconfig.Connection)  # minimise accepted it
    return connection.server


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}") from None


# --- the hub and the spoke ------------------------------------------------------------------------


def hub_config(args: argparse.Namespace) -> Config:
    """The user's own connection to the hub: --hub-kubeconfig/--hub-context, else as kubectl."""
    try:
        if args.hub_kubeconfig or args.hub_context or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            # A person's kubeconfig: its exec plugin (a cloud's sign-in) is theirs to run.
            return Config.from_kubeconfig(
                args.hub_kubeconfig, context=args.hub_context, run_exec=True
            )
        return Config.load()
    except KubeError as exc:
        raise CliError(f"cannot connect to the hub: {exc}") from None


async def service_account_kubeconfig(
    config: Config,
    *,
    name: str,
    account: str = SERVICE_ACCOUNT,
    cluster_role: str,
    server: str | None,
    token_wait: float,
    poll: float = 0.5,
) -> Source:
    """The spec's "Register a cluster" steps on the spoke, then the kubeconfig they lead to.

    ServiceAccount kokumi in kube-system, a ClusterRoleBinding to ``cluster_role``, and a
    service-account-token Secret, whose token the spoke's token controller fills in (polled, as
    ``argocd cluster add`` polls). Running it again reuses what is there.
    """
    account_body, binding, token_body = service_account_objects(account, cluster_role)
    subject = binding["subjects"][0]
    async with Client(config, field_manager=FIELD_MANAGER) as spoke:
        await _create_or_keep(spoke, SERVICE_ACCOUNTS, account_body)
        existing = await _create_or_keep(spoke, CLUSTER_ROLE_BINDINGS, binding)
        if existing is not None:
            bound = (existing.get("roleRef") or {}).get("name")
            if bound != cluster_role:
                raise CliError(
                    f"ClusterRoleBinding {account} on the cluster binds ClusterRole "
                    f"{bound}, not {cluster_role}: pass --cluster-role {bound}, or delete the "
                    "binding to bind another role"
                )
            if subject not in (existing.get("subjects") or []):
                existing["subjects"] = [*(existing.get("subjects") or []), subject]
                await _write(spoke, "update", CLUSTER_ROLE_BINDINGS, existing, spoke.replace)
        await _create_or_keep(spoke, SECRETS, token_body)
        token, ca = await _wait_for_token(spoke, token_secret(account), token_wait, poll)
    address = server or config.server
    text = kubeconfig_of_token(name, address, ca, token, user=account)
    return Source(address, text, f"token of ServiceAccount kube-system/{account}, server {address}")


async def _create_or_keep(
    client: Client, resource: Resource, body: dict[str, Any]
) -> dict[str, Any] | None:
    """Create ``body``; None when created, the object already there when it exists."""
    meta = body["metadata"]
    namespace = meta.get("namespace")
    try:
        await client.create(resource, body, namespace=namespace)
    except AlreadyExists:
        try:
            return await client.get(resource, meta["name"], namespace=namespace)
        except KubeError as exc:
            raise _api_error(f"cannot read {resource.kind} {meta['name']}", exc) from None
    except KubeError as exc:
        raise _api_error(
            f"cannot create {resource.kind} {meta['name']} on the cluster", exc
        ) from None
    return None


async def _wait_for_token(
    client: Client, secret_name: str, wait: float, poll: float
) -> tuple[str, bytes | None]:
    with trio.move_on_after(wait):
        while True:
            try:
                secret = await client.get(SECRETS, secret_name, namespace=SERVICE_ACCOUNT_NAMESPACE)
            except KubeError as exc:
                raise _api_error(f"cannot read Secret kube-system/{secret_name}", exc) from None
            token = secret_data(secret, "token")
            if token:
                return token.decode("utf-8"), secret_data(secret, "ca.crt")
            await trio.sleep(poll)
    raise CliError(
        f"the cluster did not put a token into Secret kube-system/{secret_name} within "
        f"{wait:g} s: is its token controller (kube-controller-manager) running?"
    )


async def _write(
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
        raise _api_error(f"cannot {verb} {resource.kind} {where}", exc) from None


# --- add ----------------------------------------------------------------------------------------


@attrs.frozen
class Added:
    cluster: dict[str, Any]
    cluster_created: bool
    secret_created: bool | None  # None: no Secret (InCluster)


async def add(
    hub: Client,
    name: str,
    namespace: str,
    source: Source,
    *,
    labels: Mapping[str, str] | None = None,
    description: str = "",
) -> Added:
    """Create or update the Cluster, then its kubeconfig Secret, as the hub's user.

    The Secret's name is checked first: one this tool did not write is refused before anything is
    created. A Cluster created here is deleted again when its Secret cannot be written, so a
    failed ``add`` leaves nothing half-registered behind.
    """
    secret = secret_name(name)
    existing_secret: dict[str, Any] | None = None
    if source.kubeconfig is not None:
        existing_secret = await _own_secret_or_none(hub, namespace, name)
    body = cluster_object(
        name,
        namespace,
        secret=secret if source.kubeconfig is not None else None,
        labels=labels,
        description=description,
    )
    cluster, created = await _create_or_update_cluster(hub, body)
    if source.kubeconfig is None:
        return Added(cluster, created, None)
    uid = cluster["metadata"]["uid"]
    wanted = kubeconfig_secret(name, namespace, source.kubeconfig, owner_uid=uid)
    try:
        if existing_secret is None:
            await _write(hub, "create", SECRETS, wanted, hub.create)
        else:
            wanted["metadata"]["resourceVersion"] = existing_secret["metadata"]["resourceVersion"]
            await _write(hub, "update", SECRETS, wanted, hub.replace)
    except CliError as error:
        if created:
            try:
                await hub.delete(api.CLUSTERS, name, namespace=namespace)
            except KubeError:
                raise CliError(
                    f"{error}; the Cluster {namespace}/{name} it was for remains: delete it"
                ) from None
            raise CliError(f"{error}; the Cluster {namespace}/{name} was deleted again") from None
        raise
    return Added(cluster, created, existing_secret is None)


async def _own_secret_or_none(hub: Client, namespace: str, cluster: str) -> dict[str, Any] | None:
    """The Secret ``<cluster>-kubeconfig`` if this tool wrote it, None if there is none.

    A user who may not read Secrets gets None: the admission policy then refuses the Cluster, in
    its own words, which say what access is missing.
    """
    name = secret_name(cluster)
    try:
        secret = await hub.get(SECRETS, name, namespace=namespace)
    except (NotFound, Forbidden):
        return None
    except KubeError as exc:
        raise _api_error(f"cannot read Secret {namespace}/{name}", exc) from None
    if not written_here(secret, cluster):
        raise CliError(
            f"Secret {namespace}/{name} exists and kokumi did not write it (it lacks the labels "
            f"{LABEL_MANAGED_BY}={WRITTEN_BY} and {LABEL_CLUSTER}={cluster}), so nothing was "
            "created: choose another Cluster name, or delete that Secret if nothing uses it"
        )
    return secret


async def _create_or_update_cluster(
    hub: Client, body: dict[str, Any]
) -> tuple[dict[str, Any], bool]:
    meta = body["metadata"]
    try:
        return await hub.create(api.CLUSTERS, body, namespace=meta["namespace"]), True
    except AlreadyExists:
        pass
    except KubeError as exc:
        raise _api_error(f"cannot create Cluster {meta['namespace']}/{meta['name']}", exc) from None
    for _attempt in range(5):
        try:
            current = await hub.get(api.CLUSTERS, meta["name"], namespace=meta["namespace"])
        except KubeError as exc:
            raise _api_error(
                f"cannot read Cluster {meta['namespace']}/{meta['name']}", exc
            ) from None
        updated = dict(current)
        metadata = dict(current["metadata"])
        metadata["labels"] = {**(metadata.get("labels") or {}), **(meta.get("labels") or {})}
        updated["metadata"] = metadata
        spec = dict(body["spec"])
        old_description = (current.get("spec") or {}).get("description")
        if "description" not in spec and old_description:
            spec["description"] = old_description
        updated["spec"] = spec
        try:
            return await hub.replace(api.CLUSTERS, updated, namespace=meta["namespace"]), False
        except Conflict:
            continue
        except KubeError as exc:
            raise _api_error(
                f"cannot update Cluster {meta['namespace']}/{meta['name']}", exc
            ) from None
    raise CliError(
        f"Cluster {meta['namespace']}/{meta['name']} kept changing while being updated: run again"
    )


def dump_objects(objects: Iterable[tuple[dict[str, Any], str]]) -> str:
    """YAML documents for --dry-run; a Secret's data is replaced by a comment saying what it is."""
    documents = []
    for obj, what in objects:
        shown = dict(obj)
        comment = ""
        if obj.get("kind") == "Secret" and "data" in obj:
            shown.pop("data")
            comment = _NOT_SHOWN.format(what=what)
        documents.append(comment + yaml.safe_dump(shown, sort_keys=False))
    return "---\n".join(documents)


def _labels(values: Sequence[str]) -> dict[str, str]:
    labels = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key:
            raise CliError(f"--label {value!r} is not KEY=VALUE: write it as fleet=edge")
        labels[key] = text
    return labels


def _check_name(name: str) -> None:
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise CliError(
            f"Cluster name {name!r} is not a DNS label: use at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit"
        )


async def _source(args: argparse.Namespace) -> tuple[Source, list[tuple[dict[str, Any], str]]]:
    """The kubeconfig ``add`` stores, as the flags say; with --dry-run, the spoke's objects too."""
    if args.in_cluster:
        return Source(IN_CLUSTER_SERVER), []
    if args.create_service_account:
        if not (args.kubeconfig or args.context):
            raise CliError(
                "--create-service-account needs --context (or --kubeconfig): the cluster to "
                "create the ServiceAccount on"
            )
        if args.cluster_role == "cluster-admin":
            _warn(
                f"ServiceAccount kube-system/{args.service_account} gets ClusterRole cluster-admin "
                "on the cluster: "
                "full control of it. Grant less where you can with --cluster-role: Argo CD needs "
                "to manage what the Orders deploy there, in their target namespaces"
            )
        try:
            spoke_config = Config.from_kubeconfig(
                args.kubeconfig, context=args.context, run_exec=True
            )
        except KubeError as exc:
            raise CliError(
                f"cannot connect to the cluster to create the ServiceAccount: {exc}"
            ) from None
        if args.dry_run:
            address = args.server or spoke_config.server
            what = f"token of ServiceAccount kube-system/{args.service_account}, server {address}"
            objects = service_account_objects(args.service_account, args.cluster_role)
            return Source(address, "", what), [(obj, "") for obj in objects]
        source = await service_account_kubeconfig(
            spoke_config,
            name=args.name,
            account=args.service_account,
            cluster_role=args.cluster_role,
            server=args.server,
            token_wait=args.timeout,
        )
        return source, []
    if args.token_file is not None:
        if not args.server:
            raise CliError(
                "--token-file needs --server: the API server's URL as the hub reaches it"
            )
        token = _read_file(args.token_file, "the token file").decode("utf-8", "replace").strip()
        ca = (
            _read_file(args.certificate_authority, "the CA file")
            if args.certificate_authority
            else None
        )
        text = kubeconfig_of_token(args.name, args.server, ca, token)
        return Source(args.server, text, f"token from {args.token_file}, server {args.server}"), []
    if args.server:
        raise CliError(
            "--server alone is not enough: add --token-file (and --certificate-authority), "
            "or --create-service-account"
        )
    if args.kubeconfig or args.context:
        return kubeconfig_of_context(args.kubeconfig, args.context), []
    raise CliError(
        "say how to reach the cluster: --context NAME (or --kubeconfig FILE), --server URL "
        "with --token-file FILE, --create-service-account with --context, or --in-cluster"
    )


async def _cmd_add(args: argparse.Namespace) -> None:
    _check_name(args.name)
    labels = _labels(args.label)
    chosen = [
        flag
        for flag, given in (
            ("--in-cluster", args.in_cluster),
            ("--token-file", args.token_file is not None),
            ("--create-service-account", args.create_service_account),
        )
        if given
    ]
    if len(chosen) > 1:
        raise CliError(
            f"{' and '.join(chosen)} exclude each other: choose one way to reach the cluster"
        )
    if args.in_cluster and (args.server or args.kubeconfig or args.context):
        raise CliError("--in-cluster needs no --server, --kubeconfig or --context: leave them out")
    source, spoke_objects = await _source(args)
    if source.server and normalise_server(source.server) == IN_CLUSTER_SERVER and source.kubeconfig:
        raise CliError(
            f"server {IN_CLUSTER_SERVER} is the cluster Argo CD runs in: register it with "
            "--in-cluster"
        )

    if args.dry_run:
        objects = [*spoke_objects]
        objects.append(
            (
                cluster_object(
                    args.name,
                    args.namespace,
                    secret=secret_name(args.name) if source.kubeconfig is not None else None,
                    labels=labels,
                    description=args.description,
                ),
                "",
            )
        )
        if source.kubeconfig is not None:
            objects.append(
                (kubeconfig_secret(args.name, args.namespace, source.kubeconfig), source.what)
            )
        print(dump_objects(objects), end="")
        return

    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        added = await add(
            hub, args.name, args.namespace, source, labels=labels, description=args.description
        )
    where = f"{args.namespace}/{args.name}"
    print(f"Cluster {where} {'created' if added.cluster_created else 'updated'}")
    if added.secret_created is not None:
        verb = "created" if added.secret_created else "updated"
        print(
            f"Secret {args.namespace}/{secret_name(args.name)} {verb}: the kubeconfig of "
            f"{source.server}, owned by the Cluster and deleted with it"
        )
    print(
        f"Kokumi checks it within a minute: kokumi cluster describe {args.name} -n {args.namespace}"
    )


def service_account_objects(
    account: str, cluster_role: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the spec's steps create on the cluster: the account, its binding, its token Secret."""
    meta = {"name": account, "namespace": SERVICE_ACCOUNT_NAMESPACE}
    return (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", **meta}],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                **meta,
                "name": token_secret(account),
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            "type": "kubernetes.io/service-account-token",
        },
    )


# --- list ---------------------------------------------------------------------------------------


def _ready(cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (cluster.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return {}


def _label_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def cluster_rows(clusters: Sequence[Mapping[str, Any]], *, wide: bool = False) -> list[list[str]]:
    """The table ``kokumi cluster list`` prints, header first."""
    header = ["NAME", "NAMESPACE", "CONNECTION", "SERVER", "VERSION", "READY", "REASON", "LABELS"]
    if wide:
        header += ["SECRET", "MESSAGE"]
    rows = [header]
    for cluster in clusters:
        meta = cluster.get("metadata") or {}
        spec = cluster.get("spec") or {}
        status = cluster.get("status") or {}
        ready = _ready(cluster)
        row = [
            str(meta.get("name", "")),
            str(meta.get("namespace", "")),
            str(spec.get("connection", "")),
            str(status.get("server") or "-"),
            str(status.get("kubernetesVersion") or "-"),
            str(ready.get("status") or "Unknown"),
            str(ready.get("reason") or "-"),
            _label_text(meta.get("labels")),
        ]
        if wide:
            ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
            secret = f"{ref['name']}/{ref.get('key', SECRET_KEY)}" if ref.get("name") else "-"
            row += [secret, _one_line(str(ready.get("message") or "not checked yet"))]
        rows.append(row)
    return rows


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl aligns them: padded to the widest cell, three spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    shown = dict(obj)
    metadata = obj.get("metadata") or {}
    shown["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return shown


async def _cmd_list(args: argparse.Namespace) -> None:
    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        namespace = None if args.all_namespaces else (args.namespace or hub.namespace)
        try:
            listing = await hub.list(api.CLUSTERS, namespace=namespace)
        except KubeError as exc:
            where = f"namespace {namespace}" if namespace else "all namespaces"
            raise _api_error(f"cannot list Clusters in {where}", exc) from None
    items = sorted(
        listing.get("items") or [],
        key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"]["name"]),
    )
    if args.output in ("yaml", "json"):
        document = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                _without_managed_fields({"apiVersion": api.API_VERSION, "kind": "Cluster", **c})
                for c in items
            ],
        }
        if args.output == "json":
            print(json.dumps(document, indent=2))
        else:
            print(yaml.safe_dump(document, sort_keys=False), end="")
        return
    if not items:
        where = f"namespace {namespace}" if namespace else "any namespace"
        print(f"No Clusters in {where}.", file=sys.stderr)
        return
    print(table(cluster_rows(items, wide=args.output == "wide")), end="")


# --- describe -----------------------------------------------------------------------------------


def registration(
    cluster: Mapping[str, Any],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    argocd_namespace: str,
) -> str:
    """One line on the Cluster's Argo CD registration: held here, by whom, or why there is none.

    ``argocd_secrets`` are the cluster Secrets of Argo CD's namespace, None when the user may not
    list them. Names come from :mod:`kokumi.core.argocd`, the module the registry writes them with.
    """
    meta = cluster.get("metadata") or {}
    spec = cluster.get("spec") or {}
    if spec.get("connection") == "InCluster":
        return "none needed: Argo CD knows the cluster it runs in (InCluster)"
    server = (cluster.get("status") or {}).get("server")
    if not server:
        return "none: the Cluster reports no server yet, so it cannot be registered"
    server = normalise_server(server)
    name = argocd.secret_name(server)
    if argocd_secrets is None:
        return (
            f"unknown: you may not list Secrets in {argocd_namespace}; Kokumi would register "
            f"{server} in Secret {argocd_namespace}/{name}"
        )
    me = ClusterRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    by_name = {s["metadata"]["name"]: s for s in argocd_secrets}
    ours = by_name.get(name)
    if ours is not None and argocd.is_ours(ours):
        holder = argocd.holder_of(ours)
        if holder == me:
            shown = argocd.cluster_name(me, server)
            return (
                f"Secret {argocd_namespace}/{name} registers this Cluster with Argo CD as {shown}"
            )
        if holder is not None:
            return (
                f"Cluster {holder.namespace}/{holder.name} holds server {server} (Secret "
                f"{argocd_namespace}/{name}); this Cluster waits and takes over once it lets go"
            )
    foreign = sorted(
        s["metadata"]["name"]
        for s in argocd_secrets
        if not argocd.is_ours(s)
        and (s["metadata"]["name"] == name or argocd.server_of(s) == server)
    )
    if foreign:
        return (
            f"Argo CD's Secret {argocd_namespace}/{foreign[0]}, which Kokumi did not write, holds "
            f"server {server}: delete it so Kokumi can take the server over"
        )
    return "none: Kokumi registers the Cluster while an Environment selects it and it is Ready"


def environment_targets(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, str]]:
    """(Environment, target, message) for each Environment of the namespace that selects it.

    Computed with :mod:`kokumi.core.selectors` and :mod:`kokumi.core.targets`, as the manager
    computes it, from the Clusters' reported status.
    """
    name = cluster["metadata"]["name"]
    parsed = [c for c in map(api.parse_cluster, clusters) if isinstance(c, api.Cluster)]
    parsed.sort(key=lambda c: c.metadata.name)
    rows: list[tuple[str, str, str]] = []
    for obj in sorted(environments, key=lambda e: e["metadata"]["name"]):
        environment = api.parse_environment(obj)
        if isinstance(environment, api.Invalid):
            continue
        selector = selectors.parse(environment.spec.cluster_selector)
        if isinstance(selector, selectors.SelectorError):
            continue
        selected = [c for c in parsed if selector.matches(c.metadata.labels)]
        for target in targets.targets([targets.selected_cluster(c) for c in selected]):
            if target.cluster == name:
                rows.append((environment.metadata.name, target.reason, target.message))
    return rows


async def _cmd_describe(args: argparse.Namespace) -> None:
    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        namespace = args.namespace or hub.namespace
        try:
            cluster = await hub.get(api.CLUSTERS, args.name, namespace=namespace)
        except NotFound:
            raise CliError(
                f"no Cluster {args.name} in namespace {namespace}: see kokumi cluster list "
                f"-n {namespace}"
            ) from None
        except KubeError as exc:
            raise _api_error(f"cannot read Cluster {namespace}/{args.name}", exc) from None
        try:
            clusters = (await hub.list(api.CLUSTERS, namespace=namespace))["items"]
            environments = (await hub.list(api.ENVIRONMENTS, namespace=namespace))["items"]
        except KubeError as exc:
            what = f"cannot list the Clusters and Environments of namespace {namespace}"
            raise _api_error(what, exc) from None
        secrets: list[dict[str, Any]] | None
        try:
            listing = await hub.list(
                SECRETS,
                namespace=args.argocd_namespace,
                label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
            )
            secrets = listing["items"]
        except (Forbidden, NotFound):
            secrets = None
        events: list[dict[str, Any]] = []
        uid = cluster["metadata"].get("uid")
        # Events are a courtesy; a user who may not read them still gets the rest.
        with contextlib.suppress(KubeError):
            events = (
                await hub.list(
                    EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={uid}"
                )
            )["items"]
    print(
        describe_text(cluster, clusters, environments, secrets, events, args.argocd_namespace),
        end="",
    )


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def describe_text(
    cluster: Mapping[str, Any],
    clusters: Sequence[Mapping[str, Any]],
    environments: Sequence[Mapping[str, Any]],
    argocd_secrets: Sequence[Mapping[str, Any]] | None,
    events: Sequence[Mapping[str, Any]],
    argocd_namespace: str = argocd.ARGOCD_NAMESPACE,
) -> str:
    """Everything that answers "why is my Cluster not deploying?", on one screen."""
    meta = cluster.get("metadata") or {}
    spec = cluster.get("spec") or {}
    status = cluster.get("status") or {}
    ready = _ready(cluster)
    ref = (spec.get("kubeconfig") or {}).get("secretRef") or {}
    connection = str(spec.get("connection", ""))
    if ref.get("name"):
        connection += f", Secret {ref['name']} key {ref.get('key', SECRET_KEY)}"
    lines = [
        ("Name", str(meta.get("name", ""))),
        ("Namespace", str(meta.get("namespace", ""))),
        ("Labels", _label_text(meta.get("labels"))),
        ("Description", str(spec.get("description") or "-")),
        ("Connection", connection),
        ("Server", str(status.get("server") or "-")),
        ("Version", str(status.get("kubernetesVersion") or "-")),
    ]
    if ready:
        lines.append(("Ready", f"{ready.get('status')} ({ready.get('reason')})"))
        lines.append(("Message", _one_line(str(ready.get("message", "")))))
        lines.append(("Since", str(ready.get("lastTransitionTime") or "-")))
    else:
        lines.append(("Ready", "Unknown (not checked yet: is the manager running?)"))
    observed = status.get("observedGeneration")
    generation = meta.get("generation")
    if observed is not None and observed != generation:
        lines.append(
            ("Observed", f"generation {observed} of {generation}: the status is of an older spec")
        )
    if events:
        last = max(_event_time(e) for e in events)
        lines.append(
            ("Last change", f"{last} (Kokumi checks about once a minute and records changes only)")
        )
    lines.append(("Registration", registration(cluster, argocd_secrets, argocd_namespace)))
    width = max(len(key) for key, _ in lines) + 2
    out = "".join(f"{key + ':':<{width}}{value}\n" for key, value in lines)
    found = environment_targets(cluster, clusters, environments)
    if found:
        rows = [["ENVIRONMENT", "TARGET", "MESSAGE"], *[list(row) for row in found]]
        out += "Environments:\n" + textwrap.indent(table(rows), "  ")
    else:
        out += (
            "Environments: none selects it: label it to match an Environment's "
            "spec.clusterSelector\n"
        )
    if events:
        recent = sorted(events, key=_event_time)[-5:]
        rows = [["TIME", "TYPE", "REASON", "MESSAGE"]]
        rows += [
            [
                _event_time(e),
                str(e.get("type", "")),
                str(e.get("reason", "")),
                _one_line(str(e.get("message", ""))),
            ]
            for e in recent
        ]
        out += "Events:\n" + textwrap.indent(table(rows), "  ")
    return out


# --- import -------------------------------------------------------------------------------------


@attrs.frozen
class ImportResult:
    """What became of one Secret found by ``import``: imported, kept, or why not."""

    source: str  # namespace/name of the Secret
    cluster: str | None  # the Cluster it became (or would become)
    state: str  # imported, updated, exists, not importable, failed
    detail: str = ""
    next_step: str = ""

    def lines(self, dry_run: bool) -> list[str]:
        if self.cluster is not None and self.state in ("imported", "updated"):
            verb = "would be imported" if dry_run else self.state
            head = f"{self.source}: {verb} as Cluster {self.cluster}"
        else:
            head = f"{self.source}: {self.state}"
        lines = [f"{head}: {self.detail}" if self.detail else head]
        if self.next_step:
            lines.append(f"  next: {self.next_step}")
        return lines


async def import_cluster_api(hub: Client, namespace: str, *, dry_run: bool) -> list[ImportResult]:
    """Each Cluster API ``<cluster>-kubeconfig`` Secret becomes a Cluster that references it.

    The Secret stays where it is and whose it is: Cluster API rotates it, and the Cluster reads
    the rotated kubeconfig from it. Its kubeconfig is checked first, so a Cluster is only created
    for one the manager can use.
    """
    try:
        listing = await hub.list(SECRETS, namespace=namespace, label_selector=CAPI_CLUSTER_NAME)
    except KubeError as exc:
        raise _api_error(f"cannot list Secrets in namespace {namespace}", exc) from None
    outcomes = []
    for secret in sorted(listing["items"], key=lambda s: s["metadata"]["name"]):
        meta = secret["metadata"]
        name = str((meta.get("labels") or {}).get(CAPI_CLUSTER_NAME, ""))
        if meta["name"] != secret_name(name):
            continue  # Cluster API's other Secrets of the cluster: CAs, service-account keys
        source = f"{namespace}/{meta['name']}"
        text = secret_data(secret, SECRET_KEY)
        checked = kubeconfig.parse(text) if text is not None else None
        if not isinstance(checked, kubeconfig.Connection):
            why = checked.message if checked is not None else f"it has no key {SECRET_KEY}"
            outcomes.append(ImportResult(source, None, "not importable", why))
            continue
        outcomes.append(await _import_reference(hub, namespace, name, meta["name"], dry_run))
    return outcomes


async def _in_the_way(
    hub: Client, namespace: str, name: str, secret: str
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
        return False, str(_api_error(f"cannot read Cluster {where}", exc))
    ref = ((existing.get("spec") or {}).get("kubeconfig") or {}).get("secretRef") or {}
    if ref.get("name") == secret and ref.get("key", SECRET_KEY) == SECRET_KEY:
        return True, None
    return True, (
        f"Cluster {where} exists and reads another Secret: rename or delete it to import this one"
    )


async def _import_reference(
    hub: Client, namespace: str, name: str, secret: str, dry_run: bool
) -> ImportResult:
    source = f"{namespace}/{secret}"
    where = f"{namespace}/{name}"
    exists, blocked = await _in_the_way(hub, namespace, name, secret)
    if blocked is not None:
        return ImportResult(source, where, "failed", blocked)
    if exists:
        return ImportResult(source, where, "exists", f"Cluster {where} already reads it")
    body = cluster_object(name, namespace, secret=secret, description=f"Cluster API cluster {name}")
    if dry_run:
        return ImportResult(source, where, "imported", f"it reads Secret {secret}")
    try:
        await hub.create(api.CLUSTERS, body, namespace=namespace)
    except KubeError as exc:
        error = _api_error(f"cannot create Cluster {where}", exc)
        return ImportResult(source, where, "failed", str(error))
    return ImportResult(source, where, "imported", f"it reads Secret {secret}")


_ARGOCD_LABELS: Final = "argocd.argoproj.io/"
_INSTEAD: Final = "use kokumi cluster add --create-service-account"


def argocd_connection(secret: Mapping[str, Any]) -> kubeconfig.Connection | str:
    """The connection an Argo CD cluster Secret describes, or why Kokumi cannot carry it over.

    Read as Argo CD reads it (:func:`kokumi.core.argocd.config_from_secret`), in Argo CD's order of
    precedence: AWS authentication, then an exec plugin, then basic auth or a bearer token.
    """
    server = argocd.server_of(secret)
    if server is None:
        return "it names no server: Argo CD ignores it too"
    if server == IN_CLUSTER_SERVER:
        return (
            f"it is Argo CD's own cluster ({IN_CLUSTER_SERVER}), reached with Argo CD's own "
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
    return kubeconfig.Connection(
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


async def import_argocd(
    hub: Client, namespace: str, argocd_namespace: str, *, dry_run: bool
) -> list[ImportResult]:
    """Each cluster Secret of Argo CD's that Kokumi did not write becomes a kubeconfig + Cluster.

    The old Secret is left alone: Kokumi never takes over a cluster Argo CD already knows. Until
    somebody deletes it, the new Cluster reports ClusterConflict naming it, hence the next step.
    """
    try:
        listing = await hub.list(
            SECRETS,
            namespace=argocd_namespace,
            label_selector=f"{argocd.LABEL_SECRET_TYPE}=cluster",
        )
    except KubeError as exc:
        what = f"cannot list Argo CD's cluster Secrets in {argocd_namespace}"
        raise _api_error(what, exc) from None
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
        try:
            text = kubeconfig.minimise(
                kubeconfig.render(found, context=name, cluster=name, user=name)
            )
        except kubeconfig.KubeconfigRefused as refused:
            outcomes.append(ImportResult(source, None, "not importable", refused.refusal.message))
            continue
        labels = {
            k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(_ARGOCD_LABELS)
        }
        where = f"{namespace}/{name}"
        next_step = (
            "delete the old Argo CD Secret so Kokumi can take the server over: "
            f"kubectl delete secret {meta['name']} -n {argocd_namespace}"
        )
        _, blocked = await _in_the_way(hub, namespace, name, secret_name(name))
        if blocked is not None:
            outcomes.append(ImportResult(source, where, "failed", blocked))
            continue
        state = "imported"
        if not dry_run:
            try:
                added = await add(
                    hub,
                    name,
                    namespace,
                    Source(found.server, text),
                    labels=labels,
                    description=f"Imported from Argo CD Secret {source}",
                )
            except CliError as error:
                outcomes.append(ImportResult(source, where, "failed", str(error)))
                continue
            state = "imported" if added.cluster_created else "updated"
        detail = f"Secret {secret_name(name)}, server {found.server}"
        scoped = (secret_data(secret, "namespaces") or b"").decode("utf-8", "replace").strip()
        if scoped:
            # Kokumi registers clusters for every namespace; the credential may not reach them.
            detail += f" (Argo CD limited it to namespaces {scoped}; Kokumi does not)"
        outcomes.append(ImportResult(source, where, state, detail, next_step))
    return outcomes


async def _cmd_import(args: argparse.Namespace) -> int:
    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        namespace = args.namespace or hub.namespace
        if args.source == "cluster-api":
            outcomes = await import_cluster_api(hub, namespace, dry_run=args.dry_run)
            where = f"Secrets labeled {CAPI_CLUSTER_NAME} in namespace {namespace}"
        else:
            outcomes = await import_argocd(
                hub, namespace, args.argocd_namespace, dry_run=args.dry_run
            )
            where = f"cluster Secrets in {args.argocd_namespace} that Kokumi did not write"
    if not outcomes:
        print(f"Nothing to import: no {where}.")
    for outcome in outcomes:
        for line in outcome.lines(args.dry_run):
            print(line)
    if args.dry_run:
        print("(dry run: nothing was written)")
    return 1 if any(o.state == "failed" for o in outcomes) else 0


# --- the parser ---------------------------------------------------------------------------------


def _examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def _hub_flags(parser: argparse.ArgumentParser) -> None:
    hub = parser.add_argument_group("the hub (where the Clusters are)")
    hub.add_argument(
        "--hub-kubeconfig", help="kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)"
    )
    hub.add_argument("--hub-context", help="context of the hub (default: the current context)")


def _run(
    command: Callable[[argparse.Namespace], Awaitable[int | None]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            result = trio.run(command, args)
        except CliError as error:
            print(f"kokumi: {error}", file=sys.stderr)
            return 1
        except KubeError as error:
            print(f"kokumi: {_one_line(str(error))}", file=sys.stderr)
            return 1
        return result or 0

    return run


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error of these commands, with where to look."""

    def error(self, message: str) -> NoReturn:
        _usage_error(self, message)


def _usage_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: {_one_line(message)} (see {parser.prog} --help)\n")


def add_parser(commands: Any) -> None:
    """Add ``cluster`` and its subcommands to the ``kokumi`` command's subparsers."""
    formatter = argparse.RawDescriptionHelpFormatter
    cluster = commands.add_parser(
        "cluster",
        help="register and inspect Clusters: add, list, describe, import",
        description="Register and inspect Clusters as the user of your kubeconfig.",
        epilog=_examples(
            """
            kokumi cluster add spoke -n platform --context spoke --label fleet=edge
            kokumi cluster list -A
            """
        ),
        formatter_class=formatter,
    )
    setattr(cluster, "error", functools.partial(_usage_error, cluster))  # noqa: B010
    sub = cluster.add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND", parser_class=_OneLineParser
    )

    add_cmd = sub.add_parser(
        "add",
        help="create a Cluster and its kubeconfig Secret",
        description=textwrap.dedent(
            """\
            Create the Cluster NAME, then the Secret NAME-kubeconfig (key value) that it reads,
            owned by the Cluster so that it is deleted with it. Runs as the user of your
            kubeconfig: the admission policy kokumi-cluster-secret-access checks that you may
            read the Secret. A Secret NAME-kubeconfig that kokumi did not write is refused before
            anything is created; running add again updates both."""
        ),
        epilog=_examples(
            """
            kokumi cluster add spoke -n platform --context spoke --label fleet=edge
            kokumi cluster add spoke -n platform --server https://spoke.example:6443 \\
                --certificate-authority ca.crt --token-file token
            kokumi cluster add eks-prod -n platform --context eks-prod --create-service-account \\
                --cluster-role kokumi-deployer --server https://eks-prod.internal:443
            kokumi cluster add in-cluster -n team-a --in-cluster \\
                --label delivery.kokumi.dev/in-cluster=true
            kokumi cluster add spoke -n platform --context spoke --dry-run
            """
        ),
        formatter_class=formatter,
    )
    add_cmd.add_argument("name", metavar="NAME", help="the Cluster's name (a DNS label)")
    add_cmd.add_argument("-n", "--namespace", required=True, help="the workspace namespace")
    source = add_cmd.add_argument_group("the cluster to add (one way)")
    source.add_argument("--context", help="a context of the kubeconfig (default: its current one)")
    source.add_argument(
        "--kubeconfig", help="the kubeconfig to take the context from (default: as kubectl)"
    )
    source.add_argument(
        "--server", help="the API server's URL as the hub reaches it (overrides the context's)"
    )
    source.add_argument("--certificate-authority", metavar="FILE", help="the server's CA (PEM)")
    source.add_argument("--token-file", metavar="FILE", help="a file holding a bearer token")
    source.add_argument(
        "--in-cluster", action="store_true", help="the cluster Kokumi runs in (no Secret)"
    )
    source.add_argument(
        "--create-service-account",
        action="store_true",
        help="create a ServiceAccount on the context's cluster and store its token",
    )
    source.add_argument(
        "--service-account",
        default=SERVICE_ACCOUNT,
        help="its name, in kube-system (default: kokumi; its token Secret is NAME-token)",
    )
    source.add_argument(
        "--cluster-role",
        default="cluster-admin",
        help="the ClusterRole bound to it (default: cluster-admin; grant less where you can)",
    )
    source.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for its token (default: 30)"
    )
    add_cmd.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="a label (repeatable)"
    )
    add_cmd.add_argument("--description", default="", help="spec.description")
    add_cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="print the objects (not the kubeconfig); write nothing",
    )
    _hub_flags(add_cmd)
    add_cmd.set_defaults(run=_run(_cmd_add))

    list_cmd = sub.add_parser(
        "list",
        help="list Clusters with their state",
        description="List Clusters: connection, server, version, readiness and labels.",
        epilog=_examples(
            """
            kokumi cluster list -n platform
            kokumi cluster list -A -o wide
            kokumi cluster list -n platform -o yaml
            """
        ),
        formatter_class=formatter,
    )
    scope = list_cmd.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    list_cmd.add_argument("-o", "--output", choices=("wide", "yaml", "json"), help="output format")
    _hub_flags(list_cmd)
    list_cmd.set_defaults(run=_run(_cmd_list))

    describe = sub.add_parser(
        "describe",
        help="why a Cluster deploys or not: status, Environments, Argo CD registration",
        description=(
            "Show a Cluster's status, the Environments that select it and its target in each, "
            "and who holds its server in Argo CD."
        ),
        epilog=_examples("kokumi cluster describe spoke -n platform"),
        formatter_class=formatter,
    )
    describe.add_argument("name", metavar="NAME")
    describe.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    describe.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    _hub_flags(describe)
    describe.set_defaults(run=_run(_cmd_describe))

    import_cmd = sub.add_parser(
        "import",
        help="turn Cluster API or Argo CD clusters into Clusters",
        description=textwrap.dedent(
            """\
            --from cluster-api: each Secret <cluster>-kubeconfig labeled
            cluster.x-k8s.io/cluster-name becomes a Cluster of that name that reads it.
            --from argocd: each cluster Secret of Argo CD's that Kokumi did not write becomes a
            Secret <name>-kubeconfig and a Cluster; then delete the old Argo CD Secret so Kokumi
            can take the server over. Clusters that sign in with exec plugins or AWS IAM are
            listed as not importable, with why."""
        ),
        epilog=_examples(
            """
            kokumi cluster import --from cluster-api -n platform
            kokumi cluster import --from argocd -n platform --dry-run
            """
        ),
        formatter_class=formatter,
    )
    import_cmd.add_argument(
        "--from", dest="source", required=True, choices=("cluster-api", "argocd"), help="where from"
    )
    import_cmd.add_argument(
        "-n", "--namespace", help="the workspace namespace (default: the context's)"
    )
    import_cmd.add_argument(
        "--argocd-namespace", default=argocd.ARGOCD_NAMESPACE, help="Argo CD's namespace"
    )
    import_cmd.add_argument("--dry-run", action="store_true", help="say what would be imported")
    _hub_flags(import_cmd)
    import_cmd.set_defaults(run=_run(_cmd_import))
