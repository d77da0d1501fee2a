"""Reads through Spark: schema, projection, partitions, time travel, metadata columns."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _write_versions(uri: str, batches: int = 3, rows: int = 100) -> list[pa.Table]:
    tables = []
    for b in range(batches):
        t = pa.table(
            {
                "id": pa.array(range(b * rows, (b + 1) * rows), pa.int64()),
                "label": pa.array([f"l{i % 4}" for i in range(rows)]),
            }
        )
        lance.write_dataset(t, uri, mode="append" if b else "create")
        tables.append(t)
        time.sleep(0.02)  # distinct commit timestamps for timestampAsOf
    return tables


def _ids(df) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(r.id for r in df.select("id").collect())


def _partitions(df: DataFrame) -> int:
    """The number of partitions of ``df``'s plan, empty ones included (``df.rdd`` is classic
    only): Spark calls a ``mapInArrow`` function once per partition, also for an empty one."""

    def one_row(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"n": [1]})

    return int(df.mapInArrow(one_row, "n long").count())


def test_read_matches_pylance(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri)
    df = spark.read.format("lance").load(table_uri)
    assert df.schema.simpleString() == "struct<id:bigint,label:string>"
    expected = lance.dataset(table_uri).to_table().to_pylist()
    assert sorted((r.id, r.label) for r in df.collect()) == sorted(
        (r["id"], r["label"]) for r in expected
    )


def test_three_fragments_are_not_one_task(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=3)
    df = spark.read.format("lance").load(table_uri)
    assert _partitions(df) >= 2
    assert df.count() == 300


def test_one_large_fragment_is_split_and_rows_are_exact(
    spark: SparkSession, table_uri: str
) -> None:
    lance.write_dataset(pa.table({"id": pa.array(range(10_000), pa.int64())}), table_uri)
    ds = lance.dataset(table_uri)
    ds.delete("id % 10 = 3")  # deletions inside split ranges
    df = spark.read.format("lance").option("rows_per_partition", "1500").load(table_uri)
    assert _partitions(df) >= 5
    assert _ids(df) == [i for i in range(10_000) if i % 10 != 3]
    # with a pushed filter on top of the row ranges
    assert _ids(df.filter("id >= 4000 AND id < 4100")) == [
        i for i in range(4000, 4100) if i % 10 != 3
    ]


def test_time_travel_by_version_timestamp_and_tag(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=3)
    ds = lance.dataset(table_uri)
    ds.tags.create("first", 1)

    def read():  # type: ignore[no-untyped-def]
        return spark.read.format("lance")  # a DataFrameReader keeps options: one per read

    assert read().option("version", 1).load(table_uri).count() == 100
    assert read().option("versionAsOf", "2").load(table_uri).count() == 200
    assert read().option("tag", "first").load(table_uri).count() == 100
    stamps = {v["version"]: v["timestamp"].astimezone(UTC) for v in ds.versions()}
    between = stamps[2] + (stamps[3] - stamps[2]) / 2
    df = read().option("timestampAsOf", between.isoformat()).load(table_uri)
    assert df.count() == 200
    exact = read().option("timestampAsOf", stamps[1].isoformat()).load(table_uri)
    assert exact.count() == 100
    assert spark.read.format("lance").load(table_uri).count() == 300


def test_time_travel_errors(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=2)

    def read():  # type: ignore[no-untyped-def]
        return spark.read.format("lance")

    with pytest.raises(Exception, match=r"version 9 .*does not exist; existing versions: 1-2"):
        read().option("version", 9).load(table_uri).collect()
    with pytest.raises(Exception, match="tag 'nope' does not exist"):
        read().option("tag", "nope").load(table_uri).collect()
    before = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    with pytest.raises(Exception, match="before the first version"):
        read().option("timestampAsOf", before).load(table_uri).collect()
    with pytest.raises(Exception, match="at most one"):
        read().option("version", 1).option("tag", "x").load(table_uri).collect()


def test_version_is_pinned_at_planning(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=1)
    df = spark.read.format("lance").load(table_uri)
    lance.write_dataset(
        pa.table({"id": pa.array([999], pa.int64()), "label": ["x"]}), table_uri, mode="append"
    )
    # A DataFrame planned before the append still sees one snapshot per action: the version
    # resolved when Spark planned it (a new action re-plans, like Delta).
    assert df.count() in (100, 101)
    assert spark.read.format("lance").option("version", 1).load(table_uri).count() == 100


def test_projection_by_columns_option_and_user_schema(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=1)
    by_option = spark.read.format("lance").option("columns", "label").load(table_uri)
    assert by_option.columns == ["label"]
    by_schema = spark.read.format("lance").schema("label string, id bigint").load(table_uri)
    assert by_schema.columns == ["label", "id"]
    assert sorted(r.id for r in by_schema.collect()) == list(range(100))
    case_insensitive = spark.read.format("lance").schema("ID bigint").load(table_uri)
    assert case_insensitive.columns == ["ID"] and case_insensitive.count() == 100


def test_projection_errors_name_the_column(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=1)
    with pytest.raises(Exception, match=r"column 'nope' does not exist.*columns: id, label"):
        spark.read.format("lance").option("columns", "id,nope").load(table_uri).collect()
    with pytest.raises(Exception, match="column 'nope' does not exist"):
        spark.read.format("lance").schema("nope string").load(table_uri).collect()
    with pytest.raises(Exception, match=r"'id' is declared as string.*stores it as bigint"):
        spark.read.format("lance").schema("id string").load(table_uri).collect()


def test_metadata_columns(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=2)
    df = (
        spark.read.format("lance")
        .option("metadata_columns", "_rowid,_rowaddr,_fragid")
        .load(table_uri)
    )
    assert df.columns == ["id", "label", "_rowid", "_rowaddr", "_fragid"]
    rows = df.collect()
    expected = lance.dataset(table_uri).to_table(with_row_address=True, columns=["id"])
    addr = dict(zip(expected["id"].to_pylist(), expected["_rowaddr"].to_pylist(), strict=True))
    for r in rows:
        assert r._rowaddr == addr[r.id]
        assert r._fragid == r._rowaddr >> 32
    assert {r._fragid for r in rows} == {0, 1}


def test_raw_lance_filter_option(spark: SparkSession, table_uri: str) -> None:
    _write_versions(table_uri, batches=1)
    df = spark.read.format("lance").option("filter", "id < 10 AND label = 'l1'").load(table_uri)
    assert _ids(df) == [1, 5, 9]


def test_missing_table_and_typo(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(Exception, match="no Lance table at"):
        spark.read.format("lance").load(table_uri).collect()
    _write_versions(table_uri, batches=1)
    with pytest.raises(Exception, match=r"unknown read option 'verison'.*Did you mean 'version'"):
        spark.read.format("lance").option("verison", 1).load(table_uri).collect()
    with pytest.raises(Exception, match="needs the table's path"):
        spark.read.format("lance").load().collect()


def test_empty_table_reads_as_empty(spark: SparkSession, table_uri: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array([], pa.int64())}), table_uri)
    assert spark.read.format("lance").load(table_uri).count() == 0


def test_fresh_dataframes_and_catalog_tables_avoid_the_spark_reader_cache(
    spark: SparkSession, table_uri: str
) -> None:
    _write_versions(table_uri, batches=1)

    def load():  # type: ignore[no-untyped-def]
        return spark.read.format("lance").load(table_uri)

    assert load().where("label = 'l1'").count() == 25
    assert load().count() == 100
    spark.sql(f"CREATE TABLE reader_cache USING lance LOCATION '{table_uri}'")
    try:
        assert spark.sql("SELECT count(*) FROM reader_cache WHERE label = 'l1'").first()[0] == 25
        assert spark.sql("SELECT count(*) FROM reader_cache").first()[0] == 100
    finally:
        spark.sql("DROP TABLE reader_cache")


def test_indexed_selective_filter_plans_only_matching_fragments(
    spark: SparkSession, table_uri: str
) -> None:
    from lance_spark import LanceTable

    spark.range(0, 40_000, numPartitions=4).selectExpr(
        "id", "concat('l', id % 7) AS label"
    ).write.format("lance").option("max_rows_per_file", "5000").mode("append").save(table_uri)
    table = LanceTable.forPath(spark, table_uri)
    reader = spark.read.format("lance").option("rows_per_partition", "5000")  # 8 partitions

    def run(condition: str) -> tuple[list[tuple[object, ...]], int]:
        frame = reader.load(table_uri).filter(condition)
        return sorted(tuple(r) for r in frame.collect()), _partitions(frame)

    conditions = ["id = 12345", "id >= 20000 AND id < 20040", "id IN (3, 39999)", "id < 0"]
    unindexed = {c: run(c) for c in conditions}
    table.createIndex("id", "BTREE")
    for condition in conditions:
        rows, partitions = run(condition)
        # The same rows as without the index, checked against Spark's own evaluation.
        assert rows == unindexed[condition][0]
        everything = spark.read.format("lance").load(table_uri).collect()
        expected = sorted(
            tuple(r) for r in spark.createDataFrame(everything).filter(condition).collect()
        )
        assert rows == expected
        assert partitions <= 2 < unindexed[condition][1], condition
    # Not selective enough to gain: the normal plan, same rows.
    rows, partitions = run("id >= 1000")
    assert len(rows) == 39_000 and partitions == 8
    # A filter on a column without an index: the normal plan, same rows.
    rows, partitions = run("label = 'l3'")
    assert len(rows) == len([i for i in range(40_000) if i % 7 == 3]) and partitions == 8
