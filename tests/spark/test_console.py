"""A quiet, honest console: a plain local session (no conf/ directory, no demo settings)
that registers the connector, creates a table and shows it prints nothing from the
connector's path; a worker interpreter without lance_spark is reported by ``register``.

Each run is its own driver process (its console is what is checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lance
import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from pyspark.sql import SparkSession
import lance_spark

spark = (SparkSession.builder.master("local[2]")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1")
         .getOrCreate())
try:
    lance_spark.register(spark)
except lance_spark.LanceSparkError as err:
    print("REGISTER FAILED:", err)
    sys.exit(3)
uri = sys.argv[1]
spark.range(100).selectExpr("id", "id * 2 AS x").repartition(4) \\
    .write.format("lance").mode("append").save(uri)       # creates the table: 4 write tasks
df = spark.read.format("lance").load(uri)
df.show(3)
print(df.limit(5).count(), df.where("x > 10").limit(2).collect())
spark.stop()
print("DONE")
"""

# A session with the recommended settings (lance_spark.configure: Unix domain sockets, on
# which a write to a closed socket fails at once). Planning calls from several threads at once
# leave several idle workers in each of Spark's planning daemons (create / read / write /
# commit / lookup, the companion's), whose sockets spark.stop() closes before it stops them.
STOP_SCRIPT = """
import sys
from concurrent.futures import ThreadPoolExecutor
from pyspark.sql import SparkSession
import lance_spark

builder = (SparkSession.builder.master("local[2]")
           .config("spark.ui.enabled", "false")
           .config("spark.driver.bindAddress", "127.0.0.1")
           .config("spark.driver.host", "127.0.0.1"))
spark = lance_spark.configure(builder).getOrCreate()
lance_spark.register(spark)
base = sys.argv[1]

def batch(i):
    uri = f"{base}/t{i}.lance"
    spark.range(50).selectExpr("id", "id * 2 AS x").write.format("lance").mode("append").save(uri)
    df = spark.read.format("lance").load(uri)
    return df.where("x > 10").count() + len(df.limit(2).collect())

with ThreadPoolExecutor(6) as pool:
    print("BATCH", sorted(set(pool.map(batch, range(12)))))
source = f"{base}/t0.lance"
query = (spark.readStream.format("lance").load(source).writeStream.format("lance")
         .option("checkpointLocation", f"{base}/checkpoint").start(f"{base}/sink.lance"))
query.processAllAvailable()
spark.range(50, 60).selectExpr("id", "id * 2 AS x").write.format("lance").mode("append").save(source)
query.processAllAvailable()
query.stop()
spark.stop()
print("DONE")
"""

# What the connector's path used to print: Lance's fork-safety warning, Lance's per-task
# "No existing dataset" warning, Spark's note that register replaced the discovered source,
# and the Python daemon's BrokenPipeError traceback after show() / limit().
NOISE = ("Traceback", "fork-safe", "No existing dataset", "BrokenPipe", "DataSourceManager")


def _run(
    tmp_path: Path, python: str, *, text: str = SCRIPT, target: str = "t.lance"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONF_DIR", "LANCE_LOG")}
    env.update(
        PYSPARK_PYTHON=python,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    script = tmp_path / "console.py"
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / target)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_write_and_show_print_nothing_from_the_connector(tmp_path: Path) -> None:
    done = _run(tmp_path, sys.executable)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DONE" in done.stdout
    assert "| id|  x|" in done.stdout
    for noise in NOISE:
        assert noise not in done.stderr, f"{noise!r} in stderr:\n{done.stderr}"
        assert noise not in done.stdout, f"{noise!r} in stdout:\n{done.stdout}"


def test_stop_prints_no_traceback_after_batch_and_streaming_work(tmp_path: Path) -> None:
    done = _run(tmp_path, sys.executable, text=STOP_SCRIPT, target="tables")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DONE" in done.stdout
    assert "BATCH [46]" in done.stdout  # in every table: 44 rows with x > 10, 2 of limit(2)
    tables = tmp_path / "tables"
    assert lance.dataset(str(tables / "t0.lance")).count_rows() == 60
    sink = lance.dataset(str(tables / "sink.lance")).to_table()
    assert sorted(sink.column("id").to_pylist()) == list(range(60))
    for noise in NOISE:
        assert noise not in done.stderr, f"{noise!r} in stderr:\n{done.stderr}"
        assert noise not in done.stdout, f"{noise!r} in stdout:\n{done.stdout}"


def test_register_says_when_workers_cannot_import_the_package(tmp_path: Path) -> None:
    base = getattr(sys, "_base_executable", None) or ""
    probe = subprocess.run(
        [base, "-c", "import lance_spark"], capture_output=True, text=True, check=False
    )
    assert base and probe.returncode != 0, "the base interpreter must lack lance_spark"
    done = _run(tmp_path, base)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "REGISTER FAILED: Spark's Python workers cannot import lance_spark" in done.stdout
    # names the interpreter the workers ran, and what it could not do
    assert f"they run {base} (ModuleNotFoundError: No module named 'lance_spark')" in done.stdout
    assert f"Set PYSPARK_PYTHON (and PYSPARK_DRIVER_PYTHON) to {sys.executable}" in done.stdout
    # said at once: no failed task, so none of Spark's stack traces before it
    assert "at org.apache.spark" not in done.stdout + done.stderr, done.stderr[-3000:]
