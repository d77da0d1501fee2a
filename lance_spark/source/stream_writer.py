"""The streaming sink: one Lance version per non-empty micro-batch, exactly once.

Each micro-batch is a write job of :class:`~lance_spark.source.writer.LanceWriter` (the
same tasks, staging and commit as ``df.write``) whose commit records the query's id and the
batch id (:mod:`lance_spark.source.transactions`). Spark replays a batch whose Lance commit
succeeded but whose own commit log entry was not written (a crash between the two); the
replay finds its id among the table's recent commits, commits nothing and deletes the files
it wrote.

The query id is the streaming query's own (``StreamingQuery.id``, kept in the checkpoint, so
a restart from the same checkpoint keeps it); the ``streamingQueryId`` option sets it
instead, for a query restarted with a new checkpoint that must not write its batches again
(Delta's ``txnAppId`` idea). Output modes: ``append`` (an empty batch commits nothing) and
``complete`` (every batch overwrites the table with the query's whole result).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from lance_spark.errors import LanceSparkError
from lance_spark.source.transactions import TxnId
from lance_spark.source.write_jobs import TaskResult
from lance_spark.source.writer import LanceWriter

_log = logging.getLogger(__name__)

# The local property Spark's StreamExecution sets on every job of a streaming query (its id,
# the same across restarts from one checkpoint). A task sees it; the sink's commit does not
# (Spark 4.3 gives DataSourceStreamWriter.commit only the messages and the batch id).
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class StreamTaskResult(WriterCommitMessage):
    """What one task of a micro-batch wrote, with the job and the query it belongs to."""

    result: TaskResult
    job_id: str
    query_id: str | None


class LanceStreamWriter(DataSourceStreamArrowWriter):
    """Spark's streaming writer for a Lance table (``writeStream.format("lance")``)."""

    def __init__(self, batch: LanceWriter, *, query_id: str | None, complete: bool) -> None:
        self._batch = batch
        self._query_id = query_id  # the streamingQueryId option
        self._complete = complete
        self._opened = False

    # Spark 4.3 creates the stream writer twice per micro-batch: once to ship to the tasks
    # (pickled, in write_into_data_source) and once more in the commit runner
    # (python_streaming_sink_runner), which is never pickled and gets only the messages and
    # the batch id. Only the copy the tasks use opens a staging job; the commit finds that
    # job's id in the messages. Can go when the commit runner receives the pickled writer.
    def __getstate__(self) -> dict[str, Any]:
        if not self._opened:
            self._batch.open_job()
            self._opened = True
        return dict(self.__dict__)

    # --- executors ------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamTaskResult:
        context = TaskContext.get()
        query_id = None if context is None else context.getLocalProperty(_QUERY_ID_PROPERTY)
        result = self._batch.write(iterator)
        return StreamTaskResult(result, self._batch.job_id, query_id)

    # --- driver -----------------------------------------------------------------------------
    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, StreamTaskResult)]
        job_id = _job_id(results)
        app_id = self._query_id or next((r.query_id for r in results if r.query_id), None)
        if app_id is None and results:
            raise LanceSparkError(
                f"micro-batch {batchId} for the Lance table at {self._batch.uri!r} carries no "
                "streaming query id; set the option streamingQueryId to name the query"
            )
        version = self._batch.commit_results(
            [r.result for r in results],
            job_id=job_id,
            txn=None if app_id is None else TxnId(app_id, batchId),
            operation="STREAMING UPDATE",
            parameters={
                "outputMode": "Complete" if self._complete else "Append",
                "queryId": app_id or "",
                "epochId": str(batchId),
            },
        )
        if version is not None:
            _log.info(
                "micro-batch %d committed as version %d of %s", batchId, version, self._batch.uri
            )

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, StreamTaskResult)]
        if not results:
            # Every task failed, so no message names the job: the files of its failed
            # attempts were removed by Lance, and a killed attempt's are vacuum's.
            _log.warning(
                "micro-batch %d for %s aborted with no task result; its staging job is left "
                "for vacuum",
                batchId,
                self._batch.uri,
            )
            return
        self._batch.abort_results([r.result for r in results], job_id=_job_id(results))


def _job_id(results: Sequence[StreamTaskResult]) -> str | None:
    ids = {r.job_id for r in results}
    if len(ids) > 1:
        raise LanceSparkError(
            f"the tasks of one micro-batch wrote for {len(ids)} different jobs "
            f"({', '.join(sorted(ids))}); nothing was committed"
        )
    return next(iter(ids), None)
