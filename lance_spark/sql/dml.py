"""``MERGE INTO``, ``UPDATE`` and ``DELETE`` on Lance tables through ``spark.sql``.

Spark's Python data sources cannot take row-level changes, so Spark rejects these statements
on Lance tables (``UNSUPPORTED_FEATURE.TABLE_OPERATION``). After ``register(spark)`` the SQL
front parses them with sqlglot (Spark dialect) and, when the target is a Lance table (a
catalog table created ``USING lance`` or ``lance.`/path```), runs them on the same engine as
:class:`~lance_spark.LanceTable`: ``MERGE`` builds a :class:`~lance_spark.table.merge.MergeSpec`
for :func:`~lance_spark.table.merge.merge`, ``UPDATE`` and ``DELETE`` call
:func:`~lance_spark.table.changes.update_where` / :func:`~lance_spark.table.changes.delete_where`.

A MERGE's source (with the statement's CTEs) is read by the session's ``spark.sql``, so Lance
tables by path or ``VERSION AS OF`` work there as in any query. Without aliases, the tables'
names qualify their columns (``pets.id``, also ``db.pets.id``); UPDATE and DELETE read the
table unaliased, so their qualifiers are dropped (not inside subqueries, where they may be
outer references).

Everything else goes to Spark unchanged: other statements, statements on other tables (views
too, even of a Lance table), and text sqlglot cannot parse or that is not Spark's grammar
(Spark's parser then reports the error and its position). Expressions reach Spark as SQL text
(``node.sql(dialect="spark")``).

``MERGE WITH SCHEMA EVOLUTION INTO`` (Spark 4) is not sqlglot's grammar: the three words are
recognised among the statement's tokens and blanked out (positions kept) before parsing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from sqlglot import Token, TokenType
from sqlglot import expressions as exp

from lance_spark import _spark
from lance_spark.errors import InvalidOptionError, LanceSparkError, SqlSyntaxError
from lance_spark.sql.targets import (
    lance_table,
    parse_sql,
    path_of,
    refresh_catalog_entry,
    table_name,
)
from lance_spark.table import merge as _merge
from lance_spark.table.merge import Clause, ClauseKind

if TYPE_CHECKING:
    from lance_spark.table import LanceTable

Run = Callable[..., DataFrame]
Statement = exp.Merge | exp.Update | exp.Delete

# Arguments of sqlglot's nodes that Spark's grammar has; a statement with any other argument
# (UPDATE ... FROM, DELETE ... USING, RETURNING, LIMIT, ...) is left to Spark's parser.
_SPARK_ARGS: dict[type[exp.Expression], frozenset[str]] = {
    exp.Merge: frozenset({"this", "using", "on", "whens", "with_"}),
    exp.Update: frozenset({"this", "expressions", "where", "with_"}),
    exp.Delete: frozenset({"this", "where", "with_"}),
}
_TABLE_ARGS = frozenset({"this", "db", "catalog", "alias"})
_STATEMENT_TOKENS = frozenset({TokenType.MERGE, TokenType.UPDATE, TokenType.DELETE})
_EVOLUTION = (
    (TokenType.WITH, "WITH"),
    (TokenType.SCHEMA, "SCHEMA"),
    (TokenType.VAR, "EVOLUTION"),
    (TokenType.INTO, "INTO"),
)
_MERGE_GRAMMAR = (
    "Spark's MERGE allows WHEN MATCHED [AND cond] THEN UPDATE SET * | UPDATE SET col = expr, "
    "... | DELETE; WHEN NOT MATCHED [BY TARGET] [AND cond] THEN INSERT * | INSERT (col, ...) "
    "VALUES (expr, ...); WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE SET col = expr, ... "
    "| DELETE"
)


# --- the neutral form of a statement ------------------------------------------------------------


@dataclass(frozen=True)
class MergeStatement:
    """A ``MERGE INTO`` as the engine needs it. ``target_alias`` / ``source_alias`` are the
    names the statement's columns are qualified with: the alias, else the table's name."""

    target: exp.Table  # as written, without its alias
    target_alias: str
    source_query: str  # Spark SQL whose result is the source (CTEs included)
    source_alias: str | None
    condition: str
    clauses: tuple[Clause, ...]
    schema_evolution: bool

    @property
    def target_name(self) -> str:
        return table_name(self.target)


@dataclass(frozen=True)
class UpdateStatement:
    """``UPDATE t [[AS] a] SET col = expr, ... [WHERE cond]``, columns unqualified."""

    target: exp.Table
    assignments: tuple[tuple[str, str], ...]  # (column as written, Spark SQL value)
    condition: str | None

    @property
    def target_name(self) -> str:
        return table_name(self.target)


@dataclass(frozen=True)
class DeleteStatement:
    """``DELETE FROM t [[AS] a] [WHERE cond]``, columns unqualified."""

    target: exp.Table
    condition: str | None

    @property
    def target_name(self) -> str:
        return table_name(self.target)


# --- the handler --------------------------------------------------------------------------------


def run_statement(spark: SparkSession, run: Run, text: str) -> DataFrame | None:
    """Run ``text`` when it is a MERGE, UPDATE or DELETE on a Lance table; else None (Spark
    runs it)."""
    found = find_statement(text)
    if found is None:
        return None
    tree, evolution = found
    table = _lance_target(spark, tree.this)
    if table is None:
        return None
    if isinstance(tree, exp.Merge):
        return _run_merge(spark, run, table, merge_statement(tree, evolution, text))
    if isinstance(tree, exp.Update):
        return _run_update(spark, table, update_statement(tree))
    return _run_delete(spark, table, delete_statement(tree))


def _lance_target(spark: SparkSession, target: exp.Expression) -> LanceTable | None:
    return lance_table(spark, target) if isinstance(target, exp.Table) else None


def _run_merge(spark: SparkSession, run: Run, table: LanceTable, stmt: MergeStatement) -> DataFrame:
    # Through the session's own ``spark.sql``: a source reading Lance tables by path or with
    # VERSION AS OF is resolved as in any other query.
    source = spark.sql(stmt.source_query)
    if stmt.source_alias:
        source = source.alias(stmt.source_alias)
    spec = _merge.MergeSpec(
        source=source,
        condition=stmt.condition,
        clauses=stmt.clauses,
        target_alias=stmt.target_alias,
        schema_evolution=stmt.schema_evolution,
    )
    counts = _merge.merge(
        spark,
        uri=table.uri,
        storage=table._storage,
        spec=spec,
        app_id=_spark.app_id(spark),
    )
    if counts.added_columns and path_of(stmt.target) is None:
        refresh_catalog_entry(spark, run, stmt.target, table)  # Spark keeps old columns
    return _merge.metrics_frame(spark, counts)


def _run_update(spark: SparkSession, table: LanceTable, stmt: UpdateStatement) -> DataFrame:
    # SET names are matched to the table's case-insensitively by the engine.
    return table.update(stmt.condition, dict(stmt.assignments))


def _run_delete(spark: SparkSession, table: LanceTable, stmt: DeleteStatement) -> DataFrame:
    return table.delete(stmt.condition)


# --- parsing ------------------------------------------------------------------------------------


def find_statement(text: str) -> tuple[Statement, bool] | None:
    """The MERGE / UPDATE / DELETE in ``text`` and whether it says WITH SCHEMA EVOLUTION;
    None when ``text`` is something else, does not parse, or uses syntax Spark does not have
    (Spark then reports it)."""
    try:
        tokens = sqlglot.tokenize(text, read="spark")
    except sqlglot.errors.TokenError:
        return None
    if not any(t.token_type in _STATEMENT_TOKENS for _, t in _top_level(tokens)):
        return None  # most statements: no need to parse them
    evolution = _evolution_span(tokens)
    if evolution is not None:
        start, end = evolution
        text = text[:start] + " " * (end - start) + text[end:]  # same length: same positions
    try:
        tree = parse_sql(text)
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(tree, exp.Merge | exp.Update | exp.Delete):
        return None
    if not _is_spark_shape(tree):
        return None
    return tree, evolution is not None


def _evolution_span(tokens: Sequence[Token]) -> tuple[int, int] | None:
    """Character span of ``WITH SCHEMA EVOLUTION`` in ``MERGE WITH SCHEMA EVOLUTION INTO``
    (the statement's MERGE, outside any parentheses), else None."""
    for i, token in _top_level(tokens):
        if token.token_type != TokenType.MERGE:
            continue
        following = tokens[i + 1 : i + 1 + len(_EVOLUTION)]
        kinds = tuple((t.token_type, t.text.upper()) for t in following)
        if kinds == _EVOLUTION:
            return following[0].start, following[2].end + 1
        return None
    return None


def _top_level(tokens: Sequence[Token]) -> Iterable[tuple[int, Token]]:
    """Tokens outside parentheses and CASE ... END, with their index."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.CASE):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.END):
            depth = max(0, depth - 1)
        elif depth == 0:
            yield i, token


def _is_spark_shape(tree: Statement) -> bool:
    allowed = _SPARK_ARGS[type(tree)]
    if any(v not in (None, False, []) and k not in allowed for k, v in tree.args.items()):
        return False
    target = tree.this
    if not isinstance(target, exp.Table):
        return False
    if any(v not in (None, False, []) and k not in _TABLE_ARGS for k, v in target.args.items()):
        return False  # time travel, a sample, hints... on the target
    alias = target.args.get("alias")
    if alias is not None and alias.columns:
        return False
    if isinstance(tree, exp.Merge):
        return tree.args.get("on") is not None and not tree.args.get("using_cond")
    return True


def parse_merge(text: str) -> MergeStatement | None:
    """``text`` as a :class:`MergeStatement` (None when it is not a MERGE Spark would parse);
    raises :class:`SqlSyntaxError` for a clause Spark's MERGE does not allow."""
    found = find_statement(text)
    if found is None or not isinstance(found[0], exp.Merge):
        return None
    return merge_statement(found[0], found[1], text)


def parse_update(text: str) -> UpdateStatement | None:
    found = find_statement(text)
    if found is None or not isinstance(found[0], exp.Update):
        return None
    return update_statement(found[0])


def parse_delete(text: str) -> DeleteStatement | None:
    found = find_statement(text)
    if found is None or not isinstance(found[0], exp.Delete):
        return None
    return delete_statement(found[0])


def merge_statement(tree: exp.Merge, schema_evolution: bool, text: str = "") -> MergeStatement:
    tree = tree.copy()
    target = _without_alias(tree.this)
    given_target_alias = tree.this.alias or None
    target_alias = given_target_alias or target.name
    source = tree.args["using"]
    source_table = source if isinstance(source, exp.Table) else None
    source_alias = source.alias or (source_table.name if source_table is not None else None)
    # Without an alias, a table's (multi-part) name qualifies its columns: `db.pets.id` is
    # `pets.id`, the name the engine gives the table.
    renames: list[tuple[list[str], str]] = []
    if given_target_alias is None:
        renames += [(name, target_alias) for name in _names(target)]
    if source_table is not None and not source.alias:
        renames += [(name, source_table.name) for name in _names(source_table)]

    def expr(node: exp.Expression) -> str:
        return _requalified(node, renames).sql(dialect="spark")

    whens = tree.args["whens"].expressions
    positions = _when_positions(text, len(whens))
    clauses = tuple(
        _clause(when, expr, target_alias, renames, target.sql(dialect="spark"), where)
        for when, where in zip(whens, positions, strict=True)
    )
    ctes = tree.args.get("with_")
    prefix = f"{ctes.sql(dialect='spark')} " if ctes is not None else ""
    return MergeStatement(
        target=target,
        target_alias=target_alias,
        source_query=f"{prefix}SELECT * FROM {source.sql(dialect='spark')}",
        source_alias=source_alias,
        condition=expr(tree.args["on"]),
        clauses=clauses,
        schema_evolution=schema_evolution,
    )


def _clause(
    when: exp.When,
    expr: Callable[[exp.Expression], str],
    target_alias: str,
    renames: list[tuple[list[str], str]],
    target: str,
    where: str,
) -> Clause:
    matched = bool(when.args.get("matched"))
    by_source = not matched and bool(when.args.get("source"))
    if matched:
        group = "WHEN MATCHED"
    else:
        group = "WHEN NOT MATCHED BY SOURCE" if by_source else "WHEN NOT MATCHED"
    then = when.args["then"]
    cond_node = when.args.get("condition")
    condition = expr(cond_node) if cond_node is not None else None

    def bad(problem: str, grammar: bool = True) -> LanceSparkError:
        error = SqlSyntaxError if grammar else InvalidOptionError
        return error(
            f"MERGE INTO {target}: '{when.sql(dialect='spark')}' ({where}) {problem}"
            + (f"; {_MERGE_GRAMMAR}" if grammar else "")
        )

    def key(node: exp.Expression) -> str:
        if not isinstance(node, exp.Column):
            raise bad(f"assigns to {node.sql(dialect='spark')}, which is not a column")
        parts = _column_parts(node, renames)
        if len(parts) > 1 and parts[0].lower() == target_alias.lower():
            parts = parts[1:]
        return ".".join(parts)

    def assignments(pairs: Sequence[tuple[exp.Expression, exp.Expression]]) -> dict[str, str]:
        result: dict[str, str] = {}
        for column, value in pairs:
            name = key(column)
            if name.lower() in (k.lower() for k in result):
                raise bad(_duplicate(name), grammar=False)
            result[name] = expr(value)
        return result

    if isinstance(then, exp.Var) and then.name.upper() == "DELETE":
        if group == "WHEN NOT MATCHED":
            raise bad("cannot DELETE: there is no target row")
        kind = ClauseKind.MATCHED_DELETE if matched else ClauseKind.BY_SOURCE_DELETE
        return Clause(kind, condition, None)
    if isinstance(then, exp.Update):
        if group == "WHEN NOT MATCHED":
            raise bad("cannot UPDATE: there is no target row (use INSERT)")
        kind = ClauseKind.MATCHED_UPDATE if matched else ClauseKind.BY_SOURCE_UPDATE
        sets = then.expressions
        if len(sets) == 1 and isinstance(sets[0], exp.Star):
            if by_source:
                raise bad("cannot UPDATE SET *: there is no source row (name the columns)")
            return Clause(kind, condition, None)
        if not all(isinstance(s, exp.EQ) for s in sets):
            raise bad("needs SET col = expr, ... or SET *")
        return Clause(kind, condition, assignments([(s.this, s.expression) for s in sets]))
    if isinstance(then, exp.Insert):
        if group != "WHEN NOT MATCHED":
            raise bad("cannot INSERT: only WHEN NOT MATCHED [BY TARGET] clauses insert")
        if isinstance(then.this, exp.Star):
            return Clause(ClauseKind.NOT_MATCHED_INSERT, condition, None)
        columns, values = then.this, then.expression
        if not isinstance(columns, exp.Tuple):
            raise bad("needs its column list: INSERT (col, ...) VALUES (expr, ...)")
        value_list = values.expressions if isinstance(values, exp.Tuple) else [values]
        if len(columns.expressions) != len(value_list):
            raise bad(
                f"names {len(columns.expressions)} column(s) but gives {len(value_list)} value(s)"
            )
        pairs = list(zip(columns.expressions, value_list, strict=True))
        return Clause(ClauseKind.NOT_MATCHED_INSERT, condition, assignments(pairs))
    raise bad(f"has an action Spark's MERGE does not have ({then.sql(dialect='spark')})")


def update_statement(tree: exp.Update) -> UpdateStatement:
    tree = tree.copy()
    _no_ctes(tree, "UPDATE")
    target = tree.this
    strip = _strip_prefixes(target)
    assignments: list[tuple[str, str]] = []
    for node in tree.expressions:
        if not isinstance(node, exp.EQ) or not isinstance(node.this, exp.Column):
            raise SqlSyntaxError(
                f"UPDATE {table_name(target)}: SET needs col = expr, not {node.sql(dialect='spark')}"
            )
        name = ".".join(_column_parts(node.this, strip))
        if name.lower() in (k.lower() for k, _ in assignments):
            raise InvalidOptionError(f"UPDATE {table_name(target)}: {_duplicate(name)}")
        assignments.append((name, _requalified(node.expression, strip).sql(dialect="spark")))
    return UpdateStatement(
        target=_without_alias(target),
        assignments=tuple(assignments),
        condition=_where(tree, strip),
    )


def delete_statement(tree: exp.Delete) -> DeleteStatement:
    tree = tree.copy()
    _no_ctes(tree, "DELETE")
    strip = _strip_prefixes(tree.this)
    return DeleteStatement(target=_without_alias(tree.this), condition=_where(tree, strip))


def _no_ctes(tree: exp.Update | exp.Delete, what: str) -> None:
    if tree.args.get("with_") is not None:
        raise InvalidOptionError(
            f"WITH ... {what} on the Lance table {table_name(tree.this)} is not supported: write "
            "the subquery in the WHERE condition, or create a temporary view for it"
        )


def _where(tree: exp.Update | exp.Delete, strip: list[tuple[list[str], str]]) -> str | None:
    where = tree.args.get("where")
    if where is None:
        return None
    return _requalified(where.this, strip).sql(dialect="spark")


def _strip_prefixes(target: exp.Table) -> list[tuple[list[str], str]]:
    """UPDATE and DELETE read the table unaliased: drop the qualifier naming it (the alias,
    else its name or a suffix of its multi-part name)."""
    alias = target.alias
    if alias:
        return [([alias], "")]
    return [(name, "") for name in _names(target)]


def _requalified(node: exp.Expression, renames: list[tuple[list[str], str]]) -> exp.Expression:
    """``node`` with column qualifiers starting with one of ``renames`` replaced (by an alias,
    or removed when it is ""). Columns inside subqueries are left alone: there a qualifier may
    be an outer reference that only resolves as written."""
    if not renames:
        return node
    node = node.copy()
    if isinstance(node, exp.Column):
        return _renamed(node, renames) or node
    for column in list(node.find_all(exp.Column)):
        if column.find_ancestor(exp.Query, exp.Subquery) is not None:
            continue
        new = _renamed(column, renames)
        if new is not None:
            column.replace(new)
    return node


def _column_parts(column: exp.Column, renames: list[tuple[list[str], str]]) -> list[str]:
    return [p.name for p in (_renamed(column, renames) or column).parts]


def _renamed(column: exp.Column, renames: list[tuple[list[str], str]]) -> exp.Column | None:
    parts = column.parts
    qualifier = [p.name.lower() for p in parts[:-1]]
    for prefix, replacement in renames:
        if qualifier[: len(prefix)] != [p.lower() for p in prefix]:
            continue
        kept = [p.copy() for p in parts[len(prefix) :]]
        new = [exp.to_identifier(replacement), *kept] if replacement else kept
        *outer, name = new
        args: dict[str, object] = {"this": name}
        for key, part in zip(("table", "db", "catalog"), reversed(outer), strict=False):
            args[key] = part
        return exp.Column(**args)
    return None


def _names(table: exp.Table) -> list[list[str]]:
    """The qualifiers that name ``table`` in a column reference: its multi-part name and each
    shorter suffix of it (``c.db.t``, ``db.t``, ``t``), longest first."""
    parts = [p.name for p in _without_alias(table).parts]
    return [parts[-k:] for k in range(len(parts), 0, -1)]


def _without_alias(table: exp.Table) -> exp.Table:
    copy = table.copy()
    copy.set("alias", None)
    return copy


def _duplicate(name: str) -> str:
    return (
        f"[DUPLICATE_ASSIGNMENTS] The columns or variables `{name}` appear more than once as "
        "assignment targets"
    )


def _when_positions(text: str, count: int) -> list[str]:
    """'clause N, line L, col C' of each WHEN clause of the MERGE in ``text``."""
    found: list[str] = []
    if text:
        try:
            tokens = sqlglot.tokenize(text, read="spark")
        except sqlglot.errors.TokenError:
            tokens = []
        seen_merge = False
        for _, token in _top_level(tokens):
            seen_merge = seen_merge or token.token_type == TokenType.MERGE
            if seen_merge and token.token_type == TokenType.WHEN:
                col = token.col - len(token.text) + 1
                found.append(f"clause {len(found) + 1}, line {token.line}, col {col}")
    if len(found) != count:
        return [f"clause {i + 1}" for i in range(count)]
    return found
