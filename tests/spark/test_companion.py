"""The JVM companion through Spark: each read is its own scan (pruned columns, pushed LIMIT and
COUNT, statistics, Arrow columns), checked against Spark's own Parquet reader on the same data.

``register`` turns the companion on for the classic session; the Connect server loads it from
its configuration (``lance_spark.spark_conf()``, see conftest). Every test runs in both modes.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import _spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

ROWS = 600
COMPANION_CONF = "spark.lance.companion.enabled"


def _table(rows: int = ROWS) -> pa.Table:
    ids = list(range(rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            # an unsorted string key
            "key": pa.array([f"k{(i * 7919) % rows:05d}" for i in ids]),
            "x": pa.array([(i * 37 % 101) * 0.5 for i in ids]),
            "label": pa.array([f"l{i % 5}" if i % 11 else None for i in ids]),
            "s": pa.array([{"a": i, "b": f"b{i}"} for i in ids]),
            "v": pa.array([[float(i), float(i) / 2] for i in ids], pa.list_(pa.float32())),
        }
    )


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same rows as a Lance table (several fragments) and as a Parquet folder."""
    base = tmp_path_factory.mktemp("companion")
    table = _table()
    lance_uri = str(base / "t.lance")
    lance.write_dataset(table, lance_uri, max_rows_per_file=150)
    parquet_dir = base / "t.parquet"
    parquet_dir.mkdir()
    pq.write_table(table, parquet_dir / "part-0.parquet", row_group_size=100)
    return lance_uri, str(parquet_dir)


@pytest.fixture
def frames(spark: SparkSession, paths: tuple[str, str]) -> tuple[DataFrame, DataFrame]:
    lance_uri, parquet_dir = paths
    return spark.read.format("lance").load(lance_uri), spark.read.parquet(parquet_dir)


def plan(df: DataFrame) -> str:
    """The physical plan ``df.explain()`` prints (classic and Connect)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


def counted_by_lance(df: DataFrame) -> bool:
    """A completely pushed ``COUNT(*)``: the answer is a one-row local scan, no table scan."""
    text = plan(df)
    return "LocalTableScan [count(*)" in text and "BatchScan" not in text


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


@contextlib.contextmanager
def conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def test_companion_is_on(spark: SparkSession) -> None:
    assert _spark.companion_enabled(spark)


def test_reader_receives_only_the_needed_columns(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames

    def query(d: DataFrame) -> DataFrame:
        return d.select("id", "label").where("x > 20")

    text = plan(query(lance_df))
    # The Python reader reads the two output columns; x only for the filter, which Lance runs.
    assert "ReadColumns=[id, label]" in text, text
    assert "ColumnarToRow" in text  # Arrow batches reach Spark as columns
    assert rows(query(lance_df)) == rows(query(parquet_df))


def test_nested_fields_are_pruned(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames

    def query(d: DataFrame) -> DataFrame:
        return d.select("id", "s.a").where("id < 40")

    text = plan(query(lance_df))
    assert "ReadSchema=struct<id:bigint,s:struct<a:bigint>>" in text, text
    assert rows(query(lance_df)) == rows(query(parquet_df))


def test_count_reads_no_data(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames
    assert counted_by_lance(lance_df.groupBy().count())
    assert lance_df.count() == parquet_df.count() == ROWS
    pushed = lance_df.where("x > 20 AND label = 'l2'")
    assert counted_by_lance(pushed.groupBy().count())
    assert pushed.count() == parquet_df.where("x > 20 AND label = 'l2'").count() > 0
    # A filter Lance cannot run stays in Spark: the count is Spark's, over pruned columns.
    kept = (F.col("id") % 7 == 3) & (F.col("x") > 10)
    assert not counted_by_lance(lance_df.where(kept).groupBy().count())
    assert lance_df.where(kept).count() == parquet_df.where(kept).count() > 0
    # Two counts in one aggregate, and count next to another aggregate.
    both = lance_df.agg(F.count(F.lit(1)).alias("a"), F.count("*").alias("b"))
    assert both.first() == (ROWS, ROWS)
    mixed = lance_df.agg(F.count(F.lit(1)), F.sum("id"))
    assert mixed.first() == parquet_df.agg(F.count(F.lit(1)), F.sum("id")).first()


def test_count_with_no_column_needed_but_no_aggregate_push(
    frames: tuple[DataFrame, DataFrame],
) -> None:
    lance_df, parquet_df = frames
    # No column of the table is needed: the scan reads one narrow column to count rows.
    assert lance_df.select(F.lit(1).alias("one")).count() == ROWS
    assert rows(lance_df.select(F.lit(1).alias("one")).distinct()) == [(1,)]
    assert lance_df.crossJoin(parquet_df.select("id").limit(2)).count() == 2 * ROWS


def test_limit_is_pushed_when_every_filter_is(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames
    assert "PushedLimit=7" in plan(lance_df.limit(7))
    assert len(lance_df.limit(7).collect()) == 7
    filtered = lance_df.where("x > 40").limit(4)
    assert "PushedLimit=4" in plan(filtered)
    got = filtered.collect()
    assert len(got) == 4 and all(r.x > 40 for r in got)
    assert len(lance_df.where("x > 1000").limit(3).collect()) == 0
    # The rows are whole and right (the batch is read before the stream's end is).
    assert lance_df.where("id = 12").first() == parquet_df.where("id = 12").first()
    by_id = {r.id: r for r in parquet_df.collect()}
    assert all(by_id[r.id] == r for r in lance_df.limit(25).collect())


def test_limit_with_filters_spark_keeps(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames

    @F.udf("boolean")
    def odd(i: int) -> bool:
        return i % 2 == 1

    for condition in (F.col("id") % 7 == 3, odd("id"), (F.col("id") % 7 == 3) & (F.col("x") > 5)):
        query = lance_df.where(condition).limit(5)
        assert "PushedLimit" not in plan(query)
        got = query.collect()
        expected = parquet_df.where(condition)
        assert len(got) == 5
        assert {r.id for r in got} <= {r.id for r in expected.collect()}
    # A sort between the scan and the LIMIT: nothing is pushed, the first rows are exact.
    top = lance_df.orderBy(F.col("x").desc(), "id").limit(6)
    assert "PushedLimit" not in plan(top)
    assert top.collect() == parquet_df.orderBy(F.col("x").desc(), "id").limit(6).collect()


def test_reused_dataframe_after_a_filtered_query(frames: tuple[DataFrame, DataFrame]) -> None:
    def queries(d: DataFrame) -> list[Any]:
        return [
            d.where("x > 25").count(),
            d.count(),  # the same DataFrame, no filter (SPARK-58551 read too few rows)
            d.where("label = 'l1'").count(),
            d.select("id").count(),
            d.where("x > 25").select("id").limit(1000).count(),
            sorted(r.id for r in d.collect()),
        ]

    lance_df, parquet_df = frames
    assert queries(lance_df) == queries(parquet_df)


def test_temp_view_queried_twice(
    spark: SparkSession, frames: tuple[DataFrame, DataFrame], view: Callable[[Any], str]
) -> None:
    def queries(name: str) -> list[Any]:
        return [
            spark.sql(f"SELECT count(*) FROM {name} WHERE x > 25").first()[0],
            spark.sql(f"SELECT count(*), sum(id) FROM {name}").first(),
            spark.sql(
                f"SELECT label, count(*) c FROM {name} GROUP BY label ORDER BY label"
            ).collect(),
        ]

    lance_df, parquet_df = frames
    assert queries(view(lance_df)) == queries(view(parquet_df))


def test_self_join_with_two_filters(frames: tuple[DataFrame, DataFrame]) -> None:
    def join(d: DataFrame) -> DataFrame:
        low = d.where("x < 30").select("id", F.col("x").alias("x1"))
        labelled = d.where("label = 'l3'").select("id", F.col("label").alias("l2"))
        return low.join(labelled, "id")

    lance_df, parquet_df = frames
    expected = rows(join(parquet_df))
    assert expected
    assert rows(join(lance_df)) == expected


def test_cached_dataframe(frames: tuple[DataFrame, DataFrame]) -> None:
    lance_df, parquet_df = frames
    results = []
    for d in (lance_df, parquet_df):
        cached = d.where("x > 10").select("id", "x", "label").cache()
        try:
            results.append(
                [
                    cached.count(),
                    d.count(),
                    rows(cached.where("label = 'l4'")),
                    cached.agg(F.sum("x")).first()[0],
                ]
            )
        finally:
            cached.unpersist()
    assert results[0] == results[1]


def test_small_lance_table_is_broadcast(
    spark: SparkSession, tmp_path: Path, frames: tuple[DataFrame, DataFrame]
) -> None:
    small_uri = str(tmp_path / "small.lance")
    lance.write_dataset(
        pa.table({"label": [f"l{i}" for i in range(5)], "rank": list(range(5))}), small_uri
    )
    small = spark.read.format("lance").load(small_uri)
    _, big = frames  # Parquet, ~40 KB: larger than the threshold set below
    with (
        conf(spark, "spark.sql.autoBroadcastJoinThreshold", "20000"),
        conf(spark, "spark.sql.adaptive.enabled", "false"),
    ):
        joined = big.join(small, "label")
        text = plan(joined)
        assert "BroadcastHashJoin" in text, text
        # The broadcast side is the Lance scan (statistics from its manifest).
        exchange = text.index("BroadcastExchange")
        assert "LanceScan" in text[exchange:], text
        got = rows(joined.select("id", "rank"))
    assert got == sorted(((i, i % 5) for i in range(ROWS) if i % 11), key=repr)


def test_catalog_table(spark: SparkSession, paths: tuple[str, str]) -> None:
    lance_uri, parquet_dir = paths
    spark.sql(f"CREATE TABLE companion_catalog USING lance LOCATION '{lance_uri}'")
    try:
        counted = spark.sql("SELECT count(*) FROM companion_catalog WHERE x > 25")
        assert counted_by_lance(counted)
        expected = spark.read.parquet(parquet_dir).where("x > 25").count()
        assert counted.first()[0] == expected
        labels = spark.sql("SELECT label FROM companion_catalog WHERE id < 30")
        assert "ReadColumns=[label]" in plan(labels)
        assert len(labels.collect()) == 30
    finally:
        spark.sql("DROP TABLE companion_catalog")


def test_switched_off_for_a_session(
    spark: SparkSession, frames: tuple[DataFrame, DataFrame]
) -> None:
    lance_df, parquet_df = frames
    with conf(spark, COMPANION_CONF, "false"):
        text = plan(lance_df.select("id"))
        assert "LanceScan" not in text and "(Python)" in text, text
        assert rows(lance_df.where("x > 20").select("id")) == rows(
            parquet_df.where("x > 20").select("id")
        )
    assert "LanceScan" in plan(lance_df.select("id"))


def test_time_travel_through_the_companion(spark: SparkSession, table_uri: str) -> None:
    first = pa.table({"id": pa.array(range(10), pa.int64())})
    lance.write_dataset(first, table_uri)
    lance.write_dataset(
        pa.table({"id": pa.array(range(10, 25), pa.int64())}), table_uri, mode="append"
    )
    old = spark.read.format("lance").option("version", 1).load(table_uri)
    assert "Version=1" in plan(old.where("id > 3"))
    assert old.count() == 10
    assert sorted(r.id for r in old.where("id > 3").limit(100).collect()) == list(range(4, 10))
    assert spark.read.format("lance").load(table_uri).count() == 25


def test_table_api_with_its_own_storage_options(
    spark: SparkSession, paths: tuple[str, str]
) -> None:
    from lance_spark import LanceTable

    lance_uri, parquet_dir = paths
    # Storage options other than the session's: reads go through a private format.
    frame = LanceTable.forPath(spark, lance_uri, {"allow_http": "true"}).toDF()
    assert "LanceScan" in plan(frame.select("id"))
    parquet_df = spark.read.parquet(parquet_dir)
    assert [frame.where("x > 25").count(), frame.count()] == [
        parquet_df.where("x > 25").count(),
        ROWS,
    ]


def test_column_vectors_read_what_spark_reads_without_the_companion(
    spark: SparkSession, table_uri: str
) -> None:
    """Every type the companion's column vectors read by address (nulls, empty and unicode
    strings, NaN, lists with null elements), over many small batches and fragments; the
    reference is Spark's own Arrow column vectors (the companion switched off)."""
    from datetime import UTC, date, datetime

    n = 97
    rows = range(n)

    def nullable(values: list[Any], every: int) -> list[Any]:
        return [None if i % every == 0 else v for i, v in enumerate(values)]

    table = pa.table(
        {
            "b": pa.array(nullable([i % 3 == 0 for i in rows], 5), pa.bool_()),
            "i8": pa.array(nullable([i % 100 - 50 for i in rows], 7), pa.int8()),
            "i16": pa.array(nullable([i * 300 - 9000 for i in rows], 6), pa.int16()),
            "i32": pa.array([i * 70_000 for i in rows], pa.int32()),
            "i64": pa.array(nullable([i * 2**40 for i in rows], 4), pa.int64()),
            "f32": pa.array(
                nullable([float("nan") if i == 3 else i / 3 for i in rows], 8), pa.float32()
            ),
            "f64": pa.array([-0.0 if i == 2 else i * 1.5 for i in rows], pa.float64()),
            "s": pa.array(nullable(["" if i % 4 == 1 else f"é{i}✓" * (i % 3) for i in rows], 3)),
            "bin": pa.array(nullable([bytes([i % 256]) * (i % 4) for i in rows], 5), pa.binary()),
            "d": pa.array(nullable([date(2020, 1, 1 + i % 28) for i in rows], 9), pa.date32()),
            "ts": pa.array(
                nullable([datetime(2021, 5, 1, i % 24, tzinfo=UTC) for i in rows], 10),
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array([datetime(1999, 12, 31, 23, i % 60) for i in rows], pa.timestamp("us")),
            "vec": pa.array(
                nullable([[float(i), None if i % 5 == 2 else -float(i)] for i in rows], 6),
                pa.list_(pa.float32()),
            ),
            "words": pa.array(
                nullable([[f"w{i}", None, ""][: i % 4] for i in rows], 7), pa.list_(pa.string())
            ),
            "st": pa.array([{"a": i, "t": f"t{i}"} if i % 8 else None for i in rows]),
        }
    )
    lance.write_dataset(table, table_uri, max_rows_per_file=40)

    def read() -> list[tuple[Any, ...]]:
        frame = spark.read.format("lance").option("batch_size", "7").load(table_uri)
        return [tuple(r) for r in frame.orderBy("i32").collect()]

    with_companion = read()
    with conf(spark, COMPANION_CONF, "false"):
        without = read()
    assert len(with_companion) == n

    def same(a: Any, b: Any) -> bool:  # NaN equals NaN, -0.0 is not 0.0
        if isinstance(a, float) and isinstance(b, float):
            return repr(a) == repr(b)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)

    for got, expected in zip(with_companion, without, strict=True):
        assert same(got, expected), (got, expected)
