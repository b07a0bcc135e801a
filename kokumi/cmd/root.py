"""The ``kokumi`` command: its subcommands, ``--version``, and the one exit-status rule."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
from collections.abc import Sequence
from typing import Final

from kokumi.cmd import CommandError, cluster, demo, manager, ui, uninstall
from kokumi.runtime.logs import configure as configure_logs

__all__ = ["DESCRIPTION", "main", "parser", "version"]

DESCRIPTION: Final = (
    "kokumi manager runs the controller; kokumi cluster registers and inspects Clusters as you; "
    "kokumi ui shows them in a browser; kokumi demo shows it all on a local hub and spoke."
)
"""What ``kokumi --help`` says first: plain text, as a terminal shows it (the docstrings'
reStructuredText markup is for the reference docs, never for ``--help``)."""


def version() -> str:
    """The installed package's version, as its metadata says (one source: pyproject.toml)."""
    try:
        return importlib.metadata.version("kokumi-clusters")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (kokumi-clusters is not installed: run pip install -e .)"


def parser() -> argparse.ArgumentParser:
    """The whole command line: every command and its flags, for ``main`` and its tests."""
    root = argparse.ArgumentParser(prog="kokumi", description=DESCRIPTION)
    root.add_argument("--version", action="version", version=f"kokumi {version()}")
    root.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = root.add_subparsers(dest="command", required=True)
    manager.add_parser(commands)
    uninstall.add_parser(commands)
    demo.add_parser(commands)
    cluster.add_parser(commands)
    ui.add_parser(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logs(
        logging.DEBUG if args.verbose else logging.INFO, getattr(args, "log_format", "text")
    )
    try:
        result: int = args.run(args)
    except CommandError as error:
        # The one exit-status rule (kokumi.cmd): 2 when nothing ran, 1 when it failed.
        print(f"{error.prefix}{error}", file=sys.stderr)
        return error.status
    return result


if __name__ == "__main__":
    raise SystemExit(main())
