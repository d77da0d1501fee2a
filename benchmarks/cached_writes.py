"""Writes of a cached DataFrame, Lance vs Parquet, in one kind of session.

``python -m benchmarks.cached_writes --session recommended|plain --rows N --ml-rows M
--runs R --json OUT [--work-dir DIR]``. ``make bench`` (``benchmarks.run``) runs it once per
kind of session, each in a process of its own (a session's settings are fixed when its JVM
starts), and puts the results in BENCHMARKS.md.

The data is ready before the clock starts (cached and counted), so the time is the writer's
own, not the generation's: ``append`` into a copy of a table of the same shape (restored after
every run, untimed) and ``overwrite`` of a table (its old files vacuumed after every run,
untimed). Two shapes: narrow (id, x, label) and ML-shaped (id, x, label, a 128-float
embedding). Two sessions, both ``local[2]`` with a 4 GiB driver and nothing else of the
repository's conf: ``recommended`` is built with ``lance_spark.configure(builder)``,
``plain`` is not (what a user's own session has).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

import lance_spark
from benchmarks import run as bench
from lance_spark import LanceTable

RECOMMENDED = "recommended"
PLAIN = "plain"
SESSIONS = (RECOMMENDED, PLAIN)
DRIVER_MEMORY = "4g"


def start_session(kind: str) -> SparkSession:
    """A ``local[2]`` session of ``kind``; the caller's process has no SPARK_CONF_DIR."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"lance_spark-cached-writes-{kind}")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if kind == RECOMMENDED:
        builder = lance_spark.configure(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    lance_spark.register(spark)
    return spark


def narrow_frame(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "id",
        f"{bench._unit(7)} as x",
        f"concat('label_', cast(pmod(xxhash64(id, 8), {bench.LABEL_COUNT}) as string)) as label",
    )


def ml_frame(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "id",
        f"{bench._unit(90)} as x",
        f"concat('label_', cast(pmod(xxhash64(id, 91), {bench.ML_LABELS}) as string)) as label",
        # A lambda, not make bench's 128-expression embedding: its generated code is over
        # Janino's 64 KB, which logs a compile error before Spark falls back (untimed here).
        f"transform(sequence(0, {bench.ML_EMBEDDING_SIZE - 1}), "
        "i -> cast(pmod(xxhash64(id, i), 1000003) / 1000003.0D as float)) as embedding",
    )


def cached(frame: DataFrame, rows: int) -> DataFrame:
    """``frame`` cached and counted (checked to hold ``rows``)."""
    frame = frame.cache()
    bench.expect("cached rows", frame.count(), rows)
    return frame


def _write_lance(frame: DataFrame, uri: str, mode: str, options: dict[str, str]) -> None:
    frame.write.format("lance").options(**options).mode(mode).save(uri)


def _vacuum(spark: SparkSession, uri: str) -> None:
    LanceTable.forPath(spark, uri).vacuum(0)


def measure_shape(
    spark: SparkSession,
    frame: DataFrame,
    *,
    shape: str,
    session: str,
    rows: int,
    runs: int,
    root: Path,
    lance_options: dict[str, str],
) -> tuple[list[bench.CaseResult], list[bench.MemoryResult]]:
    """The append and the overwrite case of one cached ``frame``."""
    pid = bench.jvm_pid(spark)
    cases: list[bench.CaseResult] = []
    memory: list[bench.MemoryResult] = []

    # append: into a table that already has the same rows
    lance_uri, parquet_path = str(root / f"{shape}-append.lance"), str(root / f"{shape}.parquet")
    _write_lance(frame, lance_uri, "overwrite", lance_options)
    frame.write.mode("overwrite").parquet(parquet_path)
    lance_memory = bench.WorkerMemory(pid)

    def lance_append(_trial: int) -> None:
        with lance_memory.track():
            _write_lance(frame, lance_uri, "append", lance_options)

    def check_lance() -> None:
        bench.expect(
            "rows after append", LanceTable.forPath(spark, lance_uri).countRows(), 2 * rows
        )

    def check_parquet() -> None:
        bench.expect("rows after append", spark.read.parquet(parquet_path).count(), 2 * rows)

    name = bench.cached_case(bench.CACHED_APPEND, shape, session)
    cases.append(
        bench.measure(
            name,
            bench.Side(
                lance_append, check=check_lance, reset=bench.LanceRestorer(spark, lance_uri)
            ),
            bench.Side(
                lambda _t: frame.write.mode("append").parquet(parquet_path),
                check=check_parquet,
                reset=bench.ParquetRestorer(parquet_path),
            ),
            runs,
        )
    )
    memory.append(lance_memory.result(f"Lance {name}"))

    # overwrite: the warm-up creates the tables
    lance_uri, parquet_path = str(root / f"{shape}-ow.lance"), str(root / f"{shape}-ow.parquet")
    lance_memory = bench.WorkerMemory(pid)

    def lance_overwrite(_trial: int) -> None:
        with lance_memory.track():
            _write_lance(frame, lance_uri, "overwrite", lance_options)

    name = bench.cached_case(bench.CACHED_OVERWRITE, shape, session)
    cases.append(
        bench.measure(
            name,
            bench.Side(lance_overwrite, reset=lambda: _vacuum(spark, lance_uri)),
            bench.Side(lambda _t: frame.write.mode("overwrite").parquet(parquet_path)),
            runs,
        )
    )
    memory.append(lance_memory.result(f"Lance {name}"))
    bench.expect("rows after overwrite", LanceTable.forPath(spark, lance_uri).countRows(), rows)
    return cases, memory


def measure(
    spark: SparkSession, *, session: str, rows: int, ml_rows: int, runs: int, root: Path
) -> dict[str, object]:
    partitions = max(1, int(spark.sparkContext.defaultParallelism))
    cases: list[bench.CaseResult] = []
    memory: list[bench.MemoryResult] = []
    shapes: tuple[tuple[str, DataFrame, int, dict[str, str]], ...] = (
        (bench.NARROW, narrow_frame(spark, rows, partitions), rows, {}),
        (
            bench.ML_SHAPED,
            ml_frame(spark, ml_rows, partitions),
            ml_rows,
            {bench.ML_OPTION: str(bench.ML_EMBEDDING_SIZE)},
        ),
    )
    for shape, frame, count, options in shapes:
        ready = cached(frame, count)
        shape_cases, shape_memory = measure_shape(
            spark,
            ready,
            shape=shape,
            session=session,
            rows=count,
            runs=runs,
            root=root,
            lance_options=options,
        )
        cases += shape_cases
        memory += shape_memory
        ready.unpersist(blocking=True)
    return {
        "cases": [asdict(c) for c in cases],
        "memory": [asdict(m) for m in memory],
        "settings": [list(kv) for kv in bench.session_settings(spark)],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cached_writes",
        description="Writes of a cached DataFrame, Lance vs Parquet, in one kind of session.",
    )
    parser.add_argument("--session", choices=SESSIONS, required=True)
    parser.add_argument("--rows", type=int, required=True, help="rows of the narrow frame")
    parser.add_argument("--ml-rows", type=int, required=True, help="rows of the ML frame")
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work-dir", default=None, help="where the tables go (default: tmp)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    root = bench.work_root(args.work_dir, f"cached_{args.session}")
    spark = start_session(args.session)
    try:
        results = measure(
            spark,
            session=args.session,
            rows=args.rows,
            ml_rows=args.ml_rows,
            runs=args.runs,
            root=root,
        )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
