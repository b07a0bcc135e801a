"""docs/reasons.md and :class:`kokumi.core.reasons.Reason` name the same Reasons, both ways.

A Reason is API: a row without a member documents something Kokumi never writes, and a member
without a row is something users meet with nothing to read about it.
"""

from __future__ import annotations

import re

from kokumi.core.reasons import PROBE_REASONS, Reason
from tests.support.paths import REPO

DOCS = REPO / "docs" / "reasons.md"


def _rows(text: str, first_column: str) -> list[list[str]]:
    """The rows of every table whose header's first cell is ``first_column``, split in cells."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if not inside:
            inside = cells[0] == first_column
            continue
        if set(cells[0]) <= {"-"}:
            continue
        rows.append(cells)
    return rows


def _documented() -> set[str]:
    text = DOCS.read_text()
    names = set()
    for column in ("Reason", "Target"):
        for row in _rows(text, column):
            match = re.fullmatch(r"`(\w+)`", row[0])
            assert match, f"docs/reasons.md: a {column} cell that is not one `Name`: {row[0]}"
            names.add(match[1])
    return names


def test_every_reason_is_documented() -> None:
    missing = {str(reason) for reason in Reason} - _documented()
    assert not missing, f"Reasons with no row in docs/reasons.md: {sorted(missing)}"


def test_every_documented_reason_is_in_the_enum() -> None:
    unknown = _documented() - {str(reason) for reason in Reason}
    assert not unknown, (
        f"rows of docs/reasons.md that kokumi.core.reasons.Reason lacks: {sorted(unknown)}"
    )


def test_the_cluster_table_says_true_for_ready_only() -> None:
    text = DOCS.read_text()
    table = text.split("## Cluster: the Ready condition", 1)[1].split("\n## ", 1)[0]
    statuses = {row[0].strip("`"): row[1] for row in _rows(table, "Reason")}
    assert {name for name, status in statuses.items() if status == "True"} == {"Ready"}
    assert set(statuses.values()) == {"True", "False"}
    assert set(statuses) >= PROBE_REASONS


def test_every_reason_is_written_somewhere() -> None:
    """A member nothing uses would pass the docs check and still document a fiction."""
    source = "".join(
        path.read_text() for path in (REPO / "kokumi").rglob("*.py") if path.name != "reasons.py"
    )
    unused = [reason.name for reason in Reason if f"Reason.{reason.name}" not in source]
    assert not unused, unused


def test_the_values_are_the_strings_of_the_api() -> None:
    """Reasons are API: a StrEnum member must be its exact string, in JSON and in f-strings."""
    assert Reason("TLSError") is Reason.TLS_ERROR
    assert f"{Reason.ARGOCD_NAME_CHANGED}" == "ArgoCDNameChanged"
    assert type(str(Reason.READY)) is str
    assert len({str(reason) for reason in Reason}) == len(Reason)
