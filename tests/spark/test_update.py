"""LanceTable.update: one Spark job rewrites only the matching rows, one Update commit."""

from __future__ import annotations

import os

import lance
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable
from lance_spark.errors import InvalidArgumentError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _table(spark: SparkSession, uri: str) -> LanceTable:
    spark.range(0, 1000, numPartitions=4).selectExpr(
        "id",
        "concat('l', id % 3) AS label",
        "cast(id % 7 AS int) AS age",
        "array(cast(id AS float), 0.5f) AS v",
    ).write.format("lance").option("v.arrow.fixed-size-list.size", "2").mode("append").save(uri)
    return LanceTable.forPath(spark, uri)


def _rows(uri: str) -> dict[int, dict[str, object]]:
    return {r["id"]: r for r in lance.dataset(uri).to_table().to_pylist()}


def test_update_matches_spark_evaluation_and_rewrites_only_touched_fragments(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    before = _rows(table_uri)
    frags_before = {f.fragment_id: f.metadata for f in lance.dataset(table_uri).get_fragments()}
    result = t.update(
        condition="id < 100 AND label = 'l1'", set={"label": "'Bob'", "age": "age + 2"}
    )
    assert result.first().num_affected_rows == 33
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.count_rows() == 1000
    assert ds.schema.field("v").type.list_size == 2  # the table's types are kept
    after = _rows(table_uri)
    for i, old in before.items():
        if i < 100 and old["label"] == "l1":
            assert after[i] == {**old, "label": "Bob", "age": old["age"] + 2}
        else:
            assert after[i] == old
    touched = {
        fid
        for fid, meta in frags_before.items()
        if any(f.fragment_id == fid and f.metadata.deletion_file for f in ds.get_fragments())
    }
    assert touched == {0}
    untouched = {
        f.fragment_id: f.metadata for f in ds.get_fragments() if f.fragment_id in (1, 2, 3)
    }
    for fid, meta in untouched.items():
        assert meta.files[0].path == frags_before[fid].files[0].path
        assert meta.deletion_file is None
    props = ds.read_transaction(2).transaction_properties
    assert props["lance_spark.operation"] == "UPDATE"


def test_update_with_column_condition_and_values(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    t.update(F.col("id") >= 990, {"age": F.col("age") * 10, "v": F.array(F.lit(9.0), F.lit(9.0))})
    after = _rows(table_uri)
    assert all(after[i]["age"] == (i % 7) * 10 for i in range(990, 1000))
    assert after[995]["v"] == [9.0, 9.0] and after[5]["v"] == [5.0, 0.5]


def test_update_expressions_stay_whole_in_the_statement(
    spark: SparkSession, table_uri: str
) -> None:
    """update() runs as Spark's UPDATE; each expression the caller gives stays one expression
    of it: a ``--`` comment in a value does not take in the WHERE after it, and text that is
    not one expression is refused without a change."""
    t = _table(spark, table_uri)
    result = t.update("id = 1 -- the first", {"age": "100 -- a hundred", "label": "'x'"})
    assert result.first().num_affected_rows == 1
    after = _rows(table_uri)
    assert (after[1]["age"], after[1]["label"]) == (100, "x")
    assert after[2]["age"] == 2 and after[2]["label"] == "l2"
    version = lance.dataset(table_uri).version
    with pytest.raises(InvalidArgumentError, match="not one SQL expression"):
        t.update("id = 2", {"age": "1), label = ('y'"})
    with pytest.raises(InvalidArgumentError, match="closes a parenthesis it did not open"):
        t.delete("id = 2) OR (true")
    with pytest.raises(InvalidArgumentError, match="comment"):
        t.delete("id = 2 /* (")
    assert lance.dataset(table_uri).version == version


def test_update_nothing_matched_and_errors(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    files_before = set(os.listdir(os.path.join(table_uri, "data")))
    assert t.update("id < 0", {"age": "1"}).first().num_affected_rows == 0
    with pytest.raises(ValueError, match="'nope'"):
        t.update("id = 1", {"nope": "1"})
    # Spark plans the UPDATE: its own error for a non-deterministic condition.
    with pytest.raises(AnalysisException, match="INVALID_NON_DETERMINISTIC_EXPRESSIONS"):
        t.update("rand() < 0.5", {"age": "1"})
    with pytest.raises(Exception, match=r"'v'.*2|length"):
        t.update("id = 1", {"v": "array(1.0f)"})
    assert lance.dataset(table_uri).version == 1
    assert set(os.listdir(os.path.join(table_uri, "data"))) == files_before
