"""The job runner of the table's distributed writes (the change engine, ``addColumns``,
compaction).

:func:`run_tasks` runs one task per partition of a DataFrame with ``mapInArrow``; each task
yields :class:`~lance_spark.source.write_jobs.TaskResult` objects, shipped to the driver in one
binary column. A connector error (:class:`~lance_spark.errors.LanceSparkError`) raised in a
task is shipped the same way and raised on the driver as itself; anything else fails the
task as usual (Spark retries it, then raises its ``PythonException``).

:class:`TaskReader` runs the same tasks where Python has no Spark session: a procedure of the
companion's session catalog (``OPTIMIZE`` from any client) runs in a driver-side Python worker,
so it hands the companion a reader whose partitions are the tasks (``task(i)`` gets the batch
``spark.range`` would give it), and the companion runs them as a Spark job, collects the same
binary column and gives it back to the procedure.

:func:`with_retry` redoes a whole attempt (pin the table, plan, run the job, commit) when
Lance or the connector calls its commit retryable: another writer committed first, and the
same change computed again on the newer version may commit. At most ``RETRY.attempts``
attempts, with a short jittered pause between them, then
:class:`~lance_spark.errors.ConcurrentModificationError`.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StructField, StructType

from lance_spark import _spark
from lance_spark.errors import CommitConflictError, ConcurrentModificationError, LanceSparkError
from lance_spark.source import write_jobs as _jobs
from lance_spark.source.write_jobs import TaskResult

Task = Callable[[Iterator[pa.RecordBatch]], Iterator[TaskResult]]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Retry:
    """How often an attempt is redone after a retryable conflict. Each attempt is a whole
    Spark job; a handful of writers racing on the same rows settle in a few rounds (one wins
    each round). Before attempt ``n`` (n > 1): a random pause of up to
    ``min(backoff_max_s, backoff_base_s * 2 ** (n - 1))``, so racers do not meet again at once."""

    attempts: int = 8
    backoff_base_s: float = 0.2
    backoff_max_s: float = 3.0

    def pause(self, attempt: int) -> float:
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))


RETRY = Retry()


RESULT_SCHEMA = StructType([StructField(_jobs.RESULT_COLUMN, BinaryType())])


def run_tasks(rows: DataFrame, task: Task) -> TaskResult:
    """Run ``task`` on every partition of ``rows``; the job's results combined. Raises the
    first connector error a task raised, as that error."""
    collected = rows.mapInArrow(_shipping(task), _jobs.RESULT_DDL).collect()
    return _jobs.combine(_jobs.decode(row[0] for row in collected))


def map_command(task: Task) -> bytes:
    """``task`` as the pickled function of a ``mapInArrow`` over the companion's input frame
    (see :class:`~lance_spark.table.procedures.Job`): its rows in :data:`RESULT_SCHEMA`,
    connector errors shipped as :func:`run_tasks` ships them."""
    return _spark.python_function_command(_shipping(task), RESULT_SCHEMA)


def _shipping(task: Task) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            for result in task(batches):
                yield _jobs.encode(result)
        except LanceSparkError as err:
            if not _jobs.shippable(err):
                raise
            err.add_note(
                "Raised in a Spark task:\n" + "".join(traceback.format_exception(err, chain=False))
            )
            yield _jobs.encode(TaskResult(error=err))

    return run


class TaskReader(DataSourceReader):
    """Tasks ``0 .. count - 1`` of a job as the partitions of a read (see the module doc):
    partition ``i`` runs ``task`` on one batch with ``id = i`` and yields its results in
    :data:`RESULT_SCHEMA`, connector errors shipped as :func:`run_tasks` ships them. Pickled
    to the executors: ``task`` must be small and picklable."""

    def __init__(self, count: int, task: Task) -> None:
        self.count = count
        self.task = task

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        number = pa.RecordBatch.from_pydict({"id": pa.array([int(partition.value)], pa.int64())})
        yield from _shipping(self.task)(iter([number]))


def results_of(blobs: list[bytes]) -> TaskResult:
    """The results a :class:`TaskReader` job collected (its :data:`RESULT_SCHEMA` values),
    combined; raises the first connector error a task shipped, as that error."""
    return _jobs.combine(_jobs.decode(blobs))


def with_retry(attempt: Callable[[], _T], *, retry: Retry | None = None) -> _T:
    """``attempt()``, redone while it raises a retryable
    :class:`~lance_spark.errors.CommitConflictError`; its result. The last conflict is raised
    naming the attempts made: :class:`ConcurrentModificationError` when it was retryable.
    ``attempt`` must leave nothing behind when it raises (see
    :class:`~lance_spark.source.write_jobs.StagedJob`)."""
    policy = RETRY if retry is None else retry
    number = 1
    while True:
        try:
            return attempt()
        except CommitConflictError as err:
            give_up(err, number, policy)  # raises after the last attempt
        number += 1
        time.sleep(policy.pause(number))


def give_up(err: CommitConflictError, number: int, policy: Retry = RETRY) -> None:
    """Returns when attempt ``number`` that raised ``err`` may be redone (``err`` is
    retryable and attempts are left); otherwise raises the conflict naming the attempts made
    (:class:`ConcurrentModificationError` when it was retryable)."""
    if err.retryable and number < policy.attempts:
        return
    message = f"{err} (gave up after {number} attempt(s))"
    if err.retryable:
        raise ConcurrentModificationError(
            message,
            read_version=getattr(err, "read_version", None),
            conflicting_version=getattr(err, "conflicting_version", None),
        ) from err
    raise CommitConflictError(message, retryable=False) from err
