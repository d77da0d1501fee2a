"""Column DEFAULT values of ``USING lance`` tables, as Spark defines them: kept with the Lance
table (the field metadata ``CURRENT_DEFAULT`` / ``EXISTS_DEFAULT``), reported in the schema
Spark sees (DESCRIBE), used by INSERT (omitted columns, ``DEFAULT``), UPDATE and MERGE
(``SET c = DEFAULT``, MERGE INSERT of omitted columns), and read by the rows that existed
when ``ALTER TABLE ADD COLUMN ... DEFAULT`` added a column. The row-level cases are Spark's
own (MergeIntoTableSuiteBase, UpdateTableSuiteBase, DeleteFromTableSuiteBase: same names,
same statements, same answers); values are checked with pylance too."""

from __future__ import annotations

from collections.abc import Iterator

import lance
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from lance_spark.errors import InvalidOptionError, SchemaMismatchError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

TABLE = "defaults_t"


@pytest.fixture
def table(spark: SparkSession) -> Iterator[str]:
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    try:
        yield TABLE
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
        spark.sql("DROP TABLE IF EXISTS defaults_pq")


def _rows(spark: SparkSession, name: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in spark.table(name).collect())


def _lance_rows(spark: SparkSession, name: str) -> list[tuple[object, ...]]:
    """The table's rows as pylance reads them (the Lance table at the catalog's location)."""
    location = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]["location"]
    path = location.removeprefix("file:")
    return sorted(tuple(r.values()) for r in lance.dataset(path).to_table().to_pylist())


def _check(spark: SparkSession, name: str, expected: list[tuple[object, ...]]) -> None:
    assert _rows(spark, name) == sorted(expected)
    assert _lance_rows(spark, name) == sorted(expected)


def _defaults(spark: SparkSession, name: str) -> dict[str, str]:
    """DESCRIBE EXTENDED's section of column default values: column -> its default's SQL."""
    rows = [(r[0], r[2]) for r in spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()]
    # The section's header comes once (v1 tables) or before each column (v2 tables).
    out: dict[str, str] = {}
    inside = False
    for col, default in rows:
        if col.startswith("#") or not col:
            inside = col == "# Column Default Values"
        elif inside:
            out[col] = default
    return out


def test_defaults_are_kept_with_the_table_and_used_by_insert(
    spark: SparkSession, table: str
) -> None:
    ddl = "(pk INT NOT NULL, id INT DEFAULT 42, dep STRING DEFAULT 'it\\'s', d DOUBLE DEFAULT 1.5)"
    spark.sql(f"CREATE TABLE {table} {ddl} USING lance")
    spark.sql(f"CREATE TABLE defaults_pq {ddl} USING parquet")
    for name in (table, "defaults_pq"):
        spark.sql(f"INSERT INTO {name} (pk, dep) VALUES (1, 'hr')")
        spark.sql(f"INSERT INTO {name} VALUES (2, DEFAULT, DEFAULT, DEFAULT)")
        spark.sql(f"INSERT INTO {name} (pk) VALUES (3)")
    assert _rows(spark, table) == _rows(spark, "defaults_pq")
    _check(spark, table, [(1, 42, "hr", 1.5), (2, 42, "it's", 1.5), (3, 42, "it's", 1.5)])
    assert _defaults(spark, table) == _defaults(spark, "defaults_pq")
    assert _defaults(spark, table) == {"id": "42", "dep": "'it\\'s'", "d": "1.5"}
    # Kept with the Lance table: a new catalog entry at the same location reports them too.
    location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]
    spark.sql(f"DROP TABLE IF EXISTS {table}_again")
    try:
        spark.sql(f"CREATE TABLE {table}_again USING lance LOCATION '{location}'")
        assert _defaults(spark, f"{table}_again") == {"id": "42", "dep": "'it\\'s'", "d": "1.5"}
        # Registered with columns: the statement's defaults are kept with the table too.
        spark.sql(f"DROP TABLE {table}_again")
        spark.sql(
            f"CREATE TABLE {table}_again (pk INT NOT NULL, id INT DEFAULT 7, dep STRING, "
            f"d DOUBLE) USING lance LOCATION '{location}'"
        )
        spark.sql(f"INSERT INTO {table}_again (pk) VALUES (4)")
        assert (4, 7, "it's", 1.5) in _lance_rows(spark, table)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}_again")


def test_update_with_default_and_added_columns(spark: SparkSession, table: str) -> None:
    # The scenario: SET id = DEFAULT, ADD COLUMN ... DEFAULT (existing rows read the
    # value), a NOT NULL column added with a constant expression.
    spark.sql(f"CREATE TABLE {table} (pk INT NOT NULL, id INT DEFAULT 42, dep STRING) USING lance")
    spark.sql(f"INSERT INTO {table} VALUES (1, 1, 'hr'), (2, 2, 'it')")
    spark.sql(f"UPDATE {table} SET id = DEFAULT WHERE pk = 1")
    _check(spark, table, [(1, 42, "hr"), (2, 2, "it")])
    spark.sql(f"ALTER TABLE {table} ADD COLUMN txt STRING DEFAULT 'initial-text'")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN value INT NOT NULL DEFAULT 100 + 23")
    _check(spark, table, [(1, 42, "hr", "initial-text", 123), (2, 2, "it", "initial-text", 123)])
    assert _defaults(spark, table) == {"id": "42", "txt": "'initial-text'", "value": "100 + 23"}
    spark.sql(f"INSERT INTO {table} (pk) VALUES (3)")
    # ALTER COLUMN SET / DROP DEFAULT: later writes take the new default, or null.
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT 7")
    spark.sql(f"INSERT INTO {table} (pk) VALUES (4)")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN id DROP DEFAULT")
    spark.sql(f"INSERT INTO {table} (pk) VALUES (5)")
    _check(
        spark,
        table,
        [
            (1, 42, "hr", "initial-text", 123),
            (2, 2, "it", "initial-text", 123),
            (3, 42, None, "initial-text", 123),
            (4, 7, None, "initial-text", 123),
            (5, None, None, "initial-text", 123),
        ],
    )
    assert _defaults(spark, table) == {"txt": "'initial-text'", "value": "100 + 23"}


def _salaries(spark: SparkSession, table: str) -> None:
    """Spark's fixture of the *added column with default value* cases."""
    spark.sql(
        f"CREATE TABLE {table} (pk INT NOT NULL, salary INT NOT NULL DEFAULT -1, dep STRING) "
        "USING lance"
    )
    spark.sql(f"INSERT INTO {table} (pk, dep) VALUES (1, 'hr'), (2, 'hr'), (3, 'hr')")
    spark.sql(f"ALTER TABLE {table} ADD COLUMN txt STRING DEFAULT 'initial-text'")
    _check(spark, table, [(p, -1, "hr", "initial-text") for p in (1, 2, 3)])


def test_merge_into_table_containing_added_column_with_default_value(
    spark: SparkSession, table: str
) -> None:
    _salaries(spark, table)
    source = spark.createDataFrame(
        [(1, 100, "hr"), (4, 400, "hr")], "pk int, salary int, dep string"
    )
    source.createOrReplaceTempView("defaults_source")
    spark.sql(
        f"""MERGE INTO {table} t USING defaults_source s ON t.pk = s.pk
        WHEN MATCHED THEN UPDATE SET t.salary = s.salary, t.txt = DEFAULT
        WHEN NOT MATCHED THEN INSERT (pk, salary, dep) VALUES (s.pk, DEFAULT, s.dep)
        WHEN NOT MATCHED BY SOURCE THEN UPDATE SET salary = DEFAULT"""
    )
    _check(
        spark,
        table,
        [
            (1, 100, "hr", "initial-text"),
            (2, -1, "hr", "initial-text"),
            (3, -1, "hr", "initial-text"),
            (4, -1, "hr", "initial-text"),
        ],
    )
    # MERGE INSERT of omitted columns takes their defaults.
    spark.sql(
        f"""MERGE INTO {table} t USING (SELECT 5 AS pk) s ON t.pk = s.pk
        WHEN NOT MATCHED THEN INSERT (pk) VALUES (s.pk)"""
    )
    assert (5, -1, None, "initial-text") in _lance_rows(spark, table)


def test_update_table_containing_added_column_with_default_value(
    spark: SparkSession, table: str
) -> None:
    _salaries(spark, table)
    spark.sql(f"UPDATE {table} SET txt = DEFAULT WHERE pk = 1")
    spark.sql(f"UPDATE {table} SET salary = 100, txt = 'new' WHERE pk = 2")
    spark.sql(f"UPDATE {table} SET salary = DEFAULT WHERE pk = 2")
    _check(
        spark,
        table,
        [(1, -1, "hr", "initial-text"), (2, -1, "hr", "new"), (3, -1, "hr", "initial-text")],
    )


def test_delete_from_table_containing_added_column_with_default_value(
    spark: SparkSession, table: str
) -> None:
    _salaries(spark, table)
    spark.sql(f"DELETE FROM {table} WHERE pk = 1")
    _check(spark, table, [(2, -1, "hr", "initial-text"), (3, -1, "hr", "initial-text")])


def test_defaults_lance_cannot_keep_or_compute_are_refused(spark: SparkSession, table: str) -> None:
    spark.sql(f"CREATE TABLE {table} (pk INT NOT NULL, id INT DEFAULT 42) USING lance")
    spark.sql(f"INSERT INTO {table} VALUES (1, 1)")
    path = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"].removeprefix("file:")
    version = lance.dataset(path).version
    # The rows already there would need a value Lance cannot be given.
    with pytest.raises(AnalysisException, match=rf"{InvalidOptionError.__name__}: .*'arr'"):
        spark.sql(f"ALTER TABLE {table} ADD COLUMN arr ARRAY<INT> DEFAULT array(1, 2)")
    # A write by path bypasses Spark's analysis: it cannot fill the default, so it must
    # give the column (else it would store null).
    with pytest.raises(SchemaMismatchError, match=r"'id' \(DEFAULT 42\)"):
        spark.createDataFrame([(2,)], "pk int").write.format("lance").mode("append").save(path)
    assert lance.dataset(path).version == version
    assert spark.table(table).columns == ["pk", "id"]
    spark.createDataFrame([(3, 3)], "pk int, id int").write.format("lance").mode("append").save(
        path
    )
    _check(spark, table, [(1, 1), (3, 3)])
