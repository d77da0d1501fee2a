"""Driver run by ``test_s3.py::test_credentials_stay_out_of_event_log_logs_errors_and_files``.

Usage: ``python _secrets_driver.py ARGS.json``. The JSON holds the moto endpoint, the bucket,
the event log and output directories, and three pairs of distinctive credentials (moto takes
any): the session's (``register(spark, storage_options=...)``), one table's
(``LanceTable.forPath(..., storage_options)``) and one read's and write's (``storage.*``
options). The credentials come in a file, not argv or the environment, so that only
lance_spark's handling could put them where the test looks. Every statement of the connector
runs once on a catalog table on S3: CREATE TABLE, INSERT, SELECT, MERGE, UPDATE, DELETE,
DESCRIBE HISTORY, EXPLAIN, addColumns, diff, history, errors; then the same session again
with no credentials given, through the environment's AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.

Writes ``results.json`` (what the statements returned) and ``errors.txt`` (the forced errors'
messages and tracebacks) into the output directory.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import lance_spark
from lance_spark import LanceTable


def main() -> None:
    args = json.loads(Path(sys.argv[1]).read_text())
    out = Path(args["out_dir"])
    session_creds, table_creds, option_creds = args["credentials"]
    bucket = args["bucket"]
    uri = f"s3://{bucket}/pets.lance"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lance_spark-secrets")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", args["event_dir"])
        .config("spark.eventLog.compress", "false")
        .config("spark.sql.warehouse.dir", args["warehouse"])
        .getOrCreate()
    )
    # Non-secret keys through the conf (they show up in the event log, as the test checks).
    spark.conf.set("spark.lance.storage.aws_region", args["region"])
    spark.conf.set("spark.lance.storage.aws_endpoint", args["endpoint"])
    spark.conf.set("spark.lance.storage.allow_http", "true")
    lance_spark.register(spark, storage_options=session_creds)

    results: dict[str, Any] = {}
    errors: list[str] = []

    def expect_error(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001 - any error is recorded for the test to read
            text = "".join(traceback.format_exception(err))
            errors.append(f"--- {name}\n{err}\n{err!r}\n{text}")
            return
        raise SystemExit(f"{name}: expected an error, got none")

    def rows(df: Any) -> list[list[Any]]:
        return [[str(v) for v in r] for r in df.collect()]

    # Catalog table on S3: SQL, with the session's credentials.
    spark.sql(f"CREATE TABLE pets (id BIGINT, name STRING, age INT) USING lance LOCATION '{uri}'")
    spark.sql("INSERT INTO pets VALUES (1, 'Rex', 3), (2, 'Tom', 5), (3, 'Nemo', 1)")
    results["select"] = rows(spark.sql("SELECT id FROM pets WHERE age > 2 ORDER BY id"))
    spark.sql(
        "MERGE INTO pets t USING (SELECT * FROM VALUES (3, 'Nemo', 2), (4, 'Felix', 2) "
        "AS s(id, name, age)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql("UPDATE pets SET age = age + 1 WHERE name = 'Rex'")
    spark.sql("DELETE FROM pets WHERE id = 2")
    results["describe_history"] = rows(spark.sql("DESCRIBE HISTORY pets"))
    results["explain"] = rows(spark.sql("EXPLAIN FORMATTED SELECT * FROM pets WHERE age > 1"))
    spark.table("pets").where("age > 1").explain("formatted")  # to the driver's stdout

    # Table API on the catalog table: session credentials.
    table = LanceTable.forName(spark, "pets")
    table.addColumns({"age2": "age * 2"})
    results["diff"] = rows(table.diff(1).orderBy("_commit_version", "id", "_change_type"))

    # Table API with its own credentials: internal reads carry them on a private data source.
    other = LanceTable.forPath(spark, uri, table_creds)
    other.update(condition="id = 4", set={"age": "10"})
    source = spark.createDataFrame(
        [(5, "Bella", 7, 14), (1, "Rex", 4, 8)], "id long, name string, age int, age2 int"
    )
    (
        other.alias("t")
        .merge(source.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    other.delete("id = 3")
    other.toDF().where("age > 1").explain(True)  # to the driver's stdout
    other.toDF().createOrReplaceTempView("pets_other")  # EXPLAIN shows a source's options
    results["explain_other"] = rows(spark.sql("EXPLAIN FORMATTED SELECT * FROM pets_other"))
    results["history"] = rows(other.history())

    # Per-operation storage options: Spark shows a source's options in plans; register makes
    # it redact the storage ones.
    reader = spark.read.format("lance")
    writer = spark.range(3).write.format("lance").mode("append")
    for key, value in option_creds.items():
        reader = reader.option(f"storage.{key}", value)
        writer = writer.option(f"storage.{key}", value)
    results["option_count"] = reader.load(uri).where("age > 0").count()
    # EXPLAIN of a view shows the relation with its options (also in the event log).
    reader.load(uri).createOrReplaceTempView("pets_with_options")
    results["explain_options"] = rows(
        spark.sql("EXPLAIN FORMATTED SELECT * FROM pets_with_options")
    )
    writer.save(f"s3://{bucket}/numbers.lance")

    # Errors: a bad option, a bad column in SQL and in the table API, a failing write task.
    expect_error("bad option", lambda: spark.read.format("lance").option("verison", "3").load(uri))
    expect_error("bad column", lambda: spark.sql("UPDATE pets SET nope = 1").collect())
    expect_error("bad set", lambda: other.update(condition="id = 1", set={"nope": "1"}))
    expect_error("missing table", lambda: LanceTable.forPath(spark, f"s3://{bucket}/none.lance"))

    @F.udf(StringType())
    def boom(i):  # type: ignore[no-untyped-def]
        raise ValueError(f"boom-{i}")

    failing = spark.range(2).select(F.col("id"), boom("id").alias("name"), F.lit(1).alias("age"))
    expect_error("failing task", lambda: failing.write.format("lance").mode("append").save(uri))

    # No credentials given: Lance's own chain (here the environment) must still work.
    lance_spark.register(spark)
    spark.sql("INSERT INTO pets (id, name, age) VALUES (6, 'Kitty', 1)")
    LanceTable.forName(spark, "pets").update(condition="id = 6", set={"age": "2"})
    results["final"] = rows(LanceTable.forName(spark, "pets").toDF().orderBy("id"))

    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "errors.txt").write_text("\n".join(errors))
    spark.stop()


if __name__ == "__main__":
    main()
