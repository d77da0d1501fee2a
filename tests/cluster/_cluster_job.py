"""Write and read a Lance table on a Spark standalone cluster; prints one ``RESULT {json}`` line.

Run as ``python _cluster_job.py <master-url> <table-uri>`` (a process of its own: pytest's
process may already hold a local SparkContext). test_standalone.py imports the frame and the
queries from here so that the local run does exactly the same thing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROWS = 20_000
PARTITIONS = 4
# `id % 7 = 3` cannot be pushed down, the other conjuncts can: Spark and Lance share the work.
QUERY_FILTER = "id % 7 = 3 AND label = 'b' AND id >= 1000 AND x < 3000.0"
RESULT_PREFIX = "RESULT "
# Faster JVM start-up on a busy machine; the jobs are far too small to need C2.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def make_frame(spark: SparkSession) -> DataFrame:
    labels = F.array(F.lit("a"), F.lit("b"), F.lit("c"))
    return spark.range(0, ROWS, 1, PARTITIONS).select(
        F.col("id"),
        F.element_at(labels, (F.col("id") % 3 + 1).cast("int")).alias("label"),
        (F.col("id") * 0.25 - 100.0).alias("x"),
    )


def expected_rows() -> list[list[Any]]:
    """The rows QUERY_FILTER selects, computed without Spark."""
    rows = []
    for i in range(ROWS):
        label, x = "abc"[i % 3], i * 0.25 - 100.0
        if i % 7 == 3 and label == "b" and i >= 1000 and x < 3000.0:
            rows.append([i, label, x])
    return rows


def write_table(spark: SparkSession, uri: str) -> None:
    """Append the frame to a new table at ``uri``."""
    make_frame(spark).write.format("lance").mode("append").save(uri)


def query_table(spark: SparkSession, uri: str) -> list[list[Any]]:
    """The rows QUERY_FILTER selects, sorted by id."""
    rows = spark.read.format("lance").load(uri).where(QUERY_FILTER).orderBy("id").collect()
    return [[r["id"], r["label"], r["x"]] for r in rows]


def _probe(batches: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    rows, sum_id, sum_x = 0, 0, 0.0
    for batch in batches:
        rows += len(batch)
        sum_id += int(batch["id"].sum())
        sum_x += float(batch["x"].sum())
    time.sleep(0.5)  # keep each task busy so that both single-core executors get some
    # Standalone executors run in <work-dir>/<app-id>/<executor-id>; Python workers inherit it.
    yield pd.DataFrame(
        {
            "pid": [os.getpid()],
            "ppid": [os.getppid()],
            "cwd": [os.getcwd()],
            "rows": [rows],
            "sum_id": [sum_id],
            "sum_x": [sum_x],
        }
    )


def scan_tasks(spark: SparkSession, uri: str) -> list[dict[str, Any]]:
    """Scan the whole table; per task: the process that ran it and what it read."""
    # A fresh DataFrame: Spark 4.3 keeps the reader planned by filter pushdown on the relation,
    # so a later unfiltered query of a DataFrame queried with pushed filters still applies them.
    if __name__ != "__main__":
        # Imported by the test: workers cannot import this module, so ship _probe by value.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    table = spark.read.format("lance").load(uri)
    schema = "pid long, ppid long, cwd string, rows long, sum_id long, sum_x double"
    return [r.asDict() for r in table.mapInPandas(_probe, schema).collect()]


def companion_queries(spark: SparkSession, uri: str) -> dict[str, Any]:
    """Queries the JVM companion plans itself: pruned columns, a pushed LIMIT, a pushed COUNT,
    a DataFrame reused after a filtered query (its executors read through the companion's
    reader factory, so the jar must have reached them)."""
    table = spark.read.format("lance").load(uri)
    pruned = table.where("label = 'b'").select("id")
    return {
        "plan": table.where(QUERY_FILTER)._jdf.queryExecution().executedPlan().toString(),
        "pruned_sum": sum(r.id for r in pruned.collect()),
        "limited": len(table.limit(5).collect()),
        "count": table.count(),
        "filtered_count": table.where("label = 'b'").count(),
        "reused_count": table.count(),
    }


def stream_copy(spark: SparkSession, uri: str) -> dict[str, Any]:
    """The table streamed (its snapshot, availableNow) into a Lance sink next to it, twice with
    one checkpoint: the second run finds nothing new and commits nothing."""
    target = uri.rstrip("/") + ".copy.lance"
    checkpoint = uri.rstrip("/") + ".checkpoint"
    for _ in range(2):
        query = (
            spark.readStream.format("lance")
            .load(uri)
            .writeStream.format("lance")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(target)
        )
        query.awaitTermination()
    copied = spark.read.format("lance").load(target)
    return {
        "uri": target,
        "rows": copied.count(),
        "sum_id": copied.agg({"id": "sum"}).collect()[0][0],
        "query_id": str(query.id),
    }


VECTOR_ROWS = 600
VECTOR_DIM = 4


def vector_value(i: int, j: int) -> float:
    """Component ``j`` of row ``i``'s vector (deterministic, computed alike in Python and SQL)."""
    return float((i * (j + 3) * 7919) % 1009) / 1009.0


def nearest_join(spark: SparkSession, uri: str) -> list[list[int]]:
    """A vector table next to ``uri``, and the 3 nearest rows of 40 query rows (every 15th
    row, moved by 0.001) found by ``LanceTable.nearest`` in executor tasks: [qid, id, rank]."""
    from lance_spark import LanceTable

    target = uri.rstrip("/") + ".vectors.lance"
    values = ", ".join(
        f"cast(pmod(id * {j + 3} * 7919, 1009) / 1009.0 AS float)" for j in range(VECTOR_DIM)
    )
    spark.range(0, VECTOR_ROWS, 1, PARTITIONS).selectExpr(
        "id", f"array({values}) AS vec"
    ).write.format("lance").option("vec.arrow.fixed-size-list.size", str(VECTOR_DIM)).mode(
        "append"
    ).save(target)
    queries = (
        spark.read.format("lance")
        .load(target)
        .where("id % 15 = 0")
        .selectExpr("id AS qid", "transform(vec, v -> v + 0.001) AS q")
        .repartition(2)
    )
    found = LanceTable.forPath(spark, target).nearest(
        queries, k=3, query_column="q", columns=["id"]
    )
    return sorted([r["qid"], r["id"], r["_rank"]] for r in found.collect())


def _wait_for_executors(spark: SparkSession, expected: int, timeout: float = 120.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        # The map includes the driver's block manager.
        registered = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
        if registered >= expected or time.monotonic() > deadline:
            return registered
        time.sleep(0.2)


def main(master_url: str, uri: str) -> None:
    import lance_spark

    started = time.monotonic()
    # The companion from configuration (spark.jars ships its jar to the executors).
    spark = (
        lance_spark.configure(SparkSession.builder.master(master_url))
        .appName("lance_spark-standalone-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "1g")
        .config("spark.cores.max", "2")
        # Start running only once both executors are there.
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    timings = {"session": time.monotonic() - started}
    try:
        lance_spark.register(spark)
        mark = time.monotonic()
        executors = _wait_for_executors(spark, 2)
        timings["executors"] = time.monotonic() - mark
        mark = time.monotonic()
        write_table(spark, uri)
        timings["write"] = time.monotonic() - mark
        mark = time.monotonic()
        rows = query_table(spark, uri)
        timings["query"] = time.monotonic() - mark
        mark = time.monotonic()
        tasks = scan_tasks(spark, uri)
        timings["scan"] = time.monotonic() - mark
        companion = companion_queries(spark, uri)
        mark = time.monotonic()
        stream = stream_copy(spark, uri)
        timings["stream"] = time.monotonic() - mark
        mark = time.monotonic()
        nearest = nearest_join(spark, uri)
        timings["nearest"] = time.monotonic() - mark
    finally:
        spark.stop()
    result = {
        "rows": rows,
        "tasks": tasks,
        "companion": companion,
        "stream": stream,
        "nearest": nearest,
        "executors": executors,
        "driver_pid": os.getpid(),
        "driver_cwd": os.getcwd(),
        "timings": {k: round(v, 1) for k, v in timings.items()},
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
