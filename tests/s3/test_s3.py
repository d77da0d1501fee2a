"""Lance tables on S3 (a moto server on loopback) through Spark: storage options per read or
write and for the session (conf and ``register(storage_options=...)``), cleanup after a failed
job, and secrets kept out of errors, logs, the event log and the table's files."""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lance
import pytest
from _servers import (
    MOTO_ACCESS_KEY,
    MOTO_REGION,
    MOTO_SECRET_KEY,
    create_bucket,
    lance_storage_options,
    list_keys,
    log_tail,
    moto_s3,
    s3_client,
    spark_env,
)
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, DataFrameReader, DataFrameWriter, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import lance_spark
from lance_spark.errors import SecretInConfError
from lance_spark.source.options import secret_storage_keys
from lance_spark.source.session import session_storage as session_storage_of

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
    """Storage options for the session, restored afterwards: the keys that are not secrets as
    ``spark.lance.storage.*`` confs, the credentials with ``register(storage_options=...)``."""
    secret_keys = set(secret_storage_keys(storage))
    keys = {f"spark.lance.storage.{k}": v for k, v in storage.items() if k not in secret_keys}
    previous = {key: spark.conf.get(key, None) for key in keys}
    try:
        for key, value in keys.items():
            spark.conf.set(key, value)
        lance_spark.register(
            spark, storage_options={k: v for k, v in storage.items() if k in secret_keys}
        )
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

    # No storage options here: the writing and reading tasks get them from the session.
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
    with pytest.raises((PySparkException, Py4JJavaError, lance_spark.LanceSparkError)) as caught:
        with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(
            f"s3://{bucket}/pets.lance"
        )
    text = _full_text(caught.value)
    assert bucket in text
    assert SECRET not in text
    assert SECRET not in _captured_logs(request)


def test_register_refuses_a_secret_in_the_conf(spark: SparkSession) -> None:
    key = "spark.lance.storage.aws_secret_access_key"
    spark.conf.set("spark.lance.storage.aws_region", "eu-west-1")
    spark.conf.set(key, SECRET)
    try:
        with pytest.raises(SecretInConfError) as caught:
            lance_spark.register(spark)
        message = str(caught.value)
        assert key in message
        assert "register(spark, storage_options=" in message
        assert "AWS_SECRET_ACCESS_KEY" in message
        assert SECRET not in message
        spark.conf.unset(key)
        # Without the secret, the same conf (a non-secret key) is taken.
        lance_spark.register(spark, storage_options={"aws_secret_access_key": SECRET})
        assert dict(session_storage_of(spark)) == {
            "aws_region": "eu-west-1",
            "aws_secret_access_key": SECRET,
        }
        assert key not in spark.conf.getAll  # register put nothing secret into the conf
        assert SECRET not in str(spark.conf.getAll)
    finally:
        spark.conf.unset(key)
        spark.conf.unset("spark.lance.storage.aws_region")
        lance_spark.register(spark)


# --- secrets in a whole session's logs ------------------------------------------------------------

DRIVER = Path(__file__).resolve().parent / "_secrets_driver.py"


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_credentials_stay_out_of_event_log_logs_errors_and_files(
    endpoint: str, bucket: str, tmp_path: Path
) -> None:
    """One driver subprocess with the event log on (as for a History Server) runs every kind of
    statement on a catalog table on S3 with three sets of distinctive credentials: the
    session's (register), one LanceTable's (forPath) and one read's and write's (options).
    None of them may appear in the event log, the driver's output, the errors, the history or
    any file of the bucket or the warehouse."""
    token = uuid.uuid4().hex
    credentials = [
        {
            "aws_access_key_id": f"lsp-KEYID{i}-{token}",
            "aws_secret_access_key": f"lsp-SECRET{i}-{token}",
        }
        for i in range(3)
    ]
    secrets = [value for creds in credentials for value in creds.values()]
    event_dir, out_dir, warehouse = tmp_path / "events", tmp_path / "out", tmp_path / "warehouse"
    for d in (event_dir, out_dir, warehouse):
        d.mkdir()
    args = tmp_path / "args.json"
    args.write_text(
        json.dumps(
            {
                "endpoint": endpoint,
                "bucket": bucket,
                "region": MOTO_REGION,
                "event_dir": str(event_dir),
                "out_dir": str(out_dir),
                "warehouse": str(warehouse),
                "credentials": credentials,
            }
        )
    )
    env = {k: v for k, v in spark_env().items() if not k.startswith("AWS_")}
    # The environment's credentials, for the part that gives none to lance_spark.
    env.update(AWS_ACCESS_KEY_ID=MOTO_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=MOTO_SECRET_KEY)
    driver_log = tmp_path / "driver.log"
    with driver_log.open("wb") as log:
        proc = subprocess.run(
            [sys.executable, str(DRIVER), str(args)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    log_text = driver_log.read_text(errors="replace")
    assert proc.returncode == 0, log_tail(driver_log, 80)

    # The statements did what they say (so the places searched below saw real work).
    results = json.loads((out_dir / "results.json").read_text())
    assert results["select"] == [["1"], ["2"]]
    assert results["option_count"] == 3
    assert results["final"] == [
        ["1", "Rex", "4", "8"],
        ["4", "Felix", "10", "4"],
        ["5", "Bella", "7", "14"],
        ["6", "Kitty", "2", "None"],  # inserted naming three of the four columns
    ]
    operations = {row[2] for row in results["history"]}
    assert {"WRITE", "MERGE", "UPDATE", "DELETE", "ADD COLUMNS"} <= operations, operations
    errors = (out_dir / "errors.txt").read_text()
    for expected in ("verison", "nope", "boom-", "none.lance"):
        assert expected in errors
    events = "\n".join(p.read_text(errors="replace") for p in _files_under(event_dir))
    assert "SparkListenerSQLExecutionStart" in events
    # Confs are logged (the non-secret ones given that way are there)...
    assert "spark.lance.storage.aws_endpoint" in events
    # ...and so are a source's options, the storage ones redacted.
    assert "storage.aws_access_key_id=*********(redacted)" in events
    # The LanceTable with its own credentials read through a private format.
    assert "lance_storage_" in log_text

    places: dict[str, bytes] = {
        "event log": events.encode(),
        "driver stdout/stderr": log_text.encode(),
        "errors": errors.encode(),
        "results (history, DESCRIBE HISTORY, EXPLAIN, diff)": json.dumps(results).encode(),
    }
    for path in _files_under(warehouse):
        places[f"warehouse file {path}"] = path.read_bytes()
    client = s3_client(endpoint)
    keys = list_keys(endpoint, bucket)
    assert any(k.startswith("pets.lance/_versions/") for k in keys), keys
    for key in keys:
        places[f"s3://{bucket}/{key}"] = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    leaks = [
        (where, secret)
        for where, data in places.items()
        for secret in secrets
        if secret.encode() in data
    ]
    assert not leaks, leaks


def test_stream_from_and_to_s3_exactly_once(
    spark: SparkSession, bucket: str, endpoint: str, storage: dict[str, str], tmp_path: Path
) -> None:
    """A Lance table on S3 streamed into another one on S3 (availableNow), an append, and the
    same query again from its checkpoint: each source row lands once, one version per run."""
    source = f"s3://{bucket}/pets.lance"
    target = f"s3://{bucket}/copy.lance"
    with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(source)

    def run() -> None:
        reader = with_storage(spark.readStream.format("lance"), storage).load(source)
        writer = with_storage(reader.writeStream.format("lance"), storage)
        query = (
            writer.option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination()

    run()
    with_storage(pets(spark, SECOND).write.format("lance").mode("append"), storage).save(source)
    run()
    run()
    copied = with_storage(spark.read.format("lance"), storage).load(target)
    assert as_tuples(copied) == sorted(FIRST + SECOND)
    ds = lance.dataset(target, storage_options=storage)
    assert [v["version"] for v in ds.versions()] == [1, 2]
    assert ds.read_transaction(2).transaction_properties["lance.streaming.epochId"] == "1"
    # What stays under _lance_spark/: the query's state files (its newest commit), no staging
    # and no attempt file (each commit removed its own).
    left = sorted(
        k for k in list_keys(endpoint, bucket) if k.startswith("copy.lance/_lance_spark/")
    )
    assert left and all("/txn/" in k and "/state-" in k for k in left), left


def test_table_api_with_its_own_storage_options(
    spark: SparkSession, bucket: str, endpoint: str, request: pytest.FixtureRequest
) -> None:
    """Every method of a LanceTable opened with storage options (none in the session): the
    statements (UPDATE, MERGE, DELETE) load the table with them, and the secret stays out of
    their plans, errors and logs."""
    from lance_spark import LanceTable

    storage = lance_storage_options(endpoint, secret_key=SECRET)
    uri = f"s3://{bucket}/sec.lance"
    with_storage(pets(spark, FIRST).write.format("lance").mode("append"), storage).save(uri)
    t = LanceTable.forPath(spark, uri, storage_options=storage)
    assert t.update(condition="id < 3", set={"species": "'u'"}).first()[0] == 2
    source = spark.createDataFrame([(3, "Nemo", "eel", 2), (9, "Neo", "owl", 1)], PETS_SCHEMA)
    merged = (
        t.alias("t")
        .merge(source.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert tuple(merged.first()) == (2, 1, 0, 1)
    assert t.delete("id = 1").first()[0] == 1
    expected = [(2, "Tom", "u", 5), (3, "Nemo", "eel", 2), (9, "Neo", "owl", 1)]
    assert as_tuples(t.toDF()) == expected
    ds = lance.dataset(uri, storage_options=storage)
    assert sorted(tuple(r.values()) for r in ds.to_table().to_pylist()) == expected
    t.addColumns({"age2": "age * 2"})
    t.updateColumns(spark.createDataFrame([(2, 50)], "id long, age2 int"), on="id")
    t.createIndex("id", "BTREE")
    assert [r["name"] for r in t.listIndices().collect()] == ["id_idx"]
    t.optimize().executeCompaction()
    assert t.vacuum(0, dryRun=True).first() is not None
    operations = [r["operation"] for r in t.history().orderBy("version").collect()]
    assert operations[:4] == ["WRITE", "UPDATE", "MERGE", "DELETE"], operations
    assert as_tuples(t.toDF().select("id", "age2")) == [(2, 50), (3, 4), (9, 2)]
    assert t.detail().first()["numRows"] == 3
    t.restoreToVersion(1)
    assert as_tuples(t.toDF()) == sorted(FIRST)
    # A failing statement's error and the plans name the table, never the secret.
    with pytest.raises(PySparkException) as caught:
        t.update(condition="id = 1", set={"age": "nope + 1"})
    assert "nope" in str(caught.value) and SECRET not in _full_text(caught.value)
    assert SECRET not in _captured_logs(request)
