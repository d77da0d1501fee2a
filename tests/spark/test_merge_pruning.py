"""MERGE key pruning: which conditions prune, what the pushed filter keeps, and that a pruned
MERGE leaves exactly the table the unpruned one does (checked with pylance)."""

from __future__ import annotations

from typing import Any

import lance
import pytest
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable, _spark
from lance_spark.errors import InvalidOptionError
from lance_spark.table.merge_pruning import (
    MAX_SOURCE_ROWS_CONF,
    EquiKey,
    KeyPruner,
    find_equi_key,
    generates_rows,
    max_source_rows,
)

pytestmark = pytest.mark.spark


def _target(spark: SparkSession, uri: str, rows: int = 1000) -> DataFrame:
    df = spark.range(rows, numPartitions=3).select(
        F.col("id"),
        (F.col("id") * 10).cast("int").alias("n"),
        F.col("id").cast("string").alias("s"),
    )
    df.write.format("lance").option("max_rows_per_file", "300").mode("overwrite").save(uri)
    return spark.read.format("lance").load(uri)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("s.id = t.id", EquiKey("id", "id")),
        ("t.id = s.id AND t.n < 25", EquiKey("id", "id")),
        ("t.n > 3 AND s.key = t.id", EquiKey("id", "key")),
        ("s.id <=> t.id", None),  # null-safe: NULL keys match too
        ("t.n > s.n", None),
        ("s.id = t.id OR s.n = t.n", None),
        ("s.small = t.id", None),  # int vs long: the equality compares casts
        ("s.id + 1 = t.id", None),
    ],
)
def test_find_equi_key(
    spark: SparkSession, table_uri: str, condition: str, expected: EquiKey | None
) -> None:
    target = _target(spark, table_uri, rows=10).alias("t")
    source = spark.createDataFrame([(1, 1, 1, 1)], "id long, key long, n int, small int").alias("s")
    assert find_equi_key(target, source, F.expr(condition)) == expected


def test_predicate_keeps_only_the_source_keys(spark: SparkSession, table_uri: str) -> None:
    _target(spark, table_uri)
    source = spark.createDataFrame([(5,), (7,), (7,), (None,), (5000,)], "id long")
    pruner = KeyPruner(source, max_rows=10, enabled=True)
    try:
        predicate = pruner.predicate(EquiKey("id", "id"), lance.dataset(table_uri).schema)
        assert predicate is not None
        kept = lance.dataset(table_uri).to_table(filter=predicate, columns=["id"])
        assert sorted(kept.column("id").to_pylist()) == [5, 7]
        # The source stays cached until release(): both of its evaluations see the same rows.
        assert source.storageLevel != StorageLevel.NONE
    finally:
        pruner.release()
    assert source.storageLevel == StorageLevel.NONE


def test_generated_sources_are_not_cached(spark: SparkSession, table_uri: str) -> None:
    _target(spark, table_uri)
    source = spark.range(0, 2000, 7).select((F.col("id") + 1).alias("id"), F.lit("x").alias("s"))
    pruner = KeyPruner(source, max_rows=1000, enabled=True)
    try:
        predicate = pruner.predicate(EquiKey("id", "id"), lance.dataset(table_uri).schema)
        assert predicate is not None
        kept = lance.dataset(table_uri).to_table(filter=predicate, columns=["id"])
        assert sorted(kept.column("id").to_pylist()) == list(range(1, 1000, 7))
        # Recomputing it gives the same rows; Spark Connect shows no plan to tell: cached there.
        cached = source.storageLevel != StorageLevel.NONE
        assert cached is _spark.is_connect(spark)
    finally:
        pruner.release()


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
    assert generates_rows(make(spark, table_uri)) is (expected and not _spark.is_connect(spark))


def test_no_predicate_when_disabled_or_the_source_is_too_large(
    spark: SparkSession, table_uri: str
) -> None:
    _target(spark, table_uri, rows=10)
    schema = lance.dataset(table_uri).schema
    source = spark.createDataFrame([(1,), (2,), (3,)], "id long")
    key = EquiKey("id", "id")
    assert KeyPruner(source, max_rows=2, enabled=True).predicate(key, schema) is None
    assert KeyPruner(source, max_rows=3, enabled=False).predicate(key, schema) is None
    assert KeyPruner(source, max_rows=0, enabled=True).predicate(key, schema) is None
    assert source.storageLevel == StorageLevel.NONE  # nothing was cached for nothing


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


def test_max_source_rows_conf_is_validated(spark: SparkSession) -> None:
    spark.conf.set(MAX_SOURCE_ROWS_CONF, "lots")
    try:
        with pytest.raises(InvalidOptionError, match=MAX_SOURCE_ROWS_CONF):
            max_source_rows(spark)
    finally:
        spark.conf.unset(MAX_SOURCE_ROWS_CONF)
    assert max_source_rows(spark) > 0


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
