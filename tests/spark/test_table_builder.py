"""LanceTable.create / createIfNotExists / createOrReplace / replace: Delta's table builder."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from lance_spark import (
    InvalidOptionError,
    LanceTable,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
)

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

_names = (f"built_{i}" for i in itertools.count())


def test_create_declares_columns_comments_and_properties(
    spark: SparkSession, table_uri: str
) -> None:
    table = (
        LanceTable.create(spark)
        .location(table_uri)
        .addColumn("id", "bigint", nullable=False)
        .addColumn("score", DoubleType(), comment="how good")
        .addColumns("label string COMMENT 'the label', tags array<string>")
        .addColumns(StructType([StructField("point", StructType([StructField("x", LongType())]))]))
        .property("team", "vision")
        .comment("pets seen by the cameras")
        .execute()
    )
    assert isinstance(table, LanceTable) and table.uri == table_uri
    ds = lance.dataset(table_uri)
    assert ds.count_rows() == 0
    assert ds.schema.names == ["id", "score", "label", "tags", "point"]
    assert ds.schema.field("id").type == pa.int64() and not ds.schema.field("id").nullable
    assert ds.schema.field("tags").type == pa.list_(pa.string())
    assert ds.schema.field("point").type == pa.struct([("x", pa.int64())])
    assert ds.schema.field("score").metadata == {b"comment": b"how good"}
    assert ds.schema.field("label").metadata == {b"comment": b"the label"}
    assert ds.config() == {"team": "vision", "comment": "pets seen by the cameras"}
    # The columns in one version, the properties in a second one.
    history = table.history().collect()
    assert [r["operation"] for r in history] == ["SET TBLPROPERTIES", "CREATE TABLE"]
    assert history[1]["operationParameters"]["description"] == "pets seen by the cameras"

    # Spark sees the declared columns and comments, and the table takes rows.
    schema = table.toDF().schema
    assert [(f.name, f.dataType.simpleString()) for f in schema] == [
        ("id", "bigint"),
        ("score", "double"),
        ("label", "string"),
        ("tags", "array<string>"),
        ("point", "struct<x:bigint>"),
    ]
    assert schema["score"].metadata.get("comment") == "how good"
    rows = spark.createDataFrame(
        [(1, 0.5, "cat", ["a"], (3,))],
        "id bigint, score double, label string, tags array<string>, point struct<x: bigint>",
    )
    rows.write.format("lance").mode("append").save(table_uri)
    assert [tuple(r) for r in table.toDF().collect()] == [(1, 0.5, "cat", ["a"], (3,))]


def test_create_refuses_an_existing_table_create_if_not_exists_keeps_it(
    spark: SparkSession, table_uri: str
) -> None:
    LanceTable.create(spark).location(table_uri).addColumn("id", "int").execute()
    spark.range(3).selectExpr("CAST(id AS INT) AS id").write.format("lance").mode("append").save(
        table_uri
    )
    with pytest.raises(TableAlreadyExistsError, match=r"table\.lance.*createIfNotExists"):
        LanceTable.create(spark).location(table_uri).addColumn("id", "int").execute()
    kept = (
        LanceTable.createIfNotExists(spark)
        .location(table_uri)
        .addColumn("other", "string")
        .execute()
    )
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.schema.names == ["id"] and ds.count_rows() == 3
    assert kept.countRows() == 3


def test_replace_keeps_history_and_replaces_columns_and_properties(
    spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    with pytest.raises(TableNotFoundError, match=r"table\.lance.*createOrReplace"):
        LanceTable.replace(spark).location(table_uri).addColumn("id", "int").execute()
    assert not os.path.exists(table_uri)

    created = (
        LanceTable.createOrReplace(spark)
        .location(table_uri)
        .addColumns("id int, label string")
        .property("stage", "raw")
        .execute()
    )
    spark.createDataFrame([(1, "a"), (2, "b")], "id int, label string").write.format("lance").mode(
        "append"
    ).save(table_uri)
    assert created.countRows() == 2

    (
        LanceTable.replace(spark)
        .location(table_uri)
        .addColumn("key", StringType(), nullable=False)
        .property("stage", "clean")
        .property("owner_team", "ml")
        .execute()
    )
    ds = lance.dataset(table_uri)
    assert ds.count_rows() == 0 and ds.schema.names == ["key"]
    assert ds.config() == {"stage": "clean", "owner_team": "ml"}
    assert [r["operation"] for r in created.history().collect()] == [
        "SET TBLPROPERTIES",
        "REPLACE TABLE",
        "WRITE",
        "SET TBLPROPERTIES",
        "CREATE OR REPLACE TABLE",
    ]
    # The replaced rows stay readable as of their version.
    old = created.toDF(version=3).orderBy("id").collect()
    assert [tuple(r) for r in old] == [(1, "a"), (2, "b")]

    # No properties declared: the old ones go (in a version after the new columns').
    LanceTable.createOrReplace(spark).location(table_uri).addColumn("n", "double").execute()
    ds = lance.dataset(table_uri)
    assert ds.version == 7 and ds.config() == {} and ds.schema.names == ["n"]


def test_builders_with_a_table_name_keep_the_catalog_in_step(
    spark: SparkSession, table_uri: str
) -> None:
    name = next(_names)
    try:
        managed = LanceTable.create(spark).tableName(name).addColumn("id", "int").execute()
        warehouse = spark.catalog.getDatabase("default").locationUri.removeprefix("file:")
        assert managed.uri.rstrip("/") == f"{warehouse.rstrip('/')}/{name}"
        assert spark.table(name).columns == ["id"]
        spark.sql(f"DROP TABLE {name}")  # managed: the data goes too
        assert not os.path.exists(managed.uri)
        table = (
            LanceTable.create(spark)
            .tableName(name)
            .location(table_uri)
            .addColumn("id", "bigint", comment="the key")
            .property("team", "vision")
            .execute()
        )
        assert lance.dataset(table_uri).version == 2  # no version from the catalog entry
        assert spark.table(name).columns == ["id"]
        assert spark.table(name).schema["id"].metadata.get("comment") == "the key"
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
        assert props["team"] == "vision"
        assert table.detail().collect()[0]["name"] == name
        spark.sql(f"INSERT INTO {name} VALUES (7)")
        assert LanceTable.forName(spark, name).countRows() == 1
        # A schema change through the name re-creates the entry: no version for its properties.
        LanceTable.forName(spark, name).renameColumn("id", "key")
        LanceTable.forName(spark, name).renameColumn("key", "id")
        assert lance.dataset(table_uri).version == 5 and spark.table(name).columns == ["id"]

        with pytest.raises(TableAlreadyExistsError, match=name):
            LanceTable.create(spark).tableName(name).addColumn("id", "bigint").execute()
        same = LanceTable.createIfNotExists(spark).tableName(name).addColumn("x", "int").execute()
        assert same.countRows() == 1 and lance.dataset(table_uri).version == 5

        # replace by name: the catalog's location, and the entry gets the new columns.
        LanceTable.replace(spark).tableName(name).addColumns("k string, v double").execute()
        assert spark.table(name).columns == ["k", "v"]
        assert spark.table(name).count() == 0
        with pytest.raises(InvalidOptionError, match="not at the location"):
            (
                LanceTable.replace(spark)
                .tableName(name)
                .location(table_uri + "_elsewhere")
                .addColumn("k", "string")
                .execute()
            )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_create_if_not_exists_registers_an_existing_lance_table(
    spark: SparkSession, table_uri: str
) -> None:
    spark.range(4).write.format("lance").mode("append").save(table_uri)
    name = next(_names)
    try:
        table = (
            LanceTable.createIfNotExists(spark)
            .tableName(name)
            .location(table_uri)
            .addColumn("id", "bigint")
            .execute()
        )
        assert table.countRows() == 4 and spark.table(name).count() == 4
        assert lance.dataset(table_uri).version == 1
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_bad_declarations_create_nothing(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(InvalidOptionError, match="at least one column"):
        LanceTable.create(spark).location(table_uri).execute()
    with pytest.raises(InvalidOptionError, match="'strng'"):
        LanceTable.create(spark).location(table_uri).addColumn("id", "strng").execute()
    with pytest.raises(InvalidOptionError, match="not a Spark DDL column list"):
        LanceTable.create(spark).location(table_uri).addColumns("id int,").execute()
    with pytest.raises(SchemaMismatchError, match="'ID' is declared twice"):
        LanceTable.create(spark).location(table_uri).addColumns("id int").addColumn(
            "ID", "int"
        ).execute()
    with pytest.raises(InvalidOptionError, match=r"needs \.location"):
        LanceTable.create(spark).addColumn("id", "int").execute()
    assert not os.path.exists(table_uri)


def test_builders_take_the_active_session_and_detail_shows_the_comment(
    spark: SparkSession, table_uri: str
) -> None:
    table = (
        LanceTable.create()
        .location(table_uri)
        .addColumn("id", "bigint")
        .comment("pets seen by the cameras")
        .execute()
    )
    assert lance.dataset(table_uri).schema.names == ["id"]
    assert table.detail().first()["description"] == "pets seen by the cameras"
    described = spark.sql(f"DESCRIBE DETAIL lance.`{table_uri}`").first()
    assert described is not None and described["description"] == "pets seen by the cameras"
    assert list(described.asDict())[:5] == ["format", "id", "name", "description", "location"]
    LanceTable.createOrReplace().location(table_uri).addColumn("id", "bigint").execute()
    assert LanceTable.forPath(spark, table_uri).detail().first()["description"] is None


def test_a_bad_argument_changes_nothing(spark: SparkSession, table_uri: str) -> None:
    spark.range(3).write.format("lance").mode("append").save(table_uri)
    spark.range(3).write.format("lance").mode("append").save(table_uri)
    table = LanceTable.forPath(spark, table_uri)
    with pytest.raises(TypeError, match=r"restoreToVersion\(\) argument 'version' takes"):
        table.restoreToVersion("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"update\(\) argument 'set' takes"):
        table.update("id > 0", {1: "2"})  # type: ignore[dict-item]
    assert lance.dataset(table_uri).version == 2 and lance.dataset(table_uri).count_rows() == 6
