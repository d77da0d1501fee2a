"""How Spark feeds a Lance write task: the JVM companion sizes the Arrow batches of each task of
a write into a ``lance`` table, batch and streaming, from its first rows: ~8 MiB batches of
10,000 to 65,536 rows and no per-row size check
(``spark.sql.execution.arrow.maxBytesPerBatch``), unless the session sets either conf itself or
the rows are large (LanceWriteTable in jvm/).

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
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from lance_spark import _settings, _spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

# The probe's classes are shipped by value: Spark Connect's server cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEY = _settings.MAX_BYTES_PER_BATCH_CONF
ROWS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"
PROBE = "lance_storage_990017"  # the companion's pattern for the connector's private formats


class _Seen(WriterCommitMessage):
    def __init__(self, limit: str | None, rows: str | None, batches: list[int]) -> None:
        self.limit = limit
        self.rows = rows
        self.batches = batches


def _observe(iterator: Iterator[pa.RecordBatch]) -> _Seen:
    batches = [b.num_rows for b in iterator]  # the runner has read the confs by now
    task = TaskContext.get()
    assert task is not None
    return _Seen(task.getLocalProperty(KEY), task.getLocalProperty(ROWS_KEY), batches)


def _record(out: str, messages: list[WriterCommitMessage | None]) -> None:
    seen = [
        {"limit": m.limit, "rows": m.rows, "batches": m.batches}
        for m in messages
        if isinstance(m, _Seen)
    ]
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
    """The probe registered, the session's own values of the two confs unset (the
    repository's spark-defaults.conf sets one) and restored after; yields the file the probe
    writes."""
    spark.dataSource.register(_ProbeSource)
    before = {key: spark.conf.get(key, None) for key in (KEY, ROWS_KEY)}
    for key in before:
        spark.conf.unset(key)
    try:
        yield str(tmp_path / f"seen-{uuid.uuid4().hex}.jsonl")
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _seen(out: str) -> list[dict[str, object]]:
    with open(out) as handle:
        return [task for line in handle for task in json.loads(line)]


def _rows(spark: SparkSession, n: int, *, wide: bool = False) -> DataFrame:
    frame = spark.range(n, numPartitions=2).withColumn("label", F.concat(F.lit("l"), "id"))
    # ~8 KB per row: 10,000 of them are over Spark's 64 MiB
    return frame.withColumn("label", F.expr("repeat(label, 4000)")) if wide else frame


def test_narrow_rows_go_in_large_batches_without_the_per_row_size_check(
    spark: SparkSession, probe: str
) -> None:
    _rows(spark, 150_000).write.format(PROBE).option("out", probe).mode("append").save()
    tasks = _seen(probe)
    assert len(tasks) == 2
    assert {t["limit"] for t in tasks} == {_settings.NO_BYTE_LIMIT}
    assert {t["rows"] for t in tasks} == {"65536"}  # 8 MiB of ~40-byte rows, at most 65,536
    assert sum(sum(t["batches"]) for t in tasks) == 150_000  # type: ignore[arg-type]
    assert max(max(t["batches"]) for t in tasks) == 65_536  # type: ignore[type-var]


def test_the_sessions_own_values_win(spark: SparkSession, probe: str) -> None:
    spark.conf.set(KEY, "32m")
    _rows(spark, 100).write.format(PROBE).option("out", probe).mode("append").save()
    spark.conf.unset(KEY)
    spark.conf.set(ROWS_KEY, "40")
    _rows(spark, 100).write.format(PROBE).option("out", probe).mode("append").save()
    tasks = _seen(probe)
    # The session's conf is kept; the other is still sized (within Spark's 64 MiB).
    assert [(t["limit"], t["rows"]) for t in tasks] == [("32m", "65536")] * 2 + [
        (_settings.NO_BYTE_LIMIT, "40")
    ] * 2
    assert max(max(t["batches"]) for t in tasks[2:]) == 40  # type: ignore[type-var]


def test_large_rows_keep_sparks_batches(spark: SparkSession, probe: str) -> None:
    _rows(spark, 100, wide=True).write.format(PROBE).option("out", probe).mode("append").save()
    assert {(t["limit"], t["rows"]) for t in _seen(probe)} == {(None, None)}


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
    assert {t["rows"] for t in tasks} == {"65536"}


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


def test_the_test_sessions_have_every_recommended_setting(spark: SparkSession) -> None:
    # classic: conf/spark-defaults.conf; Connect: its server started with spark_conf(), which
    # carries them (what a user's server gets from it).
    values = {k: str(v) for k, v in _spark.conf_items(spark).items()}
    assert _settings.missing(values.get) == []
