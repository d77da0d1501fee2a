"""Maintenance of a Lance table (behind :class:`LanceTable`): compaction, vacuum, indexes.

Compaction runs as a Spark job through the connector's job runner
(:func:`lance_spark.table.job_runner.run_tasks`, classic and Connect sessions alike): the driver
plans with Lance (:mod:`lance_spark.source.compaction`), each Spark task rewrites the
fragments of one Lance compaction task, the driver commits one version.
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from lance_spark import _spark
from lance_spark.errors import ColumnNotFoundError, IndexExistsError, InvalidOptionError
from lance_spark.source import compaction as _compaction
from lance_spark.source import index_builds, staging, transactions
from lance_spark.source.compaction import COMPACTION_METRICS
from lance_spark.source.dataset import branch_uri, open_latest
from lance_spark.source.options import AutoCompact, parse_index_params
from lance_spark.source.write_jobs import StagedJob, TaskResult
from lance_spark.table import job_runner as _jobs
from lance_spark.table.context import TableContext
from lance_spark.table.detail import INDEX_COVERAGE_FIELDS

SCALAR_INDEX_TYPES = index_builds.SCALAR_INDEX_TYPES
VECTOR_INDEX_TYPES = index_builds.VECTOR_INDEX_TYPES
Rows = list[tuple[Any, ...]]

DEFAULT_INDEX_TYPE = "BTREE"  # CREATE INDEX without USING

INDICES_SCHEMA = StructType(
    [
        StructField("name", StringType(), False),
        StructField("columns", ArrayType(StringType(), False), False),
        StructField("type", StringType(), True),
        *INDEX_COVERAGE_FIELDS,
    ]
)
COMPACTION_SCHEMA = StructType(
    [StructField(k, LongType(), False) for k in COMPACTION_METRICS]
    + [StructField("version", LongType(), True)]
)
_CLEANUP_METRICS = (
    "bytes_removed",
    "old_versions",
    "data_files_removed",
    "transaction_files_removed",
    "index_files_removed",
    "deletion_files_removed",
)
VACUUM_SCHEMA = StructType(
    [StructField(k, LongType(), False) for k in _CLEANUP_METRICS]
    + [
        StructField("dry_run", BooleanType(), False),
        StructField("unreferenced_files_removed", LongType(), False),
        StructField("staging_markers_removed", LongType(), False),
        StructField("unreferenced_files", ArrayType(StringType(), False), False),
    ]
)
_FILE_KIND_METRICS = {
    "data": "data_files_removed",
    "deletion": "deletion_files_removed",
    "index": "index_files_removed",
}


class LanceOptimizeBuilder:
    """Returned by :meth:`LanceTable.optimize`.

    Example::

        t.optimize().executeCompaction().show()
    """

    def __init__(self, table: TableContext) -> None:
        self._table = table

    def executeCompaction(
        self,
        targetRowsPerFragment: int | None = None,
        *,
        target_rows_per_fragment: int | None = None,
    ) -> DataFrame:
        """Merge small fragments (and drop deleted rows) with Lance's own planner, as a Spark
        job (one Spark task per Lance compaction task), committed as one new version (none
        when there is nothing to do). Returns one row: fragments_removed, fragments_added,
        files_removed, files_added, and the version committed (null: none).

        ``targetRowsPerFragment`` (or ``target_rows_per_fragment``): the rows a fragment
        should have; fragments with fewer are merged (Lance's default: 1,048,576).

        Example::

            t.optimize().executeCompaction(targetRowsPerFragment=1_000_000).show()
        """
        target = target_rows(targetRowsPerFragment, target_rows_per_fragment)
        done = compact(self._table, target_rows_per_fragment=target)
        return self._table.spark.createDataFrame([compaction_row(done)], COMPACTION_SCHEMA)


def target_rows(
    camel: int | None,
    snake: int | None,
    *,
    what: str = "executeCompaction targetRowsPerFragment (target_rows_per_fragment)",
) -> int | None:
    """The target of ``executeCompaction`` (and of the ``optimize`` procedure, ``what``
    naming its argument), checked."""
    if camel is not None and snake is not None and camel != snake:
        raise InvalidOptionError(
            f"executeCompaction got targetRowsPerFragment={camel} and "
            f"target_rows_per_fragment={snake}: give one of them"
        )
    target = camel if camel is not None else snake
    if target is None:
        return None
    if isinstance(target, bool) or not isinstance(target, int) or target < 1:
        raise InvalidOptionError(f"{what}={target!r} must be a whole number of rows, at least 1")
    return target


def compact(
    table: TableContext, *, target_rows_per_fragment: int | None = None, auto: bool = False
) -> _compaction.Compacted:
    """Plan on the driver, rewrite in Spark tasks (one per Lance compaction task), commit one
    ``Rewrite``; the whole attempt is redone when a concurrent commit makes Lance call it
    retryable (:func:`_jobs.with_retry`). A failed attempt commits nothing and deletes what its
    tasks wrote."""

    def attempt() -> _compaction.Compacted:
        started = begin_compaction(table, target_rows_per_fragment)
        if started is None:
            return _compaction.Compacted()
        with started.job:
            count = len(started.planned.tasks)
            rows = table.spark.range(0, count, 1, numPartitions=count)
            done = _jobs.run_tasks(rows, started.task())
            return started.commit(done, auto=auto)

    return _jobs.with_retry(attempt)


@dataclass(frozen=True)
class CompactionAttempt:
    """One attempt of a compaction: Lance's plan and the staged job its tasks write in. Its
    parts are JSON (:meth:`state`), so an attempt begun in one Python process (a procedure
    of the companion) is committed in another."""

    table: TableContext
    planned: _compaction.Planned
    job: StagedJob

    def task(self) -> _jobs.Task:
        """The Spark task: each gets the numbers of its Lance tasks (one, from ``range``)."""
        uri, planned, storage, job_id = (
            self.table.uri,
            self.planned,
            dict(self.table.storage),
            self.job.job_id,
        )

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
            for batch in batches:
                for number in batch.column(0).to_pylist():
                    yield _compaction.execute_task(
                        uri,
                        planned.read_version,
                        planned.tasks[number],
                        storage=storage,
                        job_id=job_id,
                    )

        return run

    def commit(self, done: TaskResult, *, auto: bool = False) -> _compaction.Compacted:
        """Commit what the tasks rewrote (``done``: the job's results combined) as one
        version; the staged job is the caller's to finish or abort."""
        return _compaction.commit_rewrites(
            self.table.uri,
            self.planned,
            done.rewrites,
            storage=dict(self.table.storage),
            app_id=self.table.app_id,
            auto=auto,
        )

    def state(self) -> dict[str, Any]:
        return {"planned": dataclasses.asdict(self.planned), "job_id": self.job.job_id}

    @classmethod
    def of_state(cls, table: TableContext, state: dict[str, Any]) -> CompactionAttempt:
        planned = dict(state["planned"])
        planned["tasks"] = tuple(planned["tasks"])
        read = _compaction.Planned(**planned)
        job = StagedJob(
            table.uri, read.read_version, dict(table.storage), job_id=str(state["job_id"])
        )
        return cls(table, read, job)


def begin_compaction(
    table: TableContext, target_rows_per_fragment: int | None
) -> CompactionAttempt | None:
    """Lance's plan for the table's latest version and the job its tasks write in (opened);
    None when there is nothing to compact."""
    planned = _compaction.plan(table.open(), target_rows_per_fragment)
    if not planned.tasks:
        return None
    storage = dict(table.storage)
    job = StagedJob.begin(table.uri, read_version=planned.read_version, storage=storage)
    return CompactionAttempt(table, planned, job)


def compaction_row(done: _compaction.Compacted | None) -> tuple[Any, ...]:
    """``done`` as a row of :data:`COMPACTION_SCHEMA` (None: nothing to compact)."""
    if done is None:
        done = _compaction.Compacted()
    return (*(int(done.metrics[k]) for k in COMPACTION_METRICS), done.version)


def auto_compact(
    table: TableContext, version: int | None, settings: AutoCompact
) -> _compaction.Compacted | None:
    """After a commit of ``version`` from the driver (MERGE / UPDATE / DELETE): the
    distributed compaction, as a version of its own, when the table has at least
    ``settings.min_num_files`` small fragments. Never raises (the change has committed): a
    failure is logged as a warning."""
    if version is None or not settings.enabled:
        return None
    return _compaction.maybe_auto_compact(
        table.uri,
        version,
        min_num_files=settings.min_num_files,
        storage=table.storage,
        app_id=table.app_id,
        what="change",
        compact=lambda _latest: compact(table, auto=True),
    )


def vacuum(table: TableContext, retention_hours: float, *, dry_run: bool) -> DataFrame:
    """See :meth:`LanceTable.vacuum`."""
    row = vacuum_row(table, retention_hours, dry_run=dry_run)
    return table.spark.createDataFrame([row], VACUUM_SCHEMA)


def vacuum_row(table: TableContext, retention_hours: float, *, dry_run: bool) -> tuple[Any, ...]:
    """:func:`vacuum`'s work and its row (``VACUUM_SCHEMA``); needs no Spark session."""
    if isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float):
        raise InvalidOptionError(
            f"vacuum retentionHours={retention_hours!r} must be a number of hours"
        )
    if retention_hours < 0:
        raise InvalidOptionError(f"vacuum retentionHours={retention_hours} must be at least 0")
    ds = table.open()
    older_than = timedelta(hours=retention_hours)
    # Every branch's versions may reference this location's files.
    branches = open_latest(table.root, storage=table.storage).branches.list()
    lines = [table.root, *(branch_uri(table.root, name) for name in sorted(branches))]
    orphans = staging.find_orphans(
        ds, table.uri, older_than=older_than, storage=table.storage, lines=lines
    )
    # Before anything is deleted (a dry run reports what a run would do).
    staging.check_cleanup_spares(ds, table.uri, older_than=older_than, storage=table.storage)
    metrics: dict[str, Any] = dict.fromkeys(_CLEANUP_METRICS, 0)
    if dry_run:
        explained = ds.explain_cleanup_old_versions(
            older_than=older_than,
            error_if_tagged_old_versions=False,
            include_files=True,
            max_files=staging.MAX_EXPLAINED_FILES,
        )
        metrics.update({k: int(getattr(explained.stats, k)) for k in _CLEANUP_METRICS})
        # Lance's own rule removes unreferenced files older than 7 days: counted once.
        swept = {f.path for f in orphans.files}
        for candidate in explained.candidate_files:
            if candidate.unverified and staging.relative_path(candidate) in swept:
                _count_file(metrics, candidate.kind, int(candidate.size_bytes), -1)
    else:
        # Before cleanup removes the versions an idempotent writer that died mid-commit may
        # have committed in (the attempt files of lance_spark.source.txn_markers).
        transactions.resolve_stale_attempts(
            ds, table.uri, older_than=older_than, storage=table.storage
        )
        orphans.remove(table.uri, storage=table.storage)
        stats = ds.cleanup_old_versions(older_than=older_than, error_if_tagged_old_versions=False)
        metrics.update({k: int(getattr(stats, k)) for k in _CLEANUP_METRICS})
    for orphan in orphans.files:
        _count_file(metrics, orphan.kind, orphan.size, 1)
    return (
        *metrics.values(),
        bool(dry_run),
        len(orphans.files),
        len(orphans.markers),
        [f.path for f in orphans.files],
    )


def _count_file(metrics: dict[str, Any], kind: str, size: int, sign: int) -> None:
    metrics["bytes_removed"] += sign * size
    if kind in _FILE_KIND_METRICS:
        metrics[_FILE_KIND_METRICS[kind]] += sign


class IndexAttempt:
    """One attempt of an index job: its plan and the staged job its tasks write in. Its state
    is JSON (:meth:`state`), so an attempt begun in one Python process (a procedure of the
    companion) is committed in another."""

    def __init__(self, table: TableContext, plan: index_builds.BuildPlan, job: StagedJob) -> None:
        self.table = table
        self.plan = plan
        self.job = job

    def task(self) -> _jobs.Task:
        """The Spark task: each gets its task numbers (one, from ``range``)."""
        uri, plan, storage, job_id = (
            self.table.uri,
            self.plan,
            dict(self.table.storage),
            self.job.job_id,
        )
        numbered = plan.tasks()

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
            for batch in batches:
                for number in batch.column(0).to_pylist():
                    build, group = numbered[number]
                    yield index_builds.build_segment(
                        uri,
                        plan.read_version,
                        plan.builds[build],
                        group,
                        storage=storage,
                        job_id=job_id,
                    )

        return run

    def commit(self, done: TaskResult) -> int:
        """Commit the segments the tasks wrote (``done``: the job's results combined) as one
        version; the staged job is the caller's to finish or abort."""
        return index_builds.commit_build(
            self.plan, done.indices, storage=dict(self.table.storage), app_id=self.table.app_id
        )

    def run(self) -> int:
        """Run the job in the table's Spark session and commit (or delete what it wrote)."""
        with self.job:
            count = len(self.plan.tasks())
            rows = self.table.spark.range(0, count, 1, numPartitions=count)
            return self.commit(_jobs.run_tasks(rows, self.task()))

    def state(self) -> dict[str, Any]:
        plan = base64.b64encode(pickle.dumps(self.plan)).decode("ascii")
        return {"plan": plan, "job_id": self.job.job_id}

    @classmethod
    def of_state(cls, table: TableContext, state: Mapping[str, Any]) -> IndexAttempt:
        plan = pickle.loads(base64.b64decode(state["plan"]))  # the state this attempt gave
        job = StagedJob(
            table.uri, plan.read_version, dict(table.storage), job_id=str(state["job_id"])
        )
        return cls(table, plan, job)


def _begin(table: TableContext, plan: index_builds.BuildPlan | None) -> IndexAttempt | None:
    if plan is None or not plan.tasks():
        return None
    storage = dict(table.storage)
    job = StagedJob.begin(table.uri, read_version=plan.read_version, storage=storage)
    return IndexAttempt(table, plan, job)


def begin_index_build(
    table: TableContext,
    column: str,
    index_type: str,
    *,
    name: str | None,
    params: Mapping[str, Any],
    tasks: int,
) -> IndexAttempt | None:
    """Check the request, train a vector index's model and plan the job (see
    :mod:`lance_spark.source.index_builds`); None when the table has no fragment (the
    index is then made by Lance directly: there is nothing to build)."""
    kind = str(index_type).strip().upper()
    if kind not in SCALAR_INDEX_TYPES + VECTOR_INDEX_TYPES:
        raise InvalidOptionError(
            f"unknown index type {index_type!r}; valid index types: "
            f"{', '.join(SCALAR_INDEX_TYPES + VECTOR_INDEX_TYPES)}"
        )
    keywords: dict[str, Any] = parse_index_params(kind, params)
    replace = bool(keywords.pop("replace", kind in SCALAR_INDEX_TYPES))
    ds = table.open()
    if column not in ds.schema.names:
        raise ColumnNotFoundError(
            f"column {column!r} does not exist in the Lance table at {table.uri!r}; "
            f"columns: {', '.join(ds.schema.names)}"
        )
    if kind in VECTOR_INDEX_TYPES:
        col_type = ds.schema.field(column).type
        if not pa.types.is_fixed_size_list(col_type):
            raise InvalidOptionError(
                f"column {column!r} is {col_type}, not a vector (fixed_size_list), which a "
                f"{kind} index needs (write vectors with option "
                f"'{column}.arrow.fixed-size-list.size')"
            )
    index_name = name or f"{column}_idx"
    existing = index_builds.segment_uuids(ds, index_name)
    if existing and not replace:
        raise IndexExistsError(
            f"index {index_name!r} already exists on the Lance table at {table.uri!r}; "
            "pass replace=True to build it again"
        )
    if not ds.get_fragments():
        if kind in VECTOR_INDEX_TYPES:
            raise InvalidOptionError(
                f"the Lance table at {table.uri!r} has no rows to train a {kind} index on"
            )
        ds.create_scalar_index(
            column, cast(Any, kind), name=index_name, replace=replace, **keywords
        )
        return None
    spec = index_builds.IndexSpec(index_name, column, kind, keywords)
    build = index_builds.IndexBuild(
        spec,
        index_builds.fragment_groups(ds, None, tasks=tasks),
        index_builds.train(ds, spec),
        tuple(existing),
    )
    plan = index_builds.BuildPlan(table.uri, int(ds.version), (build,), index_builds.CREATE)
    return _begin(table, plan)


def create_index(
    table: TableContext, column: str, index_type: str, *, name: str | None, **params: Any
) -> None:
    """See :meth:`LanceTable.createIndex`: a Spark job, one commit; redone when another
    writer's commit makes Lance call it retryable."""
    tasks = _spark.default_parallelism(table.spark)

    def attempt() -> None:
        started = begin_index_build(
            table, column, index_type, name=name, params=params, tasks=tasks
        )
        if started is not None:
            started.run()

    _jobs.with_retry(attempt)


OPTIMIZE_INDICES_SCHEMA = StructType(
    [
        StructField("index", StringType(), False),
        StructField("type", StringType(), False),
        StructField("numFragmentsIndexed", LongType(), False),
        *INDEX_COVERAGE_FIELDS,
        StructField("version", LongType(), True),
    ]
)


@dataclass(frozen=True)
class IndexUpkeep:
    """What an optimize of indexes does: the builds of one Spark job (indexes built here, or
    of types that need no parameter) and the indexes left to Lance's own optimize."""

    attempt: IndexAttempt | None
    by_lance: tuple[str, ...]
    names: tuple[str, ...]


def begin_index_upkeep(
    table: TableContext, names: Sequence[str] | None, *, retrain: bool, tasks: int
) -> IndexUpkeep:
    """Plan an optimize of the indexes ``names`` (None: every index): index the fragments
    appended since each was built (``retrain``: build each again, its vector model trained
    again, replacing its segments)."""
    planned = index_builds.plan_upkeep(
        table.open(), table.uri, names, retrain=retrain, tasks=tasks, storage=table.storage
    )
    return IndexUpkeep(_begin(table, planned.plan), planned.by_lance, planned.names)


def optimize_by_lance(table: TableContext, names: Sequence[str], *, retrain: bool) -> None:
    """Lance's own optimize, on the driver, for indexes whose parameters are unknown here."""
    index_builds.optimize_by_lance(table.uri, names, retrain=retrain, storage=table.storage)


def index_upkeep_rows(table: TableContext, upkeep: IndexUpkeep, version: int | None) -> Rows:
    """The rows of :data:`OPTIMIZE_INDICES_SCHEMA` after an optimize."""
    ds = table.open()
    indexed = {
        b.spec.name: sum(len(g) for g in b.groups)
        for b in (upkeep.attempt.plan.builds if upkeep.attempt else ())
    }
    rows = []
    for name, _columns, kind, covered, uncovered, segments in index_builds.describe(ds):
        if name in upkeep.names:
            done = version if name in indexed else (ds.version if name in upkeep.by_lance else None)
            rows.append((name, kind, indexed.get(name, 0), covered, uncovered, segments, done))
    return rows


def optimize_indices(
    table: TableContext, names: Sequence[str] | None, *, retrain: bool = False
) -> DataFrame:
    """See :meth:`LanceTable.optimizeIndices`."""
    tasks = _spark.default_parallelism(table.spark)

    def attempt() -> tuple[IndexUpkeep, int | None]:
        upkeep = begin_index_upkeep(table, names, retrain=retrain, tasks=tasks)
        version = None if upkeep.attempt is None else upkeep.attempt.run()
        return upkeep, version

    upkeep, version = _jobs.with_retry(attempt)
    optimize_by_lance(table, upkeep.by_lance, retrain=retrain)
    rows = index_upkeep_rows(table, upkeep, version)
    return table.spark.createDataFrame(rows, OPTIMIZE_INDICES_SCHEMA)


def list_indices(table: TableContext) -> DataFrame:
    return table.spark.createDataFrame(index_rows(table), INDICES_SCHEMA)


def index_rows(table: TableContext) -> Rows:
    """The table's indexes as rows of :data:`INDICES_SCHEMA`, by name, with their coverage."""
    return index_builds.describe(table.open())


def drop_index(table: TableContext, name: str) -> None:
    ds = table.open()
    names = sorted(str(d.name) for d in ds.describe_indices())
    if name not in names:
        raise InvalidOptionError(
            f"index {name!r} does not exist in the Lance table at {table.uri!r}; "
            f"indexes: {', '.join(names) or 'none'}"
        )
    ds.drop_index(name)
    index_builds.forget_model(table.uri, name, storage=table.storage)
