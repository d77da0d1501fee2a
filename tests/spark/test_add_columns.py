"""LanceTable.addColumns: one Spark job writes one data file per fragment, one Merge commit."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable
from lance_spark._spark import default_parallelism
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, SchemaMismatchError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _expressions() -> dict[str, Any]:
    """Spark SQL strings and Columns (a Column needs the running session)."""
    return {
        "x2": "id * 2",
        "name_len": "length(name)",
        "label": F.concat("name", F.lit("-"), F.col("age").cast("string")),
        "maybe": "CASE WHEN id % 5 = 0 THEN NULL ELSE age * 1.5D END",
        "price": "CAST(age AS DECIMAL(10, 2)) / 4",
        "at": "timestamp_seconds(id * 3600)",
        "tags": "array(name, upper(name))",
        "info": "named_struct('age', age, 'even', id % 2 = 0)",
    }


def _table(spark: SparkSession, uri: str) -> LanceTable:
    """1000 rows in 4 fragments, then 145 rows deleted from each of them (855 left)."""
    spark.range(0, 1000, numPartitions=4).selectExpr(
        "id", "concat('n', id) AS name", "cast(id % 7 AS int) AS age"
    ).write.format("lance").mode("append").save(uri)
    t = LanceTable.forPath(spark, uri)
    t.delete("id % 10 = 3 OR id BETWEEN 600 AND 649")
    return t


def _by_id(uri: str, version: int | None = None) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in lance.dataset(uri, version=version).to_table().to_pylist()}


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def test_expressions_match_spark_evaluation_in_one_version(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    exprs = _expressions()
    before = lance.dataset(table_uri)
    version, old_rows = before.version, _by_id(table_uri)
    old_files = {f.fragment_id: [d.path for d in f.metadata.files] for f in before.get_fragments()}
    evaluated = (
        t.toDF(version=version)
        .select("id", *(F.expr(e) if isinstance(e, str) else e for e in exprs.values()))
        .toDF("id", *exprs)
    )
    expected = {r["id"]: r for r in evaluated.toArrow().to_pylist()}
    price = evaluated.schema["price"].dataType

    result = t.addColumns(exprs).first()

    assert (result.num_added_columns, result.num_affected_rows) == (len(exprs), 855)
    ds = lance.dataset(table_uri)
    assert ds.version == version + 1  # exactly one new version
    assert ds.schema.names == ["id", "name", "age", *exprs]
    types = {f.name: f.type for f in ds.schema}
    assert types["x2"] == pa.int64() and types["name_len"] == pa.int32()
    assert types["price"] == pa.decimal128(price.precision, price.scale) and types[
        "at"
    ] == pa.timestamp("us", "UTC")
    assert all(ds.schema.field(n).nullable for n in exprs)
    after = _by_id(table_uri)
    assert after.keys() == expected.keys() == old_rows.keys() and len(after) == 855
    for i, row in after.items():
        assert {n: row[n] for n in exprs} == {n: expected[i][n] for n in exprs}, i
        assert {n: row[n] for n in ("id", "name", "age")} == old_rows[i]
    assert after[5]["maybe"] is None and after[6]["maybe"] == 9.0
    # every fragment kept its files and got exactly one more
    new_files = {f.fragment_id: [d.path for d in f.metadata.files] for f in ds.get_fragments()}
    assert new_files.keys() == old_files.keys() and len(new_files) == 4
    for fid, paths in new_files.items():
        assert paths[:-1] == old_files[fid] and len(paths) == len(old_files[fid]) + 1
    # the old version is unchanged
    assert _by_id(table_uri, version) == old_rows
    assert lance.dataset(table_uri, version=version).schema.names == ["id", "name", "age"]
    props = ds.read_transaction(ds.version).transaction_properties
    assert props["lance_spark.operation"] == "ADD COLUMNS"
    history = t.history(1).first()
    assert history.operationParameters["columns"] == ", ".join(exprs)
    assert '"x2": "id * 2"' in history.operationParameters["expressions"]
    assert history.operationMetrics["numOutputRows"] == "855"
    # the connector reads the new columns back too
    back = t.toDF().where("id = 12").first()
    assert (back.x2, back.name_len, back.label, back.tags) == (24, 3, "n12-5", ["n12", "N12"])


def test_dataframe_by_key_left_join(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    # keys only in fragments 0 and 1 (ids < 500), some deleted (x3), plus keys the table lacks
    keys = [i for i in range(0, 500, 4)] + [5000, 5001, None]
    df = spark.createDataFrame(
        [(k, None if k is None else f"L{k}", None if k is None else k / 2) for k in keys],
        "id long, tag string, score double",
    )
    result = t.addColumns(df, on="id").first()
    live_matches = [k for k in keys if k is not None and k < 1000 and k % 10 != 3]
    assert (result.num_added_columns, result.num_affected_rows) == (2, len(live_matches))
    ds = lance.dataset(table_uri)
    assert ds.version == version + 1 and ds.schema.names == ["id", "name", "age", "tag", "score"]
    assert ds.schema.field("tag").type == pa.string() and ds.schema.field("score").nullable
    for i, row in _by_id(table_uri).items():
        if i in live_matches:
            assert (row["tag"], row["score"]) == (f"L{i}", i / 2)
        else:  # no match: null (fragments 2 and 3 have no match at all)
            assert (row["tag"], row["score"]) == (None, None)
    assert all(len(f.metadata.files) == 2 for f in ds.get_fragments())
    assert t.history(1).first().operationMetrics["numMatchedRows"] == str(len(live_matches))


def test_duplicate_key_fails_without_version_or_files(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    version, files = lance.dataset(table_uri).version, _data_files(table_uri)
    # One task per fragment (no coalescing), so other tasks write their files before (or
    # while) the task holding the duplicate fails: the abort must delete what they wrote.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    try:
        for key in (9, 999):  # in fragments 0 and 3
            matched_twice = spark.createDataFrame(
                [(i, "x") for i in range(0, 1000, 3)] + [(key, "again")], "id long, tag string"
            )
            with pytest.raises(InvalidOptionError, match=rf"key {key} more than once"):
                t.addColumns(matched_twice, on="id")
        unmatched_twice = spark.createDataFrame(
            [(1, "a"), (9999, "b"), (9999, "c")], "id long, t2 string"
        )
        with pytest.raises(InvalidOptionError, match=r"key 9999 more than once"):
            t.addColumns(unmatched_twice, on="id")
    finally:
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
    # Tasks Spark killed after the failure may still be running: wait until they are gone.
    _wait_until_no_task_runs(spark)
    assert lance.dataset(table_uri).version == version
    # No data file, no Lance temporary of a killed task, no staging marker is left.
    assert _data_files(table_uri) == files
    assert not glob.glob(os.path.join(table_uri, "data", ".tmp*"))
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))


def _wait_until_no_task_runs(spark: SparkSession) -> None:
    """Return once no task runs on the session's executors (``statusTracker`` is classic only).

    A barrier stage with one task per slot starts only when every slot is free at once, and a
    slot is freed only when its task has ended (killed tasks too).
    """
    slots = default_parallelism(spark)

    def done(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    frame = spark.range(0, slots, 1, numPartitions=slots)
    assert frame.mapInArrow(done, frame.schema, barrier=True).count() == slots


def test_errors_leave_the_table_unchanged(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    with pytest.raises(SchemaMismatchError, match="'age' already exists"):
        t.addColumns({"x": "1", "age": "age + 1"})
    with pytest.raises(SchemaMismatchError, match="'NAME' already exists"):
        t.addColumns({"NAME": "upper(name)"})
    with pytest.raises(ColumnNotFoundError, match="nope"):
        t.addColumns({"x": "nope + 1"})
    with pytest.raises(InvalidOptionError, match="not deterministic"):
        t.addColumns({"x": "rand()"})
    with pytest.raises(InvalidOptionError, match="one value per row"):
        t.addColumns({"x": "sum(id)"})
    with pytest.raises(InvalidOptionError, match="reserved"):
        t.addColumns({"_rowid": "1"})
    df = spark.createDataFrame([(1, "a", 2)], "id long, tag string, age int")
    with pytest.raises(SchemaMismatchError, match="'age' already exists"):
        t.addColumns(df, on="id")
    with pytest.raises(ColumnNotFoundError, match="'key'"):
        t.addColumns(df, on="key")
    with pytest.raises(InvalidOptionError, match="on="):
        t.addColumns(df)
    assert lance.dataset(table_uri).version == version


def test_append_filter_and_update_after_adding(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    t.addColumns({"x2": "id * 2"})
    # an append with the new column, and one without it (null)
    spark.range(1000, 1010).selectExpr(
        "id", "concat('n', id) AS name", "cast(id % 7 AS int) AS age", "id * 2 AS x2"
    ).write.format("lance").mode("append").save(table_uri)
    spark.range(1010, 1015).selectExpr(
        "id", "concat('n', id) AS name", "cast(id % 7 AS int) AS age"
    ).write.format("lance").mode("append").save(table_uri)
    df = t.toDF()
    assert df.count() == 870
    assert df.where("x2 BETWEEN 1990 AND 2019").count() == 15  # ids 995..1009
    assert df.where("x2 IS NULL").count() == 5
    assert sorted(r.id for r in df.where(F.col("x2") > 2016).collect()) == [1009]
    t.update("id = 1012", {"x2": "0"})
    assert t.toDF().where("id = 1012").first().x2 == 0
    # a second addColumns covers the appended fragments too
    t.addColumns({"x3": "coalesce(x2, 0) + 1"})
    assert {r.id: r.x3 for r in t.toDF().where("id >= 1008").collect()} == {
        1008: 2017,
        1009: 2019,
        1010: 1,
        1011: 1,
        1012: 1,
        1013: 1,
        1014: 1,
    }


def test_empty_table(spark: SparkSession, table_uri: str) -> None:
    spark.createDataFrame([], "id long").write.format("lance").mode("append").save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    version = lance.dataset(table_uri).version
    assert t.addColumns({"x": "id + 1"}).first().num_affected_rows == 0
    ds = lance.dataset(table_uri)
    assert ds.version == version + 1 and ds.schema.names == ["id", "x"]
    spark.range(3).selectExpr("id", "id + 1 AS x").write.format("lance").mode("append").save(
        table_uri
    )
    assert sorted(r.x for r in t.toDF().collect()) == [1, 2, 3]
