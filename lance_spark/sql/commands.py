"""SQL statements for maintenance of Lance tables that the companion does not take yet
(OPTIMIZE, CREATE INDEX, SHOW TBLPROPERTIES from Lance's config, DESCRIBE EXTENDED with the
provider and location), in the sessions ``register`` wrapped. (Time travel, ``lance.`path```
and ``t.branch_b`` in queries are Spark's own, through the companion's session catalog, and so
are CREATE / CTAS / REPLACE / DROP / ALTER TABLE; ``DESCRIBE HISTORY``, ``RESTORE``,
``VACUUM``, ``DESCRIBE DETAIL``, tags and branches are the companion's statements in every
client, see :mod:`lance_spark.sql.front`.)

They are parsed by a small recursive-descent parser over sqlglot's Spark tokens. Each runs
through :class:`~lance_spark.table.LanceTable`; a statement whose table is not a Lance table is
left to Spark (its result and errors are Spark's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot import expressions as exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokenizer_core import Token, TokenType

from lance_spark.errors import SqlSyntaxError
from lance_spark.source.options import MAIN_BRANCH
from lance_spark.sql.targets import (
    lance_table,
    path_of,
    table_name,
)
from lance_spark.table import LanceTable
from lance_spark.table import catalog as _catalog
from lance_spark.table import writes as _writes

Run = Callable[..., DataFrame]


class _Tokenizer(Spark.Tokenizer):
    # Spark's tokenizer swallows the rest of a statement it calls a "command" (VACUUM,
    # OPTIMIZE...) into one string token; these commands are exactly what is parsed here.
    COMMANDS: ClassVar[set[TokenType]] = set()


def run_statement(spark: SparkSession, run: Run, text: str) -> DataFrame | None:
    """Run ``text`` if it is one of this module's statements on a Lance table, else None."""
    return _command(spark, run, text)


# --- Delta-style commands ---------------------------------------------------------------------


class _Cursor:
    """Tokens of one statement, consumed left to right."""

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def accept(self, *words: str) -> bool:
        """Consume ``words`` if the next tokens are exactly these (unquoted) words."""
        ahead = self.tokens[self.pos : self.pos + len(words)]
        if len(ahead) == len(words) and all(
            _word(t) == w for t, w in zip(ahead, words, strict=True)
        ):
            self.pos += len(words)
            return True
        return False

    def expect(self, *words: str, statement: str) -> None:
        if not self.accept(*words):
            raise self.error(f"expected {' '.join(words)}", statement)

    def name(self, statement: str, what: str) -> str:
        token = self.peek()
        if token is None or token.token_type in _PUNCTUATION or token.token_type in _LITERALS:
            raise self.error(f"expected {what}", statement)
        self.pos += 1
        return str(token.text)

    def number(self, statement: str, what: str) -> float:
        token = self.peek()
        if token is None or token.token_type != TokenType.NUMBER:
            raise self.error(f"expected {what} (a number)", statement)
        self.pos += 1
        return float(token.text)

    def name_or_none(self) -> str | None:
        token = self.peek()
        if token is None or token.token_type in _PUNCTUATION | _LITERALS:
            return None
        self.pos += 1
        return str(token.text)

    def string(self, statement: str, what: str) -> str:
        token = self.peek()
        if token is None or token.token_type != TokenType.STRING:
            raise self.error(f"expected {what} (a quoted string)", statement)
        self.pos += 1
        return str(token.text)

    def table(self) -> exp.Table | None:
        """A possibly qualified table name; None when the tokens are not one."""
        parts: list[exp.Identifier] = []
        while True:
            token = self.peek()
            if token is None or token.token_type in _PUNCTUATION | _LITERALS:
                return None
            quoted = token.token_type == TokenType.IDENTIFIER
            parts.append(exp.to_identifier(str(token.text), quoted=quoted))
            self.pos += 1
            nxt = self.peek()
            if nxt is None or nxt.token_type != TokenType.DOT:
                break
            self.pos += 1
        if len(parts) > 3:
            return None
        catalog, db = ([None, None, *parts[:-1]])[-2:]
        return exp.Table(this=parts[-1], db=db, catalog=catalog)

    def end(self, statement: str) -> None:
        if self.peek() is not None:
            raise self.error("unexpected input", statement)

    def error(self, problem: str, statement: str) -> SqlSyntaxError:
        token = self.peek()
        if token is None:
            where = "at the end of the statement"
        else:
            where = f"at {token.text!r} (line {token.line}, column {token.col})"
        return SqlSyntaxError(
            f"[PARSE_SYNTAX_ERROR] {statement}: {problem} {where}. Grammar: {_GRAMMAR[statement]}"
        )


_PUNCTUATION = {
    TokenType.DOT,
    TokenType.COMMA,
    TokenType.L_PAREN,
    TokenType.R_PAREN,
    TokenType.EQ,
    TokenType.SEMICOLON,
}
_LITERALS = {TokenType.STRING, TokenType.NUMBER}

_GRAMMAR = {
    "OPTIMIZE": "OPTIMIZE table",
    "CREATE INDEX": (
        "CREATE INDEX name ON table (column) [USING type] [WITH (key = value, ...)], "
        "a value being a number, a quoted string, true or false"
    ),
    "SHOW TBLPROPERTIES": "SHOW TBLPROPERTIES table [('key')]",
    "DESCRIBE EXTENDED": "DESCRIBE [TABLE] {EXTENDED | FORMATTED} table",
}
# Statements about a catalog entry, which only the main branch has.
_CATALOG_ONLY = frozenset({"DESCRIBE EXTENDED"})


@dataclass(frozen=True)
class Command:
    """A parsed Delta-style command. ``kind`` is one of the keys of ``_GRAMMAR``; ``error`` is set when the statement names a table but is malformed:
    it is raised only if that table is a Lance table (otherwise Spark reports its own)."""

    kind: str
    table: exp.Table
    args: tuple[tuple[str, Any], ...] = ()
    error: SqlSyntaxError | None = None

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)


def parse_command(text: str) -> Command | None:
    """The Delta-style command in ``text``, or None when it is not one (no JVM needed)."""
    try:
        tokens = [t for t in _Tokenizer().tokenize(text) if t.token_type != TokenType.SEMICOLON]
    except sqlglot.errors.TokenError:
        return None
    cursor = _Cursor(text, tokens)
    kind = _command_kind(cursor)
    if kind is None:
        return None
    if kind == "CREATE INDEX":
        index_name = cursor.name_or_none()
        if index_name is None or not cursor.accept("ON"):
            return None
    table = cursor.table()
    if table is None:
        return None
    try:
        args = _ARGUMENTS[kind](cursor)
    except SqlSyntaxError as err:
        return Command(kind, table, error=err)
    if kind == "CREATE INDEX":
        args = (("name", index_name), *args)
    return Command(kind, table, args)


def _command_kind(cursor: _Cursor) -> str | None:
    for words in (("DESCRIBE", "TABLE"), ("DESCRIBE",), ("DESC", "TABLE"), ("DESC",)):
        if cursor.accept(*words, "EXTENDED") or cursor.accept(*words, "FORMATTED"):
            return "DESCRIBE EXTENDED"
    if cursor.accept("OPTIMIZE"):
        return "OPTIMIZE"
    if cursor.accept("SHOW", "TBLPROPERTIES"):
        return "SHOW TBLPROPERTIES"
    if cursor.accept("CREATE", "INDEX"):
        return "CREATE INDEX"
    return None


def _optimize(cursor: _Cursor) -> tuple[tuple[str, Any], ...]:
    cursor.end("OPTIMIZE")
    return ()


def _create_index(cursor: _Cursor) -> tuple[tuple[str, Any], ...]:
    statement = "CREATE INDEX"
    cursor.expect("(", statement=statement)
    column = cursor.name(statement, "a column")
    cursor.expect(")", statement=statement)
    kind = "BTREE"
    if cursor.accept("USING"):
        kind = cursor.name(statement, "an index type")
    params: dict[str, object] = {}
    if cursor.accept("WITH"):
        cursor.expect("(", statement=statement)
        while True:
            key = cursor.name(statement, "a parameter name")
            cursor.expect("=", statement=statement)
            token = cursor.peek()
            if token is not None and token.token_type == TokenType.NUMBER:
                value = cursor.number(statement, "a value")
                params[key] = int(value) if value.is_integer() else value
            elif cursor.accept("TRUE") or cursor.accept("FALSE"):
                params[key] = cursor.tokens[cursor.pos - 1].text.upper() == "TRUE"
            elif token is not None and token.token_type == TokenType.STRING:
                params[key] = cursor.string(statement, "a value")
            else:
                raise cursor.error(
                    "expected a value (a number, a quoted string, true or false)", statement
                )
            if not cursor.accept(","):
                break
        cursor.expect(")", statement=statement)
    cursor.end(statement)
    return (("column", column), ("type", kind), ("params", params))


def _column_path(cursor: _Cursor, statement: str) -> str:
    parts = [cursor.name(statement, "a column")]
    while cursor.accept("."):
        parts.append(cursor.name(statement, "a nested field"))
    return ".".join(parts)


def _show_properties(cursor: _Cursor) -> tuple[tuple[str, Any], ...]:
    statement = "SHOW TBLPROPERTIES"
    key = None
    if cursor.accept("("):
        token = cursor.peek()
        if token is not None and token.token_type == TokenType.STRING:
            key = cursor.string(statement, "a property key")
        else:
            key = _column_path(cursor, statement)
        cursor.expect(")", statement=statement)
    cursor.end(statement)
    return (("key", key),)


def _describe_extended(cursor: _Cursor) -> tuple[tuple[str, Any], ...]:
    if cursor.peek() is not None:  # a column or a partition spec: Spark's own statement
        raise SqlSyntaxError("DESCRIBE EXTENDED of a column is Spark's")
    return ()


_ARGUMENTS: dict[str, Callable[[_Cursor], tuple[tuple[str, Any], ...]]] = {
    "DESCRIBE EXTENDED": _describe_extended,
    "SHOW TBLPROPERTIES": _show_properties,
    "OPTIMIZE": _optimize,
    "CREATE INDEX": _create_index,
}


def _command(spark: SparkSession, run: Run, text: str) -> DataFrame | None:
    command = parse_command(text)
    if command is None:
        return None
    table = lance_table(spark, command.table)
    if table is None:
        return None  # not a Lance table: Spark's result or error
    if command.error is not None:
        if command.kind == "DESCRIBE EXTENDED":
            return None  # DESCRIBE EXTENDED t column: Spark's
        raise command.error
    if command.kind in _CATALOG_ONLY and table.currentBranch != MAIN_BRANCH:
        return None  # pets.branch_exp has no catalog entry: Spark's error says so
    kind = command.kind
    if kind == "OPTIMIZE":
        return table.optimize().executeCompaction()
    if kind == "DESCRIBE EXTENDED":
        name = table_name(command.table) if path_of(command.table) is None else None
        return _describe_extended_rows(spark, run, text, table, name=name)
    if kind == "SHOW TBLPROPERTIES":
        # Spark shows a Python data source table's properties as empty: Lance's are these.
        config = _catalog.properties(table._open())
        key = command.arg("key")
        rows = sorted(config.items()) if key is None else [(key, config.get(key))]
        if key is not None and key not in config:
            rows = [
                (key, f"Table {command.table.sql(dialect='spark')} does not have property: {key}")
            ]
        return spark.createDataFrame(rows, "key string, value string")
    if kind == "CREATE INDEX":
        params = command.arg("params")
        table.createIndex(
            command.arg("column"), command.arg("type"), name=command.arg("name"), **params
        )
    return _no_rows(spark)


def _describe_extended_rows(
    spark: SparkSession, run: Run, text: str, table: LanceTable, *, name: str | None
) -> DataFrame:
    """Spark's DESCRIBE EXTENDED of a Python data source table, with what Spark leaves out:
    the provider, the location and the type (managed: at its default location)."""
    result = run(text)
    rows = [tuple(r) for r in result.collect()]
    config = _catalog.properties(table._open())
    facts = {
        "Provider": "lance",
        "Location": table.uri,
        "Type": (
            "MANAGED"
            if name is not None and _writes.is_managed(spark, name, table.uri)
            else "EXTERNAL"
        ),
        "Table Properties": "[" + ", ".join(f"{k}={v}" for k, v in sorted(config.items())) + "]",
    }
    out = [(c, facts.get(str(c).strip(), d) if d is not None else d, m) for c, d, m in rows]
    present = {str(c).strip() for c, _, _ in rows}
    out += [(k, v, "") for k, v in facts.items() if k not in present]
    return spark.createDataFrame(out, result.schema)


def _no_rows(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], StructType([]))


def _word(token: Token) -> str:
    if token.token_type in (TokenType.IDENTIFIER, TokenType.STRING):
        return ""  # a quoted name or a string is never a keyword
    return str(token.text).upper()
