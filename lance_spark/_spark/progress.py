"""Progress of a Spark job run by the connector (``track_jobs``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from lance_spark._spark.session import is_connect


@dataclass(frozen=True)
class JobProgress:
    """How far a Spark job run by the connector is (``LanceTable.convertToLance``): tasks
    finished of the tasks Spark has scheduled so far. The last report has ``finished`` set,
    and ``rows`` (the rows written) when the job succeeded.

    Example::

        def show(p: JobProgress) -> None:
            print(f"{p.tasks_done}/{p.tasks_total} tasks", "done" if p.finished else "")

        LanceTable.convertToLance(spark, "/data/pets.parquet", "/data/pets.lance",
                                  progress=show)
    """

    tasks_done: int
    tasks_total: int
    finished: bool = False
    rows: int | None = None


ProgressReport = Callable[[JobProgress], None]


class JobTracker:
    """Reports the progress of the Spark jobs one block of code runs; made by
    :func:`track_jobs`, which feeds it, and ended by :meth:`finish`."""

    def __init__(self, report: ProgressReport, poll: Callable[[], tuple[int, int]] | None) -> None:
        self._report = report
        self._poll = poll
        self._lock = threading.Lock()
        self._last = (0, 0)
        self._finished = False

    def update(self, done: int, total: int) -> None:
        """Report (done, total) tasks when they changed."""
        with self._lock:
            if self._finished or (done, total) == self._last or total <= 0:
                return
            self._last = (done, total)
        self._report(JobProgress(done, total))

    def finish(self, *, tasks: int | None = None, rows: int | None = None) -> None:
        """The last report. ``tasks``: the tasks the caller knows finished (Spark Connect
        reports progress only every ``spark.connect.progress.reportInterval``, so a short
        job may have reported none)."""
        if self._poll is not None:
            self.update(*self._poll())
        with self._lock:
            self._finished = True
            done, total = self._last
        if tasks is not None:
            done = max(done, tasks)
            total = max(total, done)
        self._report(JobProgress(done, total, finished=True, rows=rows))


_JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@contextmanager
def track_jobs(
    spark: SparkSession, report: ProgressReport, *, description: str, interval_s: float = 0.5
) -> Iterator[JobTracker]:
    """Report to ``report`` the progress of the jobs this thread runs in the block; the block
    calls :meth:`JobTracker.finish` when its jobs are done.

    Classic sessions: the jobs run in a job group of their own (with ``description``, shown
    in Spark's UI; the thread's previous group is restored afterwards), whose stages a
    thread polls from ``sparkContext.statusTracker()`` every ``interval_s``. Spark Connect
    has no status tracker on the client: a progress handler
    (``spark.registerProgressHandler``, Spark 4) receives the server's reports of the
    session's operations while the block runs.
    """
    if is_connect(spark):
        tracker = JobTracker(report, None)

        def handler(
            stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None, done: bool
        ) -> None:
            stages = list(stages or ())
            tracker.update(
                sum(int(s.num_completed_tasks) for s in stages),
                sum(int(s.num_tasks) for s in stages),
            )

        connect: Any = spark
        connect.registerProgressHandler(handler)
        try:
            yield tracker
        finally:
            connect.removeProgressHandler(handler)
        return

    context = spark.sparkContext
    status = context.statusTracker()
    group = f"lance_spark-{uuid.uuid4().hex}"

    def poll() -> tuple[int, int]:
        done = total = 0
        for job_id in status.getJobIdsForGroup(group):
            job = status.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = status.getStageInfo(stage_id)
                if stage is not None:
                    done += int(stage.numCompletedTasks)
                    total += int(stage.numTasks)
        return done, total

    tracker = JobTracker(report, poll)
    previous = {key: context.getLocalProperty(key) for key in _JOB_PROPERTIES}
    context.setJobGroup(group, description, interruptOnCancel=False)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval_s):
            tracker.update(*poll())

    watcher = threading.Thread(target=watch, name="lance_spark-progress", daemon=True)
    watcher.start()
    try:
        yield tracker
    finally:
        stop.set()
        watcher.join()
        restore: Any = context.setLocalProperty  # None clears a property (py4j passes null)
        for key, value in previous.items():
            restore(key, value)
