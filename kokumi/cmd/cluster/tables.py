"""The columns ``list`` and ``describe`` print, aligned as kubectl aligns them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["label_text", "ready_condition", "table"]


def ready_condition(cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in (cluster.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return {}


def label_text(labels: Mapping[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl aligns them: padded to the widest cell, three spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        + "\n"
        for row in rows
    )
