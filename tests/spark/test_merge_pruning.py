"""MERGE key pruning through the table API (the companion prunes the MERGE Spark plans; which
conditions prune is in tests/spark/test_sql_dml.py): the source is cached while it is needed
and no longer, and a pruned MERGE leaves exactly the table the unpruned one does (checked
with pylance)."""

from __future__ import annotations

from typing import Any

import lance
import pytest
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable, _spark

MAX_SOURCE_ROWS_CONF = "spark.lance.merge.keyPruning.maxSourceRows"

pytestmark = pytest.mark.spark


def _target(spark: SparkSession, uri: str, rows: int = 1000) -> DataFrame:
    df = spark.range(rows, numPartitions=3).select(
        F.col("id"),
        (F.col("id") * 10).cast("int").alias("n"),
        F.col("id").cast("string").alias("s"),
    )
    df.write.format("lance").option("max_rows_per_file", "300").mode("overwrite").save(uri)
    return spark.read.format("lance").load(uri)


def test_a_source_that_reads_data_is_released_after_the_merge(
    spark: SparkSession, table_uri: str, tmp_path: object
) -> None:
    """Spark evaluates the source twice when the target is pruned by its keys (the keys,
    then the join): a source reading a table is cached for the statement, so both see the
    same rows, and released after it."""
    _target(spark, table_uri, rows=10)
    other = f"{tmp_path}/source.lance"
    spark.createDataFrame([(1, 5, "x"), (20, 7, "y")], "id long, n int, s string").write.format(
        "lance"
    ).save(other)
    source = spark.read.format("lance").load(other)
    row = (
        LanceTable.forPath(spark, table_uri)
        .alias("t")
        .merge(source.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .first()
    )
    assert row is not None and tuple(row) == (2, 1, 0, 1)
    assert source.storageLevel == StorageLevel.NONE
    ids = sorted(r["id"] for r in lance.dataset(table_uri).to_table(columns=["id"]).to_pylist())
    assert ids == [*range(10), 20]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda spark, _: spark.range(5).selectExpr("id", "id * 2 AS n"), True),
        (lambda spark, _: spark.sql("SELECT * FROM VALUES (1, 'a'), (2, 'b') AS v(id, s)"), True),
        (lambda spark, _: spark.range(5).withColumn("r", F.rand(3)), False),
        (lambda spark, _: spark.range(5).withColumn("ts", F.current_timestamp()), False),
        (lambda spark, _: spark.createDataFrame([(1,)], "id long"), False),  # an RDD
        (lambda spark, uri: spark.read.format("lance").load(uri), False),  # reads a table
    ],
)
def test_which_sources_only_generate_rows(
    spark: SparkSession, table_uri: str, make: Any, expected: bool
) -> None:
    _target(spark, table_uri, rows=10)
    # Spark Connect shows no analysed plan: always False there (the source is cached).
    assert _spark.generates_rows(make(spark, table_uri)) is (
        expected and not _spark.is_connect(spark)
    )


def test_a_source_the_caller_cached_stays_cached(spark: SparkSession, table_uri: str) -> None:
    _target(spark, table_uri, rows=10)
    source = spark.createDataFrame([(1, 1, "x")], "id long, n int, s string").cache()
    try:
        LanceTable.forPath(spark, table_uri).alias("t").merge(
            source.alias("s"), "s.id = t.id"
        ).whenMatchedUpdateAll().execute()
        assert source.storageLevel != StorageLevel.NONE
    finally:
        source.unpersist()


def test_max_source_rows_conf_is_validated(spark: SparkSession, table_uri: str) -> None:
    _target(spark, table_uri, rows=10)
    source = spark.createDataFrame([(1, 1, "x")], "id long, n int, s string")
    merge = (
        LanceTable.forPath(spark, table_uri)
        .alias("t")
        .merge(source.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
    )
    spark.conf.set(MAX_SOURCE_ROWS_CONF, "lots")
    try:
        with pytest.raises(Exception, match=f"{MAX_SOURCE_ROWS_CONF}=lots is not a whole number"):
            merge.execute()
    finally:
        spark.conf.unset(MAX_SOURCE_ROWS_CONF)
    assert tuple(merge.execute().first() or ()) == (1, 1, 0, 0)


def _upsert(spark: SparkSession, uri: str, source: DataFrame, max_rows: int) -> tuple[int, ...]:
    spark.conf.set(MAX_SOURCE_ROWS_CONF, str(max_rows))
    try:
        row = (
            LanceTable.forPath(spark, uri)
            .alias("t")
            .merge(source.alias("s"), "s.id = t.id AND t.n >= 0")
            .whenMatchedDelete("s.s = 'delete'")
            .whenMatchedUpdate(set={"n": "t.n + s.n", "s": "s.s"})
            .whenNotMatchedInsertAll("s.id % 2 = 0")
            .execute()
            .collect()[0]
        )
    finally:
        spark.conf.unset(MAX_SOURCE_ROWS_CONF)
    return tuple(row)


def test_pruned_merge_leaves_the_same_table_as_the_full_join(
    spark: SparkSession, tmp_path: object
) -> None:
    source = spark.range(900, 1100, 3).select(
        F.col("id"),
        F.lit(1).alias("n"),
        F.when(F.col("id") % 5 == 0, "delete").otherwise(F.col("id").cast("string")).alias("s"),
    )
    tables = {}
    for max_rows in (1000, 0):  # pruned, then the plain join over every target row
        uri = f"{tmp_path}/t{max_rows}.lance"
        _target(spark, uri)
        metrics = _upsert(spark, uri, source, max_rows)
        tables[max_rows] = (metrics, sorted(lance.dataset(uri).to_table().to_pylist(), key=str))
    assert tables[1000] == tables[0]
    metrics, rows = tables[1000]
    assert metrics[1:] == (27, 7, 17)  # updated, deleted, inserted (a third of 200 ids)
    assert len(rows) == 1000 - 7 + 17
