"""--log-format json: one object a line, with the Cluster and the reason as fields of their own."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from kokumi.runtime.logs import JsonFormatter, configure


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(
        "kokumi.clusters", logging.WARNING, "x.py", 1, "Cluster %s", ("a",), None
    )
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_a_json_line_carries_the_cluster_and_the_reason() -> None:
    line = JsonFormatter().format(
        record(cluster_namespace="team", cluster_name="edge", reason="Unreachable")
    )
    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "Cluster a"
    assert data["level"] == "WARNING"
    assert data["logger"] == "kokumi.clusters"
    assert (data["cluster_namespace"], data["cluster_name"], data["reason"]) == (
        "team",
        "edge",
        "Unreachable",
    )
    assert data["time"].endswith("+00:00")


def test_a_json_line_holds_the_traceback_of_an_exception() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("k", logging.ERROR, "x.py", 1, "failed", (), None)
        rec.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(rec))
    assert "RuntimeError: boom" in data["exception"]


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format 'xml' is not one of text, json"):
        configure(logging.INFO, "xml")
