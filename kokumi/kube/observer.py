"""What a program may count of a client's work, and the default that counts nothing."""

from __future__ import annotations

from typing import Protocol

# ``Unobserved`` is the client's default, not part of the package's face.
__all__ = ["Observer"]


class Observer(Protocol):
    """What a program may want to count about a client's work (``client.observer = ...``).

    Each method is called inline on the request path, so it must be quick and must not raise.
    The default observer counts nothing.
    """

    def request(self, verb: str, code: str) -> None:
        """One answer (``code``: the HTTP status, or ``error`` without one); retries count."""

    def watch_restarted(self, resource: str, reason: str) -> None:
        """A watch of ``resource`` starts again: ``gone`` after a 410, ``error`` after a failure."""


class Unobserved:
    """The default observer: counts nothing."""

    def request(self, verb: str, code: str) -> None:
        pass

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass
