"""Structured Streaming: the exactly-once sink, idempotent batch writes (txnAppId /
txnVersion) and the streaming source of new versions.

Inputs are deterministic: a JSON file source fed between ``processAllAvailable()`` calls, and
``availableNow`` runs; no sleeps. Tables the sink writes are checked with pylance, rows the
source returns against Spark's own read of the same table (or of the JSON input).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from lance_spark import LanceTable
from lance_spark.errors import InvalidOptionError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

SCHEMA = "id BIGINT, v STRING"


# --- helpers ----------------------------------------------------------------------------------


class Feed:
    """A folder of JSON files that a file source streams, one new file per feed."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "input"
        self.dir.mkdir()
        self._count = 0

    def __call__(self, ids: Iterable[int], **extra: Any) -> None:
        self._count += 1
        lines = "".join(json.dumps({"id": i, "v": f"v{i}", **extra}) + "\n" for i in ids)
        # Written aside and renamed in, so the source never sees half a file.
        tmp = self.dir.parent / f".feed{self._count}.json"
        tmp.write_text(lines)
        os.replace(tmp, self.dir / f"part{self._count:04d}.json")


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return Feed(tmp_path)


def _stream(spark: Any, feed: Feed, schema: str = SCHEMA) -> Any:
    return spark.readStream.schema(schema).json(str(feed.dir))


def _sink(frame: Any, uri: str, checkpoint: Path, **options: str) -> Any:
    writer = frame.writeStream.format("lance").option("checkpointLocation", str(checkpoint))
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.start(uri)


def _versions(uri: str) -> list[int]:
    return [int(v["version"]) for v in lance.dataset(uri).versions()]


def _props(uri: str, version: int) -> dict[str, str]:
    tx = lance.dataset(uri).read_transaction(version)
    return dict(tx.transaction_properties or {})


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())


def _unreferenced(uri: str) -> set[str]:
    """Data files under data/ that no version of the table references."""
    ds = lance.dataset(uri)
    referenced = set()
    for v in ds.versions():
        for fragment in ds.checkout_version(v["version"]).get_fragments():
            referenced.update(f.path for f in fragment.metadata.files)
    data = Path(uri) / "data"
    return {p.name for p in data.iterdir()} - referenced if data.is_dir() else set()


@pytest.fixture
def stopping() -> Iterator[Callable[[Any], Any]]:
    """Stops every query a test started, also when the test fails."""
    queries: list[Any] = []

    def track(query: Any) -> Any:
        queries.append(query)
        return query

    yield track
    for query in queries:
        with contextlib.suppress(PySparkException):
            query.stop()


# --- the sink ---------------------------------------------------------------------------------


def test_sink_commits_one_version_per_batch_with_query_and_batch_ids(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed(range(5))
    query = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck"))
    query.processAllAvailable()
    feed(range(5, 8))
    query.processAllAvailable()
    feed([])  # a batch of no rows: no version
    query.processAllAvailable()
    query.stop()

    assert _versions(table_uri) == [1, 2]
    assert _ids(table_uri) == list(range(8))
    for version, batch in ((1, 0), (2, 1)):
        props = _props(table_uri, version)
        assert props["lance.streaming.queryId"] == str(query.id)
        assert props["lance.streaming.epochId"] == str(batch)
        assert props["lance_spark.operation"] == "STREAMING UPDATE"
    expected = spark.read.schema(SCHEMA).json(str(feed.dir)).orderBy("id").collect()
    got = spark.read.format("lance").load(table_uri).orderBy("id").collect()
    assert [tuple(r) for r in got] == [tuple(r) for r in expected]
    assert _unreferenced(table_uri) == set()


def test_restart_with_the_same_checkpoint_neither_loses_nor_repeats(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed(range(3))
    first = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck"))
    first.processAllAvailable()
    first.stop()
    feed(range(3, 6))
    second = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck"))
    second.processAllAvailable()
    second.stop()
    assert second.id == first.id  # kept in the checkpoint
    assert _ids(table_uri) == list(range(6))
    assert _versions(table_uri) == [1, 2]


def test_replayed_batch_is_not_written_twice(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    checkpoint = tmp_path / "ck"
    feed(range(4))
    query = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    query.processAllAvailable()
    feed(range(4, 9))
    query.processAllAvailable()
    query.stop()
    before = lance.dataset(table_uri).to_table().sort_by("id")
    # A crash after the Lance commit but before Spark's commit log entry: the last entry is
    # lost, so the restarted query runs batch 1 again.
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    # The marker files are a cache: without them the commit history still has the batch.
    shutil.rmtree(Path(table_uri) / "_lance_spark")
    replay = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    replay.processAllAvailable()
    replay.stop()
    assert (checkpoint / "commits" / "1").exists()  # Spark did run it again
    assert _versions(table_uri) == [1, 2]
    assert lance.dataset(table_uri).to_table().sort_by("id").equals(before)
    assert _unreferenced(table_uri) == set()  # the replay's files are gone


def _lose_last_commit_log_entry(checkpoint: Path, batch: int) -> None:
    """A crash after the sink's Lance commit of ``batch`` but before Spark's commit log
    entry: the restarted query runs ``batch`` again."""
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)  # Hadoop's checksum


def test_replayed_batch_is_not_written_twice_after_hundreds_of_foreign_commits(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    checkpoint = tmp_path / "ck"
    feed(range(25))
    query = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    query.processAllAvailable()
    feed(range(25, 50))
    query.processAllAvailable()
    query.stop()
    _lose_last_commit_log_entry(checkpoint, 1)
    # 205 appends by another writer: the sink's commit of batch 1 is far behind the latest.
    for i in range(205):
        lance.write_dataset(
            pa.table({"id": [10_000 + i], "v": ["other"]}), table_uri, mode="append"
        )
    latest = lance.dataset(table_uri).version
    replay = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    replay.processAllAvailable()
    feed(range(50, 53))  # and the query goes on with a new batch
    replay.processAllAvailable()
    replay.stop()
    assert (checkpoint / "commits" / "1").exists()  # Spark did run batch 1 again
    ids = _ids(table_uri)
    assert len(ids) == len(set(ids))  # no row twice
    assert ids == list(range(53)) + list(range(10_000, 10_205))
    assert _versions(table_uri)[-1] == latest + 1  # the replay committed nothing
    assert _props(table_uri, latest + 1)["lance.streaming.epochId"] == "2"
    assert _unreferenced(table_uri) == set()


def test_replay_after_vacuum_removed_its_commit_writes_nothing_twice(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    from datetime import timedelta

    checkpoint = tmp_path / "ck"
    feed(range(5))
    query = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    query.processAllAvailable()
    feed(range(5, 10))
    query.processAllAvailable()
    query.stop()
    _lose_last_commit_log_entry(checkpoint, 1)
    for i in range(3):
        lance.write_dataset(pa.table({"id": [100 + i], "v": ["other"]}), table_uri, mode="append")
    lance.dataset(table_uri).cleanup_old_versions(older_than=timedelta(0))
    before = lance.dataset(table_uri).version
    assert _versions(table_uri) == [before]  # the sink's commits are gone from the history
    replay = stopping(_sink(_stream(spark, feed), table_uri, checkpoint))
    replay.processAllAvailable()
    replay.stop()
    assert (checkpoint / "commits" / "1").exists()  # Spark did run batch 1 again
    assert lance.dataset(table_uri).version == before  # nothing committed
    assert _ids(table_uri) == [*range(10), 100, 101, 102]


def test_new_query_writes_to_a_table_whose_early_versions_were_vacuumed(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    from datetime import timedelta

    for i in range(4):
        lance.write_dataset(
            pa.table({"id": [100 + i], "v": ["other"]}),
            table_uri,
            mode="append" if i else "create",
        )
    lance.dataset(table_uri).cleanup_old_versions(older_than=timedelta(0))
    assert _versions(table_uri) == [4]
    feed(range(5))
    query = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck"))
    query.processAllAvailable()
    feed(range(5, 8))
    query.processAllAvailable()
    query.stop()
    assert _ids(table_uri) == [*range(8), 100, 101, 102, 103]
    assert [_props(table_uri, v)["lance.streaming.epochId"] for v in (5, 6)] == ["0", "1"]


def test_failing_batch_leaves_no_version_and_no_files(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    schema = "id BIGINT, v STRING, d INT"
    feed(range(3), d=1)
    frame = _stream(spark, feed, schema).select("id", (F.col("id") / F.col("d")).alias("q"))
    query = stopping(_sink(frame, table_uri, tmp_path / "ck"))
    query.processAllAvailable()
    feed(range(3, 6), d=0)  # ANSI division by zero fails the batch's tasks
    with pytest.raises(PySparkException, match="DIVIDE_BY_ZERO"):
        query.processAllAvailable()
    assert _versions(table_uri) == [1]
    assert _ids(table_uri) == [0, 1, 2]
    assert _unreferenced(table_uri) == set()


def test_complete_mode_overwrites_with_the_whole_result(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed([1, 2, 3])
    counts = _stream(spark, feed).groupBy((F.col("id") % 2).alias("k")).count()
    query = stopping(
        counts.writeStream.format("lance")
        .outputMode("complete")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start(table_uri)
    )
    query.processAllAvailable()
    feed([4, 5])
    query.processAllAvailable()
    query.stop()
    table = lance.dataset(table_uri).to_table().sort_by("k")
    assert table.to_pydict() == {"k": [0, 1], "count": [2, 3]}
    assert _versions(table_uri) == [1, 2]
    assert _props(table_uri, 2)["lance_spark.operationParameters"].count("Complete") == 1


def test_streaming_query_id_option_recognises_batches_across_checkpoints(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed(range(3))
    first = stopping(
        _sink(_stream(spark, feed), table_uri, tmp_path / "ck1", streamingQueryId="ingest")
    )
    first.processAllAvailable()
    first.stop()
    # A new checkpoint starts again at batch 0, which the table already holds for "ingest".
    again = stopping(
        _sink(_stream(spark, feed), table_uri, tmp_path / "ck2", streamingQueryId="ingest")
    )
    again.processAllAvailable()
    again.stop()
    assert _ids(table_uri) == [0, 1, 2]
    assert _props(table_uri, 1)["lance.streaming.queryId"] == "ingest"
    assert _unreferenced(table_uri) == set()


def test_catalog_table_sink(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    name = f"stream_sink_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame([(100, "seed")], SCHEMA).write.format("lance").mode("append").save(
        table_uri
    )
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{table_uri}'")
    try:
        feed(range(3))
        # The JVM companion gives the sink the catalog table's location.
        query = stopping(
            _stream(spark, feed)
            .writeStream.option("checkpointLocation", str(tmp_path / "ck"))
            .toTable(name)
        )
        query.processAllAvailable()
        query.stop()
        assert sorted(r.id for r in spark.table(name).collect()) == [0, 1, 2, 100]
        assert _ids(table_uri) == [0, 1, 2, 100]
        # A path that is not the table's is refused, not written.
        other = str(tmp_path / "other.lance")
        with pytest.raises(Exception, match=r"drop the path option"):
            stopping(
                _stream(spark, feed)
                .writeStream.option("checkpointLocation", str(tmp_path / "ck2"))
                .option("path", other)
                .toTable(name)
            ).processAllAvailable()
        assert _ids(table_uri) == [0, 1, 2, 100] and not Path(other).exists()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_bad_streaming_option_fails_naming_it(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed(range(2))
    with pytest.raises(Exception, match="txnVersion"):
        query = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck", txnVersion="3"))
        query.processAllAvailable()
    assert not Path(table_uri).exists()


# --- idempotent batch writes ------------------------------------------------------------------


def test_txn_app_id_and_version_skip_a_write_already_committed(spark: Any, table_uri: str) -> None:
    def write(ids: range, version: int) -> None:
        frame = spark.range(ids.start, ids.stop).selectExpr("id", "cast(id as string) as v")
        (
            frame.write.format("lance")
            .mode("append")
            .option("txnAppId", "nightly")
            .option("txnVersion", version)
            .save(table_uri)
        )

    write(range(0, 3), 1)
    write(range(0, 3), 1)  # the same write again: skipped
    write(range(10, 12), 0)  # an older one: skipped (Delta's rule)
    write(range(3, 5), 2)
    assert _ids(table_uri) == [0, 1, 2, 3, 4]
    assert _versions(table_uri) == [1, 2]
    assert _props(table_uri, 2)["lance.streaming.epochId"] == "2"
    assert _unreferenced(table_uri) == set()


def test_txn_is_found_in_the_commit_history_without_the_marker_files(
    spark: Any, table_uri: str, tmp_path: Path
) -> None:
    """The commit itself records (txnAppId, txnVersion); the marker files under
    _lance_spark are a cache: removed, in a copy of the folder or in a shallow clone, the
    repeat is still found and skipped."""

    def write(uri: str) -> None:
        (
            spark.range(100, 101)
            .write.format("lance")
            .mode("append")
            .option("txnAppId", "app-l")
            .option("txnVersion", 3)
            .save(uri)
        )

    spark.range(0, 10).write.format("lance").save(table_uri)
    spark.range(10, 12).write.format("lance").mode("append").save(table_uri)  # another writer
    write(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.count_rows() == 13 and ds.version == 3
    props = _props(table_uri, 3)
    assert props["lance.streaming.queryId"] == "app-l"
    assert props["lance.streaming.epochId"] == "3"
    spark.range(20, 21).write.format("lance").mode("append").save(table_uri)  # v4, not app-l
    shutil.rmtree(Path(table_uri) / "_lance_spark")
    copy = str(tmp_path / "copy.lance")
    shutil.copytree(table_uri, copy)
    clone = str(tmp_path / "clone.lance")
    lance.dataset(table_uri).shallow_clone(clone, 4)
    for uri in (table_uri, copy, clone):
        write(uri)  # the same write again: skipped
        assert lance.dataset(uri).count_rows() == 14, uri
    assert _versions(table_uri) == [1, 2, 3, 4]
    assert _versions(copy) == [1, 2, 3, 4]
    # The walk's answer is cached again: a state file names the commit.
    assert list((Path(table_uri) / "_lance_spark" / "txn").rglob("state-*.json"))


def test_txn_app_id_without_version_is_refused(spark: Any, table_uri: str) -> None:
    frame = spark.range(2)
    with pytest.raises(Exception, match="txnAppId needs option txnVersion"):
        frame.write.format("lance").mode("append").option("txnAppId", "a").save(table_uri)
    assert not Path(table_uri).exists()


def test_txn_option_parsing_names_the_option() -> None:
    from lance_spark.source.options import parse_write_options

    with pytest.raises(InvalidOptionError, match="txnVersion=-1"):
        parse_write_options({"txnAppId": "a", "txnVersion": "-1"})


# --- the streaming source ---------------------------------------------------------------------


def _append(spark: Any, uri: str, ids: Iterable[int]) -> None:
    """One version of one fragment."""
    rows = [(i, f"v{i}") for i in ids]
    frame = spark.createDataFrame(rows, SCHEMA).coalesce(1)
    frame.write.format("lance").mode("append").save(uri)


def _memory(frame: Any, name: str, checkpoint: Path, **options: Any) -> Any:
    writer = (
        frame.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
    )
    if options.get("available_now"):
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _memory_ids(spark: Any, name: str) -> list[int]:
    return sorted(r.id for r in spark.table(name).collect())


def _name() -> str:
    return f"stream_{uuid.uuid4().hex[:8]}"


def test_source_reads_the_snapshot_then_each_appended_version(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    _append(spark, table_uri, range(3))
    _append(spark, table_uri, range(3, 5))
    name = _name()
    query = stopping(
        _memory(spark.readStream.format("lance").load(table_uri), name, tmp_path / "ck")
    )
    query.processAllAvailable()
    assert _memory_ids(spark, name) == list(range(5))
    _append(spark, table_uri, range(5, 7))
    LanceTable.forPath(spark, table_uri).optimize().executeCompaction()  # moves rows only
    _append(spark, table_uri, range(7, 8))
    query.processAllAvailable()
    query.stop()
    got = spark.table(name).orderBy("id").collect()
    expected = spark.read.format("lance").load(table_uri).orderBy("id").collect()
    assert [tuple(r) for r in got] == [tuple(r) for r in expected]


def test_source_starting_version_reads_from_that_version_on(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    for start in (0, 10, 20):
        _append(spark, table_uri, range(start, start + 2))
    name = _name()
    frame = spark.readStream.format("lance").option("startingVersion", 2).load(table_uri)
    query = stopping(_memory(frame, name, tmp_path / "ck", available_now=True))
    query.awaitTermination()
    assert _memory_ids(spark, name) == [10, 11, 20, 21]


def test_source_available_now_restarts_exactly_once(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    _append(spark, table_uri, range(4))
    checkpoint = tmp_path / "ck"
    out = tmp_path / "out.lance"

    def run() -> None:
        frame = spark.readStream.format("lance").load(table_uri)
        query = stopping(
            frame.writeStream.format("lance")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(str(out))
        )
        query.awaitTermination()

    run()
    assert _ids(str(out)) == [0, 1, 2, 3]
    _append(spark, table_uri, range(4, 6))
    run()
    run()  # nothing new: no batch, no version
    assert _ids(str(out)) == list(range(6))
    assert _versions(str(out)) == [1, 2]


def test_source_fails_on_an_update_unless_skip_change_commits(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    _append(spark, table_uri, range(3))
    LanceTable.forPath(spark, table_uri).update(condition="id = 1", set={"v": "'changed'"})
    _append(spark, table_uri, range(3, 5))
    strict = spark.readStream.format("lance").option("startingVersion", 1).load(table_uri)
    name = _name()
    query = stopping(_memory(strict, name, tmp_path / "ck1"))
    with pytest.raises(PySparkException, match=r"version 2 .*skipChangeCommits"):
        query.processAllAvailable()
    assert _memory_ids(spark, name) == [0, 1, 2]  # what came before the update

    lenient = (
        spark.readStream.format("lance")
        .option("startingVersion", 1)
        .option("skipChangeCommits", "true")
        .load(table_uri)
    )
    name = _name()
    query = stopping(_memory(lenient, name, tmp_path / "ck2", available_now=True))
    query.awaitTermination()
    assert _memory_ids(spark, name) == [0, 1, 2, 3, 4]


def test_source_admission_control_makes_several_batches(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    for start in range(0, 50, 10):  # five versions of one fragment each
        _append(spark, table_uri, range(start, start + 10))
    name = _name()
    frame = spark.readStream.format("lance").option("maxFilesPerTrigger", 2).load(table_uri)
    query = stopping(_memory(frame, name, tmp_path / "ck", available_now=True))
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    assert [p.numInputRows for p in batches] == [20, 20, 10]
    assert _memory_ids(spark, name) == list(range(50))


def test_source_splits_a_version_by_bytes(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    # One version of four fragments (max_rows_per_file), split across batches.
    rows = [(i, f"v{i}") for i in range(40)]
    (
        spark.createDataFrame(rows, SCHEMA)
        .coalesce(1)
        .write.format("lance")
        .option("max_rows_per_file", 10)
        .mode("append")
        .save(table_uri)
    )
    assert len(lance.dataset(table_uri).get_fragments()) == 4
    name = _name()
    frame = (
        spark.readStream.format("lance")
        .option("startingVersion", 1)
        .option("maxBytesPerTrigger", 1)  # at least one fragment per batch
        .load(table_uri)
    )
    query = stopping(_memory(frame, name, tmp_path / "ck", available_now=True))
    query.awaitTermination()
    batches = [p.numInputRows for p in query.recentProgress if p.numInputRows > 0]
    assert batches == [10, 10, 10, 10]
    assert _memory_ids(spark, name) == list(range(40))


@pytest.mark.slow  # 50 s on a loaded 2-core machine (load 11): four query starts and stops
def test_source_restarted_while_another_writer_appends_delivers_each_row_once(
    classic_spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    """A stream (maxFilesPerTrigger=2) into a Parquet sink, stopped as soon as it has planned
    a batch and restarted on its checkpoint, round after round, while a thread appends to the
    table: the sink holds every row of the table once (the first batch was re-planned from
    a newer snapshot and delivered rows twice). Classic only: the source is the server's."""
    spark = classic_spark
    for start in range(0, 20, 4):  # five versions of one fragment each
        lance.write_dataset(pa.table({"id": range(start, start + 4)}), table_uri, mode="append")
    checkpoint, sink = tmp_path / "ck", tmp_path / "sink"

    def start_query(limited: bool = True) -> Any:
        reader = spark.readStream.format("lance")
        if limited:
            reader = reader.option("maxFilesPerTrigger", 2)
        writer = (
            reader.load(table_uri)
            .select("id")
            .writeStream.format("parquet")
            .option("checkpointLocation", str(checkpoint))
        )
        if not limited:
            writer = writer.trigger(availableNow=True)
        return stopping(writer.start(str(sink)))

    def appender(first: int) -> threading.Thread:
        def run() -> None:
            for k in range(3):  # appends racing the query's planning of its batches
                ids = range(first + 10 * k, first + 10 * k + 5)
                lance.write_dataset(pa.table({"id": ids}), table_uri, mode="append")

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    deadline = time.monotonic() + 120
    for round_ in range(4):
        planned = len(list((checkpoint / "offsets").glob("[0-9]*")))
        query = start_query()
        thread = appender(1000 * (round_ + 1))
        # Stop as soon as the query has planned a new batch (mostly before it committed it).
        while len(list((checkpoint / "offsets").glob("[0-9]*"))) == planned:
            assert time.monotonic() < deadline, "the stream planned no batch"
            query.awaitTermination(0.05)  # returns at once (or raises) if the query ended
        query.stop()
        thread.join(timeout=60)
        assert not thread.is_alive()
    drain = start_query(limited=False)
    assert drain.awaitTermination(120)
    got = [r.id for r in spark.read.parquet(str(sink)).collect()]
    expected = lance.dataset(table_uri).to_table(columns=["id"]).column("id").to_pylist()
    assert len(expected) == 20 + 4 * 3 * 5
    assert sorted(got) == sorted(expected)


def test_source_bad_options_name_the_option(spark: Any, table_uri: str) -> None:
    _append(spark, table_uri, range(2))
    with pytest.raises(Exception, match="maxFilesPerTrigger"):
        frame = spark.readStream.format("lance").option("maxFilesPerTrigger", 0).load(table_uri)
        frame.writeStream.format("memory").queryName(_name()).start().processAllAvailable()


def test_arrow_schema_of_sink_matches_the_stream(
    spark: Any, feed: Feed, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    feed(range(2))
    query = stopping(_sink(_stream(spark, feed), table_uri, tmp_path / "ck"))
    query.processAllAvailable()
    query.stop()
    schema = lance.dataset(table_uri).schema
    assert schema.field("id").type == pa.int64() and schema.field("v").type == pa.string()


def test_source_needing_a_removed_version_fails_naming_it(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    from datetime import timedelta

    for start in (0, 10, 20):
        _append(spark, table_uri, range(start, start + 2))
    lance.dataset(table_uri).cleanup_old_versions(older_than=timedelta(0))
    assert _versions(table_uri) == [3]
    frame = spark.readStream.format("lance").option("startingVersion", 1).load(table_uri)
    query = stopping(_memory(frame, _name(), tmp_path / "ck"))
    with pytest.raises(PySparkException, match=r"version 1 of the Lance table .*cleanup"):
        query.processAllAvailable()


def _change_rows(rows: Iterable[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["id"], r["v"], r["_change_type"], r["_commit_version"], r["_commit_timestamp"])
        for r in rows
    )


def test_change_feed_stream_equals_the_batch_change_feed(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    _append(spark, table_uri, range(4))
    checkpoint = tmp_path / "ck"
    out = str(tmp_path / "changes.lance")  # a sink that resumes from its checkpoint

    def run() -> None:
        frame = (
            spark.readStream.format("lance")
            .option("readChangeFeed", "true")
            .option("startingVersion", 1)
            .option("maxFilesPerTrigger", 1)
            .load(table_uri)
        )
        query = stopping(
            frame.writeStream.format("lance")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(out)
        )
        query.awaitTermination()

    run()
    t = LanceTable.forPath(spark, table_uri)
    t.update("id = 1", {"v": "'one'"})
    t.delete("id = 2")
    _append(spark, table_uri, range(10, 12))
    t.optimize().executeCompaction()
    run()
    batch = (
        spark.read.format("lance")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(table_uri)
    )
    expected = _change_rows(batch.collect())
    assert {r[2] for r in expected} == {"insert", "update_preimage", "update_postimage", "delete"}
    assert _change_rows(spark.read.format("lance").load(out).collect()) == expected


def test_change_feed_stream_starts_with_the_snapshot_as_inserts(
    spark: Any, table_uri: str, tmp_path: Path, stopping: Callable[[Any], Any]
) -> None:
    _append(spark, table_uri, range(3))
    _append(spark, table_uri, range(3, 5))
    name = _name()
    frame = spark.readStream.format("lance").option("readChangeFeed", "true").load(table_uri)
    query = stopping(_memory(frame, name, tmp_path / "ck"))
    query.processAllAvailable()
    LanceTable.forPath(spark, table_uri).delete("id = 0")
    query.processAllAvailable()
    rows = sorted((r.id, r._change_type, r._commit_version) for r in spark.table(name).collect())
    assert rows == [(0, "delete", 3), (0, "insert", 2)] + [(i, "insert", 2) for i in range(1, 5)]
