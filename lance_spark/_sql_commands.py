"""SQL statements for history and maintenance of Lance tables, the way Delta's SQL extension
spells them, plus time travel, ``ALTER TABLE ... ADD COLUMNS`` and CTAS.

Statements Spark's grammar knows (SELECT with ``VERSION AS OF``, ALTER TABLE ADD COLUMNS,
CTAS) are parsed with sqlglot's Spark dialect. The Delta-style commands Spark does not know
(DESCRIBE HISTORY ... LIMIT, RESTORE, OPTIMIZE, VACUUM, tags, CREATE INDEX) are parsed by a
small recursive-descent parser over sqlglot's Spark tokens. Each runs through
:class:`~lance_spark.table.LanceTable`; a statement whose table is not a Lance table is left
to Spark (its result and errors are Spark's).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import expressions as exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokenizer_core import Token, TokenType

from lance_spark import _types
from lance_spark._sql_targets import lance_table, parse_sql, path_of, refresh_catalog_entry
from lance_spark.errors import SchemaMismatchError, SqlSyntaxError
from lance_spark.table import LanceTable

Run = Callable[..., DataFrame]


class _Tokenizer(Spark.Tokenizer):
    # Spark's tokenizer swallows the rest of a statement it calls a "command" (VACUUM,
    # OPTIMIZE...) into one string token; these commands are exactly what is parsed here.
    COMMANDS: ClassVar[set[TokenType]] = set()


def run_statement(spark: SparkSession, run: Run, text: str) -> DataFrame | None:
    """Run ``text`` if it is one of this module's statements on a Lance table, else None."""
    try:
        tokens = [t for t in _Tokenizer().tokenize(text) if t.token_type != TokenType.SEMICOLON]
    except sqlglot.errors.TokenError:
        return None
    if not tokens:
        return None
    first = _word(tokens[0])
    if first in {"DESCRIBE", "RESTORE", "OPTIMIZE", "VACUUM", "ALTER", "CREATE"}:
        result = _command(spark, run, text, tokens)
        if result is not None:
            return result
    if first in {"SELECT", "WITH", "FROM", "("}:
        return _time_travel(spark, run, text)
    return None


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
    "DESCRIBE HISTORY": "DESCRIBE HISTORY table [LIMIT n]",
    "RESTORE": "RESTORE [TABLE] table [TO] {VERSION AS OF n | TIMESTAMP AS OF 'timestamp'}",
    "OPTIMIZE": "OPTIMIZE table",
    "VACUUM": "VACUUM table [RETAIN n HOURS] [DRY RUN]",
    "CREATE TAG": "ALTER TABLE table CREATE TAG name [AS OF VERSION n]",
    "DROP TAG": "ALTER TABLE table DROP TAG name",
    "CREATE INDEX": "CREATE INDEX name ON table (column) [USING type] [WITH (key = value, ...)]",
}


@dataclass(frozen=True)
class _Target:
    table: LanceTable
    name: exp.Table


def _command(spark: SparkSession, run: Run, text: str, tokens: list[Token]) -> DataFrame | None:
    cursor = _Cursor(text, tokens)
    if cursor.accept("DESCRIBE", "HISTORY"):
        target = _target(spark, cursor)
        if target is None:
            return None
        limit = None
        if cursor.accept("LIMIT"):
            limit = int(cursor.number("DESCRIBE HISTORY", "the number of versions"))
        cursor.end("DESCRIBE HISTORY")
        return target.table.history(limit)
    if cursor.accept("RESTORE"):
        cursor.accept("TABLE")
        target = _target(spark, cursor)
        if target is None:
            return None
        cursor.accept("TO")
        if cursor.accept("VERSION", "AS", "OF"):
            version = cursor.number("RESTORE", "a version")
            cursor.end("RESTORE")
            return target.table.restoreToVersion(int(version))
        if cursor.accept("TIMESTAMP", "AS", "OF"):
            timestamp = cursor.string("RESTORE", "a timestamp")
            cursor.end("RESTORE")
            return target.table.restoreToTimestamp(timestamp)
        raise cursor.error("expected VERSION AS OF or TIMESTAMP AS OF", "RESTORE")
    if cursor.accept("OPTIMIZE"):
        target = _target(spark, cursor)
        if target is None:
            return None
        cursor.end("OPTIMIZE")
        return target.table.optimize().executeCompaction()
    if cursor.accept("VACUUM"):
        target = _target(spark, cursor)
        if target is None:
            return None
        hours: float = 168
        if cursor.accept("RETAIN"):
            hours = cursor.number("VACUUM", "the retention in hours")
            cursor.expect("HOURS", statement="VACUUM")
        dry_run = cursor.accept("DRY", "RUN")
        cursor.end("VACUUM")
        return target.table.vacuum(hours, dryRun=dry_run)
    if cursor.accept("ALTER", "TABLE"):
        return _alter(spark, run, text, cursor)
    if cursor.accept("CREATE", "INDEX"):
        return _create_index(spark, cursor)
    return None


def _target(spark: SparkSession, cursor: _Cursor) -> _Target | None:
    table = cursor.table()
    if table is None:
        return None
    found = lance_table(spark, table)
    return None if found is None else _Target(found, table)


def _alter(spark: SparkSession, run: Run, text: str, cursor: _Cursor) -> DataFrame | None:
    target = _target(spark, cursor)
    if target is None:
        return None
    if cursor.accept("CREATE", "TAG"):
        name = cursor.name("CREATE TAG", "a tag name")
        version = None
        if cursor.accept("AS", "OF", "VERSION"):
            version = int(cursor.number("CREATE TAG", "a version"))
        cursor.end("CREATE TAG")
        target.table.createTag(name, version)
        return _no_rows(spark)
    if cursor.accept("DROP", "TAG"):
        name = cursor.name("DROP TAG", "a tag name")
        cursor.end("DROP TAG")
        target.table.deleteTag(name)
        return _no_rows(spark)
    if cursor.accept("ADD", "COLUMNS") or cursor.accept("ADD", "COLUMN"):
        result = _add_columns(spark, text, target.table)
        refresh_catalog_entry(spark, run, target.name, target.table.uri)
        return result
    return None  # any other ALTER TABLE: Spark's


def _add_columns(spark: SparkSession, text: str, table: LanceTable) -> DataFrame:
    tree = parse_sql(text)
    columns = [
        d
        for action in tree.args.get("actions") or []
        for d in ([action] if isinstance(action, exp.ColumnDef) else action.expressions)
        if isinstance(d, exp.ColumnDef)
    ]
    ddl = ", ".join(column.sql(dialect="spark") for column in columns)
    schema = spark.createDataFrame([], ddl).schema
    ds = table._open()
    clash = [
        f.name for f in schema.fields if f.name.lower() in {n.lower() for n in ds.schema.names}
    ]
    if clash:
        raise SchemaMismatchError(
            f"ALTER TABLE ADD COLUMNS: column {clash[0]!r} already exists in the Lance table at "
            f"{table.uri!r}; columns: {', '.join(ds.schema.names)}"
        )
    arrow = to_arrow_schema(schema, timezone="UTC")
    fields = _types.arrow_schema_for_new_table(
        pa.schema([f.remove_metadata() for f in arrow]), vector_sizes={}
    )
    # Metadata only: Lance records the columns as all-null, no data file is written.
    ds.add_columns(_types.nullable_schema(fields))
    return _no_rows(spark)


def _create_index(spark: SparkSession, cursor: _Cursor) -> DataFrame | None:
    name = cursor.name("CREATE INDEX", "an index name")
    cursor.expect("ON", statement="CREATE INDEX")
    target = _target(spark, cursor)
    if target is None:
        return None
    cursor.expect("(", statement="CREATE INDEX")
    column = cursor.name("CREATE INDEX", "a column")
    cursor.expect(")", statement="CREATE INDEX")
    kind = "BTREE"
    if cursor.accept("USING"):
        kind = cursor.name("CREATE INDEX", "an index type")
    params: dict[str, object] = {}
    if cursor.accept("WITH"):
        cursor.expect("(", statement="CREATE INDEX")
        while True:
            key = cursor.name("CREATE INDEX", "a parameter name")
            cursor.expect("=", statement="CREATE INDEX")
            token = cursor.peek()
            if token is not None and token.token_type == TokenType.NUMBER:
                value = cursor.number("CREATE INDEX", "a value")
                params[key] = int(value) if value.is_integer() else value
            else:
                params[key] = cursor.string("CREATE INDEX", "a value")
            if not cursor.accept(","):
                break
        cursor.expect(")", statement="CREATE INDEX")
    cursor.end("CREATE INDEX")
    target.table.createIndex(column, kind, name=name, **params)
    return _no_rows(spark)


def _no_rows(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], StructType([]))


def _word(token: Token) -> str:
    if token.token_type in (TokenType.IDENTIFIER, TokenType.STRING):
        return ""  # a quoted name or a string is never a keyword
    return str(token.text).upper()


# --- time travel in queries -------------------------------------------------------------------


def _time_travel(spark: SparkSession, run: Run, text: str) -> DataFrame | None:
    """A query naming a Lance table ``VERSION AS OF`` / ``TIMESTAMP AS OF`` or by path: each
    such reference is replaced by a temporary view of that version, then Spark runs it."""
    try:
        tree = parse_sql(text)
    except sqlglot.errors.ParseError:
        return None
    references = [
        t for t in tree.find_all(exp.Table) if t.args.get("version") is not None or path_of(t)
    ]
    if not references:
        return None
    with _views(spark) as view_of:
        for reference in references:
            travel = reference.args.get("version")
            bare = reference.copy()
            bare.set("version", None)
            bare.set("alias", None)
            table = lance_table(spark, bare)
            if table is None:
                return None  # not a Lance table: Spark's own result or error
            frame = table.toDF(**_travel(travel))
            view = exp.Table(this=exp.to_identifier(view_of(frame)))
            if reference.alias:
                view.set("alias", reference.args["alias"])
            elif path_of(reference) is None:
                view.set("alias", exp.TableAlias(this=exp.to_identifier(reference.name)))
            reference.replace(view)
        return run(tree.sql(dialect="spark"))


def _travel(version: exp.Expression | None) -> dict[str, Any]:
    if version is None:
        return {}
    value = version.expression
    if str(version.this).upper() == "VERSION":
        if isinstance(value, exp.Literal) and not value.is_string:
            return {"version": int(value.this)}
        return {"tag": value.name}  # VERSION AS OF 'train-v1': a tag
    return {"timestamp": value.name}


@contextmanager
def _views(spark: SparkSession) -> Iterator[Callable[[DataFrame], str]]:
    """Temporary views for one statement; dropped once Spark has analysed it."""
    names: list[str] = []

    def view_of(frame: DataFrame) -> str:
        name = f"__lance_spark_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(name)
        names.append(name)
        return name

    try:
        yield view_of
    finally:
        for name in names:
            spark.catalog.dropTempView(name)
