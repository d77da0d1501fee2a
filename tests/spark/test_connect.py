"""The tests' Spark Connect session (conftest ``connect_spark``) is a real Connect client of a
server in another process, and the ``lance`` format round-trips on it."""

from __future__ import annotations

import lance
import pytest
from pyspark.errors import PySparkAttributeError
from pyspark.sql import SparkSession

from lance_spark._spark import is_connect

pytestmark = [pytest.mark.spark, pytest.mark.connect]


def test_connect_session_has_no_jvm(connect_spark: SparkSession, connect_url: str) -> None:
    assert connect_url.startswith("sc://127.0.0.1:")
    assert is_connect(connect_spark)
    with pytest.raises(PySparkAttributeError, match="JVM_ATTRIBUTE_NOT_SUPPORTED"):
        _ = connect_spark.sparkContext
    # The server is its own application, not this process's classic session.
    assert connect_spark.conf.get("spark.app.name") == "lance_spark-tests-connect"


def test_lance_round_trip_on_connect(connect_spark: SparkSession, table_uri: str) -> None:
    spark = connect_spark
    frame = spark.range(0, 1000, 1, numPartitions=3).selectExpr("id", "concat('n', id % 7) AS name")
    frame.write.format("lance").mode("append").save(table_uri)
    back = spark.read.format("lance").load(table_uri)
    assert back.schema.simpleString() == "struct<id:bigint,name:string>"
    expected = sorted((i, f"n{i % 7}") for i in range(1000))
    assert sorted((r.id, r.name) for r in back.collect()) == expected
    # What the Connect server wrote is a Lance table pylance reads back.
    table = lance.dataset(table_uri).to_table()
    assert sorted(zip(table["id"].to_pylist(), table["name"].to_pylist(), strict=True)) == expected
    assert back.filter("id >= 990").count() == 10
