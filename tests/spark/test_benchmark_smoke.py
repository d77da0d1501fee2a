"""The benchmark harness (benchmarks/run.py) runs end to end at a tiny size on the test session.

Only the report's shape is checked: every case has a row with numeric medians and a numeric
ratio, the machine and the command are described. Timings are never asserted (the machine
is shared; speed is what `make bench` reports).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]


def _harness() -> ModuleType:
    # `benchmarks` is not part of the installed package: import it from the checkout.
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("benchmarks.run")


def _section(markdown: str, start: str, end: str) -> list[str]:
    lines = markdown.splitlines()
    first = lines.index(start)
    last = next(i for i in range(first + 1, len(lines)) if lines[i].startswith(end))
    return lines[first + 1 : last]


def _row(lines: list[str], name: str) -> list[str]:
    rows = [line for line in lines if line.startswith(f"| {name} |")]
    assert len(rows) == 1, f"expected one row for {name!r}, got {rows}"
    return [cell.strip() for cell in rows[0].strip().strip("|").split("|")]


def _number(cell: str) -> float:
    value = float(cell)
    assert math.isfinite(value) and value >= 0, cell
    return value


def test_tiny_benchmark_writes_every_case(spark: SparkSession, tmp_path: Path) -> None:
    bench = _harness()
    out = tmp_path / "BENCHMARKS.md"
    argv = ["--rows", "20000", "--ml-rows", "2000", "--runs", "1", "--out", str(out)]
    argv += ["--work-dir", str(tmp_path / "work")]

    assert bench.main(argv, spark=spark) == 0

    markdown = out.read_text(encoding="utf-8")
    results = _section(markdown, "## Results", "###")
    assert len(bench.CASE_NAMES) == 26
    for name in bench.CASE_NAMES:
        _, lance_median, baseline, baseline_median, ratio, target, holds = _row(results, name)
        _number(lance_median)
        _number(baseline_median)
        _number(ratio)
        expected_target = bench.TARGETS[name]
        assert target == ("—" if expected_target is None else f"<= {expected_target}")
        assert holds in {"yes", "**no**", "— (no target)"}
        baselines = {
            bench.OLD_VERSION: "Lance, current version",
            bench.MERGE_TINY: "LanceTable.merge",
        }
        assert baseline == baselines.get(name, "Parquet")

    # The cached DataFrame writes, each kind of session a process of its own.
    assert len(bench.CACHED_CASES) == 8
    for name in bench.CACHED_CASES:
        _, lance_median, baseline, _median, ratio, target, _holds = _row(results, name)
        _number(lance_median)
        _number(ratio)
        assert baseline == "Parquet"
        assert target == ("<= 0.9" if "(recommended session)" in name else "<= 1.0")

    rate = [line for line in results if line.startswith("Streaming sink throughput")]
    assert len(rate) == 1 and "2,000 rows per run" in rate[0] and "rows/s, Parquet" in rate[0]

    runs = _section(markdown, "### Every run (s)", "##")
    for name in bench.CASE_NAMES:
        _, lance_runs, baseline_runs, ratios = _row(runs, name)
        for cell in (lance_runs, baseline_runs, ratios):
            assert len([_number(v) for v in cell.split(",")]) == 1  # --runs 1

    memory = _section(markdown, "## Peak memory of the Python workers during writes", "##")
    for write in ("Lance append", "Lance overwrite"):
        _, writes, workers, peak, total, cpu = _row(memory, write)
        assert int(writes) == 2  # warm-up + one run
        assert int(workers) >= 1
        assert _number(peak) > 0 and _number(total) >= _number(peak)
        _number(cpu)
    for write in ("Parquet append", "Parquet overwrite"):
        assert _row(memory, write)[1] == "2"
    for name in bench.CACHED_CASES:
        _, writes, workers, peak, _total, _cpu = _row(memory, f"Lance {name}")
        assert int(writes) == 2 and int(workers) >= 1 and _number(peak) > 0

    nearest = _section(markdown, "## Nearest-neighbour join", "##")
    cells = [c.strip() for c in nearest[-2].strip().strip("|").split("|")]
    queries, k, table_rows, median, per_second, recall, runs_cell = cells
    assert (queries, k, table_rows) == ("1,000", "10", "2,000")
    assert _number(median) > 0 and _number(per_second.replace(",", "")) > 0
    assert 0.5 <= _number(recall) <= 1.0  # IVF_PQ on 2,000 rows still finds most neighbours
    assert len(runs_cell.split(",")) == 1

    assert "python -m benchmarks.run --rows 20000 --ml-rows 2000 --runs 1" in markdown
    assert "2,000 rows of `id` bigint, `key` string" in markdown
    for fact in ("cores (`os.cpu_count()`)", "GiB (`MemTotal`)", "Java: ", "pylance 14.0.2"):
        assert fact in markdown
    where = _section(markdown + "\n## end", "## Where the time goes", "## end")
    # The profile write-up kept in benchmarks/ (numbers from benchmarks/profile.py).
    assert any("python -m benchmarks.profile" in line for line in where)
    # The tables lived in a fresh directory under --work-dir, removed afterwards.
    assert list((tmp_path / "work").iterdir()) == []


def test_tiny_scale_benchmark_writes_its_section(spark: SparkSession, tmp_path: Path) -> None:
    _harness()
    scale = importlib.import_module("benchmarks.scale")
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# the main report\n\nkept as it is\n", encoding="utf-8")
    argv = ["--versions", "3", "12", "--fragments", "10", "40", "--appends", "8"]
    argv += ["--compaction", "30", "--memory-rows", "0", "--runs", "1", "--out", str(out)]
    argv += ["--work-dir", str(tmp_path / "work")]

    for _ in range(2):  # the second run replaces the section instead of adding one
        assert scale.main(argv, spark=spark) == 0

    markdown = out.read_text(encoding="utf-8")
    assert markdown.startswith("# the main report\n\nkept as it is\n")
    assert markdown.count("<!-- scale:begin -->") == 1 == markdown.count("<!-- scale:end -->")
    versions = _section(markdown, "### Versions", "###")
    for count in ("3", "12"):
        assert all(_number(c) >= 0 for c in _row(versions, count)[1:])
    fragments = _section(markdown, "### Fragments", "###")
    for count in ("10", "40"):
        assert all(_number(c) >= 0 for c in _row(fragments, count)[1:])
    assert "30 one-row fragments" in markdown and "1 fragment(s) after" in markdown


def test_tiny_ml_scale_benchmark_writes_its_section(spark: SparkSession, tmp_path: Path) -> None:
    _harness()
    ml_scale = importlib.import_module("benchmarks.ml_scale")
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# the main report\n\nkept as it is\n", encoding="utf-8")
    argv = ["--btree-rows", "20000", "--vector-rows", "3000", "--dim", "16"]
    argv += ["--num-partitions", "4", "--num-sub-vectors", "2", "--queries", "5"]
    argv += ["--images", "50", "--image-kb", "2", "--backfill-rows", "2000", "--runs", "1"]
    argv += ["--scan-runs", "1", "--scan-repeat", "1", "--scan-warmup", "1", "--cluster"]
    argv += ["--out", str(out), "--work-dir", str(tmp_path / "work")]

    # --cluster's cases on the test session (the standalone cluster itself: tests/cluster).
    assert ml_scale.main(argv, spark=spark, cluster=lambda: contextlib.nullcontext(spark)) == 0

    markdown = out.read_text(encoding="utf-8")
    assert markdown.startswith("# the main report\n\nkept as it is\n")
    assert markdown.count("<!-- ml-scale:begin -->") == 1 == markdown.count("<!-- ml-scale:end -->")
    lines = _section(markdown, "## ML datasets at scale (`benchmarks/ml_scale.py`)", "<!-- ")

    assert len(ml_scale.CASE_NAMES) == 10
    assert len(ml_scale.CLUSTER_CASE_NAMES) == 3
    for name in ml_scale.CASE_NAMES + ml_scale.CLUSTER_CASE_NAMES:
        _, ours, _baseline, theirs, _unit, ratio, target, holds = _row(lines, name)
        for cell in (ours, theirs, ratio):
            _number(cell)
        expected = ml_scale.TARGETS[name]
        assert target == ("—" if expected is None else f"<= {expected}")
        assert holds in {"yes", "**no**", "— (no target)"}
    states = (
        "fully indexed, before the append",
        "after the append (unindexed tail)",
        "after optimizeIndices",
        "after a full rebuild",
    )
    segments = []
    for state in states:
        _, _rows, count, recall, latency = _row(lines, state)
        assert 0 <= _number(recall) <= 1 and _number(latency) > 0
        segments.append(_number(count))
    build, tail, optimized, rebuilt = segments
    assert build == tail >= 1 and optimized > build and rebuilt >= 1
    assert "python -m benchmarks.ml_scale --btree-rows 20000" in markdown
    assert "### BTREE build, 20,000 int64 rows, standalone cluster" in markdown
    assert "The two tables are laid out alike: 2 fragments, 2 data files" in markdown
    assert "### IVF_PQ build, 3,000 x 16 float32, standalone cluster" in markdown
    assert list((tmp_path / "work").iterdir()) == []
