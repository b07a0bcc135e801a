"""``kokumi manager`` runs the controller; ``kokumi demo`` shows it on a local hub + spoke."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kokumi.cmd import CommandError, cluster, demo, manager, ui, uninstall
from kokumi.runtime.logs import configure as configure_logs

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kokumi", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    commands = parser.add_subparsers(dest="command", required=True)
    manager.add_parser(commands)
    uninstall.add_parser(commands)
    demo.add_parser(commands)
    cluster.add_parser(commands)
    ui.add_parser(commands)

    args = parser.parse_args(argv)
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
