"""The entry points: one module per command, with its flags beside it.

Here too the one exit-status rule of every ``kokumi`` command, which :mod:`kokumi.cmd.root`
applies. 0: done. 2 (:class:`UsageError`): nothing ran, because the command line, or a kubeconfig
or file it names, cannot be used: the user fixes that and runs the command again, as after one of
argparse's usage errors, which exit 2 too. 1 (:class:`CommandError`): the command ran and failed,
as an API server, an admission policy, a lost Lease or a slow cluster decided. A command raises
one of the two (or returns 1 for a failure it has already reported) and never prints its own
error line, so that the rule and the ``kokumi:`` line it is said in are the same everywhere.
"""

from __future__ import annotations

from typing import ClassVar, Final

__all__ = ["DONE", "FAILED", "USAGE", "CommandError", "UsageError"]

DONE: Final = 0
FAILED: Final = 1
USAGE: Final = 2


class CommandError(Exception):
    """The command ran and failed: ``<prefix><message>`` on stderr, exit status 1."""

    status: ClassVar[int] = FAILED

    def __init__(self, message: str, *, prefix: str = "kokumi: ") -> None:
        super().__init__(message)
        self.prefix = prefix


class UsageError(CommandError):
    """Nothing ran: the command line or what it names must be fixed first; exit status 2."""

    status: ClassVar[int] = USAGE
