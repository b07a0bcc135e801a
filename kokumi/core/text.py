"""How messages show what users wrote: one helper per job, shared by the pure core.

A message quotes user text (a label key, a context name) and names the type of a value that is
wrong; doing either in two ways would make two modules' messages drift apart, and a name full of
newlines or escape codes could break the one line a Ready condition or a log line is.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Mapping
from typing import Final, Literal

__all__ = ["b64", "one_line", "quoted", "type_name"]


def quoted(text: str, limit: int = 100) -> str:
    """User text as messages show it: quoted, at most ``limit`` characters, and on one line
    whatever it holds (every unprintable character escaped)."""
    if len(text) > limit:
        text = text[:limit] + "…"
    as_json = json.dumps(text, ensure_ascii=False)
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in as_json)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def b64(data: bytes) -> str:
    """Base64 as Kubernetes writes ``*-data`` fields and Secret values: standard, padded, ASCII."""
    return base64.b64encode(data).decode("ascii")


def type_name(value: object, words: Literal["json", "yaml"] = "json") -> str:
    """What a value is, with its article, for "must be a string, not ..." messages.

    In the words the user reads the value in: ``"json"`` as a Kubernetes object's fields read
    (``an object``, and ``null`` bare), ``"yaml"`` as a kubeconfig's (``a mapping``, ``a null``).
    """
    if words == "yaml":
        for kind, name in _YAML_WORDS:
            if isinstance(value, kind):
                return name
        return "a null" if value is None else "a value"
    if value is None:
        return "null"
    for kind, name in _JSON_WORDS:
        if isinstance(value, kind):
            return name
    return "a " + type(value).__name__


_YAML_WORDS: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (bool, "a boolean"),  # before int: a bool is an int
    ((int, float), "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a mapping"),
    (bytes, "a binary value"),
    (set, "a set"),
    (datetime.date, "a timestamp"),  # datetime too: YAML reads an unquoted date as one
)

_JSON_WORDS: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (bool, "a boolean"),  # before int: a bool is an int
    ((int, float), "a number"),
    (str, "a string"),
    ((list, tuple), "a list"),
    (Mapping, "an object"),
)
