"""What every ``kokumi cluster`` subcommand shares: the hub's flags and connection, the runner."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

from kokumi.cmd.cluster.errors import CliError, one_line
from kokumi.kube.config import Config
from kokumi.kube.errors import KubeError

__all__ = ["OneLineParser", "examples", "hub_config", "hub_flags", "runner", "usage_error"]


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
    def run(args: argparse.Namespace) -> int:
        try:
            result = trio.run(command, args)
        except CliError as error:
            print(f"kokumi: {error}", file=sys.stderr)
            return 1
        except KubeError as error:
            print(f"kokumi: {one_line(str(error))}", file=sys.stderr)
            return 1
        return result or 0

    return run


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error of these commands, with where to look."""

    def error(self, message: str) -> NoReturn:
        usage_error(self, message)


def usage_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: {one_line(message)} (see {parser.prog} --help)\n")
