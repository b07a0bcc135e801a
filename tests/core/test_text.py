"""kokumi.core.text: how messages quote user text and name a value's type."""

from __future__ import annotations

import datetime

import pytest

from kokumi.core.text import b64, one_line, quoted, type_name


def test_quoted_text_is_short_and_on_one_line() -> None:
    assert quoted("prod") == '"prod"'
    assert quoted("a\nb\x1b") == '"a\\nb\\u001b"'
    assert quoted("\u2028") == '"\\u2028"'
    assert quoted("x" * 101) == '"' + "x" * 100 + '…"'
    assert quoted("x" * 81, 80) == '"' + "x" * 80 + '…"'


def test_one_line_and_b64() -> None:
    assert one_line(" a\n\tb  c ") == "a b c"
    assert b64(b"\xff") == "/w=="


@pytest.mark.parametrize(
    ("value", "json", "yaml"),
    [
        (None, "null", "a null"),
        (True, "a boolean", "a boolean"),
        (1, "a number", "a number"),
        (1.5, "a number", "a number"),
        ("s", "a string", "a string"),
        ([1], "a list", "a list"),
        ({}, "an object", "a mapping"),
        (b"x", "a bytes", "a binary value"),
        ({1}, "a set", "a set"),
        (datetime.date(2026, 1, 1), "a date", "a timestamp"),
    ],
)
def test_a_type_is_named_in_the_words_its_reader_reads(value: object, json: str, yaml: str) -> None:
    assert type_name(value) == type_name(value, "json") == json
    assert type_name(value, "yaml") == yaml
