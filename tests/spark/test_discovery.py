"""``format("lance")`` without ``register``: Spark 4 finds the data source by itself through
the top-level module ``pyspark_lance`` (its ``DefaultSource``), in a new session, in a plain
``spark-submit`` and on a Connect server; ``register`` still wins in its own session."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lance
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import LanceTable
from lance_spark.source.session import FILTER_PUSHDOWN_CONF

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

REPO = Path(__file__).resolve().parents[2]


def _plan(frame: DataFrame) -> str:
    """The physical plan, as ``explain()`` prints it (classic and Connect alike)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain()
    return out.getvalue()


def test_new_session_knows_lance_without_register(spark: SparkSession, table_uri: str) -> None:
    fresh = spark.newSession()  # no register: only Spark's discovery knows the format
    assert not hasattr(fresh, "_lance_spark_defaults")
    fresh.range(0, 20, 1, 2).selectExpr("id", "id % 3 AS k").write.format("lance").mode(
        "append"
    ).save(table_uri)
    assert lance.dataset(table_uri).count_rows() == 20
    expected = sorted(i for i in range(20) if i % 3 == 1 and i > 4)

    # Spark's default: filter pushdown off. The reader must not be refused
    # (DATA_SOURCE_PUSHDOWN_DISABLED); Spark filters the rows itself.
    fresh.conf.set(FILTER_PUSHDOWN_CONF, "false")
    frame = fresh.read.format("lance").load(table_uri).where("k = 1 AND id > 4")
    assert sorted(r.id for r in frame.collect()) == expected
    assert "Filter " in _plan(frame)

    # Switched on: the filters are pushed to Lance, and Spark drops its Filter node.
    fresh.conf.set(FILTER_PUSHDOWN_CONF, "true")
    frame = fresh.read.format("lance").load(table_uri).where("k = 1 AND id > 4")
    assert sorted(r.id for r in frame.collect()) == expected
    assert "Filter " not in _plan(frame), _plan(frame)


def test_register_wins_over_the_discovered_source(spark: SparkSession, tmp_path: Path) -> None:
    # register's source carries the session's defaults (here: the application id, written
    # into each commit over any sparkAppId option); the discovered one has none, and takes
    # the application from the option the companion gives every write (or the user's).
    registered, discovered = str(tmp_path / "registered.lance"), str(tmp_path / "found.lance")
    given = str(tmp_path / "given.lance")
    spark.range(3).write.format("lance").option("sparkAppId", "x").mode("append").save(registered)
    fresh = spark.newSession()
    fresh.range(3).write.format("lance").mode("append").save(discovered)
    fresh.range(3).write.format("lance").option("sparkAppId", "mine").mode("append").save(given)
    app_id = spark.conf.get("spark.app.id")
    assert app_id
    assert LanceTable.forPath(spark, registered).history().first().appId == app_id
    assert LanceTable.forPath(spark, discovered).history().first().appId == app_id
    assert LanceTable.forPath(spark, given).history().first().appId == "mine"
    assert spark.read.format("lance").load(discovered).count() == 3


_SUBMITTED = """
import json, sys
from pyspark.sql import SparkSession

uri, out = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.master("local[1]").appName("discovery").getOrCreate()
assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "false"
spark.range(0, 10).selectExpr("id", "concat('n', id) AS name").write.format("lance").mode(
    "append"
).save(uri)
frame = spark.read.format("lance").load(uri)
rows = sorted((r.id, r.name) for r in frame.where("id >= 7").collect())
with open(out, "w") as f:
    json.dump({"rows": rows, "count": frame.count(),
               "imported": sorted(m for m in sys.modules if m.startswith("lance"))}, f)
spark.stop()
"""


def test_plain_spark_submit_knows_lance(tmp_path: Path) -> None:
    """A script run by ``spark-submit`` that never imports lance_spark, with Spark's default
    settings (an empty conf dir: filter pushdown off)."""
    import pyspark

    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(_SUBMITTED))
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    uri, out = str(tmp_path / "t.lance"), tmp_path / "out.json"
    spark_home = Path(pyspark.__file__).resolve().parent
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # Where an installed wheel puts pyspark_lance and lance_spark: on the workers' path.
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    done = subprocess.run(
        [str(spark_home / "bin" / "spark-submit"), "--master", "local[1]", str(script), uri, out],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    result = json.loads(out.read_text())
    assert result["rows"] == [[7, "n7"], [8, "n8"], [9, "n9"]]
    assert result["count"] == 10
    assert result["imported"] == []  # the driver never imported lance_spark (nor lance)
    table = lance.dataset(uri).to_table()
    assert sorted(table["id"].to_pylist()) == list(range(10))
