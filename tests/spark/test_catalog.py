"""Catalog tables: CREATE TABLE ... USING lance LOCATION, SELECT, INSERT, time travel."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

_names = (f"lance_cat_{i}" for i in itertools.count())


@pytest.fixture
def table_name(spark: SparkSession) -> str:
    name = next(_names)
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_existing_table_select_insert_overwrite_and_versions(
    spark: SparkSession, table_uri: str, table_name: str
) -> None:
    lance.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "label": ["cat", "dog", "cat"]}),
        table_uri,
    )
    spark.sql(f"CREATE TABLE {table_name} USING lance LOCATION '{table_uri}'")
    counts = spark.sql(
        f"SELECT label, count(*) AS n FROM {table_name} GROUP BY label ORDER BY label"
    ).collect()
    assert [(r.label, r.n) for r in counts] == [("cat", 2), ("dog", 1)]

    spark.sql(f"INSERT INTO {table_name} SELECT 4, 'bird'")
    assert lance.dataset(table_uri).version == 2
    assert spark.table(table_name).count() == 4
    old = spark.sql(f"SELECT count(*) AS n FROM {table_name} WITH ('version' = '1')").first()
    assert old.n == 3

    spark.sql(f"INSERT OVERWRITE {table_name} SELECT 10, 'fish'")
    ds = lance.dataset(table_uri)
    assert ds.version == 3 and ds.to_table().to_pylist() == [{"id": 10, "label": "fish"}]
    assert spark.sql(f"SELECT * FROM {table_name} WHERE id = 10").count() == 1


def test_create_with_columns_creates_an_empty_lance_table(
    spark: SparkSession, table_uri: str, table_name: str
) -> None:
    spark.sql(
        f"CREATE TABLE {table_name} (id BIGINT, label STRING, emb ARRAY<FLOAT>) "
        f"USING lance LOCATION '{table_uri}' OPTIONS ('emb.arrow.fixed-size-list.size' = '2')"
    )
    ds = lance.dataset(table_uri)
    assert ds.version == 1 and ds.count_rows() == 0
    assert ds.schema.names == ["id", "label", "emb"]
    assert ds.schema.field("emb").type == pa.list_(pa.float32(), 2)
    spark.sql(f"INSERT INTO {table_name} VALUES (1, 'a', array(1.0f, 2.0f))")
    assert [tuple(r) for r in spark.table(table_name).collect()] == [(1, "a", [1.0, 2.0])]
    assert lance.dataset(table_uri).version == 2


def test_catalog_keeps_no_secrets(spark: SparkSession, table_uri: str, table_name: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), table_uri)
    spark.sql(
        f"CREATE TABLE {table_name} USING lance LOCATION '{table_uri}' "
        "OPTIONS ('storage.aws_secret_access_key' = 'hunter2-secret')"
    )
    described = " ".join(
        str(tuple(r)) for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table_name}").collect()
    )
    assert "hunter2-secret" not in " ".join(
        str(f.metadata) for f in spark.table(table_name).schema.fields
    )
    # Spark itself shows table OPTIONS redacted in DESCRIBE; the connector adds none.
    assert "hunter2-secret" not in described


def test_statements_on_other_tables_pass_through(spark: SparkSession, table_name: str) -> None:
    spark.sql(f"CREATE TABLE {table_name} (a INT) USING parquet")
    spark.sql(f"INSERT INTO {table_name} VALUES (1)")
    assert spark.table(table_name).count() == 1
    with pytest.raises(Exception, match="PARSE_SYNTAX_ERROR"):
        spark.sql("SELEC 1")


def test_old_version_without_a_later_column_reads_it_as_null(
    spark: SparkSession, table_uri: str, table_name: str
) -> None:
    first = spark.createDataFrame([(1, "a")], "id long, label string")
    first.write.format("lance").mode("append").save(table_uri)
    wider = spark.createDataFrame([(2, "b", 0.5)], "id long, label string, score double")
    wider.write.format("lance").option("mergeSchema", "true").mode("append").save(table_uri)
    spark.sql(f"CREATE TABLE {table_name} USING lance LOCATION '{table_uri}'")
    old = spark.sql(f"SELECT * FROM {table_name} WITH ('version' = '1')").collect()
    assert [tuple(r) for r in old] == [(1, "a", None)]
    now = spark.sql(f"SELECT * FROM {table_name} ORDER BY id").collect()
    assert [tuple(r) for r in now] == [(1, "a", None), (2, "b", 0.5)]


def test_every_read_has_exactly_the_declared_schema(
    spark: SparkSession, table_uri: str, table_name: str
) -> None:
    """No connector metadata in any schema: a Lance DataFrame (by path, a catalog table, a
    version, a path identifier) has the declared schema exactly, and a Parquet table saved
    from it carries nothing that points at the Lance table."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    declared = StructType([StructField("id", LongType()), StructField("label", StringType())])
    spark.createDataFrame([(1, "a"), (2, "b")], declared).write.format("lance").save(table_uri)
    spark.sql(f"CREATE TABLE {table_name} USING lance LOCATION '{table_uri}'")
    spark.sql(f"INSERT INTO {table_name} VALUES (3, 'c')")
    reads = {
        "path": spark.read.format("lance").load(table_uri),
        "catalog": spark.table(table_name),
        "version": spark.sql(f"SELECT * FROM {table_name} VERSION AS OF 1"),
        "versionAsOf option": spark.read.option("versionAsOf", 1).table(table_name),
        "path identifier": spark.sql(f"SELECT * FROM lance.`{table_uri}`"),
    }
    for what, frame in reads.items():
        assert frame.schema == declared, what
        assert all(not f.metadata for f in frame.schema.fields), what
    assert reads["version"].count() == 2 and reads["catalog"].count() == 3
    copy = f"{table_name}_parquet"
    spark.sql(f"DROP TABLE IF EXISTS {copy}")
    try:
        reads["catalog"].write.format("parquet").saveAsTable(copy)
        assert spark.table(copy).schema == declared
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {copy}")


def _folder_catalog(spark: SparkSession, root: Path, **confs: str) -> str:
    """A new ``LanceFolderCatalog`` over ``root`` (confs: more of its settings); its name."""
    name = f"folder_{uuid.uuid4().hex[:8]}"
    spark.sql(f"SET spark.sql.catalog.{name}=lance_spark.companion.LanceFolderCatalog")
    spark.sql(f"SET spark.sql.catalog.{name}.root={root}")
    for key, value in confs.items():
        spark.sql(f"SET spark.sql.catalog.{name}.{key}={value}")
    return name


def test_folder_catalog_refuses_names_that_leave_its_root(
    spark: SparkSession, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A namespace or table name that is '.', '..' or holds a path or a scheme is refused,
    naming it, before storage is touched: the table next to the root (what ``..`` reached)
    is read, dropped or changed by none of them, nothing is created outside the root."""
    root = tmp_path / "lancedb"
    root.mkdir()
    victim = tmp_path / "victim.lance"
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    lance.write_dataset(rows, str(victim))
    lance.write_dataset(rows, str(root / "inside.lance"))
    cat = _folder_catalog(spark, root)
    refused = [  # (statement, the name refused); check_name's unit test has the other cases
        (f"SELECT count(*) FROM {cat}.`..`.victim", "namespace name '..'"),
        (f"CREATE TABLE {cat}.`a/../../escaped` (id BIGINT)", "table name 'a/../../escaped'"),
        (f"DROP NAMESPACE {cat}.`..`", "namespace name '..'"),
        (f"DROP TABLE {cat}.`..`.victim", "namespace name '..'"),
        (f"ALTER TABLE {cat}.`..`.victim RENAME TO {cat}.moved", "namespace name '..'"),
        (f"CREATE NAMESPACE {cat}.`..`.`..`.outside", "namespace name '..'"),
    ]
    # Each refusal restarts a Python worker (seconds): Connect, whose errors travel the same
    # way, runs the first three.
    if "connect" in request.node.name:
        refused = refused[:3]
    for statement, named in refused:
        with pytest.raises(Exception) as caught:
            spark.sql(statement).collect()
        assert "InvalidArgumentError" in str(caught.value), statement
        assert named in str(caught.value), (statement, str(caught.value))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lancedb", "victim.lance"]
    assert sorted(p.name for p in root.iterdir()) == ["inside.lance"]
    for table in (victim, root / "inside.lance"):
        ds = lance.dataset(str(table))
        assert ds.version == 1 and ds.to_table().equals(rows)
    # The names that are folders under the root still work.
    assert spark.sql(f"SELECT sum(id) FROM {cat}.inside").first()[0] == 6


def test_folder_catalog_refuses_secrets_in_its_confs(spark: SparkSession, tmp_path: Path) -> None:
    """The catalog's storage confs follow ``spark.lance.storage.*``'s rule: a secret-looking
    key is refused (SecretInConfError naming the conf, never its value) before any use."""
    root = tmp_path / "lancedb"
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), str(root / "t.lance"))
    cat = _folder_catalog(
        spark,
        root,
        **{
            "storage.aws_access_key_id": "AKIAhunter2value",
            "storage.azure_storage_account_key": "hunter3value",
            "storage.aws_region": "eu-west-1",
        },
    )
    for statement in (f"SHOW TABLES IN {cat}", f"SELECT * FROM {cat}.t"):
        with pytest.raises(Exception) as caught:
            spark.sql(statement).collect()
        message = str(caught.value)
        assert "SecretInConfError" in message, message
        assert f"spark.sql.catalog.{cat}.storage.aws_access_key_id" in message
        assert f"spark.sql.catalog.{cat}.storage.azure_storage_account_key" in message
        assert "hunter" not in message, message


def test_no_table_inside_another_and_vacuum_spares_one_there(
    spark: SparkSession, tmp_path: Path, table_name: str, request: pytest.FixtureRequest
) -> None:
    """A new table inside a Lance table's folder (its VACUUM would delete it), or in a folder
    holding one, is refused naming both; a table pylance made there anyway is left alone by
    the outer table's VACUUM."""
    outer = tmp_path / "outer.lance"
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), str(outer))
    lance.write_dataset(pa.table({"id": pa.array([3], pa.int64())}), str(outer), mode="append")
    inner = pa.table({"id": pa.array([7, 8, 9], pa.int64())})
    lance.write_dataset(inner, str(outer / "data" / "inner.lance"))  # bypassing the checks
    frame = spark.range(2)
    refused = [
        (
            lambda: spark.sql(
                f"CREATE TABLE {table_name} USING lance LOCATION '{outer}/_indices/x.lance' "
                "AS SELECT 1 AS id"
            ).collect(),
            "inside the folder of the Lance table at",
        ),
        (
            lambda: frame.write.format("lance").save(f"{outer}/data/x.lance"),
            "inside the folder of the Lance table at",
        ),
        (
            lambda: frame.write.format("lance").save(str(tmp_path)),
            "its folder holds the Lance table at",
        ),
    ]
    if "connect" in request.node.name:  # each refusal restarts a Python worker (seconds)
        refused = refused[:1]
    for write, message in refused:
        with pytest.raises(Exception, match="cannot create a Lance table at") as caught:
            write()
        assert message in str(caught.value) and f"{outer}'" in str(caught.value), caught.value
    assert sorted(p.name for p in outer.iterdir()) == ["_transactions", "_versions", "data"]
    assert sorted(p.name for p in (outer / "data").iterdir() if p.is_dir()) == ["inner.lance"]
    vacuumed = spark.sql(f"VACUUM lance.`{outer}` RETAIN 0 HOURS").first()
    assert vacuumed.unreferenced_files == []
    assert lance.dataset(str(outer / "data" / "inner.lance")).to_table().equals(inner)
    assert lance.dataset(str(outer)).to_table()["id"].to_pylist() == [1, 2, 3]
