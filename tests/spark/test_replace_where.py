"""replaceWhere and overwriteSchema: Delta's overwrite options on Lance tables."""

from __future__ import annotations

import json
import os

import lance
import pytest
from pyspark.sql import DataFrame, SparkSession

import lance_spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

NEW_YEAR = "day >= DATE '2026-01-01'"


def _days(spark: SparkSession, start: int, n: int, tag: str) -> DataFrame:
    # Rows of 2025-12-27 + id days: the first 5 are in 2025, the rest in 2026.
    return spark.range(start, start + n, numPartitions=3).selectExpr(
        "id", "date_add(DATE '2025-12-27', CAST(id AS INT)) AS day", f"'{tag}' AS src"
    )


def _rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _files(uri: str) -> set[str]:
    found = set()
    for folder in ("data", "_deletions"):
        path = os.path.join(uri, folder)
        if os.path.isdir(path):
            found |= {f"{folder}/{name}" for name in os.listdir(path)}
    return found


def test_replace_where_replaces_matching_rows_in_one_version(
    spark: SparkSession, table_uri: str
) -> None:
    old = _days(spark, 0, 12, "old")
    old.write.format("lance").mode("append").save(table_uri)
    new = _days(spark, 5, 4, "new")  # 2026 days only
    new.write.format("lance").option("replaceWhere", NEW_YEAR).mode("overwrite").save(table_uri)

    ds = lance.dataset(table_uri)
    assert ds.version == 2  # the delete and the append are ONE version
    expected = old.where(f"NOT ({NEW_YEAR})").unionByName(new)  # Spark's own evaluation
    assert _rows(spark.read.format("lance").load(table_uri)) == _rows(expected)
    assert sorted(
        (r["id"], r["src"]) for r in ds.to_table(columns=["id", "src"]).to_pylist()
    ) == sorted((r["id"], r["src"]) for r in expected.collect())
    entry = ds.get_transactions(1)[0]
    assert entry is not None
    props = entry.transaction_properties or {}
    assert json.loads(props["lance_spark.operationParameters"]) == {
        "mode": "Overwrite",
        "predicate": NEW_YEAR,
    }
    metrics = json.loads(props["lance_spark.operationMetrics"])
    assert metrics["numDeletedRows"] == 7 and metrics["numOutputRows"] == 4
    # version 1 is untouched by the replace
    assert lance.dataset(table_uri, version=1).count_rows() == 12


def test_replace_where_with_a_row_outside_the_predicate_commits_nothing(
    spark: SparkSession, table_uri: str
) -> None:
    _days(spark, 0, 12, "old").write.format("lance").mode("append").save(table_uri)
    before = _files(table_uri)
    bad = _days(spark, 3, 4, "new")  # ids 3 and 4 are 2025 days
    with pytest.raises(lance_spark.ReplaceWhereMismatchError, match=r"MISMATCH.*day >= DATE"):
        bad.write.format("lance").option("replaceWhere", NEW_YEAR).mode("overwrite").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 1 and ds.count_rows() == 12
    assert _files(table_uri) == before  # the tasks' files are gone again


def test_replace_where_null_does_not_match(spark: SparkSession, table_uri: str) -> None:
    _days(spark, 0, 8, "old").write.format("lance").mode("append").save(table_uri)
    nulls = spark.range(1).selectExpr("100 AS id", "CAST(NULL AS DATE) AS day", "'n' AS src")
    with pytest.raises(lance_spark.ReplaceWhereMismatchError, match="DELTA_REPLACE_WHERE_MISMATCH"):
        nulls.write.format("lance").option("replaceWhere", NEW_YEAR).mode("overwrite").save(
            table_uri
        )
    assert lance.dataset(table_uri).version == 1


def test_replace_where_deleting_whole_fragments_and_writing_nothing(
    spark: SparkSession, table_uri: str
) -> None:
    old = _days(spark, 0, 12, "old")
    old.write.format("lance").mode("append").save(table_uri)
    empty = _days(spark, 0, 12, "x").where("id < 0")
    empty.write.format("lance").option("replaceWhere", "id >= 0").mode("overwrite").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.count_rows() == 0
    assert spark.read.format("lance").load(table_uri).count() == 0
    # nothing matched, nothing written: no version
    empty.write.format("lance").option("replaceWhere", "id >= 0").mode("overwrite").save(table_uri)
    assert lance.dataset(table_uri).version == 2


def test_replace_where_errors_name_the_option(spark: SparkSession, table_uri: str) -> None:
    _days(spark, 0, 6, "old").write.format("lance").mode("append").save(table_uri)
    new = _days(spark, 5, 1, "new")
    with pytest.raises(
        lance_spark.InvalidOptionError, match=r"replaceWhere.*needs mode\('overwrite'\)"
    ):
        new.write.format("lance").option("replaceWhere", NEW_YEAR).mode("append").save(table_uri)
    with pytest.raises(
        lance_spark.InvalidOptionError, match=r"replaceWhere=.nope > 1. cannot be evaluated.*nope"
    ):
        new.write.format("lance").option("replaceWhere", "nope > 1").mode("overwrite").save(
            table_uri
        )
    with pytest.raises(
        lance_spark.InvalidOptionError, match="replaceWhere and overwriteSchema cannot be used"
    ):
        new.write.format("lance").option("replaceWhere", NEW_YEAR).option(
            "overwriteSchema", "true"
        ).mode("overwrite").save(table_uri)
    assert lance.dataset(table_uri).version == 1


def test_overwrite_keeps_the_schema_unless_overwrite_schema(
    spark: SparkSession, table_uri: str
) -> None:
    _days(spark, 0, 6, "old").write.format("lance").mode("append").save(table_uri)
    other = spark.range(3).selectExpr("id", "id * 2 AS twice")
    with pytest.raises(lance_spark.SchemaMismatchError, match=r"'twice'.*overwriteSchema=true"):
        other.write.format("lance").mode("overwrite").save(table_uri)
    assert lance.dataset(table_uri).version == 1

    # Delta's rule: the table's columns and types stay; missing columns are null
    spark.range(2).selectExpr("CAST(id AS INT) AS id").write.format("lance").mode("overwrite").save(
        table_uri
    )
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.schema.names == ["id", "day", "src"]
    assert str(ds.schema.field("id").type) == "int64"
    assert ds.to_table().to_pylist() == [
        {"id": 0, "day": None, "src": None},
        {"id": 1, "day": None, "src": None},
    ]

    other.write.format("lance").option("overwriteSchema", "true").mode("overwrite").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 3 and ds.schema.names == ["id", "twice"]
    assert _rows(spark.read.format("lance").load(table_uri)) == _rows(other)


def test_overwrite_with_merge_schema_adds_columns(spark: SparkSession, table_uri: str) -> None:
    _days(spark, 0, 3, "old").write.format("lance").mode("append").save(table_uri)
    wider = _days(spark, 0, 2, "new").selectExpr("*", "id + 1 AS extra")
    wider.write.format("lance").option("mergeSchema", "true").mode("overwrite").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.schema.names == ["id", "day", "src", "extra"]
    assert _rows(spark.read.format("lance").load(table_uri)) == _rows(wider)


def test_overwrite_with_the_vector_size_option_makes_a_list_column_a_vector(
    spark: SparkSession, table_uri: str
) -> None:
    frame = spark.range(3).selectExpr("id", "array(CAST(id AS FLOAT), 1.0f) AS v")
    frame.write.format("lance").mode("append").save(table_uri)
    assert str(lance.dataset(table_uri).schema.field("v").type).startswith("list")
    frame.write.format("lance").option("v.arrow.fixed-size-list.size", "2").mode("overwrite").save(
        table_uri
    )
    ds = lance.dataset(table_uri)
    assert ds.schema.field("v").type.list_size == 2
    assert _rows(spark.read.format("lance").load(table_uri)) == _rows(frame)
