"""Peak memory of the Spark Python workers in the connector's write tasks (issue 17).

``python -m benchmarks.memory --rows 100000 [--scales 1,10] [--work-dir DIR]`` runs, for each
scale (1x and 10x ``--rows`` by default), three jobs whose input sits in ONE Spark partition, so
that one task holds all of it (the worst case for a task's memory):

- ``append``: a DataFrame of ``rows`` rows appended to a Lance table with ``format("lance")``;
- ``merge``: a MERGE (update all, insert all) of a source of ``rows`` rows into that table,
  half of them matching existing rows, half new (``spark.sql.shuffle.partitions`` is 1 while it
  runs, so the change rows of the whole table meet in one task);
- ``addColumns``: one expression column added to every row of the table after the MERGE.

The rows are (id long, x double, label string, vector of 128 floats): about 540 bytes each.

While a job runs, ``make bench``'s sampler (:class:`benchmarks.run.WorkerMemory`) reads every
``interval`` seconds (20 ms) the resident set size of the Spark Python worker processes below
the driver's JVM that ran during the job (command line naming ``pyspark.daemon``,
``pyspark.worker`` or the connector's ``lance_spark_daemon``, the daemons themselves excluded:
they only fork workers). Each result reports the highest RSS of any single
worker process (``peak_mib``): a task runs in one worker, so this is what a task's budget
bounds; summing would add unrelated workers (the reads of the MERGE's target, planning calls)
that hold their own, separate budgets. ``peak_total_mib`` (the highest sum over the workers of
one sample) is reported beside it. ``baseline_mib`` is the same peak for the same job on
``--baseline-rows`` rows (1,000): a worker with the interpreter, pyarrow, Lance and the
connector loaded and the job's code paths warmed up; ``growth_mib`` = peak - baseline is what the
data added. The issue's target: ``peak`` (and ``growth``) at 10x within 1.5x of 1x.

The CLI starts its own ``local[2]`` session with ``spark.python.worker.reuse=false``, so every
task gets a fresh worker and no job sees memory an earlier one left in a reused worker (a
reused worker keeps what its allocators cached). :func:`measure` on a session of the caller
measures whatever that session does; each result says whether workers were reused.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

import lance_spark
from benchmarks.run import MIB, REPO, WorkerMemory, jvm_pid, work_root
from lance_spark import LanceTable

VECTOR_SIZE = 128
VECTOR_OPTION = "vector.arrow.fixed-size-list.size"
DEFAULT_ROWS = 100_000
DEFAULT_SCALES = (1, 10)
BASELINE_ROWS = 1_000
INTERVAL = 0.02
TARGET_RATIO = 1.5
OPERATIONS = ("append", "merge", "addColumns")


# --- the jobs -------------------------------------------------------------------------------


def frame(spark: SparkSession, start: int, count: int) -> DataFrame:
    """``count`` rows of ids ``start`` on, in ONE partition: (id long, x double, label string,
    vector array<float> of 128). Computed by the JVM alone (no Python worker)."""
    value = "cast(((id * 131 + i * 7) % 1009) / 1009.0 as float)"
    vector = f"transform(sequence(0, {VECTOR_SIZE - 1}), i -> {value})"
    return spark.range(start, start + count, numPartitions=1).selectExpr(
        "id",
        "(id % 10007) / 10007.0D as x",
        "concat('label_', cast(id % 50 as string)) as label",
        f"{vector} as vector",
    )


@contextmanager
def _conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _jobs(spark: SparkSession, uri: str, rows: int) -> list[tuple[str, Callable[[], object]]]:
    """The three jobs on a table at ``uri`` (created here with one row), in order."""
    frame(spark, 0, 1).write.format("lance").option(VECTOR_OPTION, str(VECTOR_SIZE)).save(uri)

    def append() -> object:
        frame(spark, 1, rows).write.format("lance").mode("append").save(uri)
        return None

    def merge() -> object:
        source = frame(spark, 1 + rows // 2, rows)  # half match, half are new ids
        with _conf(spark, "spark.sql.shuffle.partitions", "1"):
            return (
                LanceTable.forPath(spark, uri)
                .alias("t")
                .merge(source.alias("s"), "s.id = t.id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
                .collect()
            )

    def add_columns() -> object:
        with _conf(spark, "spark.sql.shuffle.partitions", "1"):
            return LanceTable.forPath(spark, uri).addColumns({"y": "x * 2 + id"})

    return [("append", append), ("merge", merge), ("addColumns", add_columns)]


def _run(spark: SparkSession, uri: str, rows: int, interval: float) -> dict[str, dict[str, Any]]:
    pid = jvm_pid(spark)
    out: dict[str, dict[str, Any]] = {}
    for name, job in _jobs(spark, uri, rows):
        peaks = WorkerMemory(pid, interval)  # make bench's sampler, one per job
        started = time.perf_counter()
        with peaks.track():
            job()
        out[name] = {
            "seconds": time.perf_counter() - started,
            "peak_mib": peaks.peak_worker_bytes / MIB,
            "peak_total_mib": peaks.peak_total_bytes / MIB,
            "workers": peaks.active_workers,
        }
    expected = 1 + rows + (rows - rows // 2)
    counted = LanceTable.forPath(spark, uri).countRows()
    if counted != expected:
        raise AssertionError(f"{uri}: {counted} rows after the jobs, expected {expected}")
    return out


def measure(
    spark: SparkSession,
    workdir: str | Path,
    *,
    rows: int,
    scales: Sequence[int] = DEFAULT_SCALES,
    baseline_rows: int = BASELINE_ROWS,
    interval: float = INTERVAL,
) -> list[dict[str, Any]]:
    """Peak Python worker RSS of an append, a MERGE and an addColumns of ``rows * scale`` rows
    in one partition, for each of ``scales``; tables go in a fresh folder under ``workdir``
    (removed afterwards). One dict per (operation, scale): ``operation``, ``scale``, ``rows``,
    ``seconds``, ``peak_mib`` (the highest RSS of one worker process), ``peak_total_mib`` (of
    all workers at once), ``baseline_mib`` (``peak_mib`` of the same job on ``baseline_rows``
    rows), ``growth_mib`` (peak - baseline), ``workers`` (worker processes seen),
    ``worker_reuse``, and, beyond the first scale, ``peak_ratio`` and ``growth_ratio`` against
    the first scale."""
    lance_spark.register(spark)
    root = work_root(workdir, "memory")
    reuse = str(spark.conf.get("spark.python.worker.reuse", "true")).lower() == "true"
    try:
        baseline = _run(spark, str(root / "baseline.lance"), baseline_rows, interval)
        results: list[dict[str, Any]] = []
        first: dict[str, dict[str, Any]] = {}
        for scale in scales:
            count = rows * scale
            runs = _run(spark, str(root / f"x{scale}.lance"), count, interval)
            for name in OPERATIONS:
                run = runs[name]
                base = baseline[name]["peak_mib"]
                row = {
                    "operation": name,
                    "scale": scale,
                    "rows": count,
                    **run,
                    "baseline_mib": base,
                    "growth_mib": max(0.0, run["peak_mib"] - base),
                    "worker_reuse": reuse,
                }
                if name in first:
                    row["peak_ratio"] = run["peak_mib"] / max(first[name]["peak_mib"], 1e-9)
                    row["growth_ratio"] = row["growth_mib"] / max(first[name]["growth_mib"], 1.0)
                else:
                    first[name] = row
                results.append(row)
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- report ---------------------------------------------------------------------------------


def render(results: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| operation | scale | rows | seconds | peak worker RSS MiB | growth MiB | "
        "all workers MiB | vs 1st scale (peak / growth) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = "-"
        if "peak_ratio" in r:
            verdict = "ok" if r["peak_ratio"] <= TARGET_RATIO else f"over {TARGET_RATIO}x"
            ratio = f"{r['peak_ratio']:.2f}x / {r['growth_ratio']:.2f}x ({verdict})"
        lines.append(
            f"| {r['operation']} | {r['scale']}x | {r['rows']:,} | {r['seconds']:.1f} | "
            f"{r['peak_mib']:.0f} | {r['growth_mib']:.0f} | {r['peak_total_mib']:.0f} | {ratio} |"
        )
    if results:
        lines.append("")
        lines.append(
            f"baseline (same jobs on {BASELINE_ROWS:,} rows): "
            + ", ".join(
                f"{r['operation']} {r['baseline_mib']:.0f} MiB"
                for r in results
                if r["scale"] == results[0]["scale"]
            )
            + f"; worker reuse: {str(results[0]['worker_reuse']).lower()}"
        )
    return "\n".join(lines)


def start_spark() -> SparkSession:
    """A ``local[2]`` session with the repository's conf and a fresh worker per task."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lance_spark-memory")
        .config("spark.python.worker.reuse", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory",
        description="Peak Python worker RSS of write, MERGE and addColumns tasks by input size.",
    )
    parser.add_argument(
        "--rows", type=int, default=DEFAULT_ROWS, help=f"rows at 1x (default {DEFAULT_ROWS})"
    )
    parser.add_argument(
        "--scales",
        default=",".join(str(s) for s in DEFAULT_SCALES),
        help="comma-separated multiples of --rows (default 1,10)",
    )
    parser.add_argument("--work-dir", default=None, help="where the tables go (default: tmp)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.rows < 2:
        parser.error("--rows must be at least 2")
    try:
        args.scales = [int(s) for s in args.scales.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--scales must be whole numbers, got {args.scales!r}")
    if not args.scales or min(args.scales) < 1:
        parser.error("--scales needs at least one multiple >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.memory", *(sys.argv[1:] if argv is None else argv)]
    )
    spark = start_spark()
    try:
        results = measure(
            spark, args.work_dir or tempfile.gettempdir(), rows=args.rows, scales=args.scales
        )
    finally:
        spark.stop()
    print(f"`{command}`\n")
    print(render(results))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
