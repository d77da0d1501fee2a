"""The change data feed (``readChangeFeed``): Delta's options and columns, the same rows as
``LanceTable.diff`` (one implementation) and as pylance's reads of the versions, only the
fragments that changed read, and clear errors."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import LanceTable
from lance_spark.errors import InvalidOptionError
from lance_spark.source import change_feed

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

SCHEMA = "id BIGINT, label STRING, score INT"


def _changes(spark: SparkSession, uri: str, **options: Any) -> DataFrame:
    reader = spark.read.format("lance").option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(uri)


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    names = [n for n in df.columns if n != "_commit_timestamp"]
    return sorted((tuple(r[n] for n in names) for r in df.collect()), key=repr)


def _history(spark: SparkSession, uri: str) -> dict[str, int]:
    """Create, append, UPDATE, DELETE, MERGE, compaction, index: the version each made."""
    made: dict[str, int] = {}

    def mark(step: str) -> None:
        made[step] = int(lance.dataset(uri).version)

    rows = [(i, f"l{i}", i * 10) for i in range(6)]
    spark.createDataFrame(rows, SCHEMA).write.format("lance").mode("append").save(uri)
    mark("create")
    more = [(i, f"l{i}", i * 10) for i in range(6, 9)]
    spark.createDataFrame(more, SCHEMA).write.format("lance").mode("append").save(uri)
    mark("append")
    t = LanceTable.forPath(spark, uri)
    t.update("id = 1", {"label": "'one'"})
    mark("update")
    t.delete("id = 2")
    mark("delete")
    source = spark.createDataFrame([(3, "three", 30), (20, "l20", 200)], SCHEMA)
    (
        t.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    mark("merge")
    t.optimize().executeCompaction()
    mark("compaction")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    mark("index")
    return made


def test_change_feed_equals_diff_and_pylance(spark: SparkSession, table_uri: str) -> None:
    made = _history(spark, table_uri)
    t = LanceTable.forPath(spark, table_uri)
    feed = _changes(spark, table_uri, startingVersion=2)
    assert feed.columns == [
        "id",
        "label",
        "score",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    ]
    got = _rows(feed)
    assert got == _rows(t.diff(1))
    # Derived from pylance reads of each pair of versions, matched by id.
    expected = []
    for version in range(2, made["index"] + 1):
        old = {
            r["id"]: r for r in lance.dataset(table_uri, version=version - 1).to_table().to_pylist()
        }
        new = {r["id"]: r for r in lance.dataset(table_uri, version=version).to_table().to_pylist()}
        for key in old.keys() - new.keys():
            expected.append((*old[key].values(), "delete", version))
        for key in new.keys() - old.keys():
            expected.append((*new[key].values(), "insert", version))
        for key in old.keys() & new.keys():
            if old[key] != new[key]:
                expected.append((*old[key].values(), "update_preimage", version))
                expected.append((*new[key].values(), "update_postimage", version))
    assert got == sorted(expected, key=repr)
    changed = {made[k] for k in ("append", "update", "delete", "merge")}
    assert {r[-1] for r in got} == changed  # compaction and the index: no rows


def test_commit_timestamps_and_time_range(spark: SparkSession, table_uri: str) -> None:
    made = _history(spark, table_uri)
    update, delete = made["update"], made["delete"]
    stamps = {
        int(v["version"]): v["timestamp"].astimezone(UTC)
        for v in lance.dataset(table_uri).versions()
    }
    feed = _changes(spark, table_uri, startingVersion=update, endingVersion=delete).collect()
    assert {r["_commit_version"] for r in feed} == {update, delete}
    for row in feed:
        when = row["_commit_timestamp"].astimezone(UTC)
        assert abs(when - stamps[row["_commit_version"]]) < timedelta(milliseconds=1)
    by_time = _changes(
        spark,
        table_uri,
        startingTimestamp=stamps[update].isoformat(),
        endingTimestamp=stamps[delete].isoformat(),
    )
    same = _changes(spark, table_uri, startingVersion=update, endingVersion=delete)
    assert _rows(by_time) == _rows(same)


def test_only_changed_fragments_are_read(spark: SparkSession, table_uri: str) -> None:
    made = _history(spark, table_uri)
    start, end = change_feed.resolve_range(table_uri, change_feed_options(2), storage={})
    partitions = change_feed.plan(
        table_uri, start=start, end=end, storage={}, report_overwrites=False
    )
    changed = [made[k] for k in ("append", "update", "delete", "merge")]
    assert [p.version for p in partitions] == changed  # none for compaction, index
    fragments = {int(f.fragment_id) for f in lance.dataset(table_uri, version=2).get_fragments()}
    append = partitions[0]
    assert append.before == () and set(append.after) < fragments  # only the new fragment
    update, delete = partitions[1], partitions[2]
    assert update.rewritten  # UPDATE: rows it rewrote are updates
    # The UPDATE wrote its rows to a new fragment and deleted the old copies: only the
    # deleted rows of the old fragment are read, not the fragment.
    assert update.trimmed and update.before == () and len(update.after) == 1
    assert delete.trimmed and delete.before == () and delete.after == ()


def change_feed_options(start: int) -> Any:
    from lance_spark.source.options import ChangeFeedOptions

    return ChangeFeedOptions(starting_version=start)


def test_overwrite_in_range_is_an_error_unless_reported(
    spark: SparkSession, table_uri: str
) -> None:
    rows = [(i, f"l{i}", i) for i in range(3)]
    spark.createDataFrame(rows, SCHEMA).write.format("lance").mode("append").save(table_uri)
    spark.createDataFrame([(9, "nine", 9)], SCHEMA).write.format("lance").mode("overwrite").save(
        table_uri
    )
    with pytest.raises(Exception, match=r"version 2 .*overwrite.*reportOverwrites"):
        _changes(spark, table_uri, startingVersion=1).collect()
    reported = _rows(_changes(spark, table_uri, startingVersion=2, reportOverwrites="true"))
    assert sorted(r[3] for r in reported) == ["delete"] * 3 + ["insert"]


def test_bad_options_name_the_option(spark: SparkSession, table_uri: str) -> None:
    spark.createDataFrame([(1, "a", 1)], SCHEMA).write.format("lance").mode("append").save(
        table_uri
    )
    with pytest.raises(Exception, match="needs exactly one of startingVersion"):
        _changes(spark, table_uri).collect()
    with pytest.raises(Exception, match=r"add \.option\('readChangeFeed'"):
        spark.read.format("lance").option("startingVersion", 1).load(table_uri).collect()
    with pytest.raises(Exception, match="versionAsOf does not apply"):
        _changes(spark, table_uri, startingVersion=1, versionAsOf=1).collect()
    with pytest.raises(Exception, match="version 5"):
        _changes(spark, table_uri, startingVersion=1, endingVersion=5).collect()


def test_table_without_stable_row_ids_is_refused(spark: SparkSession, table_uri: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), table_uri)
    with pytest.raises(Exception, match="no stable row ids"):
        _changes(spark, table_uri, startingVersion=1).collect()


def test_errors_are_invalid_option_errors() -> None:
    from lance_spark.source.options import parse_read_options

    with pytest.raises(InvalidOptionError, match="endingVersion or endingTimestamp"):
        parse_read_options(
            {
                "readChangeFeed": "true",
                "startingVersion": "1",
                "endingVersion": "2",
                "endingTimestamp": "2026-01-01",
            }
        )


def test_read_change_data_is_deltas_older_name(spark: SparkSession, table_uri: str) -> None:
    _history(spark, table_uri)
    older = spark.read.format("lance").option("readChangeData", "true")
    got = older.option("startingVersion", 2).load(table_uri)
    assert got.columns == _changes(spark, table_uri, startingVersion=2).columns
    assert _rows(got) == _rows(_changes(spark, table_uri, startingVersion=2))
    both = older.option("readChangeFeed", "false").option("startingVersion", 2)
    with pytest.raises(Exception, match="name the same option with different values"):
        both.load(table_uri).collect()
