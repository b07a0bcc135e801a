"""``kokumi demo``: the manager against a local hub + spoke it starts itself.

The flags are here and the walk-through in :mod:`kokumi.cmd.demo.walkthrough`, imported only when
the demo runs: it needs :mod:`kokumi.testing`, which no other command loads.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` and its flags to the ``kokumi`` command's subparsers."""
    demo = commands.add_parser(
        "demo", help="start a local hub + spoke, register the spoke, run the manager, show it"
    )
    demo.add_argument("--once", action="store_true", help="exit once everything is Ready")
    demo.add_argument("--timeout", type=float, default=180.0, help="seconds --once waits")
    demo.add_argument(
        "--ui", action="store_true", help="serve kokumi ui beside the manager and print its link"
    )
    demo.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from kokumi.cmd.demo.walkthrough import run_demo  # noqa: PLC0415 - only the demo needs it

    return run_demo(once=args.once, timeout=args.timeout, ui=args.ui)
