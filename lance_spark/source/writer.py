"""The writer: tasks stream Arrow batches into Lance fragments, the driver commits once.

Planning (on the driver, before any task runs) pins ``read_version`` and the target Arrow
schema, so schema errors surface before a single file is written. Each task streams its
batches through :func:`lance.fragment.write_fragments` and returns what it wrote as a
:class:`~lance_spark.source.write_jobs.TaskResult` (Spark's commit message);
:meth:`LanceWriter.commit` turns all of them into ONE Lance transaction.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lance_spark.errors import (
    CommitConflictError,
    InvalidOptionError,
    SchemaMismatchError,
    TableNotFoundError,
)
from lance_spark.source import commit as _commit
from lance_spark.source import compaction as _compaction
from lance_spark.source import (
    dataset,
    index_builds,
    replace_where,
    staging,
    transactions,
    txn_markers,
)
from lance_spark.source import types as _types
from lance_spark.source.options import WriteOptions
from lance_spark.source.transactions import TxnId
from lance_spark.source.write_jobs import ErrorRelay, StagedJob, TaskResult, combine

_log = logging.getLogger(__name__)


class WriteMode(Enum):
    CREATE = "create"
    APPEND = "append"
    APPEND_NEW_COLUMNS = "append with new columns"  # mergeSchema=true adding columns
    OVERWRITE = "overwrite"
    REPLACE_WHERE = "replace where"  # overwrite of the rows matching a predicate


# Attempts of an idempotent append that keeps losing to concurrent commits (each loss means
# another writer committed; the check and the rebuilt append cost a few manifest reads).
_IDEMPOTENT_ATTEMPTS = 100


class _SchemaChangedError(CommitConflictError):
    """An idempotent append planned on another schema than the latest version's: the job
    must run again (its files have the old schema)."""


# TaskResult counts of a write task.
ROWS = "rows"
BYTES = "bytes"


@dataclass
class LanceWriter(DataSourceArrowWriter):
    uri: str
    mode: WriteMode
    read_version: int | None
    target: pa.Schema
    options: WriteOptions = field(repr=False)
    app_id: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # An idempotent write (txnAppId / txnVersion) already committed when it was planned: the
    # tasks write nothing and the commit commits nothing.
    repeat: transactions.Committed | None = None

    # --- executors ------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskResult:
        if self.repeat is not None:
            for _ in iterator:  # Spark's Arrow stream is read to its end either way
                pass
            return TaskResult()
        counter = _Counter()
        files = staging.TaskFiles(self.uri, self.job_id, storage=self.options.storage)
        relay = ErrorRelay()
        batches = (counter.count(self._conform(b)) for b in iterator)
        reader = pa.RecordBatchReader.from_batches(self.target, files.watch(relay.watch(batches)))
        # On failure write_fragments removes what it wrote (checked with pylance 14), so a
        # failed task attempt leaves no files behind; a killed one leaves what `files`
        # recorded (finished files and its open temporary), which the driver deletes. Only a
        # plain append is checked against the table's schema: the others write a schema the
        # table does not have (yet).
        with relay:  # a connector error raised in ``batches`` is raised as itself
            fragments = write_fragments(
                reader,
                self.uri,
                schema=self.target,
                mode="append" if self.mode in _APPENDING else "overwrite",
                max_rows_per_file=self.options.max_rows_per_file,
                max_rows_per_group=self.options.max_rows_per_group,
                max_bytes_per_file=self.options.max_bytes_per_file,
                data_storage_version=(
                    self.options.data_storage_version if self._creates() else None
                ),
                enable_stable_row_ids=bool(self._stable_row_ids()) if self._creates() else False,
                storage_options=dict(self.options.storage) or None,
                progress=files.progress(),
            )
        paths = [file.path for f in fragments for file in f.files]
        files.record(data=paths)  # the progress hook recorded them already; this is cheap
        return TaskResult(
            new_fragments=tuple(fragments),
            files=tuple(paths),
            counts={ROWS: counter.rows, BYTES: counter.bytes},
        )

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        conformed = _types.conform_write_batch(batch, self.target)
        if self.options.replace_where is not None:
            replace_where.check_batch(conformed, self.options.replace_where)
        return conformed

    # --- driver -----------------------------------------------------------------------------
    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        self.commit_results([m for m in messages if isinstance(m, TaskResult)], txn=self.txn_id())

    def commit_results(
        self,
        results: Sequence[TaskResult],
        *,
        job_id: str | None = None,
        txn: TxnId | None = None,
        operation: str | None = None,
        parameters: Mapping[str, str] | None = None,
        metrics: Mapping[str, int] | None = None,
    ) -> int | None:
        """Commit what the tasks of job ``job_id`` (default: this writer's) wrote as ONE
        version; returns it (None: nothing committed). ``txn``: skip the commit when the
        table already has one of that id (the files written are deleted). ``operation``,
        ``parameters`` and ``metrics`` (added to the write's own) go to the version's
        history entry. With autoCompact, a version of the compaction may follow (see
        :meth:`_auto_compact`)."""
        version = self._commit_once(
            results,
            job_id=job_id,
            txn=txn,
            operation=operation,
            parameters=parameters,
            metrics=metrics,
        )
        if version is not None and self.options.auto_compact.enabled:
            self._auto_compact(version)
        if version is not None and self.options.auto_index.enabled:
            index_builds.maybe_auto_index(
                self.uri,
                version,
                min_rows=self.options.auto_index.min_rows,
                storage=self.options.storage,
                app_id=self.app_id,
            )
        return version

    def _auto_compact(self, version: int) -> None:
        """Compact after the write's ``version`` when the table has autoCompact.minNumFiles
        small fragments. This runs where Spark commits a Python data source's write: in a
        Python process of the driver that has no Spark session (classic and Connect alike),
        so the compaction runs there with pylance alone (Lance's plan, its tasks one after
        another, one ``Rewrite`` commit with the connector's history entry) rather than as
        a Spark job. Every write path (batch, streaming, catalog tables) passes here.
        A failure is a warning: the write has committed."""
        _compaction.maybe_auto_compact(
            self.uri,
            version,
            min_num_files=self.options.auto_compact.min_num_files,
            storage=self.options.storage,
            app_id=self.app_id,
        )

    def _commit_once(
        self,
        results: Sequence[TaskResult],
        *,
        job_id: str | None,
        txn: TxnId | None,
        operation: str | None,
        parameters: Mapping[str, str] | None,
        metrics: Mapping[str, int] | None,
    ) -> int | None:
        done = combine(results)
        # Ends the job: finished on success, aborted on any failure (Spark aborts it again
        # when commit raises, which finds nothing left to do). Finishing deletes the files
        # of a write that committed nothing.
        with self._job(done.files, job_id=job_id):
            # An idempotent write is checked before any work; the first round of
            # _commit_idempotent commits on this check (``found``) unless work that reads
            # the table came in between.
            found = None
            if txn is not None:
                found = transactions.check(self.uri, txn, storage=self.options.storage)
                if self._repeat(txn, found):
                    return None
            fragments = list(done.new_fragments)
            extra: dict[str, int] = {}
            op: lance.LanceOperation.BaseOperation | None = None  # None: an append
            if self.mode is WriteMode.REPLACE_WHERE:
                deleted = self._delete_replaced(job_id or self.job_id)
                found = None  # it read the table: checked again right before the commit
                extra["numDeletedRows"] = deleted.rows
                if not deleted.rows and not fragments:
                    _log.info("replaceWhere on %s: no row to replace or write", self.uri)
                    return None
                if deleted.rows:
                    op = _commit.replace_op(
                        deleted.updated,
                        deleted.removed,
                        fragments,
                        predicate=self.options.replace_where or "",
                    )
            elif self.mode is WriteMode.APPEND and not fragments:
                _log.info("append of zero rows to %s: nothing to commit", self.uri)
                return None
            elif self.mode is WriteMode.APPEND_NEW_COLUMNS:
                op = _commit.add_columns_op(
                    self.uri,
                    self.read_version,
                    self.target,
                    fragments,
                    storage=self.options.storage,
                )
                found = None  # as for replaceWhere
            elif self.mode is not WriteMode.APPEND:
                op = _commit.overwrite_op(self.target, fragments)
            # Delta's names: a DataFrame write is a WRITE, new table or not; the catalog's
            # statements name themselves (tableOperation, create_empty).
            default_operation = self.options.table_operation or "WRITE"
            info = _commit.CommitInfo(
                operation=operation or default_operation,
                parameters={**self._parameters(), **(parameters or {})},
                metrics={
                    "numFiles": len(done.files),
                    "numOutputRows": done.counts.get(ROWS, 0),
                    "numOutputBytes": done.counts.get(BYTES, 0),
                    **(metrics or {}),
                    **extra,
                },
                user_metadata=self.options.user_metadata,
                app_id=self.app_id,
                txn=txn,
            )
            version_format = self.options.data_storage_version
            if not fragments and self._creates() and version_format is not None:

                def create_empty(_ds: lance.LanceDataset | None) -> int:
                    return _commit.create_empty(
                        self.uri,
                        self.target,
                        overwrite=self.read_version is not None,
                        info=info,
                        storage=self.options.storage,
                        data_storage_version=version_format,
                        enable_stable_row_ids=self._stable_row_ids(),
                    )

                if txn is None:
                    return create_empty(None)
                return self._commit_idempotent(txn, info, create_empty, rebuilds=False, found=found)
            if txn is not None and op is None:
                return self._commit_idempotent(
                    txn,
                    info,
                    self._idempotent_append(txn, fragments, info),
                    rebuilds=True,
                    found=found,
                )
            if op is None:
                op = _commit.append_op(fragments)
            planned = op

            def commit_planned(_ds: lance.LanceDataset | None) -> int:
                return _commit.commit(
                    self.uri,
                    planned,
                    read_version=self.read_version,
                    info=info,
                    storage=self.options.storage,
                    enable_stable_row_ids=self._stable_row_ids() if self._creates() else None,
                )

            if txn is None:
                return commit_planned(None)
            if self._creates():
                return self._commit_idempotent(
                    txn,
                    info,
                    self._idempotent_overwrite(fragments, info, commit_planned),
                    rebuilds=True,
                    found=found,
                )
            # replaceWhere (its deletion files are of the read version) and mergeSchema (a
            # Merge, which conflicts with every concurrent data change) commit as planned.
            return self._commit_idempotent(txn, info, commit_planned, rebuilds=False, found=found)

    def _idempotent_append(
        self, txn: TxnId, fragments: Sequence[FragmentMetadata], info: _commit.CommitInfo
    ) -> Callable[[lance.LanceDataset | None], int]:
        """Commits ``fragments`` on the version given as an operation Lance refuses to rebase
        over another idempotent write (:func:`lance_spark.source.commit.conflicting_append_op`)."""
        base_schema: list[object] = []

        def commit_on(ds: lance.LanceDataset | None) -> int:
            if ds is None:
                raise TableNotFoundError(
                    f"the Lance table at {self.uri!r} was deleted while {txn.app_id!r} / "
                    f"{txn.version} was appending to it; nothing was committed"
                )
            if int(ds.version) != self.read_version:
                if not base_schema:
                    base_schema.append(
                        dataset.open_version(
                            self.uri, self.read_version or 1, storage=self.options.storage
                        ).lance_schema
                    )
                if ds.lance_schema != base_schema[0]:
                    raise _SchemaChangedError(
                        f"{info.operation} of {txn.app_id!r} / {txn.version} on the Lance "
                        f"table at {self.uri!r} was planned on version {self.read_version}, "
                        f"and version {ds.version} has another schema. Nothing was "
                        "committed; run the job again.",
                        retryable=True,
                    )
            return _commit.commit(
                self.uri,
                _commit.conflicting_append_op(ds, fragments),
                read_version=int(ds.version),
                info=info,
                storage=self.options.storage,
            )

        return commit_on

    def _idempotent_overwrite(
        self,
        fragments: Sequence[FragmentMetadata],
        info: _commit.CommitInfo,
        commit_planned: Callable[[lance.LanceDataset | None], int],
    ) -> Callable[[lance.LanceDataset | None], int]:
        """Commits the overwrite on the version given as an operation Lance refuses to rebase
        over another idempotent write (:func:`lance_spark.source.commit.conflicting_overwrite_op`).
        Where there is none, two racing idempotent overwrites may both commit (Lance rebases
        an ``Overwrite`` over anything): the write that creates the table, and an overwrite
        that changes the table's schema or file format; the overwrite commits as planned."""

        def commit_on(ds: lance.LanceDataset | None) -> int:
            op = (
                None if ds is None else _commit.conflicting_overwrite_op(ds, self.target, fragments)
            )
            if ds is None or op is None:
                return commit_planned(ds)
            return _commit.commit(
                self.uri,
                op,
                read_version=int(ds.version),
                info=dataclasses.replace(info, read_as="Overwrite"),
                storage=self.options.storage,
            )

        return commit_on

    def _commit_idempotent(
        self,
        txn: TxnId,
        info: _commit.CommitInfo,
        commit_on: Callable[[lance.LanceDataset | None], int],
        *,
        rebuilds: bool,
        found: transactions.Check | None,
    ) -> int | None:
        """Commit with ``commit_on`` (given the latest version, None: no table) unless a
        version holds ``txn`` or a later write of its application, checked against every
        version up to the one committed on.

        A Lance Append is rebased over whatever was committed since its read version, even
        with no retries, so checking and then appending is not atomic; a commit lock is no
        better (pylance runs it around a manifest existence check and a plain put, which a
        writer without the lock can overwrite). So ``commit_on`` commits on the version
        checked last as an operation Lance refuses to rebase over another idempotent write;
        when it loses and ``rebuilds``, the versions committed meanwhile are checked and it
        commits again on the newest. One Lance version either way.

        Around the attempts, the application's markers (:mod:`txn_markers`): an attempt file
        before the first, removed only once the outcome is known (after a state file naming
        the commit); a writer killed in between leaves it for the next check to settle.

        ``found``: the check the caller made just before (no repeat), on which the first round
        commits (None: the first round checks); every later round checks again."""
        error: CommitConflictError | None = None
        attempt: str | None = None
        settled = False  # the outcome is known and recorded: the attempt file may go
        storage = self.options.storage
        try:
            for _ in range(_IDEMPOTENT_ATTEMPTS):
                # Known only once this round ends: a failure other than Lance's refusal (an
                # I/O error after the manifest was written, or in record_state) leaves the
                # attempt file for the next check to settle.
                settled = False
                if found is None:
                    found = transactions.check(self.uri, txn, storage=storage)
                if self._repeat(txn, found):
                    settled = True
                    return None
                ds = found.table
                if attempt is None:
                    read = 0 if ds is None else int(ds.version)
                    attempt = txn_markers.begin_attempt(
                        self.uri, txn.app_id, read_version=read, storage=storage
                    )
                try:
                    version = commit_on(ds)
                except (CommitConflictError, TableNotFoundError) as err:
                    settled = True  # Lance committed nothing, in this attempt or before
                    if (
                        isinstance(err, CommitConflictError)
                        and err.retryable
                        and rebuilds
                        and not isinstance(err, _SchemaChangedError)
                    ):
                        error = err
                        found = None  # the next round checks the versions committed since
                        continue
                    if isinstance(err, CommitConflictError) and self._repeat(
                        txn, transactions.check(self.uri, txn, storage=storage)
                    ):
                        return None
                    raise
                txn_markers.record_state(
                    self.uri,
                    txn.app_id,
                    covers=version,
                    txn_version=txn.version,
                    table_version=version,
                    storage=storage,
                )
                settled = True
                return version
        finally:
            if attempt is not None and settled:
                txn_markers.end_attempt(self.uri, attempt, storage=storage)
        assert error is not None
        raise error

    def _repeat(self, txn: TxnId, found: transactions.Check) -> bool:
        """Whether ``found`` makes ``txn`` a repeat (logged as the skip it is)."""
        repeat = found.repeat
        if repeat is None:
            return False
        _log.info(
            "write %s/%d to %s was committed before (version %d, %s/%d): skipped",
            txn.app_id,
            txn.version,
            self.uri,
            repeat.table_version,
            txn.app_id,
            repeat.txn_version,
        )
        return True

    def _delete_replaced(self, job_id: str) -> replace_where.Deleted:
        """Deletion files for the rows replaceWhere replaces, recorded in the job."""
        if self.read_version is None or self.options.replace_where is None:
            return replace_where.Deleted((), (), 0)  # a new table: nothing to replace
        return replace_where.delete_matching(
            self.uri,
            self.read_version,
            self.options.replace_where,
            storage=self.options.storage,
            files=staging.TaskFiles(self.uri, job_id, storage=self.options.storage),
        )

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        self.abort_results([m for m in messages if isinstance(m, TaskResult)])

    def abort_results(self, results: Sequence[TaskResult], *, job_id: str | None = None) -> None:
        self._job((p for r in results for p in r.files), job_id=job_id).abort()

    def open_job(self) -> None:
        """Mark the job open; its tasks record the files they write in it."""
        StagedJob.begin(
            self.uri,
            read_version=self.read_version,
            storage=self.options.storage,
            job_id=self.job_id,
        )

    def _job(self, known_paths: Iterable[str] = (), *, job_id: str | None = None) -> StagedJob:
        """The job :meth:`open_job` began (its tasks record the files they write in it)."""
        return StagedJob(
            self.uri,
            self.read_version,
            self.options.storage,
            job_id=job_id or self.job_id,
            known_paths=tuple(known_paths),
        )

    def txn_id(self) -> TxnId | None:
        """The idempotent write's id (options ``txnAppId`` / ``txnVersion``), or None."""
        if self.options.txn_app_id is None or self.options.txn_version is None:
            return None
        return TxnId(self.options.txn_app_id, self.options.txn_version)

    def _parameters(self) -> dict[str, str]:
        if self.mode is WriteMode.APPEND_NEW_COLUMNS:
            return {"mode": "Append", "mergeSchema": "true"}
        if self.options.replace_where is not None:
            return {"mode": "Overwrite", "predicate": self.options.replace_where}
        if self.mode is WriteMode.OVERWRITE and self.options.overwrite_schema:
            return {"mode": "Overwrite", "overwriteSchema": "true"}
        return {"mode": self.mode.value.capitalize()}

    def _creates(self) -> bool:
        return self.mode in (WriteMode.CREATE, WriteMode.OVERWRITE)

    def _stable_row_ids(self) -> bool:
        # Tables created by the connector keep stable row ids (diff / change feed need them).
        flag = self.options.enable_stable_row_ids
        return True if flag is None else flag


COMMENT_KEY = "comment"  # a column's comment: Spark's field metadata key, kept by Lance too


def with_comments(schema: pa.Schema, comments: Mapping[str, str]) -> pa.Schema:
    """``schema`` with the comments in its fields' metadata (Lance keeps them)."""
    fields = [
        f.with_metadata({COMMENT_KEY: comments[f.name]}) if f.name in comments else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def with_defaults(schema: pa.Schema, spark_schema: StructType) -> pa.Schema:
    """``schema`` with the default values of ``spark_schema``'s columns (Spark's
    ``CURRENT_DEFAULT`` / ``EXISTS_DEFAULT`` field metadata) in its fields' metadata, where
    Lance keeps them and the table's Spark schema reports them."""
    defaults = {f.name: _types.spark_defaults(f.metadata) for f in spark_schema.fields}
    fields = [
        f.with_metadata({**(f.metadata or {}), **defaults[f.name]}) if defaults.get(f.name) else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def create_empty(
    *,
    uri: str,
    spark_schema: StructType,
    options: WriteOptions,
    app_id: str | None,
    replace: bool = False,
) -> None:
    """Create the Lance table at ``uri`` with ``spark_schema``'s columns and no rows: one
    version, as a job that wrote nothing (``CREATE TABLE t (cols) USING lance``).
    ``replace``: the table there becomes empty with these columns, as a new version of it
    (``REPLACE TABLE t (cols) USING lance``)."""
    writer = plan_write(
        uri=uri,
        spark_schema=spark_schema,
        overwrite=replace,
        options=dataclasses.replace(options, overwrite_schema=True) if replace else options,
        app_id=app_id,
        nullable_columns=False,
    )
    comments = {
        f.name: str(f.metadata[COMMENT_KEY])
        for f in spark_schema.fields
        if f.metadata and COMMENT_KEY in f.metadata
    }
    writer.target = with_defaults(with_comments(writer.target, comments), spark_schema)
    writer.commit_results(
        [], txn=writer.txn_id(), operation="REPLACE TABLE" if replace else "CREATE TABLE"
    )


def plan_write(
    *,
    uri: str,
    spark_schema: StructType,
    overwrite: bool,
    options: WriteOptions,
    app_id: str | None,
    nullable_columns: bool = True,
    open_job: bool = True,
) -> LanceWriter:
    """Decide mode, read version and target schema on the driver, before any task runs,
    and mark the write job open (its tasks record the files they write under it).

    ``nullable_columns``: a table created from a DataFrame gets nullable columns, like Spark's
    file sources (literal and derived columns are non-null in Spark, later appends may not
    be); ``CREATE TABLE`` with declared columns keeps their NOT NULL. ``open_job`` False:
    the caller opens the job (:meth:`LanceWriter.open_job`) before any task runs.
    """
    writer = _plan(uri, spark_schema, overwrite, options, app_id, nullable_columns)
    txn = writer.txn_id()
    if txn is not None:
        repeat = transactions.check(uri, txn, storage=options.storage).repeat
        if repeat is not None:
            writer = dataclasses.replace(writer, repeat=repeat)
    if open_job:
        writer.open_job()
    return writer


def _plan(
    uri: str,
    spark_schema: StructType,
    overwrite: bool,
    options: WriteOptions,
    app_id: str | None,
    nullable_columns: bool,
) -> LanceWriter:
    _types.check_writable(spark_schema)
    incoming = to_arrow_schema(spark_schema, timezone="UTC")
    incoming = pa.schema([f.remove_metadata() for f in incoming])
    vector_sizes = _vector_sizes(options.vector_sizes, incoming)
    storage = options.storage
    if options.replace_where is not None and not overwrite:
        raise InvalidOptionError(
            f"option replaceWhere={options.replace_where!r} replaces the matching rows: it "
            "needs mode('overwrite'), and this write appends"
        )
    latest = dataset.latest_or_none(uri, storage=storage)
    if latest is None:  # a new table: not inside another one's folder, none inside it
        staging.check_new_location(uri, storage=storage)
    if latest is not None and not (overwrite and options.overwrite_schema):
        _types.check_same_udts(spark_schema, latest.schema)
    if latest is not None and not (overwrite and options.overwrite_schema):
        _check_blob_columns(latest.schema, options.blob_columns, uri=uri)
    if latest is not None and overwrite and not options.overwrite_schema:
        return _plan_overwrite(uri, latest, incoming, vector_sizes, options, app_id)
    if latest is not None and not overwrite:
        table = latest.schema
        target = _types.reconcile_write_schema(incoming, table, merge_schema=options.merge_schema)
        _types.check_defaults_given(incoming, table)
        target = _types.with_udts(target, spark_schema)  # new columns (mergeSchema) keep theirs
        new_columns = [n for n in target.names if n not in table.names]
        mode = WriteMode.APPEND
        if new_columns:
            _commit.check_can_add_columns(latest, new_columns, uri=uri)
            mode = WriteMode.APPEND_NEW_COLUMNS
        return LanceWriter(uri, mode, int(latest.version), target, options, app_id)
    # A new table, or an overwrite with overwriteSchema: the incoming schema. An overwrite
    # keeps the table's vector columns as vectors, and its blob columns blobs, unless told
    # otherwise.
    blobs = list(options.blob_columns)
    if latest is not None:
        vector_sizes = {**_vector_columns(latest.schema, incoming), **vector_sizes}
        blobs += [n for n in _types.blob_columns(latest.schema) if n in incoming.names]
    target = _types.arrow_schema_for_new_table(incoming, vector_sizes=vector_sizes)
    if nullable_columns:
        target = _types.nullable_schema(target)
    target = _types.as_blob_columns(target, blobs)  # after nullable_schema: it drops metadata
    target = _types.with_udts(target, spark_schema)
    if latest is None:
        return LanceWriter(uri, WriteMode.CREATE, None, target, options, app_id)
    return LanceWriter(uri, WriteMode.OVERWRITE, int(latest.version), target, options, app_id)


def _plan_overwrite(
    uri: str,
    ds: lance.LanceDataset,
    incoming: pa.Schema,
    vector_sizes: Mapping[str, int],
    options: WriteOptions,
    app_id: str | None,
) -> LanceWriter:
    """An overwrite of the latest version ``ds`` that keeps the table's schema (Delta's rule:
    changing it takes overwriteSchema), of every row or of the rows matching replaceWhere."""
    table = ds.schema
    predicate = options.replace_where
    try:
        target = _types.reconcile_write_schema(
            incoming, table, merge_schema=options.merge_schema and predicate is None
        )
    except SchemaMismatchError as err:
        advice = (
            "replaceWhere keeps the table's schema"
            if predicate is not None
            else "set overwriteSchema=true to replace the table's schema"
        )
        raise SchemaMismatchError(f"{err}; {advice}") from None
    _types.check_defaults_given(incoming, table)
    target = _as_vectors(target, vector_sizes)
    if predicate is None:
        return LanceWriter(uri, WriteMode.OVERWRITE, int(ds.version), target, options, app_id)
    replace_where.check_predicate(ds, predicate, uri=uri)
    return LanceWriter(uri, WriteMode.REPLACE_WHERE, int(ds.version), target, options, app_id)


def _check_blob_columns(table: pa.Schema, columns: Sequence[str], *, uri: str) -> None:
    """A write that keeps the table's schema (append, overwrite without overwriteSchema) writes
    blobs into the table's blob columns only: `<col>.lance.encoding=blob` for another column
    is an error naming it (its encoding is fixed when the table is created)."""
    blobs = _types.blob_columns(table)
    by_lower = {n.lower(): n for n in table.names}
    for column in columns:
        name = column if column in table.names else by_lower.get(column.lower())
        if name is None or name in blobs:
            continue  # a column the table lacks: reconciling the schemas names it
        raise InvalidOptionError(
            f"option {column}.lance.encoding=blob: column {name!r} of the table at {uri!r} is "
            f"not a blob column (its encoding is fixed when the table is created; blob "
            f"columns: {', '.join(blobs) or 'none'}); overwrite with overwriteSchema=true to "
            "make it one"
        )


def _as_vectors(schema: pa.Schema, sizes: Mapping[str, int]) -> pa.Schema:
    """``schema`` with the list columns named in ``sizes`` as vectors of that size (the
    `<col>.arrow.fixed-size-list.size` option on an overwrite that keeps the schema)."""
    fields = []
    for f in schema:
        size = sizes.get(f.name)
        if size is not None and (pa.types.is_list(f.type) or pa.types.is_large_list(f.type)):
            f = f.with_type(pa.list_(f.type.value_field, size))
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def _vector_columns(table: pa.Schema, incoming: pa.Schema) -> dict[str, int]:
    """Sizes of the table's fixed_size_list columns that arrive as plain lists."""
    sizes: dict[str, int] = {}
    for f in table:
        if pa.types.is_fixed_size_list(f.type) and f.name in incoming.names:
            arriving = incoming.field(f.name).type
            if pa.types.is_list(arriving) or pa.types.is_large_list(arriving):
                sizes[f.name] = f.type.list_size
    return sizes


def _vector_sizes(sizes: Mapping[str, int], incoming: pa.Schema) -> dict[str, int]:
    """Spark lower-cases option keys: map `<col>.arrow.fixed-size-list.size` back to columns."""
    by_lower = {n.lower(): n for n in incoming.names}
    out: dict[str, int] = {}
    for column, size in sizes.items():
        name = column if column in incoming.names else by_lower.get(column.lower())
        if name is None:
            raise SchemaMismatchError(
                f"option {column}.arrow.fixed-size-list.size names column {column!r}, which the "
                f"written data does not have; columns: {', '.join(incoming.names)}"
            )
        out[name] = size
    return out


_APPENDING = (WriteMode.APPEND, WriteMode.REPLACE_WHERE)  # write against the table's schema


class _Counter:
    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0

    def count(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self.rows += batch.num_rows
        self.bytes += batch.nbytes
        return batch
