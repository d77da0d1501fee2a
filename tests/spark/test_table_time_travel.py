"""``spark.read.option("versionAsOf", n).table(name)`` on a Lance catalog table: the version
asked for (Spark alone refuses time travel on Python data source tables)."""

from __future__ import annotations

from datetime import UTC

import lance
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def test_version_and_timestamp_options_on_a_catalog_table(
    spark: SparkSession, table_uri: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    first = spark.createDataFrame([(1, "a"), (2, "b")], "id long, label string")
    first.write.format("lance").mode("append").save(table_uri)
    spark.createDataFrame([(3, "c")], first.schema).write.format("lance").mode("append").save(
        table_uri
    )
    spark.sql(f"CREATE TABLE tt_pets USING lance LOCATION '{table_uri}'")
    try:
        v1 = spark.read.option("versionAsOf", 1).table("tt_pets")
        assert sorted(r["id"] for r in v1.collect()) == [1, 2]
        assert sorted(
            r["id"] for r in spark.read.options(versionAsOf=2).table("tt_pets").collect()
        ) == [1, 2, 3]
        stamp = lance.dataset(table_uri).versions()[0]["timestamp"].astimezone(UTC).isoformat()
        at_v1 = spark.read.option("timestampAsOf", stamp).table("tt_pets")
        assert sorted(r["id"] for r in at_v1.collect()) == [1, 2]
        assert spark.read.table("tt_pets").count() == 3
        assert spark.table("tt_pets").count() == 3
        with pytest.raises(PySparkException, match="version 7"):
            spark.read.option("versionAsOf", 7).table("tt_pets").collect()
        # Other tables: Spark's own answer (Parquet has no time travel).
        spark.sql(f"CREATE TABLE tt_parquet (a int) USING parquet LOCATION '{tmp_path}/p'")
        try:
            with pytest.raises(PySparkException, match="TIME_TRAVEL"):
                spark.read.option("versionAsOf", 1).table("tt_parquet").collect()
        finally:
            spark.sql("DROP TABLE tt_parquet")
    finally:
        spark.sql("DROP TABLE tt_pets")
