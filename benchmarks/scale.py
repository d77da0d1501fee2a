"""Tables with many versions and many small fragments (issue 17): planning, time travel,
filtered counts, compaction and the Python workers' memory.

``python -m benchmarks.scale --out BENCHMARKS.md`` (``make bench-scale``) builds its tables
with pylance (fast to make, the same files the connector reads), times the queries through
one ``local[2]`` Spark session, and writes its section into ``--out`` between the markers of
:mod:`benchmarks.sections` (the rest of the file, ``make bench``'s report, is kept).

- **versions**: tables of 1, 10, 1,000 and 10,000 versions with the same 5 rows. Version 1
  writes them (5 one-row fragments); every later version is a metadata-only commit (a
  config change, 1.6 ms each), so every version holds the same data and only the number of
  versions differs. A filtered count of the latest version, of version 1 (``versionAsOf``)
  and of the time version 1 was committed (``timestampAsOf``) is compared with the same
  count on the 1-version table. Planning (the driver-side ``schema()`` + ``reader()`` +
  ``partitions()``, in this process) is timed on its own. A table of 2,000 one-row appends
  (2,000 versions and fragments, the issue's case) is read at version 5.
- **fragments**: 1,000, 10,000 and 100,000 one-row fragments in one version: planning, and a
  filtered count through Spark next to pylance's own ``count_rows(filter)``.
- **compaction** of 10,000 one-row fragments: ``optimize().executeCompaction()`` (a Spark
  job) against pylance's ``compact_files()`` in this process, each on a fresh copy.
- **memory**: peak RSS of the Python workers during writes of 1x and 10x rows in one task
  (:mod:`benchmarks.memory`, in a session of its own).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
from lance.optimize import Compaction
from pyspark.sql import SparkSession

import lance_spark
from benchmarks import sections
from benchmarks.run import describe_machine, log, start_spark, work_root
from lance_spark import LanceTable
from lance_spark.source.datasource import LanceDataSource

ROWS = 5  # rows of every versions table
VERSION_COUNTS = (10, 1_000, 10_000)
FRAGMENT_COUNTS = (1_000, 10_000, 100_000)
APPENDS = 2_000
COMPACTED_FRAGMENTS = 10_000
MEMORY_ROWS = 100_000
TRAVEL_TARGET = 1.2  # time travel on 10,000 versions vs the 1-version table
PLANNING_TARGET_S = 2.0  # planning 100,000 fragments
MEMORY_TARGET = 1.5  # worker RSS from 1x to 10x rows


@dataclass(frozen=True)
class Timing:
    name: str
    seconds: tuple[float, ...]
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def timed(name: str, run: Callable[[], object], runs: int, *, note: str = "") -> Timing:
    """A warm-up, then ``runs`` timed runs of ``run``."""
    run()
    seconds: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    result = Timing(name, tuple(seconds), note)
    log(f"{name}: {result.median:.4f} s")
    return result


# --- tables -----------------------------------------------------------------------------------


def versions_table(uri: str, versions: int) -> None:
    """ROWS rows in ROWS one-row fragments at version 1, then metadata-only commits."""
    ids = pa.array(range(ROWS), pa.int64())
    ds = lance.write_dataset(pa.table({"id": ids}), uri, max_rows_per_file=1)
    for i in range(versions - 1):
        ds.update_config({"bench.commit": str(i)})


def appends_table(uri: str, appends: int) -> None:
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    for i in range(1, appends):
        lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append")


def fragments_table(uri: str, fragments: int) -> None:
    ids = pa.array(range(fragments), pa.int64())
    data = pa.table({"id": ids, "x": pa.array([float(i) for i in range(fragments)])})
    lance.write_dataset(data, uri, max_rows_per_file=1, max_rows_per_group=1)


def build(make: Callable[[str, int], None], uri: str, count: int, *, what: str) -> None:
    """``make(uri, count)``, logging how long it took."""
    started = time.perf_counter()
    make(uri, count)
    log(f"{count} {what} built in {time.perf_counter() - started:.1f} s")


def commit_time(uri: str, version: int) -> str:
    stamp = lance.dataset(uri, version=version).get_version()["timestamp"]
    if not isinstance(stamp, datetime):
        raise TypeError(f"unexpected version timestamp {stamp!r}")
    return stamp.astimezone(UTC).isoformat()


# --- measurements -------------------------------------------------------------------------------


def plan(uri: str, **options: str) -> int:
    """The driver-side planning of a read, in this process: what Spark's planner worker
    runs (``schema()``, then ``reader()`` and ``partitions()``)."""
    source = LanceDataSource({"path": uri, **options})
    reader = source.reader(source.schema())
    return len(list(reader.partitions()))


def spark_count(spark: SparkSession, uri: str, **options: str) -> Callable[[], int]:
    def run() -> int:
        reader = spark.read.format("lance")
        for key, value in options.items():
            reader = reader.option(key, value)
        return int(reader.load(uri).where("id >= 0").count())

    return run


@dataclass(frozen=True)
class Paired:
    """A case and the same count on the 1-version table, run alternately (one of each per
    round, which goes first alternating), so both see the same machine; the ratio is the
    median of the per-round ratios."""

    case: Timing
    baseline: Timing

    @property
    def ratio(self) -> float:
        return statistics.median(
            c / b for c, b in zip(self.case.seconds, self.baseline.seconds, strict=True)
        )


def paired(
    name: str, case: Callable[[], object], baseline: Callable[[], object], runs: int
) -> Paired:
    case()
    baseline()
    case_s: list[float] = []
    base_s: list[float] = []
    for run in range(runs):
        order = [(case, case_s), (baseline, base_s)]
        for action, into in order if run % 2 == 0 else reversed(order):
            start = time.perf_counter()
            action()
            into.append(time.perf_counter() - start)
    result = Paired(Timing(name, tuple(case_s)), Timing(f"{name} (1 version)", tuple(base_s)))
    log(f"{name}: {result.case.median:.4f} s, ratio {result.ratio:.2f}")
    return result


@dataclass(frozen=True)
class VersionsResult:
    versions: int
    latest: Paired
    old: Paired
    timestamp: Paired
    planning_old: Timing
    planning_timestamp: Timing


def measure_versions(
    spark: SparkSession, root: Path, counts: Sequence[int], runs: int
) -> list[VersionsResult]:
    base = str(root / "versions_1.lance")
    versions_table(base, 1)
    baseline = spark_count(spark, base)
    results: list[VersionsResult] = []
    for count in counts:
        uri = str(root / f"versions_{count}.lance")
        build(versions_table, uri, count, what="versions")
        when = commit_time(uri, 1)
        results.append(
            VersionsResult(
                count,
                paired(f"{count} versions: latest", spark_count(spark, uri), baseline, runs),
                paired(
                    f"{count} versions: v1",
                    spark_count(spark, uri, versionAsOf="1"),
                    baseline,
                    runs,
                ),
                paired(
                    f"{count} versions: timestamp",
                    spark_count(spark, uri, timestampAsOf=when),
                    baseline,
                    runs,
                ),
                timed(f"{count} versions: plan v1", partial(plan, uri, versionAsOf="1"), runs),
                timed(
                    f"{count} versions: plan timestamp",
                    partial(plan, uri, timestampAsOf=when),
                    runs,
                ),
            )
        )
    return results


@dataclass(frozen=True)
class AppendsResult:
    versions: int
    old: Timing
    latest: Timing
    list_versions: Timing


def measure_appends(spark: SparkSession, root: Path, appends: int, runs: int) -> AppendsResult:
    uri = str(root / "appends.lance")
    build(appends_table, uri, appends, what="appends")
    latest = lance.dataset(uri)
    return AppendsResult(
        appends,
        timed("appends: v5", spark_count(spark, uri, versionAsOf="5"), runs),
        timed("appends: latest", spark_count(spark, uri), runs),
        timed("appends: pylance versions()", latest.versions, runs),
    )


@dataclass(frozen=True)
class FragmentsResult:
    fragments: int
    planning: Timing
    count: Timing
    pylance_count: Timing


def measure_fragments(
    spark: SparkSession, root: Path, counts: Sequence[int], runs: int
) -> list[FragmentsResult]:
    results: list[FragmentsResult] = []
    for count in counts:
        uri = str(root / f"fragments_{count}.lance")
        build(fragments_table, uri, count, what="fragments")
        ds = lance.dataset(uri)
        results.append(
            FragmentsResult(
                count,
                timed(f"{count} fragments: plan", partial(plan, uri), runs),
                timed(f"{count} fragments: count", spark_count(spark, uri), runs),
                timed(
                    f"{count} fragments: pylance count_rows",
                    partial(ds.count_rows, filter="id >= 0"),
                    runs,
                ),
            )
        )
    return results


@dataclass(frozen=True)
class CompactionResult:
    fragments: int
    distributed: Timing
    driver: Timing
    fragments_after: int
    lance_tasks: int  # the tasks of Lance's plan: the Spark job's tasks


def measure_compaction(
    spark: SparkSession, root: Path, fragments: int, runs: int
) -> CompactionResult:
    source = str(root / "compaction_source.lance")
    fragments_table(source, fragments)
    tasks = len(Compaction.plan(lance.dataset(source), {}).tasks)
    copies = iter(range(10 * (runs + 1)))

    def fresh() -> str:
        target = str(root / f"compaction_{next(copies)}.lance")
        shutil.copytree(source, target)
        return target

    def distributed() -> None:
        LanceTable.forPath(spark, fresh()).optimize().executeCompaction()

    def driver() -> None:
        lance.dataset(fresh()).optimize.compact_files()

    # Copying the table is inside the timed region on both sides alike (same files).
    dist = timed("compaction: distributed", distributed, runs, note="copy included")
    local = timed("compaction: pylance, driver", driver, runs, note="copy included")
    check = fresh()
    LanceTable.forPath(spark, check).optimize().executeCompaction()
    after = len(lance.dataset(check).get_fragments())
    return CompactionResult(fragments, dist, local, after, tasks)


def measure_memory(root: Path, rows: int) -> list[dict[str, Any]]:
    """:mod:`benchmarks.memory` in a session of its own (a fresh JVM whose Python workers are
    not reused): workers of this session keep the memory of the large plans above."""
    out = root / "memory.json"
    command = [sys.executable, "-m", "benchmarks.memory", "--rows", str(rows)]
    command += ["--work-dir", str(root), "--json", str(out)]
    subprocess.run(command, check=True, cwd=Path(__file__).resolve().parent.parent)
    results: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    return results


# --- report -------------------------------------------------------------------------------------


def _cell(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _s(t: Timing) -> str:
    return f"{t.median:.3f}"


def render(
    *,
    command: str,
    runs: int,
    versions: list[VersionsResult],
    appends: AppendsResult | None,
    fragments: list[FragmentsResult],
    compaction: CompactionResult | None,
    memory: list[dict[str, Any]] | None,
) -> str:
    machine = describe_machine()
    lines = [
        "## Scale: many versions, many fragments (`benchmarks/scale.py`)",
        "",
        f"Generated on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on the machine above "
        f"({machine.cpu_model}, {machine.cores} cores, pylance {machine.pylance}, Spark "
        "`local[2]`, one session).",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Medians of {runs} runs after a warm-up, seconds. Counts are "
        "`spark.read.format('lance')...load(p).where('id >= 0').count()`; planning is the "
        "driver-side `schema()` + `reader()` + `partitions()` of the same read, in the "
        "benchmark's process.",
        "",
        "### Versions",
        "",
        "Every table holds the same 5 rows (5 one-row fragments, written at version 1); later "
        "versions are metadata-only commits, so only the number of versions differs. Each "
        "count runs alternately with the same count on a 1-version table; a ratio is the "
        "median of the per-round ratios (case / 1-version table). Target for 10,000 "
        f"versions: <= {TRAVEL_TARGET}.",
        "",
        "| versions | latest | versionAsOf=1 | timestampAsOf (v1) | 1-version table "
        "| ratio latest | ratio v1 | ratio timestamp | planning v1 | planning timestamp |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in versions:
        base = statistics.median(
            [*v.latest.baseline.seconds, *v.old.baseline.seconds, *v.timestamp.baseline.seconds]
        )
        lines.append(
            f"| {v.versions:,} | {_s(v.latest.case)} | {_s(v.old.case)} "
            f"| {_s(v.timestamp.case)} | {base:.3f} | {v.latest.ratio:.2f} | {v.old.ratio:.2f} "
            f"| {v.timestamp.ratio:.2f} | {_s(v.planning_old)} | {_s(v.planning_timestamp)} |"
        )
    if appends is not None:
        lines += [
            "",
            f"A table of {appends.versions:,} one-row appends ({appends.versions:,} versions and "
            f"fragments): versionAsOf=5 {_s(appends.old)} s, latest {_s(appends.latest)} s; "
            f"pylance's `versions()` on it alone takes {_s(appends.list_versions)} s (what "
            "every time-travel read cost before: it read every manifest, more than once per "
            "query).",
        ]
    lines += [
        "",
        "### Fragments",
        "",
        f"One version, one-row fragments. Target: 100,000 planned in < {PLANNING_TARGET_S} s.",
        "",
        "| fragments | planning | Spark count | pylance `count_rows(filter)` alone |",
        "|---:|---:|---:|---:|",
    ]
    notes = [
        "",
        "Counting many small fragments costs what Lance's scan costs per file (one data file "
        "per fragment, each opened and read): pylance's own `count_rows(filter)` on the same "
        "table, in the last column, is most of the Spark count. Compaction removes that cost "
        "(`autoCompact`, `OPTIMIZE`).",
    ]
    for f in fragments:
        lines.append(
            f"| {f.fragments:,} | {_s(f.planning)} | {_s(f.count)} | {_s(f.pylance_count)} |"
        )
    lines += notes
    if compaction is not None:
        lines += [
            "",
            "### Compaction",
            "",
            f"{compaction.fragments:,} one-row fragments, each run on a fresh copy (the copy "
            "is timed on both sides): "
            f"`optimize().executeCompaction()` {_s(compaction.distributed)} s, pylance's "
            f"`compact_files()` on the driver {_s(compaction.driver)} s; "
            f"{compaction.fragments_after} fragment(s) after. Lance's plan has "
            f"{compaction.lance_tasks} task(s) (it groups neighbouring small fragments up to "
            "1,048,576 rows per output fragment), and the Spark job runs one Spark task per "
            "Lance task: with one task, the difference is the job's own overhead; the job "
            "gains on tables whose plan has many tasks.",
        ]
    if memory:
        columns = ("operation", "scale", "rows", "peak_mib", "growth_mib", "peak_ratio")
        lines += [
            "",
            "### Python worker memory",
            "",
            "All input in ONE partition (one task holds it all), 1x and 10x rows "
            "(`benchmarks/memory.py`): the peak RSS of the busiest Python worker process, the "
            "growth over the same job on 1,000 rows, and the peak's ratio to 1x. Target: "
            f"within {MEMORY_TARGET}x from 1x to 10x rows.",
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
        ]
        lines += [
            "| " + " | ".join(_cell(row.get(k, "")) for k in columns) + " |" for row in memory
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--versions", type=int, nargs="+", default=list(VERSION_COUNTS))
    parser.add_argument("--fragments", type=int, nargs="+", default=list(FRAGMENT_COUNTS))
    parser.add_argument("--appends", type=int, default=APPENDS)
    parser.add_argument("--compaction", type=int, default=COMPACTED_FRAGMENTS)
    parser.add_argument("--memory-rows", type=int, default=MEMORY_ROWS)
    parser.add_argument("--work-dir", default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.scale", *(sys.argv[1:] if argv is None else argv)]
    )
    root = work_root(args.work_dir, "scale")
    session = spark if spark is not None else start_spark()
    lance_spark.register(session)
    try:
        versions = measure_versions(session, root, args.versions, args.runs)
        appends = measure_appends(session, root, args.appends, args.runs) if args.appends else None
        fragments = measure_fragments(session, root, args.fragments, args.runs)
        compaction = (
            measure_compaction(session, root, args.compaction, max(1, args.runs // 2))
            if args.compaction
            else None
        )
        memory = measure_memory(root, args.memory_rows) if args.memory_rows else None
    finally:
        if spark is None:
            session.stop()
        shutil.rmtree(root, ignore_errors=True)
    section = render(
        command=command,
        runs=args.runs,
        versions=versions,
        appends=appends,
        fragments=fragments,
        compaction=compaction,
        memory=memory,
    )
    out = Path(args.out)
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    out.write_text(sections.replace(old, sections.SCALE, section), encoding="utf-8")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
