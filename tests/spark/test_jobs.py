"""The one job runner through Spark: connector errors raised in the tasks of each engine reach
the caller as themselves, and addColumns is redone after a retryable conflict."""

from __future__ import annotations

import os
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lance_spark import LanceTable
from lance_spark.errors import CardinalityViolationError, InvalidOptionError, SchemaMismatchError
from lance_spark.source import commit as _commit

pytestmark = pytest.mark.spark


def _table(spark: SparkSession, uri: str) -> LanceTable:
    spark.range(0, 100, numPartitions=2).selectExpr(
        "id", "concat('v', id) AS val", "array(cast(id AS float), 1.0f) AS vec"
    ).write.format("lance").option("vec.arrow.fixed-size-list.size", "2").mode("append").save(uri)
    return LanceTable.forPath(spark, uri)


def _state(uri: str) -> tuple[int, set[str]]:
    return lance.dataset(uri).version, set(os.listdir(os.path.join(uri, "data")))


def test_change_engine_task_error_arrives_as_itself(spark: SparkSession, table_uri: str) -> None:
    """The vector check runs in the task, under Lance's writer (which turns a Python error
    into an OSError holding its text)."""
    t = _table(spark, table_uri)
    before = _state(table_uri)
    with pytest.raises(SchemaMismatchError, match="'vec'") as raised:
        t.update("id = 1", {"vec": "array(1.0f, 2.0f, 3.0f)"})
    assert type(raised.value) is SchemaMismatchError
    assert "LanceError" not in str(raised.value) and "Traceback" not in str(raised.value)
    src = spark.createDataFrame([(500, "new", [1.0])], "id long, val string, vec array<float>")
    with pytest.raises(SchemaMismatchError, match="'vec'"):
        t.alias("t").merge(src.alias("s"), "s.id = t.id").whenNotMatchedInsertAll().execute()
    assert _state(table_uri) == before


def test_merge_cardinality_violation_arrives_as_itself(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    before = _state(table_uri)
    src = spark.createDataFrame([(7, "a"), (7, "b")], "id long, val string")
    with pytest.raises(CardinalityViolationError, match="MERGE_CARDINALITY_VIOLATION") as raised:
        (
            t.alias("t")
            .merge(src.alias("s"), "s.id = t.id")
            .whenMatchedUpdate(set={"val": "s.val"})
            .execute()
        )
    assert f"Nothing was committed to the Lance table at {table_uri!r}." in str(raised.value)
    assert _state(table_uri) == before


def test_add_columns_task_error_arrives_whole(spark: SparkSession, table_uri: str) -> None:
    """A key whose text holds a newline and an error-like line: the message arrives as the
    task raised it (rebuilding errors from Spark's text would cut it at the newline)."""
    t = _table(spark, table_uri)
    before = _state(table_uri)
    key = "k: 1\nlance_spark.errors.SchemaMismatchError: not this"
    src = spark.createDataFrame(
        [("v1", "x"), (f"v2{key}", "y"), (f"v2{key}", "z")], "val string, tag string"
    )
    with pytest.raises(InvalidOptionError) as raised:
        t.addColumns(src, on="val")
    assert type(raised.value) is InvalidOptionError
    assert str(raised.value) == (
        f"the DataFrame given to addColumns has the key v2{key} more than once; each key "
        "must appear at most once"
    )
    assert _state(table_uri) == before
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))


def test_add_columns_is_redone_after_a_racing_append(
    spark: SparkSession, table_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lance fails a Merge (add columns) after any concurrent commit, retryable: the job is
    redone on the newer version, so the appended rows get the new column too."""
    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    real = _commit.commit
    calls: list[str] = []

    def commit(uri: str, operation: Any, **kwargs: Any) -> int:
        calls.append(type(operation).__name__)
        if len(calls) == 1:
            more = pa.table(
                {
                    "id": pa.array([1000], pa.int64()),
                    "val": ["other"],
                    "vec": pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2)),
                }
            )
            lance.write_dataset(more, uri, mode="append")
        return real(uri, operation, **kwargs)

    monkeypatch.setattr(_commit, "commit", commit)
    assert t.addColumns({"twice": "id * 2"}).first().num_affected_rows == 101
    assert calls == ["Merge", "Merge"]
    assert lance.dataset(table_uri).version == version + 2  # the append, then addColumns
    rows = lance.dataset(table_uri).to_table().to_pylist()
    assert len(rows) == 101 and all(r["twice"] == r["id"] * 2 for r in rows)
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))
