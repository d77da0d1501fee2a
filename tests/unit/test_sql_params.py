"""Parameter markers bound as SQL literals for the SQL front (no JVM)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from lance_spark.sql.params import bind, literal


def test_named_markers_outside_strings() -> None:
    text = "UPDATE t SET a = :a, s = ':a' WHERE id = :id AND x::int > 0"
    assert bind(text, {"a": "it's", "id": 7}) == (
        "UPDATE t SET a = 'it\\'s', s = ':a' WHERE id = 7 AND x::int > 0"
    )


def test_positional_markers_in_order() -> None:
    assert bind("DELETE FROM t WHERE a = ? OR b = ?", [1.5, None]) == (
        "DELETE FROM t WHERE a = 1.5D OR b = NULL"
    )


def test_unbound_or_unrenderable_values_are_left_to_spark() -> None:
    assert bind("DELETE FROM t WHERE a = :missing", {"other": 1}) is None
    assert bind("DELETE FROM t WHERE a = ? AND b = ?", [1]) is None
    assert bind("DELETE FROM t WHERE a = :a", {"a": [1, 2]}) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "TRUE"),
        (-3, "-3"),
        (Decimal("1.20"), "1.20BD"),
        (float("nan"), "CAST('NaN' AS DOUBLE)"),
        (float("inf"), "CAST('Infinity' AS DOUBLE)"),
        (datetime(2026, 1, 2, 3, 4, 5), "TIMESTAMP '2026-01-02 03:04:05'"),
        (date(2026, 1, 2), "DATE '2026-01-02'"),
        (b"\x00\xff", "X'00ff'"),
        ("a\\b", "'a\\\\b'"),
    ],
)
def test_literals(value: object, expected: str) -> None:
    assert literal(value) == expected
