"""``LanceTable.addColumns``: new columns for every row in one Spark job and one Lance commit.

The table is read at a pinned version with ``_rowaddr`` (fragment id = ``_rowaddr >> 32``,
physical offset = ``_rowaddr & 0xFFFFFFFF``), and Spark computes the new values of every
live row: Spark SQL expressions over the row, or the non-key columns of a DataFrame joined
onto the table by a key (Lance's ``dataset.merge`` semantics: a left join, no match -> null).
The rows are hash-partitioned by fragment and sorted by offset within each partition, so one
task sees all live rows of a fragment, in physical order. The task streams them into
``LanceFragment.merge_columns`` (what Lance's own ``add_columns`` uses per fragment), which
writes one new data file per fragment aligned to its physical rows, and returns the fragment's
new metadata and the widened schema (with Lance's field ids). The driver commits ONE
``Merge`` with every fragment of the pinned version on that version; nothing of the table is
collected to the driver. When the job or the commit fails, no version is created and the files
the tasks wrote are deleted (staging markers, see :mod:`lance_spark.source.staging`). Lance's
``Merge`` conflicts with any concurrent commit: the whole job is then redone on the newer
version (:func:`lance_spark.table.job_runner.with_retry`).

``LanceTable.updateColumns`` (:func:`update_joined_columns`) replaces the values of existing
columns for the rows whose key a DataFrame holds, in the same shape: one job, the matched
rows (fragment, offset, new values) hash-partitioned by fragment; each task hands a fragment's
matched values, keyed by ``_rowaddr``, to ``LanceFragment.update_columns``, which writes ONE
new data file holding only the updated columns for every row of the fragment (unmatched rows
keep their values, read from the fragment) and marks those columns as gone from the old files
(the files of the other columns are kept as they are). The driver commits one Lance ``Update``
in ``rewrite_columns`` mode listing the modified fields, so indexes on them stop covering the
rewritten fragments. Lance's ``DataReplacement`` is not used: it needs the replaced columns to
be alone in their data file, and a table written by Spark keeps all its columns in one file.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata
from lance.schema import LanceSchema
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lance_spark import _spark
from lance_spark.errors import (
    ColumnNotFoundError,
    ConcurrentModificationError,
    InvalidOptionError,
    LanceSparkError,
    SchemaMismatchError,
)
from lance_spark.source import commit as _commit
from lance_spark.source import conflicts as _conflicts
from lance_spark.source import dataset as _dataset
from lance_spark.source import row_level, session
from lance_spark.source import staging as _files
from lance_spark.source import types as _types
from lance_spark.source.options import COLUMNS, METADATA_COLUMN_NAMES, encode_names
from lance_spark.source.write_jobs import ErrorRelay, StagedJob, TaskResult
from lance_spark.table import job_runner as _jobs
from lance_spark.table.context import TableContext

_OFFSET_MASK = 0xFFFFFFFF
# Columns the job's rows carry besides the new ones (all start with "__lance_spark").
_INTERNAL_PREFIX = "__lance_spark"
_FRAG = "__lance_spark_fragment_id"
_OFFSET = "__lance_spark_offset"
_KEY = "__lance_spark_key"
_KEY_COUNT = "__lance_spark_key_count"
_MATCHED = "__lance_spark_matched"  # keyed: the row found its key in the DataFrame
_DUPLICATE = "__lance_spark_duplicate"  # keyed: the row's key is in the DataFrame twice or more
_KEY_TEXT = "__lance_spark_key_text"  # keyed, duplicates only: the key, for the error message

# TaskResult counts: live rows given values, and of those the rows that found their key
# (keyed; else all).
_ROWS = "rows"
_MATCHED_ROWS = "matched"


@dataclass(frozen=True)
class AddedColumns:
    """What one ``addColumns`` did."""

    version: int
    columns: tuple[str, ...]
    rows: int  # live rows of the table
    matched: int  # rows given a value from the DataFrame (expressions: every row)
    fragments: int  # fragments given a new data file


@dataclass(frozen=True)
class _Plan:
    """The job's rows (FRAG, OFFSET, [MATCHED, DUPLICATE, KEY_TEXT], new columns), sorted by
    fragment and offset, and the Arrow schema of the new columns."""

    rows: DataFrame
    target: pa.Schema
    keyed: bool
    parameters: Mapping[str, str] = field(default_factory=dict)


# --- entry points -------------------------------------------------------------------------------


def add_expression_columns(
    table: TableContext, *, expressions: Mapping[str, str | Column]
) -> AddedColumns:
    """Add one column per ``expressions`` item: name -> Spark SQL expression (or Column)
    evaluated on each row of the table."""
    return _jobs.with_retry(lambda: _add_expression_columns(table, expressions))


def _add_expression_columns(
    table: TableContext, expressions: Mapping[str, str | Column]
) -> AddedColumns:
    spark, uri, storage, app_id = table.spark, table.uri, table.storage, table.app_id
    if not expressions:
        raise InvalidOptionError(
            "addColumns needs at least one column: {name: Spark SQL expression or Column}"
        )
    ds = _dataset.open_latest(uri, storage=storage)
    names = list(expressions)
    _check_new_names(names, ds.schema.names, uri=uri)
    version = int(ds.version)
    full = _read(spark, uri, storage, version, None)
    columns = [_new_column(full, name, value) for name, value in expressions.items()]
    rows = _read(spark, uri, storage, version, _referenced(full, columns, ds.schema.names))
    values = rows.select(
        *_address(rows), *(c.alias(n) for n, c in zip(names, columns, strict=True))
    )
    texts = {
        n: v if isinstance(v, str) else _sql(full, c)
        for (n, v), c in zip(expressions.items(), columns, strict=True)
    }
    plan = _Plan(
        rows=_sorted(values, keyed=False),
        target=_target_schema(
            values.select(*(F.col(_spark.quote_identifier(n)) for n in names)).schema
        ),
        keyed=False,
        parameters={"columns": ", ".join(names), "expressions": json.dumps(texts)},
    )
    return _execute(ds, plan, uri=uri, storage=storage, app_id=app_id)


def add_joined_columns(table: TableContext, *, source: DataFrame, on: str) -> AddedColumns:
    """Add every non-key column of ``source``, joined onto the table by ``on``: a table row
    whose key ``source`` lacks (or whose key is null) gets nulls; keys of ``source`` the table
    lacks are ignored; a key ``source`` holds twice is an error naming it."""
    return _jobs.with_retry(lambda: _add_joined_columns(table, source, on))


def _join_keys(
    ds: lance.LanceDataset, source_columns: Sequence[str], on: str, *, what: str, uri: str
) -> tuple[str, str, list[str]]:
    """The key ``on`` as the table and the source (its ``source_columns``) name it, and the
    source's other columns; errors name ``what`` (the method) and the missing key or columns."""
    if not isinstance(on, str) or not on:
        raise InvalidOptionError(f"{what}(df, on=...) needs a key column name, got {on!r}")
    table_key = _resolve(on, ds.schema.names)
    if table_key is None:
        raise ColumnNotFoundError(
            f"{what} key {on!r} is not a column of the Lance table at {uri!r}; "
            f"columns: {', '.join(ds.schema.names)}"
        )
    source_key = _resolve(on, source_columns)
    if source_key is None:
        raise ColumnNotFoundError(
            f"{what} key {on!r} is not a column of the source; columns: {', '.join(source_columns)}"
        )
    names = [c for c in source_columns if c != source_key]
    if not names:
        raise InvalidOptionError(f"the source given to {what} has no column besides the key {on!r}")
    return table_key, source_key, names


@dataclass(frozen=True)
class KeyedJoin:
    """A source joined onto the Lance table by a key: the key as each names it, the source's
    value columns ``names`` and what the job's rows call them (``aliases``)."""

    table_key: str
    source_key: str
    names: tuple[str, ...]
    aliases: tuple[str, ...]

    def sql(self, *, target: str, source: str, matched_only: bool) -> str:
        """The job's rows as Spark SQL: ``target`` (a relation with the key and ``_rowaddr``)
        full-outer-joined with ``source`` (a relation with the key and ``names``); each row's
        fragment and offset, whether its key is in the source twice or more (and the key, for
        the error), [whether it found its key,] and the source's values; only the table's rows
        (``matched_only``: only those that found their key), and every duplicate key, so a
        task reports it, matched or not. All rows of a fragment in one partition (hashed by
        fragment id), duplicates first, then in physical order."""
        q = _spark.quote_identifier
        key, count = q(_KEY), q(_KEY_COUNT)
        duplicate = f"(s.{key} IS NOT NULL AND s.{count} > 1)"
        values = [f"{q(n)} AS {q(a)}" for n, a in zip(self.names, self.aliases, strict=True)]
        columns = [
            f"shiftrightunsigned(t.{q(_ROWADDR)}, 32) AS {q(_FRAG)}",
            f"t.{q(_ROWADDR)} & {_OFFSET_MASK} AS {q(_OFFSET)}",
            *([] if matched_only else [f"s.{key} IS NOT NULL AS {q(_MATCHED)}"]),
            f"{duplicate} AS {q(_DUPLICATE)}",
            f"CASE WHEN {duplicate} THEN CAST(s.{key} AS STRING) END AS {q(_KEY_TEXT)}",
            *(f"s.{q(a)} AS {q(a)}" for a in self.aliases),
        ]
        keep = f"t.{q(_ROWADDR)} IS NOT NULL" + (
            f" AND s.{key} IS NOT NULL" if matched_only else ""
        )
        return (
            f"SELECT {', '.join(columns)} FROM {target} t FULL OUTER JOIN "
            f"(SELECT {q(self.source_key)} AS {key}, {', '.join(values)}, "
            f"count(1) OVER (PARTITION BY {q(self.source_key)}) AS {count} FROM {source}) s "
            f"ON t.{q(self.table_key)} = s.{key} WHERE ({keep}) OR {duplicate} "
            f"DISTRIBUTE BY {q(_FRAG)} SORT BY {q(_DUPLICATE)} DESC, {q(_FRAG)}, {q(_OFFSET)}"
        )

    def rows(
        self, spark: SparkSession, target: DataFrame, source: DataFrame, *, matched_only: bool
    ) -> DataFrame:
        """:meth:`sql` on two DataFrames (PySpark's ``spark.sql(query, name=frame)``, classic
        and Connect)."""
        marks = {n: f"__lance_spark_{n}_{uuid.uuid4().hex}" for n in ("target", "source")}
        query = self.sql(target=marks["target"], source=marks["source"], matched_only=matched_only)
        query = query.replace("{", "{{").replace("}", "}}")  # braces in names: not fields
        for name, mark in marks.items():
            query = query.replace(mark, "{" + name + "}")
        return spark.sql(query, target=target, source=source)


def _add_joined_columns(table: TableContext, source: DataFrame, on: str) -> AddedColumns:
    spark, uri, storage, app_id = table.spark, table.uri, table.storage, table.app_id
    ds = _dataset.open_latest(uri, storage=storage)
    table_key, source_key, names = _join_keys(ds, source.columns, on, what="addColumns", uri=uri)
    _check_new_names(names, ds.schema.names, uri=uri)
    version = int(ds.version)
    rows = _read(spark, uri, storage, version, _prunable([table_key]))
    join = KeyedJoin(table_key, source_key, tuple(names), tuple(names))
    plan = _Plan(
        rows=join.rows(spark, rows, source, matched_only=False),
        target=_target_schema(_fields(source.schema, names)),
        keyed=True,
        parameters={"columns": ", ".join(names), "on": table_key},
    )
    return _execute(ds, plan, uri=uri, storage=storage, app_id=app_id)


def _fields(schema: StructType, names: Sequence[str]) -> StructType:
    """The fields ``names`` (exact names) of ``schema``, in that order."""
    by_name = {f.name: f for f in schema.fields}
    return StructType([by_name[n] for n in names])


# --- the driver side ----------------------------------------------------------------------------


def _check_new_names(names: Sequence[str], table: Sequence[str], *, uri: str) -> None:
    existing = {n.lower(): n for n in table}
    seen: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise InvalidOptionError(f"addColumns: {name!r} is not a column name")
        if name in METADATA_COLUMN_NAMES or name.startswith(_INTERNAL_PREFIX):
            raise InvalidOptionError(
                f"addColumns: {name!r} is a reserved name (metadata columns: "
                f"{', '.join(METADATA_COLUMN_NAMES)}; prefix {_INTERNAL_PREFIX})"
            )
        if "." in name:
            raise InvalidOptionError(
                f"addColumns: column name {name!r} contains '.', which Lance reads as a "
                "path into a struct"
            )
        if name.lower() in existing:
            raise SchemaMismatchError(
                f"addColumns: column {name!r} already exists in the Lance table at {uri!r} "
                f"(as {existing[name.lower()]!r}); columns: {', '.join(table)}"
            )
        if name.lower() in seen:
            raise InvalidOptionError(
                f"addColumns names column {name!r} twice (also as {seen[name.lower()]!r})"
            )
        seen[name.lower()] = name


def _read(
    spark: SparkSession,
    uri: str,
    storage: Mapping[str, str],
    version: int,
    columns: Sequence[str] | None,
) -> DataFrame:
    """The table at ``version`` with ``_rowaddr`` (only ``columns`` of it, if given)."""
    reader = (
        session.lance_reader(spark, storage)
        .option("version", version)
        .option("metadata_columns", "_rowaddr")
    )
    if columns is not None:
        reader = reader.option(COLUMNS, encode_names(columns))
    return reader.load(uri)


def _new_column(rows: DataFrame, name: str, value: str | Column) -> Column:
    """``value`` as a Column, checked on ``rows``: it resolves, yields one value per row
    (no aggregate, window or generator) and is deterministic."""
    if isinstance(value, str):
        column = F.expr(value)
    elif isinstance(value, Column):
        column = value
    else:
        raise InvalidOptionError(
            f"addColumns: the value of {name!r} must be a Spark SQL expression (str) or a "
            f"Column, got {type(value).__name__}"
        )
    try:
        one_per_row = _spark.one_value_per_row(rows, column)
    except AnalysisException as err:
        if str(err.getCondition() or "").startswith("UNRESOLVED_COLUMN"):
            raise ColumnNotFoundError(
                f"addColumns: the expression of column {name!r} refers to a column the Lance "
                f"table does not have: {str(err).splitlines()[0]}"
            ) from err
        raise
    if not one_per_row:
        raise InvalidOptionError(
            f"addColumns: the expression of column {name!r} must give one value per row; "
            "aggregate, window and generator functions (sum, row_number, explode...) are "
            "not supported"
        )
    if not _spark.deterministic(rows, column):
        raise InvalidOptionError(
            f"addColumns: the expression of column {name!r} "
            f"({_spark.expression_sql(rows, column)}) is not deterministic (for example "
            "rand() or uuid()): a retried task would write other values"
        )
    return column


def _sql(rows: DataFrame, column: Column) -> str:
    """A Column's Spark SQL text, for history (without the alias Spark gives it)."""
    return _spark.expression_sql(rows, column)


def _referenced(
    rows: DataFrame, columns: Sequence[Column], table: Sequence[str]
) -> list[str] | None:
    """The table columns ``columns`` read (at least one), or None to read them all."""
    used = _spark.referenced_columns(rows, rows, columns)
    return _prunable([n for n in table if n in used] or list(table[:1]))


def _prunable(names: list[str]) -> list[str] | None:
    """``names`` for the reader's ``columns`` option, or None (read all) if it cannot say them."""
    return None if any("," in n or n != n.strip() for n in names) else names


def _address(rows: DataFrame) -> list[Column]:
    addr = rows["_rowaddr"]
    return [
        F.shiftrightunsigned(addr, 32).alias(_FRAG),
        addr.bitwiseAND(F.lit(_OFFSET_MASK)).alias(_OFFSET),
    ]


def _sorted(values: DataFrame, *, keyed: bool) -> DataFrame:
    """All rows of a fragment in one partition (hashed by fragment id), in physical order;
    duplicate keys first, so a task reports them before it writes anything."""
    order = [F.col(_FRAG), F.col(_OFFSET)]
    if keyed:
        order.insert(0, F.col(_DUPLICATE).desc())
    return values.repartition(_FRAG).sortWithinPartitions(*order)


def _target_schema(spark_schema: StructType) -> pa.Schema:
    """Arrow types of the new columns (the connector's type map), all nullable."""
    incoming = to_arrow_schema(spark_schema, timezone="UTC")
    return _types.nullable_schema(_types.arrow_schema_for_new_table(incoming, vector_sizes={}))


def _execute(
    ds: lance.LanceDataset,
    plan: _Plan,
    *,
    uri: str,
    storage: Mapping[str, str],
    app_id: str | None,
) -> AddedColumns:
    version = int(ds.version)
    fragment_ids = [int(f.fragment_id) for f in ds.get_fragments()]
    with StagedJob.begin(uri, read_version=version, storage=storage) as job:
        done = TaskResult()
        if fragment_ids:
            task = _add_task(uri, version, plan.target, dict(storage), job.job_id, plan.keyed)
            done = _jobs.run_tasks(plan.rows, task)
        fragments, schema = _merged(ds, fragment_ids, done, plan.target, uri=uri)
        rows = done.counts.get(_ROWS, 0)
        matched = done.counts.get(_MATCHED_ROWS, 0)
        metrics = {
            "numAddedColumns": len(plan.target),
            "numOutputRows": rows,
            "numFiles": len(done.updated_fragments),
        }
        if plan.keyed:
            metrics["numMatchedRows"] = matched
        new_version = _commit.commit(
            uri,
            lance.LanceOperation.Merge(fragments, schema),
            read_version=version,
            info=_commit.CommitInfo(
                operation="ADD COLUMNS",
                parameters=plan.parameters,
                metrics=metrics,
                app_id=app_id,
            ),
            storage=storage,
        )
    return AddedColumns(
        new_version, tuple(plan.target.names), rows, matched, len(done.updated_fragments)
    )


def _merged(
    ds: lance.LanceDataset,
    fragment_ids: list[int],
    done: TaskResult,
    target: pa.Schema,
    *,
    uri: str,
) -> tuple[list[FragmentMetadata], LanceSchema]:
    """Every fragment of the pinned version with its new data file, and the widened schema."""
    by_id = {int(f.id): f for f in done.updated_fragments}
    if len(by_id) != len(done.updated_fragments) or sorted(by_id) != sorted(fragment_ids):
        raise LanceSparkError(
            f"addColumns on {uri!r}: the job wrote files for fragments {sorted(by_id)} (some "
            f"twice?) but version {ds.version} has fragments {sorted(fragment_ids)}; nothing "
            "was committed"
        )
    widened = pa.schema([*ds.schema, *target], metadata=ds.schema.metadata)
    if done.schema is None:  # an empty table: no fragment, so no task told the field ids
        if LanceSchema.from_pyarrow(ds.schema) != ds.lance_schema:
            raise SchemaMismatchError(
                f"addColumns cannot add columns to the empty Lance table at {uri!r} whose "
                "columns were dropped or re-added before; add them with "
                "LanceDataset.add_columns"
            )
        return [], LanceSchema.from_pyarrow(widened)
    if done.schema.to_pyarrow().names != widened.names:
        raise LanceSparkError(
            f"addColumns on {uri!r}: the tasks returned the columns "
            f"{done.schema.to_pyarrow().names}, not {widened.names}; nothing was committed"
        )
    return [by_id[i] for i in fragment_ids], done.schema


def _resolve(name: str, names: Sequence[str]) -> str | None:
    """``name`` among ``names``: exactly, else case-insensitively when unique (like Spark)."""
    if name in names:
        return name
    folded = [n for n in names if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


# --- the tasks ----------------------------------------------------------------------------------


def _add_task(
    uri: str,
    version: int,
    target: pa.Schema,
    storage: dict[str, str],
    job_id: str,
    keyed: bool,
) -> _jobs.Task:
    """Each task: for each fragment it holds (all its live rows, in physical order), one new
    data file with the new columns, written by ``merge_columns``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
        updated: list[FragmentMetadata] = []
        schema: LanceSchema | None = None
        tally = _Tally()
        runs = _fragment_runs(batches, keyed)
        written: list[str] = []
        ds: lance.LanceDataset | None = None
        files = _files.TaskFiles(uri, job_id, storage=storage)
        try:
            for fragment_id, group in itertools.groupby(runs, key=lambda run: run[0]):
                if ds is None:
                    ds = _dataset.open_version(uri, version, storage=storage)
                fragment = row_level.open_fragment(ds, fragment_id, uri, version)
                values = _fragment_values(fragment_id, (b for _, b in group), target, keyed, tally)
                relay = ErrorRelay()
                fed = files.watch(relay.watch(_primed(values)))
                with relay:
                    metadata, merged = fragment.merge_columns(
                        pa.RecordBatchReader.from_batches(target, fed)
                    )
                old = {f.path for f in fragment.metadata.files}
                paths = [f.path for f in metadata.files if f.path not in old]
                written.extend(paths)
                files.record(data=paths)
                if schema is not None and merged != schema:
                    raise LanceSparkError(
                        f"addColumns on {uri!r}: fragments of one task were given different "
                        "schemas; nothing was committed"
                    )
                schema = merged
                updated.append(metadata)
        except BaseException:
            # This attempt's files are nobody's: Spark may retry the task elsewhere.
            _files.delete_files([_files.data_file_uri(uri, p) for p in written], storage=storage)
            raise
        yield TaskResult(
            updated_fragments=tuple(updated),
            counts={_ROWS: tally.rows, _MATCHED_ROWS: tally.matched if keyed else tally.rows},
            files=tuple(written),
            schema=schema,
        )

    return run


def _primed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` with the first row on its own: merge_columns opens its file on the first
    batch, so the next pull (where TaskFiles looks for it) comes before the real work."""
    for i, batch in enumerate(batches):
        if i == 0 and batch.num_rows > 1:
            yield batch.slice(0, 1)
            yield batch.slice(1)
        else:
            yield batch


@dataclass
class _Tally:
    rows: int = 0
    matched: int = 0


def _fragment_runs(
    batches: Iterable[pa.RecordBatch],
    keyed: bool,
    *,
    source: str = "the DataFrame given to addColumns",
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Slices of consecutive rows of one fragment, with its id; a duplicate key (``keyed``) is
    an error naming ``source``."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if keyed:
            _check_no_duplicate(batch, source)
        frags = batch.column(_FRAG).to_numpy(zero_copy_only=False)
        bounds = [0, *(np.flatnonzero(frags[1:] != frags[:-1]) + 1).tolist(), batch.num_rows]
        for start, end in itertools.pairwise(bounds):
            yield int(frags[start]), batch.slice(start, end - start)


def _check_no_duplicate(batch: pa.RecordBatch, source: str) -> None:
    duplicate = batch.column(_DUPLICATE)
    if pc.any(duplicate).as_py():
        index = pc.index(duplicate, True).as_py()
        key = batch.column(_KEY_TEXT)[index].as_py()
        raise InvalidOptionError(
            f"{source} has the key {key} more than once; each key must appear at most once"
        )


def _fragment_values(
    fragment_id: int,
    pieces: Iterable[pa.RecordBatch],
    target: pa.Schema,
    keyed: bool,
    tally: _Tally,
) -> Iterator[pa.RecordBatch]:
    """The new columns of one fragment's live rows, checked to be in strict offset order."""
    last = -1
    for piece in pieces:
        offsets = piece.column(_OFFSET).to_numpy(zero_copy_only=False)
        if offsets[0] <= last or bool(np.any(np.diff(offsets) <= 0)):
            raise LanceSparkError(
                f"addColumns: the rows of fragment {fragment_id} are not in strict offset "
                "order (a row twice?)"
            )
        last = int(offsets[-1])
        tally.rows += piece.num_rows
        if keyed:
            tally.matched += int(pc.sum(piece.column(_MATCHED).cast(pa.int64())).as_py() or 0)
        yield _types.conform_write_batch(piece.select(target.names), target)


# --- updateColumns ------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdatedColumns:
    """What one ``updateColumns`` did."""

    version: int | None  # the new version; None when no row matched (nothing committed)
    columns: tuple[str, ...]  # the table's names of the updated columns
    matched: int  # rows given new values
    fragments: int  # fragments given a new data file


def update_joined_columns(table: TableContext, *, source: DataFrame, on: str) -> UpdatedColumns:
    """Replace, for every table row whose key ``on`` ``source`` holds, the values of the
    columns of ``source`` other than the key (each an existing column of the table); other
    rows keep theirs. A key ``source`` holds twice is an error naming it; null keys match
    nothing. Only the updated columns' files are written (see the module doc)."""
    return _jobs.with_retry(lambda: _update_joined_columns(table, source, on))


def _update_joined_columns(table: TableContext, source: DataFrame, on: str) -> UpdatedColumns:
    spark, uri, storage = table.spark, table.uri, table.storage
    ds = _dataset.open_latest(uri, storage=storage)
    plan = plan_update(ds, source.schema, on, uri=uri)
    rows = _read(spark, uri, storage, plan.version, _prunable([plan.join.table_key]))
    values = plan.join.rows(spark, rows, source, matched_only=True)
    with StagedJob.begin(uri, read_version=plan.version, storage=storage) as job:
        done = TaskResult()
        if ds.get_fragments():
            done = _jobs.run_tasks(values, update_task(plan, storage=storage, job_id=job.job_id))
        return commit_update(table, plan, done)


@dataclass(frozen=True)
class ColumnUpdate:
    """A planned ``updateColumns``: the table's version read, and the join that gives the
    updated columns (``join.aliases``: the table's names) their values. JSON-able
    (:meth:`state`): the SQL statement's procedure keeps it between its calls."""

    uri: str
    version: int
    join: KeyedJoin

    def state(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of_state(cls, state: Mapping[str, Any]) -> ColumnUpdate:
        j = state["join"]
        join = KeyedJoin(
            str(j["table_key"]), str(j["source_key"]), tuple(j["names"]), tuple(j["aliases"])
        )
        return cls(str(state["uri"]), int(state["version"]), join)

    def sql(self, *, table: str, source: str) -> str:
        """The job's rows as one query over ``table`` (SQL naming the Lance table, read at
        :attr:`version`) and ``source`` (SQL naming a table or view)."""
        q = _spark.quote_identifier
        target = (
            f"(SELECT {q(self.join.table_key)}, {q(_ROWADDR)} FROM {table} "
            f"VERSION AS OF {self.version})"
        )
        return self.join.sql(target=target, source=source, matched_only=True)


def plan_update(
    ds: lance.LanceDataset,
    source: StructType,
    on: str,
    *,
    uri: str,
    columns: Sequence[str] | None = None,
) -> ColumnUpdate:
    """Checks an update of the table ``ds`` (its latest version) from a source of schema
    ``source`` joined by ``on``: the source's ``columns`` (default: all but the key), each an
    existing column of the table, castable to it; the plan."""
    table_key, source_key, names = _join_keys(
        ds, source.fieldNames(), on, what="updateColumns", uri=uri
    )
    if columns is not None:
        names = _chosen(columns, names, source_key, uri=uri)
    targets = _updated_names(names, ds.schema.names, table_key, uri=uri)
    target = pa.schema([ds.schema.field(t) for t in targets])
    _check_castable(_fields(source, names), targets, target, uri=uri)
    join = KeyedJoin(table_key, source_key, tuple(names), tuple(targets))
    return ColumnUpdate(uri, int(ds.version), join)


def _chosen(
    columns: Sequence[str], names: Sequence[str], source_key: str, *, uri: str
) -> list[str]:
    """The source's columns ``columns`` name (resolved like Spark), none of them the key."""
    chosen: list[str] = []
    for column in columns:
        found = _resolve(column, [*names, source_key])
        if found is None:
            raise ColumnNotFoundError(
                f"UPDATE COLUMNS on the Lance table at {uri!r}: column {column!r} is not a "
                f"column of the source; columns: {', '.join([source_key, *names])}"
            )
        if found == source_key:
            raise InvalidOptionError(
                f"UPDATE COLUMNS on the Lance table at {uri!r}: column {column!r} is the key, "
                "which cannot be updated by joining on it"
            )
        chosen.append(found)
    return chosen


def commit_update(table: TableContext, plan: ColumnUpdate, done: TaskResult) -> UpdatedColumns:
    """Commits what the job of ``plan`` wrote as one ``Update`` (``UPDATE COLUMNS`` in the
    history), after the serializability check; no version when no row matched."""
    uri, storage = table.uri, table.storage
    targets = plan.join.aliases
    matched = done.counts.get(_MATCHED_ROWS, 0)
    if not done.updated_fragments:  # no row matched: nothing to write, no version
        return UpdatedColumns(None, targets, 0, 0)
    ds = _dataset.open_version(uri, plan.version, storage=storage)
    operation = _update_op(ds, done, uri=uri)
    _check_no_overlap(uri, storage, plan.version, done)
    new_version = _commit.commit(
        uri,
        operation,
        read_version=plan.version,
        info=_commit.CommitInfo(
            operation="UPDATE COLUMNS",
            parameters={"columns": ", ".join(targets), "on": plan.join.table_key},
            metrics={
                "numUpdatedColumns": len(targets),
                "numUpdatedRows": matched,
                "numFiles": len(done.updated_fragments),
            },
            app_id=table.app_id,
        ),
        storage=storage,
    )
    return UpdatedColumns(new_version, targets, matched, len(done.updated_fragments))


def _updated_names(names: Sequence[str], table: Sequence[str], key: str, *, uri: str) -> list[str]:
    """The table column each of ``names`` updates (resolved like Spark: exactly, else
    ignoring case); an unknown name, the key, or two names for one column are errors."""
    targets: list[str] = []
    seen: dict[str, str] = {}
    for name in names:
        target = _resolve(name, table)
        if target is None:
            raise ColumnNotFoundError(
                f"updateColumns: column {name!r} of the source is not a column of the Lance "
                f"table at {uri!r}; columns: {', '.join(table)} (add new columns with "
                "addColumns)"
            )
        if target == key:
            raise InvalidOptionError(
                f"updateColumns: column {name!r} is the key {key!r}, which cannot be updated "
                "by joining on it"
            )
        if target in seen:
            raise InvalidOptionError(
                f"updateColumns: the source names column {target!r} twice "
                f"(as {seen[target]!r} and {name!r})"
            )
        seen[target] = name
        targets.append(target)
    return targets


def _check_castable(
    selected: StructType,
    targets: Sequence[str],
    target: pa.Schema,
    *,
    uri: str,
) -> None:
    """Each of the source's columns ``selected`` can be cast to its table column without
    loss, as an append casts (the values, range and nulls, are checked by the tasks); else
    :class:`SchemaMismatchError` naming the column and both types."""
    names = selected.fieldNames()
    incoming = to_arrow_schema(selected, timezone="UTC")
    renamed = pa.schema([f.with_name(t) for f, t in zip(incoming, targets, strict=True)])
    try:
        _types.reconcile_write_schema(renamed, target, merge_schema=False)
    except SchemaMismatchError as err:
        spark_types = ", ".join(
            f"{n} {f.dataType.simpleString()}" for n, f in zip(names, selected, strict=True)
        )
        raise SchemaMismatchError(
            f"updateColumns on the Lance table at {uri!r}: {err} (the source's columns: "
            f"{spark_types}; the table's: "
            f"{', '.join(f'{f.name} {f.type}' for f in target)})"
        ) from err


def _update_op(
    ds: lance.LanceDataset, done: TaskResult, *, uri: str
) -> lance.LanceOperation.BaseOperation:
    """One ``Update`` (``rewrite_columns``) of the fragments given a new file, listing the
    fields those files hold as modified (indexes on them drop those fragments)."""
    by_id = {int(f.id): f for f in done.updated_fragments}
    existing = {int(f.fragment_id) for f in ds.get_fragments()}
    if len(by_id) != len(done.updated_fragments) or not set(by_id) <= existing:
        raise LanceSparkError(
            f"updateColumns on {uri!r}: the job wrote files for fragments {sorted(by_id)} "
            f"(some twice?) but version {ds.version} has fragments {sorted(existing)}; nothing "
            "was committed"
        )
    written = set(done.files)
    modified = sorted(
        {
            int(i)
            for f in done.updated_fragments
            for data_file in f.files
            if data_file.path in written
            for i in data_file.fields
            if i >= 0
        }
    )
    return lance.LanceOperation.Update(
        updated_fragments=[by_id[i] for i in sorted(by_id)],
        fields_modified=modified,
        update_mode="rewrite_columns",
        updated_fragment_offsets=dict(done.offsets),
    )


def _check_no_overlap(
    uri: str, storage: Mapping[str, str], read_version: int, done: TaskResult
) -> None:
    """Serializable like MERGE: a version committed since ``read_version`` that changed a
    fragment this job rewrote, added rows (they may hold keys of the DataFrame) or changed the
    schema is a retryable :class:`ConcurrentModificationError` (the attempt is redone). Lance's
    own conflict check covers the rest (the commit names ``read_version``)."""
    latest = _dataset.open_latest(uri, storage=storage)
    if int(latest.version) == read_version:
        return
    overlap = _conflicts.find_overlap(
        uri,
        storage=storage,
        read_version=read_version,
        latest=latest,
        touched={int(f.id) for f in done.updated_fragments},
        read_set=_conflicts.ReadSet(),
    )
    if overlap is not None:
        raise ConcurrentModificationError(
            f"UPDATE COLUMNS on the Lance table at {uri!r} read version {read_version}, and "
            f"version {overlap.version} ({overlap.operation}) committed meanwhile overlaps it: "
            f"{overlap.what}. Nothing was committed",
            read_version=read_version,
            conflicting_version=overlap.version,
        )


_ROWADDR = "_rowaddr"


def update_task(plan: ColumnUpdate, *, storage: Mapping[str, str], job_id: str) -> _jobs.Task:
    """Each task: for each fragment it holds (its matched rows, in physical order), one new
    data file with the updated columns for the whole fragment, written by
    ``LanceFragment.update_columns`` (a hash join on ``_rowaddr``)."""
    uri, version, storage = plan.uri, plan.version, dict(storage)
    schema = _dataset.open_version(uri, version, storage=storage).schema
    keyed = pa.schema(
        [pa.field(_ROWADDR, pa.uint64(), False), *(schema.field(t) for t in plan.join.aliases)]
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
        updated: list[FragmentMetadata] = []
        offsets: dict[int, bytes] = {}
        tally = _Tally()
        written: list[str] = []
        ds: lance.LanceDataset | None = None
        files = _files.TaskFiles(uri, job_id, storage=storage)
        try:
            runs = _fragment_runs(batches, keyed=True, source="the source of updateColumns")
            for fragment_id, group in itertools.groupby(runs, key=lambda run: run[0]):
                # The fragment's matched values, whole: the hash join holds them anyway, and
                # a failing source fails here, before this fragment's file is written.
                values = pa.Table.from_batches(
                    list(_matched_values(fragment_id, (b for _, b in group), keyed, tally)),
                    schema=keyed,
                )
                if ds is None:
                    ds = _dataset.open_version(uri, version, storage=storage)
                fragment = row_level.open_fragment(ds, fragment_id, uri, version)
                files.check_temporaries()
                metadata, _fields, matched = fragment.update_columns(
                    values, left_on=_ROWADDR, right_on=_ROWADDR, with_offsets=True
                )
                old = {f.path for f in fragment.metadata.files}
                paths = [f.path for f in metadata.files if f.path not in old]
                written.extend(paths)
                files.record(data=paths)
                updated.append(metadata)
                offsets[fragment_id] = bytes(matched)
        except BaseException:
            # This attempt's files are nobody's: Spark may retry the task elsewhere.
            _files.delete_files([_files.data_file_uri(uri, p) for p in written], storage=storage)
            raise
        yield TaskResult(
            updated_fragments=tuple(updated),
            counts={_MATCHED_ROWS: tally.matched},
            files=tuple(written),
            offsets=offsets,
        )

    return run


def _matched_values(
    fragment_id: int, pieces: Iterable[pa.RecordBatch], keyed: pa.Schema, tally: _Tally
) -> Iterator[pa.RecordBatch]:
    """``_rowaddr`` (uint64) and the updated columns, cast to the table's types, of one
    fragment's matched rows, checked to be in strict offset order."""
    last = -1
    target = pa.schema(list(keyed)[1:])
    for piece in pieces:
        offsets = piece.column(_OFFSET).to_numpy(zero_copy_only=False)
        if offsets[0] <= last or bool(np.any(np.diff(offsets) <= 0)):
            raise LanceSparkError(
                f"updateColumns: the rows of fragment {fragment_id} are not in strict offset "
                "order (a row twice?)"
            )
        last = int(offsets[-1])
        tally.matched += piece.num_rows
        address = pa.array((np.uint64(fragment_id) << np.uint64(32)) | offsets.astype(np.uint64))
        columns = _types.conform_write_batch(piece.select(target.names), target)
        yield pa.RecordBatch.from_arrays([address, *columns.columns], schema=keyed)
