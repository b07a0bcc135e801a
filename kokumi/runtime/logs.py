"""Log lines for people (``text``) or for a log pipeline (``json``, one object per line).

A JSON line carries the standard fields (``time``, ``level``, ``logger``, ``message``) and every
``extra=`` field of the call: the Cluster's ``cluster_namespace`` and ``cluster_name`` and the
``reason`` of its Ready condition on Ready changes, so a pipeline can group and alert by Cluster
and reason without parsing the message. Nothing secret is ever passed as an extra.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

__all__ = ["FORMATS", "JsonFormatter", "configure"]

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra=`` fields become keys of their own."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: int, log_format: str = "text") -> None:
    """Send the root logger's records to stderr in ``log_format`` (``text`` or ``json``)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    logging.basicConfig(level=level, handlers=[handler])
    # One line per HTTP request would drown what matters; httpx speaks up at WARNING.
    logging.getLogger("httpx").setLevel(logging.WARNING)
