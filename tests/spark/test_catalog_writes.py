"""Catalog writes on Lance tables, as Delta users type them: writeTo (DataFrameWriterV2),
saveAsTable, insertInto, managed tables, CREATE OR REPLACE, DROP TABLE."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import lance
import pytest
from pyspark.errors import AnalysisException, IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import lance_spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


@pytest.fixture
def name(spark: SparkSession) -> Iterator[str]:
    """A fresh catalog table name, dropped after the test."""
    found = f"cw_{uuid.uuid4().hex[:10]}"
    yield found
    spark.sql(f"DROP TABLE IF EXISTS {found}")


def _pets(spark: SparkSession, start: int = 0, n: int = 6) -> DataFrame:
    return spark.range(start, start + n, numPartitions=2).selectExpr(
        "id", "concat('p', id) AS name", "CAST(id % 3 AS INT) AS grp"
    )


def _rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _lance_rows(uri: str, columns: list[str]) -> list[tuple[object, ...]]:
    table = lance.dataset(uri).to_table(columns=columns).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in table)


def _location(spark: SparkSession, name: str) -> str:
    return lance_spark.LanceTable.forName(spark, name).uri


def _warehouse(spark: SparkSession) -> str:
    uri = spark.catalog.getDatabase("default").locationUri
    return uri[len("file:") :] if uri.startswith("file:") else uri


def _agree(spark: SparkSession, name: str, expected: DataFrame) -> None:
    """The catalog's read, pylance's read of the location and ``expected`` hold the same rows."""
    uri = _location(spark, name)
    assert _rows(spark.table(name)) == _rows(expected)
    assert _lance_rows(uri, expected.columns) == _rows(expected)


def test_write_to_append_and_overwrite_condition(
    spark: SparkSession, name: str, tmp_path: object
) -> None:
    uri = str(tmp_path) + "/t.lance"  # type: ignore[operator]
    _pets(spark).write.format("lance").mode("append").save(uri)
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{uri}'")
    _pets(spark, 6, 3).writeTo(name).append()
    assert lance.dataset(uri).version == 2
    _agree(spark, name, _pets(spark, 0, 9))

    # overwrite(condition): Delta's replaceWhere, one version
    new = _pets(spark, 100, 2).withColumn("grp", F.lit(0))
    new.writeTo(name).overwrite(F.col("grp") == 0)
    assert lance.dataset(uri).version == 3
    _agree(spark, name, _pets(spark, 0, 9).where("grp != 0").unionByName(new))

    with pytest.raises(
        lance_spark.InvalidOptionError, match=r"not partitioned.*overwritePartitions"
    ):
        new.writeTo(name).overwritePartitions()
    assert lance.dataset(uri).version == 3


def test_write_to_create_replace_and_create_or_replace(
    spark: SparkSession, name: str, tmp_path: object
) -> None:
    uri = str(tmp_path) + "/v2.lance"  # type: ignore[operator]
    _pets(spark).writeTo(name).using("lance").tableProperty("location", uri).tableProperty(
        "team", "ml"
    ).create()
    _agree(spark, name, _pets(spark))
    assert lance.dataset(uri).config()["team"] == "ml"
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        _pets(spark).writeTo(name).using("lance").create()

    # replace: ONE new version with the new rows and schema; history stays
    before = lance.dataset(uri).version
    other = spark.range(3).selectExpr("id", "id * 10 AS score")
    other.writeTo(name).using("lance").createOrReplace()
    ds = lance.dataset(uri)
    assert ds.version == before + 1 and ds.schema.names == ["id", "score"]
    _agree(spark, name, other)
    assert spark.table(name).columns == ["id", "score"]
    assert lance.dataset(uri, version=before).count_rows() == 6

    other.writeTo(name).replace()
    assert lance.dataset(uri).version == before + 2
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        other.writeTo(name + "_missing").using("lance").replace()


def test_managed_tables_live_in_the_warehouse_and_drop_with_their_data(
    spark: SparkSession, name: str, tmp_path: object
) -> None:
    _pets(spark).writeTo(name).using("lance").create()
    uri = _location(spark, name)
    assert uri.rstrip("/") == f"{_warehouse(spark).rstrip('/')}/{name}"
    _agree(spark, name, _pets(spark))
    detail = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    assert {r[0]: r[1] for r in detail}.get("Type") == "MANAGED"
    spark.sql(f"DROP TABLE {name}")
    assert not os.path.exists(uri)

    # an external table keeps its data
    external = str(tmp_path) + "/ext.lance"  # type: ignore[operator]
    _pets(spark).writeTo(name).using("lance").tableProperty("location", external).create()
    spark.sql(f"DROP TABLE {name}")
    assert lance.dataset(external).count_rows() == 6


def test_save_as_table_modes(spark: SparkSession, name: str, tmp_path: object) -> None:
    _pets(spark).write.format("lance").saveAsTable(name)  # managed, ErrorIfExists
    _agree(spark, name, _pets(spark))
    uri = _location(spark, name)
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        _pets(spark).write.format("lance").saveAsTable(name)
    _pets(spark, 6, 2).write.mode("append").saveAsTable(name)  # format from the table
    _agree(spark, name, _pets(spark, 0, 8))
    _pets(spark).write.format("lance").mode("ignore").saveAsTable(name)
    assert lance.dataset(uri).count_rows() == 8
    _pets(spark, 50, 1).write.format("lance").mode("overwrite").saveAsTable(name)
    _agree(spark, name, _pets(spark, 50, 1))

    # with a path: an external table there
    path = str(tmp_path) + "/sat.lance"  # type: ignore[operator]
    other = name + "_p"
    try:
        _pets(spark).write.format("lance").option("path", path).saveAsTable(other)
        assert _location(spark, other) == path
        _agree(spark, other, _pets(spark))
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {other}")
    assert lance.dataset(path).count_rows() == 6


def test_insert_into_matches_by_position(spark: SparkSession, name: str) -> None:
    _pets(spark).write.format("lance").saveAsTable(name)
    renamed = _pets(spark, 10, 2).toDF("a", "b", "c")
    renamed.write.insertInto(name)
    _agree(spark, name, _pets(spark, 0, 6).unionByName(_pets(spark, 10, 2)))
    renamed.write.insertInto(name, overwrite=True)
    _agree(spark, name, _pets(spark, 10, 2))
    with pytest.raises(AnalysisException, match="INSERT_COLUMN_ARITY_MISMATCH"):
        renamed.select("a", "b").write.insertInto(name)


def test_insert_between_two_lance_tables_writes_the_named_table(
    spark: SparkSession, name: str, tmp_path: object
) -> None:
    """Every INSERT form writes the table the statement names, never the table the rows come
    from (the rows of ``SELECT * FROM src`` carry src's columns)."""
    src_uri = str(tmp_path) + "/src.lance"  # type: ignore[operator]
    tgt_uri = str(tmp_path) + "/tgt.lance"  # type: ignore[operator]
    src, tgt = f"{name}_src", name
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, text string").write.format("lance").save(
        src_uri
    )
    spark.createDataFrame([], "id long, text string").write.format("lance").save(tgt_uri)
    spark.sql(f"CREATE TABLE {src} USING lance LOCATION '{src_uri}'")
    spark.sql(f"CREATE TABLE {tgt} USING lance LOCATION '{tgt_uri}'")
    try:
        src_before = (lance.dataset(src_uri).version, _lance_rows(src_uri, ["id", "text"]))
        expected: list[tuple[object, ...]] = []
        steps: list[tuple[str, list[tuple[object, ...]]]] = [
            (f"INSERT INTO {tgt} SELECT * FROM {src}", [(1, "a"), (2, "b")]),
            (f"INSERT INTO {tgt} TABLE {src}", [(1, "a"), (2, "b")]),
            (f"INSERT INTO {tgt} (id, text) VALUES (3, 'c')", [(3, "c")]),
            (f"INSERT INTO {tgt} (text, id) VALUES ('d', 4)", [(4, "d")]),
            (f"INSERT INTO {tgt} SELECT 5 AS id, 'e' AS text", [(5, "e")]),
            (
                f"INSERT INTO {tgt} (text, id) SELECT text, id + 10 FROM {src}",
                [(11, "a"), (12, "b")],
            ),
            (f"INSERT INTO {tgt} VALUES (6, 'f')", [(6, "f")]),
        ]
        for statement, added in steps:
            spark.sql(statement)
            expected = sorted([*expected, *added])
            assert _lance_rows(tgt_uri, ["id", "text"]) == expected, statement
            assert (lance.dataset(src_uri).version, _lance_rows(src_uri, ["id", "text"])) == (
                src_before
            ), statement

        spark.table(src).write.insertInto(tgt)
        spark.table(src).writeTo(tgt).append()
        expected = sorted([*expected, (1, "a"), (2, "b"), (1, "a"), (2, "b")])
        assert _lance_rows(tgt_uri, ["id", "text"]) == expected

        spark.sql(f"INSERT OVERWRITE {tgt} SELECT * FROM {src}")
        assert _lance_rows(tgt_uri, ["id", "text"]) == [(1, "a"), (2, "b")]
        spark.sql(f"INSERT OVERWRITE {tgt} SELECT id * 100, text FROM {src} WHERE id = 1")
        assert _lance_rows(tgt_uri, ["id", "text"]) == [(100, "a")]
        spark.table(src).write.insertInto(tgt, overwrite=True)
        assert _lance_rows(tgt_uri, ["id", "text"]) == [(1, "a"), (2, "b")]
        assert (lance.dataset(src_uri).version, _lance_rows(src_uri, ["id", "text"])) == (
            src_before
        )
        assert _rows(spark.table(tgt)) == [(1, "a"), (2, "b")]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {src}")


def test_sql_managed_create_ctas_and_create_or_replace(spark: SparkSession, name: str) -> None:
    spark.sql(f"CREATE TABLE {name} (id BIGINT NOT NULL, name STRING) USING lance")
    uri = _location(spark, name)
    assert uri.rstrip("/") == f"{_warehouse(spark).rstrip('/')}/{name}"
    assert lance.dataset(uri).count_rows() == 0
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
    _agree(spark, name, spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string"))

    spark.sql(f"CREATE OR REPLACE TABLE {name} USING lance AS SELECT id, name, 7 AS x FROM {name}")
    assert _location(spark, name) == uri  # same table, one more version
    ds = lance.dataset(uri)
    assert ds.schema.names == ["id", "name", "x"] and ds.version == 3
    _agree(
        spark,
        name,
        spark.createDataFrame([(1, "a", 7), (2, "b", 7)], "id long, name string, x int"),
    )
    spark.sql(f"REPLACE TABLE {name} USING lance AS SELECT 9 AS id")
    assert lance.dataset(uri).version == 4
    _agree(spark, name, spark.createDataFrame([(9,)], "id int"))
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"REPLACE TABLE {name}_missing USING lance AS SELECT 1 AS id")
    assert lance.dataset(uri).version == 4
    # REPLACE with columns: one new version, empty, with those columns; history stays.
    spark.sql(f"REPLACE TABLE {name} (id BIGINT, note STRING) USING lance")
    ds = lance.dataset(uri)
    assert (ds.version, ds.count_rows(), ds.schema.names) == (5, 0, ["id", "note"])
    assert spark.table(name).columns == ["id", "note"]
    spark.sql(f"DROP TABLE {name}")
    assert not os.path.exists(uri)

    spark.sql(f"CREATE TABLE {name} USING lance AS SELECT 5 AS id")  # CTAS, managed
    _agree(spark, name, spark.createDataFrame([(5,)], "id int"))
    with pytest.raises(IllegalArgumentException, match="needs columns"):
        spark.sql(f"CREATE TABLE {name}_none USING lance")


def test_partitioning_is_refused_with_what_to_do(spark: SparkSession, name: str) -> None:
    with pytest.raises(lance_spark.InvalidOptionError, match=r"not partitioned.*BTREE"):
        _pets(spark).write.format("lance").partitionBy("grp").saveAsTable(name)
    with pytest.raises(lance_spark.InvalidOptionError, match="not partitioned"):
        _pets(spark).writeTo(name).using("lance").partitionedBy(F.col("grp")).create()
    assert not spark.catalog.tableExists(name)


def test_partition_by_on_a_path_write_is_refused(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(Exception, match=r"not partitioned.*index.*replaceWhere"):
        _pets(spark).write.format("lance").partitionBy("grp").mode("append").save(table_uri)
    assert not os.path.exists(table_uri)


def _operations(uri: str) -> list[str]:
    """The history's operation names, oldest first, as pylance reads them."""
    ds = lance.dataset(uri)
    return [
        str(
            (ds.read_transaction(v["version"]).transaction_properties or {}).get(
                "lance_spark.operation"
            )
        )
        for v in ds.versions()
    ]


def test_history_names_each_kind_of_write_as_delta_does(
    spark: SparkSession, name: str, tmp_path: object
) -> None:
    path = str(tmp_path) + "/path.lance"  # type: ignore[operator]
    _pets(spark).write.format("lance").save(path)  # a new table: still a WRITE (Delta's name)
    _pets(spark).write.format("lance").mode("overwrite").save(path)
    assert _operations(path) == ["WRITE", "WRITE"]

    uri = str(tmp_path) + "/catalog.lance"  # type: ignore[operator]
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{uri}' AS SELECT 1 AS id")
    spark.sql(f"CREATE OR REPLACE TABLE {name} USING lance AS SELECT 2 AS id")
    spark.sql(f"REPLACE TABLE {name} USING lance AS SELECT 3 AS id")
    spark.sql(f"REPLACE TABLE {name} (id BIGINT) USING lance")
    spark.sql(f"INSERT INTO {name} VALUES (4)")
    assert _operations(uri) == [
        "CREATE TABLE AS SELECT",
        "CREATE OR REPLACE TABLE AS SELECT",
        "REPLACE TABLE AS SELECT",
        "REPLACE TABLE",
        "WRITE",
    ]
    assert [r.operation for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()] == list(
        reversed(_operations(uri))
    )
    spark.sql(f"DROP TABLE {name}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING lance")
    _pets(spark).select("id").write.mode("append").saveAsTable(name)
    assert _operations(_location(spark, name)) == ["CREATE TABLE", "WRITE"]
    spark.sql(f"DROP TABLE {name}")
    _pets(spark).write.format("lance").saveAsTable(name)
    _pets(spark).writeTo(name).createOrReplace()
    assert _operations(_location(spark, name)) == [
        "CREATE TABLE AS SELECT",
        "CREATE OR REPLACE TABLE AS SELECT",
    ]
