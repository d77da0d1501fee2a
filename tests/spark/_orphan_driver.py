"""A Spark driver of its own for tests/spark/test_orphans.py (run as a subprocess).

    python _orphan_driver.py retries      <table> <work dir>   # local[2,4]: task retries
    python _orphan_driver.py kill-append  <table> <work dir>   # blocks mid-job: kill -9 it
    # a MERGE blocks at its commit (the test puts _commit_gate/ on PYTHONPATH and sets
    # LANCE_SPARK_TEST_COMMIT_GATE):
    python _orphan_driver.py kill-merge   <table> <work dir>
    # after a committed UPDATE, a change whose deletion file exists blocks at its commit
    # (the test puts _commit_gate/ on PYTHONPATH and sets LANCE_SPARK_TEST_COMMIT_GATE):
    python _orphan_driver.py kill-replace-where|kill-update|kill-merge-deletes <table> <work dir>

Each writes ``<work dir>/<step>.json`` when a step is done (or reached, for the kills).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import lance
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import lance_spark
from lance_spark import LanceTable
from lance_spark.source import row_level
from lance_spark.table import columns

ROWS = 200
PARTS = 4
# Spark buffers what it sends a Python worker (64 KiB): long values make the rows before a
# failing or blocking one reach the writer first.
PAD = "x" * 2000
_WAIT = 600.0  # a blocked task gives up after this long (the test kills it much earlier)
GATED = ("kill-replace-where", "kill-update", "kill-merge-deletes")


def main(scenario: str, table: str, work: Path) -> None:
    master = "local[2,4]" if scenario == "retries" else "local[2]"
    spark = (
        SparkSession.builder.master(master)
        .appName(f"lance_spark-orphans-{scenario}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(PARTS))
        # Small Arrow batches: a writer holds its first rows (and a file) early.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        .getOrCreate()
    )
    lance_spark.register(spark)
    base = spark.range(0, ROWS, 1, PARTS).selectExpr("id", "concat('v', id) AS val")
    base.write.format("lance").mode("append").save(table)
    _done(work, "created", version=lance.dataset(table).version)
    if scenario == "retries":
        _retries(spark, table, work)
    elif scenario == "kill-append":
        _blocked_append(spark, table, work)
    elif scenario == "kill-merge":
        _blocked_merge(spark, table, work)
    elif scenario in GATED:
        _gated_change(spark, table, work, scenario)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    spark.stop()


def _retries(spark: SparkSession, table: str, work: Path) -> None:
    attempts = work / "attempts"
    attempts.mkdir()

    @F.udf("string")
    def fails_at_the_end_once(i: int, last: int) -> str:
        # The first attempt of a partition fails at its last row: its writer has taken the
        # earlier rows (and may have finished files) by then.
        ctx = TaskContext.get()
        if i == last and ctx is not None and ctx.attemptNumber() == 0:
            (attempts / f"udf-{ctx.stageId()}-{ctx.partitionId()}").touch()
            raise RuntimeError("first attempt fails")
        return f"w{i}{PAD}"

    # An append: 4 partitions of 250 rows (Python UDFs take 100 rows at a time), each
    # failing once at its last row, after its writer took 200 rows and finished files.
    more = spark.range(ROWS, ROWS + 1000, 1, PARTS).select(
        "id", fails_at_the_end_once("id", _last_of(ROWS, 250)).alias("val")
    )
    more.write.format("lance").option("max_rows_per_file", "20").mode("append").save(table)
    _done(work, "append", failed=_count(attempts))

    # MERGE and addColumns: the source's first attempts fail (before any file is written)
    # and so does every first attempt of the tasks that write files, after writing them.
    _fail_first_attempts_after_writing()
    t = LanceTable.forPath(spark, table)
    # 50 of the appended rows are updated, 50 inserted.
    source = spark.range(ROWS + 950, ROWS + 1050, 1, PARTS).select(
        "id", fails_at_the_end_once("id", F.lit(ROWS + 1049)).alias("val")
    )
    (
        t.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"val": "s.val"})
        .whenNotMatchedInsert(values={"id": "s.id", "val": "s.val"})
        .execute()
    )
    _done(work, "merge", failed=_count(attempts))
    values = spark.range(0, ROWS + 1050, 1, PARTS).select(
        "id", fails_at_the_end_once("id", F.lit(ROWS + 1049)).alias("tag")
    )
    t.addColumns(values, on="id")
    _done(work, "addColumns", failed=_count(attempts))


def _last_of(offset: int, size: int) -> Any:
    """The last id of each partition (of ``size`` rows, from ``offset``)."""
    return F.lit(offset - 1) + (F.floor((F.col("id") - offset) / size) + 1) * size


def _fail_first_attempts_after_writing() -> None:
    """Fault injection: the first attempt of every file-writing task of a row-level change or
    addColumns fails after it wrote (and recorded) its files and returned its result."""

    def failing(make: Any) -> Any:
        def make_task(*args: Any) -> Any:
            task = make(*args)

            def run(batches: Any) -> Any:
                yield from task(batches)
                ctx = TaskContext.get()
                if ctx is not None and ctx.attemptNumber() == 0:
                    raise RuntimeError("first attempt fails after writing")

            return run

        return make_task

    row_level.change_task = failing(row_level.change_task)  # type: ignore[attr-defined]
    columns._add_task = failing(columns._add_task)  # type: ignore[attr-defined]


def _blocked_append(spark: SparkSession, table: str, work: Path) -> None:
    gate = work / "never"

    @F.udf("string")
    def blocks_late_in_last_partition(i: int) -> str:
        # In the last partition (ROWS+6000 .. ROWS+7999), after its writer took rows and
        # opened its file: past the first 1,000 rows, which the JVM companion reads before the
        # writer gets any (it sizes the task's batches from them).
        if i == ROWS + 7900:
            deadline = time.monotonic() + _WAIT
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        return f"w{i}{PAD}"

    more = spark.range(ROWS, ROWS + 8000, 1, PARTS).select(
        "id", blocks_late_in_last_partition("id").alias("val")
    )
    _done(work, "job-started")
    more.write.format("lance").mode("append").save(table)
    _done(work, "append-committed")  # only when the test failed to kill this process


def _blocked_merge(spark: SparkSession, table: str, work: Path) -> None:
    """A MERGE stopped at its Lance commit by _commit_gate/sitecustomize.py."""
    (work / "armed").touch()
    source = spark.range(ROWS - 50, ROWS + 50, 1, PARTS).selectExpr("id", "concat('m', id) AS val")
    (
        LanceTable.forPath(spark, table)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"val": "s.val"})
        .whenNotMatchedInsert(values={"id": "s.id", "val": "s.val"})
        .execute()
    )


def _gated_change(spark: SparkSession, table: str, work: Path, scenario: str) -> None:
    """A committed UPDATE (a deletion file the versions reference), then a change that
    deletes part of a fragment (its deletion file is written before the commit), stopped at
    its Lance commit by _commit_gate/sitecustomize.py."""
    t = LanceTable.forPath(spark, table)
    t.update("id < 10", {"val": "concat('u', id)"})
    _done(work, "ready", version=lance.dataset(table).version)
    (work / "armed").touch()
    if scenario == "kill-replace-where":  # 20 of the 50 rows of fragment 2
        rows = spark.range(100, 120, 1, 2).selectExpr("id", "concat('r', id) AS val")
        rows.write.format("lance").option("replaceWhere", "id >= 100 AND id < 120").mode(
            "overwrite"
        ).save(table)
    elif scenario == "kill-update":  # 10 rows of fragment 1
        t.update("id >= 60 AND id < 70", {"val": "concat('u', id)"})
    else:  # 30 rows of fragment 3 updated, 30 inserted
        source = spark.range(170, 230, 1, PARTS).selectExpr("id", "concat('m', id) AS val")
        (
            t.alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdate(set={"val": "s.val"})
            .whenNotMatchedInsert(values={"id": "s.id", "val": "s.val"})
            .execute()
        )
    _done(work, "change-committed")  # only when the test failed to kill this process


def _count(attempts: Path) -> int:
    return len(list(attempts.iterdir()))


def _done(work: Path, step: str, **facts: Any) -> None:
    (work / f"{step}.json.part").write_text(json.dumps(facts))
    (work / f"{step}.json.part").rename(work / f"{step}.json")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
    sys.exit(0)
