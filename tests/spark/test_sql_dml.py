"""SQL MERGE INTO / UPDATE / DELETE on Lance tables through ``spark.sql`` after ``register``.

Every shared MERGE case runs as SQL (the same engine as the builder, so the same tables,
metrics and errors); then catalog targets, sources (CTE, subquery, VALUES, Lance paths),
names without aliases, UPDATE and DELETE, statements Spark keeps (non-Lance tables, views),
and malformed statements.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pytest
from _merge_cases import CASES, Case, When, check_case, make_source, make_target, table_rows
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from lance_spark import LanceTable
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, SqlSyntaxError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

TARGET = [(1, "a", 10), (2, "b", 20), (3, "c", 30), (4, None, 40)]


def _version(uri: str) -> int:
    return int(lance.dataset(uri).version)


def _one(frame: DataFrame) -> tuple[int, ...]:
    rows = frame.collect()
    assert len(rows) == 1
    return tuple(rows[0])


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


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_merge_case_through_sql(
    spark: SparkSession, table_uri: str, view: Callable[[DataFrame], str], case: Case
) -> None:
    def run_sql(spark: SparkSession, case: Case, uri: str) -> tuple[int, ...]:
        text = merge_sql(case, uri, view(make_source(spark, case, uri)))
        return _one(spark.sql(text))

    check_case(spark, case, table_uri, run_sql)


def test_merge_result_columns(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "A", 1), (9, "I", 9)], "id long, val string, n int"))
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert [(f.name, f.dataType.simpleString()) for f in result.schema.fields] == [
        ("num_affected_rows", "bigint"),
        ("num_updated_rows", "bigint"),
        ("num_deleted_rows", "bigint"),
        ("num_inserted_rows", "bigint"),
    ]
    assert _one(result) == (2, 1, 0, 1)
    latest = LanceTable.forPath(spark, table_uri).history(1).first()
    assert latest is not None
    assert latest.operation == "MERGE"
    assert latest.operationParameters["predicate"] == "s.id = t.id"


# --- (2) catalog tables ---------------------------------------------------------------------------


def test_catalog_table_merge_update_delete(
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
    merged = spark.sql(
        f"MERGE INTO {pets} t USING {updates} s ON s.id = t.id\n"
        "  WHEN MATCHED AND s.op = 'delete' THEN DELETE\n"
        "  WHEN MATCHED THEN UPDATE SET *\n"
        "  WHEN NOT MATCHED THEN INSERT *\n"
        "  WHEN NOT MATCHED BY SOURCE AND t.n > 35 THEN DELETE;"
    )
    assert _one(merged) == (4, 1, 2, 1)
    assert _version(table_uri) == v0 + 1
    assert sorted(tuple(r) for r in spark.table(pets).collect()) == [
        (1, "A", 11),
        (3, "c", 30),
        (7, "G", 70),
    ]

    updated = spark.sql(f"UPDATE {pets} SET val = 'Bob' WHERE val = 'c'")
    assert updated.columns == ["num_affected_rows"]
    assert _one(updated) == (1,)
    assert _version(table_uri) == v0 + 2
    aliased = spark.sql(f"UPDATE {pets} AS x SET x.n = x.n + 1 WHERE x.id = 7")
    assert _one(aliased) == (1,)
    assert _version(table_uri) == v0 + 3

    deleted = spark.sql(f"DELETE FROM {pets} WHERE val IS NULL OR n > 70")
    assert _one(deleted) == (1,)
    assert _version(table_uri) == v0 + 4
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {pets}").collect()) == [
        (1, "A", 11),
        (3, "Bob", 30),
    ]
    operations = [r.operation for r in LanceTable.forName(spark, pets).history(4).collect()]
    assert operations == ["DELETE", "UPDATE", "UPDATE", "MERGE"]


def test_catalog_table_qualified_and_unaliased(
    spark: SparkSession,
    table_uri: str,
    view: Callable[[DataFrame], str],
    catalog_table: Callable[[str], str],
) -> None:
    make_target(spark, table_uri, TARGET)
    pets = catalog_table(table_uri)
    upd = view(spark.createDataFrame([(2, "B"), (8, "H")], "id long, val string"))
    result = spark.sql(
        f"MERGE INTO default.{pets} USING {upd} ON {upd}.id = default.{pets}.id "
        f"WHEN MATCHED THEN UPDATE SET {pets}.val = {upd}.val "
        f"WHEN NOT MATCHED THEN INSERT (id, val, n) VALUES ({upd}.id, {upd}.val, -1)"
    )
    assert _one(result) == (2, 1, 0, 1)
    assert table_rows(table_uri) == [
        (1, "a", 10),
        (2, "B", 20),
        (3, "c", 30),
        (4, None, 40),
        (8, "H", -1),
    ]
    assert _one(spark.sql(f"DELETE FROM default.{pets} WHERE default.{pets}.n < 0")) == (1,)
    assert _one(spark.sql(f"UPDATE spark_catalog.default.{pets} SET {pets}.n = 0 WHERE id = 1"))
    assert (1, "a", 0) in table_rows(table_uri)


def test_catalog_table_schema_evolution_refreshes_the_catalog(
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
    result = spark.sql(
        f"MERGE WITH SCHEMA EVOLUTION INTO {pets} t USING {src} s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET *"
    )
    assert _one(result) == (1, 1, 0, 0)
    assert lance.dataset(table_uri).schema.names == ["id", "val", "n", "tag"]
    assert spark.table(pets).columns == ["id", "val", "n", "tag"]
    rows = {r.id: r.tag for r in spark.table(pets).collect()}
    assert rows == {1: "new", 2: None, 3: None, 4: None}


# --- (3) sources: CTE, subquery, VALUES, Lance tables; no aliases --------------------------------


def test_source_cte(spark: SparkSession, table_uri: str, view: Callable[..., str]) -> None:
    make_target(spark, table_uri, TARGET)
    raw = view(spark.createDataFrame([(1, "x", 5), (2, "y", -5)], "id long, val string, n int"))
    result = spark.sql(
        f"WITH pos AS (SELECT * FROM {raw} WHERE n > 0), up AS (SELECT id, upper(val) AS val "
        f"FROM pos) MERGE INTO lance.`{table_uri}` t USING up s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET val = s.val"
    )
    assert _one(result) == (1, 1, 0, 0)
    assert (1, "X", 10) in table_rows(table_uri)


def test_source_subquery_with_and_without_alias(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    raw = view(spark.createDataFrame([(3, "z"), (5, "e")], "id long, val string"))
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING (SELECT id, val, id * 100 AS n FROM {raw}) s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    assert _one(result) == (2, 1, 0, 1)
    assert (3, "z", 300) in table_rows(table_uri) and (5, "e", 500) in table_rows(table_uri)
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING (SELECT id AS k FROM {raw}) ON k = t.id "
        "WHEN MATCHED THEN DELETE"
    )
    assert _one(result) == (2, 0, 2, 0)
    assert [r[0] for r in table_rows(table_uri)] == [1, 2, 4]


def test_source_values(spark: SparkSession, table_uri: str) -> None:
    make_target(spark, table_uri, TARGET)
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING (VALUES (2L, 'two'), (6L, 'six')) AS s(id, val) "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET val = s.val "
        "WHEN NOT MATCHED THEN INSERT (id, val) VALUES (s.id, s.val)"
    )
    assert _one(result) == (2, 1, 0, 1)
    assert (2, "two", 20) in table_rows(table_uri) and (6, "six", None) in table_rows(table_uri)


def test_no_aliases(spark: SparkSession, table_uri: str, view: Callable[..., str]) -> None:
    make_target(spark, table_uri, TARGET)
    upd = view(spark.createDataFrame([(4, "D")], "key long, newval string"))
    # Unambiguous names need no qualifier at all; the source's name qualifies its columns.
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` USING {upd} ON key = id "
        f"WHEN MATCHED THEN UPDATE SET val = {upd}.newval, n = n + 1"
    )
    assert _one(result) == (1, 1, 0, 0)
    assert (4, "D", 41) in table_rows(table_uri)


def test_source_lance_path_and_time_travel(
    spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    make_target(spark, table_uri, TARGET)
    v1 = _version(table_uri)
    spark.sql(f"DELETE FROM lance.`{table_uri}` WHERE id >= 3")
    # Put back the deleted rows from the version before the DELETE.
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING lance.`{table_uri}` VERSION AS OF {v1} s "
        "ON s.id = t.id WHEN NOT MATCHED THEN INSERT *"
    )
    assert _one(result) == (2, 0, 0, 2)
    assert table_rows(table_uri) == sorted(TARGET, key=lambda r: tuple(str(v) for v in r))
    other = str(tmp_path) + "/other.lance"
    make_target(spark, other, [(1, "one", 1)])
    result = spark.sql(
        f"MERGE INTO lance.`{table_uri}` t USING lance.`{other}` s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET val = s.val"
    )
    assert _one(result) == (1, 1, 0, 0)
    assert (1, "one", 10) in table_rows(table_uri)


# --- (4) UPDATE and DELETE -------------------------------------------------------------------------


def test_update_with_expressions(spark: SparkSession, table_uri: str) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    result = spark.sql(
        f"UPDATE lance.`{table_uri}` SET val = upper(coalesce(val, 'none')), n = n * 2 "
        "WHERE n >= 20 AND id <> 3"
    )
    assert _one(result) == (2,)
    assert _version(table_uri) == v0 + 1
    assert table_rows(table_uri) == [(1, "a", 10), (2, "B", 40), (3, "c", 30), (4, "NONE", 80)]
    # Column names are case-insensitive, as in Spark; the table keeps its types.
    assert _one(spark.sql(f"UPDATE lance.`{table_uri}` p SET P.N = 7L WHERE p.ID = 1")) == (1,)
    assert (1, "a", 7) in table_rows(table_uri)
    assert str(lance.dataset(table_uri).schema.field("n").type) == "int32"
    # Without WHERE: every row.
    assert _one(spark.sql(f"UPDATE lance.`{table_uri}` SET n = 0")) == (4,)
    assert _version(table_uri) == v0 + 3


def test_update_alias_form_of_the_task(
    spark: SparkSession, table_uri: str, catalog_table: Callable[[str], str]
) -> None:
    make_target(spark, table_uri, TARGET)
    t = catalog_table(table_uri)
    assert _one(spark.sql(f"UPDATE {t} AS x SET x.val = 'one' WHERE x.n = 10")) == (1,)
    assert (1, "one", 10) in table_rows(table_uri)


def test_update_and_delete_matching_nothing_commit_nothing(
    spark: SparkSession, table_uri: str
) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    assert _one(spark.sql(f"UPDATE lance.`{table_uri}` SET val = 'x' WHERE id > 100")) == (0,)
    assert _one(spark.sql(f"DELETE FROM lance.`{table_uri}` AS p WHERE p.val = 'zzz'")) == (0,)
    assert _version(table_uri) == v0
    assert table_rows(table_uri) == sorted(TARGET, key=lambda r: tuple(str(v) for v in r))


def test_delete_forms(spark: SparkSession, table_uri: str, view: Callable[..., str]) -> None:
    make_target(spark, table_uri, TARGET)
    v0 = _version(table_uri)
    assert _one(spark.sql(f"DELETE FROM lance.`{table_uri}` WHERE val IS NULL")) == (1,)
    assert _version(table_uri) == v0 + 1
    gone = view(spark.createDataFrame([(2,)], "id long"))
    assert _one(spark.sql(f"DELETE FROM lance.`{table_uri}` WHERE id IN (SELECT id FROM {gone})"))
    assert [r[0] for r in table_rows(table_uri)] == [1, 3]
    assert _one(spark.sql(f"DELETE FROM lance.`{table_uri}`")) == (2,)
    assert table_rows(table_uri) == []
    assert _version(table_uri) == v0 + 3
    assert [r.operation for r in LanceTable.forPath(spark, table_uri).history(3).collect()] == [
        "DELETE"
    ] * 3


# Columns named by keywords that Spark's parser takes as names unquoted.
KEYWORD_COLUMNS = ("values", "key", "value", "date", "timestamp", "comment", "data", "format")


@pytest.mark.parametrize("by_name", [False, True], ids=["path", "catalog"])
def test_keyword_column_names_unquoted(
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
    assert _one(spark.sql(f"UPDATE {t} SET {sets} WHERE {where}")) == (2,)
    for i in (2, 3):
        expected[i][1:] = [v + 100 for v in expected[i][1:]]
    check()

    src = view(spark.createDataFrame([(3, *range(width)), (9, *range(width))], schema))
    cols = ", ".join(KEYWORD_COLUMNS)
    merged = spark.sql(
        f"MERGE INTO {t} tt USING {src} s "
        "ON tt.id = s.id AND tt.values > s.values "
        "WHEN MATCHED AND tt.date >= 0 AND s.key = 1 "
        f"THEN UPDATE SET {', '.join(f'{c} = s.{c} - tt.{c}' for c in KEYWORD_COLUMNS)} "
        f"WHEN NOT MATCHED THEN INSERT (id, {cols}) VALUES (s.id, "
        + ", ".join(f"s.{c} + 1" for c in KEYWORD_COLUMNS)
        + ")"
    )
    assert _one(merged) == (2, 1, 0, 1)
    expected[3][1:] = [k - v for k, v in zip(range(width), expected[3][1:], strict=True)]
    expected[9] = [9, *(k + 1 for k in range(width))]
    check()

    assert _one(spark.sql(f"DELETE FROM {t} WHERE values = 1 OR format = 17")) == (2,)
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
    with pytest.raises(SqlSyntaxError, match=r"clause 2, line 3, col 1.*cannot UPDATE"):
        spark.sql(text)
    with pytest.raises(SqlSyntaxError, match="names 2 column"):
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


def test_semantic_errors_read_like_sparks(
    spark: SparkSession, table_uri: str, view: Callable[..., str]
) -> None:
    make_target(spark, table_uri, TARGET)
    src = view(spark.createDataFrame([(1, "x", 1)], "id long, val string, n int"))
    v0 = _version(table_uri)
    lt = f"lance.`{table_uri}`"
    with pytest.raises(AnalysisException) as caught:
        spark.sql(f"MERGE INTO {lt} t USING {src} s ON id = id WHEN MATCHED THEN DELETE")
    assert caught.value.getCondition() == "AMBIGUOUS_REFERENCE"
    with pytest.raises(AnalysisException) as caught:
        spark.sql(f"UPDATE {lt} SET val = 'x' WHERE nope = 1")
    assert caught.value.getCondition() == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    with pytest.raises(AnalysisException) as caught:
        spark.sql(
            f"MERGE INTO {lt} t USING {src} s ON s.id = t.id WHEN MATCHED THEN "
            "UPDATE SET val = s.nope"
        )
    assert "UNRESOLVED_COLUMN" in str(caught.value)
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        spark.sql(f"UPDATE {lt} SET nope = 1")
    with pytest.raises(InvalidOptionError, match="DUPLICATE_ASSIGNMENTS"):
        spark.sql(f"UPDATE {lt} SET val = 'a', VAL = 'b'")
    with pytest.raises(InvalidOptionError, match="NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION"):
        spark.sql(
            f"MERGE INTO {lt} t USING {src} s ON s.id = t.id "
            "WHEN MATCHED THEN DELETE WHEN MATCHED AND s.n > 0 THEN UPDATE SET *"
        )
    with pytest.raises(InvalidOptionError, match="may only reference source columns"):
        spark.sql(
            f"MERGE INTO {lt} t USING {src} s ON s.id = t.id "
            "WHEN NOT MATCHED AND t.n > 0 THEN INSERT *"
        )
    with pytest.raises(InvalidOptionError, match="not deterministic"):
        spark.sql(f"DELETE FROM {lt} WHERE rand() < 0.5")
    assert _version(table_uri) == v0
