"""``spark.sql(text, args=...)``: parameter markers bound as SQL literals for the front.

Spark binds ``:name`` / ``?`` markers in its own parser, which never sees the statements the
front runs itself (MERGE, UPDATE, DELETE, on Lance tables). For
those, :func:`bind` writes each marker's value into the text as a literal (only markers,
found with sqlglot's tokens, so a ``':name'`` inside a string stays). Values that have no
literal form (a ``Column``, a list) leave the statement to Spark with its ``args``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlglot import TokenType
from sqlglot.dialects.spark import Spark

from lance_spark._spark import sql_string

_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def bind(text: str, args: Mapping[str, Any] | Sequence[Any]) -> str | None:
    """``text`` with its parameter markers replaced by ``args`` as SQL literals, or None when
    a value has no literal form, a marker has no value or the text does not tokenize (then
    Spark binds the statement itself, and reports what is wrong)."""
    try:
        tokens = Spark().tokenize(text)
    except Exception:  # noqa: BLE001 - sqlglot's tokenizer errors have no common class
        return None
    named = isinstance(args, Mapping)
    by_name: Mapping[str, Any] = args if isinstance(args, Mapping) else {}
    by_position: Sequence[Any] = () if isinstance(args, Mapping) else args
    spans: list[tuple[int, int, Any]] = []
    position = 0
    for i, token in enumerate(tokens):
        if named and token.token_type == TokenType.COLON and i + 1 < len(tokens):
            name_token = tokens[i + 1]
            adjacent = name_token.start == token.end + 1
            if not adjacent or name_token.token_type not in _NAME_TOKENS:
                continue
            name = str(name_token.text)
            if name not in by_name:
                return None  # Spark reports UNBOUND_SQL_PARAMETER itself
            spans.append((token.start, name_token.end + 1, by_name[name]))
        elif not named and token.token_type == TokenType.PLACEHOLDER and token.text == "?":
            if position >= len(by_position):
                return None
            spans.append((token.start, token.end + 1, by_position[position]))
            position += 1
    out = text
    for start, end, value in reversed(spans):
        rendered = literal(value)
        if rendered is None:
            return None
        out = out[:start] + rendered + out[end:]
    return out


def literal(value: Any) -> str | None:
    """``value`` as a Spark SQL literal, or None when it has none here."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return f"CAST('{value!r}' AS DOUBLE)".replace("'nan'", "'NaN'").replace(
                "'inf'", "'Infinity'"
            )
        return f"{value!r}D"
    if isinstance(value, Decimal):
        return f"{value}BD"
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, datetime):
        return f"TIMESTAMP {sql_string(value.isoformat(sep=' '))}"
    if isinstance(value, date):
        return f"DATE {sql_string(value.isoformat())}"
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    return None
