"""MERGE cases shared by the two front ends (LanceTable.merge and SQL MERGE INTO).

Each case states the target rows, the source, the ON condition and the clauses in a neutral
form, and the whole table expected afterwards (or the error expected, with the table left
unchanged). Target columns: id long, val string, n int; the target is written as two
fragments. Aliases: target ``t``, source ``s``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lance
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark.errors import (
    CardinalityViolationError,
    ColumnNotFoundError,
    InvalidOptionError,
)

TARGET_SCHEMA = "id long, val string, n int"
SOURCE_SCHEMA = "id long, val string, n int, op string"
TARGET = [(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, None, 40)]

Row = tuple[object, ...]


@dataclass(frozen=True)
class When:
    """One clause. kind: matched_update, matched_delete, insert, source_update, source_delete.
    ``assign`` None on an update/insert means ``*``."""

    kind: str
    condition: str | None = None
    assign: dict[str, str] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    source: list[Row]
    clauses: tuple[When, ...]
    expected: list[Row] | type[Exception]
    on: str = "s.id = t.id"
    source_schema: str = SOURCE_SCHEMA
    target: list[Row] = field(default_factory=lambda: list(TARGET))
    evolution: bool = False
    # Builds the source from (spark, the source rows as a DataFrame, the target's uri).
    transform: Callable[[SparkSession, DataFrame, str], DataFrame] | None = None
    error_text: str = ""
    metrics: tuple[int, int, int, int] | None = None  # affected, updated, deleted, inserted
    # New versions when rows change: 2 only when schema evolution empties a fragment (Lance's
    # Merge cannot drop fragments, so the columns are added in a version of their own).
    versions: int = 1


def _self_source(spark: SparkSession, _: DataFrame, uri: str) -> DataFrame:
    return spark.read.format("lance").load(uri).selectExpr("id", "upper(val) AS val", "n + 1 AS n")


def _limited_source(_: SparkSession, src: DataFrame, __: str) -> DataFrame:
    return src.filter("n > 0").orderBy("id").limit(2)


UPSERT = (When("matched_update"), When("insert"))

CASES: list[Case] = [
    Case(
        "upsert_update_all_insert_all",
        source=[(2, "B", 21, "u"), (5, "E", 50, "u")],
        clauses=UPSERT,
        expected=[(1, "a", 10), (2, "B", 21), (3, "c", 30), (4, None, 40), (5, "E", 50)],
        metrics=(2, 1, 0, 1),
    ),
    Case(
        "update_set_expressions_over_both_sides",
        source=[(1, "A", 1, ""), (3, "C", 3, "")],
        clauses=(When("matched_update", assign={"val": "s.val", "n": "t.n + s.n"}),),
        expected=[(1, "A", 11), (2, "b", 20), (3, "C", 33), (4, None, 40)],
        metrics=(2, 2, 0, 0),
    ),
    Case(
        "matched_delete_unconditional",
        source=[(1, "", 0, ""), (2, "", 0, "")],
        clauses=(When("matched_delete"),),
        expected=[(3, "c", 30), (4, None, 40)],
        metrics=(2, 0, 2, 0),
    ),
    Case(
        "first_matching_clause_wins",
        source=[(1, "", 5, ""), (2, "", -5, "")],
        clauses=(
            When("matched_update", "s.n > 0", {"val": "'pos'"}),
            When("matched_delete", "s.n > -100"),
        ),
        expected=[(1, "pos", 10), (3, "c", 30), (4, None, 40)],
    ),
    Case(
        "several_conditional_clauses_then_unconditional",
        source=[(1, "", 0, "x"), (2, "", 0, "y"), (3, "", 0, "z")],
        clauses=(
            When("matched_update", "s.op = 'x'", {"val": "'X'"}),
            When("matched_update", "s.op = 'y'", {"val": "'Y'"}),
            When("matched_delete"),
        ),
        expected=[(1, "X", 10), (2, "Y", 20), (4, None, 40)],
        metrics=(3, 2, 1, 0),
    ),
    Case(
        "no_clause_holds_nothing_changes",
        source=[(1, "", 0, "")],
        clauses=(When("matched_update", "s.op = 'never'", {"val": "'X'"}),),
        expected=list(TARGET),
        metrics=(0, 0, 0, 0),
    ),
    Case(
        "cardinality_violation_on_update",
        source=[(1, "p", 0, ""), (1, "q", 0, "")],
        clauses=UPSERT,
        expected=CardinalityViolationError,
        error_text="MERGE_CARDINALITY_VIOLATION",
    ),
    Case(
        "cardinality_violation_on_conditional_delete",
        source=[(2, "", 0, "d"), (2, "", 0, "d")],
        clauses=(When("matched_delete", "s.op = 'd'"),),
        expected=CardinalityViolationError,
        error_text="MERGE_CARDINALITY_VIOLATION",
    ),
    Case(
        "cardinality_violation_even_when_no_clause_acts",
        source=[(3, "", 0, "keep"), (3, "", 0, "keep")],
        clauses=(When("matched_update", "s.op = 'change'", {"val": "'X'"}),),
        expected=CardinalityViolationError,
        error_text="MERGE_CARDINALITY_VIOLATION",
    ),
    Case(
        "duplicates_allowed_with_only_unconditional_delete",
        source=[(2, "", 0, ""), (2, "", 0, ""), (3, "", 0, "")],
        clauses=(When("matched_delete"),),
        expected=[(1, "a", 10), (4, None, 40)],
        metrics=(2, 0, 2, 0),
    ),
    Case(
        "duplicates_allowed_when_insert_only",
        source=[(1, "x", 0, ""), (1, "y", 0, ""), (9, "z", 90, "")],
        clauses=(When("insert"),),
        expected=[*TARGET, (9, "z", 90)],
        metrics=(1, 0, 0, 1),
    ),
    Case(
        "null_key_with_equals_does_not_match",
        source=[(7, None, 70, "")],
        on="s.val = t.val",
        clauses=(When("matched_update", assign={"n": "s.n"}), When("insert")),
        expected=[*TARGET, (7, None, 70)],
    ),
    Case(
        "null_key_with_null_safe_equals_matches",
        source=[(7, None, 70, "")],
        on="s.val <=> t.val",
        clauses=(When("matched_update", assign={"n": "s.n"}), When("insert")),
        expected=[(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, None, 70)],
    ),
    Case(
        "on_condition_and_null_matches_nothing",
        source=[(1, "A", 1, ""), (8, "H", 80, "")],
        on="s.id = t.id AND NULL",
        clauses=UPSERT,
        expected=[*TARGET, (1, "A", 1), (8, "H", 80)],
    ),
    Case(
        "not_matched_by_source_delete",
        source=[(1, "A", 11, ""), (2, "B", 22, "")],
        clauses=(When("matched_update"), When("source_delete")),
        expected=[(1, "A", 11), (2, "B", 22)],
        metrics=(4, 2, 2, 0),
    ),
    Case(
        "not_matched_by_source_update_with_condition",
        source=[(1, "A", 11, "")],
        clauses=(When("source_update", "t.n > 25", {"val": "'stale'", "n": "t.n * 2"}),),
        expected=[(1, "a", 10), (2, "b", 20), (3, "stale", 60), (4, "stale", 80)],
    ),
    Case(
        "not_matched_by_source_several_clauses",
        source=[(1, "A", 11, "")],
        clauses=(
            When("source_delete", "t.n > 35"),
            When("source_update", assign={"val": "concat('old-', coalesce(t.val, '?'))"}),
        ),
        expected=[(1, "a", 10), (2, "old-b", 20), (3, "old-c", 30)],
    ),
    Case(
        "rows_excluded_by_on_are_not_matched_by_source",
        source=[(1, "A", 11, ""), (3, "C", 33, "")],
        on="s.id = t.id AND t.n < 25",
        clauses=(
            When("matched_update", assign={"val": "'m'"}),
            When("insert"),
            When("source_update", assign={"val": "'nbs'"}),
        ),
        expected=[(1, "m", 10), (2, "nbs", 20), (3, "nbs", 30), (3, "C", 33), (4, "nbs", 40)],
    ),
    Case(
        "empty_source_with_by_source_delete_deletes_all",
        source=[],
        clauses=(*UPSERT, When("source_delete")),
        expected=[],
        metrics=(4, 0, 4, 0),
    ),
    Case(
        "empty_source_changes_nothing",
        source=[],
        clauses=UPSERT,
        expected=list(TARGET),
        metrics=(0, 0, 0, 0),
    ),
    Case(
        "star_ignores_extra_source_columns",
        source=[(4, "D", 44, "extra"), (6, "F", 60, "extra")],
        clauses=UPSERT,
        expected=[(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, "D", 44), (6, "F", 60)],
    ),
    Case(
        "star_with_missing_source_column_fails",
        source=[(1, "A")],
        source_schema="id long, val string",
        clauses=UPSERT,
        expected=ColumnNotFoundError,
        error_text="'n'",
    ),
    Case(
        "schema_evolution_adds_source_columns",
        source=[(2, "B", 22, "new"), (5, "E", 50, "new")],
        source_schema="id long, val string, n int, tag string",
        evolution=True,
        clauses=UPSERT,
        expected=[
            (1, "a", 10, None),
            (2, "B", 22, "new"),
            (3, "c", 30, None),
            (4, None, 40, None),
            (5, "E", 50, "new"),
        ],
    ),
    Case(
        "schema_evolution_keeps_or_nulls_missing_target_columns",
        source=[(2, "B"), (5, "E")],
        source_schema="id long, val string",
        evolution=True,
        clauses=UPSERT,
        expected=[(1, "a", 10), (2, "B", 20), (3, "c", 30), (4, None, 40), (5, "E", None)],
    ),
    Case(
        "schema_evolution_rewriting_every_row",
        source=[(1, "A", 1, "t"), (2, "B", 2, "t"), (3, "C", 3, "t"), (4, "D", 4, "t")],
        source_schema="id long, val string, n int, tag string",
        evolution=True,
        clauses=(When("matched_update"),),
        expected=[(1, "A", 1, "t"), (2, "B", 2, "t"), (3, "C", 3, "t"), (4, "D", 4, "t")],
        versions=2,
    ),
    Case(
        "filtered_and_limited_source",
        source=[(3, "C", 3, ""), (1, "A", 1, ""), (2, "B", -2, ""), (7, "G", 7, "")],
        transform=_limited_source,
        clauses=UPSERT,
        expected=[(1, "A", 1), (2, "b", 20), (3, "C", 3), (4, None, 40)],
    ),
    Case(
        "self_merge",
        source=[],
        transform=_self_source,
        clauses=(When("matched_update"),),
        expected=[(1, "A", 11), (2, "B", 21), (3, "C", 31), (4, None, 41)],
    ),
    Case(
        "one_source_row_matches_many_targets",
        source=[(0, "big", 25, "")],
        on="t.n > s.n",
        clauses=(When("matched_update", assign={"val": "s.val"}),),
        expected=[(1, "a", 10), (2, "b", 20), (3, "big", 30), (4, "big", 40)],
        metrics=(2, 2, 0, 0),
    ),
    Case(
        "insert_with_values_leaves_other_columns_null",
        source=[(8, "H", 80, "")],
        clauses=(When("insert", "s.n > 0", {"id": "s.id", "val": "concat(s.val, '!')"}),),
        expected=[*TARGET, (8, "H!", None)],
    ),
    Case(
        "insert_condition_filters_source_rows",
        source=[(8, "H", 80, "yes"), (9, "I", 90, "no")],
        clauses=(When("insert", "s.op = 'yes'"), When("insert", "s.n > 85", {"id": "s.id"})),
        expected=[*TARGET, (8, "H", 80), (9, None, None)],
    ),
    Case(
        "all_clause_kinds_together",
        source=[(1, "A", 1, "upd"), (2, "", 0, "del"), (6, "F", 6, "ins")],
        clauses=(
            When("matched_delete", "s.op = 'del'"),
            When("matched_update"),
            When("insert"),
            When("source_update", "t.val IS NULL", {"val": "'filled'"}),
            When("source_delete"),
        ),
        expected=[(1, "A", 1), (4, "filled", 40), (6, "F", 6)],
        metrics=(5, 2, 2, 1),
    ),
    Case(
        "non_last_matched_clause_without_condition_fails",
        source=[(1, "A", 1, "")],
        clauses=(When("matched_update"), When("matched_delete", "s.n > 0")),
        expected=InvalidOptionError,
        error_text="NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION",
    ),
    Case(
        "non_last_by_source_clause_without_condition_fails",
        source=[(1, "A", 1, "")],
        clauses=(When("source_delete"), When("source_delete", "t.n > 0")),
        expected=InvalidOptionError,
        error_text="NON_LAST_NOT_MATCHED_BY_SOURCE_CLAUSE_OMIT_CONDITION",
    ),
    Case(
        "insert_referencing_target_fails",
        source=[(8, "H", 80, "")],
        clauses=(When("insert", assign={"id": "s.id", "n": "t.n"}),),
        expected=InvalidOptionError,
        error_text="may only reference source columns",
    ),
    Case(
        "by_source_clause_referencing_source_fails",
        source=[(1, "A", 1, "")],
        clauses=(When("source_delete", "s.n > 0"),),
        expected=InvalidOptionError,
        error_text="may only reference target columns",
    ),
    Case(
        "non_deterministic_condition_fails",
        source=[(1, "A", 1, "")],
        clauses=(When("matched_delete", "rand() < 0.5"),),
        expected=InvalidOptionError,
        error_text="not deterministic",
    ),
    Case(
        "update_of_unknown_column_fails",
        source=[(1, "A", 1, "")],
        clauses=(When("matched_update", assign={"nope": "s.val"}),),
        expected=ColumnNotFoundError,
        error_text="'nope'",
    ),
]


def make_target(spark: SparkSession, uri: str, rows: list[tuple[object, ...]]) -> None:
    """The target as two fragments (two write tasks)."""
    (
        spark.createDataFrame(rows, TARGET_SCHEMA)
        .repartition(2, "id")
        .write.format("lance")
        .mode("append")
        .save(uri)
    )


def make_source(spark: SparkSession, case: Case, uri: str) -> DataFrame:
    source = spark.createDataFrame(case.source, case.source_schema)
    if case.transform is not None:
        source = case.transform(spark, source, uri)
    return source


def table_rows(uri: str) -> list[tuple[object, ...]]:
    rows = [tuple(r.values()) for r in lance.dataset(uri).to_table().to_pylist()]
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))


def check_case(
    spark: SparkSession, case: Case, uri: str, run: Callable[[SparkSession, Case, str], Any]
) -> None:
    """Run ``case`` with ``run`` (a front end) and check the whole table and the versions."""
    make_target(spark, uri, case.target)
    before_version = lance.dataset(uri).version
    before_rows = table_rows(uri)
    if isinstance(case.expected, type):
        with pytest.raises(case.expected, match=None) as caught:
            run(spark, case, uri)
        assert case.error_text in str(caught.value)
        assert lance.dataset(uri).version == before_version, "a failed MERGE committed"
        assert table_rows(uri) == before_rows
        return
    metrics = run(spark, case, uri)
    expected = sorted(case.expected, key=lambda r: tuple((v is None, str(v)) for v in r))
    assert table_rows(uri) == expected
    changed = metrics[0] > 0
    assert lance.dataset(uri).version == before_version + (case.versions if changed else 0)
    if case.metrics is not None:
        assert metrics == case.metrics
    assert metrics[0] == metrics[1] + metrics[2] + metrics[3]


def last_metrics(uri: str) -> dict[str, int]:
    """The operation metrics of the table's latest version (what a SQL MERGE / UPDATE /
    DELETE changed: Spark's result of a row-level operation has no rows)."""
    from lance_spark.table.history import describe_version

    ds = lance.dataset(uri)
    _operation, _parameters, metrics, _user, _app = describe_version(ds, int(ds.version))
    return {k: int(v) for k, v in metrics.items()}


def _render(when: When) -> str:
    cond = f" AND {when.condition}" if when.condition else ""
    sets = when.assign
    group, action = {
        "matched_update": ("WHEN MATCHED", "UPDATE"),
        "matched_delete": ("WHEN MATCHED", "DELETE"),
        "insert": ("WHEN NOT MATCHED", "INSERT"),
        "source_update": ("WHEN NOT MATCHED BY SOURCE", "UPDATE"),
        "source_delete": ("WHEN NOT MATCHED BY SOURCE", "DELETE"),
    }[when.kind]
    if action == "UPDATE":
        action = (
            "UPDATE SET *"
            if sets is None
            else "UPDATE SET " + ", ".join(f"{k} = {v}" for k, v in sets.items())
        )
    elif action == "INSERT" and sets is None:
        action = "INSERT *"
    elif action == "INSERT" and sets is not None:
        action = f"INSERT ({', '.join(sets)}) VALUES ({', '.join(sets.values())})"
    return f"{group}{cond} THEN {action}"


def merge_sql(case: Case, uri: str, source_view: str) -> str:
    evolution = "WITH SCHEMA EVOLUTION " if case.evolution else ""
    clauses = "\n  ".join(_render(w) for w in case.clauses)
    return f"MERGE {evolution}INTO lance.`{uri}` t\nUSING {source_view} s ON {case.on}\n  {clauses}"
