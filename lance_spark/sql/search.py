"""Catalog table names in ``lance_search(...)`` calls, replaced by the tables' locations.

The ``lance_search`` table function runs in a Python worker that has no session and so no
catalog: it takes a path. ``spark.sql`` of a registered session passes each statement through
:func:`resolve_table_names` first, which puts the location of a catalog table created
``USING lance`` in place of its name (the first argument, or the one named ``table``), so
``SELECT * FROM lance_search('pets', array(...), 5)`` works as users expect. Only that string
literal changes; the rest of the statement reaches Spark as typed.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from sqlglot import Token, TokenType
from sqlglot.dialects.spark import Spark

from lance_spark._spark import sql_string
from lance_spark.source.search import SEARCH_FUNCTION

_TABLE_ARGUMENT = "table"
_ARGUMENT_END = (TokenType.COMMA, TokenType.R_PAREN)


def resolve_table_names(spark: SparkSession, text: str) -> str:
    """``text`` with each catalog table name given to ``lance_search`` replaced by the
    table's location (a name that is not a Lance catalog table raises
    :class:`~lance_spark.errors.TableNotFoundError`); paths and everything else unchanged."""
    if SEARCH_FUNCTION not in text.lower():
        return text
    try:
        found = Spark().tokenize(text)
    except Exception:  # noqa: BLE001 - sqlglot's tokenizer errors have no common class
        return text  # Spark reports the syntax error itself
    replacements: list[tuple[int, int, str]] = []
    for i, token in enumerate(found):
        if token.text.lower() != SEARCH_FUNCTION or i + 1 >= len(found):
            continue
        if found[i + 1].token_type != TokenType.L_PAREN:
            continue
        literal = _table_argument(found, i + 2)
        if literal is None or _is_path(literal.text):
            continue
        from lance_spark.table import LanceTable

        uri = LanceTable.forName(spark, literal.text).uri
        replacements.append((literal.start, literal.end + 1, sql_string(uri)))
    for start, end, value in reversed(replacements):
        text = text[:start] + value + text[end:]
    return text


def _table_argument(found: list[Token], first: int) -> Token | None:
    """The string literal given as the table: the first argument, or ``table => '...'``."""
    depth = 0
    position = 0
    for j in range(first, len(found)):
        token = found[j]
        kind = token.token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0 and kind == TokenType.COMMA:
            position += 1
        elif depth == 0 and kind == TokenType.STRING:
            ends = j + 1 < len(found) and found[j + 1].token_type in _ARGUMENT_END
            if not ends:  # adjacent literals ('a' 'b') are one string to Spark: leave them
                return None
            named = j >= 2 and found[j - 1].token_type == TokenType.FARROW
            if named and found[j - 2].text.lower() == _TABLE_ARGUMENT:
                return token
            if not named and position == 0 and j == first:
                return token
    return None


def _is_path(value: str) -> bool:
    return "/" in value or "\\" in value or ":" in value
