"""LanceTable.merge: the shared MERGE cases through the builder, plus what only the builder has
(Column conditions, metrics rows, history, row ids, untouched fragments, retries)."""

from __future__ import annotations

import dataclasses

import lance
import pytest
from _merge_cases import CASES, Case, When, check_case, make_source, make_target, table_rows
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceMergeBuilder, LanceTable

MAX_SOURCE_ROWS_CONF = "spark.lance.merge.keyPruning.maxSourceRows"

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _build(builder: LanceMergeBuilder, when: When) -> LanceMergeBuilder:
    c, a = when.condition, when.assign
    if when.kind == "matched_update":
        return builder.whenMatchedUpdateAll(c) if a is None else builder.whenMatchedUpdate(c, a)
    if when.kind == "matched_delete":
        return builder.whenMatchedDelete(c)
    if when.kind == "insert":
        return (
            builder.whenNotMatchedInsertAll(c) if a is None else builder.whenNotMatchedInsert(c, a)
        )
    if when.kind == "source_update":
        return builder.whenNotMatchedBySourceUpdate(c, a)
    if when.kind == "source_delete":
        return builder.whenNotMatchedBySourceDelete(c)
    raise ValueError(when.kind)


def run_builder(spark: SparkSession, case: Case, uri: str) -> tuple[int, int, int, int]:
    builder = (
        LanceTable.forPath(spark, uri)
        .alias("t")
        .merge(make_source(spark, case, uri).alias("s"), case.on)
    )
    for when in case.clauses:
        builder = _build(builder, when)
    if case.evolution:
        builder = builder.withSchemaEvolution()
    row = builder.execute().collect()
    assert len(row) == 1
    return tuple(row[0])  # type: ignore[return-value]


# Spark's analysis refuses these statements (its error); the builder's own checks (clause
# order, unknown columns) and the cardinality error keep the connector's types.
SPARK_ERRORS = {
    "star_with_missing_source_column_fails": "UNRESOLVED_COLUMN",
    "insert_referencing_target_fails": "UNRESOLVED_COLUMN",
    "by_source_clause_referencing_source_fails": "UNRESOLVED_COLUMN",
    "non_deterministic_condition_fails": "NON_DETERMINISTIC",
}


def planned_by_spark(case: Case) -> Case:
    """``case`` as the builder runs it: Spark's MERGE, with Spark's analysis errors (the
    columns a schema evolution adds are committed with the MERGE's version)."""
    if case.name in SPARK_ERRORS:
        case = dataclasses.replace(
            case, expected=AnalysisException, error_text=SPARK_ERRORS[case.name]
        )
    return case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_merge_case_through_builder(spark: SparkSession, table_uri: str, case: Case) -> None:
    check_case(spark, planned_by_spark(case), table_uri, run_builder)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_merge_case_without_key_pruning(spark: SparkSession, table_uri: str, case: Case) -> None:
    # The same cases through the plain join over every target row (pruning switched off).
    spark.conf.set(MAX_SOURCE_ROWS_CONF, "0")
    try:
        check_case(spark, planned_by_spark(case), table_uri, run_builder)
    finally:
        spark.conf.unset(MAX_SOURCE_ROWS_CONF)


def test_column_conditions_and_values(spark: SparkSession, table_uri: str) -> None:
    make_target(spark, table_uri, [(1, "a", 10), (2, "b", 20)])
    src = spark.createDataFrame(
        [(1, "A", 5, "x"), (3, "C", 7, "y")], "id long, val string, n int, op string"
    )
    t = LanceTable.forPath(spark, table_uri)
    (
        t.alias("t")
        .merge(src.alias("s"), F.col("s.id") == F.col("t.id"))
        .whenMatchedUpdate(F.col("s.op") == "x", {"n": F.col("t.n") + F.col("s.n")})
        .whenNotMatchedInsert(values={"id": F.col("s.id"), "val": F.upper(F.lit("new"))})
        .execute()
    )
    assert table_rows(table_uri) == [(1, "a", 15), (2, "b", 20), (3, "NEW", None)]


def test_merge_keeps_row_ids_of_updated_rows_and_history(
    spark: SparkSession, table_uri: str
) -> None:
    make_target(spark, table_uri, [(1, "a", 10), (2, "b", 20), (3, "c", 30)])
    before = {
        r["id"]: r["_rowid"]
        for r in lance.dataset(table_uri).to_table(with_row_id=True).to_pylist()
    }
    src = spark.createDataFrame(
        [(2, "B", 0, ""), (9, "I", 0, "")], "id long, val string, n int, op string"
    )
    t = LanceTable.forPath(spark, table_uri)
    t.alias("t").merge(
        src.alias("s"), "s.id = t.id"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    after = {
        r["id"]: r["_rowid"]
        for r in lance.dataset(table_uri).to_table(with_row_id=True).to_pylist()
    }
    assert after[2] == before[2]  # an update keeps the row's identity
    assert after[9] not in before.values()
    assert len(set(after.values())) == 4
    latest = t.history(1).first()
    assert latest.operation == "MERGE"
    assert latest.operationParameters["predicate"] == "(s.id = t.id)"
    assert latest.operationMetrics["numUpdatedRows"] == "1"
    assert latest.operationMetrics["numInsertedRows"] == "1"


def test_types_are_cast_to_the_table(spark: SparkSession, table_uri: str) -> None:
    make_target(spark, table_uri, [(1, "a", 10)])
    # Source id as int and n as long: written with the table's Arrow types.
    src = spark.createDataFrame([(1, "A", 11), (2, "B", 22)], "id int, val string, n long")
    t = LanceTable.forPath(spark, table_uri)
    t.alias("t").merge(
        src.alias("s"), "s.id = t.id"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    ds = lance.dataset(table_uri)
    assert str(ds.schema.field("id").type) == "int64" and str(ds.schema.field("n").type) == "int32"
    assert table_rows(table_uri) == [(1, "A", 11), (2, "B", 22)]


def test_unaliased_merge_with_unambiguous_names(spark: SparkSession, table_uri: str) -> None:
    make_target(spark, table_uri, [(1, "a", 10)])
    src = spark.createDataFrame([(1, "z")], "key long, newval string")
    t = LanceTable.forPath(spark, table_uri)
    t.merge(src, "key = id").whenMatchedUpdate(set={"val": "newval"}).execute()
    assert table_rows(table_uri) == [(1, "z", 10)]
