"""Row-level changes of the table API: ``LanceTable.merge``, ``update`` and ``delete`` run as
Spark SQL (:func:`run_sql`), which the companion's catalog plans as a row-level operation,
as it does the SQL statements from every client (design.md section 3). This module adds what
the table API gives on top of the statement: the redo on a conflicting commit, the result
row (read from the history entry the statement's id marks), and the connector's errors.

Concurrency: the statements are serializable with each other. Before committing, the
statement's write checks the versions committed since the version its scan pinned
(:mod:`lance_spark.source.conflicts`): when one changed a fragment the statement changes, or
added rows the statement may have read (for a MERGE whose target read the companion pruned to
the source's keys, only rows matching that filter; any added row otherwise), the commit is
refused with :class:`~lance_spark.errors.ConcurrentModificationError`, and :func:`run_sql`
redoes the statement from the start on the newer version (a bounded number of attempts,
:func:`lance_spark.table.job_runner.with_retry`). Appends never conflict with each other.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping

from pyspark.sql import Column, DataFrame

from lance_spark import _spark
from lance_spark.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    InvalidArgumentError,
)
from lance_spark.source import dataset, row_level, session
from lance_spark.source.commit import PROP_METRICS, PROP_STATEMENT_ID
from lance_spark.source.options import (
    STATEMENT_ID,
    STATEMENT_PARAMETERS,
)
from lance_spark.table import job_runner as _jobs
from lance_spark.table.context import TableContext


def delete_where(table: TableContext, *, condition: str | Column | None) -> int:
    """Delete the rows matching ``condition`` (all rows when None); returns how many. Spark
    plans the DELETE (the companion's row-level operation), as it does the SQL statement."""
    with SqlText(table) as text:
        where = _where(text, condition)
        counts = run_sql(table, statement=lambda target, _: f"DELETE FROM {target}{where}")
    return counts.deleted


def update_where(
    table: TableContext,
    *,
    condition: str | Column | None,
    assignments: Mapping[str, str | Column],
) -> int:
    """Set ``assignments`` (column -> SQL expression or Column) on the matching rows. Spark
    plans the UPDATE (the companion's row-level operation), as it does the SQL statement."""
    names = table.open().schema.names
    by_lower = {n.lower(): n for n in names}
    unknown = sorted(k for k in assignments if k.lower() not in by_lower)
    if unknown:
        raise ColumnNotFoundError(
            f"UPDATE sets column {unknown[0]!r}, which the Lance table at {table.uri!r} does not "
            f"have; columns: {', '.join(names)}"
        )
    with SqlText(table) as text:
        sets = ", ".join(
            f"{_spark.quote_identifier(by_lower[k.lower()])} = {enclosed(text(v))}"
            for k, v in assignments.items()
        )
        where = _where(text, condition)
        counts = run_sql(
            table,
            # The companion's LanceStatementParameters adds the predicate.
            parameters={"set": ", ".join(sorted(assignments))},
            statement=lambda target, _: f"UPDATE {target} SET {sets}{where}",
        )
    return counts.updated


def _where(text: SqlText, condition: str | Column | None) -> str:
    """The statement's WHERE clause of ``condition`` (none when None)."""
    return "" if condition is None else f" WHERE {enclosed(text(condition))}"


def enclosed(expression: str) -> str:
    """A user's expression text as one expression of the statement: in parentheses, on lines
    of its own, so that a ``--`` comment in it ends with it and it cannot take in the clauses
    after it (a ``SET`` value's comment would otherwise drop the ``WHERE``). Text that closes
    a parenthesis it did not open (``id = 2) OR (true``) or leaves a string, a quoted name, a
    comment or a parenthesis open would change the statement around it: refused."""
    problem = _unbalanced(expression)
    if problem is not None:
        raise InvalidArgumentError(f"{expression!r} is not one SQL expression: it {problem}")
    return f"(\n{expression}\n)"


def _unbalanced(text: str) -> str | None:
    """What keeps ``text`` from being one parenthesised expression (None: nothing), reading
    Spark SQL's strings ('...', "...", r'...'), quoted names (`...`) and comments."""
    depth = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char in "'\"`":
            raw = (
                char != "`"
                and i > 0
                and text[i - 1] in "rR"
                and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
            )
            j = i + 1
            while j < len(text) and text[j] != char:
                j += 2 if text[j] == "\\" and char != "`" and not raw else 1
            if j >= len(text):
                return f"leaves the quote {char} at position {i} open"
            i = j + 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return f"leaves the comment at position {i} open"
            i = end + 2
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return f"closes a parenthesis it did not open at position {i}"
        i += 1
    return None if depth == 0 else "leaves a parenthesis open"


class SqlText:
    """The SQL text of a statement's expressions: a string as it is, a Column rendered
    (resolved on classic, by :func:`_spark.column_sql`, against the table, or against what
    ``around`` makes of the table's DataFrame: a MERGE's target joined with its source).
    A context manager: the Python UDFs of its Columns are the session's temporary functions
    (under new names) until it exits, after the statement."""

    def __init__(
        self, table: TableContext, *, around: Callable[[DataFrame], DataFrame] | None = None
    ) -> None:
        self._table = table
        self._around = around
        self._frame: DataFrame | None = None
        self._functions: list[str] = []

    def __enter__(self) -> SqlText:
        return self

    def __exit__(self, *exc: object) -> None:
        functions, self._functions = self._functions, []
        _spark.drop_functions(self._table.spark, functions)

    def __call__(self, value: str | Column) -> str:
        if isinstance(value, str):
            return value
        if self._frame is None:
            frame = table_frame(self._table)
            self._frame = frame if self._around is None else self._around(frame)
        return _spark.column_sql(self._frame, value, self._functions)


def table_frame(table: TableContext) -> DataFrame:
    """The table as a DataFrame, to resolve a statement's Column expressions."""
    return session.lance_reader(table.spark, table.storage).load(table.uri)


def run_sql(
    table: TableContext,
    *,
    statement: Callable[[str, str], str],
    parameters: Mapping[str, str] | None = None,
    alias: str | None = None,
    source: DataFrame | None = None,
) -> row_level.ChangeCounts:
    """Run a MERGE / UPDATE / DELETE on ``table`` as Spark SQL, which the
    companion's catalog plans as a row-level operation (one version, or none when no row
    changes); ``statement`` makes the text from the target (the table, its ``alias`` and
    its options) and the name the statement gives ``source`` (a MERGE's); ``parameters``:
    the history entry's ``operationParameters`` besides the ones the companion reads from
    Spark's plan (the predicate, a MERGE's clauses: ``LanceStatementParameters``).
    Redone when a concurrent commit overlaps it (:func:`_jobs.with_retry`, then
    :class:`~lance_spark.errors.ConcurrentModificationError`). Returns what the committed
    version's history entry says it changed, found by the statement's id."""
    spark, uri, storage = table.spark, table.uri, table.storage
    statement_id = uuid.uuid4().hex
    options = {
        STATEMENT_ID: statement_id,
        **(
            {STATEMENT_PARAMETERS: json.dumps(dict(parameters), sort_keys=True)}
            if parameters
            else {}
        ),
    }
    # The table's storage options (LanceTable.forPath(storage_options=...)) travel on the
    # class of a private format, as an internal read's do: the catalog loads the table (its
    # schema, the row-level operation's pin) with them, and no secret is in the statement's
    # text or its relation's options, which Spark shows in plans. The session's: ``lance``.
    fmt = session.format_for(spark, storage)
    named = f" AS {_spark.quote_identifier(alias)}" if alias else ""
    target = f"{fmt}.{_spark.quote_identifier(uri)}{named} WITH ({_spark.sql_pairs(options)})"

    def attempt() -> int:
        before = statement_version(uri, storage)
        try:
            with _spark.connector_errors("lance"):
                if source is None:
                    _spark.plain_sql(spark)(statement(target, "")).collect()
                else:
                    run = functools.partial(statement, target)
                    _spark.sql_with_relation(spark, run, source).collect()
        except CommitConflictError:
            raise
        except Exception as err:
            _spark.require_companion(spark, "LanceTable's MERGE, UPDATE and DELETE", err)
            raise
        return before

    before = _jobs.with_retry(attempt)
    return _committed_counts(uri, storage, before, statement_id)


def statement_version(uri: str, storage: Mapping[str, str]) -> int:
    """The latest version before an attempt of a statement (each attempt reads it once)."""
    return int(dataset.open_latest(uri, storage=storage).version)


def _committed_counts(
    uri: str, storage: Mapping[str, str], before: int, statement_id: str
) -> row_level.ChangeCounts:
    """The rows the version that holds ``statement_id`` changed (none: no version)."""
    ds = dataset.open_latest(uri, storage=storage)
    for version in range(int(ds.version), before, -1):
        tx = dataset.transaction(ds, version)
        props = dict((tx.transaction_properties or {}) if tx is not None else {})
        if props.get(PROP_STATEMENT_ID) != statement_id:
            continue
        metrics = json.loads(props.get(PROP_METRICS) or "{}")
        return row_level.ChangeCounts(
            version=version,
            updated=int(metrics.get("numUpdatedRows", 0)),
            deleted=int(metrics.get("numDeletedRows", 0)),
            inserted=int(metrics.get("numInsertedRows", 0)),
        )
    return row_level.ChangeCounts(version=None, updated=0, deleted=0, inserted=0)
