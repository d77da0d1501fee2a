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

import itertools
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata, RowIdSequence, write_fragments
from lance.schema import LanceSchema
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from lance_spark import _spark
from lance_spark.errors import (
    CardinalityViolationError,
    ColumnNotFoundError,
    ConcurrentModificationError,
    InvalidOptionError,
    LanceSparkError,
)
from lance_spark.source import commit as _commit
from lance_spark.source import dataset, session, staging
from lance_spark.source import reader as _reader
from lance_spark.source import types as _types
from lance_spark.source.jobs import ErrorRelay, StagedJob, TaskResult, delete_rows
from lance_spark.source.options import COLUMNS, DEFAULT_MAX_ROWS_PER_FILE, encode_names
from lance_spark.table import conflicts as _conflicts
from lance_spark.table import jobs as _jobs
from lance_spark.table import maintenance
from lance_spark.table.context import TableContext

_OFFSET_MASK = 0xFFFFFFFF

# What a change row does to the table.
KIND_UPDATE = "update"  # delete the target row, write the row's values
KIND_DELETE = "delete"  # delete the target row
KIND_INSERT = "insert"  # write the row's values
KIND_MATCHED = "matched"  # a matched target row no clause acts on: only counted (cardinality)

# Columns of a change row besides the table's own (all start with "__lance_spark").
FRAG = "__lance_spark_fragment_id"
OFFSET = "__lance_spark_offset"
ROW_ID = "__lance_spark_row_id"
KIND = "__lance_spark_kind"
_ADDRESS = (FRAG, OFFSET, ROW_ID, KIND)


@dataclass(frozen=True)
class Pinned:
    """The table at one version, read with ``_rowaddr`` and ``_rowid``."""

    uri: str
    version: int
    schema: pa.Schema
    rows: DataFrame
    stable_row_ids: bool

    def address(self) -> list[Column]:
        """The change-row address columns of a row of ``rows`` (null when it is absent)."""
        addr = self.rows["_rowaddr"]
        return [
            F.shiftrightunsigned(addr, 32).alias(FRAG),
            addr.bitwiseAND(F.lit(_OFFSET_MASK)).alias(OFFSET),
            self.rows["_rowid"].alias(ROW_ID),
        ]


@dataclass(frozen=True)
class ChangePlan:
    """What a statement changes, as Spark computes it from a :class:`Pinned` table."""

    rows: DataFrame  # FRAG, OFFSET, ROW_ID, KIND and, if write_schema, its columns
    write_schema: pa.Schema | None  # None: the statement only deletes
    check_cardinality: bool
    operation: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    predicate: str = "true"
    # What the statement reads, for the check against concurrent commits (default: any row).
    read_set: _conflicts.ReadSet = field(default_factory=_conflicts.ReadSet)


@dataclass(frozen=True)
class ChangeCounts:
    """The rows a statement changed, and the version it committed (None: nothing to do)."""

    version: int | None
    updated: int
    deleted: int
    inserted: int
    touched_fragments: int = 0
    written_fragments: int = 0
    added_columns: bool = False  # the commit widened the table's schema (schema evolution)

    @property
    def affected(self) -> int:
        return self.updated + self.deleted + self.inserted


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
            rows=rows.select(*target.address(), F.lit(KIND_DELETE).alias(KIND)),
            write_schema=None,
            check_cardinality=False,
            operation="DELETE",
            parameters={"predicate": predicate},
            predicate=predicate,
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
            rows=rows.select(*target.address(), F.lit(KIND_UPDATE).alias(KIND), *values),
            write_schema=target.schema,
            check_cardinality=False,
            operation="UPDATE",
            parameters={"predicate": predicate, "set": ", ".join(sorted(assignments))},
            predicate=predicate,
        )

    return run(spark, uri=uri, storage=storage, app_id=app_id, plan=plan).updated


def run(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    app_id: str | None,
    plan: Callable[[Pinned], ChangePlan],
) -> ChangeCounts:
    """Pin, plan, run one job and commit one transaction; redo it all when a concurrent
    commit overlaps it or Lance calls the commit retryable (:func:`_jobs.with_retry`, then
    :class:`ConcurrentModificationError`). Nothing is committed on any failure."""

    def attempt() -> ChangeCounts:
        target = pin(spark, uri, storage)
        change = plan(target)
        with StagedJob.begin(uri, read_version=target.version, storage=storage) as job:
            outcome = _execute(change, target, storage, job.job_id)
            if outcome.violations:
                raise _cardinality_error(target, outcome.violations[0], storage)
            counts = _counts(outcome, None)
            if counts.affected == 0 and not outcome.new_fragments:
                return counts  # nothing matched: no new version
            version = _commit_changes(change, target, outcome, counts, storage, app_id)
            return replace(_counts(outcome, version), added_columns=_evolves(change, target))

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
        if f.name not in _ADDRESS and not isinstance(f.dataType, MapType)  # maps cannot hash
    ]
    buckets = max(1, int(rows.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200"))
    # Rows of one fragment meet in one task (one deletion file per fragment); inserted rows
    # (no fragment) are spread over negative keys so no single task writes them all.
    key = F.coalesce(
        F.col(FRAG),
        F.lit(-1) - F.pmod(F.hash(*hashable) if hashable else F.lit(0), F.lit(buckets)),
    )
    evolved = _evolves(change, target)
    task = _change_task(
        target.uri,
        target.version,
        change.write_schema,
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
        F.col(KIND) == F.lit(KIND_INSERT), F.col(FRAG), F.col(OFFSET)
    )
    return _jobs.run_tasks(ordered, task)


def _evolves(change: ChangePlan, target: Pinned) -> bool:
    """The change writes columns the pinned table does not have."""
    return change.write_schema is not None and change.write_schema != target.schema


def _counts(outcome: TaskResult, version: int | None) -> ChangeCounts:
    return ChangeCounts(
        version=version,
        updated=outcome.counts.get(KIND_UPDATE, 0),
        deleted=outcome.counts.get(KIND_DELETE, 0),
        inserted=outcome.counts.get(KIND_INSERT, 0),
        touched_fragments=len(outcome.updated_fragments) + len(outcome.removed_fragment_ids),
        written_fragments=len(outcome.new_fragments),
    )


def _commit_changes(
    change: ChangePlan,
    target: Pinned,
    outcome: TaskResult,
    counts: ChangeCounts,
    storage: Mapping[str, str],
    app_id: str | None,
) -> int:
    metrics = {
        "numUpdatedRows": counts.updated,
        "numDeletedRows": counts.deleted,
        "numInsertedRows": counts.inserted,
        "numTouchedFragments": counts.touched_fragments,
        "numRemovedFragments": len(outcome.removed_fragment_ids),
        "numAddedFragments": counts.written_fragments,
    }
    evolved = _evolves(change, target)
    read_version = target.version
    info = _commit.CommitInfo(
        operation=change.operation,
        parameters=change.parameters,
        metrics=metrics,
        app_id=app_id,
    )
    operation: lance.LanceOperation.BaseOperation
    if evolved and change.write_schema is not None and not outcome.removed_fragment_ids:
        # One Merge on the pinned version: Lance fails it (retryable) on any concurrent
        # change of the table's data, so it needs no check of its own.
        operation = _merge_op(target, outcome, change.write_schema, storage)
        return _commit.commit(
            target.uri, operation, read_version=read_version, info=info, storage=storage
        )
    if evolved and change.write_schema is not None:
        # Lance's Merge must list every fragment of the version it reads, so it cannot drop
        # the fragments this change empties. Add the columns first (metadata only, a version
        # of its own), then commit an Update, which may drop fragments, on that version.
        read_version = _add_null_columns(target, change.write_schema, storage)
    latest = _check_concurrent(change, target, outcome, read_version, storage)
    return _commit.commit(
        target.uri,
        _row_level_op(outcome, latest, change.predicate),
        read_version=int(latest.version),
        info=info,
        storage=storage,
    )


def _check_concurrent(
    change: ChangePlan,
    target: Pinned,
    outcome: TaskResult,
    read_version: int,
    storage: Mapping[str, str],
) -> lance.LanceDataset:
    """The latest version, after checking that nothing committed since ``read_version``
    overlaps the change (else :class:`ConcurrentModificationError`, retryable)."""
    latest = dataset.open_latest(target.uri, storage=storage)
    if int(latest.version) == read_version:
        return latest
    touched = {f.id for f in outcome.updated_fragments} | set(outcome.removed_fragment_ids)
    overlap = _conflicts.find_overlap(
        target.uri,
        storage=storage,
        read_version=read_version,
        latest=latest,
        touched=touched,
        read_set=change.read_set,
    )
    if overlap is None:
        return latest
    raise ConcurrentModificationError(
        f"{change.operation} on the Lance table at {target.uri!r} read version "
        f"{read_version}, and version {overlap.version} ({overlap.operation}) committed "
        f"meanwhile overlaps it: {overlap.what}. Nothing was committed",
        read_version=read_version,
        conflicting_version=overlap.version,
    )


def _row_level_op(
    outcome: TaskResult, latest: lance.LanceDataset, predicate: str
) -> lance.LanceOperation.BaseOperation:
    """The change as one Lance operation on ``latest``, visible to Lance's conflict check
    against every other row-level commit (see :mod:`lance_spark.table.conflicts`)."""
    removed = list(outcome.removed_fragment_ids)
    new = list(outcome.new_fragments)
    touched = {f.id for f in outcome.updated_fragments} | set(removed)
    sentinel = _conflicts.sentinel(latest, touched)
    if sentinel is None and not touched:
        # No fragment at all: the change only inserts. A Merge listing the new fragments
        # conflicts with every concurrent data change (an Update of no fragment would not).
        start = _conflicts.next_fragment_id(latest)
        for offset, fragment in enumerate(new):
            fragment.id = start + offset
        return lance.LanceOperation.Merge(new, latest.lance_schema)
    updated = [*outcome.updated_fragments, *([sentinel] if sentinel is not None else [])]
    if not new:
        return lance.LanceOperation.Delete(updated, removed, predicate)
    return lance.LanceOperation.Update(
        removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new
    )


def _add_null_columns(target: Pinned, schema: pa.Schema, storage: Mapping[str, str]) -> int:
    """Add ``schema``'s columns the table lacks as all-null columns; returns the version."""
    ds = dataset.open_version(target.uri, target.version, storage=storage)
    ds.add_columns(pa.schema([f for f in schema if f.name not in target.schema.names]))
    return int(ds.version)


def _merge_op(
    target: Pinned, outcome: TaskResult, schema: pa.Schema, storage: Mapping[str, str]
) -> lance.LanceOperation.BaseOperation:
    """Columns were added (MERGE with schema evolution): Lance's ``Update`` cannot change the
    schema, so commit ONE ``Merge`` listing every fragment (touched ones with their new
    deletion files) under the widened schema. ``Merge`` assigns new row ids to the written
    fragments: it rejects carried-over ones."""
    ds = dataset.open_version(target.uri, target.version, storage=storage)
    replaced = {f.id: f for f in outcome.updated_fragments}
    gone = set(outcome.removed_fragment_ids)
    existing = ds.get_fragments()
    kept = [replaced.get(f.fragment_id, f.metadata) for f in existing]
    fragments = [f for f in kept if f.id not in gone]
    next_id = max((f.fragment_id for f in existing), default=-1) + 1
    for offset, fragment in enumerate(outcome.new_fragments):
        fragment.id = next_id + offset
        fragment.row_id_meta = None
    return lance.LanceOperation.Merge(
        [*fragments, *outcome.new_fragments], LanceSchema.from_pyarrow(schema)
    )


def _cardinality_error(
    target: Pinned, violation: tuple[int, int], storage: Mapping[str, str]
) -> CardinalityViolationError:
    fragment_id, offset = violation
    ds = dataset.open_version(target.uri, target.version, storage=storage)
    row = _fragment(ds, fragment_id, target.uri, target.version).take([offset]).to_pylist()
    shown = json.dumps(row[0], default=str)[:300] if row else "?"
    return CardinalityViolationError(
        "[MERGE_CARDINALITY_VIOLATION] The ON search condition of the MERGE statement matched "
        "a single row from the target table with multiple rows of the source table. This "
        "could result in the target row being operated on more than once with an update or "
        "delete operation and is not allowed. Target row "
        f"{shown} (fragment {fragment_id}, offset {offset}, version {target.version} of "
        f"{target.uri!r}). Nothing was committed."
    )


# --- the tasks ----------------------------------------------------------------------------------


def _change_task(
    uri: str,
    version: int,
    write_schema: pa.Schema | None,
    evolved: bool,
    stable_row_ids: bool,
    check_cardinality: bool,
    job_id: str,
    storage: dict[str, str],
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
) -> _jobs.Task:
    """Each task streams its change rows (rewritten rows first, then inserted ones; the rows
    of one target fragment together, by offset, see :func:`_execute`). The rows to write go
    into new fragment files, one ``write_fragments`` call per ``max_rows_per_file`` rows (the
    files one call would write); each target fragment's deletion file is written as soon as
    its last change row has gone by (all of a fragment's change rows are in one task). Every
    file written is recorded for an abort.

    What a task holds besides the batch at hand and Lance's writer is bounded whatever the
    partition's size: the offsets of ONE target fragment (its deletion vector, which Lance
    needs whole) and the old row ids of the rewritten rows of ONE new file (the file's row-id
    sequence), as numpy arrays."""
    written_kinds = pa.array([KIND_UPDATE, KIND_INSERT])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
        files = staging.TaskFiles(uri, job_id, storage=storage)
        changes = _FragmentChanges(uri, version, storage, files, check_cardinality)
        new: list[FragmentMetadata] = []

        def to_write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                changes.note(batch)
                kept = batch.filter(pc.is_in(batch.column(KIND), value_set=written_kinds))
                if kept.num_rows:
                    yield kept

        if write_schema is None:
            for batch in batches:
                changes.note(batch)
        else:
            for chunk in _chunks(to_write(batches), max_rows_per_file):
                row_ids: list[np.ndarray] = []
                relay = ErrorRelay()
                # Any error of the change rows' own bookkeeping (a deletion file that cannot be
                # written, rows of a fragment apart) is raised as itself too.
                changed = ErrorRelay((Exception,))
                fed = files.watch(
                    relay.watch(_conformed(changed.watch(chunk), write_schema, row_ids))
                )
                with relay, changed:
                    written = write_fragments(
                        pa.RecordBatchReader.from_batches(write_schema, fed),
                        uri,
                        schema=write_schema,
                        # "append" checks the schema against the table's, which lacks added
                        # columns.
                        mode="overwrite" if evolved else "append",
                        max_rows_per_file=max_rows_per_file,
                        storage_options=storage or None,
                        progress=files.progress(),
                    )
                ids = np.concatenate(row_ids) if stable_row_ids and row_ids else None
                # A row id twice: a target row rewritten twice, a cardinality violation its
                # fragment reports when its rows are over (and nothing is committed).
                if ids is not None and _distinct(ids)[1] is None:
                    _carry_row_ids(written, ids)
                new.extend(written)
        changes.flush()  # the last fragment
        violations = [changes.violation] if changes.violation is not None else []
        data_files = [f.path for fragment in new for f in fragment.files]
        files.record(data=data_files)
        counts = {name: changes.counts[name] for name in (KIND_UPDATE, KIND_INSERT)}
        yield TaskResult(
            new_fragments=tuple(new),
            updated_fragments=() if violations else tuple(changes.updated),
            removed_fragment_ids=() if violations else tuple(changes.removed),
            counts={**counts, KIND_DELETE: changes.deleted_rows},
            files=tuple(data_files),
            violations=tuple(violations),
        )

    return run


def _conformed(
    pieces: Iterable[pa.RecordBatch], schema: pa.Schema, row_ids: list[np.ndarray]
) -> Iterator[pa.RecordBatch]:
    """The rows to write as ``schema``; appends the old row ids of the rewritten rows, in
    written order, to ``row_ids``."""
    for piece in pieces:
        rewritten = pc.equal(piece.column(KIND), KIND_UPDATE)
        row_ids.append(piece.column(ROW_ID).filter(rewritten).to_numpy(zero_copy_only=False))
        yield _types.conform_write_batch(piece.drop_columns(list(_ADDRESS)), schema)


def _chunks(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[Iterator[pa.RecordBatch]]:
    """``batches`` as consecutive runs of at most ``size`` rows (a batch is split at a run's
    end); each run is read lazily and must be read to its end before the next is asked for.
    A batch is pulled only when it is needed: the next run starts only when one is left."""
    held: list[pa.RecordBatch] = []  # the rest of a split batch, or a batch pulled ahead

    def pull() -> pa.RecordBatch | None:
        return held.pop() if held else next(batches, None)

    def run() -> Iterator[pa.RecordBatch]:
        room = size
        while room > 0:
            batch = pull()
            if batch is None:
                return
            if batch.num_rows > room:
                held.append(batch.slice(room))
                batch = batch.slice(0, room)
            room -= batch.num_rows
            yield batch

    while True:
        ahead = pull()
        if ahead is None:
            return
        held.append(ahead)
        yield run()


class _FragmentChanges:
    """The change rows of one task, target fragment by target fragment (a fragment's rows
    arrive together): counts them, checks that no target row is matched twice, and writes each
    fragment's deletion file when its rows are over (:meth:`flush`)."""

    def __init__(
        self,
        uri: str,
        version: int,
        storage: Mapping[str, str],
        files: staging.TaskFiles,
        check_cardinality: bool,
    ) -> None:
        self._uri = uri
        self._version = version
        self._storage = storage
        self._files = files
        self._check_cardinality = check_cardinality
        self._ds: lance.LanceDataset | None = None
        self.counts: Counter[str] = Counter()
        self.deleted_rows = 0  # distinct rows deleted (an unconditional DELETE may see one twice)
        self.updated: list[FragmentMetadata] = []
        self.removed: list[int] = []
        self.violation: tuple[int, int] | None = None  # (fragment id, offset) matched twice
        self._done: set[int] = set()  # fragments whose rows are over
        self._current: int | None = None
        self._matched: list[np.ndarray] = []  # offsets of the current fragment's rows
        self._deleted: list[np.ndarray] = []
        self._rewritten: list[np.ndarray] = []

    def note(self, batch: pa.RecordBatch) -> None:
        """Count ``batch``'s change rows; the previous fragment's deletion file is written
        when its rows are over."""
        kinds = batch.column(KIND)
        for item in pc.value_counts(kinds).to_pylist():
            self.counts[item["values"]] += item["counts"]
        targeted = batch.filter(pc.not_equal(kinds, KIND_INSERT))
        if not targeted.num_rows:
            return
        if targeted.column(FRAG).null_count or targeted.column(OFFSET).null_count:
            raise LanceSparkError("a change row of a target row has no row address")
        frags = targeted.column(FRAG).to_numpy(zero_copy_only=False)
        offsets = targeted.column(OFFSET).to_numpy(zero_copy_only=False)
        kind = targeted.column(KIND)
        deleted = pc.equal(kind, KIND_DELETE).to_numpy(zero_copy_only=False)
        rewritten = pc.equal(kind, KIND_UPDATE).to_numpy(zero_copy_only=False)
        bounds = [0, *(np.flatnonzero(frags[1:] != frags[:-1]) + 1).tolist(), len(frags)]
        for start, end in itertools.pairwise(bounds):
            fragment_id = int(frags[start])
            if fragment_id != self._current:
                self.flush()
                if fragment_id in self._done:
                    raise LanceSparkError(
                        f"the change rows of fragment {fragment_id} of {self._uri} reached a "
                        "task apart (they must be together); nothing was committed"
                    )
                self._current = fragment_id
            part = offsets[start:end]
            self._matched.append(part)
            self._deleted.append(part[deleted[start:end]])
            self._rewritten.append(part[rewritten[start:end]])

    def flush(self) -> None:
        """Write the current fragment's deletion file (none after a cardinality violation:
        nothing is committed then)."""
        fragment_id, self._current = self._current, None
        if fragment_id is None:
            return
        self._done.add(fragment_id)
        deleted, _ = _distinct(np.concatenate(self._deleted))
        offsets, _ = _distinct(np.concatenate([deleted, *self._rewritten]))
        if self._check_cardinality and self.violation is None:
            _, twice = _distinct(np.concatenate(self._matched))
            if twice is not None:
                self.violation = (fragment_id, twice)
        self._matched, self._deleted, self._rewritten = [], [], []
        self.deleted_rows += int(deleted.size)
        if self.violation is not None or not offsets.size:
            return
        if self._ds is None:
            self._ds = dataset.open_version(self._uri, self._version, storage=self._storage)
        fragment = _fragment(self._ds, fragment_id, self._uri, self._version)
        changed = delete_rows(fragment, offsets, self._files)
        if changed is None:
            self.removed.append(fragment_id)
        else:
            self.updated.append(changed)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, int | None]:
    """``values`` sorted without repeats, and the smallest value that repeats (None: none).
    (Sorting: numpy's hash-based ``unique`` is ~10x slower on a million offsets.)"""
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered, None
    repeats = ordered[1:] == ordered[:-1]
    if not repeats.any():
        return ordered, None
    first = int(ordered[1:][repeats][0])
    return ordered[np.concatenate(([True], ~repeats))], first


def _carry_row_ids(new: list[FragmentMetadata], row_ids: np.ndarray) -> None:
    """Give the rewritten rows (the leading rows written) their old stable row ids, so an
    update stays an update for row-id based readers (diff); inserted rows get new ids at
    commit."""
    start = 0
    for fragment in new:
        count = min(int(fragment.physical_rows), len(row_ids) - start)
        if count <= 0:
            break
        sequence = RowIdSequence(row_ids[start : start + count].tolist())
        fragment.row_id_meta = sequence.to_inline_metadata()
        start += count


def _fragment(ds: lance.LanceDataset, fragment_id: int, uri: str, version: int) -> Any:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise LookupError(f"fragment {fragment_id} of {uri} version {version} is gone")
    return fragment
