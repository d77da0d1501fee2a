"""Lance tables on S3 (a moto server on loopback) through Spark: storage options per read or
write and from the session conf, cleanup after a failed job, and secrets kept out of errors."""

from __future__ import annotations

import sys
import traceback
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import lance
import pytest
from _servers import create_bucket, lance_storage_options, list_keys, moto_s3
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, DataFrameReader, DataFrameWriter, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import lance_spark

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PETS_SCHEMA = "id long, name string, species string, age int"
FIRST = [
    (1, "Rex", "dog", 3),
    (2, "Tom", "cat", 5),
    (3, "Nemo", "fish", 1),
]
SECOND = [
    (4, "Felix", "cat", 2),
    (5, "Bella", "dog", 7),
]
SECRET = "s3cr3t-value"
STAGING_PREFIX = "pets.lance/_lance_spark/"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_s3() as url:
        yield url


@pytest.fixture
def bucket(endpoint: str) -> str:
    name = f"lance-{uuid.uuid4().hex[:12]}"
    create_bucket(endpoint, name)
    return name


@pytest.fixture
def storage(endpoint: str) -> dict[str, str]:
    return lance_storage_options(endpoint)


def with_storage(io: DataFrameReader | DataFrameWriter, storage: Mapping[str, str]) -> Any:
    for key, value in storage.items():
        io = io.option(f"storage.{key}", value)
    return io


def pets(spark: SparkSession, rows: list[tuple[Any, ...]], partitions: int = 2) -> DataFrame:
    return spark.createDataFrame(rows, PETS_SCHEMA).repartition(partitions)


def as_tuples(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_write_append_and_filtered_read_with_storage_options(
    spark: SparkSession, bucket: str, endpoint: str, storage: dict[str, str]
) -> None:
    uri = f"s3://{bucket}/pets.lance"

    with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(uri)
    with_storage(pets(spark, SECOND).write.format("lance").mode("append"), storage).save(uri)

    cats = with_storage(spark.read.format("lance"), storage).load(uri).where("species = 'cat'")
    assert as_tuples(cats) == [(2, "Tom", "cat", 5), (4, "Felix", "cat", 2)]
    everything = with_storage(spark.read.format("lance"), storage).load(uri)
    assert as_tuples(everything) == sorted(FIRST + SECOND)
    first = with_storage(spark.read.format("lance").option("version", 1), storage).load(uri)
    assert as_tuples(first) == sorted(FIRST)

    ds = lance.dataset(uri, storage_options=storage)
    assert ds.version == 2
    assert [v["version"] for v in ds.versions()] == [1, 2]
    assert ds.count_rows() == len(FIRST) + len(SECOND)
    assert lance.dataset(uri, version=1, storage_options=storage).count_rows() == len(FIRST)
    keys = list_keys(endpoint, bucket)
    assert any(k.startswith("pets.lance/data/") for k in keys), keys
    assert any(k.startswith("pets.lance/_versions/") for k in keys), keys
    assert not any(k.startswith(STAGING_PREFIX) for k in keys), keys  # cleaned after commit


@pytest.fixture
def session_storage(spark: SparkSession, storage: dict[str, str]) -> Iterator[dict[str, str]]:
    """Storage options set as ``spark.lance.storage.*`` confs, restored afterwards."""
    keys = {f"spark.lance.storage.{k}": v for k, v in storage.items()}
    previous = {key: spark.conf.get(key, None) for key in keys}
    try:
        for key, value in keys.items():
            spark.conf.set(key, value)
        lance_spark.register(spark)
        yield storage
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        lance_spark.register(spark)


def test_session_conf_storage_options_reach_executors(
    spark: SparkSession, bucket: str, session_storage: dict[str, str]
) -> None:
    uri = f"s3://{bucket}/pets.lance"

    # No storage options here: the writing and reading tasks get them from the session conf.
    pets(spark, FIRST).write.format("lance").mode("append").save(uri)
    pets(spark, SECOND).write.format("lance").mode("append").save(uri)
    dogs = spark.read.format("lance").load(uri).where("species = 'dog' AND age > 4")
    assert as_tuples(dogs) == [(5, "Bella", "dog", 7)]
    pets(spark, SECOND).write.format("lance").mode("overwrite").save(uri)
    assert as_tuples(spark.read.format("lance").load(uri)) == sorted(SECOND)

    ds = lance.dataset(uri, storage_options=session_storage)
    assert ds.version == 3
    assert ds.count_rows() == len(SECOND)


def test_failed_job_leaves_no_version_and_no_data_files(
    spark: SparkSession, bucket: str, endpoint: str, storage: dict[str, str]
) -> None:
    uri = f"s3://{bucket}/pets.lance"
    with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(uri)
    data_before = list_keys(endpoint, bucket, "pets.lance/data/")
    all_before = list_keys(endpoint, bucket, "pets.lance/")
    assert data_before

    # No type hints: PySpark 4 would try to infer an Arrow UDF from them.
    @F.udf(StringType())
    def name_of(i):  # type: ignore[no-untyped-def]
        if i == 3_250:
            raise ValueError(f"boom-{i}")
        return f"pet-{i}"

    # Eight partitions of 500 rows on two cores: most tasks succeed (and write their files)
    # before the one holding id 3250 fails; there is no retry in local mode.
    doomed = spark.range(0, 4_000, 1, 8).select(
        F.col("id"),
        name_of("id").alias("name"),
        F.lit("dog").alias("species"),
        F.lit(1).alias("age"),
    )
    with pytest.raises(PySparkException, match="boom-3250"):
        with_storage(doomed.write.format("lance").mode("append"), storage).save(uri)

    ds = lance.dataset(uri, storage_options=storage)
    assert ds.version == 1
    assert ds.count_rows() == len(FIRST)
    assert list_keys(endpoint, bucket, "pets.lance/data/") == data_before
    # Only the connector's bookkeeping of the aborted job (under _lance_spark/) may remain.
    after = list_keys(endpoint, bucket, "pets.lance/")
    assert {k for k in after if not k.startswith(STAGING_PREFIX)} == all_before


def _full_text(err: BaseException) -> str:
    return "\n".join(["".join(traceback.format_exception(err)), str(err), repr(err)])


def _captured_logs(request: pytest.FixtureRequest) -> str:
    """What the JVM and the Python workers wrote to stdout/stderr so far in this test.

    They inherited pytest's global fd capture when the session started; with ``-s`` nothing is
    captured and this returns "".
    """
    manager = request.config.pluginmanager.getplugin("capturemanager")
    if manager is None or not manager.is_globally_capturing():
        return ""
    out, err = manager.read_global_capture()
    sys.stdout.write(out)  # keep them in the test report
    sys.stderr.write(err)
    return f"{out}\n{err}"


@pytest.mark.parametrize("table", ["missing.lance", "nested/missing.lance"])
def test_read_of_missing_table_does_not_leak_secret(
    spark: SparkSession, bucket: str, endpoint: str, table: str, request: pytest.FixtureRequest
) -> None:
    storage = lance_storage_options(endpoint, secret_key=SECRET)
    uri = f"s3://{bucket}/{table}"
    with pytest.raises(PySparkException) as caught:
        with_storage(spark.read.format("lance"), storage).load(uri).collect()
    text = _full_text(caught.value)
    assert table in text  # the error names the table...
    assert SECRET not in text  # ...but not the secret
    assert SECRET not in _captured_logs(request)


def test_write_to_missing_bucket_does_not_leak_secret(
    spark: SparkSession, endpoint: str, request: pytest.FixtureRequest
) -> None:
    storage = lance_storage_options(endpoint, secret_key=SECRET)
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    with pytest.raises((PySparkException, Py4JJavaError)) as caught:
        with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(
            f"s3://{bucket}/pets.lance"
        )
    text = _full_text(caught.value)
    assert bucket in text
    assert SECRET not in text
    assert SECRET not in _captured_logs(request)
