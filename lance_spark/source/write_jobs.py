"""What every distributed write shares: the typed result of one task, how it travels to the
driver, and the staging of the job's files.

Four engines write with Spark tasks and commit once on the driver: the data source writer
(append / overwrite), the row-level change engine (MERGE / UPDATE / DELETE), ``addColumns``
and compaction. Each task returns one :class:`TaskResult`; the writer gets it through
Spark's commit messages (pickled by Spark), the others through one binary column of a
``mapInArrow`` job (:func:`encode` / :func:`decode`, run by :mod:`lance_spark.table.job_runner`).
:func:`combine` sums a job's results and raises the first connector error a task shipped,
as that error (type, message and attributes), on the driver. :class:`StagedJob` opens a job's
staging folder and, when the job ends, keeps (finish) or deletes (abort) what its tasks wrote.
"""

from __future__ import annotations

import pickle
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from lance.fragment import FragmentMetadata, LanceFragment
from lance.schema import LanceSchema
from pyspark.sql.datasource import WriterCommitMessage

from lance_spark.errors import LanceSparkError
from lance_spark.source import staging

RESULT_COLUMN = "task_result"
RESULT_ARROW = pa.schema([(RESULT_COLUMN, pa.binary())])
RESULT_DDL = f"{RESULT_COLUMN} binary"

_T = TypeVar("_T")


@dataclass(frozen=True)
class TaskResult(WriterCommitMessage):
    """What one task of a write job did (or, combined, the whole job).

    ``error`` is a connector error the task raised, shipped to the driver instead of failing
    the task (it would arrive as text in Spark's ``PythonException``); :func:`combine` raises it.
    """

    new_fragments: tuple[FragmentMetadata, ...] = ()  # fragments of written rows (id 0)
    updated_fragments: tuple[FragmentMetadata, ...] = ()  # existing fragments, new files
    removed_fragment_ids: tuple[int, ...] = ()  # fragments of which no row is left
    counts: Mapping[str, int] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # data files written, relative to data/
    schema: LanceSchema | None = None  # the table's schema with Lance's field ids
    rewrites: tuple[str, ...] = ()  # compaction: Lance RewriteResult JSON, one per Lance task
    indices: tuple[Any, ...] = ()  # index builds: the uncommitted segments (lance Index)
    # updateColumns: fragment id -> its matched physical row offsets (portable RoaringBitmap)
    offsets: Mapping[int, bytes] = field(default_factory=dict)
    error: LanceSparkError | None = None


def encode(result: TaskResult) -> pa.RecordBatch:
    """``result`` as one row of :data:`RESULT_ARROW` (the output of a ``mapInArrow`` task)."""
    return pa.RecordBatch.from_pydict({RESULT_COLUMN: [pickle.dumps(result)]}, schema=RESULT_ARROW)


def decode(blobs: Iterable[bytes | bytearray]) -> list[TaskResult]:
    """The results of a job's tasks, from the :data:`RESULT_COLUMN` values it collected."""
    results = []
    for blob in blobs:
        result = pickle.loads(blob)  # written by this job's own tasks
        if not isinstance(result, TaskResult):
            raise LanceSparkError(f"a task returned {type(result).__name__}, not a TaskResult")
        results.append(result)
    return results


def shippable(err: LanceSparkError) -> bool:
    """``err`` survives pickling as itself (a subclass may need arguments pickle does not
    give it back); one that does not is raised in the task instead."""
    try:
        copy = pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001  (any failure means: not shippable)
        return False
    return type(copy) is type(err) and str(copy) == str(err)


def combine(results: Iterable[TaskResult]) -> TaskResult:
    """A job's results summed into one (in task order). Raises the first error a task
    shipped, and :class:`LanceSparkError` when tasks report different schemas."""
    results = list(results)
    for result in results:
        if result.error is not None:
            raise result.error
    counts: Counter[str] = Counter()
    for result in results:
        counts.update(result.counts)
    schemas = [r.schema for r in results if r.schema is not None]
    if any(s != schemas[0] for s in schemas[1:]):
        raise LanceSparkError(
            "the tasks of one job returned different table schemas "
            f"({schemas[0].to_pyarrow()} and "
            f"{next(s for s in schemas if s != schemas[0]).to_pyarrow()}); nothing was committed"
        )
    return TaskResult(
        new_fragments=tuple(f for r in results for f in r.new_fragments),
        updated_fragments=tuple(f for r in results for f in r.updated_fragments),
        removed_fragment_ids=tuple(i for r in results for i in r.removed_fragment_ids),
        counts=dict(counts),
        files=tuple(p for r in results for p in r.files),
        schema=schemas[0] if schemas else None,
        rewrites=tuple(j for r in results for j in r.rewrites),
        indices=tuple(i for r in results for i in r.indices),
        offsets={i: b for r in results for i, b in r.offsets.items()},
    )


class ErrorRelay:
    """Keeps the error raised while Lance's writer (Rust) pulls batches.

    ``write_fragments`` and ``merge_columns`` report an error raised by the Python iterator
    they read as an ``OSError`` holding only its text; inside ``with relay:`` that error is
    raised again as itself. ``kinds``: the errors kept (default: the connector's own)."""

    def __init__(self, kinds: tuple[type[Exception], ...] = (LanceSparkError,)) -> None:
        self._kinds = kinds
        self._error: Exception | None = None

    def watch(self, items: Iterator[_T]) -> Iterator[_T]:
        try:
            yield from items
        except self._kinds as err:
            self._error = err
            raise

    def __enter__(self) -> ErrorRelay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        error, self._error = self._error, None
        if exc is not None and error is not None and exc is not error:
            raise error from exc


def delete_rows(
    fragment: LanceFragment, offsets: Sequence[int] | np.ndarray, files: staging.TaskFiles
) -> FragmentMetadata | None:
    """Write ``fragment``'s deletion file for the rows at ``offsets`` (physical, sorted) and
    record it in the job (an abort deletes it). The fragment's new metadata, or None when no
    row of it is left (no file then: Lance drops the fragment)."""
    changed: FragmentMetadata | None = fragment.delete_rows(offsets)
    if changed is not None and changed.deletion_file is not None:
        files.record(other=[changed.deletion_file.path(int(fragment.fragment_id))])
    return changed


@dataclass(frozen=True)
class StagedJob:
    """A write job's staging folder (:mod:`lance_spark.source.staging`).

    ``with StagedJob.begin(...) as job:`` finishes the job when the block succeeds (deleting
    what failed or speculative task attempts wrote) and aborts it when the block raises
    (deleting every file its tasks wrote that no version references). ``known_paths`` (data
    files relative to data/) are deleted on abort too.
    """

    uri: str
    read_version: int | None
    storage: Mapping[str, str]
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    known_paths: tuple[str, ...] = ()

    @classmethod
    def begin(
        cls,
        uri: str,
        *,
        read_version: int | None,
        storage: Mapping[str, str],
        job_id: str | None = None,
    ) -> StagedJob:
        """Mark a job open (a new one unless ``job_id``), before any of its tasks runs."""
        job = cls(uri, read_version, storage, job_id=job_id or uuid.uuid4().hex)
        staging.begin_job(uri, job.job_id, storage=storage)
        return job

    def finish(self) -> None:
        staging.finish_job(
            self.uri, self.job_id, read_version=self.read_version, storage=self.storage
        )

    def abort(self) -> None:
        staging.abort_job(
            self.uri,
            self.job_id,
            self.known_paths,
            read_version=self.read_version,
            storage=self.storage,
        )

    def __enter__(self) -> StagedJob:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()
