"""What the cluster commands say when something goes wrong: one line, the server's own words."""

from __future__ import annotations

import re
import sys
from typing import Final

from kokumi.cmd import CommandError, UsageError
from kokumi.core.text import one_line
from kokumi.kube.errors import ApiError, KubeError

__all__ = ["CliError", "CliUsageError", "api_error", "warn"]


_CONTEXT_PREFIX: Final = re.compile(r"^[A-Z]+ /\S*: ")


class CliError(CommandError):
    """What went wrong, in one line that says how to fix it; the command exits 1."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class CliUsageError(CliError, UsageError):
    """A CliError found before anything was read or written: the command exits 2."""


def api_error(what: str, exc: KubeError) -> CliError:
    """The server's own words (an admission policy's message among them) after what was tried."""
    if isinstance(exc, ApiError):
        return CliError(f"{what}: {exc.reason}: {_CONTEXT_PREFIX.sub('', exc.message)}")
    return CliError(f"{what}: {exc}")


def warn(text: str) -> None:
    print(f"kokumi: warning: {one_line(text)}", file=sys.stderr)
