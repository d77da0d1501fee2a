"""Row-level changes of the table API, committed as one Lance transaction each (design.md
section 3).

``LanceTable.update`` and ``delete`` run as Spark SQL (:func:`run_sql`): Spark plans them as
the companion's row-level operation, like the SQL statements; this module adds the redo on a
conflicting commit and reads the statement's metrics from its history entry.

``LanceTable.merge`` (until it too runs as Spark's MERGE) comes down to one DataFrame of
*change rows*: each names a
target row by its address (fragment id, offset; null for an inserted row), says what happens
to it (``_KIND``), and, for rows that are written, carries the new values. Spark computes that
DataFrame (conditions, joins, clause logic) from the table read at a pinned version with
``_rowaddr`` and ``_rowid``. The rows are hash-partitioned by fragment, so each touched
fragment's deletion file is written by exactly one task; the same task streams the rows to
write into new fragment files. The driver collects one small row per written file and commits
ONE transaction. Untouched fragments are not rewritten and nothing of the table is collected
to the driver.

Concurrency: the statements are serializable with each other. Before committing, the driver
checks the versions committed since the pinned one (:mod:`lance_spark.table.conflicts`): when one
changed a fragment the statement changes, or added rows the statement's read set may hold
(a MERGE's equi-join keys, compared with the source's keys; any added row for UPDATE and
DELETE conditions), the statement is redone from the start on the newer version. Otherwise it
commits on the latest version it checked, listing a sentinel fragment so that Lance reports a
retryable conflict to the later of two row-level commits racing after their checks; that one
is redone too, by :func:`lance_spark.table.jobs.with_retry` (a bounded number of attempts,
then :class:`~lance_spark.errors.ConcurrentModificationError`). Appends never conflict with
each other. A blind append that commits between a statement's check and its commit is not
seen by the statement: the result is that of the statement followed by the append (Delta's
``WriteSerializable``, where blind appends never conflict with a MERGE either); appends
committed before the check are checked like any other commit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from lance_spark import _spark
from lance_spark.errors import (
    CardinalityViolationError,
    ColumnNotFoundError,
    CommitConflictError,
    InvalidArgumentError,
    InvalidOptionError,
)
from lance_spark.source import dataset, row_level, session
from lance_spark.source import reader as _reader
from lance_spark.source.commit import PROP_METRICS, PROP_STATEMENT_ID
from lance_spark.source.jobs import StagedJob, TaskResult
from lance_spark.source.options import (
    COLUMNS,
    STATEMENT_ID,
    STATEMENT_PARAMETERS,
    STORAGE_PREFIX,
    encode_names,
)
from lance_spark.table import jobs as _jobs
from lance_spark.table import maintenance
from lance_spark.table.context import TableContext


@dataclass(frozen=True)
class Pinned:
    """The table at one version, read with ``_rowaddr`` and ``_rowid``."""

    uri: str
    version: int
    schema: pa.Schema
    rows: DataFrame
    stable_row_ids: bool

    def target(self) -> row_level.Target:
        """What the commit needs of the pinned table."""
        return row_level.Target(self.uri, self.version, self.schema, self.stable_row_ids)

    def address(self) -> list[Column]:
        """The change-row address columns of a row of ``rows`` (null when it is absent)."""
        addr = self.rows["_rowaddr"]
        return [
            F.shiftrightunsigned(addr, 32).alias(row_level.FRAG),
            addr.bitwiseAND(F.lit(row_level.OFFSET_MASK)).alias(row_level.OFFSET),
            self.rows["_rowid"].alias(row_level.ROW_ID),
        ]


@dataclass(frozen=True)
class ChangePlan:
    """What a statement changes, as Spark computes it from a :class:`Pinned` table."""

    rows: DataFrame  # the change-row address (row_level.ADDRESS), then the written columns
    statement: row_level.Statement  # what it is, for the commit (its write_schema: the columns)
    check_cardinality: bool


def delete_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
) -> int:
    """Delete the rows matching ``condition`` (all rows when None); returns how many. Spark
    plans the DELETE (the companion's row-level operation), as it does the SQL statement."""
    predicate, where = _where(_SqlText(spark, uri, storage), condition)
    counts = run_sql(
        spark,
        uri=uri,
        storage=storage,
        parameters={"predicate": predicate},
        statement=lambda target: f"DELETE FROM {target}{where}",
    )
    return counts.deleted


def update_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
    assignments: Mapping[str, str | Column],
) -> int:
    """Set ``assignments`` (column -> SQL expression or Column) on the matching rows. Spark
    plans the UPDATE (the companion's row-level operation), as it does the SQL statement."""
    names = dataset.open_latest(uri, storage=storage).schema.names
    by_lower = {n.lower(): n for n in names}
    unknown = sorted(k for k in assignments if k.lower() not in by_lower)
    if unknown:
        raise ColumnNotFoundError(
            f"UPDATE sets column {unknown[0]!r}, which the Lance table at {uri!r} does not "
            f"have; columns: {', '.join(names)}"
        )
    text = _SqlText(spark, uri, storage)
    sets = ", ".join(
        f"{_spark.quote_identifier(by_lower[k.lower()])} = {_enclosed(text(v))}"
        for k, v in assignments.items()
    )
    predicate, where = _where(text, condition)
    counts = run_sql(
        spark,
        uri=uri,
        storage=storage,
        parameters={"predicate": predicate, "set": ", ".join(sorted(assignments))},
        statement=lambda target: f"UPDATE {target} SET {sets}{where}",
    )
    return counts.updated


def _where(text: _SqlText, condition: str | Column | None) -> tuple[str, str]:
    """The condition's text for the history entry, and the statement's WHERE clause."""
    if condition is None:
        return "true", ""
    predicate = text(condition)
    return predicate, f" WHERE {_enclosed(predicate)}"


def _enclosed(expression: str) -> str:
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


class _SqlText:
    """The SQL text of a statement's expressions: a string as it is, a Column rendered
    (resolved against the table on classic: :func:`_spark.column_sql`)."""

    def __init__(self, spark: SparkSession, uri: str, storage: Mapping[str, str]) -> None:
        self._spark = spark
        self._uri = uri
        self._storage = storage
        self._frame: DataFrame | None = None

    def __call__(self, value: str | Column) -> str:
        if isinstance(value, str):
            return value
        if self._frame is None:
            self._frame = session.lance_reader(self._spark, self._storage).load(self._uri)
        return _spark.column_sql(self._frame, value)


def run_sql(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    parameters: Mapping[str, str],
    statement: Callable[[str], str],
) -> row_level.ChangeCounts:
    """Run a MERGE / UPDATE / DELETE on the table at ``uri`` as Spark SQL, which the
    companion's catalog plans as a row-level operation (one version, or none when no row
    changes); ``statement`` makes the text from the target (the table with its options).
    Redone when a concurrent commit overlaps it (:func:`_jobs.with_retry`, then
    :class:`~lance_spark.errors.ConcurrentModificationError`). Returns what the committed
    version's history entry says it changed, found by the statement's id."""
    statement_id = uuid.uuid4().hex
    # The session's own storage settings reach the statement's read and write without being
    # named; only the table's others (LanceTable.forPath(storage_options=...)) are passed.
    known = session.session_storage(spark)
    options = {
        STATEMENT_ID: statement_id,
        STATEMENT_PARAMETERS: json.dumps(dict(parameters), sort_keys=True),
        **{f"{STORAGE_PREFIX}{k}": v for k, v in storage.items() if known.get(k) != v},
    }
    text = statement(f"lance.{_spark.quote_identifier(uri)} WITH ({_spark.sql_pairs(options)})")

    def attempt() -> int:
        before = statement_version(uri, storage)
        try:
            with _spark.connector_errors("lance"):
                _spark.plain_sql(spark)(text).collect()
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


def run(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    app_id: str | None,
    plan: Callable[[Pinned], ChangePlan],
) -> row_level.ChangeCounts:
    """Pin, plan, run one job and commit one transaction; redo it all when a concurrent
    commit overlaps it or Lance calls the commit retryable (:func:`_jobs.with_retry`, then
    :class:`ConcurrentModificationError`). Nothing is committed on any failure."""

    def attempt() -> row_level.ChangeCounts:
        target = pin(spark, uri, storage)
        change = plan(target)
        with StagedJob.begin(uri, read_version=target.version, storage=storage) as job:
            outcome = _execute(change, target, storage, job.job_id)
            if outcome.violations:
                raise _cardinality_error(target, outcome.violations[0], storage)
            counts = row_level.counts(outcome, None)
            if counts.affected == 0 and not outcome.new_fragments:
                return counts  # nothing matched: no new version
            statement, pinned = change.statement, target.target()
            version = row_level.commit(statement, pinned, outcome, counts, storage, app_id)
            return replace(
                row_level.counts(outcome, version), added_columns=statement.evolves(pinned)
            )

    counts = _jobs.with_retry(attempt)
    # spark.lance.autoCompact.*: a version of its own after the change (never raises).
    table = TableContext(spark, uri, storage)
    maintenance.auto_compact(table, counts.version, session.session_auto_compact(spark))
    return counts


# --- the driver side ----------------------------------------------------------------------------


def pin(spark: SparkSession, uri: str, storage: Mapping[str, str]) -> Pinned:
    """The latest version of the table, read with its row addresses and row ids."""
    ds = dataset.open_latest(uri, storage=storage)
    version = int(ds.version)
    rows = _read_pinned(spark, uri, version, ds.schema, ds.schema.names, storage)
    return Pinned(uri, version, ds.schema, rows, bool(ds.has_stable_row_ids))


def narrow(
    spark: SparkSession,
    target: Pinned,
    columns: Collection[str],
    storage: Mapping[str, str],
    *,
    filter: str | None = None,
) -> Pinned:
    """``target`` read with only ``columns`` (and the row addresses and ids), and only the
    rows matching the Lance predicate ``filter`` when one is given.

    Spark's Python data sources get no column pruning, so a statement that needs few of the
    table's columns asks for them with the reader's ``columns`` option."""
    keep = [n for n in target.schema.names if n in columns] or target.schema.names[:1]
    if len(keep) == len(target.schema.names) and filter is None:
        return target
    rows = _read_pinned(
        spark, target.uri, target.version, target.schema, keep, storage, filter=filter
    )
    return replace(target, rows=rows)


_PINNED_METADATA = ("_rowaddr", "_rowid")


def _read_pinned(
    spark: SparkSession,
    uri: str,
    version: int,
    table_schema: pa.Schema,
    columns: Collection[str],
    storage: Mapping[str, str],
    *,
    filter: str | None = None,
) -> DataFrame:
    names = tuple(columns)
    projection = _reader.Projection(names, names, _PINNED_METADATA)
    reader = (
        session.lance_reader(spark, storage)
        # The schema is known here: given, Spark does not start a Python worker to ask the
        # data source for it (~25 ms per read over loopback TCP).
        .schema(_reader.spark_schema(table_schema, projection))
        .option("version", version)
        .option("metadata_columns", ",".join(_PINNED_METADATA))
    )
    if list(names) != list(table_schema.names):
        reader = reader.option(COLUMNS, encode_names(names))
    if filter is not None:
        reader = reader.option("filter", filter)
    return reader.load(uri)


def referenced_columns(frame: DataFrame, target: Pinned, columns: Iterable[Column]) -> set[str]:
    """The names of ``target.rows``' columns that ``columns`` (resolved in ``frame``, a
    DataFrame built on ``target.rows``) refer to (on Spark Connect, possibly a few more)."""
    return _spark.referenced_columns(frame, target.rows, columns)


def check_deterministic(frame: DataFrame, column: Column, what: str) -> Column:
    """``column`` resolved against ``frame``; rejects a non-deterministic expression."""
    verdict = _spark.deterministic(frame, column)
    if verdict is not True:
        unknown = "" if verdict is False else _spark.UNCHECKED_DETERMINISM
        raise InvalidOptionError(
            f"{what} ({_spark.expression_sql(frame, column)}) is not deterministic{unknown} "
            "(for example rand() or uuid()): a row-level change must select the same rows "
            "however often it is evaluated"
        )
    return column


def as_column(value: str | Column) -> Column:
    return F.expr(value) if isinstance(value, str) else value


def _execute(
    change: ChangePlan, target: Pinned, storage: Mapping[str, str], job: str
) -> TaskResult:
    rows = change.rows
    hashable = [
        F.col(_spark.quote_identifier(f.name))
        for f in rows.schema.fields
        if f.name not in row_level.ADDRESS
        and not isinstance(f.dataType, MapType)  # maps cannot hash
    ]
    buckets = max(1, int(rows.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200"))
    # Rows of one fragment meet in one task (one deletion file per fragment); inserted rows
    # (no fragment) are spread over negative keys so no single task writes them all.
    key = F.coalesce(
        F.col(row_level.FRAG),
        F.lit(-1) - F.pmod(F.hash(*hashable) if hashable else F.lit(0), F.lit(buckets)),
    )
    evolved = change.statement.evolves(target.target())
    task = row_level.change_task(
        target.uri,
        target.version,
        change.statement.write_schema,
        evolved,
        target.stable_row_ids,
        change.check_cardinality,
        job,
        dict(storage),
    )
    # Rewritten rows first, inserted rows last: a fragment's carried-over row ids must bind
    # to its leading rows (lance.fragment.RowIdSequence). Then by target fragment and offset,
    # so a task can write each fragment's deletion file as soon as its rows are over, holding
    # one fragment's offsets at a time (Spark's sort spills; the Python task only streams).
    ordered = rows.repartition(key).sortWithinPartitions(
        F.col(row_level.KIND) == F.lit(row_level.KIND_INSERT),
        F.col(row_level.FRAG),
        F.col(row_level.OFFSET),
    )
    return _jobs.run_tasks(ordered, task)


def _cardinality_error(
    target: Pinned, violation: tuple[int, int], storage: Mapping[str, str]
) -> CardinalityViolationError:
    fragment_id, offset = violation
    ds = dataset.open_version(target.uri, target.version, storage=storage)
    row = (
        row_level.open_fragment(ds, fragment_id, target.uri, target.version)
        .take([offset])
        .to_pylist()
    )
    shown = json.dumps(row[0], default=str)[:300] if row else "?"
    return CardinalityViolationError(
        "[MERGE_CARDINALITY_VIOLATION] The ON search condition of the MERGE statement matched "
        "a single row from the target table with multiple rows of the source table. This "
        "could result in the target row being operated on more than once with an update or "
        "delete operation and is not allowed. Target row "
        f"{shown} (fragment {fragment_id}, offset {offset}, version {target.version} of "
        f"{target.uri!r}). Nothing was committed."
    )
