"""Where a write's time goes: the connector's write of a cached DataFrame against its floor.

``python -m benchmarks.write_profile --rows 3000000 --runs 5`` builds a session with
``lance_spark.configure`` (the recommended settings), caches ``rows`` rows of (id bigint,
x double, label string) in 2 partitions, and prints, as Markdown:

- the median wall-clock time (alternating runs) of: the ``noop`` sink (reading the cache),
  a Python ``DataSourceArrowWriter`` that discards its batches (the floor of any Python
  writer), Spark's Parquet writer and the connector's Lance write, each of the two Python
  writers with Spark's per-row batch size check (``maxBytesPerBatch`` = 64 MiB, Spark's
  default) and without it;
- where the JVM's time goes in each of those writes: Java Flight Recorder execution samples
  (``jdk.jfr.Recording`` started and stopped through py4j around the runs of one write,
  read back with the JDK's ``jfr`` tool), grouped by the frames below;
- the Python side of a Lance write task, timed in this process on the same rows: the
  connector's per-batch conversion and ``write_fragments``.

The numbers of "Where the write time goes" (benchmarks/WHERE_THE_TIME_GOES.md) come from it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import lance
import pyarrow as pa
from lance.fragment import write_fragments
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

import lance_spark
from benchmarks import cached_writes
from lance_spark import _settings
from lance_spark.source import types as _types

SPARK_DEFAULT_BYTES = "64m"  # Spark 4.3's default of spark.sql.execution.arrow.maxBytesPerBatch
# Frame groups for the JFR samples: the first group whose marker is on a sample's stack wins.
GROUPS = (
    ("per-row batch size check (ArrowWriter.sizeInBytes)", "ArrowWriter.sizeInBytes"),
    ("rows to Arrow vectors (ArrowWriter.write)", "ArrowWriter.write"),
    ("reading the cached rows", "org.apache.spark.sql.execution.columnar"),
    ("Parquet encoding", "org.apache.parquet"),
    ("Arrow IPC and the socket to Python", "writeNextBatchToArrowStream"),
)
OTHER = "other (task setup, commit, Spark's scheduler)"


class _Discard(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        return None


class _DiscardSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lance_spark_discard"

    def writer(self, schema: StructType, overwrite: bool) -> _Discard:
        return _Discard()


class _Jfr:
    """A JFR recording of the driver JVM (local mode: the executors' too), via py4j."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = cast(Any, spark.sparkContext)._jvm
        self._recording: Any = None
        self._started = 0.0

    def start(self) -> None:
        self._started = time.time()
        jvm = self._jvm
        self._recording = jvm.jdk.jfr.Recording()
        event = self._recording.enable("jdk.ExecutionSample")
        event.withPeriod(jvm.java.time.Duration.ofMillis(10))
        self._recording.start()

    def stop(self, path: Path) -> dict[str, int]:
        recording = self._recording
        recording.stop()
        recording.dump(self._jvm.java.io.File(str(path)).toPath())
        recording.close()
        return _groups(path, since=self._started)


def _event_time(header: str, since: float) -> float | None:
    """The epoch seconds of an event's ``startTime = HH:MM:SS.fff`` line: local time of the
    JVM (this process's zone), on the day of ``since``, the recording's start."""
    found = re.search(r"startTime = (\d\d):(\d\d):(\d\d)(\.\d+)?", header)
    if found is None:
        return None
    hours, minutes, seconds, fraction = found.groups()
    day = time.localtime(since)
    midnight = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
    when = midnight + int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    when += float(fraction or 0)
    return when + 86_400 if when < since - 43_200 else when  # past midnight


def _groups(path: Path, *, since: float) -> dict[str, int]:
    """Samples per group, of the events at or after ``since``: a dump holds whole JFR chunks,
    which can start before the recording did (the previous write's samples)."""
    jfr = shutil.which("jfr") or str(Path(os.environ.get("JAVA_HOME", "/usr")) / "bin" / "jfr")
    text = subprocess.run(
        [jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: Counter[str] = Counter()
    for sample in text.split("jdk.ExecutionSample")[1:]:
        when = _event_time(sample[:200], since)
        if when is not None and when < since - 0.001:
            continue
        frames = re.findall(r"^\s+([\w$.<>/]+)\(", sample, re.M)
        # Only the samples of task threads doing a write (not the driver's py4j or idle ones).
        if not any("DataWritingSparkTask" in f or "FileFormatWriter" in f for f in frames):
            continue
        stack = "\n".join(frames)
        group = next((name for name, marker in GROUPS if marker in stack), OTHER)
        counts[group] += 1
    return dict(counts)


def _alternating(actions: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in actions}
    for name in actions:  # warm-up
        actions[name]()
    for run in range(runs):
        order = list(actions) if run % 2 == 0 else list(reversed(actions))
        for name in order:
            start = time.perf_counter()
            actions[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _python_side(rows: int, root: Path) -> dict[str, float]:
    """One write task's Python work on rows/2 rows, in this process: conversion per batch
    (10,000-row batches, as Spark sends them) and write_fragments."""
    n = rows // 2
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array([i * 0.5 for i in range(n)], pa.float64()),
            "label": pa.array([f"label_{i % 50}" for i in range(n)], pa.string()),
        }
    )
    batches = table.to_batches(max_chunksize=10_000)
    target = pa.schema([f.with_nullable(True) for f in table.schema])
    start = time.perf_counter()
    for batch in batches:
        _types.conform_write_batch(batch, target)
    conform = time.perf_counter() - start
    uri = str(root / "python-side.lance")
    start = time.perf_counter()
    write_fragments(pa.RecordBatchReader.from_batches(target, iter(batches)), uri, schema=target)
    written = time.perf_counter() - start
    # The ML shape's vectors: Spark sends array<float> as list<float>; the table's column is a
    # fixed_size_list(128): the conversion checks each row's length and casts, per batch.
    vectors = pa.array([[float(i % 7)] * 128 for i in range(10_000)], pa.list_(pa.float32()))
    ml_batch = pa.record_batch([vectors], names=["embedding"])
    ml_target = pa.schema([pa.field("embedding", pa.list_(pa.float32(), 128))])
    start = time.perf_counter()
    for _ in range(len(batches)):
        _types.conform_write_batch(ml_batch, ml_target)
    ml_conform = time.perf_counter() - start
    return {
        "conform": conform,
        "write_fragments": written,
        "batches": float(len(batches)),
        "ml_conform": ml_conform,
    }


def profile(spark: SparkSession, rows: int, runs: int, root: Path) -> str:
    lance_spark.register(spark)
    spark.dataSource.register(_DiscardSource)
    # The narrow rows of make bench's cached DataFrame writes, in 2 partitions.
    frame = cached_writes.cached(cached_writes.narrow_frame(spark, rows, 2), rows)
    key = _settings.MAX_BYTES_PER_BATCH_CONF
    jfr = _Jfr(spark)

    def with_bytes(limit: str | None, action: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if limit is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, limit)
            action()

        return run

    def lance_write() -> None:
        frame.write.format("lance").mode("overwrite").save(str(root / "t.lance"))

    def discard() -> None:
        frame.write.format("lance_spark_discard").mode("append").save()

    tiny = spark.range(10).selectExpr("id", "id * 0.5 as x", "cast(id as string) as label")

    actions: dict[str, Callable[[], object]] = {
        "a 10-row write to Lance (the fixed cost: planning, staging marker, commit)": lambda: (
            tiny.write.format("lance").mode("overwrite").save(str(root / "tiny.lance"))
        ),
        "a 10-row write to Parquet": lambda: tiny.write.mode("overwrite").parquet(
            str(root / "tiny.parquet")
        ),
        "noop sink (reading the cache)": lambda: (
            frame.write.format("noop").mode("overwrite").save()
        ),
        "Python writer discarding its batches, Spark's per-row check (64 MiB)": with_bytes(
            SPARK_DEFAULT_BYTES, discard
        ),
        "Python writer discarding its batches, no per-row check": with_bytes(
            _settings.NO_BYTE_LIMIT, discard
        ),
        "Spark's Parquet writer": lambda: frame.write.mode("overwrite").parquet(
            str(root / "t.parquet")
        ),
        "connector's Lance write, Spark's per-row check (64 MiB set in the session)": with_bytes(
            SPARK_DEFAULT_BYTES, lance_write
        ),
        "connector's Lance write (the companion lifts the check per task)": with_bytes(
            None, lance_write
        ),
    }
    medians = _alternating(actions, runs)
    files = {
        "Lance": _lance_files(root / "t.lance"),
        "Parquet": _files(root / "t.parquet", ".parquet"),
    }
    samples: dict[str, dict[str, int]] = {}
    for name, action in actions.items():
        if name.startswith("a 10-row"):
            continue
        jfr.start()
        for _ in range(runs):
            action()
        samples[name] = jfr.stop(root / f"{len(samples)}.jfr")
    python = _python_side(rows, root)
    frame.unpersist()
    return _render(rows, runs, medians, samples, python, files)


def _lance_files(uri: Path) -> tuple[int, float]:
    """The data files of the table's latest version, and their MiB (older versions' files
    stay until a vacuum)."""
    paths = [
        uri / "data" / data_file.path
        for fragment in lance.dataset(str(uri)).get_fragments()
        for data_file in fragment.data_files()
    ]
    return len(paths), sum(p.stat().st_size for p in paths) / (1024 * 1024)


def _files(folder: Path, suffix: str) -> tuple[int, float]:
    """How many ``suffix`` files the last write left in ``folder``, and their MiB."""
    found = [p for p in folder.rglob(f"*{suffix}") if p.is_file()]
    return len(found), sum(p.stat().st_size for p in found) / (1024 * 1024)


def _render(
    rows: int,
    runs: int,
    medians: dict[str, float],
    samples: dict[str, dict[str, int]],
    python: dict[str, float],
    files: dict[str, tuple[int, float]],
) -> str:
    lines = [
        f"Wall clock, median of {runs} alternating runs, {rows:,} cached rows in 2 partitions:",
        "",
        "| write | seconds |",
        "| --- | ---: |",
        *(f"| {name} | {seconds:.3f} |" for name, seconds in medians.items()),
        "",
        f"JVM execution samples of the write tasks (JFR, every 10 ms, {runs} writes each), "
        "share per group:",
        "",
        "| write | samples | " + " | ".join(name for name, _ in GROUPS) + f" | {OTHER} |",
        "| --- | ---: | " + " | ".join("---:" for _ in range(len(GROUPS) + 1)) + " |",
    ]
    for name, counts in samples.items():
        if name.startswith("noop"):
            continue
        total = max(1, sum(counts.values()))
        shares = [counts.get(group, 0) / total for group, _ in GROUPS]
        shares.append(counts.get(OTHER, 0) / total)
        lines.append(
            f"| {name} | {sum(counts.values())} | "
            + " | ".join(f"{share:.0%}" for share in shares)
            + " |"
        )
    lines += [
        "",
        "Files of one write: "
        + "; ".join(f"{k} {n} files, {mib:.1f} MiB" for k, (n, mib) in files.items())
        + ".",
        "",
        f"Python side of one write task ({rows // 2:,} rows, {int(python['batches'])} batches "
        f"of 10,000, this process): the connector's per-batch conversion "
        f"{python['conform'] * 1000:.1f} ms in all; `write_fragments` "
        f"{python['write_fragments']:.3f} s. The same number of 10,000-row batches of a "
        "128-float vector column (list to the table's fixed_size_list, lengths checked): "
        f"{python['ml_conform'] * 1000:.1f} ms in all.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.write_profile")
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.pop("SPARK_CONF_DIR", None)  # the session of configure(), nothing else
    builder = SparkSession.builder.master("local[2]").appName("lance_spark-write-profile")
    builder = builder.config("spark.driver.memory", "4g").config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = lance_spark.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="lance_spark_write_profile_"))
    try:
        print(profile(spark, args.rows, args.runs, root))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
