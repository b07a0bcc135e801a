"""``kokumi cluster add``: a Cluster and its kubeconfig Secret, from the flags that say how.

The flags choose where the kubeconfig comes from (a context, a server and token, a ServiceAccount
created on the cluster, or none for InCluster); :mod:`kokumi.workspace.newcluster` does the
rest. ``--dry-run`` shows the objects, the Secret without its kubeconfig. ``--secret-only`` writes
the Secret alone and prints the Cluster for its user to apply, as the spec's local try (``make
kind-spoke``) does: the Cluster is the user's to create, with the labels their Environments select.
"""

from __future__ import annotations

import argparse
import contextlib
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from kokumi.cmd.cluster.command import OneLineParser, examples, hub_client, hub_flags, runner
from kokumi.cmd.cluster.errors import CliError, CliUsageError, api_error, warn
from kokumi.cmd.cluster.scope import scope_from_flags
from kokumi.cmd.cluster.spoke import (
    kubeconfig_of_context,
    service_account_kubeconfig,
    service_account_objects,
)
from kokumi.core import api
from kokumi.core.kubeconfig.connection import KubeconfigRefused
from kokumi.core.registry import argocd
from kokumi.core.registry.ownership import IN_CLUSTER_SERVER
from kokumi.kube.config import Config
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.kube.resources import SECRETS
from kokumi.workspace.newcluster import (
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    SERVICE_ACCOUNT,
    WRITTEN_BY,
    Refused,
    Source,
    add_cluster,
    check_kubeconfig,
    check_name,
    cluster_object,
    kubeconfig_of_token,
    kubeconfig_secret,
    kubeconfig_secret_name,
    refuse_argocds_own_cluster,
    write,
    written_here,
)

__all__ = ["add_parser", "dump_objects"]


_NOT_SHOWN: Final = "# data.value: the kubeconfig ({what}), not shown\n"


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror}") from None


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
    check_name(name)


def _source(args: argparse.Namespace) -> tuple[Source | Config, list[tuple[dict[str, Any], str]]]:
    """The kubeconfig ``add`` stores, as the flags say; with --dry-run, the spoke's objects too.

    For --create-service-account, the connection to the cluster to run the spec's steps on:
    everything here is read from the command line and local files, before any request.
    """
    if args.in_cluster:
        return Source(IN_CLUSTER_SERVER), []
    if args.create_service_account:
        if not (args.kubeconfig or args.context):
            raise CliError(
                "--create-service-account needs --context (or --kubeconfig): the cluster to "
                "create the ServiceAccount on"
            )
        if args.cluster_role == "cluster-admin":
            warn(
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
        return spoke_config, []
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
    if args.server and not (args.kubeconfig or args.context):
        raise CliError(
            "--server alone is not enough: add --context (whose server it overrides), "
            "--token-file (and --certificate-authority), or --create-service-account"
        )
    if args.kubeconfig or args.context:
        found = kubeconfig_of_context(args.kubeconfig, args.context)
        if args.server and found.kubeconfig is not None:
            return _with_server(found, args.server), []
        return found, []
    raise CliError(
        "say how to reach the cluster: --context NAME (or --kubeconfig FILE), --server URL "
        "with --token-file FILE, --create-service-account with --context, or --in-cluster"
    )


def _with_server(found: Source, server: str) -> Source:
    """The context's kubeconfig with ``--server`` in place of its server, as the help says:
    the address the hub reaches the cluster by, which may differ from the user's."""
    assert found.kubeconfig is not None
    document = yaml.safe_load(found.kubeconfig)  # minimise wrote it: one cluster, no anchors
    document["clusters"][0]["cluster"]["server"] = server
    try:
        text, checked = check_kubeconfig(yaml.safe_dump(document, sort_keys=False))
    except KubeconfigRefused as refused:
        raise CliError(f"--server cannot be used: {refused.refusal.message}") from None
    return Source(checked, text, f"{found.what.rpartition(', server ')[0]}, server {checked}")


@contextlib.contextmanager
def _nothing_ran_yet() -> Iterator[None]:
    """What is refused before the first request is the command line's to fix: exit status 2."""
    try:
        yield
    except CliUsageError:
        raise
    except Refused as error:
        raise CliUsageError(str(error)) from None


def _refuse_argocds_own_cluster(source: Source) -> None:
    refuse_argocds_own_cluster(source)


async def _cmd_add(args: argparse.Namespace) -> None:
    with _nothing_ran_yet():
        _check_name(args.name)
        labels = _labels(args.label)
        scope = scope_from_flags(
            args.name, args.namespace, args.scope_namespace, args.cluster_resources,
            in_cluster=args.in_cluster,
        )  # fmt: skip
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
            raise CliError(
                "--in-cluster needs no --server, --kubeconfig or --context: leave them out"
            )
        if args.server is not None and not args.server.strip():
            # Likely a shell's empty substitution: ignoring it would store the context's server.
            raise CliError(
                "--server is empty: give the API server's URL as the hub reaches it, such as "
                "https://spoke.example:6443"
            )
        if args.secret_only and args.in_cluster:
            raise CliError(
                "--secret-only writes the kubeconfig Secret, and an --in-cluster Cluster has "
                "none: leave --secret-only out"
            )
        found, spoke_objects = _source(args)
        if isinstance(found, Source):
            _refuse_argocds_own_cluster(found)
    if isinstance(found, Config):
        # The spec's steps on the cluster: from the first request on, a failure exits 1.
        found = await service_account_kubeconfig(
            found,
            name=args.name,
            account=args.service_account,
            cluster_role=args.cluster_role,
            server=args.server,
            token_wait=args.timeout,
        )
        _refuse_argocds_own_cluster(found)
    source = found

    if args.dry_run:
        objects = [*spoke_objects]
        objects.append(
            (
                cluster_object(
                    args.name,
                    args.namespace,
                    secret=kubeconfig_secret_name(args.name)
                    if source.kubeconfig is not None
                    else None,
                    labels=labels,
                    description=args.description,
                    scope=scope,
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

    if args.secret_only:
        await _secret_only(args, source, labels, scope)
        return

    async with hub_client(args) as hub:
        added = await add_cluster(
            hub,
            args.name,
            args.namespace,
            source,
            labels=labels,
            description=args.description,
            scope=scope,
        )
    where = f"{args.namespace}/{args.name}"
    print(f"Cluster {where} {'created' if added.cluster_created else 'updated'}")
    if added.secret_created is not None:
        verb = "created" if added.secret_created else "updated"
        print(
            f"Secret {args.namespace}/{kubeconfig_secret_name(args.name)} {verb}: the kubeconfig "
            f"of {source.server}, owned by the Cluster and deleted with it"
        )
    print(
        f"Kokumi checks it within a minute: kokumi cluster describe {args.name} -n {args.namespace}"
    )


async def _secret_only(
    args: argparse.Namespace, source: Source, labels: dict[str, str], scope: api.Scope | None
) -> None:
    """Write only the Secret ``NAME-kubeconfig``; print the Cluster that reads it, to apply.

    The Secret has no owner yet (there is no Cluster to own it): a later ``add`` of the Cluster
    takes it over, since it carries the mark of this tool. A Secret of that name without the mark
    is refused, as ``add`` refuses it; one with the mark keeps its owner and its other labels.
    """
    assert source.kubeconfig is not None  # --in-cluster was refused
    name = kubeconfig_secret_name(args.name)
    where = f"{args.namespace}/{name}"
    wanted = kubeconfig_secret(args.name, args.namespace, source.kubeconfig)
    async with hub_client(args) as hub:
        try:
            existing: dict[str, Any] | None = await hub.get(SECRETS, name, namespace=args.namespace)
        except (NotFound, Forbidden):
            existing = None  # a user who may not read it is refused by the create, in its words
        except KubeError as exc:
            raise api_error(f"cannot read Secret {where}", exc) from None
        if existing is None:
            await write(hub, "create", SECRETS, wanted, hub.create)
        else:
            if not written_here(existing, args.name):
                raise CliError(
                    f"Secret {where} exists and kokumi did not write it (it lacks the labels "
                    f"{LABEL_MANAGED_BY}={WRITTEN_BY} and {LABEL_CLUSTER}={args.name}), so "
                    "nothing was written: choose another Cluster name, or delete that Secret if "
                    "nothing uses it"
                )
            old = existing["metadata"]
            meta = wanted["metadata"]
            meta["labels"] = {**(old.get("labels") or {}), **meta["labels"]}
            meta["resourceVersion"] = old["resourceVersion"]
            if old.get("ownerReferences"):
                meta["ownerReferences"] = old["ownerReferences"]
            await write(hub, "update", SECRETS, wanted, hub.replace)
    cluster = cluster_object(
        args.name,
        args.namespace,
        secret=name,
        labels=labels,
        description=args.description,
        scope=scope,
    )
    verb = "updated" if existing is not None else "created"
    print(f"# Secret {where} {verb}: {source.what}")
    print("# The Cluster that reads it, to apply: kubectl apply -f FILE (or pipe it to -f -)")
    print(yaml.safe_dump(cluster, sort_keys=False), end="")
    watch = f"kubectl get clusters.delivery.kokumi.dev {args.name} -n {args.namespace} -w"
    print(f"# Then watch it: {watch}")


def add_parser(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """Add ``add`` and its flags to ``kokumi cluster``."""
    formatter = argparse.RawDescriptionHelpFormatter
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
        epilog=examples(
            """
            kokumi cluster add spoke -n platform --context spoke --label fleet=edge
            kokumi cluster add spoke -n platform --server https://spoke.example:6443 \\
                --certificate-authority ca.crt --token-file token
            kokumi cluster add eks-prod -n platform --context eks-prod --create-service-account \\
                --cluster-role kokumi-deployer --server https://eks-prod.internal:443
            kokumi cluster add in-cluster -n team-a --in-cluster \\
                --label delivery.kokumi.dev/in-cluster=true
            kokumi cluster add team-a -n platform --context spoke --cluster-role team-a-deployer \
                --create-service-account --scope-namespace team-a,team-a-jobs
            kokumi cluster add spoke -n platform --context spoke --dry-run
            kokumi cluster add spoke -n platform --kubeconfig kind-spoke.kubeconfig \\
                --create-service-account --server https://kokumi-spoke-control-plane:6443 \\
                --secret-only
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
    scoped = add_cmd.add_argument_group(
        "where Argo CD may work (spec.scope), for a credential that may not list cluster-wide"
    )
    scoped.add_argument(
        "--scope-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="a namespace of the cluster Argo CD may deploy to and watch (repeatable, or "
        "comma-separated); unset: cluster-wide. Running add again without it keeps the scope",
    )
    scoped.add_argument(
        "--cluster-resources",
        action="store_true",
        help="Argo CD may also manage cluster-scoped resources there (needs --scope-namespace)",
    )
    add_cmd.add_argument(
        "--argocd-namespace",
        default=argocd.ARGOCD_NAMESPACE,
        help="Argo CD's namespace, where only Kokumi's manager writes: never a workspace",
    )
    add_cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="print the objects (not the kubeconfig); write nothing",
    )
    add_cmd.add_argument(
        "--secret-only",
        action="store_true",
        help="write only the Secret NAME-kubeconfig, without an owner, and print the Cluster "
        "that reads it for you to apply",
    )
    hub_flags(add_cmd)
    add_cmd.set_defaults(run=runner(_cmd_add))
