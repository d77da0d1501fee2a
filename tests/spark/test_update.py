"""LanceTable.update: one Spark job rewrites only the matching rows, one Update commit."""

from __future__ import annotations

import os

import lance
import pandas as pd
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Row, SparkSession
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


def test_every_kind_of_column_in_update_merge_and_delete(
    spark: SparkSession, table_uri: str
) -> None:
    """Python and pandas UDFs, higher-order functions, struct and array builders and literals
    of any type, in update's set and condition, a MERGE's clauses and delete's condition:
    the table ends as Spark's own evaluation of the same Columns on an in-memory copy."""
    import datetime
    from decimal import Decimal

    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import LongType, StringType

    schema = (
        "id long, tag string, xs array<long>, s struct<a:long,b:string>, d date, amt decimal(10,2)"
    )
    rows = [
        (i, f"t{i}", [i, i + 1], (i, f"b{i}"), datetime.date(2020, 1, 1 + i), Decimal(i))
        for i in range(12)
    ]
    spark.createDataFrame(rows, schema).write.format("lance").save(table_uri)
    t = LanceTable.forPath(spark, table_uri)

    # No type hints on the Python UDF: PySpark 4 would take it for an Arrow UDF.
    bang = F.udf(lambda s: s + "!", StringType())

    @F.pandas_udf(LongType())  # type: ignore[call-overload]
    def plus_one(v: pd.Series) -> pd.Series:
        return v + 1

    values: dict[str, Column] = {
        "tag": bang(F.col("tag")),
        "xs": F.transform("xs", lambda x: x * 10),
        "s": F.struct(plus_one(F.col("id")).alias("a"), F.lit("new").alias("b")),
        "d": F.lit(datetime.date(2030, 5, 6)),
        "amt": F.lit(Decimal("12.34")),
    }
    condition = (
        (plus_one(F.col("id")) < 5)
        & F.exists("xs", lambda x: x > 1)
        & (F.col("amt") < F.lit(100.5))
        & (F.col("xs") != F.lit([7, 8]))
    )

    def expected_update(frame: DataFrame, cond: Column, sets: dict[str, Column]) -> list[Row]:
        return sorted(
            frame.select(
                *[
                    F.when(cond, sets[c]).otherwise(F.col(c)).alias(c) if c in sets else c
                    for c in frame.columns
                ]
            ).collect()
        )

    def table_rows() -> list[Row]:
        return sorted(t.toDF().collect())

    memory = spark.createDataFrame(rows, schema)
    want = expected_update(memory, condition, values)
    assert t.update(condition=condition, set=values).first()[0] == 3
    assert table_rows() == want

    # delete: a UDF and a higher-order function in the condition.
    memory = spark.createDataFrame(want, schema)
    gone = (bang(F.col("tag")) == F.lit("t7!")) | F.exists("xs", lambda x: x == 40)
    want = sorted(memory.where(~gone).collect())
    assert t.delete(gone).first()[0] == 2
    assert table_rows() == want

    # MERGE: UDFs and the other kinds in a clause's condition, set and values; the expected
    # rows are Spark's evaluation of the same Columns on the in-memory join.
    target = spark.createDataFrame(want, schema)
    source = spark.createDataFrame(
        [
            (1, "n1", [5], (0, "x"), datetime.date(2021, 1, 1), Decimal(1)),
            (2, "n2", [6], (0, "x"), datetime.date(2021, 1, 2), Decimal(2)),
            (3, "n3", [7], (0, "x"), datetime.date(2021, 1, 3), Decimal(3)),
            (20, "n20", [8], (0, "x"), datetime.date(2021, 1, 4), Decimal(4)),
        ],
        schema,
    )
    on = F.col("t.id") == F.col("s.id")
    delete_when = bang(F.col("s.tag")) == F.lit("n2!")
    update_when = F.exists("t.xs", lambda x: x > 0) & (plus_one(F.col("s.id")) > 1)
    update_set: dict[str, Column] = {
        "tag": bang(F.col("s.tag")),
        "xs": F.transform("s.xs", lambda x: x + F.col("t.id")),
        "s": F.struct(plus_one(F.col("t.id")).alias("a"), F.col("s.tag").alias("b")),
        "amt": F.lit(Decimal("0.50")),
    }
    insert_values: dict[str, Column] = {
        "id": F.col("s.id"),
        "tag": bang(F.col("s.tag")),
        "xs": F.array(plus_one(F.col("s.id")), F.lit(0).cast("long")),
        "s": F.struct(F.lit(7).cast("long").alias("a"), F.lit("i").alias("b")),
        "d": F.lit(datetime.date(2031, 1, 1)),
    }
    joined = target.alias("t").join(source.alias("s"), on)
    matched = {r["id"] for r in joined.select("t.id").collect()}
    deleted = {r["id"] for r in joined.where(delete_when).select("t.id").collect()}
    updated = joined.where(~delete_when & update_when).select(
        *[update_set.get(c, F.col(f"t.{c}")).alias(c) for c in target.columns]
    )
    inserted = (
        source.alias("s")
        .join(target.alias("t"), on, "left_anti")
        .select(
            *[
                insert_values.get(c, F.lit(None)).cast(target.schema[c].dataType).alias(c)
                for c in target.columns
            ]
        )
    )
    changed = {r["id"] for r in updated.collect()}
    kept = target.where(~F.col("id").isin(list(deleted | changed)))
    want = sorted(kept.unionByName(updated).unionByName(inserted).collect())
    assert matched == {1, 2} and deleted == {2}
    (
        t.alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition=delete_when)
        .whenMatchedUpdate(condition=update_when, set=update_set)
        .whenNotMatchedInsert(condition=plus_one(F.col("s.id")) > 0, values=insert_values)
        .execute()
    )
    assert table_rows() == want
    # The statements' temporary functions are gone.
    assert not [f for f in spark.catalog.listFunctions() if f.name.startswith("lance_spark_")]
