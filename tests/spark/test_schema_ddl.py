"""Schema DDL on Lance tables keeps Lance and the catalog in step: RENAME COLUMN, DROP
COLUMNS, ALTER COLUMN TYPE / COMMENT, SET / UNSET TBLPROPERTIES, through SQL and through
``LanceTable``. After every statement the table is read through the catalog and with pylance,
and the two must agree; a refused statement changes neither (same Lance version, same
catalog columns)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, IntegerType, LongType

from lance_spark import LanceTable
from lance_spark.errors import (
    InvalidOptionError,
    SchemaMismatchError,
)
from lance_spark.source.dataset import version_timestamps

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

ROWS = [(1, "a", 10, 1.5, "x"), (2, "b", 20, 2.5, "y"), (3, "c", 30, 3.5, "z")]


@pytest.fixture
def pets(spark: SparkSession, table_uri: str) -> Iterator[tuple[str, str]]:
    """Catalog table ``ddl_pets`` over a Lance table of ROWS (id, name, w int, score float,
    note)."""
    spark.createDataFrame(
        ROWS, "id long, name string, w int, score float, note string"
    ).write.format("lance").mode("append").save(table_uri)
    spark.sql(f"CREATE TABLE ddl_pets USING lance LOCATION '{table_uri}'")
    try:
        yield "ddl_pets", table_uri
    finally:
        spark.sql("DROP TABLE IF EXISTS ddl_pets")


def _agree(spark: SparkSession, name: str, uri: str) -> list[str]:
    """The catalog's columns equal Lance's, and the catalog read equals pylance's rows."""
    ds = lance.dataset(uri)
    catalog = spark.table(name)
    assert catalog.columns == ds.schema.names
    rows = sorted(tuple(r) for r in catalog.collect())
    expected = sorted(tuple(r.values()) for r in ds.to_table().to_pylist())
    assert rows == expected
    return catalog.columns


def _refused(error: type[Exception], match: str) -> pytest.RaisesContext[Exception]:
    """A refused DDL statement: the session catalog's error (Spark's AnalysisException,
    PYTHON_DATA_SOURCE_ERROR) names lance_spark's error and says what is wrong."""
    return pytest.raises(AnalysisException, match=rf"{error.__name__}: .*{match}")


def _files(uri: str) -> set[str]:
    return {f.path for frag in lance.dataset(uri).get_fragments() for f in frag.data_files()}


def test_rename_column_in_sql(spark: SparkSession, pets: tuple[str, str]) -> None:
    name, uri = pets
    before = lance.dataset(uri).version
    files = _files(uri)
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN w TO weight")
    assert _agree(spark, name, uri) == ["id", "name", "weight", "score", "note"]
    assert spark.sql(f"SELECT sum(weight) AS s FROM {name}").first()["s"] == 60
    ds = lance.dataset(uri)
    assert ds.version == before + 1 and _files(uri) == files  # metadata-only
    # Renaming to an existing name, or a missing column: refused, nothing changes.
    with pytest.raises(PySparkException, match=r"FIELD_ALREADY_EXISTS.*`NAME` already exists"):
        spark.sql(f"ALTER TABLE {name} RENAME COLUMN weight TO NAME")
    with pytest.raises(PySparkException, match=r"UNRESOLVED_COLUMN.*`nope`"):
        spark.sql(f"ALTER TABLE {name} RENAME COLUMN nope TO other")
    assert lance.dataset(uri).version == before + 1
    assert _agree(spark, name, uri) == ["id", "name", "weight", "score", "note"]


def test_drop_columns_in_sql(spark: SparkSession, pets: tuple[str, str]) -> None:
    name, uri = pets
    spark.sql(f"ALTER TABLE {name} DROP COLUMN note")
    assert _agree(spark, name, uri) == ["id", "name", "w", "score"]
    spark.sql(f"ALTER TABLE {name} DROP COLUMNS (score, w)")
    assert _agree(spark, name, uri) == ["id", "name"]
    version = lance.dataset(uri).version
    with pytest.raises(PySparkException, match=r"UNRESOLVED_COLUMN.*`ghost`"):
        spark.sql(f"ALTER TABLE {name} DROP COLUMN ghost")
    spark.sql(f"ALTER TABLE {name} DROP COLUMN IF EXISTS ghost")
    with _refused(SchemaMismatchError, "every column"):
        spark.sql(f"ALTER TABLE {name} DROP COLUMNS (id, name)")
    assert lance.dataset(uri).version == version
    # New rows still go in, with the remaining columns.
    spark.createDataFrame([(4, "d")], "id long, name string").write.format("lance").mode(
        "append"
    ).save(uri)
    assert sorted(r["id"] for r in spark.table(name).collect()) == [1, 2, 3, 4]


def test_alter_column_type_widens_only(spark: SparkSession, pets: tuple[str, str]) -> None:
    name, uri = pets
    spark.sql(f"ALTER TABLE {name} ALTER COLUMN w TYPE bigint")
    spark.sql(f"ALTER TABLE {name} ALTER COLUMN score TYPE double")
    ds = lance.dataset(uri)
    assert ds.schema.field("w").type == pa.int64()
    assert ds.schema.field("score").type == pa.float64()
    schema = spark.table(name).schema
    assert isinstance(schema["w"].dataType, LongType)
    assert isinstance(schema["score"].dataType, DoubleType)
    _agree(spark, name, uri)
    version = ds.version
    # Spark refuses a narrowing itself; Lance refuses what Spark allows and Lance cannot keep.
    with pytest.raises(PySparkException, match=r"NOT_SUPPORTED_CHANGE_COLUMN.*`w`"):
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN w TYPE int")
    with pytest.raises(PySparkException, match=r"NOT_SUPPORTED_CHANGE_COLUMN.*`name`"):
        spark.sql(f"ALTER TABLE {name} CHANGE COLUMN name TYPE bigint")
    with pytest.raises(PySparkException, match=r'UNSUPPORTED_DATATYPE.*"NONSENSE"'):
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN w TYPE nonsense")
    assert lance.dataset(uri).version == version
    assert isinstance(spark.table(name).schema["w"].dataType, LongType)


def test_column_comment(spark: SparkSession, pets: tuple[str, str]) -> None:
    name, uri = pets
    spark.sql(f"ALTER TABLE {name} ALTER COLUMN name COMMENT 'the name of the pet'")
    described = {r["col_name"]: r["comment"] for r in spark.sql(f"DESCRIBE TABLE {name}").collect()}
    assert described["name"] == "the name of the pet"
    assert lance.dataset(uri).schema.field("name").metadata[b"comment"] == b"the name of the pet"
    _agree(spark, name, uri)


def test_table_properties_live_in_lance_and_the_catalog(
    spark: SparkSession, pets: tuple[str, str]
) -> None:
    name, uri = pets
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('team' = 'ml', 'quality' = 'gold')")
    assert lance.dataset(uri).config() == {"team": "ml", "quality": "gold"}

    def shown() -> dict[str, str]:
        rows = spark.sql(f"SHOW TBLPROPERTIES {name}").collect()
        return {r["key"]: r["value"] for r in rows if r["key"] in ("team", "quality")}

    assert shown() == {"team": "ml", "quality": "gold"}
    # A later schema change re-creates the catalog entry: the properties stay.
    spark.sql(f"ALTER TABLE {name} RENAME COLUMN note TO remark")
    assert shown() == {"team": "ml", "quality": "gold"}
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('quality')")
    assert lance.dataset(uri).config() == {"team": "ml"}
    assert shown() == {"team": "ml"}
    # A key that is not set is ignored, with or without IF EXISTS, as Spark 4 does.
    version = lance.dataset(uri).version
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('quality')")
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES IF EXISTS ('quality', 'nope')")
    assert lance.dataset(uri).version == version
    spark.sql(f"ALTER TABLE {name} UNSET TBLPROPERTIES ('nope', 'team')")
    assert lance.dataset(uri).config() == {}
    assert shown() == {}
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('team' = 'ml')")
    with pytest.raises(PySparkException, match="owner"):
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('owner' = 'me')")
    assert lance.dataset(uri).config() == {"team": "ml"}


def test_creation_options_are_not_table_properties(
    spark: SparkSession, pets: tuple[str, str], tmp_path: Path
) -> None:
    name, uri = pets
    version = lance.dataset(uri).version
    for key, value in (("enable_stable_row_ids", "false"), ("data_storage_version", "2.1")):
        for target in (name, f"lance.`{uri}`"):
            with _refused(
                InvalidOptionError,
                rf"table property '{key}' cannot be set: Lance chooses .* when it creates "
                rf"a table, and a table keeps it\. Give the write option {key} to the write "
                rf"that creates the table: CREATE TABLE \.\.\. USING lance OPTIONS",
            ):
                spark.sql(
                    f"ALTER TABLE {target} SET TBLPROPERTIES ('team' = 'x', '{key}' = '{value}')"
                )
    assert lance.dataset(uri).version == version
    assert lance.dataset(uri).config() == {}
    # Nor at creation: refused before anything is created.
    other = str(tmp_path / "other.lance")
    spark.sql("DROP TABLE IF EXISTS ddl_stable_ids")
    with _refused(InvalidOptionError, "'ENABLE_STABLE_ROW_IDS' cannot be set"):
        spark.sql(
            f"CREATE TABLE ddl_stable_ids (id BIGINT) USING lance LOCATION '{other}' "
            "TBLPROPERTIES ('ENABLE_STABLE_ROW_IDS' = 'false')"
        )
    assert not spark.catalog.tableExists("ddl_stable_ids")
    assert not Path(other).exists()


@pytest.mark.parametrize(
    ("statement", "match"),
    [
        ("REPLACE COLUMNS (id long)", "InvalidOptionError: .*REPLACE COLUMNS is not supported"),
        ("SET LOCATION '/tmp/elsewhere'", "InvalidOptionError: .*SET LOCATION is not supported"),
        ("ALTER COLUMN w SET NOT NULL", "Cannot change nullable column to non-nullable: w"),
        ("ALTER COLUMN w FIRST", "InvalidOptionError: .*cannot .*FIRST"),
        ("RENAME COLUMN w", "PARSE_SYNTAX_ERROR"),
    ],
)
def test_refused_alter_statements_change_nothing(
    spark: SparkSession, pets: tuple[str, str], statement: str, match: str
) -> None:
    name, uri = pets
    version = lance.dataset(uri).version
    with pytest.raises(PySparkException, match=match):
        spark.sql(f"ALTER TABLE {name} {statement}")
    assert lance.dataset(uri).version == version
    assert _agree(spark, name, uri) == ["id", "name", "w", "score", "note"]


def test_path_identifiers(spark: SparkSession, pets: tuple[str, str]) -> None:
    _, uri = pets
    spark.sql(f"ALTER TABLE lance.`{uri}` RENAME COLUMN w TO weight")
    assert lance.dataset(uri).schema.names == ["id", "name", "weight", "score", "note"]
    assert spark.read.format("lance").load(uri).columns == lance.dataset(uri).schema.names


def test_table_api(spark: SparkSession, pets: tuple[str, str]) -> None:
    name, uri = pets
    t = LanceTable.forName(spark, name)
    t.renameColumn("w", "weight")
    t.dropColumns("note")
    t.alterColumn("weight", dataType="bigint", comment="grams")
    assert _agree(spark, name, uri) == ["id", "name", "weight", "score"]
    assert isinstance(spark.table(name).schema["weight"].dataType, LongType)
    assert lance.dataset(uri).schema.field("weight").metadata[b"comment"] == b"grams"
    # By path: Lance changes (no catalog entry to update).
    by_path = LanceTable.forPath(spark, uri)
    by_path.alterColumn("id", dataType=LongType())
    with pytest.raises(SchemaMismatchError, match="'score' from float to int32"):
        by_path.alterColumn("score", dataType=IntegerType())
    with pytest.raises(InvalidOptionError, match="without dots"):
        by_path.renameColumn("name", "a.b")
    with pytest.raises(InvalidOptionError, match="a new type"):
        by_path.alterColumn("name")


def _add_expressions(spark: SparkSession, t: LanceTable, name: str) -> None:
    t.addColumns({"w2": "w * 2", "tag": "concat(name, '!')"})


def _add_joined(spark: SparkSession, t: LanceTable, name: str) -> None:
    labels = spark.createDataFrame([(1, "cat"), (3, "dog")], "id long, label string")
    t.addColumns(labels, on="id")


def _merge_with_schema_evolution(spark: SparkSession, t: LanceTable, name: str) -> None:
    source = spark.createDataFrame(
        [(2, "B", 21, 2.0, "yy", "big"), (4, "d", 40, 4.5, "w", "new")],
        "id long, name string, w int, score float, note string, size string",
    )
    (
        t.alias("t")
        .merge(source.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .withSchemaEvolution()
        .execute()
    )


def _restore_to_version(spark: SparkSession, t: LanceTable, name: str) -> None:
    t.addColumns({"w2": "w * 2"})
    assert spark.table(name).columns[-1] == "w2"
    t.restoreToVersion(1)  # the version without w2


def _restore_to_timestamp(spark: SparkSession, t: LanceTable, name: str) -> None:
    first = dict(version_timestamps(lance.dataset(t.uri)))[1]
    t.renameColumn("w", "weight")
    assert "weight" in spark.table(name).columns
    t.restoreToTimestamp(first)  # version 1, with w


def _replace_by_name(spark: SparkSession, t: LanceTable, name: str) -> None:
    LanceTable.replace(spark).tableName(name).addColumns("id bigint, kind string").execute()


# Every change of a table's columns that LanceTable makes (schema.py, columns.py, history.py,
# merge.py, builder.py): the catalog entry of a table opened by name follows each one.
SCHEMA_CHANGES: dict[str, Callable[[SparkSession, LanceTable, str], None]] = {
    "addColumns-expressions": _add_expressions,
    "addColumns-dataframe": _add_joined,
    "renameColumn": lambda spark, t, name: t.renameColumn("w", "weight"),
    "dropColumns": lambda spark, t, name: t.dropColumns("note", "score"),
    "alterColumn-type": lambda spark, t, name: t.alterColumn("w", dataType="bigint"),
    "merge-withSchemaEvolution": _merge_with_schema_evolution,
    "restoreToVersion": _restore_to_version,
    "restoreToTimestamp": _restore_to_timestamp,
    "replace-tableName": _replace_by_name,
}


@pytest.mark.parametrize("change", list(SCHEMA_CHANGES))
def test_every_schema_change_by_name_updates_the_catalog_entry(
    spark: SparkSession, pets: tuple[str, str], change: str
) -> None:
    name, uri = pets
    before = lance.dataset(uri).schema
    SCHEMA_CHANGES[change](spark, LanceTable.forName(spark, name), name)
    ds = lance.dataset(uri)
    if change.startswith("restore"):
        assert ds.version == 3 and ds.schema.names == before.names
    else:
        assert ds.schema.names != before.names or ds.schema.types != before.types
    _agree(spark, name, uri)  # spark.table: Lance's columns and rows
    by_sql = spark.sql(f"SELECT * FROM {name}")
    assert by_sql.columns == ds.schema.names
    assert sorted(tuple(r) for r in by_sql.collect()) == sorted(
        tuple(r.values()) for r in ds.to_table().to_pylist()
    )
    by_path = LanceTable.forPath(spark, uri).toDF().schema
    assert [(f.name, f.dataType) for f in by_sql.schema] == [(f.name, f.dataType) for f in by_path]


def test_other_tables_are_left_to_spark(spark: SparkSession, tmp_path) -> None:  # type: ignore[no-untyped-def]
    spark.sql(f"CREATE TABLE ddl_parquet (a int, b int) USING parquet LOCATION '{tmp_path}/p'")
    try:
        with pytest.raises(PySparkException):
            spark.sql("ALTER TABLE ddl_parquet RENAME COLUMN a TO c")  # Spark's own error
        spark.sql("ALTER TABLE ddl_parquet SET TBLPROPERTIES ('k' = 'v')")
    finally:
        spark.sql("DROP TABLE ddl_parquet")


def test_a_catalog_column_renamed_outside_sql_is_seen_at_once(
    spark: SparkSession, pets: tuple[str, str]
) -> None:
    """The session catalog takes a table's columns from Lance, not from the entry: a rename by
    another Lance writer shows at once (the old name is Spark's unresolved column, with the
    new one suggested), never as a column of NULLs."""
    name, uri = pets
    lance.dataset(uri).alter_columns({"path": "w", "name": "weight"})  # another Lance writer
    with pytest.raises(PySparkException, match=r"UNRESOLVED_COLUMN.*`weight`"):
        spark.sql(f"SELECT sum(w) FROM {name}").collect()
    assert spark.sql(f"SELECT sum(weight) AS s FROM {name}").first()["s"] == 60
    _agree(spark, name, uri)


def test_old_versions_still_read_columns_added_later_as_null(
    spark: SparkSession, pets: tuple[str, str]
) -> None:
    name, _ = pets
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (extra string)")
    old = spark.sql(f"SELECT extra FROM {name} WITH ('version' = '1')").collect()
    assert [r["extra"] for r in old] == [None, None, None]
