"""What the ``kokumi cluster`` subcommands share: the hub's flags and connection, the runner,
and the columns ``list`` and ``describe`` print, aligned as kubectl aligns them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import NoReturn

import trio

from kokumi.cmd import DONE
from kokumi.cmd.cluster.errors import CliError, CliUsageError, refusal
from kokumi.core.clusterview import label_text, ready_condition
from kokumi.core.registry import argocd
from kokumi.core.text import one_line
from kokumi.kube.client import Client
from kokumi.kube.config import SERVICE_ACCOUNT_ROOT as _SERVICE_ACCOUNT_ROOT
from kokumi.kube.config import Config
from kokumi.kube.errors import KubeError
from kokumi.workspace.newcluster import FIELD_MANAGER, Refused, argocd_only

__all__ = [
    "OneLineParser",
    "examples",
    "hub_config",
    "hub_flags",
    "label_text",
    "ready_condition",
    "runner",
    "table",
    "usage_error",
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
