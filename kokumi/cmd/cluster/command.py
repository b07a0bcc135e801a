"""What the ``kokumi cluster`` subcommands share: the hub's flags and connection, the runner,
and the columns ``list`` and ``describe`` print, aligned as kubectl aligns them.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

import trio

from kokumi.cmd import DONE
from kokumi.cmd.cluster.errors import CliError, CliUsageError, refusal
from kokumi.core.clusterview import label_text, ready_condition
from kokumi.core.text import one_line
from kokumi.kube.config import Config
from kokumi.kube.errors import KubeError
from kokumi.workspace.newcluster import Refused

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
        raise CliUsageError(f"cannot connect to the hub: {exc}") from None


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
