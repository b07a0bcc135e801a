"""A package's lazy face (PEP 562): each public name loads its home module on first use.

``kokumi`` and ``kokumi.kube`` both re-export names from their homes without importing the homes
up front, so that a pure module's import does not load Trio, httpx and the actors with its
package. One function does it for both, so that the two faces fail and list the same way.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["face"]


def face(
    package: str, homes: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``homes`` map name -> module."""
    module = sys.modules[package]
    names = frozenset(public)

    def getattr_(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        vars(module)[name] = value  # the next lookup is an ordinary one
        return value

    def dir_() -> list[str]:
        return sorted({*vars(module), *names})

    return getattr_, dir_
