"""SQL MERGE INTO / UPDATE / DELETE on Lance tables, planned by Spark itself (the companion's
tables support row-level operations), through ``spark.sql``.

Every shared MERGE case runs as SQL (the same tables and metrics as the builder; Spark's own
errors); then catalog targets, sources (CTE, subquery, VALUES, Lance paths), names without
aliases, UPDATE and DELETE, statements on other tables and views, and malformed statements.
A statement's result is Spark's own for a row-level operation (no rows); what it changed is
read from the version's history entry.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from _merge_cases import (
    CASES,
    SOURCE_SCHEMA,
    Case,
    check_case,
    last_metrics,
    make_source,
    make_target,
    merge_sql,
    table_rows,
)
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

TARGET = [(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, None, 40)]


def _version(uri: str) -> int:
    return int(lance.dataset(uri).version)


def _one(frame: DataFrame) -> tuple[int, ...]:
    rows = frame.collect()
    assert len(rows) == 1
    return tuple(rows[0])


def dml_counts(spark: SparkSession, uri: str, text: str) -> tuple[int, ...]:
    """Run the MERGE / UPDATE / DELETE ``text`` on the table at ``uri``; what it changed, from
    the history entry of the version it committed (zeros when it committed none): MERGE
    (affected, updated, deleted, inserted), UPDATE (updated,), DELETE (deleted,)."""
    before = _version(uri)
    assert spark.sql(text).collect() == []  # Spark's result of a row-level operation
    merge = re.search(r"\bMERGE\b", text, re.IGNORECASE) is not None
    update = not merge and text.lstrip().upper().startswith("UPDATE")
    if _version(uri) == before:
        return (0, 0, 0, 0) if merge else (0,)
    entry = LanceTable.forPath(spark, uri).history(1).first()
    assert entry is not None
    m = {k: int(v) for k, v in entry.operationMetrics.items()}
    if merge and entry.operation == "WRITE":
        # A MERGE with only NOT MATCHED clauses, in a session the companion was installed on
        # while running (its analyzer has no LanceInsertOnlyMerge): Spark's plain append.
        assert entry.operationParameters["mode"] == "Append"
        return (m["numOutputRows"], 0, 0, m["numOutputRows"])
    assert entry.operation == ("MERGE" if merge else "UPDATE" if update else "DELETE")
    if merge:
        changed = (m["numUpdatedRows"], m["numDeletedRows"], m["numInsertedRows"])
        return (sum(changed), *changed)
    return (m["numUpdatedRows"],) if update else (m["numDeletedRows"],)


@pytest.fixture
def dml(spark: SparkSession, table_uri: str) -> Callable[[str], tuple[int, ...]]:
    """:func:`dml_counts` on the test's table."""
    return lambda text: dml_counts(spark, table_uri, text)


@pytest.fixture
def catalog_table(spark: SparkSession) -> Iterator[Callable[[str], str]]:
    """``CREATE TABLE <name> USING lance LOCATION '<uri>'`` for a table written at ``uri``."""
    names: list[str] = []

    def create(uri: str) -> str:
        name = f"sqldml_{uuid.uuid4().hex[:12]}"
        spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{uri}'")
        names.append(name)
        return name

    yield create
    for name in names:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


# --- (1) every shared MERGE case, written as SQL -------------------------------------------------


# Spark's own error (its condition or message) where the builder raises the connector's.
SPARK_ERRORS = {
    "cardinality_violation_on_update": "MERGE_CARDINALITY_VIOLATION",
    "cardinality_violation_on_conditional_delete": "MERGE_CARDINALITY_VIOLATION",
    "cardinality_violation_even_when_no_clause_acts": "MERGE_CARDINALITY_VIOLATION",
    "star_with_missing_source_column_fails": "UNRESOLVED_COLUMN",
    "non_last_matched_clause_without_condition_fails": "NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION",
    "non_last_by_source_clause_without_condition_fails": (
        "NON_LAST_NOT_MATCHED_BY_SOURCE_CLAUSE_OMIT_CONDITION"
    ),
    "insert_referencing_target_fails": "UNRESOLVED_COLUMN",
    "by_source_clause_referencing_source_fails": "UNRESOLVED_COLUMN",
    "non_deterministic_condition_fails": "NON_DETERMINISTIC",
    "update_of_unknown_column_fails": "UNRESOLVED_COLUMN",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_merge_case_through_sql(
    spark: SparkSession, table_uri: str, view: Callable[[DataFrame], str], case: Case
) -> None:
    def run_sql(spark: SparkSession, case: Case, uri: str) -> tuple[int, ...]:
        text = merge_sql(case, uri, view(make_source(spark, case, uri)))
        if not isinstance(case.expected, type):
            return dml_counts(spark, uri, text)
        try:
            spark.sql(text).collect()
        except Exception as err:  # Spark's error, checked here; the case checks the table
            assert SPARK_ERRORS[case.name] in str(err), str(err)
            raise case.expected(case.error_text) from err
        raise AssertionError(f"{case.name}: the MERGE did not fail")

    # New columns are committed with the MERGE's version (the case's versions, as the builder's).
    check_case(spark, case, table_uri, run_sql)


def test_merge_history_entry(
    spark: SparkSession,
    dml: Callable[[str], tuple[int, ...]],
    table_uri: str,
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "A", 1), (9, "I", 9)], "id long, val string, n int"))
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert result == (2, 1, 0, 1)
    latest = LanceTable.forPath(spark, table_uri).history(1).first()
    assert latest is not None
    assert latest.operation == "MERGE"
    metrics = {k: int(v) for k, v in latest.operationMetrics.items()}
    assert metrics["numTargetRowsUpdated"] == 1 and metrics["numTargetRowsInserted"] == 1
    assert metrics["numTargetRowsDeleted"] == 0 and metrics["numOutputRows"] == 2


def test_the_history_entry_says_what_the_statement_was(
    spark: SparkSession,
    dml: Callable[[str], tuple[int, ...]],
    table_uri: str,
    view: Callable[..., str],
) -> None:
    """operationParameters as Delta's: the predicate (Spark's SQL of it), and a MERGE's clauses
    as JSON lists of action types and conditions; the same from the table API."""
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "A", 1), (9, "I", 9)], "id long, val string, n int"))
    assert dml(
        f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
        "WHEN MATCHED AND s.n > 5 THEN DELETE WHEN MATCHED THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT * "
        "WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN UPDATE SET val = 'gone'"
    ) == (3, 2, 0, 1)
    table = LanceTable.forPath(spark, table_uri)
    merge = table.history(1).first().operationParameters
    assert merge["predicate"] == "(s.id = t.id)"
    assert json.loads(merge["matchedPredicates"]) == [
        {"actionType": "delete", "predicate": "(s.n > 5)"},
        {"actionType": "update"},
    ]
    assert json.loads(merge["notMatchedPredicates"]) == [{"actionType": "insert"}]
    assert json.loads(merge["notMatchedBySourcePredicates"]) == [
        {"actionType": "update", "predicate": "(t.id = 4L)"}
    ]
    assert dml(f"UPDATE lance.`{table_uri}` SET val = 'u' WHERE id = 3") == (1,)
    assert table.history(1).first().operationParameters == {"predicate": "(id = 3L)"}
    assert dml(f"DELETE FROM lance.`{table_uri}` AS p WHERE p.val = 'u'") == (1,)
    assert table.history(1).first().operationParameters == {"predicate": "(p.val = 'u')"}
    # The table API's statements are the same statements (update adds the columns it sets).
    table.update("id = 1", {"n": "n + 1"})
    assert table.history(1).first().operationParameters == {"predicate": "(id = 1L)", "set": "n"}
    table.delete(F.col("id") == 9)
    assert table.history(1).first().operationParameters == {"predicate": "(id = 9L)"}


# --- (2) catalog tables ---------------------------------------------------------------------------


def test_catalog_table_merge_update_delete(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[[DataFrame], str],
    catalog_table: Callable[[str], str],
) -> None:
    make_target(spark, table_uri, TARGET)
    pets = catalog_table(table_uri)
    updates = view(
        spark.createDataFrame(
            [(1, "A", 11, "upsert"), (2, None, 0, "delete"), (7, "G", 70, "upsert")],
            "id long, val string, n int, op string",
        )
    )
    v0 = _version(table_uri)
    merged = dml(
        f"MERGE INTO {pets} t USING {updates} s ON s.id = t.id\n"
        "  WHEN MATCHED AND s.op = 'delete' THEN DELETE\n"
        "  WHEN MATCHED THEN UPDATE SET *\n"
        "  WHEN NOT MATCHED THEN INSERT *\n"
        "  WHEN NOT MATCHED BY SOURCE AND t.n > 35 THEN DELETE;"
    )
    assert merged == (4, 1, 2, 1)
    assert _version(table_uri) == v0 + 1
    assert sorted(tuple(r) for r in spark.table(pets).collect()) == [
        (1, "A", 11),
        (3, "c", 30),
        (7, "G", 70),
    ]

    updated = dml(f"UPDATE {pets} SET val = 'Bob' WHERE val = 'c'")
    assert updated == (1,)
    assert _version(table_uri) == v0 + 2
    aliased = dml(f"UPDATE {pets} AS x SET x.n = x.n + 1 WHERE x.id = 7")
    assert aliased == (1,)
    assert _version(table_uri) == v0 + 3

    deleted = dml(f"DELETE FROM {pets} WHERE val IS NULL OR n > 70")
    assert deleted == (1,)
    assert _version(table_uri) == v0 + 4
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {pets}").collect()) == [
        (1, "A", 11),
        (3, "Bob", 30),
    ]
    operations = [r.operation for r in LanceTable.forName(spark, pets).history(4).collect()]
    assert operations == ["DELETE", "UPDATE", "UPDATE", "MERGE"]


def test_catalog_table_qualified_and_unaliased(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[[DataFrame], str],
    catalog_table: Callable[[str], str],
) -> None:
    make_target(spark, table_uri, TARGET)
    pets = catalog_table(table_uri)
    upd = view(spark.createDataFrame([(2, "B"), (8, "H")], "id long, val string"))
    result = dml(
        f"MERGE INTO default.{pets} USING {upd} ON {upd}.id = default.{pets}.id "
        f"WHEN MATCHED THEN UPDATE SET {pets}.val = {upd}.val "
        f"WHEN NOT MATCHED THEN INSERT (id, val, n) VALUES ({upd}.id, {upd}.val, -1)"
    )
    assert result == (2, 1, 0, 1)
    assert table_rows(table_uri) == [
        (1, "a", 10),
        (2, "B", 20),
        (3, "c", 30),
        (4, None, 40),
        (8, "H", -1),
    ]
    assert dml(f"DELETE FROM default.{pets} WHERE default.{pets}.n < 0") == (1,)
    assert dml(f"UPDATE spark_catalog.default.{pets} SET {pets}.n = 0 WHERE id = 1")
    assert (1, "a", 0) in table_rows(table_uri)


def test_catalog_table_schema_evolution_refreshes_the_catalog(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[[DataFrame], str],
    catalog_table: Callable[[str], str],
) -> None:
    make_target(spark, table_uri, TARGET)
    pets = catalog_table(table_uri)
    src = view(
        spark.createDataFrame([(1, "A", 1, "new")], "id long, val string, n int, tag string")
    )
    result = dml(
        f"MERGE WITH SCHEMA EVOLUTION INTO {pets} t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET *"
    )
    assert result == (1, 1, 0, 0)
    assert lance.dataset(table_uri).schema.names == ["id", "val", "n", "tag"]
    assert spark.table(pets).columns == ["id", "val", "n", "tag"]
    rows = {r.id: r.tag for r in spark.table(pets).collect()}
    assert rows == {1: "new", 2: None, 3: None, 4: None}


def test_schema_evolution_commits_with_the_merge_or_not_at_all(
    spark: SparkSession, table_uri: str
) -> None:
    """The new columns are committed in the MERGE's own version (one version, its history
    entry); a MERGE that fails leaves the table as it was (no version, same schema)."""
    frame = spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string")
    frame.coalesce(1).write.format("lance").save(table_uri)  # one fragment
    target = f"lance.`{table_uri}`"
    failing = (
        f"MERGE WITH SCHEMA EVOLUTION INTO {target} t USING (SELECT 1L k, 'x' v, 42 extra "
        "UNION ALL SELECT 1L, 'y', 43) s ON t.k = s.k "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    with pytest.raises(Exception, match="MERGE_CARDINALITY_VIOLATION"):
        spark.sql(failing).collect()
    ds = lance.dataset(table_uri)
    assert [v["version"] for v in ds.versions()] == [1]
    assert ds.schema.names == ["k", "v"]
    spark.sql(
        f"MERGE WITH SCHEMA EVOLUTION INTO {target} t USING (SELECT 1L k, 'x' v, 42 extra) s "
        "ON t.k = s.k WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    ).collect()
    # A matched row keeps its value of a column the statement adds (null, read from no file).
    spark.sql(
        f"MERGE WITH SCHEMA EVOLUTION INTO {target} t USING (SELECT 2L k, 'y' v, 'n' tag "
        "UNION ALL SELECT 3L, 'z', 'm') s ON t.k = s.k "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    ).collect()
    ds = lance.dataset(table_uri)
    # The first MERGE is one version; the second empties the fragment (its last live row is
    # rewritten), which Lance's Merge of a new schema cannot drop: it commits the new column
    # first, marked as its own (ADD COLUMNS of the MERGE), once its tasks all succeeded.
    history = [
        ds.read_transaction(v["version"]).transaction_properties or {} for v in ds.versions()
    ]
    operations = [props["lance_spark.operation"] for props in history]
    assert operations == ["WRITE", "MERGE", "ADD COLUMNS", "MERGE"]
    assert json.loads(history[2]["lance_spark.operationParameters"]) == {
        "columns": "tag",
        "statement": "MERGE",
    }
    assert lance.dataset(table_uri, version=2).schema.names == ["k", "v", "extra"]
    assert ds.schema.names == ["k", "v", "extra", "tag"]
    rows = sorted(ds.to_table().to_pylist(), key=lambda r: r["k"])
    assert rows == [
        {"k": 1, "v": "x", "extra": 42, "tag": None},
        {"k": 2, "v": "y", "extra": None, "tag": None},
        {"k": 3, "v": "z", "extra": None, "tag": "m"},
    ]
    assert sorted(map(tuple, spark.table(target).collect())) == [
        (r["k"], r["v"], r["extra"], r["tag"]) for r in rows
    ]


# --- (3) sources: CTE, subquery, VALUES, Lance tables; no aliases --------------------------------


def test_source_cte(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    raw = view(spark.createDataFrame([(1, "x", 5), (2, "y", -5)], "id long, val string, n int"))
    result = dml(
        f"WITH pos AS (SELECT * FROM {raw} WHERE n > 0), up AS (SELECT id, upper(val) AS val "
        f"FROM pos) MERGE INTO lance.`{table_uri}` t USING up s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET val = s.val"
    )
    assert result == (1, 1, 0, 0)
    assert (1, "X", 10) in table_rows(table_uri)


def test_source_subquery_with_and_without_alias(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    raw = view(spark.createDataFrame([(3, "z"), (5, "e")], "id long, val string"))
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t USING (SELECT id, val, id * 100 AS n FROM {raw}) s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert result == (2, 1, 0, 1)
    assert (3, "z", 300) in table_rows(table_uri) and (5, "e", 500) in table_rows(table_uri)
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t USING (SELECT id AS k FROM {raw}) ON k = t.id "
        "WHEN MATCHED THEN DELETE"
    )
    assert result == (2, 0, 2, 0)
    assert [r[0] for r in table_rows(table_uri)] == [1, 2, 4]


def test_source_values(
    dml: Callable[[str], tuple[int, ...]], spark: SparkSession, table_uri: str
) -> None:
    make_target(spark, table_uri, TARGET)
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t "
        "USING (SELECT * FROM VALUES (2L, 'two'), (6L, 'six') AS v(id, val)) s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET val = s.val "
        "WHEN NOT MATCHED THEN INSERT (id, val) VALUES (s.id, s.val)"
    )
    assert result == (2, 1, 0, 1)
    assert (2, "two", 20) in table_rows(table_uri) and (6, "six", None) in table_rows(table_uri)


def test_no_aliases(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    upd = view(spark.createDataFrame([(4, "D")], "key long, newval string"))
    # Unambiguous names need no qualifier at all; the source's name qualifies its columns.
    result = dml(
        f"MERGE INTO lance.`{table_uri}` USING {upd} ON key = id "
        f"WHEN MATCHED THEN UPDATE SET val = {upd}.newval, n = n + 1"
    )
    assert result == (1, 1, 0, 0)
    assert (4, "D", 41) in table_rows(table_uri)


def test_source_lance_path_and_time_travel(
    dml: Callable[[str], tuple[int, ...]], spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    make_target(spark, table_uri, TARGET)
    v1 = _version(table_uri)
    spark.sql(f"DELETE FROM lance.`{table_uri}` WHERE id >= 3")
    # Put back the deleted rows from the version before the DELETE.
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t "
        f"USING (SELECT * FROM lance.`{table_uri}` VERSION AS OF {v1}) s "
        "ON s.id = t.id WHEN NOT MATCHED THEN INSERT *"
    )
    assert result == (2, 0, 0, 2)
    assert table_rows(table_uri) == sorted(TARGET, key=lambda r: tuple(str(v) for v in r))
    other = str(tmp_path) + "/other.lance"
    make_target(spark, other, [(1, "one", 1)])
    result = dml(
        f"MERGE INTO lance.`{table_uri}` t USING lance.`{other}` s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET val = s.val"
    )
    assert result == (1, 1, 0, 0)
    assert (1, "one", 10) in table_rows(table_uri)


# --- (4) UPDATE and DELETE -------------------------------------------------------------------------


def test_update_with_expressions(
    dml: Callable[[str], tuple[int, ...]], spark: SparkSession, table_uri: str
) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    result = dml(
        f"UPDATE lance.`{table_uri}` SET val = upper(coalesce(val, 'none')), n = n * 2 "
        "WHERE n >= 20 AND id <> 3"
    )
    assert result == (2,)
    assert _version(table_uri) == v0 + 1
    assert table_rows(table_uri) == [(1, "a", 10), (2, "B", 40), (3, "c", 30), (4, "NONE", 80)]
    # Column names are case-insensitive, as in Spark; the table keeps its types.
    assert dml(f"UPDATE lance.`{table_uri}` p SET P.N = 7L WHERE p.ID = 1") == (1,)
    assert (1, "a", 7) in table_rows(table_uri)
    assert str(lance.dataset(table_uri).schema.field("n").type) == "int32"
    # Without WHERE: every row.
    assert dml(f"UPDATE lance.`{table_uri}` SET n = 0") == (4,)
    assert _version(table_uri) == v0 + 3


def test_update_alias_form_of_the_task(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    catalog_table: Callable[[str], str],
) -> None:
    make_target(spark, table_uri, TARGET)
    t = catalog_table(table_uri)
    assert dml(f"UPDATE {t} AS x SET x.val = 'one' WHERE x.n = 10") == (1,)
    assert (1, "one", 10) in table_rows(table_uri)


def test_update_and_delete_matching_nothing_commit_nothing(
    dml: Callable[[str], tuple[int, ...]], spark: SparkSession, table_uri: str
) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    assert dml(f"UPDATE lance.`{table_uri}` SET val = 'x' WHERE id > 100") == (0,)
    assert dml(f"DELETE FROM lance.`{table_uri}` AS p WHERE p.val = 'zzz'") == (0,)
    assert _version(table_uri) == v0
    assert table_rows(table_uri) == sorted(TARGET, key=lambda r: tuple(str(v) for v in r))


def test_delete_forms(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    assert dml(f"DELETE FROM lance.`{table_uri}` WHERE val IS NULL") == (1,)
    assert _version(table_uri) == v0 + 1
    gone = view(spark.createDataFrame([(2,)], "id long"))
    assert dml(f"DELETE FROM lance.`{table_uri}` WHERE id IN (SELECT id FROM {gone})")
    assert [r[0] for r in table_rows(table_uri)] == [1, 3]
    assert dml(f"DELETE FROM lance.`{table_uri}`") == (2,)
    assert table_rows(table_uri) == []
    assert _version(table_uri) == v0 + 3
    assert [r.operation for r in LanceTable.forPath(spark, table_uri).history(3).collect()] == [
        "DELETE"
    ] * 3


def test_statement_options_reach_the_commit(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    """``WITH (...)`` after the target of MERGE / UPDATE / DELETE passes write options to the
    statement's commit: userMetadata lands in each version's history entry; the statement's
    read does not take them for read options (it would refuse userMetadata)."""
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "A", 11), (9, "z", 90)], "id long, val string, n int"))
    spark.sql(
        f"MERGE INTO lance.`{table_uri}` AS t WITH ('userMetadata' = 'merge note') "
        f"USING {src} AS s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(
        f"UPDATE lance.`{table_uri}` AS t WITH ('userMetadata' = 'update note') "
        "SET val = 'q' WHERE t.id = 2"
    )
    spark.sql(f"DELETE FROM lance.`{table_uri}` WITH ('userMetadata' = 'delete note') WHERE id = 3")
    history = LanceTable.forPath(spark, table_uri).history(3).collect()
    assert [(h.operation, h.userMetadata) for h in history] == [
        ("DELETE", "delete note"),
        ("UPDATE", "update note"),
        ("MERGE", "merge note"),
    ]
    assert table_rows(table_uri) == [(1, "A", 11), (2, "q", 20), (4, None, 40), (9, "z", 90)]


# Columns named by keywords that Spark's parser takes as names unquoted.
KEYWORD_COLUMNS = ("values", "key", "value", "date", "timestamp", "comment", "data", "format")


@pytest.mark.parametrize("by_name", [False, True], ids=["path", "catalog"])
def test_keyword_column_names_unquoted(
    dml: Callable[[str], tuple[int, ...]],
    spark: SparkSession,
    table_uri: str,
    view: Callable[..., str],
    catalog_table: Callable[[str], str],
    by_name: bool,
) -> None:
    schema = "id long, " + ", ".join(f"`{c}` int" for c in KEYWORD_COLUMNS)
    width = len(KEYWORD_COLUMNS)
    rows = [(i, *(10 * i + k for k in range(width))) for i in (1, 2, 3)]
    spark.createDataFrame(rows, schema).write.format("lance").save(table_uri)
    t = catalog_table(table_uri) if by_name else f"lance.`{table_uri}`"
    v0 = _version(table_uri)
    expected = {r[0]: list(r) for r in rows}

    def check() -> None:
        assert sorted(table_rows(table_uri)) == sorted(tuple(r) for r in expected.values())

    sets = ", ".join(f"{c} = {c} + 100" for c in KEYWORD_COLUMNS)
    where = " AND ".join(f"{c} >= 20" for c in KEYWORD_COLUMNS)
    assert dml(f"UPDATE {t} SET {sets} WHERE {where}") == (2,)
    for i in (2, 3):
        expected[i][1:] = [v + 100 for v in expected[i][1:]]
    check()

    src = view(spark.createDataFrame([(3, *range(width)), (9, *range(width))], schema))
    cols = ", ".join(KEYWORD_COLUMNS)
    merged = dml(
        f"MERGE INTO {t} tt USING {src} s "
        "ON tt.id = s.id AND tt.values > s.values "
        "WHEN MATCHED AND tt.date >= 0 AND s.key = 1 "
        f"THEN UPDATE SET {', '.join(f'{c} = s.{c} - tt.{c}' for c in KEYWORD_COLUMNS)} "
        f"WHEN NOT MATCHED THEN INSERT (id, {cols}) VALUES (s.id, "
        + ", ".join(f"s.{c} + 1" for c in KEYWORD_COLUMNS)
        + ")"
    )
    assert merged == (2, 1, 0, 1)
    expected[3][1:] = [k - v for k, v in zip(range(width), expected[3][1:], strict=True)]
    expected[9] = [9, *(k + 1 for k in range(width))]
    check()

    assert dml(f"DELETE FROM {t} WHERE values = 1 OR format = 17") == (2,)
    del expected[9], expected[1]
    check()
    assert _version(table_uri) == v0 + 3
    assert [r.operation for r in LanceTable.forPath(spark, table_uri).history(3).collect()] == [
        "DELETE",
        "MERGE",
        "UPDATE",
    ]


# --- (5) statements Spark keeps -----------------------------------------------------------------------


def _error(call: Callable[[], object]) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.fixture
def original_sql(spark: SparkSession) -> Callable[..., DataFrame]:
    """``spark.sql`` as it was before ``register`` wrapped it."""
    wrapped: Callable[..., DataFrame] = spark.sql.__wrapped__  # type: ignore[attr-defined]
    return wrapped


def test_non_lance_tables_get_sparks_own_errors(
    spark: SparkSession, original_sql: Callable[..., DataFrame], view: Callable[..., str]
) -> None:
    name = f"sqldml_pq_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id BIGINT, val STRING) USING parquet")
    try:
        src = view(spark.createDataFrame([(1, "x")], "id long, val string"))
        statements = [
            f"UPDATE {name} SET val = 'x' WHERE id = 1",
            f"DELETE FROM {name} WHERE id = 1",
            f"MERGE INTO {name} t USING {src} s ON s.id = t.id WHEN MATCHED THEN UPDATE SET *",
            f"MERGE WITH SCHEMA EVOLUTION INTO {name} t USING {src} s ON s.id = t.id "
            "WHEN MATCHED THEN DELETE",
            "UPDATE sqldml_no_such_table SET a = 1",
            f"MERGE INTO {name} t USING {src} s ON s.id = t.id WHEN MATCHED THEN INSERT *",
        ]
        for text in statements:
            wrapped = _error(lambda text=text: spark.sql(text))
            original = _error(lambda text=text: original_sql(text))
            assert wrapped == original, text
        assert (
            "UNSUPPORTED_FEATURE.TABLE_OPERATION"
            in _error(lambda: spark.sql(f"UPDATE {name} SET val = 'x'"))[1]
        )
        spark.sql(f"INSERT INTO {name} VALUES (1, 'a')")
        assert (
            spark.sql(f"SELECT * FROM {name}").collect()
            == original_sql(f"SELECT * FROM {name}").collect()
        )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_views_of_lance_tables_are_not_changed(
    spark: SparkSession,
    table_uri: str,
    original_sql: Callable[..., DataFrame],
    view: Callable[..., str],
) -> None:
    make_target(spark, table_uri, TARGET)
    filtered = view(spark.read.format("lance").load(table_uri).filter("id > 2"))
    v0 = _version(table_uri)
    for text in (f"DELETE FROM {filtered}", f"UPDATE {filtered} SET val = 'x'"):
        assert _error(lambda text=text: spark.sql(text)) == _error(
            lambda text=text: original_sql(text)
        )
    assert _version(table_uri) == v0


# --- (6) malformed statements and semantic errors ----------------------------------------------------


def test_invalid_clause_on_lance_table(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "x", 1)], "id long, val string, n int"))
    v0 = _version(table_uri)
    text = (
        f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id\n"
        "WHEN MATCHED THEN UPDATE SET *\n"
        "WHEN NOT MATCHED THEN UPDATE SET n = s.n"
    )
    with pytest.raises(ParseException) as caught:
        spark.sql(text)
    assert caught.value.getCondition() == "PARSE_SYNTAX_ERROR" and "line 3" in str(caught.value)
    with pytest.raises(AnalysisException):
        spark.sql(
            f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
            "WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id)"
        )
    assert _version(table_uri) == v0


def test_syntax_errors_are_reported_by_sparks_parser(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "x", 1)], "id long, val string, n int"))
    for text, near in [
        (
            f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
            "WHEN MATCHED THEN DELET",
            "'DELET'",
        ),
        (f"UPDATE lance.`{table_uri}` SET val = 'x' FROM {src}", "'FROM'"),
        (f"UPDATE lance.`{table_uri}` SET val = 'x' WHERE", "end of input"),
        (f"DELETE FROM lance.`{table_uri}` WHERE id = = 1", "'='"),
    ]:
        with pytest.raises(ParseException) as caught:
            spark.sql(text)
        assert caught.value.getCondition() == "PARSE_SYNTAX_ERROR"
        assert near in str(caught.value) and "pos" in str(caught.value), text


def test_semantic_errors_are_sparks(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "x", 1)], "id long, val string, n int"))
    v0 = _version(table_uri)
    lt = f"lance.`{table_uri}`"

    def condition(text: str) -> str:
        with pytest.raises(Exception) as caught:  # AnalysisException, or Spark's runtime error
            spark.sql(text).collect()
        return str(caught.value)

    assert "AMBIGUOUS_REFERENCE" in condition(
        f"MERGE INTO {lt} t USING {src} s ON id = id WHEN MATCHED THEN DELETE"
    )
    assert "UNRESOLVED_COLUMN" in condition(f"UPDATE {lt} SET val = 'x' WHERE nope = 1")
    assert "UNRESOLVED_COLUMN" in condition(
        f"MERGE INTO {lt} t USING {src} s ON s.id = t.id WHEN MATCHED THEN UPDATE SET val = s.nope"
    )
    assert "UNRESOLVED_COLUMN" in condition(f"UPDATE {lt} SET nope = 1")
    assert "Multiple assignments for 'val'" in condition(f"UPDATE {lt} SET val = 'a', VAL = 'b'")
    assert "NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION" in condition(
        f"MERGE INTO {lt} t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN DELETE WHEN MATCHED AND s.n > 0 THEN UPDATE SET *"
    )
    assert "UNRESOLVED_COLUMN" in condition(
        f"MERGE INTO {lt} t USING {src} s ON s.id = t.id WHEN NOT MATCHED AND t.n > 0 THEN INSERT *"
    )
    assert "NON_DETERMINISTIC" in condition(f"DELETE FROM {lt} WHERE rand() < 0.5")
    assert _version(table_uri) == v0
    assert table_rows(table_uri) == sorted(TARGET, key=lambda r: tuple(str(v) for v in r))


# --- (7) concurrency -------------------------------------------------------------------------------


def test_a_concurrent_commit_refuses_the_statement_naming_both_versions(
    spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    """A commit between the statement's read and its commit that it may have read (here an
    append: UPDATE's condition may match the added rows) refuses it with
    ConcurrentModificationError naming both versions (Delta's behaviour for SQL); the table
    keeps the concurrent commit only and no file of the statement is left."""
    make_target(spark, table_uri, TARGET)
    read = _version(table_uri)
    flag = tmp_path / "appended"

    @F.udf("string")
    def appends_once(val: str | None) -> str | None:
        if not flag.exists():
            flag.touch()
            row = pa.table({"id": [99], "val": ["late"], "n": [99]}).cast(
                lance.dataset(table_uri).schema
            )
            lance.write_dataset(row, table_uri, mode="append")
        return val

    name = f"appends_once_{uuid.uuid4().hex[:8]}"
    spark.udf.register(name, appends_once)
    with pytest.raises(Exception) as caught:
        spark.sql(f"UPDATE lance.`{table_uri}` SET val = {name}(val) WHERE n >= 20").collect()
    message = str(caught.value)
    assert "ConcurrentModificationError" in message
    assert f"read version {read}" in message and f"version {read + 1}" in message
    assert _version(table_uri) == read + 1
    expected = sorted([*TARGET, (99, "late", 99)], key=lambda r: tuple(str(v) for v in r))
    assert table_rows(table_uri) == expected
    ds = lance.dataset(table_uri)
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.data_files()}
    on_disk = {p.name for p in (Path(table_uri) / "data").iterdir()}
    assert on_disk == referenced


def _once(spark: SparkSession, tmp_path: Path, action: Callable[[], None]) -> str:
    """The name of a string UDF that runs ``action`` (a concurrent commit) the first time it
    is called, inside the statement that calls it, and returns its argument."""
    flag = tmp_path / f"once_{uuid.uuid4().hex[:8]}"

    @F.udf("string")
    def once(val: str | None) -> str | None:
        if not flag.exists():
            flag.touch()
            action()
        return val

    name = f"once_{uuid.uuid4().hex[:8]}"
    spark.udf.register(name, once)
    return name


def test_a_merge_conflicts_only_with_commits_of_the_rows_its_keys_read(
    spark: SparkSession, table_uri: str, tmp_path: Path, view: Callable[..., str]
) -> None:
    """A MERGE whose target read was narrowed to the source's keys (here 2 and 9) is
    refused by a concurrent commit only when that commit added rows with those keys, or
    deleted a matched row it left alone (the MERGE would have inserted it instead); an append
    of other keys commits before it, as with the table API."""
    make_target(spark, table_uri, TARGET)
    schema = lance.dataset(table_uri).schema

    def append(key: int) -> Callable[[], None]:
        row = pa.table({"id": [key], "val": ["late"], "n": [key]})
        return lambda: lance.write_dataset(row.cast(schema), table_uri, mode="append")

    src = view(spark.createDataFrame([(2, "B", 2, ""), (9, "I", 9, "")], SOURCE_SCHEMA))

    def merge(matched: str, insert_val: str = "s.val", source: str = src) -> str:
        return (
            f"MERGE INTO lance.`{table_uri}` t USING {source} s ON s.id = t.id "
            f"WHEN MATCHED {matched} WHEN NOT MATCHED THEN INSERT (id, val, n) "
            f"VALUES (s.id, {insert_val}, s.n)"
        )

    read = _version(table_uri)
    other = _once(spark, tmp_path, append(50))
    assert dml_counts(spark, table_uri, merge(f"THEN UPDATE SET val = {other}(s.val)")) == (
        2,
        1,
        0,
        1,
    )
    assert _version(table_uri) == read + 2
    rows = table_rows(table_uri)
    assert (50, "late", 50) in rows and (2, "B", 20) in rows and (9, "I", 9) in rows

    read = _version(table_uri)
    key = _once(spark, tmp_path, append(9))
    with pytest.raises(Exception) as caught:
        spark.sql(merge(f"THEN UPDATE SET val = {key}(s.val)")).collect()
    message = str(caught.value)
    assert "ConcurrentModificationError" in message and f"version {read + 1}" in message
    assert "matching this statement's read filter `id` IN (2,9)" in message
    assert _version(table_uri) == read + 1

    read = _version(table_uri)
    gone = _once(spark, tmp_path, lambda: lance.dataset(table_uri).delete("id = 2"))
    src = view(spark.createDataFrame([(2, "B", 2, ""), (11, "K", 11, "")], SOURCE_SCHEMA))
    with pytest.raises(Exception) as caught:
        spark.sql(merge("AND s.val = 'never' THEN DELETE", f"{gone}(s.val)", src)).collect()
    message = str(caught.value)
    assert "ConcurrentModificationError" in message and "deleted rows among" in message
    assert _version(table_uri) == read + 1
    assert not any(r[0] == 2 for r in table_rows(table_uri))


def test_an_insert_only_merge_is_a_serializable_merge(
    connect_spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    """A MERGE with only NOT MATCHED clauses stays Spark's row-level MERGE on Lance (Spark
    would plan a plain append, which nothing checks against concurrent commits): a row with a
    source key committed meanwhile refuses it, instead of the key ending up twice; without a
    race it is one MERGE version with its metrics, and a source row matching a target row
    (twice, even) does nothing. On the Connect server (built with the companion's extension):
    the classic test session had the companion installed while running, and its analyzer
    lacks the companion's rule."""
    spark = connect_spark
    make_target(spark, table_uri, TARGET)
    schema = lance.dataset(table_uri).schema
    row = pa.table({"id": [9], "val": ["late"], "n": [9]}).cast(schema)
    racing = _once(spark, tmp_path, lambda: lance.write_dataset(row, table_uri, mode="append"))
    rows = [(2, "B", 2, ""), (2, "C", 3, ""), (9, "I", 9, "")]
    src = f"insert_only_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(rows, SOURCE_SCHEMA).createOrReplaceTempView(src)

    def merge(val: str) -> str:
        return (
            f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
            f"WHEN NOT MATCHED THEN INSERT (id, val, n) VALUES (s.id, {val}, s.n)"
        )

    read = _version(table_uri)
    with pytest.raises(Exception) as caught:
        spark.sql(merge(f"{racing}(s.val)")).collect()
    message = str(caught.value)
    assert "ConcurrentModificationError" in message and f"version {read + 1}" in message
    assert _version(table_uri) == read + 1
    assert [r for r in table_rows(table_uri) if r[0] == 9] == [(9, "late", 9)]

    lance.dataset(table_uri).delete("id = 9")
    read = _version(table_uri)
    assert dml_counts(spark, table_uri, merge("s.val")) == (1, 0, 0, 1)
    assert _version(table_uri) == read + 1
    assert LanceTable.forPath(spark, table_uri).history(1).first().operation == "MERGE"
    assert [r for r in table_rows(table_uri) if r[0] in (2, 9)] == [(2, "b", 20), (9, "I", 9)]


# --- (8) DataFrame.mergeInto -----------------------------------------------------------------------


def test_dataframe_merge_into(
    spark: SparkSession, table_uri: str, catalog_table: Callable[[str], str]
) -> None:
    """PySpark's own MERGE API (``DataFrame.mergeInto``, classic and Connect) on a catalog
    table and on a path: Spark plans it like the statement."""
    make_target(spark, table_uri, TARGET)
    pets = catalog_table(table_uri)
    source = spark.createDataFrame(
        [(1, "A", 11, "u"), (2, "", 0, "d"), (7, "G", 70, "u")], SOURCE_SCHEMA
    ).alias("source")
    v0 = _version(table_uri)
    (
        source.mergeInto(pets, F.expr(f"{pets}.id = source.id"))
        .whenMatched(F.expr("source.op = 'd'"))
        .delete()
        .whenMatched()
        .update({"val": F.expr("source.val"), "n": F.expr("source.n")})
        .whenNotMatched()
        .insert({"id": F.expr("source.id"), "val": F.expr("source.val"), "n": F.expr("source.n")})
        .whenNotMatchedBySource(F.expr(f"{pets}.n > 35"))
        .delete()
        .merge()
    )
    assert _version(table_uri) == v0 + 1
    assert table_rows(table_uri) == [(1, "A", 11), (3, "c", 30), (7, "G", 70)]
    assert last_metrics(table_uri)["numTargetRowsDeleted"] == 2
    wider = spark.createDataFrame(
        [(3, "C", 3, "new")], "id long, val string, n int, tag string"
    ).alias("source")
    (
        wider.mergeInto(f"lance.`{table_uri}`", F.expr(f"lance.`{table_uri}`.id = source.id"))
        .whenMatched()
        .updateAll()
        .withSchemaEvolution()
        .merge()
    )
    assert lance.dataset(table_uri).schema.names == ["id", "val", "n", "tag"]
    assert (3, "C", 3, "new") in table_rows(table_uri)


# --- (9) target pruning by the source's keys ---------------------------------------------------------


def _merge_plan(spark: SparkSession, text: str) -> str:
    return "\n".join(str(r[0]) for r in spark.sql(f"EXPLAIN {text}").collect())


def test_merge_reads_only_the_target_rows_the_source_keys_can_match(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    """A MERGE whose source gives the same rows every time (here local rows) and that has no
    NOT MATCHED BY SOURCE clause reads the target with its ON key IN the source's keys (the
    filter pushed into Lance); one that has, or whose source reads a table, or that has more
    source rows than spark.lance.merge.keyPruning.maxSourceRows, reads the whole target.
    The results are the same either way."""
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(2, "B", 2, ""), (9, "I", 9, "")], SOURCE_SCHEMA))
    upsert = (
        f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET val = s.val WHEN NOT MATCHED THEN INSERT (id, val, n) "
        "VALUES (s.id, s.val, s.n)"
    )
    assert "LanceFilter=`id` IN (2,9)" in _merge_plan(spark, upsert)
    by_source = upsert + " WHEN NOT MATCHED BY SOURCE AND t.n = 40 THEN DELETE"
    assert "`id` IN" not in _merge_plan(spark, by_source)
    other = f"{table_uri}.other"
    make_target(spark, other, [(2, "x", 0)])
    from_table = upsert.replace(f"USING {src} s", f"USING lance.`{other}` s")
    assert "`id` IN" not in _merge_plan(spark, from_table)
    spark.conf.set("spark.lance.merge.keyPruning.maxSourceRows", "1")
    try:
        assert "`id` IN" not in _merge_plan(spark, upsert)
    finally:
        spark.conf.unset("spark.lance.merge.keyPruning.maxSourceRows")
    assert dml_counts(spark, table_uri, by_source) == (3, 1, 1, 1)
    assert table_rows(table_uri) == [(1, "a", 10), (2, "B", 20), (3, "c", 30), (9, "I", 9)]
    # A string key: its literals quoted for Lance ('it''s').
    keys = view(spark.createDataFrame([(7, "c", 7, ""), (8, "it's", 8, "")], SOURCE_SCHEMA))
    on_val = (
        f"MERGE INTO lance.`{table_uri}` t USING {keys} s ON s.val = t.val "
        "WHEN MATCHED THEN UPDATE SET n = s.n"
    )
    assert "LanceFilter=`val` IN ('c','it''s')" in _merge_plan(spark, on_val)
    assert dml_counts(spark, table_uri, on_val) == (1, 1, 0, 0)
    assert (3, "c", 7) in table_rows(table_uri)
