"""ML datasets at scale: distributed index builds, index upkeep, blob columns and column
backfills, each against the baseline a user would otherwise reach for.

``python -m benchmarks.ml_scale --out BENCHMARKS.md`` (run by ``make bench`` after
``benchmarks.run``) builds its tables (with pylance where the table is only the input, through
Spark where writing is part of the case), times the connector through one ``local[2]`` Spark
session and the baselines in the same process, and writes its section into ``--out`` between
the markers of :mod:`benchmarks.sections` (the rest of the file is kept).

Cases:

1. **BTREE build**: ``LanceTable.createIndex("id", "BTREE")`` (a Spark job) vs pylance's
   ``create_scalar_index("id", "BTREE")`` on the driver, on identical copies of a table of
   ``--btree-rows`` int64 ids (a fixed permutation, so the build's sort has work to do); and
   the peak RSS of the Python driver process during the connector's build at full size vs at
   1/10 of the rows.
2. **IVF_PQ build** on ``--vector-rows`` x ``--dim`` float32 vectors of low intrinsic
   dimension (LATENT factors mixed into ``--dim``, plus a little noise): the connector's
   ``createIndex`` vs pylance's ``create_index``, identical copies; the connector's time
   split into training on the driver, the Spark job and the commit.
3. **optimizeIndices** after appending 10% new rows, vs a full rebuild; top-10 recall
   (against exact brute force) and search latency before the append, with the unindexed
   tail, and after ``optimizeIndices``.
4. **Blob column**: a Spark scan of the other columns of a table with an image blob column
   vs the same table without it; fetching 100 random rows with their images by id through
   the connector's filter vs Parquet's; ``LanceTable.blobs`` as an extra row.
5. **updateColumns vs MERGE**: recompute one column of every row of a wide table.

``--cases btree,ivf_pq,blob,backfill`` (the default: all) runs a subset (``ivf_pq`` covers
cases 2 and 3, ``blob`` case 4, ``backfill`` case 5); the section written then holds only
those.

``--cluster`` (``make bench`` passes it) then runs the builds of cases 1 and 2 (those among
``--cases``) again on a Spark standalone cluster on 127.0.0.1 with the same 2 cores (a master
and two 1-core workers, :mod:`benchmarks.spark_cluster`, the tests' cluster), started once the
``local[2]`` session has stopped and stopped at the end; the driver stays in this process, so
the pylance baselines (run again) and the driver RSS are measured as on ``local[2]``. Their
rows go into the same section, named with the suffix ", standalone cluster".
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import lance
import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import lance_spark
from benchmarks import sections, spark_cluster
from benchmarks.run import MIB, describe_machine, jvm_pid, log, start_spark, work_root
from lance_spark import LanceTable

BTREE_ROWS = 20_000_000
VECTOR_ROWS = 2_000_000
DIM = 128
PARTITIONS = 256
SUB_VECTORS = 16
IMAGES = 20_000
IMAGE_KB = 100
BACKFILL_ROWS = 1_000_000
BACKFILL_IMAGE_KB = 2
BACKFILL_DIM = 128
QUERIES = 200
SEARCH_PASSES = 3
LOOKUPS = 100
K = 10
NPROBES = 20
REFINE = 10
# The vectors have a low intrinsic dimension, as learned embeddings do (and as the ML table of
# benchmarks/run.py): LATENT factors uniform in [0, 1) mixed into ``dim`` dimensions by a fixed
# random matrix, plus NOISE per dimension. (Gaussian noise around centres in 128 dimensions
# makes a query's 10 nearest rows all about equally far: recall@10 then measures nothing.)
LATENT = 8
MIXING_SEED = 20261124
NOISE = 0.01
QUERY_JITTER = 0.01  # a query: an existing row's latent factors moved by this much (sigma)
QUERY_SEED = 10**9
ROWS_PER_FILE = 250_000
CHUNK = 100_000
SAMPLE_INTERVAL = 0.02
# The blob table's scan (sub-second jobs): warm-up scans per side, scans per timed run.
SCAN_WARMUP = 10
SCAN_REPEAT = 6
SCAN_RUNS = 9
PERMUTE = 2_147_483_647  # a prime: i -> i * PERMUTE % n permutes 0..n-1 when n is coprime

BTREE = "BTREE build"
BTREE_RSS = "BTREE build: peak driver RSS, full vs 1/10 rows"
IVF_PQ = "IVF_PQ build"
OPTIMIZE = "optimizeIndices after +10% rows vs full rebuild"
RECALL = "recall after optimizeIndices vs fully indexed (difference)"
LATENCY = "search latency after optimizeIndices vs fully indexed"
BLOB_SCAN = "scan of the other columns, blob table vs table without images"
BLOB_LOOKUP = "100 random rows with their images by id"
BLOB_FILES = "LanceTable.blobs(where=id IN 100 ids), each read fully"
BACKFILL = "updateColumns vs MERGE (score of every row)"
CASE_NAMES = (
    BTREE,
    BTREE_RSS,
    IVF_PQ,
    OPTIMIZE,
    RECALL,
    LATENCY,
    BLOB_SCAN,
    BLOB_LOOKUP,
    BLOB_FILES,
    BACKFILL,
)
CASES = ("btree", "ivf_pq", "blob", "backfill")  # --cases: what each name runs, in order
# --cluster: the builds again, on a Spark standalone cluster (rows named with this suffix).
CLUSTER_SUFFIX = ", standalone cluster"
CLUSTER_CASES = ("btree", "ivf_pq")
CLUSTER_CASE_NAMES = tuple(n + CLUSTER_SUFFIX for n in (BTREE, BTREE_RSS, IVF_PQ))
TARGETS: dict[str, float | None] = {
    BTREE: 1.0,
    BTREE_RSS: 1.5,
    IVF_PQ: 1.0,
    OPTIMIZE: 0.2,
    RECALL: 0.02,
    LATENCY: 1.2,
    BLOB_SCAN: 1.1,
    BLOB_LOOKUP: 0.2,
    BLOB_FILES: None,
    BACKFILL: 0.2,
}
TARGETS.update({n + CLUSTER_SUFFIX: TARGETS[n] for n in (BTREE, BTREE_RSS, IVF_PQ)})


@dataclass(frozen=True)
class Row:
    """One line of the report: ours, the baseline's, their ratio (ours / baseline)."""

    name: str
    ours: float
    baseline_name: str
    baseline: float
    unit: str = "s"
    runs: int = 1
    ratio_override: float | None = None  # a difference rather than a ratio (recall)

    @property
    def ratio(self) -> float:
        if self.ratio_override is not None:
            return self.ratio_override
        return self.ours / self.baseline if self.baseline > 0 else float("inf")

    @property
    def target(self) -> float | None:
        return TARGETS[self.name]

    @property
    def holds(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- timing and memory ------------------------------------------------------------------------


def once(name: str, run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    log(f"{name}: {seconds:.3f} s")
    return seconds


def paired(
    name: str, ours: Callable[[], object], baseline: Callable[[], object], runs: int
) -> tuple[float, float]:
    """A warm-up of each, then ``runs`` rounds alternating which goes first; medians."""
    ours()
    baseline()
    a: list[float] = []
    b: list[float] = []
    for run in range(runs):
        order = [(ours, a), (baseline, b)]
        for action, into in order if run % 2 == 0 else reversed(order):
            start = time.perf_counter()
            action()
            into.append(time.perf_counter() - start)
    log(f"{name}: ours {a}, baseline {b}")
    return statistics.median(a), statistics.median(b)


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


@dataclass
class Peak:
    """Peak RSS of processes sampled every SAMPLE_INTERVAL seconds while :func:`peak_rss`
    runs, and each one's RSS when it began."""

    start: dict[int, int] = field(default_factory=dict)
    peak: dict[int, int] = field(default_factory=dict)


@contextmanager
def peak_rss(pids: Sequence[int]) -> Iterator[Peak]:
    result = Peak({p: _rss(p) for p in pids}, {p: _rss(p) for p in pids})
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(SAMPLE_INTERVAL):
            for p in pids:
                result.peak[p] = max(result.peak[p], _rss(p))

    thread = threading.Thread(target=poll, name="ml-scale-rss", daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        for p in pids:
            result.peak[p] = max(result.peak[p], _rss(p))


# --- data ---------------------------------------------------------------------------------------


@dataclass
class Phases:
    """Seconds spent in the connector's driver-side steps of an index build."""

    train: float = 0.0
    commit: float = 0.0


@contextmanager
def driver_phases() -> Iterator[Phases]:
    """Time ``index_builds.train`` (the vector model, trained on the driver) and
    ``index_builds.commit_build`` while the block runs, by wrapping them in this process."""
    from lance_spark.source import index_builds

    phases = Phases()
    originals: dict[str, Callable[..., Any]] = {
        "train": index_builds.train,
        "commit": index_builds.commit_build,
    }

    def timed(key: str) -> Callable[..., Any]:
        original = originals[key]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                setattr(phases, key, getattr(phases, key) + time.perf_counter() - start)

        return wrapper

    index_builds.train = timed("train")
    index_builds.commit_build = timed("commit")
    try:
        yield phases
    finally:
        index_builds.train = originals["train"]
        index_builds.commit_build = originals["commit"]


def _reader(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(schema, batches)


def write_ids(uri: str, rows: int) -> None:
    """``rows`` int64 ids, a fixed permutation of 0..rows-1, in chunks."""
    schema = pa.schema([pa.field("id", pa.int64())])
    step = PERMUTE if rows % PERMUTE else 1

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, rows, CHUNK * 10):
            i = np.arange(start, min(rows, start + CHUNK * 10), dtype=np.int64)
            yield pa.record_batch([pa.array(i * step % rows)], schema=schema)

    lance.write_dataset(_reader(schema, batches()), uri)


def mixing(dim: int) -> np.ndarray:
    """The fixed LATENT x ``dim`` matrix that maps latent factors to vectors."""
    return np.random.default_rng(MIXING_SEED).normal(0.0, 1.0, (LATENT, dim))


def latent(first: int, count: int) -> np.ndarray:
    """The latent factors of rows ``first`` to ``first + count`` (a chunk: seeded by its
    first id, so a chunk is the same every time and can be drawn again alone)."""
    return np.random.default_rng([MIXING_SEED, first]).random((count, LATENT))


def embed(factors: np.ndarray, mix: np.ndarray, seed: Sequence[int]) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0.0, NOISE, (len(factors), mix.shape[1]))
    vectors: np.ndarray = (factors @ mix + noise).astype(np.float32)
    return vectors


def chunk_vectors(first: int, count: int, mix: np.ndarray) -> np.ndarray:
    return embed(latent(first, count), mix, [MIXING_SEED, first, 1])


def query_vectors(rows: int, count: int, mix: np.ndarray) -> np.ndarray:
    """``count`` queries: perturbed copies of random rows among the first ``rows`` (their
    latent factors jittered by QUERY_JITTER, fresh noise); each row's chunk drawn again."""
    rng = np.random.default_rng(QUERY_SEED)
    picked = np.sort(rng.choice(rows, size=min(count, rows), replace=False))
    factors = np.empty((len(picked), LATENT))
    for n, row in enumerate(picked.tolist()):
        first = row - row % CHUNK
        factors[n] = latent(first, min(CHUNK, rows - first))[row - first]
    factors += rng.normal(0.0, QUERY_JITTER, factors.shape)
    return embed(factors, mix, [QUERY_SEED, 1])


def _fixed(values: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), values.shape[1])


def write_vectors(uri: str, start: int, rows: int, mix: np.ndarray, *, append: bool) -> None:
    """Rows ``start`` to ``start + rows`` of (id int64, v fixed_size_list<float32>[dim]),
    generated and written in chunks (the generator never holds the table)."""
    dim = mix.shape[1]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.list_(pa.float32(), dim))])

    def batches() -> Iterator[pa.RecordBatch]:
        for first in range(start, start + rows, CHUNK):
            n = min(CHUNK, start + rows - first)
            ids = pa.array(np.arange(first, first + n, dtype=np.int64))
            yield pa.record_batch([ids, _fixed(chunk_vectors(first, n, mix))], schema=schema)

    lance.write_dataset(
        _reader(schema, batches()),
        uri,
        mode="append" if append else "create",
        max_rows_per_file=ROWS_PER_FILE,
    )


def exact_top_k(uri: str, queries: np.ndarray, k: int) -> list[set[int]]:
    """The ids of each query's k nearest rows (squared L2), by brute force in chunks."""
    best_d = np.full((len(queries), 0), np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    q_norm = (queries**2).sum(axis=1)
    for batch in lance.dataset(uri).to_batches(columns=["id", "v"], batch_size=CHUNK):
        ids = batch.column("id").to_numpy()
        flat = batch.column("v").values.to_numpy(zero_copy_only=False)
        x = flat.reshape(len(ids), queries.shape[1])
        d = q_norm[:, None] - 2.0 * (queries @ x.T) + (x**2).sum(axis=1)[None, :]
        all_d = np.concatenate([best_d, d.astype(np.float32)], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(ids, d.shape)], axis=1)
        if all_d.shape[1] <= k:
            keep = np.argsort(all_d, axis=1)
        else:
            keep = np.argpartition(all_d, k - 1, axis=1)[:, :k]
        best_d = np.take_along_axis(all_d, keep, axis=1)
        best_i = np.take_along_axis(all_i, keep, axis=1)
    return [set(row.tolist()) for row in best_i]


@dataclass(frozen=True)
class SearchFigures:
    recall: float
    median_ms: float


def search(
    uri: str, queries: np.ndarray, states: Mapping[str, tuple[int, list[set[int]]]]
) -> dict[str, SearchFigures]:
    """Top-K of each query through pylance with the index (nprobes, refine_factor fixed) on
    each of ``states`` (name: the table's version and each query's true top-K): a warm-up
    pass over every state, then SEARCH_PASSES timed passes that take each query on every
    state in turn, so load on the machine falls on all states alike. Recall against the
    truth, the median latency of all timed searches of a state."""
    opened = {name: lance.dataset(uri, version=v) for name, (v, _) in states.items()}

    def one(ds: lance.LanceDataset, q: np.ndarray) -> set[int]:
        nearest = {"column": "v", "q": q, "k": K, "nprobes": NPROBES, "refine_factor": REFINE}
        found = ds.to_table(columns=["id", "_distance"], nearest=nearest)
        return set(found.column("id").to_pylist())

    for ds in opened.values():
        for q in queries:
            one(ds, q)
    latencies: dict[str, list[float]] = {name: [] for name in states}
    hits = dict.fromkeys(states, 0)
    for _ in range(SEARCH_PASSES):
        for n, q in enumerate(queries):
            for name, ds in opened.items():
                start = time.perf_counter()
                found = one(ds, q)
                latencies[name].append(time.perf_counter() - start)
                hits[name] += len(found & states[name][1][n])
    return {
        name: SearchFigures(
            hits[name] / (K * len(queries) * SEARCH_PASSES),
            statistics.median(latencies[name]) * 1000,
        )
        for name in states
    }


def index_rows(spark: SparkSession, uri: str, name: str) -> tuple[int, int]:
    """(indexed, unindexed) rows of index ``name`` as listIndices reports them."""
    row = LanceTable.forPath(spark, uri).listIndices().where(F.col("name") == name).collect()
    if len(row) != 1:
        raise AssertionError(f"{uri}: no index {name!r}")
    return int(row[0]["numIndexedRows"]), int(row[0]["numUnindexedRows"])


def expect_covered(spark: SparkSession, uri: str, name: str) -> None:
    rows = lance.dataset(uri).count_rows()
    indexed, unindexed = index_rows(spark, uri, name)
    if (indexed, unindexed) != (rows, 0):
        raise AssertionError(f"{uri}: {name} covers {indexed} rows ({unindexed} not), of {rows}")


def expect_pylance_covered(uri: str, name: str) -> None:
    ds = lance.dataset(uri)
    stats = ds.stats.index_stats(name)
    if stats["num_indexed_rows"] != ds.count_rows() or stats["num_unindexed_rows"] != 0:
        raise AssertionError(f"{uri}: pylance's {name}: {stats}")


def index_segments(uri: str, name: str) -> int:
    """How many segments index ``name`` has in the table's latest version."""
    return sum(len(d.segments) for d in lance.dataset(uri).describe_indices() if d.name == name)


# --- cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """Where the connector's side of a case runs: the suffix of its rows' names and titles,
    and how the notes describe it."""

    suffix: str = ""
    spark: str = "Spark `local[2]`"
    local: bool = True


LOCAL = Where()
CLUSTER_WORKERS = 2
CLUSTER_CORES = 1  # per worker: the same 2 cores as local[2]
CLUSTER_MEMORY = "2g"  # per worker, and its executor's heap
CLUSTER = Where(
    suffix=CLUSTER_SUFFIX,
    spark=(
        f"a Spark standalone cluster on 127.0.0.1: a master and {CLUSTER_WORKERS} workers of "
        f"{CLUSTER_CORES} core, one executor of {CLUSTER_MEMORY} heap each, the driver in the "
        "benchmark's process"
    ),
    local=False,
)


def case_btree(spark: SparkSession, root: Path, rows: int, where: Where = LOCAL) -> Section:
    ours_uri, theirs_uri, tenth_uri = (str(root / f"btree_{n}.lance") for n in ("a", "b", "c"))
    started = time.perf_counter()
    write_ids(ours_uri, rows)
    shutil.copytree(ours_uri, theirs_uri)
    write_ids(tenth_uri, max(1, rows // 10))
    log(f"btree tables written in {time.perf_counter() - started:.1f} s")
    pids = [os.getpid(), jvm_pid(spark)]

    def build(uri: str) -> Callable[[], None]:
        return lambda: LanceTable.forPath(spark, uri).createIndex("id", "BTREE")

    # The 1/10 build first (it also warms the session's workers), then the full one.
    with peak_rss(pids) as tenth:
        once("BTREE build, 1/10 rows", build(tenth_uri))
    with peak_rss(pids) as full:
        ours = once("BTREE build, connector", build(ours_uri))
    theirs = once(
        "BTREE build, pylance",
        lambda: lance.dataset(theirs_uri).create_scalar_index("id", "BTREE"),
    )
    expect_covered(spark, ours_uri, "id_idx")
    expect_covered(spark, tenth_uri, "id_idx")
    expect_pylance_covered(theirs_uri, "id_idx")
    py, jvm = pids
    section = Section(f"BTREE build, {rows:,} int64 rows{where.suffix}")
    section.rows += [
        Row(BTREE + where.suffix, ours, "pylance create_scalar_index", theirs),
        Row(
            BTREE_RSS + where.suffix,
            full.peak[py] / MIB,
            "1/10 rows",
            tenth.peak[py] / MIB,
            unit="MiB",
        ),
    ]
    section.notes += [
        f"The table: one int64 column `id`, a fixed permutation of 0..{rows - 1:,} "
        f"({len(lance.dataset(ours_uri).get_fragments())} fragments); each side builds on "
        "its own identical copy, one measured run each. Ours: "
        f"`LanceTable.forPath(spark, p).createIndex('id', 'BTREE')` ({where.spark}); "
        "pylance: `lance.dataset(p).create_scalar_index('id', 'BTREE')` in the benchmark's "
        "(driver) process. Both indexes are checked to cover every row.",
        "Peak driver RSS: the resident set of the benchmark's Python process (the PySpark "
        f"driver), sampled from /proc every {SAMPLE_INTERVAL * 1000:.0f} ms during the "
        f"connector's build; full size {full.peak[py] / MIB:.0f} MiB (RSS before the build "
        f"{full.start[py] / MIB:.0f} MiB), 1/10 of the rows {tenth.peak[py] / MIB:.0f} MiB "
        f"(before {tenth.start[py] / MIB:.0f} MiB). Not included: the driver JVM"
        + (", which in `local` mode also hosts the executors" if where.local else "")
        + f" (peak {full.peak[jvm] / MIB:.0f} MiB full, {tenth.peak[jvm] / MIB:.0f} MiB "
        "1/10), and the Python workers that build the segments"
        + ("" if where.local else " (in the executors' processes)")
        + ".",
    ]
    for uri in (ours_uri, theirs_uri, tenth_uri):
        shutil.rmtree(uri, ignore_errors=True)
    return section


@dataclass(frozen=True)
class VectorArgs:
    rows: int
    dim: int
    partitions: int
    sub_vectors: int
    queries: int


def case_vectors(
    spark: SparkSession, root: Path, a: VectorArgs, where: Where = LOCAL, *, upkeep: bool = True
) -> list[Section]:
    """The IVF_PQ build, then (``upkeep``) optimizeIndices after an append and the search
    figures on the same table."""
    mix = mixing(a.dim)
    uri, theirs_uri = str(root / "vectors.lance"), str(root / "vectors_pylance.lance")
    started = time.perf_counter()
    write_vectors(uri, 0, a.rows, mix, append=False)
    shutil.copytree(uri, theirs_uri)
    fragments = len(lance.dataset(uri).get_fragments())
    log(f"vector tables written in {time.perf_counter() - started:.1f} s")
    params: dict[str, Any] = {"num_partitions": a.partitions, "num_sub_vectors": a.sub_vectors}
    table = LanceTable.forPath(spark, uri)
    with driver_phases() as phases:
        ours = once("IVF_PQ build, connector", lambda: table.createIndex("v", "IVF_PQ", **params))
    job = ours - phases.train - phases.commit
    log(
        f"IVF_PQ build, connector: train on the driver {phases.train:.1f} s, the rest "
        f"(planning, the Spark job) {job:.1f} s, commit {phases.commit:.2f} s"
    )
    theirs = once(
        "IVF_PQ build, pylance",
        lambda: lance.dataset(theirs_uri).create_index("v", "IVF_PQ", **params),
    )
    expect_covered(spark, uri, "v_idx")
    expect_pylance_covered(theirs_uri, "v_idx")
    shutil.rmtree(theirs_uri, ignore_errors=True)
    build = vector_build_section(a, where, fragments, ours, theirs, phases)
    if not upkeep:
        shutil.rmtree(uri, ignore_errors=True)
        return [build]

    queries = query_vectors(a.rows, a.queries, mix)
    before_truth = exact_top_k(uri, queries, K)
    versions = {"indexed": lance.dataset(uri).version}
    segments = {"build": index_segments(uri, "v_idx")}
    appended = max(1, a.rows // 10)
    write_vectors(uri, a.rows, appended, mix, append=True)
    versions["tail"] = lance.dataset(uri).version
    after_truth = exact_top_k(uri, queries, K)
    if index_rows(spark, uri, "v_idx") != (a.rows, appended):
        raise AssertionError(f"after the append: {index_rows(spark, uri, 'v_idx')}")
    optimize = once("optimizeIndices", lambda: table.optimizeIndices().collect())
    expect_covered(spark, uri, "v_idx")
    versions["optimized"] = lance.dataset(uri).version
    segments["optimized"] = index_segments(uri, "v_idx")
    rebuild = once(
        "IVF_PQ full rebuild", lambda: table.createIndex("v", "IVF_PQ", replace=True, **params)
    )
    expect_covered(spark, uri, "v_idx")
    versions["rebuilt"] = lance.dataset(uri).version
    segments["rebuilt"] = index_segments(uri, "v_idx")
    figures = search(
        uri,
        queries,
        {
            name: (v, before_truth if name == "indexed" else after_truth)
            for name, v in versions.items()
        },
    )
    indexed, tail, optimized, rebuilt = (figures[n] for n in versions)
    shutil.rmtree(uri, ignore_errors=True)

    upkeeps = Section(f"optimizeIndices after appending {appended:,} rows (10%)")
    upkeeps.rows += [
        Row(OPTIMIZE, optimize, "createIndex(replace=True)", rebuild),
        Row(
            RECALL,
            optimized.recall,
            "fully indexed",
            indexed.recall,
            unit="recall@10",
            ratio_override=max(0.0, indexed.recall - optimized.recall),
        ),
        Row(LATENCY, optimized.median_ms, "fully indexed", indexed.median_ms, unit="ms"),
    ]
    upkeeps.notes += [
        "Search figures (pylance `to_table(nearest=...)`, k=10, nprobes=20, refine_factor=10, "
        f"{a.queries} queries, each a perturbed copy of a random row of the first "
        f"{a.rows:,} (its latent factors moved by Gaussian noise sigma {QUERY_JITTER}, "
        "fresh per-dimension noise). The four states are versions of one table, opened side "
        f"by side: a warm-up pass over each, then {SEARCH_PASSES} timed passes that take each "
        "query on every state in turn (the median of all its searches per state); "
        "recall@10 against exact brute force over the table at that version):",
        "\n".join(
            [
                "| state | rows | index segments | recall@10 | median latency (ms) |",
                "|---|---:|---:|---:|---:|",
                f"| fully indexed, before the append | {a.rows:,} | {segments['build']} "
                f"| {indexed.recall:.3f} | {indexed.median_ms:.2f} |",
                f"| after the append (unindexed tail) | {a.rows + appended:,} "
                f"| {segments['build']} | {tail.recall:.3f} | {tail.median_ms:.2f} |",
                f"| after optimizeIndices | {a.rows + appended:,} | {segments['optimized']} "
                f"| {optimized.recall:.3f} | {optimized.median_ms:.2f} |",
                f"| after a full rebuild | {a.rows + appended:,} | {segments['rebuilt']} "
                f"| {rebuilt.recall:.3f} | {rebuilt.median_ms:.2f} |",
            ]
        ),
        "The recall row's ratio column is the recall lost (fully indexed minus after "
        "optimizeIndices, 0 when none), its target the tolerated loss; the latency row's is "
        "after / before (the table then had 10% fewer rows: against the rebuild of the same "
        f"rows it is {optimized.median_ms / rebuilt.median_ms:.2f}). optimizeIndices and the "
        "rebuild: one measured run each, on the same table (the rebuild after the optimize).",
    ]
    return [build, upkeeps]


def vector_build_section(
    a: VectorArgs, where: Where, fragments: int, ours: float, theirs: float, phases: Phases
) -> Section:
    job = ours - phases.train - phases.commit
    build = Section(f"IVF_PQ build, {a.rows:,} x {a.dim} float32{where.suffix}")
    build.rows.append(Row(IVF_PQ + where.suffix, ours, "pylance create_index", theirs))
    build.notes.append(
        f"Vectors of intrinsic dimension {LATENT}: {LATENT} latent factors uniform in [0, 1) "
        f"mixed into {a.dim} dimensions by a fixed random Gaussian matrix, plus noise sigma "
        f"{NOISE} per dimension (deterministic, seeded per chunk), written "
        f"with pylance in chunks of {CHUNK:,} rows, {ROWS_PER_FILE:,} rows per file "
        f"({fragments} fragments). `createIndex('v', 'IVF_PQ', num_partitions={a.partitions}, "
        f"num_sub_vectors={a.sub_vectors})` ({where.spark}) vs pylance's `create_index` "
        "in the benchmark's (driver) process with the same "
        "parameters on an identical copy; one measured run each; both checked to cover "
        "every row.",
    )
    build.notes.append(
        f"Where the connector's {ours:.1f} s go: training the IVF centroids and PQ codebooks "
        f"on the driver {phases.train:.1f} s ({phases.train / ours:.0%}), the rest of the "
        f"call (planning and the Spark job whose tasks assign and encode the rows and write "
        f"the segments) {job:.1f} s, committing the segments {phases.commit:.2f} s; "
        "measured by timing `lance_spark.source.index_builds.train` and `commit_build` in "
        "the benchmark (driver) process."
    )
    return build


def image_frame(spark: SparkSession, count: int, size: int, *, images: bool = True) -> DataFrame:
    """``count`` rows (id long, label string, image binary of ``size`` random bytes, the same
    for an id every time), generated in the Python workers."""

    def generate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            ids = batch.column(0).to_numpy()
            labels = pa.array([f"label_{i % 10}" for i in ids.tolist()])
            columns: list[pa.Array] = [batch.column(0), labels]
            if images:
                data = [np.random.default_rng(i).bytes(size) for i in ids.tolist()]
                columns.append(pa.array(data, pa.binary()))
            names = ["id", "label", "image"][: len(columns)]
            yield pa.record_batch(columns, names=names)

    schema = "id long, label string" + (", image binary" if images else "")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    parts = max(2, count // 2_000)
    return spark.range(0, count, numPartitions=parts).mapInArrow(generate, schema)


@dataclass(frozen=True)
class Layout:
    """How a table is stored and scanned: fragments, data files (and their bytes), blob files
    (and their bytes), and the Spark partitions of a scan of it."""

    fragments: int
    data_files: int
    data_bytes: int
    blob_files: int
    blob_bytes: int
    partitions: int


def table_layout(spark: SparkSession, uri: str) -> Layout:
    ds = lance.dataset(uri)
    fragments = ds.get_fragments()
    data = Path(uri) / "data"
    files = [f for f in data.iterdir() if f.is_file()]
    blobs = [f for d in data.iterdir() if d.is_dir() for f in d.rglob("*") if f.is_file()]
    scan = spark.read.format("lance").load(uri).select("id", "label")
    return Layout(
        fragments=len(fragments),
        data_files=sum(len(f.data_files()) for f in fragments),
        data_bytes=sum(f.stat().st_size for f in files),
        blob_files=len(blobs),
        blob_bytes=sum(f.stat().st_size for f in blobs),
        partitions=scan.rdd.getNumPartitions(),
    )


def _layout(layout: Layout) -> str:
    text = (
        f"{layout.fragments} fragments, {layout.data_files} data files of "
        f"{layout.data_bytes / 1024:,.0f} KiB in all"
    )
    if layout.blob_files:
        text += f" plus {layout.blob_files} blob files of {layout.blob_bytes / MIB:,.0f} MiB"
    return f"{text}, {layout.partitions} scan partitions"


@dataclass
class Moved:
    files: int = 0
    bytes: int = 0


@contextmanager
def blob_files_moved(uri: str, aside: Path) -> Iterator[Moved]:
    """The folders of blob files of table ``uri`` (``data/<data file>/``) moved to ``aside``
    (a rename: the same file system) while the block runs, then put back."""
    moved = Moved()
    done: list[tuple[Path, Path]] = []
    aside.mkdir(parents=True, exist_ok=True)
    try:
        for folder in sorted(p for p in (Path(uri) / "data").iterdir() if p.is_dir()):
            files = [f for f in folder.rglob("*") if f.is_file()]
            moved.files += len(files)
            moved.bytes += sum(f.stat().st_size for f in files)
            target = aside / folder.name
            folder.rename(target)
            done.append((target, folder))
        yield moved
    finally:
        for target, folder in reversed(done):
            target.rename(folder)
        aside.rmdir()


def repeated(
    name: str,
    ours: Callable[[], object],
    baseline: Callable[[], object],
    scans: ScanRuns,
) -> tuple[float, float, list[float], list[float]]:
    """``scans.warmup`` calls of each, then ``scans.runs`` runs of ``scans.repeat`` pairs of
    calls, each pair in the other order than the one before (ours-theirs, theirs-ours, ...:
    a drift of the machine or the JVM falls on both sides alike); a run's time per side is
    its mean. Returns the medians over the runs and every run's times."""
    for _ in range(scans.warmup):
        ours()
        baseline()
    a: list[float] = []
    b: list[float] = []
    flip = False
    for _ in range(scans.runs):
        spent = {id(ours): 0.0, id(baseline): 0.0}
        for _ in range(scans.repeat):
            for action in (baseline, ours) if flip else (ours, baseline):
                start = time.perf_counter()
                action()
                spent[id(action)] += time.perf_counter() - start
            flip = not flip
        a.append(spent[id(ours)] / scans.repeat)
        b.append(spent[id(baseline)] / scans.repeat)
    log(f"{name}: ours {[round(x, 3) for x in a]}, baseline {[round(x, 3) for x in b]}")
    return statistics.median(a), statistics.median(b), a, b


@dataclass(frozen=True)
class ScanRuns:
    """How the blob table's scan is timed (see :func:`repeated`)."""

    runs: int = SCAN_RUNS
    repeat: int = SCAN_REPEAT
    warmup: int = SCAN_WARMUP


def case_blobs(
    spark: SparkSession, root: Path, count: int, kb: int, runs: int, scans: ScanRuns
) -> Section:
    size = kb * 1024
    blob, plain, parquet = (str(root / n) for n in ("images.lance", "labels.lance", "images.pq"))
    started = time.perf_counter()
    old_batch = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", None)
    try:
        image_frame(spark, count, size).write.format("lance").option(
            "image.lance.encoding", "blob"
        ).save(blob)
        image_frame(spark, count, size, images=False).write.format("lance").save(plain)
        image_frame(spark, count, size).write.parquet(parquet)
    finally:
        if old_batch is None:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        else:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old_batch)
    log(f"image tables written in {time.perf_counter() - started:.1f} s")

    def scan(uri: str) -> Callable[[], list[Any]]:
        def run() -> list[Any]:
            df = spark.read.format("lance").load(uri).select("id", "label")
            return sorted(df.groupBy("label").agg(F.count("id"), F.sum("id")).collect())

        return run

    if scan(blob)() != scan(plain)():
        raise AssertionError("the blob table's labels differ from the plain table's")
    layout = {uri: table_layout(spark, uri) for uri in (blob, plain)}
    # The scan must not touch the blob bytes: it gives the same answer with them moved away.
    with blob_files_moved(blob, root / "blobs_aside") as moved:
        if scan(blob)() != scan(plain)():
            raise AssertionError("the blob table's scan needs its blob files")
    scan_ours, scan_base, ours_runs, base_runs = repeated(
        "blob scan", scan(blob), scan(plain), scans
    )

    ids = sorted(np.random.default_rng(3).choice(count, min(LOOKUPS, count), replace=False))
    ids = [int(i) for i in ids]

    def lookup(df: DataFrame) -> Callable[[], list[Any]]:
        return lambda: df.filter(F.col("id").isin(ids)).select("id", "image").collect()

    lance_rows = lookup(spark.read.format("lance").load(blob))
    parquet_rows = lookup(spark.read.parquet(parquet))
    where = f"id IN ({', '.join(map(str, ids))})"

    def blob_files() -> list[bytes]:
        out = []
        for f in LanceTable.forPath(spark, blob).blobs("image", where=where):
            assert f is not None
            with f:
                out.append(f.read())
        return out

    expected = {i: np.random.default_rng(i).bytes(size) for i in ids}
    for name, got in (("lance", lance_rows()), ("parquet", parquet_rows())):
        if {r["id"]: bytes(r["image"]) for r in got} != expected:
            raise AssertionError(f"{name}: the images read differ from the ones written")
    if sorted(blob_files()) != sorted(expected.values()):
        raise AssertionError("blobs(): the images read differ from the ones written")
    look_ours, look_base = paired("blob lookup", lance_rows, parquet_rows, runs)
    files_ours, _ = paired("blobs()", blob_files, parquet_rows, runs)

    section = Section(f"Blob column, {count:,} images of {kb} KB")
    section.rows += [
        Row(BLOB_SCAN, scan_ours, "table without images", scan_base, runs=scans.runs),
        Row(BLOB_LOOKUP, look_ours, "Parquet, same filter", look_base, runs=runs),
        Row(BLOB_FILES, files_ours, "Parquet, same filter", look_base, runs=runs),
    ]
    section.notes += [
        f"`id` long, `label` string (10 values), `image` binary of {kb} KB random bytes, "
        "generated in the Python workers (`mapInArrow`, the bytes a function of the id) and "
        "written through Spark three times: Lance with `image.lance.encoding=blob`, Lance "
        "without the image column, Parquet with it. Scan: "
        "`select('id', 'label').groupBy('label').agg(count('id'), sum('id')).collect()`. "
        f"Lookup: `filter(col('id').isin({len(ids)} random ids)).select('id', 'image')"
        ".collect()` on `format('lance')` and on `spark.read.parquet`; "
        "`LanceTable.blobs('image', where='id IN (...)')` reads each BlobFile fully in the "
        "driver. Every path's bytes are checked against the generator's. Lookups: medians "
        f"of {runs} runs after a warm-up, alternating sides.",
        f"The scan: {scans.warmup} warm-up scan(s) per side, then {scans.runs} runs of "
        f"{scans.repeat} pairs of scans (blob table, table without images), each pair in "
        "the other order than the one before; a run's time per side is its mean, the figures "
        "the medians over the runs (the runs, s: blob table "
        f"{', '.join(f'{x:.3f}' for x in ours_runs)}; without images "
        f"{', '.join(f'{x:.3f}' for x in base_runs)}). A scan of {count:,} rows is a Spark "
        "job of a few hundred ms, nearly all fixed cost (planning, task launch, the shuffle "
        "of the groupBy), and the first tens of scans of a session get faster as the JVM "
        "warms up: a median of 3 single scans after one warm-up moved by 10-20% from run to "
        "run (1.15 in an earlier run of this benchmark). The two tables are laid out alike: "
        f"{_layout(layout[blob])} (blob table) vs "
        f"{_layout(layout[plain])} (without images). "
        + (
            f"The scan reads no blob bytes: it is repeated with the blob table's {moved.files} "
            f"blob files ({moved.bytes / MIB:,.0f} MiB) moved out of the table and gives the "
            "same result."
            if moved.files
            else "(The blob table has no blob files at this image size.)"
        ),
    ]
    for uri in (blob, plain, parquet):
        shutil.rmtree(uri, ignore_errors=True)
    return section


def write_backfill(uri: str, rows: int, dim: int, image_bytes: int) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("score", pa.float64()),
            pa.field("embedding", pa.list_(pa.float32(), dim)),
            pa.field("image", pa.binary()),
        ]
    )
    chunk = max(1, min(CHUNK // 2, rows))

    def batches() -> Iterator[pa.RecordBatch]:
        for first in range(0, rows, chunk):
            n = min(chunk, rows - first)
            rng = np.random.default_rng(first)
            ids = np.arange(first, first + n, dtype=np.int64)
            images = rng.integers(0, 256, (n, image_bytes), dtype=np.uint8)
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * image_bytes)
            yield pa.record_batch(
                [
                    pa.array(ids),
                    pa.array(ids.astype(np.float64)),
                    _fixed(rng.normal(0, 1, (n, dim)).astype(np.float32)),
                    pa.BinaryArray.from_buffers(
                        pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(images)]
                    ),
                ],
                schema=schema,
            )

    lance.write_dataset(_reader(schema, batches()), uri)


NEW_SCORE = "cast(id % 1000 as double) / 7.0"


def case_backfill(spark: SparkSession, root: Path, rows: int, image_kb: int, runs: int) -> Section:
    source = str(root / "backfill_source.lance")
    started = time.perf_counter()
    write_backfill(source, rows, BACKFILL_DIM, image_kb * 1024)
    log(f"backfill table written in {time.perf_counter() - started:.1f} s")
    copies = iter(range(10**6))

    def fresh() -> str:
        target = str(root / f"backfill_{next(copies)}.lance")
        shutil.copytree(source, target)
        return target

    def scores() -> DataFrame:
        return spark.range(0, rows, numPartitions=2).selectExpr("id", f"{NEW_SCORE} as score")

    def check(uri: str) -> None:
        ds = lance.dataset(uri)
        got = ds.to_table(columns=["id", "score"]).sort_by("id")
        ids = got.column("id").to_numpy()
        want = (ids % 1000).astype(np.float64) / 7.0
        if len(ids) != rows or not np.array_equal(got.column("score").to_numpy(), want):
            raise AssertionError(f"{uri}: the scores are not the recomputed ones")
        sample = ds.to_table(columns=["id", "embedding", "image"], filter="id < 3")
        original = lance.dataset(source).to_table(
            columns=["id", "embedding", "image"], filter="id < 3"
        )
        if sample.sort_by("id") != original.sort_by("id"):
            raise AssertionError(f"{uri}: the other columns changed")

    ours_s: list[float] = []
    base_s: list[float] = []
    for run in range(runs):
        a, b = fresh(), fresh()

        def ours(uri: str = a) -> None:
            LanceTable.forPath(spark, uri).updateColumns(scores(), on="id").collect()

        def merge(uri: str = b) -> None:
            (
                LanceTable.forPath(spark, uri)
                .alias("t")
                .merge(scores().alias("s"), "t.id = s.id")
                .whenMatchedUpdate(set={"score": "s.score"})
                .execute()
                .collect()
            )

        order = [(ours, ours_s, a, "updateColumns"), (merge, base_s, b, "MERGE")]
        for action, into, uri, name in order if run % 2 == 0 else reversed(order):
            into.append(once(name, action))
            check(uri)
            shutil.rmtree(uri, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    section = Section(f"updateColumns vs MERGE, {rows:,} rows")
    section.rows.append(
        Row(
            BACKFILL,
            statistics.median(ours_s),
            "MERGE whenMatchedUpdate",
            statistics.median(base_s),
            runs=runs,
        )
    )
    section.notes.append(
        f"`id` long, `score` double, `embedding` {BACKFILL_DIM} float32 (fixed-size list), "
        f"`image` binary of {image_kb} KB random bytes (kept small so two copies fit on disk "
        "and in the page cache), written with pylance. `score` recomputed for every row "
        f"(`{NEW_SCORE}`, a `spark.range` of 2 partitions): "
        "`updateColumns(df, on='id')` vs `alias('t').merge(df.alias('s'), 't.id = s.id')"
        ".whenMatchedUpdate(set={'score': 's.score'}).execute()`, each on a fresh copy of "
        f"the same table (copy not timed); {runs} measured run(s) per side, no warm-up, "
        "median. Both results checked: every score recomputed, the other columns unchanged."
    )
    return section


# --- report -------------------------------------------------------------------------------------


def _fmt(value: float, unit: str) -> str:
    if unit == "recall@10":
        return f"{value:.3f}"
    return f"{value:.3f}" if unit == "s" else f"{value:.1f}"


def render(command: str, runs: int, sections_: list[Section], *, cluster: bool = False) -> str:
    machine = describe_machine()
    lines = [
        "## ML datasets at scale (`benchmarks/ml_scale.py`)",
        "",
        f"Generated on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine.cpu_model}, "
        f"{machine.cores} cores, {machine.memory_gib:.1f} GiB, Python {machine.python}, "
        f"{machine.java}, pyspark {machine.pyspark}, pylance {machine.pylance}, pyarrow "
        f"{machine.pyarrow}; Spark `local[2]`, one session; the pylance baselines run in the "
        "same (driver) process on the same 2 cores."
        + (
            f' The sections marked "{CLUSTER_SUFFIX.lstrip(", ")}" (`--cluster`) build the '
            f"same indexes through {CLUSTER.spark}, started by the benchmark after the "
            "`local[2]` session stopped (the same 2 cores); their pylance baselines run again "
            "in the driver process, the cluster idle beside them."
            if cluster
            else ""
        ),
        "",
        "```bash",
        command,
        "```",
        "",
        "Ratio = ours / baseline (lower is better), except where a note says otherwise; a "
        f"target holds when the ratio is at most the target. Quick cases: medians of {runs} "
        "runs (the blob table's scan: see its note); the big builds: one measured run per "
        "side.",
    ]
    for section in sections_:
        lines += [
            "",
            f"### {section.title}",
            "",
            "| case | ours | baseline | baseline's | unit | ratio | target | holds |",
            "|---|---:|---|---:|---|---:|---:|---|",
        ]
        for row in section.rows:
            target = "—" if row.target is None else f"<= {row.target}"
            holds = {None: "— (no target)", True: "yes", False: "**no**"}[row.holds]
            lines.append(
                f"| {row.name} | {_fmt(row.ours, row.unit)} | {row.baseline_name} "
                f"| {_fmt(row.baseline, row.unit)} | {row.unit} | {row.ratio:.3f} "
                f"| {target} | {holds} |"
            )
        for note in section.notes:
            lines += ["", note]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="BENCHMARKS.md")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--runs", type=int, default=3, help="runs of the quick cases")
    parser.add_argument(
        "--scan-runs",
        type=int,
        default=SCAN_RUNS,
        help="timed runs of the blob table's scan",
    )
    parser.add_argument(
        "--scan-warmup",
        type=int,
        default=SCAN_WARMUP,
        help="warm-up scans per side before the blob table's timed scans",
    )
    parser.add_argument(
        "--scan-repeat",
        type=int,
        default=SCAN_REPEAT,
        help="pairs of scans (one per side) per run of the blob table's scan",
    )
    parser.add_argument("--backfill-runs", type=int, default=3)
    parser.add_argument("--btree-rows", type=int, default=BTREE_ROWS)
    parser.add_argument("--vector-rows", type=int, default=VECTOR_ROWS)
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--num-partitions", type=int, default=PARTITIONS)
    parser.add_argument("--num-sub-vectors", type=int, default=SUB_VECTORS)
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--images", type=int, default=IMAGES)
    parser.add_argument("--image-kb", type=int, default=IMAGE_KB)
    parser.add_argument("--backfill-rows", type=int, default=BACKFILL_ROWS)
    parser.add_argument("--backfill-image-kb", type=int, default=BACKFILL_IMAGE_KB)
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also run the BTREE and IVF_PQ builds (of --cases) on a Spark standalone cluster "
        f"on 127.0.0.1 ({CLUSTER_WORKERS} workers of {CLUSTER_CORES} core), started and stopped "
        "by the benchmark after the local cases",
    )
    parser.add_argument(
        "--cases",
        type=_cases,
        default=CASES,
        help=f"comma-separated subset of {','.join(CASES)} (default: all); ivf_pq includes "
        "optimizeIndices, which needs its table",
    )
    return parser.parse_args(argv)


def _cases(value: str) -> tuple[str, ...]:
    picked = tuple(dict.fromkeys(c.strip() for c in value.split(",") if c.strip()))
    unknown = [c for c in picked if c not in CASES]
    if unknown or not picked:
        raise argparse.ArgumentTypeError(f"cases: {value!r}; choose from {','.join(CASES)}")
    return picked


def start_cluster_spark(master_url: str) -> SparkSession:
    """A session on the standalone cluster at ``master_url``: the companion and the
    recommended settings (``lance_spark.configure``), every core of the cluster, executors'
    Python workers running this interpreter with this checkout first on their path."""
    builder = (
        lance_spark.configure(SparkSession.builder.master(master_url))
        .appName("lance_spark-benchmark-cluster")
        .config("spark.driver.host", spark_cluster.HOST)
        .config("spark.driver.bindAddress", spark_cluster.HOST)
        .config("spark.executor.cores", str(CLUSTER_CORES))
        .config("spark.executor.memory", CLUSTER_MEMORY)
        .config("spark.cores.max", str(CLUSTER_WORKERS * CLUSTER_CORES))
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", str(spark_cluster.REPO))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    deadline = time.monotonic() + 120
    jsc = cast(Any, spark.sparkContext)._jsc
    # The map includes the driver's block manager.
    while int(jsc.sc().getExecutorMemoryStatus().size()) - 1 < CLUSTER_WORKERS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{master_url}: fewer than {CLUSTER_WORKERS} executors")
        time.sleep(0.2)
    return spark


@contextmanager
def cluster_session() -> Iterator[SparkSession]:
    """A standalone cluster on 127.0.0.1 and a session on it; both stopped on exit."""
    with spark_cluster.standalone_cluster(
        workers=CLUSTER_WORKERS, cores_per_worker=CLUSTER_CORES, memory=CLUSTER_MEMORY
    ) as url:
        log(f"standalone cluster at {url}")
        spark = start_cluster_spark(url)
        try:
            yield spark
        finally:
            spark.stop()


def where_tasks_import(spark: SparkSession) -> list[str]:
    """The ``lance_spark`` the executors' Python workers import (one task per core)."""
    parts = max(1, int(spark.sparkContext.defaultParallelism))

    def origin(_: Iterable[int]) -> Iterator[str]:
        import lance_spark as imported

        yield str(imported.__file__)

    return sorted(
        set(spark.sparkContext.parallelize(range(parts), parts).mapPartitions(origin).collect())
    )


def main(
    argv: Sequence[str] | None = None,
    spark: SparkSession | None = None,
    cluster: Callable[[], AbstractContextManager[SparkSession]] | None = None,
) -> int:
    """Run the cases and write the section. ``spark``: the local session to use (not
    stopped); ``cluster``: what gives the ``--cluster`` session (default: a standalone cluster
    started here, after the local session stopped)."""
    args = parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.ml_scale", *(sys.argv[1:] if argv is None else argv)]
    )
    root = work_root(args.work_dir, "ml_scale")
    vectors = VectorArgs(
        args.vector_rows, args.dim, args.num_partitions, args.num_sub_vectors, args.queries
    )
    results: list[Section] = []
    try:
        session = spark if spark is not None else start_spark()
        try:
            lance_spark.register(session)
            if "btree" in args.cases:
                results.append(case_btree(session, root, args.btree_rows))
            if "ivf_pq" in args.cases:
                results += case_vectors(session, root, vectors)
            if "blob" in args.cases:
                results.append(
                    case_blobs(
                        session,
                        root,
                        args.images,
                        args.image_kb,
                        args.runs,
                        ScanRuns(args.scan_runs, args.scan_repeat, args.scan_warmup),
                    )
                )
            if "backfill" in args.cases:
                results.append(
                    case_backfill(
                        session,
                        root,
                        args.backfill_rows,
                        args.backfill_image_kb,
                        args.backfill_runs,
                    )
                )
        finally:
            if spark is None:
                session.stop()
        if args.cluster and any(c in args.cases for c in CLUSTER_CASES):
            with (cluster or cluster_session)() as on_cluster:
                lance_spark.register(on_cluster)
                log(f"the executors import lance_spark from {where_tasks_import(on_cluster)}")
                if "btree" in args.cases:
                    results.append(case_btree(on_cluster, root, args.btree_rows, CLUSTER))
                if "ivf_pq" in args.cases:
                    results += case_vectors(on_cluster, root, vectors, CLUSTER, upkeep=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    section = render(command, args.runs, results, cluster=args.cluster)
    out = Path(args.out)
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    out.write_text(sections.replace(old, sections.ML_SCALE, section), encoding="utf-8")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
