"""A damaged table (issue 11, item 6): every entry point raises CorruptTableError naming the
table and the file (directly, or inside Spark's wrapper when a Python worker raised it), and
the versions that do not need the damaged file can still be read."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from lance_spark import CorruptTableError, LanceSparkError, LanceTable

pytestmark = pytest.mark.spark

_names = itertools.count()


@pytest.fixture
def table_name(spark: SparkSession) -> Iterator[str]:
    name = f"damaged_{next(_names)}"
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def _make(spark: SparkSession, uri: str, name: str) -> LanceTable:
    """Version 1: ids 0-2, version 2: ids 3-4 (a fragment of its own); a catalog table."""
    lance.write_dataset(pa.table({"id": pa.array([0, 1, 2], pa.int64()), "s": ["a"] * 3}), uri)
    lance.write_dataset(
        pa.table({"id": pa.array([3, 4], pa.int64()), "s": ["b"] * 2}), uri, mode="append"
    )
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{uri}'")
    return LanceTable.forPath(spark, uri)


def _latest_manifest(uri: str) -> str:
    # V2 manifest names are u64::MAX - version: the latest version has the smallest name.
    names = [n for n in os.listdir(f"{uri}/_versions") if n.endswith(".manifest")]
    return f"{uri}/_versions/{min(names)}"


def _newest_data_file(uri: str) -> str:
    fragment = lance.dataset(uri).get_fragments()[-1]
    return f"{uri}/data/{fragment.metadata.files[0].path}"


def _truncate(path: str) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])


def _expect_damage(what: str, call: Callable[[], object], uri: str, file: str) -> None:
    """``call`` raises CorruptTableError, or Spark's error around it, naming ``uri``/``file``."""
    try:
        call()
    except CorruptTableError as err:
        if err.table_uri is not None:  # None when re-raised on the driver from its message
            assert err.table_uri == uri and err.path == file, what
        assert uri in str(err) and file in str(err), what
        assert "versionAsOf" in str(err), what
    except (CapturedException, Py4JJavaError) as err:  # raised in a Python worker
        text = str(err)
        assert "CorruptTableError" in text, f"{what}: {text[:2000]}"
        assert uri in text and file in text, f"{what}: {text[:2000]}"
    else:
        pytest.fail(f"{what}: no error")


def test_error_type() -> None:
    assert issubclass(CorruptTableError, LanceSparkError)
    assert issubclass(CorruptTableError, OSError)


def test_damaged_latest_manifest(spark: SparkSession, table_uri: str, table_name: str) -> None:
    table = _make(spark, table_uri, table_name)
    manifest = _latest_manifest(table_uri)
    _truncate(manifest)
    uri, name = table_uri, table_name
    row = spark.createDataFrame([(9, "z")], "id BIGINT, s STRING")
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: spark.read.format("lance").load(uri).count(),
        "append": lambda: row.write.format("lance").mode("append").save(uri),
        "overwrite": lambda: row.write.format("lance").mode("overwrite").save(uri),
        "forPath": lambda: LanceTable.forPath(spark, uri),
        "toDF": lambda: table.toDF().count(),
        "update": lambda: table.update(condition="id = 1", set={"s": "'u'"}),
        "delete": lambda: table.delete("id = 1"),
        "merge": lambda: (
            table.alias("t")
            .merge(row.alias("r"), "t.id = r.id")
            .whenNotMatchedInsertAll()
            .execute()
        ),
        "history": lambda: table.history().collect(),
        "addColumns": lambda: table.addColumns({"n": "id + 1"}),
        "SQL SELECT": lambda: spark.sql(f"SELECT * FROM {name}").collect(),
        "SQL SELECT path": lambda: spark.sql(f"SELECT * FROM lance.`{uri}`").collect(),
        "SQL INSERT": lambda: spark.sql(f"INSERT INTO {name} SELECT 9, 'z'"),
        "SQL UPDATE": lambda: spark.sql(f"UPDATE {name} SET s = 'u' WHERE id = 1"),
        "SQL MERGE": lambda: spark.sql(
            f"MERGE INTO {name} t USING (SELECT 9L AS id, 'z' AS s) r ON t.id = r.id "
            "WHEN NOT MATCHED THEN INSERT *"
        ),
        "SQL DESCRIBE HISTORY": lambda: spark.sql(f"DESCRIBE HISTORY {name}").collect(),
    }
    for what, call in calls.items():
        _expect_damage(what, call, uri, manifest)
    assert Path(manifest).stat().st_size > 0  # nothing replaced or removed the damaged file

    # Version 1 is intact and can still be read, by DataFrame and by SQL.
    old = spark.read.format("lance").option("versionAsOf", 1).load(uri)
    assert sorted(r.id for r in old.collect()) == [0, 1, 2]
    old_sql = spark.sql(f"SELECT id FROM {name} WITH ('version' = '1')").collect()
    assert sorted(r.id for r in old_sql) == [0, 1, 2]
    # Reading the damaged version by its number names it too.
    _expect_damage(
        "versionAsOf 2",
        lambda: spark.read.format("lance").option("versionAsOf", 2).load(uri).count(),
        uri,
        manifest,
    )


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_damaged_data_file(
    spark: SparkSession, table_uri: str, table_name: str, damage: str
) -> None:
    table = _make(spark, table_uri, table_name)
    file = _newest_data_file(table_uri)
    if damage == "delete":
        os.remove(file)
    else:
        _truncate(file)
    uri, name = table_uri, table_name
    row = spark.createDataFrame([(9, "z")], "id BIGINT, s STRING")
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: spark.read.format("lance").load(uri).collect(),
        "toDF": lambda: table.toDF().collect(),
        "update": lambda: table.update(condition="id >= 0", set={"s": "'u'"}),
        "delete": lambda: table.delete("id >= 4"),
        "merge": lambda: (
            table.alias("t")
            .merge(row.alias("r"), "t.id = r.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        ),
        "addColumns": lambda: table.addColumns({"n": "id + 1"}),
        "SQL SELECT": lambda: spark.sql(f"SELECT * FROM {name}").collect(),
        "SQL UPDATE": lambda: spark.sql(f"UPDATE {name} SET s = 'u' WHERE id >= 0"),
    }
    for what, call in calls.items():
        _expect_damage(what, call, uri, file)
    assert lance.dataset(uri).version == 2  # no failed operation committed anything

    old = spark.read.format("lance").option("versionAsOf", 1).load(uri)
    assert sorted(r.id for r in old.collect()) == [0, 1, 2]
