"""Row-level changes as Spark jobs committed as one Lance transaction (design.md section 3).

DELETE, UPDATE and MERGE all come down to one DataFrame of *change rows*: each names a
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
    InvalidOptionError,
)
from lance_spark.source import dataset, row_level, session
from lance_spark.source import reader as _reader
from lance_spark.source.jobs import StagedJob, TaskResult
from lance_spark.source.options import COLUMNS, encode_names
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
    app_id: str | None,
) -> int:
    """Delete the rows matching ``condition`` (all rows when None); returns how many."""

    def plan(pinned: Pinned) -> ChangePlan:
        needed = set()
        if condition is not None:
            needed = referenced_columns(pinned.rows, pinned, [as_column(condition)])
        target = narrow(spark, pinned, needed, storage)
        rows, predicate = _matching(target, condition)
        return ChangePlan(
            rows=rows.select(*target.address(), F.lit(row_level.KIND_DELETE).alias(row_level.KIND)),
            statement=row_level.Statement(
                operation="DELETE",
                write_schema=None,
                parameters={"predicate": predicate},
                predicate=predicate,
            ),
            check_cardinality=False,
        )

    return run(spark, uri=uri, storage=storage, app_id=app_id, plan=plan).deleted


def update_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
    assignments: Mapping[str, str | Column],
    app_id: str | None,
) -> int:
    """Set ``assignments`` (column -> SQL expression or Column) on the matching rows."""

    def plan(target: Pinned) -> ChangePlan:
        names = target.schema.names
        by_lower = {n.lower(): n for n in names}
        unknown = sorted(k for k in assignments if k.lower() not in by_lower)
        if unknown:
            raise ColumnNotFoundError(
                f"UPDATE sets column {unknown[0]!r}, which the Lance table at {uri!r} does not "
                f"have; columns: {', '.join(names)}"
            )
        # Spark resolves names case-insensitively; so does SET.
        named = {by_lower[k.lower()]: v for k, v in assignments.items()}
        rows, predicate = _matching(target, condition)
        types = {f.name: f.dataType for f in target.rows.schema.fields}
        values = [
            check_deterministic(rows, as_column(named[name]), f"SET {name}")
            .cast(types[name])
            .alias(name)
            if name in named
            else F.col(_spark.quote_identifier(name))
            for name in names
        ]
        return ChangePlan(
            rows=rows.select(
                *target.address(), F.lit(row_level.KIND_UPDATE).alias(row_level.KIND), *values
            ),
            statement=row_level.Statement(
                operation="UPDATE",
                write_schema=target.schema,
                parameters={"predicate": predicate, "set": ", ".join(sorted(assignments))},
                predicate=predicate,
            ),
            check_cardinality=False,
        )

    return run(spark, uri=uri, storage=storage, app_id=app_id, plan=plan).updated


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


def _matching(target: Pinned, condition: str | Column | None) -> tuple[DataFrame, str]:
    if condition is None:
        return target.rows, "true"
    column = check_deterministic(target.rows, as_column(condition), "the condition")
    return target.rows.filter(column), condition_text(target.rows, condition)


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


def condition_text(frame: DataFrame, condition: str | Column) -> str:
    if isinstance(condition, str):
        return condition
    return _spark.condition_sql(frame, condition)


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
