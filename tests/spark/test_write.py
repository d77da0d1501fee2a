"""Writes through Spark: one version per job, schema rules, failures leave the table as it was."""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import lance_spark

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _data_files(uri: str) -> set[str]:
    data = os.path.join(uri, "data")
    return set(os.listdir(data)) if os.path.isdir(data) else set()


def _frame(spark: SparkSession, n: int = 1000, parts: int = 4) -> DataFrame:
    return spark.range(0, n, numPartitions=parts).selectExpr(
        "id", "concat('l', id % 5) AS label", "array(cast(id AS float), 1.0f, 2.0f) AS v"
    )


def test_append_creates_then_adds_one_version_per_job(spark: SparkSession, table_uri: str) -> None:
    _frame(spark, parts=4).write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 1 and ds.count_rows() == 1000
    assert len(ds.get_fragments()) == 4  # one per non-empty partition, all in one commit
    _frame(spark, parts=7).write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.count_rows() == 2000
    table = ds.to_table()
    assert sorted(table["id"].to_pylist()) == sorted(list(range(1000)) * 2)


def test_written_table_read_back_by_pylance_matches_spark(
    spark: SparkSession, table_uri: str
) -> None:
    df = _frame(spark, n=200)
    df.write.format("lance").mode("append").save(table_uri)
    got = lance.dataset(table_uri).to_table().to_pylist()
    want = [r.asDict() for r in df.collect()]
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)


def test_vector_option_makes_fixed_size_list(spark: SparkSession, table_uri: str) -> None:
    (
        _frame(spark)
        .write.format("lance")
        .option("v.arrow.fixed-size-list.size", "3")
        .mode("append")
        .save(table_uri)
    )
    schema = lance.dataset(table_uri).schema
    assert schema.field("v").type == pa.list_(pa.float32(), 3)
    # appends keep the table's type, and a vector of the wrong length is an error
    _frame(spark, n=10).write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).schema.field("v").type == pa.list_(pa.float32(), 3)
    bad = spark.range(3).selectExpr("id", "'x' AS label", "array(1.0f, 2.0f) AS v")
    with pytest.raises(Exception, match=r"'v'.*3.*2|'v'.*length"):
        bad.write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).version == 2


def test_overwrite_keeps_vector_columns(spark: SparkSession, table_uri: str) -> None:
    _frame(spark).write.format("lance").option("v.arrow.fixed-size-list.size", "3").mode(
        "append"
    ).save(table_uri)
    spark.read.format("lance").option("version", 1).load(table_uri).write.format("lance").mode(
        "overwrite"
    ).save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.schema.field("v").type == pa.list_(pa.float32(), 3)
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))


def test_overwrite_replaces_rows_and_changes_schema_with_overwrite_schema(
    spark: SparkSession, table_uri: str
) -> None:
    _frame(spark).write.format("lance").mode("append").save(table_uri)
    spark.range(5).selectExpr("id", "id * 2 AS twice").write.format("lance").option(
        "overwriteSchema", "true"
    ).mode("overwrite").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2
    assert ds.schema.names == ["id", "twice"]
    assert sorted(ds.to_table()["twice"].to_pylist()) == [0, 2, 4, 6, 8]
    assert lance.dataset(table_uri, version=1).count_rows() == 1000


def test_zero_row_append_commits_nothing(spark: SparkSession, table_uri: str) -> None:
    _frame(spark).write.format("lance").mode("append").save(table_uri)
    _frame(spark).filter("id < 0").write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).version == 1


def test_columns_matched_by_name_and_missing_nullable_become_null(
    spark: SparkSession, table_uri: str
) -> None:
    _frame(spark, n=10).write.format("lance").mode("append").save(table_uri)
    spark.range(10, 12).selectExpr("concat('x', id) AS label", "id").write.format("lance").mode(
        "append"
    ).save(table_uri)
    rows = {r["id"]: r for r in lance.dataset(table_uri).to_table().to_pylist()}
    assert rows[10]["label"] == "x10" and rows[10]["v"] is None


def test_extra_column_is_an_error_and_changes_nothing(spark: SparkSession, table_uri: str) -> None:
    _frame(spark, n=10).write.format("lance").mode("append").save(table_uri)
    before = _data_files(table_uri)
    extra = _frame(spark, n=10).withColumn("surprise", F.lit(1))
    with pytest.raises(Exception, match="surprise"):
        extra.write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).version == 1
    assert _data_files(table_uri) == before


def test_lossy_cast_is_an_error_naming_column_and_types(
    spark: SparkSession, table_uri: str
) -> None:
    lance.write_dataset(pa.table({"n": pa.array([1], pa.int32())}), table_uri)
    spark.range(3).selectExpr("cast(id AS int) AS n").write.format("lance").mode("append").save(
        table_uri
    )
    assert lance.dataset(table_uri).count_rows() == 4
    too_big = spark.range(1).selectExpr("cast(9999999999 AS bigint) AS n")
    with pytest.raises(Exception, match=r"'n'"):
        too_big.write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).version == 2


def test_commit_records_operation_app_and_user_metadata(
    spark: SparkSession, table_uri: str
) -> None:
    _frame(spark).write.format("lance").option("userMetadata", "nightly ingest").mode(
        "append"
    ).save(table_uri)
    _frame(spark).write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    first = ds.read_transaction(1).transaction_properties
    assert first["lance_spark.operation"] == "WRITE"  # Delta's name, new table or not
    assert first["lance_spark.userMetadata"] == "nightly ingest"
    assert first["lance_spark.appId"] == spark.conf.get("spark.app.id")
    assert json.loads(first["lance_spark.operationMetrics"])["numOutputRows"] == 1000
    second = ds.read_transaction(2).transaction_properties
    assert second["lance_spark.operation"] == "WRITE"
    assert json.loads(second["lance_spark.operationParameters"]) == {"mode": "Append"}


def test_failing_task_leaves_no_version_and_no_files(spark: SparkSession, table_uri: str) -> None:
    _frame(spark).write.format("lance").mode("append").save(table_uri)
    before = _data_files(table_uri)

    @F.udf("bigint")
    def explode_on_777(i: int) -> int:
        if i == 777:
            raise RuntimeError("task failure on purpose")
        return i

    failing = _frame(spark, n=1000, parts=4).withColumn("id", explode_on_777("id"))
    with pytest.raises(Exception, match="task failure on purpose"):
        failing.write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).version == 1
    assert _data_files(table_uri) == before


def test_failing_first_write_creates_no_table(spark: SparkSession, table_uri: str) -> None:
    @F.udf("bigint")
    def boom(i: int) -> int:
        raise RuntimeError("task failure on purpose")

    with pytest.raises(Exception, match="task failure on purpose"):
        spark.range(10).withColumn("id", boom("id")).write.format("lance").mode("append").save(
            table_uri
        )
    assert _data_files(table_uri) == set()
    with pytest.raises(ValueError, match="not found"):
        lance.dataset(table_uri)


def test_error_if_exists_and_ignore_save_modes(spark: SparkSession, table_uri: str) -> None:
    # ErrorIfExists (the default) creates a new table, and refuses an existing one
    _frame(spark, n=10).write.format("lance").save(table_uri)
    assert lance.dataset(table_uri).count_rows() == 10
    with pytest.raises(lance_spark.TableAlreadyExistsError, match=r"already exists.*ErrorIfExists"):
        _frame(spark).write.format("lance").save(table_uri)
    with pytest.raises(lance_spark.TableAlreadyExistsError):
        _frame(spark).write.format("lance").mode("error").save(table_uri)
    # Ignore leaves an existing table alone, and creates a missing one
    _frame(spark).write.format("lance").mode("ignore").save(table_uri)
    assert lance.dataset(table_uri).version == 1
    other = table_uri + "_ignored"
    _frame(spark, n=3).write.format("lance").mode("ignore").save(other)
    assert lance.dataset(other).count_rows() == 3


def test_bad_write_option_is_named(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(Exception, match="unknown write option 'mergeschemaa'"):
        _frame(spark).write.format("lance").option("mergeSchemaa", "true").mode("append").save(
            table_uri
        )


def test_merge_schema_adds_columns_in_one_version(spark: SparkSession, table_uri: str) -> None:
    _frame(spark, n=10).write.format("lance").mode("append").save(table_uri)
    wider = _frame(spark, n=5).withColumn("score", F.col("id") * 0.5)
    wider.write.format("lance").option("mergeSchema", "true").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2
    assert ds.schema.names == ["id", "label", "v", "score"]
    rows = ds.to_table().to_pylist()
    assert sorted(r["score"] for r in rows if r["score"] is not None) == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert sum(r["score"] is None for r in rows) == 10
    back = spark.read.format("lance").load(table_uri)
    assert back.filter("score IS NULL").count() == 10


def test_lance_writer_settings_pass_through_on_create(spark: SparkSession, table_uri: str) -> None:
    (
        _frame(spark, n=1000, parts=1)
        .write.format("lance")
        .option("max_rows_per_file", "300")
        .option("max_rows_per_group", "100")
        .option("data_storage_version", "2.1")
        .option("enable_stable_row_ids", "false")
        .mode("append")
        .save(table_uri)
    )
    ds = lance.dataset(table_uri)
    assert [f.count_rows() for f in ds.get_fragments()] == [300, 300, 300, 100]
    assert ds.data_storage_version == "2.1"
    assert all(f.metadata.row_id_meta is None for f in ds.get_fragments())
    _frame(spark, n=10, parts=1).write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).data_storage_version == "2.1"


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_data_storage_version_of_a_table_created_with_no_rows(
    spark: SparkSession, table_uri: str, version: str
) -> None:
    empty = _frame(spark, n=0, parts=2)
    empty.write.format("lance").option("data_storage_version", version).mode("append").save(
        table_uri
    )
    ds = lance.dataset(table_uri)
    assert (ds.data_storage_version, ds.count_rows(), ds.version) == (version, 0, 1)
    assert ds.schema.names == ["id", "label", "v"]
    history = lance_spark.LanceTable.forPath(spark, table_uri).history().collect()
    assert [r.operation for r in history] == ["WRITE"]
    # Rows written later keep the table's format; an overwrite with no rows re-creates it
    # in the given one.
    _frame(spark, n=10, parts=1).write.format("lance").mode("append").save(table_uri)
    assert lance.dataset(table_uri).data_storage_version == version
    empty.write.format("lance").mode("overwrite").option("data_storage_version", "2.2").save(
        table_uri
    )
    ds = lance.dataset(table_uri)
    assert (ds.data_storage_version, ds.count_rows(), ds.version) == ("2.2", 0, 3)


def test_created_tables_have_stable_row_ids_by_default(spark: SparkSession, table_uri: str) -> None:
    _frame(spark, n=10, parts=2).write.format("lance").mode("append").save(table_uri)
    _frame(spark, n=10, parts=2).write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert all(f.metadata.row_id_meta is not None for f in ds.get_fragments())
    assert sorted(ds.to_table(with_row_id=True)["_rowid"].to_pylist()) == list(range(20))
