"""``LanceTable.detail()`` and ``DESCRIBE DETAIL``: every field checked against pylance and
the files on disk."""

from __future__ import annotations

import os
from datetime import UTC

import lance
import pytest
from pyspark.sql import Row, SparkSession

from lance_spark import LanceTable

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _make(spark: SparkSession, uri: str) -> LanceTable:
    frame = spark.range(0, 40, numPartitions=2).selectExpr("id", "cast(id % 3 AS string) AS g")
    frame.write.format("lance").mode("append").save(uri)
    frame.write.format("lance").mode("append").save(uri)
    t = LanceTable.forPath(spark, uri)
    t.delete("id < 5")
    t.createIndex("id", "BTREE")
    t.createTag("v2", 2)
    lance.dataset(uri).update_config({"team": "ml"})
    return t


def _check(row: Row, uri: str) -> None:
    ds = lance.dataset(uri)
    fragments = ds.get_fragments()
    files = [f for fragment in fragments for f in fragment.data_files()]
    assert row["format"] == "lance" and row["id"] is None
    assert row["location"] == uri
    assert row["version"] == ds.version
    assert row["numFragments"] == len(fragments) >= 2
    assert row["numFiles"] == len(files)
    assert row["numDeletionFiles"] == sum(1 for f in fragments if f.metadata.deletion_file) >= 1
    on_disk = sum(os.path.getsize(os.path.join(uri, "data", f.path)) for f in files)
    assert row["sizeInBytes"] == on_disk > 0
    assert row["numRows"] == ds.count_rows() == 70
    assert row["numDeletedRows"] == 10
    assert row["schema"] == "struct<id:bigint,g:string>"
    expected_indexes = [
        (str(d.name), [str(c) for c in d.field_names], str(d.index_type))
        for d in ds.describe_indices()
    ]
    assert [(i["name"], i["columns"], i["type"]) for i in row["indexes"]] == expected_indexes
    assert [i["columns"] for i in row["indexes"]] == [["id"]]
    assert row["tags"] == {"v2": 2}
    assert row["storageFormatVersion"] == str(ds.data_storage_version)
    assert row["stableRowIds"] == ds.has_stable_row_ids
    assert row["properties"] == {"team": "ml"}
    assert row["description"] is None  # no comment: see test_table_builder for one
    assert row["partitionColumns"] == []
    stamps = [v["timestamp"].astimezone(UTC) for v in ds.versions()]
    assert row["lastModified"].astimezone(UTC) == stamps[-1]
    assert row["createdAt"].astimezone(UTC) == stamps[0]


def test_detail_matches_pylance(spark: SparkSession, table_uri: str) -> None:
    t = _make(spark, table_uri)
    row = t.detail().collect()
    assert len(row) == 1
    _check(row[0], table_uri)
    assert row[0]["name"] is None


def test_describe_detail_in_sql(spark: SparkSession, table_uri: str) -> None:
    _make(spark, table_uri)
    by_path = spark.sql(f"DESCRIBE DETAIL lance.`{table_uri}`").collect()[0]
    _check(by_path, table_uri)
    quoted = spark.sql(f"DESCRIBE DETAIL '{table_uri}'").collect()[0]
    _check(quoted, table_uri)
    spark.sql(f"CREATE TABLE detail_pets USING lance LOCATION '{table_uri}'")
    try:
        named = spark.sql("DESCRIBE DETAIL detail_pets").collect()[0]
        _check(named, table_uri)
        assert named["name"] == "detail_pets"
        assert LanceTable.forName(spark, "detail_pets").detail().first()["name"] == "detail_pets"
        for statement in ("DESCRIBE EXTENDED", "DESCRIBE TABLE FORMATTED", "DESC EXTENDED"):
            rows = spark.sql(f"{statement} detail_pets").collect()
            info = {str(r[0]).strip(): r[1] for r in rows}
            assert info["Provider"] == "lance"
            assert info["Location"] == "file:" + table_uri  # Spark's catalog keeps a URI
            assert info["Type"] == "EXTERNAL"
            assert info["Table Properties"] == "[team=ml]"
            assert [r[0] for r in rows[:2]] == ["id", "g"]  # Spark's column rows first
        column = spark.sql("DESCRIBE EXTENDED detail_pets id").collect()  # Spark's own
        assert {r[0] for r in column} >= {"col_name", "data_type"}
    finally:
        spark.sql("DROP TABLE detail_pets")
