"""The expression analysis of :mod:`lance_spark._spark` gives the same answers on a classic and
on a Spark Connect session: referenced columns, determinism, one value per row, the MERGE
equi-join key, and SQL text for history. Where Connect can only approximate, the test says
so and checks that the approximation is on the safe side.

The ``check_*`` functions take any session, so the same cases run against a Connect server by
hand (``python tests/spark/test_spark_exprs.py sc://127.0.0.1:PORT``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType
from pyspark.sql.window import Window

from lance_spark import _spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

ODD = ["id", "Val", "a.b", "sp ace", "back`tick", "st", "arr", "w"]


def _frame(spark: SparkSession) -> DataFrame:
    rows = [(1, 2, 3, 4, "x", (5, 6), [1, 2], 7)]
    schema = (
        "id long, Val long, `a.b` long, `sp ace` long, `back``tick` string, "
        "st struct<x: long, y: long>, arr array<long>, w long"
    )
    return spark.createDataFrame(rows, schema)


# (expression on the frame, the columns it reads) -- the same answer in both modes.
REFERENCES: list[tuple[str, Callable[[DataFrame], Column], set[str]]] = [
    ("plain", lambda df: F.expr("id > 1"), {"id"}),
    ("other case", lambda df: F.expr("VAL = 2"), {"Val"}),
    ("dotted name", lambda df: F.expr("`a.b` = 1"), {"a.b"}),
    ("space", lambda df: F.expr("`sp ace` IS NULL"), {"sp ace"}),
    ("backtick", lambda df: F.expr("`back``tick` = 'x'"), {"back`tick"}),
    ("struct field", lambda df: F.expr("st.x = 1"), {"st"}),
    ("struct field col", lambda df: F.col("st.y") + 1, {"st"}),
    ("quoted col", lambda df: F.col("`a.b`") + F.col("ID"), {"a.b", "id"}),
    ("frame column", lambda df: df["Val"] * 2, {"Val"}),
    ("string literal", lambda df: F.expr("'id' = 'w'"), set()),
    ("literal", lambda df: F.lit(1), set()),
    ("lambda", lambda df: F.expr("id + size(transform(arr, e -> e + 1))"), {"id", "arr"}),
    ("tree", lambda df: F.when(F.col("w") > 1, F.col("Val")).otherwise(F.lit(None)), {"w", "Val"}),
    ("cast", lambda df: F.col("w").cast("string"), {"w"}),
]


def check_references(spark: SparkSession) -> None:
    df = _frame(spark)
    for name, make, expected in REFERENCES:
        found = _spark.referenced_columns(df, df, [make(df)])
        assert found == expected, (name, found)


def check_references_over_approximate_on_connect(spark: SparkSession) -> None:
    """A star reads everything (both modes); a source column named like a target column counts
    as the target's on Connect (a wider read, never a narrower one)."""
    df = _frame(spark)
    assert _spark.referenced_columns(df, df, [F.struct("*")]) == set(df.columns)
    target = df.alias("t")
    source = spark.createDataFrame([(1, 2)], "w long, k long").alias("s")
    joined = target.join(source, on=F.expr("t.id = s.k"), how="full")
    found = _spark.referenced_columns(joined, df, [F.expr("s.w > 0 AND t.Val > 0")])
    expected = {"Val", "w"} if _spark.is_connect(spark) else {"Val"}
    assert found == expected


def _udf(deterministic: bool) -> Column:
    udf = F.udf(lambda x: x, LongType())
    return (udf if deterministic else udf.asNondeterministic())("id")


# (name, expression, classic answer, Connect answer)
DETERMINISM: list[tuple[str, Callable[[], Column], bool, bool | None]] = [
    ("plain", lambda: F.col("id") + 1, True, True),
    ("rand", lambda: F.col("id") + F.rand(), False, False),
    ("rand in SQL", lambda: F.expr("id + rand()"), False, False),
    ("uuid", lambda: F.expr("uuid()"), False, False),
    ("shuffle", lambda: F.shuffle("arr"), False, False),
    ("python udf", lambda: _udf(True), True, True),
    ("non-deterministic udf", lambda: _udf(False), False, False),
    ("current_timestamp", lambda: F.current_timestamp(), True, True),  # Spark: deterministic
    ("scalar subquery", lambda: F.expr("(SELECT max(id) FROM range(3))"), True, True),
    # Classic misses this one: its analyser pulls rand() out of the window into a Project
    # below, and the expression left is deterministic. The Connect probe sees it.
    ("window over rand", lambda: F.sum("id").over(Window.orderBy(F.rand())), True, False),
    # A join condition cannot hold these: Connect cannot ask (None), the caller refuses.
    ("window", lambda: F.row_number().over(Window.orderBy("id")), True, None),
    ("first", lambda: F.first("id"), True, None),
]


def check_determinism(spark: SparkSession) -> None:
    df = _frame(spark)
    connect = _spark.is_connect(spark)
    for name, make, classic, on_connect in DETERMINISM:
        answer = _spark.deterministic(df, make())
        assert answer is (on_connect if connect else classic), (name, answer)
    with pytest.raises(AnalysisException) as caught:
        _spark.deterministic(df, F.col("nope") + F.rand())
    assert str(caught.value.getCondition()).startswith("UNRESOLVED_COLUMN")


ONE_PER_ROW: list[tuple[str, Callable[[], Column], bool]] = [
    ("plain", lambda: F.col("id") * 2, True),
    ("rand", lambda: F.rand(), True),
    ("scalar subquery", lambda: F.expr("(SELECT max(id) FROM range(3))"), True),
    ("sum", lambda: F.sum("id"), False),
    ("sum in SQL", lambda: F.expr("sum(id) + 1"), False),
    ("row_number", lambda: F.row_number().over(Window.orderBy("id")), False),
    ("explode", lambda: F.explode("arr"), False),
    ("explode in SQL", lambda: F.expr("explode(arr)"), False),
]


def check_one_value_per_row(spark: SparkSession) -> None:
    df = _frame(spark)
    for name, make, expected in ONE_PER_ROW:
        assert _spark.one_value_per_row(df, make()) is expected, name
    with pytest.raises(AnalysisException) as caught:
        _spark.one_value_per_row(df, F.col("nope"))
    assert str(caught.value.getCondition()).startswith("UNRESOLVED_COLUMN")


def check_sql_text(spark: SparkSession) -> None:
    """History text: a readable rendering in both modes, never an error."""
    df = _frame(spark)
    condition = (
        (F.col("`sp ace`") > 1) & F.col("Val").isin(1, 2) & (F.col("`back``tick`") == "it's")
    )
    for text in (
        _spark.condition_sql(df, condition),
        _spark.expression_sql(df, condition),
        _spark.column_text(condition),
    ):
        assert "sp ace" in text and "Val" in text and "back" in text and "it" in text, text
    if _spark.is_connect(spark):
        assert _spark.column_text(condition) == (
            "(((`sp ace` > 1) AND (Val IN (1, 2))) AND (`back``tick` = 'it\\'s'))"
        )


def check_generates_rows(spark: SparkSession) -> None:
    """Connect has no analysed plan to look at: always False there (the source is cached)."""
    assert _spark.generates_rows(spark.range(5)) is not _spark.is_connect(spark)
    assert _spark.generates_rows(_frame(spark).select(F.rand())) is False


def test_references(spark: SparkSession) -> None:
    check_references(spark)


def test_references_over_approximate_on_connect(spark: SparkSession) -> None:
    check_references_over_approximate_on_connect(spark)


def test_determinism(spark: SparkSession) -> None:
    check_determinism(spark)


def test_one_value_per_row(spark: SparkSession) -> None:
    check_one_value_per_row(spark)


def test_sql_text(spark: SparkSession) -> None:
    check_sql_text(spark)


def test_generates_rows(spark: SparkSession) -> None:
    check_generates_rows(spark)


CHECKS: list[Callable[..., Any]] = [
    check_references,
    check_references_over_approximate_on_connect,
    check_determinism,
    check_one_value_per_row,
    check_sql_text,
    check_generates_rows,
]

if __name__ == "__main__":  # by hand against a Connect server: python ... sc://127.0.0.1:PORT
    from lance_spark import LanceDataSource

    session = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    session.dataSource.register(LanceDataSource)
    for check in CHECKS:
        check(session)
        print("ok", check.__name__)
