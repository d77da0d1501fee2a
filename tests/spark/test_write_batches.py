"""How Spark feeds a Lance write task: the JVM companion lifts Spark's per-row Arrow batch size
check (``spark.sql.execution.arrow.maxBytesPerBatch``) for the task of each write into a
``lance`` table, batch and streaming, unless the session sets the conf itself or the rows have
a binary column (LanceWriteTable in jvm/).

What the task sees is observed from inside it: a probe data source registered under a name
the companion treats as ``lance`` (a private format, ``lance_storage_<n>``) records each task's
local property and batch sizes. Real Lance writes through the same path are checked by every
write test (test_write, test_streaming, test_catalog_writes), and the speed by ``make bench``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from lance_spark import _settings

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

# The probe's classes are shipped by value: Spark Connect's server cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEY = _settings.MAX_BYTES_PER_BATCH_CONF
PROBE = "lance_storage_990017"  # the companion's pattern for the connector's private formats


class _Seen(WriterCommitMessage):
    def __init__(self, limit: str | None, batches: list[int]) -> None:
        self.limit = limit
        self.batches = batches


def _observe(iterator: Iterator[pa.RecordBatch]) -> _Seen:
    limit = TaskContext.get().getLocalProperty(KEY)  # type: ignore[union-attr]
    return _Seen(limit, [b.num_rows for b in iterator])


def _record(out: str, messages: list[WriterCommitMessage | None]) -> None:
    seen = [{"limit": m.limit, "batches": m.batches} for m in messages if isinstance(m, _Seen)]
    with open(out, "a") as handle:
        handle.write(json.dumps(seen) + "\n")


class _BatchProbe(DataSourceArrowWriter):
    def __init__(self, out: str) -> None:
        self.out = out

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Seen:
        return _observe(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _record(self.out, messages)


class _StreamProbe(DataSourceStreamArrowWriter):
    def __init__(self, out: str) -> None:
        self.out = out

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Seen:
        return _observe(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _record(self.out, messages)


class _ProbeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return PROBE

    def schema(self) -> str:
        return "id long, label string"

    def writer(self, schema: object, overwrite: bool) -> _BatchProbe:
        return _BatchProbe(self.options["out"])

    def streamWriter(self, schema: object, overwrite: bool) -> _StreamProbe:
        return _StreamProbe(self.options["out"])


@pytest.fixture
def probe(spark: SparkSession, tmp_path: Path) -> Iterator[str]:
    """The probe registered, the session's own value of the conf unset (the repository's
    spark-defaults.conf sets it) and restored after; yields the file the probe writes."""
    spark.dataSource.register(_ProbeSource)
    before = spark.conf.get(KEY, None)
    spark.conf.unset(KEY)
    try:
        yield str(tmp_path / f"seen-{uuid.uuid4().hex}.jsonl")
    finally:
        if before is not None:
            spark.conf.set(KEY, before)


def _seen(out: str) -> list[dict[str, object]]:
    with open(out) as handle:
        return [task for line in handle for task in json.loads(line)]


def _rows(spark: SparkSession, n: int, *, binary: bool = False) -> object:
    frame = spark.range(n, numPartitions=2).withColumn("label", F.concat(F.lit("l"), "id"))
    return frame.withColumn("raw", F.col("label").cast("binary")) if binary else frame


def test_a_lance_write_task_runs_without_the_per_row_size_check(
    spark: SparkSession, probe: str
) -> None:
    _rows(spark, 25_000).write.format(PROBE).option("out", probe).mode("append").save()
    tasks = _seen(probe)
    assert len(tasks) == 2
    assert {t["limit"] for t in tasks} == {_settings.NO_BYTE_LIMIT}
    assert sum(sum(t["batches"]) for t in tasks) == 25_000  # type: ignore[arg-type]
    # Batches are still cut at maxRecordsPerBatch rows (10,000 by default).
    assert max(max(t["batches"]) for t in tasks) == 10_000  # type: ignore[type-var]


def test_the_sessions_own_value_wins(spark: SparkSession, probe: str) -> None:
    spark.conf.set(KEY, "32m")
    _rows(spark, 100).write.format(PROBE).option("out", probe).mode("append").save()
    assert {t["limit"] for t in _seen(probe)} == {"32m"}


def test_rows_with_a_binary_column_keep_the_check(spark: SparkSession, probe: str) -> None:
    _rows(spark, 100, binary=True).write.format(PROBE).option("out", probe).mode("append").save()
    assert {t["limit"] for t in _seen(probe)} == {None}


def test_overwrite_and_sql_insert_tasks_run_without_the_check(
    spark: SparkSession, probe: str
) -> None:
    _rows(spark, 100).write.format(PROBE).option("out", probe).mode("overwrite").save()
    view = f"probe_{uuid.uuid4().hex[:8]}"
    _rows(spark, 10).createOrReplaceTempView(view)
    try:
        # A temporary view over the probe: INSERT INTO plans the same V2 write as save().
        spark.sql(
            f"CREATE TEMPORARY VIEW {view}_target USING {PROBE} OPTIONS (out '{probe}')"
        ).collect()
        spark.sql(f"INSERT INTO {view}_target SELECT * FROM {view}").collect()
    finally:
        spark.catalog.dropTempView(view)
        spark.catalog.dropTempView(f"{view}_target")
    tasks = _seen(probe)
    assert len(tasks) >= 3 and {t["limit"] for t in tasks} == {_settings.NO_BYTE_LIMIT}


def test_streaming_micro_batch_tasks_run_without_the_check(
    spark: SparkSession, probe: str, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    _rows(spark, 300).write.parquet(str(source))
    query = (
        spark.readStream.schema("id long, label string")
        .parquet(str(source))
        .writeStream.format(PROBE)
        .option("out", probe)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    tasks = _seen(probe)
    assert tasks and {t["limit"] for t in tasks} == {_settings.NO_BYTE_LIMIT}
    assert sum(sum(t["batches"]) for t in tasks) == 300  # type: ignore[arg-type]
