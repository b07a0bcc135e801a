"""Reading API objects' plain-dict forms, as every caller of the client has to."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

__all__ = ["secret_data"]


def secret_data(secret: Mapping[str, Any], key: str) -> bytes | None:
    """The decoded value under ``key`` of a Secret's ``data``; None if absent or not base64.

    Secrets come from users, so anything may sit there; an answer beats an exception.
    """
    data = secret.get("data")
    if not isinstance(data, Mapping):
        return None
    value = data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
