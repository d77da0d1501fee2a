"""Side-by-side benchmark of the ``lance`` data source against Spark's Parquet.

``python -m benchmarks.run --rows 5000000 --runs 7 --out BENCHMARKS.md [--work-dir DIR]``
(``make bench``) generates deterministic data, writes it as Parquet with Spark and as Lance
with the connector, then times every case in ONE Spark session: a warm-up run of each side,
then ``--runs`` runs of each, alternating which side goes first (Lance first on even runs,
the baseline first on odd ones). It reports the medians and the median of the per-run ratios
Lance / baseline against the targets, and writes them as Markdown.

``main(argv, spark=session)`` runs on an existing session (the smoke test does); the CLI
starts its own ``local[2]`` session. Nothing is written inside the repository except
``--out``: the tables live in a fresh directory under ``--work-dir`` (default: the system's
temporary directory), deleted at the end unless ``--keep-data``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import lance
import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

import lance_spark
from benchmarks import sections
from lance_spark import LanceTable

REPO = Path(__file__).resolve().parent.parent
VECTOR_SIZE = 32
LABEL_COUNT = 50
VECTOR_OPTION = "vector.arrow.fixed-size-list.size"
MIN_ROWS = 1_000
MIB = 1024 * 1024

BASE_LANCE = "base.lance"
BASE_PARQUET = "base.parquet"
INDEXED_LANCE = "indexed.lance"
ML_LANCE = "ml.lance"
ML_PARQUET = "ml.parquet"
SMALL_LANCE = "small.lance"
SMALL_PARQUET = "small.parquet"
ML_EMBEDDING_SIZE = 128
ML_LABELS = 10
ML_OPTION = "embedding.arrow.fixed-size-list.size"
# The embeddings have a low intrinsic dimension, as learned ones do: ML_LATENT factors mixed
# into 128 dimensions, plus a little noise. (Uniform random vectors in 128 dimensions are
# all about equally far apart: no neighbourhoods for any index to find.)
ML_LATENT = 8
ML_MIXING_SEED = 20261124
NEAREST_QUERIES = 1_000
NEAREST_K = 10

PARQUET = "Parquet"
LANCE_CURRENT = "Lance, current version"
TABLE_API_MERGE = "LanceTable.merge"

FULL_SCAN = "full scan"
PROJECTION = "projected scan (id, x)"
FILTER_NO_INDEX = "selective filter 0.1% on id, no index"
FILTER_BTREE = "selective filter 0.1% on id, BTREE index"
POINT_LOOKUP = "point lookup on id, BTREE index"
APPEND = "append write (rows/10)"
OVERWRITE = "overwrite write (all rows)"
MERGE = "MERGE 1% upsert vs full Parquet rewrite"
MERGE_SQL = "SQL MERGE 1% upsert (Spark's plan) vs full Parquet rewrite"
UPDATE = "UPDATE 1% vs full Parquet rewrite"
UPDATE_SQL = "SQL UPDATE 1% (Spark's plan) vs full Parquet rewrite"
DELETE = "DELETE 1% vs full Parquet rewrite"
DELETE_SQL = "SQL DELETE 1% (Spark's plan) vs full Parquet rewrite"
MERGE_TINY = "SQL MERGE of 10 rows (Spark's plan) vs LanceTable.merge"
OLD_VERSION = "old-version read vs current-version read"
COUNT_ROWS = "countRows() vs count()"
ML_COUNT = "ML: df.count()"
ML_GROUP_BY = 'ML: select("id", "label").groupBy("label").count()'
ML_LIMIT = "ML: limit(10).collect()"
ML_DISTINCT = 'ML: select("label").distinct()'
ML_FULL_SCAN = "ML: full scan"
ML_KEY_LOOKUP = "ML: lookup by unsorted key, BTREE index"
ML_BROADCAST_JOIN = "ML: join of a small Lance table with the Parquet one"
STREAM_SINK = "streaming sink, availableNow (rows/10)"
CHANGE_FEED = "change feed of one UPDATE version (1% of rows) vs comparing two Parquet snapshots"
VECTOR_SEARCH = "ML: top-10 vector search, IVF_PQ index vs Spark brute force"

# Writes of a cached DataFrame (benchmarks/cached_writes.py), per shape and kind of session.
CACHED_APPEND = "append"
CACHED_OVERWRITE = "overwrite"
NARROW = "narrow"
ML_SHAPED = "ML-shaped"
CACHED_SESSIONS = ("recommended", "plain")
CACHED_TARGETS = {"recommended": 0.9, "plain": 1.0}


def cached_case(operation: str, shape: str, session: str) -> str:
    return f"cached DataFrame {operation}, {shape} ({session} session)"


CACHED_CASES = tuple(
    cached_case(op, shape, session)
    for session in CACHED_SESSIONS
    for shape in (NARROW, ML_SHAPED)
    for op in (CACHED_APPEND, CACHED_OVERWRITE)
)

CASE_NAMES = (
    FULL_SCAN,
    PROJECTION,
    FILTER_NO_INDEX,
    FILTER_BTREE,
    POINT_LOOKUP,
    COUNT_ROWS,
    OLD_VERSION,
    APPEND,
    OVERWRITE,
    MERGE,
    MERGE_SQL,
    UPDATE,
    UPDATE_SQL,
    DELETE,
    DELETE_SQL,
    MERGE_TINY,
    ML_COUNT,
    ML_GROUP_BY,
    ML_LIMIT,
    ML_DISTINCT,
    ML_FULL_SCAN,
    ML_KEY_LOOKUP,
    ML_BROADCAST_JOIN,
    STREAM_SINK,
    CHANGE_FEED,
    VECTOR_SEARCH,
)

# Upper bounds on the median per-run ratio Lance / baseline (None: reported, no target).
TARGETS: dict[str, float | None] = {
    FULL_SCAN: 0.9,
    PROJECTION: 0.9,
    FILTER_NO_INDEX: 1.5,
    FILTER_BTREE: 0.5,
    POINT_LOOKUP: 0.1,
    APPEND: 0.9,
    OVERWRITE: None,
    MERGE: 0.2,
    MERGE_SQL: 0.2,
    UPDATE: 0.2,
    UPDATE_SQL: 0.2,
    DELETE: 0.2,
    DELETE_SQL: 0.2,
    MERGE_TINY: None,
    OLD_VERSION: 1.05,
    COUNT_ROWS: 0.1,
    ML_COUNT: 0.5,
    ML_GROUP_BY: 1.0,
    ML_LIMIT: 0.5,
    ML_DISTINCT: 1.0,
    ML_FULL_SCAN: 1.0,
    ML_KEY_LOOKUP: 0.3,
    ML_BROADCAST_JOIN: 1.0,
    STREAM_SINK: None,
    VECTOR_SEARCH: 0.05,
    CHANGE_FEED: None,
    **{
        cached_case(op, shape, session): CACHED_TARGETS[session]
        for session in CACHED_SESSIONS
        for shape in (NARROW, ML_SHAPED)
        for op in (CACHED_APPEND, CACHED_OVERWRITE)
    },
}

CACHED_METHOD = (
    "the DataFrame is built, cached and counted before the clock starts, so the time is the "
    "writer's own. Narrow: rows of `id` bigint, `x` double, `label` string (50 values); "
    "ML-shaped: ML rows/4 of `id`, `x`, `label` (10 values) and `embedding` 128 floats (a "
    'Lance `fixed_size_list`). **append**: `df.write.format("lance").mode("append")` vs '
    '`df.write.mode("append").parquet(p)` into a table that already holds the same rows, '
    'restored after every run (untimed); **overwrite**: `mode("overwrite")` of a table of the '
    "same rows, old Lance files vacuumed after every run (untimed). Each kind of session is "
    "a process of its own (`python -m benchmarks.cached_writes`), `local[2]` with a 4 GiB "
    "driver and nothing of the repository's conf: **recommended** is built with "
    "`lance_spark.configure(SparkSession.builder)`, **plain** is not (a user's own session). "
    "Targets: <= 0.9 recommended, <= 1.0 plain."
)

METHODS: dict[str, str] = {
    FULL_SCAN: 'every column of the table to the `noop` sink (`df.write.format("noop")`).',
    PROJECTION: '`.select("id", "x")` on both sides (no `columns` option), to `noop`.',
    FILTER_NO_INDEX: (
        "`id >= lo AND id < lo + rows/1000` (pushed down to Lance), to `noop`; "
        "`lo` changes every run, the same on both sides."
    ),
    FILTER_BTREE: (
        "the same filter on a copy of the Lance table with a BTREE index on `id` "
        "(`LanceTable.createIndex`); the Parquet side is the same filter on the same Parquet."
    ),
    POINT_LOOKUP: '`.filter("id = k").collect()` (one row), Lance table with the BTREE index.',
    COUNT_ROWS: (
        "`table.countRows()` vs `spark.read.parquet(p).count()`; `table = "
        "LanceTable.forPath(spark, uri)` is made once, outside the timed region (a LanceTable "
        "holds no state: every `countRows()` opens the table anew)."
    ),
    OLD_VERSION: (
        "full scan (to `noop`) of version N-1 vs version N of one Lance table, both with all "
        "rows (N overwrote N-1 with new data of the same shape). The ratio is Lance old / "
        "Lance current, not vs Parquet."
    ),
    APPEND: (
        '`mode("append")` of rows/10 new generated rows into a copy of each table; after '
        "every run (untimed) the Lance copy is restored (`restoreToVersion` + `vacuum(0)`) and "
        "the new Parquet files are deleted."
    ),
    OVERWRITE: (
        '`mode("overwrite")` with all rows (generated) on a table of the same size; the '
        "old Lance files are vacuumed after every run (untimed)."
    ),
    MERGE: (
        "rows/100 source rows, half matching existing ids (updates), half new (inserts). Lance: "
        "`merge(...).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()` on a copy, "
        "restored after every run (untimed). Parquet: read the table, left-anti join with "
        "the source, union the source, write to a new path (deleted after every run)."
    ),
    MERGE_SQL: (
        "the same source and table as the MERGE above, as SQL: `MERGE INTO lance.`<copy>` t "
        "USING src s ON s.id = t.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN "
        "INSERT *`, which Spark plans itself (the companion's row-level operation); the same "
        "Parquet rewrite."
    ),
    UPDATE: (
        "`x = x + 1` for the rows with `id % 100 = 0`: `LanceTable.update` on a copy, "
        "restored after every run (untimed); Parquet: read the table, `when(id % 100 = 0, "
        "x + 1)`, write to a new path (deleted after every run)."
    ),
    UPDATE_SQL: "the same UPDATE as SQL (`UPDATE lance.`<copy>` SET x = x + 1 WHERE id % 100 = 0`).",
    DELETE: (
        "the rows with `id % 100 = 0`: `LanceTable.delete` on a copy, restored after every run "
        "(untimed); Parquet: read the table, keep the other rows, write to a new path."
    ),
    DELETE_SQL: "the same DELETE as SQL (`DELETE FROM lance.`<copy>` WHERE id % 100 = 0`).",
    MERGE_TINY: (
        "an upsert of 10 source rows (5 existing ids spread over the table, 5 new), update all "
        "and insert all: SQL `MERGE INTO` (Spark's plan, the target pruned by the source's "
        "keys) vs `LanceTable.merge(...).whenMatchedUpdateAll().whenNotMatchedInsertAll()` "
        "(the same statement, with the table API's result row and redo on top), each on a "
        "copy restored after every run (untimed). The ratio is SQL / table API, not vs "
        "Parquet: what the table API adds to a small MERGE."
    ),
    ML_COUNT: "`df.count()` on the ML table, the same code on both sides (so for the rest).",
    ML_GROUP_BY: '`df.select("id", "label").groupBy("label").count().collect()`.',
    ML_LIMIT: "`df.limit(10).collect()`.",
    ML_DISTINCT: '`df.select("label").distinct().collect()`.',
    ML_FULL_SCAN: "every column of the ML table (embedding included) to the `noop` sink.",
    ML_KEY_LOOKUP: (
        "`df.filter(key = k).collect()` (one row) on the unsorted string key, `k` changing "
        "every run; the Lance table has a BTREE index on `key` (`LanceTable.createIndex`), "
        "the Parquet files are Spark's (min/max statistics only)."
    ),
    ML_BROADCAST_JOIN: (
        '`big.join(small, "label").agg(sum(weight)).collect()`: `big` is the ML table as '
        "Parquet on both sides, `small` the 10 labels with a weight, as Lance vs as Parquet. "
        "Spark broadcasts `small` only when its scan reports its size."
    ),
    STREAM_SINK: (
        "a streaming query over rows/10 generated rows stored as Parquet files (the file "
        "source), `trigger(availableNow=True)`, into a Lance table (`writeStream.format("
        '"lance")`: one version per micro-batch, exactly once) vs a Parquet file sink; a new '
        "checkpoint and target every run (deleted after it, untimed). Rows per second = "
        "rows/10 / seconds."
    ),
    CHANGE_FEED: (
        "`x = x + 1` for the rows with `id % 100 = 0` (one `LanceTable.update`, untimed); Lance: "
        '`spark.read.format("lance").option("readChangeFeed", "true")` of that one version '
        "(its pre- and post-images), counted; Parquet, where a table has no change feed: the "
        "table before and after the same update (two Parquet copies, written untimed) full "
        "outer joined on `id`, keeping the rows whose values differ, counted. The Lance time "
        "is the change feed's latency for one version."
    ),
    VECTOR_SEARCH: (
        "the 10 rows of the ML table nearest (L2) to one query vector, a different query "
        "each run (a new point of the embeddings' distribution). Lance: "
        '`LanceTable.search(q, k=10, columns=["id"])` with an IVF_PQ index on `embedding` '
        "(built untimed, Lance's default nprobes and the connector's default refine factor), "
        "collected; Parquet: Spark computes the distance of every row "
        "(`aggregate(zip_with(embedding, q, ...))`), `orderBy` it and `limit(10)`, collected."
    ),
}


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """Wall-clock seconds of the measured runs of one case (the warm-up excluded)."""

    name: str
    lance_seconds: tuple[float, ...]
    baseline_seconds: tuple[float, ...]
    baseline: str = PARQUET

    @property
    def target(self) -> float | None:
        return TARGETS[self.name]

    @property
    def lance_median(self) -> float:
        return statistics.median(self.lance_seconds)

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_seconds)

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(
            lance_s / max(base_s, 1e-9)
            for lance_s, base_s in zip(self.lance_seconds, self.baseline_seconds, strict=True)
        )

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def holds(self) -> bool | None:
        return None if self.target is None else self.ratio_median <= self.target


@dataclass(frozen=True)
class MemoryResult:
    """Python worker processes observed during the writes of one side of a write case."""

    write: str
    writes: int
    measured: bool  # False without /proc
    active_workers: int  # the most Python workers that used CPU during one write
    peak_worker_mib: float
    peak_total_mib: float
    worker_cpu_seconds: float


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    memory_gib: float
    os: str
    python: str
    java: str
    pyspark: str
    pylance: str
    pyarrow: str


@dataclass(frozen=True)
class DataInfo:
    rows: int
    lance_fragments: int
    lance_mib: float
    parquet_files: int
    parquet_mib: float


@dataclass(frozen=True)
class Report:
    command: str
    date: str
    runs: int
    master: str
    machine: Machine
    data: DataInfo
    ml_data: DataInfo
    cases: tuple[CaseResult, ...]
    memory: tuple[MemoryResult, ...]
    nearest: NearestJoinResult
    settings: tuple[tuple[str, str], ...] = ()


# Session settings that change the results, recorded in the report: Spark confs (read from
# the SparkConf, "(not set)" when absent) and SQL confs (their effective value).
REPORTED_SPARK_CONFS = (
    "spark.python.unix.domain.socket.enabled",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.driver.memory",
)
REPORTED_SQL_CONFS = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")


# What Spark itself adds to every JVM's options (JavaModuleOptions); left out of the report.
_SPARK_JVM_DEFAULTS = {
    "-XX:+IgnoreUnrecognizedVMOptions",
    "-Djava.net.preferIPv6Addresses=false",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.type=pooled",
    "-Dio.netty.handler.ssl.defaultEndpointVerificationAlgorithm=NONE",
}


def _own_options(value: str) -> str:
    """Java options without the module flags Spark adds to every JVM."""
    kept = [t for t in value.split() if not t.startswith("--") and t not in _SPARK_JVM_DEFAULTS]
    return " ".join(kept) or "(none beyond Spark's)"


def session_settings(spark: SparkSession) -> tuple[tuple[str, str], ...]:
    conf = spark.sparkContext.getConf()
    settings = []
    for key in REPORTED_SPARK_CONFS:
        value = str(conf.get(key, "(not set)"))
        settings.append((key, _own_options(value) if key.endswith("JavaOptions") else value))
    settings += [(key, str(spark.conf.get(key))) for key in REPORTED_SQL_CONFS]
    return tuple(settings)


# --- timing ---------------------------------------------------------------------------------


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Side:
    """One side of a case. ``run(trial)`` is timed (trial 0 is the warm-up); ``check()``
    (after the warm-up only) and ``reset()`` (after every run) are not."""

    run: Callable[[int], object]
    check: Callable[[], None] = _nothing
    reset: Callable[[], None] = _nothing


def _timed(side: Side, trial: int) -> float:
    start = time.perf_counter()
    side.run(trial)
    elapsed = time.perf_counter() - start
    if trial == 0:
        side.check()
    side.reset()
    return elapsed


def measure(
    name: str, lance_side: Side, baseline_side: Side, runs: int, baseline: str = PARQUET
) -> CaseResult:
    """A warm-up of each side, then ``runs`` runs of each, alternating which goes first."""
    log(f"{name}: warm-up")
    _timed(lance_side, 0)
    _timed(baseline_side, 0)
    lance_times: list[float] = []
    base_times: list[float] = []
    for run in range(runs):
        trial = run + 1
        if run % 2 == 0:
            lance_times.append(_timed(lance_side, trial))
            base_times.append(_timed(baseline_side, trial))
        else:
            base_times.append(_timed(baseline_side, trial))
            lance_times.append(_timed(lance_side, trial))
    result = CaseResult(name, tuple(lance_times), tuple(base_times), baseline)
    log(
        f"{name}: lance {result.lance_median:.4f} s, {baseline} {result.baseline_median:.4f} s, "
        f"ratio {result.ratio_median:.3f}"
    )
    return result


_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[bench {time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- Python worker memory -------------------------------------------------------------------

_WORKER_MARKERS = ("pyspark.daemon", "pyspark/worker", "pyspark.worker", "lance_spark_daemon")
# The daemons (the repository's conf runs Spark's as lance_spark_daemon): they only fork workers.
_DAEMON_MARKERS = ("pyspark.daemon", "lance_spark_daemon")


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3, the state, is index 0)."""
    text = _read(f"/proc/{pid}/stat")
    return None if text is None else text.rsplit(")", 1)[1].split()


Sample = dict[int, tuple[int, int]]  # pid -> (RSS bytes, utime + stime clock ticks)


class WorkerMemory:
    """Peak RSS and CPU time of the Spark Python workers that run during a write.

    A thread samples /proc every ``interval`` seconds while :meth:`track` is active. Workers
    are the processes below the driver's JVM whose command line names ``pyspark.daemon`` or
    ``pyspark.worker``, except the daemons themselves (the JVM's direct children, which only
    fork workers); only workers whose CPU time grew during the write count (idle workers left
    by earlier queries do not). Results accumulate over every ``track``.
    """

    def __init__(self, jvm_pid: int, interval: float = 0.05) -> None:
        self._jvm_pid = jvm_pid
        self._interval = interval
        self._foreign: set[int] = set()  # processes outside the JVM's tree
        self.available = Path("/proc/self/statm").is_file()
        self.writes = 0
        self.active_workers = 0  # the most workers active in one write
        self.peak_worker_bytes = 0
        self.peak_total_bytes = 0
        self.cpu_seconds = 0.0

    @contextmanager
    def track(self) -> Iterator[None]:
        if not self.available:
            yield
            return
        samples = [self._sample()]
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(self._interval):
                samples.append(self._sample())

        thread = threading.Thread(target=poll, name="bench-worker-memory", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            samples.append(self._sample())
            self._account(samples)

    def _account(self, samples: list[Sample]) -> None:
        start = {pid: ticks for pid, (_rss, ticks) in samples[0].items()}
        last: dict[int, int] = {}
        for sample in samples:
            last.update({pid: ticks for pid, (_rss, ticks) in sample.items()})
        used = {pid: ticks - start.get(pid, 0) for pid, ticks in last.items()}
        active = {pid for pid, ticks in used.items() if ticks > 0}
        for sample in samples:
            rss = [r for pid, (r, _ticks) in sample.items() if pid in active]
            if rss:
                self.peak_worker_bytes = max(self.peak_worker_bytes, max(rss))
                self.peak_total_bytes = max(self.peak_total_bytes, sum(rss))
        self.cpu_seconds += sum(used[pid] for pid in active) / os.sysconf("SC_CLK_TCK")
        self.active_workers = max(self.active_workers, len(active))
        self.writes += 1

    def _sample(self) -> Sample:
        page = os.sysconf("SC_PAGE_SIZE")
        out: Sample = {}
        for pid in self._worker_pids():
            statm = _read(f"/proc/{pid}/statm")
            fields = _stat_fields(pid)
            if statm is None or fields is None:
                continue  # exited meanwhile
            out[pid] = (int(statm.split()[1]) * page, int(fields[11]) + int(fields[12]))
        return out

    def _worker_pids(self) -> list[int]:
        workers = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in self._foreign:
                continue
            pid = int(name)
            if not self._below_jvm(pid):
                self._foreign.add(pid)
                continue
            # Read every time: a child caught between fork and exec still shows java's line.
            cmdline = (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ")
            if not any(marker in cmdline for marker in _WORKER_MARKERS):
                continue
            fields = _stat_fields(pid)
            daemon = any(marker in cmdline for marker in _DAEMON_MARKERS)
            if fields is None or (daemon and int(fields[1]) == self._jvm_pid):
                continue  # a daemon only forks workers (and wakes up every second when idle)
            workers.append(pid)
        return workers

    def _below_jvm(self, pid: int) -> bool:
        seen: set[int] = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            fields = _stat_fields(pid)
            if fields is None:
                return False
            pid = int(fields[1])
            if pid == self._jvm_pid:
                return True
        return False

    def result(self, write: str) -> MemoryResult:
        return MemoryResult(
            write=write,
            writes=self.writes,
            measured=self.available,
            active_workers=self.active_workers,
            peak_worker_mib=self.peak_worker_bytes / MIB,
            peak_total_mib=self.peak_total_bytes / MIB,
            worker_cpu_seconds=self.cpu_seconds,
        )


def jvm_pid(spark: SparkSession) -> int:
    jvm = cast(Any, spark.sparkContext)._jvm
    return int(jvm.java.lang.ProcessHandle.current().pid())


# --- data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """The session, the sizes and the directory every table of this run lives in."""

    spark: SparkSession
    rows: int
    runs: int
    root: Path
    partitions: int
    ml_rows: int = 1_000_000

    def path(self, name: str) -> str:
        return str(self.root / name)

    def probe(self, trial: int, limit: int | None = None) -> int:
        """A deterministic id in [0, limit) that changes with the trial."""
        bound = max(1, self.rows if limit is None else limit)
        return (trial * 2_654_435_761 + 12_345) % bound


def _unit(salt: int) -> str:
    """SQL for a deterministic pseudo-random double in [0, 1) per id."""
    return f"pmod(xxhash64(id, {salt}), 1000003) / 1000003.0D"


def with_columns(ids: DataFrame, salt: int) -> DataFrame:
    """``id`` -> (id long, x double, label string of 50 values, vector of 32 floats)."""
    base = salt * 1_000
    vector = ", ".join(f"cast({_unit(base + 2 + i)} as float)" for i in range(VECTOR_SIZE))
    # One SQL text instead of ~200 Column calls: building the DataFrame costs one py4j round
    # trip, not ~0.2 s of them, inside the timed region of the writes and the MERGE.
    return ids.selectExpr(
        "cast(id as long) as id",
        f"{_unit(base)} as x",
        f"concat('label_', cast(pmod(xxhash64(id, {base + 1}), {LABEL_COUNT}) as string)) as label",
        f"array({vector}) as vector",
    )


def generate(b: Bench, start: int, count: int, salt: int = 0) -> DataFrame:
    return with_columns(b.spark.range(start, start + count, numPartitions=b.partitions), salt)


def write_lance(df: DataFrame, uri: str, mode: str) -> None:
    df.write.format("lance").option(VECTOR_OPTION, str(VECTOR_SIZE)).mode(mode).save(uri)


def write_parquet(df: DataFrame, path: str, mode: str) -> None:
    df.write.mode(mode).parquet(path)


def to_noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def read_lance(spark: SparkSession, uri: str, **options: str) -> DataFrame:
    """A fresh DataFrame every time (a reused one keeps its first pushed filter on 4.3.0)."""
    reader = spark.read.format("lance")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(uri)


def lance_version(uri: str) -> int:
    return int(lance.dataset(uri).version)


def copy_table(b: Bench, source: str, target: str) -> str:
    shutil.copytree(b.path(source), b.path(target))
    return b.path(target)


def files_under(path: str) -> set[Path]:
    return {p for p in Path(path).rglob("*") if p.is_file()}


def size_mib(path: str) -> float:
    return sum(p.stat().st_size for p in files_under(path)) / MIB


def expect(what: str, actual: int, expected: int) -> None:
    if actual != expected:
        raise RuntimeError(f"benchmark sanity check failed: {what} = {actual}, expected {expected}")


def prepare(b: Bench) -> DataInfo:
    """The base tables (Lance and Parquet, same rows) and an indexed copy of the Lance one."""
    log(f"writing {b.rows} rows as Parquet and as Lance")
    write_parquet(generate(b, 0, b.rows), b.path(BASE_PARQUET), "overwrite")
    write_lance(generate(b, 0, b.rows), b.path(BASE_LANCE), "overwrite")
    expect("Lance rows", LanceTable.forPath(b.spark, b.path(BASE_LANCE)).countRows(), b.rows)
    log("copying the Lance table and indexing id (BTREE)")
    LanceTable.forPath(b.spark, copy_table(b, BASE_LANCE, INDEXED_LANCE)).createIndex("id", "BTREE")
    return data_info(b.rows, b.path(BASE_LANCE), b.path(BASE_PARQUET))


def data_info(rows: int, lance_uri: str, parquet_path: str) -> DataInfo:
    return DataInfo(
        rows=rows,
        lance_fragments=len(lance.dataset(lance_uri).get_fragments()),
        lance_mib=size_mib(lance_uri),
        parquet_files=len([p for p in files_under(parquet_path) if p.suffix == ".parquet"]),
        parquet_mib=size_mib(parquet_path),
    )


def ml_key(i: int) -> str:
    """The ML table's unsorted string key of id ``i`` (what the SQL in ``ml_frame`` computes)."""
    return hashlib.sha256(str(i).encode()).hexdigest()[:16]


def ml_embedding_sql(salt: int = 0) -> str:
    """SQL for a row's embedding: ML_LATENT latent factors in [0, 1) (hashes of ``id``)
    mixed by a fixed random ML_LATENT x 128 matrix, plus noise of 0.01 per dimension;
    ``salt`` draws other points of the same distribution."""
    mixing = np.random.default_rng(ML_MIXING_SEED).normal(size=(ML_LATENT, ML_EMBEDDING_SIZE))
    latent = [_unit(50 + j + salt) for j in range(ML_LATENT)]
    values = (
        "cast("
        + " + ".join(f"{mixing[j, i]:.6f}D * {latent[j]}" for j in range(ML_LATENT))
        + f" + 0.01D * {_unit(100 + i + salt)} as float)"
        for i in range(ML_EMBEDDING_SIZE)
    )
    return f"array({', '.join(values)})"


def ml_frame(b: Bench) -> DataFrame:
    """The ML-shaped table: id, an unsorted string key, x, a label and a 128-float embedding."""
    ids = b.spark.range(0, b.ml_rows, numPartitions=b.partitions)
    return ids.selectExpr(
        "id",
        "substr(sha2(cast(id as string), 256), 1, 16) as key",
        f"{_unit(90)} as x",
        f"concat('label_', cast(pmod(xxhash64(id, 91), {ML_LABELS}) as string)) as label",
        f"{ml_embedding_sql()} as embedding",
    )


def prepare_ml(b: Bench) -> DataInfo:
    """The ML table as Lance (BTREE index on key) and as Parquet, and the small label table."""
    log(f"writing the ML table ({b.ml_rows} rows, {ML_EMBEDDING_SIZE}-float embeddings)")
    ml_frame(b).write.mode("overwrite").parquet(b.path(ML_PARQUET))
    ml_frame(b).write.format("lance").option(ML_OPTION, str(ML_EMBEDDING_SIZE)).mode(
        "overwrite"
    ).save(b.path(ML_LANCE))
    expect("ML Lance rows", LanceTable.forPath(b.spark, b.path(ML_LANCE)).countRows(), b.ml_rows)
    LanceTable.forPath(b.spark, b.path(ML_LANCE)).createIndex("key", "BTREE")
    small = b.spark.range(ML_LABELS).selectExpr(
        "concat('label_', cast(id as string)) as label", "cast(id + 1 as double) as weight"
    )
    small.coalesce(1).write.mode("overwrite").parquet(b.path(SMALL_PARQUET))
    small.coalesce(1).write.format("lance").mode("overwrite").save(b.path(SMALL_LANCE))
    return data_info(b.ml_rows, b.path(ML_LANCE), b.path(ML_PARQUET))


class LanceRestorer:
    """Brings a Lance table back to the version it had when made, and drops the files of
    the versions in between (``restoreToVersion`` + ``vacuum(0)``)."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        self._uri = uri
        self._table = LanceTable.forPath(spark, uri)
        self._version = lance_version(uri)

    def __call__(self) -> None:
        if lance_version(self._uri) != self._version:
            self._table.restoreToVersion(self._version)
        self._table.vacuum(0)
        self._version = lance_version(self._uri)  # vacuum dropped the older manifests


class ParquetRestorer:
    """Deletes the files written into a Parquet directory since it was made."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._files = files_under(path)

    def __call__(self) -> None:
        for extra in files_under(self._path) - self._files:
            extra.unlink()


# --- cases ----------------------------------------------------------------------------------


def case_full_scan(b: Bench) -> CaseResult:
    return measure(
        FULL_SCAN,
        Side(lambda _t: to_noop(read_lance(b.spark, b.path(BASE_LANCE)))),
        Side(lambda _t: to_noop(b.spark.read.parquet(b.path(BASE_PARQUET)))),
        b.runs,
    )


def case_projection(b: Bench) -> CaseResult:
    return measure(
        PROJECTION,
        Side(lambda _t: to_noop(read_lance(b.spark, b.path(BASE_LANCE)).select("id", "x"))),
        Side(lambda _t: to_noop(b.spark.read.parquet(b.path(BASE_PARQUET)).select("id", "x"))),
        b.runs,
    )


def id_range(b: Bench, trial: int) -> str:
    """0.1% of the rows: ``rows/1000`` consecutive ids starting where the trial says."""
    width = max(1, b.rows // 1000)
    low = b.probe(trial, b.rows - width)
    return f"id >= {low} AND id < {low + width}"


def _filter_case(b: Bench, name: str, lance_uri: str) -> CaseResult:
    width = max(1, b.rows // 1000)

    def lance_frame(trial: int) -> DataFrame:
        return read_lance(b.spark, lance_uri).filter(id_range(b, trial))

    def parquet_frame(trial: int) -> DataFrame:
        return b.spark.read.parquet(b.path(BASE_PARQUET)).filter(id_range(b, trial))

    return measure(
        name,
        Side(
            lambda t: to_noop(lance_frame(t)),
            check=lambda: expect(f"{name}: Lance rows", lance_frame(0).count(), width),
        ),
        Side(
            lambda t: to_noop(parquet_frame(t)),
            check=lambda: expect(f"{name}: Parquet rows", parquet_frame(0).count(), width),
        ),
        b.runs,
    )


def case_filter_no_index(b: Bench) -> CaseResult:
    return _filter_case(b, FILTER_NO_INDEX, b.path(BASE_LANCE))


def case_filter_btree(b: Bench) -> CaseResult:
    return _filter_case(b, FILTER_BTREE, b.path(INDEXED_LANCE))


def case_point_lookup(b: Bench) -> CaseResult:
    def lance_run(trial: int) -> None:
        frame = read_lance(b.spark, b.path(INDEXED_LANCE))
        expect("Lance lookup rows", len(frame.filter(f"id = {b.probe(trial)}").collect()), 1)

    def parquet_run(trial: int) -> None:
        frame = b.spark.read.parquet(b.path(BASE_PARQUET))
        expect("Parquet lookup rows", len(frame.filter(f"id = {b.probe(trial)}").collect()), 1)

    return measure(POINT_LOOKUP, Side(lance_run), Side(parquet_run), b.runs)


def case_count_rows(b: Bench) -> CaseResult:
    table = LanceTable.forPath(b.spark, b.path(BASE_LANCE))  # each countRows() opens it anew

    def lance_run(_trial: int) -> None:
        expect("countRows", table.countRows(), b.rows)

    def parquet_run(_trial: int) -> None:
        expect("count()", b.spark.read.parquet(b.path(BASE_PARQUET)).count(), b.rows)

    return measure(COUNT_ROWS, Side(lance_run), Side(parquet_run), b.runs)


def case_old_version(b: Bench) -> CaseResult:
    uri = copy_table(b, BASE_LANCE, "versions.lance")
    old = lance_version(uri)
    log(f"{OLD_VERSION}: overwriting a copy with new data of the same shape")
    write_lance(generate(b, 0, b.rows, salt=5), uri, "overwrite")
    return measure(
        OLD_VERSION,
        Side(lambda _t: to_noop(read_lance(b.spark, uri, version=str(old)))),
        Side(lambda _t: to_noop(read_lance(b.spark, uri))),
        b.runs,
        baseline=LANCE_CURRENT,
    )


def case_append(b: Bench, memory: list[MemoryResult]) -> CaseResult:
    lance_uri = copy_table(b, BASE_LANCE, "append.lance")
    parquet_path = copy_table(b, BASE_PARQUET, "append.parquet")
    count = max(1, b.rows // 10)
    expected = b.rows + count
    pid = jvm_pid(b.spark)
    lance_memory, parquet_memory = WorkerMemory(pid), WorkerMemory(pid)

    def lance_run(_trial: int) -> None:
        with lance_memory.track():
            write_lance(generate(b, b.rows, count, salt=2), lance_uri, "append")

    def parquet_run(_trial: int) -> None:
        with parquet_memory.track():
            write_parquet(generate(b, b.rows, count, salt=2), parquet_path, "append")

    def lance_check() -> None:
        expect("rows after append", LanceTable.forPath(b.spark, lance_uri).countRows(), expected)

    def parquet_check() -> None:
        expect("rows after append", b.spark.read.parquet(parquet_path).count(), expected)

    result = measure(
        APPEND,
        Side(lance_run, check=lance_check, reset=LanceRestorer(b.spark, lance_uri)),
        Side(parquet_run, check=parquet_check, reset=ParquetRestorer(parquet_path)),
        b.runs,
    )
    memory.append(lance_memory.result("Lance append"))
    memory.append(parquet_memory.result("Parquet append"))
    return result


def case_overwrite(b: Bench, memory: list[MemoryResult]) -> CaseResult:
    lance_uri = b.path("overwrite.lance")
    parquet_path = b.path("overwrite.parquet")
    pid = jvm_pid(b.spark)
    lance_memory, parquet_memory = WorkerMemory(pid), WorkerMemory(pid)

    def lance_run(_trial: int) -> None:  # the warm-up creates the table
        with lance_memory.track():
            write_lance(generate(b, 0, b.rows, salt=3), lance_uri, "overwrite")

    def parquet_run(_trial: int) -> None:
        with parquet_memory.track():
            write_parquet(generate(b, 0, b.rows, salt=3), parquet_path, "overwrite")

    def lance_vacuum() -> None:
        LanceTable.forPath(b.spark, lance_uri).vacuum(0)

    result = measure(
        OVERWRITE,
        Side(lance_run, reset=lance_vacuum),
        Side(parquet_run),
        b.runs,
    )
    memory.append(lance_memory.result("Lance overwrite"))
    memory.append(parquet_memory.result("Parquet overwrite"))
    return result


def merge_source(b: Bench) -> DataFrame:
    """rows/100 rows: half update existing ids (spread over the table), half are new ids."""
    total = max(2, b.rows // 100)
    updates = total // 2
    step = max(1, b.rows // updates)
    ids = b.spark.range(0, updates, numPartitions=b.partitions).select(
        (F.col("id") * step).alias("id")
    )
    inserts = generate(b, 2 * b.rows, total - updates, salt=4)
    return with_columns(ids, salt=4).unionByName(inserts)


def _merge_case(b: Bench, name: str, lance_merge: Callable[[str, DataFrame], object]) -> CaseResult:
    """``lance_merge(uri, source)`` of :func:`merge_source` on a copy of the Lance table
    (restored after every run) vs the same upsert as a full rewrite of the Parquet table."""
    slug = "merge_sql" if name == MERGE_SQL else "merge"
    lance_uri = copy_table(b, BASE_LANCE, f"{slug}.lance")
    rewritten = b.path(f"{slug}_rewrite.parquet")
    total = max(2, b.rows // 100)
    expected = b.rows + total - total // 2

    def parquet_run(_trial: int) -> None:
        source = merge_source(b)
        target = b.spark.read.parquet(b.path(BASE_PARQUET))
        write_parquet(
            target.join(source, "id", "left_anti").unionByName(source), rewritten, "overwrite"
        )

    def lance_check() -> None:
        expect("rows after MERGE", LanceTable.forPath(b.spark, lance_uri).countRows(), expected)

    def parquet_check() -> None:
        expect("rows after rewrite", b.spark.read.parquet(rewritten).count(), expected)

    return measure(
        name,
        Side(
            lambda _t: lance_merge(lance_uri, merge_source(b)),
            check=lance_check,
            reset=LanceRestorer(b.spark, lance_uri),
        ),
        Side(parquet_run, check=parquet_check, reset=lambda: shutil.rmtree(rewritten)),
        b.runs,
    )


def case_merge(b: Bench) -> CaseResult:
    def lance_merge(uri: str, source: DataFrame) -> None:
        (
            LanceTable.forPath(b.spark, uri)
            .alias("t")
            .merge(source.alias("s"), "s.id = t.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    return _merge_case(b, MERGE, lance_merge)


def case_merge_sql(b: Bench) -> CaseResult:
    def lance_merge(uri: str, source: DataFrame) -> None:
        source.createOrReplaceTempView("bench_merge_source")
        b.spark.sql(
            f"MERGE INTO lance.`{uri}` t USING bench_merge_source s ON s.id = t.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        ).collect()

    return _merge_case(b, MERGE_SQL, lance_merge)


def case_merge_tiny(b: Bench) -> CaseResult:
    sql_uri = copy_table(b, BASE_LANCE, "merge_tiny_sql.lance")
    api_uri = copy_table(b, BASE_LANCE, "merge_tiny_api.lance")
    step = max(1, b.rows // 5)
    ids = b.spark.range(0, 5, numPartitions=1).select((F.col("id") * step).alias("id"))
    source = with_columns(ids, salt=5).unionByName(generate(b, 3 * b.rows, 5, salt=5))

    def sql_run(_trial: int) -> None:
        source.createOrReplaceTempView("bench_tiny_source")
        b.spark.sql(
            f"MERGE INTO lance.`{sql_uri}` t USING bench_tiny_source s ON s.id = t.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        ).collect()

    def api_run(_trial: int) -> None:
        (
            LanceTable.forPath(b.spark, api_uri)
            .alias("t")
            .merge(source.alias("s"), "s.id = t.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    def check(uri: str) -> Callable[[], None]:
        return lambda: expect(
            "rows after MERGE", LanceTable.forPath(b.spark, uri).countRows(), b.rows + 5
        )

    return measure(
        MERGE_TINY,
        Side(sql_run, check=check(sql_uri), reset=LanceRestorer(b.spark, sql_uri)),
        Side(api_run, check=check(api_uri), reset=LanceRestorer(b.spark, api_uri)),
        b.runs,
        baseline=TABLE_API_MERGE,
    )


_EVERY_100TH = "id % 100 = 0"


def _row_level_case(
    b: Bench, name: str, lance_change: Callable[[str], object], parquet_change: str
) -> CaseResult:
    """``lance_change(uri)`` on a copy of the Lance table (restored after every run) vs
    ``parquet_change`` (``update`` or ``delete`` of the rows with id % 100 = 0) as a full
    rewrite of the Parquet table to a new path."""
    slug = "_".join(name.lower().split()[:2]).replace("%", "")
    lance_uri = copy_table(b, BASE_LANCE, f"{slug}.lance")
    rewritten = b.path(f"{slug}_rewrite.parquet")
    hit = F.expr(_EVERY_100TH)
    kept = b.rows - len(range(0, b.rows, 100)) if parquet_change == "delete" else b.rows

    def parquet_run(_trial: int) -> None:
        table = b.spark.read.parquet(b.path(BASE_PARQUET))
        if parquet_change == "delete":
            changed = table.filter(~hit)
        else:
            changed = table.withColumn("x", F.when(hit, F.col("x") + 1).otherwise(F.col("x")))
        write_parquet(changed, rewritten, "overwrite")

    def lance_check() -> None:
        expect(f"rows after {name}", LanceTable.forPath(b.spark, lance_uri).countRows(), kept)

    return measure(
        name,
        Side(
            lambda _t: lance_change(lance_uri),
            check=lance_check,
            reset=LanceRestorer(b.spark, lance_uri),
        ),
        Side(parquet_run, reset=lambda: shutil.rmtree(rewritten)),
        b.runs,
    )


def case_update(b: Bench) -> CaseResult:
    return _row_level_case(
        b,
        UPDATE,
        lambda uri: LanceTable.forPath(b.spark, uri).update(_EVERY_100TH, {"x": "x + 1"}),
        "update",
    )


def case_update_sql(b: Bench) -> CaseResult:
    return _row_level_case(
        b,
        UPDATE_SQL,
        lambda uri: b.spark.sql(f"UPDATE lance.`{uri}` SET x = x + 1 WHERE {_EVERY_100TH}"),
        "update",
    )


def case_delete(b: Bench) -> CaseResult:
    return _row_level_case(
        b, DELETE, lambda uri: LanceTable.forPath(b.spark, uri).delete(_EVERY_100TH), "delete"
    )


def case_delete_sql(b: Bench) -> CaseResult:
    return _row_level_case(
        b,
        DELETE_SQL,
        lambda uri: b.spark.sql(f"DELETE FROM lance.`{uri}` WHERE {_EVERY_100TH}"),
        "delete",
    )


def _ml_case(b: Bench, name: str, query: Callable[[DataFrame, int], object]) -> CaseResult:
    """The same DataFrame code on a fresh DataFrame of each side's ML table."""
    return measure(
        name,
        Side(lambda t: query(read_lance(b.spark, b.path(ML_LANCE)), t)),
        Side(lambda t: query(b.spark.read.parquet(b.path(ML_PARQUET)), t)),
        b.runs,
    )


def case_ml_count(b: Bench) -> CaseResult:
    return _ml_case(b, ML_COUNT, lambda df, _t: expect("ML count()", df.count(), b.ml_rows))


def case_ml_group_by(b: Bench) -> CaseResult:
    def query(df: DataFrame, _trial: int) -> None:
        counts = df.select("id", "label").groupBy("label").count().collect()
        expect("ML groupBy rows", sum(r["count"] for r in counts), b.ml_rows)

    return _ml_case(b, ML_GROUP_BY, query)


def case_ml_limit(b: Bench) -> CaseResult:
    return _ml_case(b, ML_LIMIT, lambda df, _t: expect("ML limit", len(df.limit(10).collect()), 10))


def case_ml_distinct(b: Bench) -> CaseResult:
    def query(df: DataFrame, _trial: int) -> None:
        expect("ML labels", len(df.select("label").distinct().collect()), ML_LABELS)

    return _ml_case(b, ML_DISTINCT, query)


def case_ml_full_scan(b: Bench) -> CaseResult:
    return _ml_case(b, ML_FULL_SCAN, lambda df, _t: to_noop(df))


def case_ml_key_lookup(b: Bench) -> CaseResult:
    def query(df: DataFrame, trial: int) -> None:
        wanted = b.probe(trial, b.ml_rows)
        found = df.filter(F.col("key") == ml_key(wanted)).collect()
        expect("ML key lookup rows", len(found), 1)
        expect("ML key lookup id", found[0]["id"], wanted)

    return _ml_case(b, ML_KEY_LOOKUP, query)


def case_ml_broadcast_join(b: Bench) -> CaseResult:
    expected = None

    def query(small: DataFrame) -> float:
        big = b.spark.read.parquet(b.path(ML_PARQUET))
        row = big.join(small, "label").agg(F.sum("weight")).first()
        return float(cast(Any, row)[0])

    def lance_run(_trial: int) -> None:
        nonlocal expected
        total = query(read_lance(b.spark, b.path(SMALL_LANCE)))
        expected = total if expected is None else expected
        expect("ML join total", round(total), round(expected))

    def parquet_run(_trial: int) -> None:
        total = query(b.spark.read.parquet(b.path(SMALL_PARQUET)))
        if expected is not None:
            expect("ML join total", round(total), round(expected))

    def broadcast_check() -> None:
        joined = b.spark.read.parquet(b.path(ML_PARQUET)).join(
            read_lance(b.spark, b.path(SMALL_LANCE)), "label"
        )
        text = cast(Any, joined)._jdf.queryExecution().executedPlan().toString()
        if "BroadcastHashJoin" not in text:
            raise RuntimeError(f"benchmark sanity check failed: no broadcast join in\n{text}")

    return measure(
        ML_BROADCAST_JOIN, Side(lance_run, check=broadcast_check), Side(parquet_run), b.runs
    )


def case_stream_sink(b: Bench) -> CaseResult:
    count = max(1, b.rows // 10)
    source = b.path("stream_input.parquet")
    write_parquet(generate(b, 0, count, salt=3), source, "overwrite")
    schema = b.spark.read.parquet(source).schema

    def side(fmt: str) -> Side:
        def target(trial: int) -> tuple[str, str]:
            return b.path(f"stream_{fmt}_{trial}"), b.path(f"stream_{fmt}_{trial}.checkpoint")

        def run(trial: int) -> None:
            out, checkpoint = target(trial)
            writer = b.spark.readStream.schema(schema).parquet(source).writeStream.format(fmt)
            if fmt == "lance":
                writer = writer.option(VECTOR_OPTION, str(VECTOR_SIZE))
            query = (
                writer.option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start(out)
            )
            query.awaitTermination()

        def check() -> None:
            out, _ = target(0)
            read = b.spark.read.format(fmt).load(out)
            expect(f"rows through the {fmt} sink", read.count(), count)

        def reset() -> None:
            for path in b.root.glob(f"stream_{fmt}_*"):
                shutil.rmtree(path, ignore_errors=True)

        return Side(run, check=check, reset=reset)

    return measure(STREAM_SINK, side("lance"), side("parquet"), b.runs)


def case_change_feed(b: Bench) -> CaseResult:
    lance_uri = copy_table(b, BASE_LANCE, "change_feed.lance")
    LanceTable.forPath(b.spark, lance_uri).update("id % 100 = 0", {"x": "x + 1"})
    version = lance_version(lance_uri)
    updated = len(range(0, b.rows, 100))
    after_path = b.path("change_feed_after.parquet")
    before = b.spark.read.parquet(b.path(BASE_PARQUET))
    changed = before.withColumn(
        "x", F.when(F.col("id") % 100 == 0, F.col("x") + 1).otherwise(F.col("x"))
    )
    write_parquet(changed, after_path, "overwrite")
    columns = [c for c in before.columns if c != "id"]

    def lance_count() -> int:
        feed = (
            b.spark.read.format("lance")
            .option("readChangeFeed", "true")
            .option("startingVersion", version)
            .option("endingVersion", version)
            .load(lance_uri)
        )
        return feed.count()

    def parquet_count() -> int:
        old = b.spark.read.parquet(b.path(BASE_PARQUET))
        new = b.spark.read.parquet(after_path)
        old_row = F.struct(*[old[c] for c in columns])
        new_row = F.struct(*[new[c] for c in columns])
        joined = old.join(new, old["id"] == new["id"], "full_outer")
        return joined.where(~old_row.eqNullSafe(new_row)).count()

    def lance_check() -> None:
        expect("change feed rows (pre- and post-images)", lance_count(), 2 * updated)

    def parquet_check() -> None:
        expect("rows that differ between the Parquet copies", parquet_count(), updated)

    return measure(
        CHANGE_FEED,
        Side(lambda _trial: lance_count(), check=lance_check),
        Side(lambda _trial: parquet_count(), check=parquet_check),
        b.runs,
    )


def vector_index_params(rows: int) -> dict[str, Any]:
    """IVF_PQ parameters for the ML table: ~4,000 rows per partition (at most 256), 8
    dimensions per PQ sub-vector."""
    return {"num_partitions": max(1, min(256, rows // 4_000)), "num_sub_vectors": 16}


def build_vector_index(b: Bench) -> float:
    """The IVF_PQ index on the ML table's embedding (a new version); seconds it took."""
    log("building the IVF_PQ index on the ML table's embedding")
    start = time.perf_counter()
    LanceTable.forPath(b.spark, b.path(ML_LANCE)).createIndex(
        "embedding", "IVF_PQ", **vector_index_params(b.ml_rows)
    )
    return time.perf_counter() - start


def query_vectors(b: Bench, count: int, first: int) -> DataFrame:
    """``count`` new points of the embeddings' distribution (ids past the table's, other
    noise): ``query_id``, ``query``."""
    ids = b.spark.range(b.ml_rows + first, b.ml_rows + first + count, numPartitions=1)
    return ids.selectExpr("id AS query_id", f"{ml_embedding_sql(salt=1_000)} AS query")


def _l2_to(query: Sequence[float]) -> Column:
    values = F.array(*[F.lit(float(x)) for x in query])
    squares = F.zip_with(F.col("embedding"), values, lambda a, c: (a - c) * (a - c))
    return F.aggregate(squares, F.lit(0.0), lambda acc, x: acc + x)


def case_vector_search(b: Bench) -> CaseResult:
    queries = [r["query"] for r in query_vectors(b, b.runs + 1, first=0).collect()]
    table = LanceTable.forPath(b.spark, b.path(ML_LANCE))

    def lance_run(trial: int) -> list[int]:
        rows = table.search(queries[trial], k=NEAREST_K, columns=["id"]).collect()
        return [r["id"] for r in rows]

    def parquet_run(trial: int) -> list[int]:
        frame = b.spark.read.parquet(b.path(ML_PARQUET))
        nearest = (
            frame.select("id", _l2_to(queries[trial]).alias("d")).orderBy("d").limit(NEAREST_K)
        )
        return [r["id"] for r in nearest.collect()]

    def lance_check() -> None:
        expect("vector search rows", len(lance_run(0)), min(NEAREST_K, b.ml_rows))

    def parquet_check() -> None:
        expect("brute-force rows", len(parquet_run(0)), min(NEAREST_K, b.ml_rows))

    return measure(
        VECTOR_SEARCH,
        Side(lance_run, check=lance_check),
        Side(parquet_run, check=parquet_check),
        b.runs,
    )


@dataclass(frozen=True)
class NearestJoinResult:
    """The distributed nearest-neighbour join: seconds per run, and its recall@k."""

    queries: int
    k: int
    table_rows: int
    index_seconds: float
    seconds: tuple[float, ...]
    recall: float

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def queries_per_second(self) -> float:
        return self.queries / max(self.median, 1e-9)


def exact_neighbours(uri: str, queries: np.ndarray, k: int) -> list[set[int]]:
    """The exact k nearest ids (L2) of every query, by numpy over the table read by pylance."""
    data = lance.dataset(uri).to_table(columns=["id", "embedding"])
    ids = data.column("id").to_numpy()
    width = data.schema.field("embedding").type.list_size
    flat = data.column("embedding").combine_chunks().flatten().to_numpy()
    vectors = flat.reshape(-1, width).astype(np.float32)
    norms = (vectors * vectors).sum(axis=1)
    out: list[set[int]] = []
    for start in range(0, len(queries), 100):
        chunk = queries[start : start + 100].astype(np.float32)
        distances = norms[None, :] - 2.0 * (chunk @ vectors.T)  # + |q|^2: same for a row
        top = np.argpartition(distances, min(k, distances.shape[1] - 1), axis=1)[:, :k]
        out.extend({int(ids[i]) for i in row} for row in top)
    return out


def case_nearest_join(b: Bench, index_seconds: float) -> NearestJoinResult:
    count = NEAREST_QUERIES
    path = b.path("nearest_queries.parquet")
    query_vectors(b, count, first=10_000).write.mode("overwrite").parquet(path)
    table = LanceTable.forPath(b.spark, b.path(ML_LANCE))

    def joined() -> DataFrame:
        queries = b.spark.read.parquet(path)
        return table.nearest(
            queries, column="embedding", k=NEAREST_K, query_column="query", columns=["id"]
        )

    log(f"nearest-neighbour join of {count} queries: warm-up")
    found: dict[int, set[int]] = {}
    for r in joined().select("query_id", "id").collect():
        found.setdefault(r["query_id"], set()).add(r["id"])
    local = b.spark.read.parquet(path).orderBy("query_id").collect()
    exact = exact_neighbours(
        b.path(ML_LANCE), np.array([r["query"] for r in local], dtype=np.float32), NEAREST_K
    )
    recall = statistics.mean(
        len(found.get(r["query_id"], set()) & want) / len(want)
        for r, want in zip(local, exact, strict=True)
    )
    seconds = []
    for _ in range(b.runs):
        start = time.perf_counter()
        joined().write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - start)
    result = NearestJoinResult(count, NEAREST_K, b.ml_rows, index_seconds, tuple(seconds), recall)
    log(
        f"nearest-neighbour join: {result.median:.3f} s, {result.queries_per_second:.0f} "
        f"queries/s, recall@{NEAREST_K} {recall:.3f}"
    )
    return result


def run_cases(
    b: Bench,
) -> tuple[tuple[CaseResult, ...], tuple[MemoryResult, ...], NearestJoinResult]:
    memory: list[MemoryResult] = []
    cases: tuple[CaseResult, ...] = (
        case_full_scan(b),
        case_projection(b),
        case_filter_no_index(b),
        case_filter_btree(b),
        case_point_lookup(b),
        case_count_rows(b),
        case_old_version(b),
        case_append(b, memory),
        case_overwrite(b, memory),
        case_merge(b),
        case_merge_sql(b),
        case_update(b),
        case_update_sql(b),
        case_delete(b),
        case_delete_sql(b),
        case_merge_tiny(b),
        case_ml_count(b),
        case_ml_group_by(b),
        case_ml_limit(b),
        case_ml_distinct(b),
        case_ml_full_scan(b),
        case_ml_key_lookup(b),
        case_ml_broadcast_join(b),
        case_stream_sink(b),
        case_change_feed(b),
    )
    index_seconds = build_vector_index(b)
    cases += (case_vector_search(b),)
    nearest = case_nearest_join(b, index_seconds)
    for session in CACHED_SESSIONS:
        cached, cached_memory = cached_writes(b, session)
        cases += cached
        memory += cached_memory
    return cases, tuple(memory), nearest


def cached_writes(b: Bench, session: str) -> tuple[tuple[CaseResult, ...], list[MemoryResult]]:
    """The cached DataFrame writes in a ``session`` of their own: a process started without
    the repository's conf (SPARK_CONF_DIR), because a session's settings are fixed when its
    JVM starts (benchmarks/cached_writes.py)."""
    log(f"cached DataFrame writes, {session} session (a process of its own)")
    out = b.root / f"cached-{session}.json"
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    command = [
        sys.executable,
        "-m",
        "benchmarks.cached_writes",
        f"--session={session}",
        f"--rows={b.rows}",
        f"--ml-rows={max(MIN_ROWS, b.ml_rows // 4)}",
        f"--runs={b.runs}",
        f"--json={out}",
        f"--work-dir={b.root}",
    ]
    subprocess.run(command, check=True, cwd=REPO, env=env)
    data = json.loads(out.read_text(encoding="utf-8"))
    cases = tuple(
        CaseResult(
            name=c["name"],
            lance_seconds=tuple(c["lance_seconds"]),
            baseline_seconds=tuple(c["baseline_seconds"]),
            baseline=c["baseline"],
        )
        for c in data["cases"]
    )
    for case in cases:
        log(
            f"{case.name}: lance {case.lance_median:.4f} s, {case.baseline} "
            f"{case.baseline_median:.4f} s, ratio {case.ratio_median:.3f}"
        )
    return cases, [MemoryResult(**m) for m in data["memory"]]


# --- the machine ----------------------------------------------------------------------------


def _proc_value(path: str, key: str) -> str | None:
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def java_version() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else "java"
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"unknown ({err})"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return " / ".join(line.strip() for line in lines[:2]) or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe_machine() -> Machine:
    mem_kib = (_proc_value("/proc/meminfo", "MemTotal") or "0 kB").split()[0]
    return Machine(
        cpu_model=_proc_value("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        cores=os.cpu_count() or 0,
        memory_gib=int(mem_kib) / (1024 * 1024),
        os=platform.platform(),
        python=platform.python_version(),
        java=java_version(),
        pyspark=_version("pyspark"),
        pylance=_version("pylance"),
        pyarrow=_version("pyarrow"),
    )


# --- Markdown -------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:.4f}"


def _ratio(value: float) -> str:
    return f"{value:.3f}"


def _case_row(case: CaseResult) -> str:
    target = "—" if case.target is None else f"<= {case.target}"
    holds = {None: "— (no target)", True: "yes", False: "**no**"}[case.holds]
    cells = (
        case.name,
        _seconds(case.lance_median),
        case.baseline,
        _seconds(case.baseline_median),
        _ratio(case.ratio_median),
        target,
        holds,
    )
    return "| " + " | ".join(cells) + " |"


def _runs_row(case: CaseResult) -> str:
    def joined(values: Sequence[float], fmt: Callable[[float], str]) -> str:
        return ", ".join(fmt(v) for v in values)

    cells = (
        case.name,
        joined(case.lance_seconds, _seconds),
        joined(case.baseline_seconds, _seconds),
        joined(case.ratios, _ratio),
    )
    return "| " + " | ".join(cells) + " |"


def _memory_row(m: MemoryResult) -> str:
    if not m.measured:
        workers = peak = total = cpu = "not measured (no /proc)"
    elif m.active_workers == 0:
        workers, cpu = "0", f"{m.worker_cpu_seconds:.2f}"
        peak = total = "— (no Python worker ran)"
    else:
        workers, cpu = str(m.active_workers), f"{m.worker_cpu_seconds:.2f}"
        peak, total = f"{m.peak_worker_mib:.1f}", f"{m.peak_total_mib:.1f}"
    return "| " + " | ".join((m.write, str(m.writes), workers, peak, total, cpu)) + " |"


def render(report: Report) -> str:
    m, d, ml = report.machine, report.data, report.ml_data
    lines = [
        "# Benchmarks: the `lance` data source vs Spark's Parquet",
        "",
        f"Generated by `benchmarks/run.py` on {report.date}.",
        "",
        "```bash",
        report.command,
        "```",
        "",
        "## Machine",
        "",
        f"- CPU: {m.cpu_model}, {m.cores} cores (`os.cpu_count()`)",
        f"- Memory: {m.memory_gib:.1f} GiB (`MemTotal`)",
        f"- OS: {m.os}",
        f"- Python {m.python}; Java: {m.java}",
        f"- pyspark {m.pyspark}, pylance {m.pylance}, pyarrow {m.pyarrow}",
        f"- Spark master `{report.master}`, one session for every case; its settings that "
        "matter here (from `conf/spark-defaults.conf`, see docs/configuration.md, recommended settings):",
        *(f"  - `{key}` = `{value}`" for key, value in report.settings),
        "",
        "## Data",
        "",
        f"{d.rows:,} rows: `id` bigint (0 .. rows-1), `x` double, `label` string "
        f"({LABEL_COUNT} values), `vector` {VECTOR_SIZE} floats (a Lance `fixed_size_list`, "
        "a Parquet `array<float>`), generated deterministically from `id` by Spark. "
        f"Lance: {d.lance_fragments} fragments, {d.lance_mib:.1f} MiB; "
        f"Parquet: {d.parquet_files} files, {d.parquet_mib:.1f} MiB.",
        "",
        f"The ML cases (`ML:`) read another table, the shape of a training set: "
        f"{ml.rows:,} rows of `id` bigint, `key` string (16 hex characters of a hash of `id`: "
        f"unique and unsorted), `x` double, `label` string ({ML_LABELS} values) and "
        f"`embedding` {ML_EMBEDDING_SIZE} floats ({ML_LATENT} latent factors mixed into "
        f"{ML_EMBEDDING_SIZE} dimensions plus noise: a low intrinsic dimension, as learned "
        f"embeddings have). Lance: {ml.lance_fragments} fragments, "
        f"{ml.lance_mib:.1f} MiB, a BTREE index on `key`; Parquet: {ml.parquet_files} files, "
        f"{ml.parquet_mib:.1f} MiB. Plain DataFrame code, the same on both sides: no "
        "`columns` option, no table API.",
        "",
        "## Method",
        "",
        f"For each case: one warm-up run of each side, then {report.runs} runs of each, "
        "alternating which side goes first (Lance first on even runs, the baseline first on "
        "odd ones). Wall-clock time with `time.perf_counter` around the action only; "
        "restoring mutated tables happens outside it. The ratio is the median over runs of "
        "(Lance time / baseline time of the same run); a target holds when that median is at "
        "most the target. Every query builds a fresh DataFrame.",
        "",
    ]
    lines += [f"- **{name}**: {METHODS[name]}" for name in CASE_NAMES if name in METHODS]
    lines += [f"- **cached DataFrame writes**: {CACHED_METHOD}"]
    lines += [
        "",
        "## Results",
        "",
        "| case | Lance median (s) | baseline | baseline median (s) | median ratio | target | holds |",
        "| --- | ---: | --- | ---: | ---: | --- | --- |",
        *(_case_row(case) for case in report.cases),
        "",
        *_stream_rate(report),
        "### Every run (s)",
        "",
        "| case | Lance | baseline | ratio |",
        "| --- | --- | --- | --- |",
        *(_runs_row(case) for case in report.cases),
        "",
        *_nearest_section(report.nearest),
        "## Peak memory of the Python workers during writes",
        "",
        "Spark's Python worker processes (below the driver's JVM, command line "
        "`pyspark.daemon` / `pyspark.worker`), sampled from /proc every 50 ms during every "
        "write of the append and overwrite cases (warm-up included). Only workers whose CPU "
        "time grew during a write count: the planning, writing and committing workers of a "
        "Lance write, not idle ones left by earlier queries, nor the daemons that fork them. "
        "RSS includes the pages a worker shares with the daemon it was forked from, so the "
        "sum overstates the total. Spark's "
        "Parquet writer runs in the JVM; that no Python worker runs for it is measured, not "
        "assumed (see its worker CPU).",
        "",
        "| write | writes | workers active (max per write) | peak RSS, one worker (MiB) "
        "| peak RSS, sum of active workers (MiB) | worker CPU, all writes (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *(_memory_row(mem) for mem in report.memory),
        "",
        *_where_the_time_goes(),
    ]
    return "\n".join(lines)


def _stream_rate(report: Report) -> list[str]:
    """The streaming sink case in rows per second (rows/10 rows per run, medians)."""
    stream = next((c for c in report.cases if c.name == STREAM_SINK), None)
    if stream is None:
        return []
    rows = max(1, report.data.rows // 10)
    return [
        f"Streaming sink throughput ({rows:,} rows per run, from the medians): Lance "
        f"{rows / max(stream.lance_median, 1e-9):,.0f} rows/s, Parquet "
        f"{rows / max(stream.baseline_median, 1e-9):,.0f} rows/s.",
        "",
    ]


def _nearest_section(n: NearestJoinResult) -> list[str]:
    return [
        "## Nearest-neighbour join",
        "",
        f'`LanceTable.nearest(queries, column="embedding", k={n.k}, query_column="query", '
        'columns=["id"])` of '
        f"{n.queries:,} query vectors (new points of the embeddings' distribution, read from "
        f"Parquet) against the {n.table_rows:,}-row ML table with its IVF_PQ index "
        f"({', '.join(f'{k}={v}' for k, v in vector_index_params(n.table_rows).items())}, "
        f"built in {n.index_seconds:.1f} s), written to the `noop` sink; the median of "
        f"{len(n.seconds)} runs after a warm-up. Recall@{n.k}: the share of each query's exact "
        f"{n.k} nearest rows (numpy over the table read by pylance) that the join returned, "
        "averaged over the queries. There is no Spark baseline: an exact join computes "
        f"{n.queries:,} x {n.table_rows:,} distances.",
        "",
        "| queries | k | table rows | median (s) | query rows per second | recall@k | runs (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        f"| {n.queries:,} | {n.k} | {n.table_rows:,} | {_seconds(n.median)} | "
        f"{n.queries_per_second:,.0f} | {n.recall:.3f} | "
        f"{', '.join(_seconds(x) for x in n.seconds)} |",
        "",
    ]


ANALYSIS = Path(__file__).with_name("WHERE_THE_TIME_GOES.md")


def _where_the_time_goes() -> list[str]:
    """The profile write-up kept next to the harness (its numbers come from
    ``python -m benchmarks.profile``), so a new run keeps it."""
    if not ANALYSIS.exists():
        return ["## Where the time goes", "", "_To be filled from profiles._", ""]
    return [ANALYSIS.read_text().rstrip(), ""]


# --- entry point ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Side-by-side benchmark of the lance data source against Spark's Parquet.",
    )
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows (default 5000000)")
    parser.add_argument("--runs", type=int, default=7, help="measured runs per side (default 7)")
    parser.add_argument(
        "--ml-rows", type=int, default=1_000_000, help="rows of the ML table (default 1000000)"
    )
    parser.add_argument("--out", default="BENCHMARKS.md", help="Markdown report to write")
    parser.add_argument(
        "--work-dir", default=None, help="where the tables go (a fresh directory inside it)"
    )
    parser.add_argument("--keep-data", action="store_true", help="keep the tables afterwards")
    args = parser.parse_args(argv)
    if args.rows < MIN_ROWS:
        parser.error(f"--rows must be at least {MIN_ROWS}")
    if args.ml_rows < MIN_ROWS:
        parser.error(f"--ml-rows must be at least {MIN_ROWS}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def start_spark() -> SparkSession:
    """The CLI's own ``local[2]`` session, with the repository's Spark conf."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))
    spark = SparkSession.builder.master("local[2]").appName("lance_spark-benchmark").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_benchmark(
    spark: SparkSession, rows: int, runs: int, root: Path, command: str, ml_rows: int
) -> Report:
    lance_spark.register(spark)
    bench = Bench(
        spark=spark,
        rows=rows,
        runs=runs,
        root=root,
        partitions=max(1, int(spark.sparkContext.defaultParallelism)),
        ml_rows=ml_rows,
    )
    data = prepare(bench)
    ml_data = prepare_ml(bench)
    cases, memory, nearest = run_cases(bench)
    return Report(
        command=command,
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        runs=runs,
        master=str(spark.sparkContext.master),
        machine=describe_machine(),
        data=data,
        ml_data=ml_data,
        cases=cases,
        memory=memory,
        nearest=nearest,
        settings=session_settings(spark),
    )


def work_root(work_dir: str | Path | None, what: str) -> Path:
    """A fresh folder for a benchmark's tables under ``work_dir`` (made if missing; None: the
    system's temporary directory)."""
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"lance_spark_{what}_", dir=work_dir))


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    """Run the benchmark and write the report; ``spark``: use this session (not stopped)."""
    args = parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.run", *(sys.argv[1:] if argv is None else argv)]
    )
    root = work_root(args.work_dir, "bench")
    session = spark if spark is not None else start_spark()
    try:
        report = run_benchmark(session, args.rows, args.runs, root, command, args.ml_rows)
    finally:
        if spark is None:
            session.stop()
        if not args.keep_data:
            shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    # The sections other scripts write (make bench-scale) stay.
    out.write_text(sections.keep(old, render(report)), encoding="utf-8")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
