"""Converting a Parquet table into a Lance table (``LanceTable.convertToLance``).

One Spark job reads the Parquet files with Spark's own Parquet reader (its schema, its
partition discovery) and writes them with the ``lance`` data source's writer
(:class:`~lance_spark.source.writer.LanceWriter`): each task streams its rows into Lance
fragments and the driver commits them all as ONE Lance version, recorded in history as
``CONVERT``. A job that fails commits nothing and deletes what its tasks wrote, so the target
is left as it was (no table, or its previous version).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lance_spark import _spark
from lance_spark._spark import JobProgress, JobTracker, ProgressReport
from lance_spark.errors import (
    InvalidOptionError,
    LanceSparkError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from lance_spark.source import dataset
from lance_spark.source.datasource import normalise_uri
from lance_spark.source.options import parse_write_options
from lance_spark.source.write_jobs import TaskResult
from lance_spark.source.writer import ROWS, LanceWriter, plan_write
from lance_spark.table import job_runner as _jobs
from lance_spark.table.context import TableContext

OPERATION = "CONVERT"
# Spark's save modes: what to do when a Lance table exists at the target.
MODES = ("error", "errorifexists", "overwrite", "append", "ignore")
_TASKS = "tasks"  # TaskResult count: 1 per task, so the job's sum is its number of tasks


def convert_parquet(
    table: TableContext,
    *,
    source: str,
    mode: str = "error",
    options: Mapping[str, str] | None = None,
    parquet_options: Mapping[str, str] | None = None,
    progress: bool | ProgressReport = False,
) -> int | None:
    """See :meth:`LanceTable.convertToLance`. Returns the version committed (None: none,
    the table existed and ``mode`` was ``ignore``)."""
    spark, target, storage = table.spark, table.uri, table.storage
    how = begin(source, target, storage=storage, mode=mode)
    if how is None:
        return None
    report = _reporter(progress, source, target)
    frame = _read_parquet(spark, source, parquet_options or {})
    made_folder = makes_folder(target)
    writer = plan_writer(
        target,
        frame.schema,
        how=how,
        options=options or {},
        storage=storage,
        app_id=table.app_id,
    )
    try:
        with _tracking(spark, report, target) as tracker:
            done = TaskResult() if writer.repeat is not None else _run(frame, writer)
            version = commit(writer, done, source=source, files=len(frame.inputFiles()))
            if tracker is not None:
                tracker.finish(tasks=done.counts.get(_TASKS, 0), rows=done.counts.get(ROWS, 0))
    except BaseException:
        abort(writer, made_folder=made_folder)
        raise
    finally:
        if isinstance(report, StderrProgress):
            report.close()
    return version


# --- the steps of a conversion, shared with the companion's CONVERT TO LANCE ----------------


def begin(source: str, target: str, *, storage: Mapping[str, str], mode: str) -> str | None:
    """The save mode a conversion of ``source`` into ``target`` runs with (lower case), or
    None: there is nothing to do (a table exists and ``mode`` is ``ignore``). Raises for a bad
    mode or path, an existing table (``error``) and a Lance table as the source."""
    how = _mode(mode)
    _check_paths(source, target)
    exists = dataset.table_exists(target, storage=storage)
    if exists and how in ("error", "errorifexists"):
        raise TableAlreadyExistsError(
            f"a Lance table already exists at {target!r}; mode 'overwrite' replaces its rows "
            "(a new version), 'append' adds to them, 'ignore' leaves it as it is"
        )
    if exists and how == "ignore":
        return None
    if _is_lance(source, storage):
        raise InvalidOptionError(
            f"{source!r} is a Lance table, not Parquet data; copy a Lance table with "
            "LanceTable.forPath(spark, path).shallowClone(target) or a write of its DataFrame"
        )
    return how


def makes_folder(target: str) -> bool:
    """Whether the conversion makes the local folder ``target`` (removed if it fails)."""
    folder = normalise_uri(target)
    return "://" not in folder and not os.path.exists(folder)


def plan_writer(
    target: str,
    schema: StructType,
    *,
    how: str,
    options: Mapping[str, str],
    storage: Mapping[str, str],
    app_id: str | None,
) -> LanceWriter:
    """The writer of a conversion whose Parquet data has ``schema`` (Spark's)."""
    write_options = parse_write_options({**options, "path": target}, session_storage=storage)
    if how == "overwrite":
        # The converted table has the Parquet schema, whatever the table had before.
        write_options = dataclasses.replace(write_options, overwrite_schema=True)
    return plan_write(
        uri=target,
        spark_schema=schema,
        overwrite=how == "overwrite",
        options=write_options,
        app_id=app_id,
    )


def commit(writer: LanceWriter, done: TaskResult, *, source: str, files: int) -> int | None:
    """Commit what the job's tasks wrote (``done``, combined) as one ``CONVERT`` version."""
    return writer.commit_results(
        [done],
        txn=writer.txn_id(),
        operation=OPERATION,
        parameters={"sourceFormat": "parquet", "sourcePath": source},
        metrics={"numConvertedFiles": files},
    )


def abort(writer: LanceWriter, *, made_folder: bool) -> None:
    """Delete what a failed conversion wrote (and the folder it made)."""
    # The job's files are nobody's; commit_results ended the job itself if it got there
    # (ending it again finds nothing to do).
    writer.abort_results([])
    if made_folder:
        # Its empty folders too (``data``); a file left means someone else writes there now.
        folder = normalise_uri(writer.uri)
        for path, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
            with suppress(OSError):
                os.rmdir(path)


def _reporter(progress: bool | ProgressReport, source: str, target: str) -> ProgressReport | None:
    if progress is True:
        return StderrProgress(f"convert {source} -> {target}")
    if progress is False or progress is None:
        return None
    if not callable(progress):
        raise InvalidOptionError(
            f"convertToLance progress must be True, False or a function of JobProgress, not "
            f"{progress!r}"
        )
    return progress


def _tracking(
    spark: SparkSession, report: ProgressReport | None, target: str
) -> AbstractContextManager[JobTracker | None]:
    if report is None:
        return nullcontext(None)
    description = f"lance_spark: convert Parquet to the Lance table at {target}"
    return _spark.track_jobs(spark, report, description=description)


def _run(frame: DataFrame, writer: LanceWriter) -> TaskResult:
    """The write job: every task writes its rows into fragments; their results combined."""
    try:
        return _jobs.run_tasks(frame, write_task(writer))
    except _spark.spark_errors() as err:
        raise LanceSparkError(
            f"converting the Parquet data to the Lance table at {writer.uri!r} failed, nothing "
            f"was committed: {_spark.error_summary(err)}"
        ) from err


def write_task(writer: LanceWriter) -> _jobs.Task:
    """A task of the conversion's job: its rows into fragments, counted as one task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
        result = writer.write(batches)
        yield dataclasses.replace(result, counts={**result.counts, _TASKS: 1})

    return run


def _mode(mode: str) -> str:
    how = mode.lower() if isinstance(mode, str) else None
    if how not in MODES:
        raise InvalidOptionError(
            f"convertToLance mode {mode!r} is not one of {', '.join(MODES)} (Spark's save modes)"
        )
    return how


def _check_paths(source: str, target: str) -> None:
    for what, value in (("parquet_path", source), ("lance_uri", target)):
        if not isinstance(value, str) or not value:
            raise InvalidOptionError(
                f"convertToLance needs {what} as a non-empty string, not {value!r}"
            )
    src, dst = (_comparable(p) for p in (source, target))
    if src == dst or dst.startswith(src + "/") or src.startswith(dst + "/"):
        raise InvalidOptionError(
            f"convertToLance cannot write the Lance table at {target!r} in or around the Parquet "
            f"data it reads ({source!r}); choose a location outside it"
        )


def _comparable(path: str) -> str:
    path = normalise_uri(path)
    return path.rstrip("/") if "://" in path else os.path.abspath(path)


def _read_parquet(spark: SparkSession, source: str, options: Mapping[str, str]) -> DataFrame:
    """The Parquet data at ``source`` (a file or a directory, partitioned or not), its schema
    resolved; an error naming ``source`` when there is none."""
    try:
        frame = spark.read.options(**{k: str(v) for k, v in options.items()}).parquet(source)
        frame.schema  # noqa: B018  (resolves the files and the schema now: Connect is lazy)
    except _spark.spark_errors() as err:
        summary = _spark.error_summary(err)
        if "PATH_NOT_FOUND" in summary:
            raise TableNotFoundError(
                f"no Parquet data at {source!r} (convertToLance's parquet_path): {summary}"
            ) from None
        raise InvalidOptionError(
            f"cannot read {source!r} as Parquet data (a Parquet file, or a directory of them): "
            f"{summary}"
        ) from None
    return frame


def _is_lance(path: str, storage: Mapping[str, str]) -> bool:
    try:
        return dataset.table_exists(path, storage=storage)
    except (OSError, ValueError):  # a file, or not a Lance table in another way
        return False


class StderrProgress:
    """The progress bar of an interactive conversion, on stderr: one line redrawn as tasks
    finish, then the rows converted and the time taken."""

    def __init__(self, label: str, *, width: int = 30) -> None:
        self._label = label
        self._width = width
        self._started = time.monotonic()
        self._drawn = 0

    def __call__(self, progress: JobProgress) -> None:
        total = max(progress.tasks_total, 1)
        if progress.finished:
            rows = "" if progress.rows is None else f", {progress.rows:,} rows"
            seconds = time.monotonic() - self._started
            text = f"{self._label}: {progress.tasks_done} tasks{rows} in {seconds:.1f} s"
            self._draw(text, end="\n")
            return
        filled = self._width * progress.tasks_done // total
        bar = "#" * filled + "-" * (self._width - filled)
        self._draw(f"{self._label}: [{bar}] {progress.tasks_done}/{progress.tasks_total} tasks")

    def close(self) -> None:
        """End the line of a bar that did not finish (the job failed)."""
        if self._drawn:
            print(file=sys.stderr, flush=True)
            self._drawn = 0

    def _draw(self, text: str, *, end: str = "") -> None:
        print("\r" + text.ljust(self._drawn), end=end, file=sys.stderr, flush=True)
        self._drawn = 0 if end else len(text)
