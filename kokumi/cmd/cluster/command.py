"""What the ``kokumi cluster`` subcommands share: the hub's flags and connection, the runner,
and the columns ``list`` and ``describe`` print, aligned as kubectl aligns them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, NoReturn

import trio
import yaml

from kokumi.cmd import DONE
from kokumi.cmd.cluster.errors import CliError, CliUsageError, api_error, refusal
from kokumi.core import api
from kokumi.core.clusterview import label_text, ready_condition
from kokumi.core.registry import argocd
from kokumi.core.text import one_line
from kokumi.kube.client import Client
from kokumi.kube.config import SERVICE_ACCOUNT_ROOT as _SERVICE_ACCOUNT_ROOT
from kokumi.kube.config import Config
from kokumi.kube.errors import Forbidden, KubeError, NotFound
from kokumi.objects import metadata_of
from kokumi.workspace.newcluster import FIELD_MANAGER, Refused, argocd_only

__all__ = [
    "OBJECT_FORMATS",
    "OneLineParser",
    "examples",
    "hub_config",
    "hub_flags",
    "label_text",
    "print_clusters",
    "rbac_hint",
    "read_cluster",
    "ready_condition",
    "runner",
    "table",
    "usage_error",
    "where_of",
]


SERVICE_ACCOUNT_ROOT = _SERVICE_ACCOUNT_ROOT
"""Where a pod's ServiceAccount token is mounted (a module attribute so tests can move it)."""


def hub_config(args: argparse.Namespace) -> Config:
    """The user's own connection to the hub, chosen in kubectl's order.

    --hub-kubeconfig/--hub-context, then ``$KUBECONFIG``, then ~/.kube/config, and only when
    none of them is there the pod's ServiceAccount. Run in the manager's pod by a person who set
    ``$KUBECONFIG``, the command acts as that person, never as the manager. In a pod, where
    either could be meant, it says on stderr which identity it acts as, before any request.
    """
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    kubeconfig = (
        args.hub_kubeconfig
        or args.hub_context
        or os.environ.get("KUBECONFIG")
        or os.path.exists(os.path.expanduser("~/.kube/config"))
    )
    try:
        if kubeconfig or not in_pod:
            # A person's kubeconfig: its exec plugin (a cloud's sign-in) is theirs to run.
            config = Config.from_kubeconfig(
                args.hub_kubeconfig, context=args.hub_context, run_exec=True
            )
            where = args.hub_kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            identity = f"the user of kubeconfig {where}"
            if args.hub_context:
                identity += f", context {args.hub_context}"
        else:
            config = Config.in_cluster(root=SERVICE_ACCOUNT_ROOT)
            identity = f"this pod's ServiceAccount (namespace {config.namespace})"
    except KubeError as exc:
        raise CliUsageError(f"cannot connect to the hub: {exc}") from None
    if in_pod:
        print(f"kokumi: acting on the hub {config.server} as {identity}", file=sys.stderr)
    return config


@contextlib.asynccontextmanager
async def hub_client(args: argparse.Namespace) -> AsyncIterator[Client]:
    """The hub, as the user of its kubeconfig (or the pod's ServiceAccount), never writing in
    Argo CD's namespace (``--argocd-namespace`` where the command has it): whatever the user
    may do there, these commands write only workspaces."""
    namespace = getattr(args, "argocd_namespace", None) or argocd.ARGOCD_NAMESPACE
    async with Client(hub_config(args), field_manager=FIELD_MANAGER) as hub:
        yield hub.read_only_in(namespace, argocd_only(namespace))


def examples(text: str) -> str:
    return "examples:\n" + textwrap.indent(textwrap.dedent(text).strip(), "  ")


def hub_flags(parser: argparse.ArgumentParser) -> None:
    hub = parser.add_argument_group("the hub (where the Clusters are)")
    hub.add_argument(
        "--hub-kubeconfig", help="kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)"
    )
    hub.add_argument("--hub-context", help="context of the hub (default: the current context)")


def runner(
    command: Callable[[argparse.Namespace], Awaitable[int | None]],
) -> Callable[[argparse.Namespace], int]:
    """The command in Trio; a CliError goes up to kokumi.cmd.root, which says it and exits."""

    def run(args: argparse.Namespace) -> int:
        try:
            result = trio.run(command, args)
        except KubeError as error:
            raise CliError(str(error)) from None
        except Refused as refused:
            raise refusal(refused) from None
        return result or DONE

    return run


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error of these commands, with where to look."""

    def error(self, message: str) -> NoReturn:
        usage_error(self, message)


def usage_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: {one_line(message)} (see {parser.prog} --help)\n")


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl aligns them: padded to the widest cell, three spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )


OBJECT_FORMATS: Final = ("yaml", "json", "name")
"""The ``-o`` formats of kubectl that print the objects themselves rather than a table."""


def where_of(args: argparse.Namespace, hub: Client) -> str:
    """The namespace a command of one Cluster acts in: ``-n``, else the context's, as kubectl."""
    return str(args.namespace or hub.namespace)


def _shown(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The Cluster as ``kubectl get -o yaml`` shows it: its kind first, no managedFields (the
    field owners' bookkeeping, larger than the object and of no use when reading it)."""
    shown: dict[str, Any] = {"apiVersion": api.API_VERSION, "kind": "Cluster", **cluster}
    metadata = metadata_of(cluster)
    shown["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return shown


def print_clusters(clusters: Sequence[Mapping[str, Any]], output: str, *, one: bool) -> None:
    """Clusters in one of :data:`OBJECT_FORMATS`, as kubectl prints them: ``one`` Cluster as
    itself, several as a ``List``; ``name`` as ``cluster.delivery.kokumi.dev/NAME``, one a line,
    which ``kubectl`` and ``xargs`` take back as they are."""
    if output == "name":
        for cluster in clusters:
            print(f"{api.CLUSTERS.kind.lower()}.{api.GROUP}/{metadata_of(cluster).get('name', '')}")
        return
    items = [_shown(cluster) for cluster in clusters]
    document = items[0] if one else {"apiVersion": "v1", "kind": "List", "items": items}
    if output == "json":
        print(json.dumps(document, indent=4))
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")


def rbac_hint(verb: str, namespace: str) -> str:
    """The fix of a Forbidden, named: the verb on Clusters in that namespace, from its admin."""
    return (
        f"ask your admin for {verb} on clusters.delivery.kokumi.dev in namespace {namespace} "
        "(a Role and RoleBinding)"
    )


async def read_cluster(hub: Client, namespace: str, name: str, verb: str) -> dict[str, Any]:
    """The Cluster, or one line saying it is not there (and where to look) or what to ask for."""
    try:
        return await hub.get(api.CLUSTERS, name, namespace=namespace)
    except NotFound:
        raise CliError(
            f"no Cluster {name} in namespace {namespace}: see kokumi cluster list -n {namespace}"
        ) from None
    except Forbidden as exc:
        error = api_error(f"cannot read Cluster {namespace}/{name}", exc)
        raise CliError(f"{error}; {rbac_hint(f'get and {verb}', namespace)}") from None
    except KubeError as exc:
        raise api_error(f"cannot read Cluster {namespace}/{name}", exc) from None
