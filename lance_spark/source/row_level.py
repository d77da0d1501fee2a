"""Row-level changes (DELETE, UPDATE, MERGE) written by Spark tasks and committed as ONE
Lance version: the tasks of a change and its commit (design.md section 3).

A change is a stream of *change rows*: each names a target row by its address (fragment id,
offset; null for an inserted row), says what happens to it (``KIND``) and, for rows that are
written, carries the new values. The rows of one target fragment reach one task, rewritten
rows first and inserted ones last, by fragment and offset: the task writes each touched
fragment's deletion file as soon as its rows are over and streams the rows to write into new
fragment files. The driver commits what all tasks wrote as one transaction, after checking
the versions committed since the pinned one (:mod:`lance_spark.source.conflicts`).

Two planners make change rows: Spark's own row-level planning of MERGE / UPDATE / DELETE,
whose delta rows the companion hands to :class:`RowLevelWriter` (the ``lance`` source's writer
of a row-level operation), and :mod:`lance_spark.table.changes` (the table API's MERGE).
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata, RowIdSequence, write_fragments
from lance.schema import LanceSchema
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructField, StructType

from lance_spark.errors import ConcurrentModificationError, CorruptTableError, LanceSparkError
from lance_spark.source import commit as _commit
from lance_spark.source import compaction as _compaction
from lance_spark.source import conflicts as _conflicts
from lance_spark.source import dataset, index_builds, staging
from lance_spark.source import types as _types
from lance_spark.source.options import DEFAULT_MAX_ROWS_PER_FILE, AutoCompact, AutoIndex
from lance_spark.source.write_jobs import ErrorRelay, StagedJob, TaskResult, combine, delete_rows

_log = logging.getLogger(__name__)

OFFSET_MASK = 0xFFFFFFFF

# What a change row does to the table.
KIND_UPDATE = "update"  # delete the target row, write the row's values
KIND_DELETE = "delete"  # delete the target row
KIND_INSERT = "insert"  # write the row's values

# Columns of a change row besides the table's own (all start with "__lance_spark").
FRAG = "__lance_spark_fragment_id"
OFFSET = "__lance_spark_offset"
ROW_ID = "__lance_spark_row_id"
KIND = "__lance_spark_kind"
ADDRESS = (FRAG, OFFSET, ROW_ID, KIND)


@dataclass(frozen=True)
class Target:
    """The table a change reads: its location and the version it pinned."""

    uri: str
    version: int
    schema: pa.Schema  # the table's at ``version``
    stable_row_ids: bool
    file_version: str | None = None  # Lance's file format of the table (None: not known)


@dataclass(frozen=True)
class Statement:
    """What a change is, for its commit and history entry."""

    operation: str  # DELETE, UPDATE or MERGE
    write_schema: pa.Schema | None  # None: the statement only deletes
    parameters: Mapping[str, str] = field(default_factory=dict)
    predicate: str = "true"
    # What the statement reads, for the check against concurrent commits (default: any row).
    read_set: _conflicts.ReadSet = field(default_factory=_conflicts.ReadSet)
    user_metadata: str | None = None  # the statement's userMetadata option
    statement_id: str | None = None  # the table API's id of the statement

    def evolves(self, target: Target) -> bool:
        """The change writes columns the pinned table does not have."""
        return self.write_schema is not None and self.write_schema != target.schema


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


def counts(outcome: TaskResult, version: int | None) -> ChangeCounts:
    """What ``outcome`` (the combined result of a change's tasks) changed."""
    return ChangeCounts(
        version=version,
        updated=outcome.counts.get(KIND_UPDATE, 0),
        deleted=outcome.counts.get(KIND_DELETE, 0),
        inserted=outcome.counts.get(KIND_INSERT, 0),
        touched_fragments=len(outcome.updated_fragments) + len(outcome.removed_fragment_ids),
        written_fragments=len(outcome.new_fragments),
    )


def commit(
    change: Statement,
    target: Target,
    outcome: TaskResult,
    counts: ChangeCounts,
    storage: Mapping[str, str],
    app_id: str | None,
) -> int:
    """Commit the change ``outcome`` (its tasks' combined result) made of ``target`` as ONE
    version with its history entry; returns the version. Raises
    :class:`ConcurrentModificationError` (retryable) when a version committed since the
    pinned one overlaps it or Lance refuses the commit as retryable; nothing is committed
    then."""
    metrics = {
        "numUpdatedRows": counts.updated,
        "numDeletedRows": counts.deleted,
        "numInsertedRows": counts.inserted,
        "numTouchedFragments": counts.touched_fragments,
        "numRemovedFragments": len(outcome.removed_fragment_ids),
        "numAddedFragments": counts.written_fragments,
    }
    if change.operation == "MERGE":  # Delta's names of a MERGE's metrics too
        metrics.update(
            numTargetRowsInserted=counts.inserted,
            numTargetRowsUpdated=counts.updated,
            numTargetRowsDeleted=counts.deleted,
            numOutputRows=counts.inserted + counts.updated,
        )
    evolved = change.evolves(target)
    read_version = target.version
    info = _commit.CommitInfo(
        operation=change.operation,
        parameters=change.parameters,
        metrics=metrics,
        user_metadata=change.user_metadata,
        app_id=app_id,
        statement_id=change.statement_id,
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
        read_version = _add_null_columns(target, change, storage, app_id)
    latest = _check_concurrent(change, target, outcome, read_version, storage)
    return _commit.commit(
        target.uri,
        row_level_op(outcome, latest, change.predicate),
        read_version=int(latest.version),
        info=info,
        storage=storage,
    )


def _check_concurrent(
    change: Statement,
    target: Target,
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


def row_level_op(
    outcome: TaskResult, latest: lance.LanceDataset, predicate: str
) -> lance.LanceOperation.BaseOperation:
    """The change as one Lance operation on ``latest``, visible to Lance's conflict check
    against every other row-level commit (see :mod:`lance_spark.source.conflicts`)."""
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


def _add_null_columns(
    target: Target, change: Statement, storage: Mapping[str, str], app_id: str | None
) -> int:
    """Add the columns of ``change``'s write schema the table lacks as all-null columns, as
    a version of its own marked as the statement's (its history entry: ADD COLUMNS, with the
    statement named in the parameters), once every task succeeded; returns the version."""
    assert change.write_schema is not None
    added = [f.name for f in change.write_schema if f.name not in target.schema.names]
    return _commit.commit(
        target.uri,
        _commit.add_columns_op(
            target.uri, target.version, change.write_schema, [], storage=storage
        ),
        read_version=target.version,
        info=_commit.CommitInfo(
            operation="ADD COLUMNS",
            parameters={"columns": ", ".join(added), "statement": change.operation},
            metrics={"numAddedColumns": len(added)},
            app_id=app_id,
        ),
        storage=storage,
    )


def _merge_op(
    target: Target, outcome: TaskResult, schema: pa.Schema, storage: Mapping[str, str]
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


# --- the tasks ----------------------------------------------------------------------------------


def change_task(
    uri: str,
    version: int,
    write_schema: pa.Schema | None,
    stable_row_ids: bool,
    job_id: str,
    storage: dict[str, str],
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    new_columns_format: str | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[TaskResult]]:
    """Each task streams its change rows (rewritten rows first, then inserted ones; the rows
    of one target fragment together, by offset). The rows to write go
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
        changes = FragmentChanges(uri, version, storage, files)
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
            for chunk in chunks(to_write(batches), max_rows_per_file):
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
                        # Columns the table lacks yet (MERGE WITH SCHEMA EVOLUTION): fragments
                        # of the widened schema, in the table's file format, committed with it.
                        mode="append" if new_columns_format is None else "overwrite",
                        data_storage_version=new_columns_format,
                        max_rows_per_file=max_rows_per_file,
                        storage_options=storage or None,
                        progress=files.progress(),
                    )
                if stable_row_ids and row_ids:
                    _carry_row_ids(written, np.concatenate(row_ids))
                new.extend(written)
        changes.flush()  # the last fragment
        data_files = [f.path for fragment in new for f in fragment.files]
        files.record(data=data_files)
        counts = {name: changes.counts[name] for name in (KIND_UPDATE, KIND_INSERT)}
        yield TaskResult(
            new_fragments=tuple(new),
            updated_fragments=tuple(changes.updated),
            removed_fragment_ids=tuple(changes.removed),
            counts={**counts, KIND_DELETE: changes.deleted_rows},
            files=tuple(data_files),
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
        yield _types.conform_write_batch(piece.drop_columns(list(ADDRESS)), schema)


def chunks(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[Iterator[pa.RecordBatch]]:
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


class FragmentChanges:
    """The change rows of one task, target fragment by target fragment (a fragment's rows
    arrive together): counts them and writes each fragment's deletion file when its rows are
    over (:meth:`flush`). Spark has checked that no target row is matched twice (its MERGE
    cardinality check)."""

    def __init__(
        self,
        uri: str,
        version: int,
        storage: Mapping[str, str],
        files: staging.TaskFiles,
    ) -> None:
        self._uri = uri
        self._version = version
        self._storage = storage
        self._files = files
        self._ds: lance.LanceDataset | None = None
        self.counts: Counter[str] = Counter()
        self.deleted_rows = 0  # distinct rows deleted (an unconditional DELETE may see one twice)
        self.updated: list[FragmentMetadata] = []
        self.removed: list[int] = []
        self._done: set[int] = set()  # fragments whose rows are over
        self._current: int | None = None
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
            self._deleted.append(part[deleted[start:end]])
            self._rewritten.append(part[rewritten[start:end]])

    def flush(self) -> None:
        """Write the current fragment's deletion file."""
        fragment_id, self._current = self._current, None
        if fragment_id is None:
            return
        self._done.add(fragment_id)
        deleted, _ = distinct(np.concatenate(self._deleted))
        offsets, _ = distinct(np.concatenate([deleted, *self._rewritten]))
        self._deleted, self._rewritten = [], []
        self.deleted_rows += int(deleted.size)
        if not offsets.size:
            return
        if self._ds is None:
            self._ds = dataset.open_version(self._uri, self._version, storage=self._storage)
        target = open_fragment(self._ds, fragment_id, self._uri, self._version)
        changed = delete_rows(target, offsets, self._files)
        if changed is None:
            self.removed.append(fragment_id)
        else:
            self.updated.append(changed)


def distinct(values: np.ndarray) -> tuple[np.ndarray, int | None]:
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


def open_fragment(ds: lance.LanceDataset, fragment_id: int, uri: str, version: int) -> Any:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise CorruptTableError(
            f"fragment {fragment_id} of version {version} of the Lance table at {uri!r} is "
            "not in that version's manifest",
            table_uri=uri,
        )
    return fragment


# --- Spark's row-level operations ---------------------------------------------------------------

# The columns the companion's delta writer puts before the table's in each change row it
# hands the Python writer (jvm LanceDeltaWriter): what Spark asks for the row (the codes
# below), its row address and its row id (null for an inserted row).
OPERATION_COLUMN = "__lance_spark_operation"
ROW_ADDRESS_COLUMN = "__lance_spark_row_address"
ROW_ID_COLUMN = "__lance_spark_row_id_value"
DELTA_COLUMNS = (OPERATION_COLUMN, ROW_ADDRESS_COLUMN, ROW_ID_COLUMN)
# Operation codes of a delta row (jvm LanceDeltaWriter.DELETE / UPDATE / INSERT).
DELTA_KINDS = {1: KIND_DELETE, 2: KIND_UPDATE, 3: KIND_INSERT}


@dataclass
class RowLevelWriter(DataSourceArrowWriter):
    """The ``lance`` source's writer of a MERGE, UPDATE or DELETE that Spark planned itself
    (``SupportsRowLevelOperations``, delta-based): each task gets Spark's deletes, updates
    and inserts as change rows (:data:`DELTA_COLUMNS`, then the table's columns), clustered by
    fragment and ordered by row address, inserts last (the companion asks Spark for that
    distribution and order), and runs :func:`change_task` on them; the driver commits ONE
    version of what all tasks wrote (:func:`commit`), or deletes it all on abort.
    """

    target: Target
    statement: Statement
    storage: Mapping[str, str] = field(repr=False)
    app_id: str | None
    auto_compact: AutoCompact
    auto_index: AutoIndex = field(default_factory=AutoIndex)
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    # --- executors ------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskResult:
        task = change_task(
            self.target.uri,
            self.target.version,
            self.statement.write_schema,
            self.target.stable_row_ids,
            self.job_id,
            dict(self.storage),
            self.max_rows_per_file,
            self.target.file_version if self.statement.evolves(self.target) else None,
        )
        return combine(task(change_rows(batch) for batch in iterator))

    # --- driver -----------------------------------------------------------------------------
    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        results = [m for m in messages if isinstance(m, TaskResult)]
        with self._job(results):
            outcome = combine(results)
            done = counts(outcome, None)
            if done.affected == 0 and not outcome.new_fragments:
                _log.info("%s on %s changed no row", self.statement.operation, self.target.uri)
                return
            version = commit(self.statement, self.target, outcome, done, self.storage, self.app_id)
        if self.auto_compact.enabled:
            _compaction.maybe_auto_compact(
                self.target.uri,
                version,
                min_num_files=self.auto_compact.min_num_files,
                storage=self.storage,
                app_id=self.app_id,
                what="change",
            )
        if self.auto_index.enabled:
            index_builds.maybe_auto_index(
                self.target.uri,
                version,
                min_rows=self.auto_index.min_rows,
                storage=self.storage,
                app_id=self.app_id,
                what="change",
            )

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        self._job([m for m in messages if isinstance(m, TaskResult)]).abort()

    def _job(self, results: Iterable[TaskResult]) -> StagedJob:
        return StagedJob(
            self.target.uri,
            self.target.version,
            self.storage,
            job_id=self.job_id,
            known_paths=tuple(p for r in results for p in r.files),
        )


def change_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Spark's delta rows (:data:`DELTA_COLUMNS`, then the table's columns) as
    change rows (:data:`ADDRESS`, then the table's columns)."""
    codes = batch.column(OPERATION_COLUMN).to_numpy(zero_copy_only=False)
    unknown = set(np.unique(codes).tolist()) - DELTA_KINDS.keys()
    if unknown:
        raise LanceSparkError(f"unknown row-level operation codes {sorted(unknown)}")
    kinds = np.array(["", *(DELTA_KINDS[k] for k in sorted(DELTA_KINDS))], dtype=object)
    address = batch.column(ROW_ADDRESS_COLUMN)
    data = batch.drop_columns(list(DELTA_COLUMNS))
    return pa.RecordBatch.from_arrays(
        [
            pc.shift_right(address, 32),
            pc.bit_wise_and(address, OFFSET_MASK),
            batch.column(ROW_ID_COLUMN),
            pa.array(kinds[codes], pa.string()),
            *data.columns,
        ],
        names=[*ADDRESS, *data.schema.names],
    )


def plan_writer(
    uri: str,
    spark_columns: Sequence[str],
    *,
    operation: str,
    version: int,
    storage: Mapping[str, str],
    app_id: str | None,
    auto_compact: AutoCompact,
    max_rows_per_file: int,
    auto_index: AutoIndex | None = None,
    user_metadata: str | None = None,
    statement_id: str | None = None,
    parameters: Mapping[str, str] | None = None,
    read_filter: str | None = None,
    added: Sequence[StructField] = (),
) -> RowLevelWriter:
    """The writer of ``operation``'s change rows on the table at ``uri`` as its scan pinned it
    (``version``); ``spark_columns``: the names of the columns after :data:`DELTA_COLUMNS`
    (the table's, as Spark's plan has them); ``read_filter``: the Lance predicate its scan
    read with, when that is all it read of the table. Opens the job its tasks record files
    in."""
    ds = dataset.open_version(uri, version, storage=storage)
    columns = list(spark_columns[len(DELTA_COLUMNS) :])
    # A MERGE WITH SCHEMA EVOLUTION's new columns come last; committed with its version.
    write_schema = _types.with_new_columns(ds.schema, StructType(list(added)))
    if added:
        _commit.check_can_add_columns(ds, [f.name for f in added], uri=uri)
    same = [c.lower() for c in columns] == [n.lower() for n in write_schema.names]
    if list(spark_columns[: len(DELTA_COLUMNS)]) != list(DELTA_COLUMNS) or not (
        same or operation == "DELETE"  # a DELETE's rows carry no values
    ):
        raise LanceSparkError(
            f"the change rows of {operation} on {uri!r} have the columns "
            f"{', '.join(spark_columns)}; expected {', '.join(DELTA_COLUMNS)} and the columns "
            f"of version {version}: {', '.join(write_schema.names)}"
        )
    writer = RowLevelWriter(
        target=Target(
            uri, version, ds.schema, bool(ds.has_stable_row_ids), str(ds.data_storage_version)
        ),
        statement=Statement(
            operation=operation,
            write_schema=None if operation == "DELETE" else write_schema,
            parameters=dict(parameters or {}),
            # A MERGE reads matched rows no clause may change: a concurrent deletion of one
            # changes its outcome (untouched_rows).
            read_set=_conflicts.ReadSet(untouched_rows=operation == "MERGE", filter=read_filter),
            user_metadata=user_metadata,
            statement_id=statement_id,
        ),
        storage=dict(storage),
        app_id=app_id,
        auto_compact=auto_compact,
        auto_index=auto_index or AutoIndex(),
        max_rows_per_file=max_rows_per_file,
    )
    StagedJob.begin(uri, read_version=version, storage=storage, job_id=writer.job_id)
    return writer
