"""A random canary for the credentials tests make up, and the scan that must never find it.

Tokens, proxy passwords and client keys that the tests invent carry ``CANARY`` (a key carries
itself: its PEM body is as random as a canary). No log line, Event, status, exception text or CLI
output may ever show one: ``tests/conftest.py`` scans every test's captured output, logs and
exception text, and the Events and statuses on the hub after every test that used it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

__all__ = ["CANARY", "found", "key_fragments", "proxy_url", "token"]

CANARY = f"canary{secrets.token_hex(8)}"


def token(label: str = "token") -> str:
    """A bearer token no server accepts, carrying the canary."""
    return f"kokumi-{label}-{CANARY}"


def proxy_url(host_port: str) -> str:
    """An HTTP proxy URL whose password is the canary."""
    return f"http://kokumi:{CANARY}@{host_port}"


def key_fragments(pem: bytes) -> list[str]:
    """Pieces of a PEM key's body long enough to be unique: any of them in output is a leak."""
    lines = [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]
    return [line[:32] for line in lines if len(line) >= 32][:2]


def found(where: Any, canaries: Iterable[str] = (CANARY,)) -> list[str]:
    """The canaries in ``where`` (text, or anything JSON can show)."""
    text = where if isinstance(where, str) else json.dumps(where, default=str)
    return [c for c in canaries if c in text]
