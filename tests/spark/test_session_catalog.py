"""PROTOTYPE (issue 30): the JVM companion's session catalog
(``spark.sql.catalog.spark_catalog=lance_spark.companion.LanceSessionCatalog``) serves Lance
tables to clients that never ran ``lance_spark``'s Python SQL front: the ``spark-sql`` CLI with
only server settings reads a ``USING lance`` table, its old versions (``VERSION AS OF``,
``TIMESTAMP AS OF``) and ``lance.`path``` identifiers, each compared with pylance. Notes:
jvm/CATALOG_NOTES.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import lance_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CATALOG = "lance_spark.companion.LanceSessionCatalog"


def _server_conf(base: Path) -> dict[str, str]:
    """``lance_spark.spark_conf()`` plus the session catalog: all a server needs."""
    conf = {
        **lance_spark.spark_conf(),
        "spark.sql.catalog.spark_catalog": CATALOG,
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": str(base / "warehouse"),
        "spark.sql.session.timeZone": "UTC",
    }
    # Derby's metastore_db and derby.log stay in the test's directory.
    java = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{java} -Dderby.system.home={base}".strip()
    return conf


def _spark_sql(
    statements: list[str], base: Path, *, ok: bool = True
) -> tuple[dict[str, list[str]], subprocess.CompletedProcess[str]]:
    """Runs ``statements`` in one ``spark-sql -S -e`` with only ``_server_conf`` (a properties
    file, an empty conf dir); the rows of each ``-- name`` marker's query, by name, and the
    process (``ok``: it must succeed)."""
    import pyspark

    spark_sql = Path(pyspark.__file__).resolve().parent / "bin" / "spark-sql"
    props = base / "lance.properties"
    props.write_text("".join(f"{k} {v}\n" for k, v in _server_conf(base).items()))
    conf_dir = base / "conf"
    conf_dir.mkdir(exist_ok=True)
    shutil.copy(REPO / "conf" / "log4j2.properties", conf_dir)  # quiet logs only
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["SPARK_CONF_DIR"] = str(conf_dir)
    env.pop("SPARK_HOME", None)
    script: list[str] = []
    for statement in statements:
        if statement.startswith("-- "):
            script.append(f"SELECT '#{statement[3:]}'")
        else:
            script.append(statement)
    done = subprocess.run(
        [str(spark_sql), "--properties-file", str(props), "-S", "-e", ";\n".join(script) + ";"],
        env=env,
        cwd=base,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if ok and done.returncode != 0:
        pytest.fail(
            f"spark-sql exited with {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}"
        )
    results: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("#"):
            current = results.setdefault(line[1:], [])
        elif current is not None:
            current.append(line)
    return results, done


def _rows(table: pa.Table) -> list[str]:
    """pylance's rows as ``spark-sql`` prints them (tab-separated), ordered by id."""
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    return ["\t".join(str(v) for v in row.values()) for row in rows]


@pytest.fixture
def table(tmp_path: Path) -> tuple[str, str]:
    """A Lance table of two versions; the path and an instant between them (UTC)."""
    path = str(tmp_path / "data" / "t.lance")
    lance.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]}), path
    )
    time.sleep(0.05)
    lance.write_dataset(
        pa.table({"id": pa.array([4, 5], pa.int64()), "s": ["d", "e"]}), path, mode="append"
    )
    first = lance.dataset(path).versions()[0]["timestamp"]
    if first.tzinfo is None:  # pylance gives local time
        first = first.astimezone()
    instant = first.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return path, instant


def test_spark_sql_cli_reads_versions_and_paths_through_the_session_catalog(
    table: tuple[str, str], tmp_path: Path
) -> None:
    path, instant = table
    out, _ = _spark_sql(
        [
            f"CREATE TABLE t USING lance LOCATION '{path}'",
            "-- latest",
            "SELECT * FROM t ORDER BY id",
            "-- v1",
            "SELECT * FROM t VERSION AS OF 1 ORDER BY id",
            "-- ts1",
            f"SELECT * FROM t TIMESTAMP AS OF '{instant}' ORDER BY id",
            "-- path",
            f"SELECT * FROM lance.`{path}` ORDER BY id",
            "-- path_v1",
            f"SELECT * FROM lance.`{path}` VERSION AS OF 1 ORDER BY id",
            "-- plan",
            "EXPLAIN SELECT * FROM t VERSION AS OF 1 WHERE id > 1",
            "INSERT INTO t VALUES (6, 'f')",
            "-- inserted",
            "SELECT * FROM t ORDER BY id",
            f"INSERT INTO lance.`{path}` VALUES (7, 'g')",
            "-- v2_after_writes",
            "SELECT * FROM t VERSION AS OF 2 ORDER BY id",
        ],
        tmp_path,
    )
    ds = lance.dataset(path)
    assert ds.version == 4  # two INSERTs, one version each
    assert out["latest"] == _rows(ds.checkout_version(2).to_table())
    assert out["v1"] == _rows(ds.checkout_version(1).to_table()) == ["1\ta", "2\tb", "3\tc"]
    assert out["ts1"] == out["v1"]
    assert out["path"] == out["latest"]
    assert out["path_v1"] == out["v1"]
    plan = "\n".join(out["plan"])
    assert "LanceScan" in plan and "Version=1" in plan, plan
    assert out["inserted"] == _rows(ds.checkout_version(3).to_table())
    assert out["inserted"][-1] == "6\tf"
    assert out["v2_after_writes"] == out["latest"]
    assert _rows(ds.to_table())[-1] == "7\tg"


def test_spark_sql_cli_reports_a_missing_version(table: tuple[str, str], tmp_path: Path) -> None:
    """A version Lance does not have fails in Python (the catalog asks it for the schema)."""
    path, _ = table
    _, done = _spark_sql(
        [f"CREATE TABLE t USING lance LOCATION '{path}'", "SELECT * FROM t VERSION AS OF 9"],
        tmp_path,
        ok=False,
    )
    assert done.returncode != 0
    assert "version" in done.stderr.lower() and "9" in done.stderr, done.stderr[-3000:]


def test_time_stamp_format_matches_python() -> None:
    """What the catalog hands Python for ``TIMESTAMP AS OF`` (an ISO instant) parses."""
    from lance_spark.source.options import parse_timestamp

    assert parse_timestamp("2026-01-31T12:00:00.000123Z") == datetime(
        2026, 1, 31, 12, 0, 0, 123, tzinfo=UTC
    )


def test_spark_connect_client_without_lance_spark_gets_the_same(table: tuple[str, str]) -> None:
    """A Spark Connect client that never calls ``register`` (no Python SQL front, no
    patches): the server's session catalog serves time travel, path identifiers and writes."""
    from _servers import connect_server
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    path, _ = table
    conf = {**lance_spark.spark_conf(), "spark.sql.catalog.spark_catalog": CATALOG}
    with connect_server(conf) as url:
        client = ConnectSession.builder.remote(url).create()
        try:
            client.sql(f"CREATE TABLE t USING lance LOCATION '{path}'")

            def ids(frame: object) -> list[int]:
                return sorted(r.id for r in frame.collect())  # type: ignore[attr-defined]

            v1 = [1, 2, 3]
            assert ids(client.sql("SELECT * FROM t VERSION AS OF 1")) == v1
            assert ids(client.read.option("versionAsOf", "1").table("t")) == v1
            assert ids(client.sql(f"SELECT * FROM lance.`{path}` VERSION AS OF 1")) == v1
            client.createDataFrame([(6, "f")], "id long, s string").writeTo("t").append()
            client.sql("INSERT INTO t VALUES (7, 'g')")
            assert ids(client.table("t")) == [1, 2, 3, 4, 5, 6, 7]
            assert lance.dataset(path).version == 4
        finally:
            client.stop()
