"""What the cluster commands say when something goes wrong: one line, the server's own words."""

from __future__ import annotations

import sys

from kokumi.cmd import CommandError, UsageError
from kokumi.core.text import one_line
from kokumi.kube.errors import KubeError
from kokumi.workspace import newcluster

__all__ = ["CliError", "CliUsageError", "api_error", "refusal", "warn"]


class CliError(CommandError, newcluster.Refused):
    """What went wrong, in one line that says how to fix it; the command exits 1.

    A :class:`~kokumi.workspace.newcluster.Refused` too, so that what catches a refusal of the
    shared New Cluster steps catches the command's own; :func:`refusal` turns one into the other.
    """

    def __str__(self) -> str:
        return one_line(super().__str__())


class CliUsageError(CliError, UsageError):
    """A CliError found before anything was read or written: the command exits 2."""


def api_error(what: str, exc: KubeError) -> CliError:
    """The server's own words (an admission policy's message among them) after what was tried."""
    return refusal(newcluster.api_error(what, exc))


def refusal(refused: newcluster.Refused) -> CliError:
    """A refusal of the shared steps as the command's error: the same line, exit status 1."""
    return refused if isinstance(refused, CliError) else CliError(str(refused))


def warn(text: str) -> None:
    print(f"kokumi: warning: {one_line(text)}", file=sys.stderr)
