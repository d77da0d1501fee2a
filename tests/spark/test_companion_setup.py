"""How a session gets the JVM companion: ``lance_spark.configure`` at build time (what a user
does for a new session, a ``spark-submit`` or a cluster), and what happens without it (a
one short warning, every read still right). Each case is a driver of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import lance_spark
from lance_spark import _settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = Path(__file__).resolve().with_name("_companion_driver.py")
ROWS = 40


def _result_of(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs a Python process of its own and returns the JSON of its ``RESULT`` line."""
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        pytest.fail(
            f"{argv[1]} exited with {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def _run(mode: str, uri: str, cwd: Path, *, conf_dir: bool = True) -> dict[str, Any]:
    """``conf_dir`` False: a user's own session, without the repository's spark-defaults.conf."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if not conf_dir:
        env.pop("SPARK_CONF_DIR", None)
    return _result_of([sys.executable, str(DRIVER), mode, uri], cwd, env)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array(range(ROWS), pa.int64())}), path)
    return path


def test_configure_loads_the_companion_at_session_build(uri: str, tmp_path: Path) -> None:
    result = _run("configure", uri, tmp_path)
    assert result["enabled_before_register"] is True  # from spark.sql.extensions
    assert result["enabled"] is True and result["warnings"] == []
    assert lance_spark.companion_jar() in result["conf"]["spark.jars"].split(",")
    assert result["conf"]["spark.sql.extensions"] == "lance_spark.companion.LanceExtensions"
    assert "LanceScan" in result["plan"]
    assert result["filtered"] == list(range(11, ROWS))
    assert (result["count"], result["limit"]) == (ROWS, 3)
    assert result["reused"] == [ROWS - 11, ROWS]
    assert result["view"] == [ROWS - 11, 5] and result["self_join"] == 5


def test_without_the_jar_register_warns_once_and_reads_stay_right(uri: str, tmp_path: Path) -> None:
    result = _run("missing", uri, tmp_path)
    assert result["enabled_before_register"] is False and result["enabled"] is False
    assert len(result["warnings"]) == 1
    message = result["warnings"][0]
    assert "right but slower" in message and "reinstall lance_spark" in message
    assert "(Python)" in result["plan"] and "LanceScan" not in result["plan"]
    assert result["filtered"] == list(range(11, ROWS))
    assert (result["count"], result["limit"]) == (ROWS, 3)
    # SPARK-58551: Spark reuses a Python reader planned with pushed filters for the same
    # DataFrame's next query; without the companion nothing is pushed, so the count after a
    # filtered query is the whole table's.
    assert result["reused"] == [ROWS - 11, ROWS]
    assert result["view"] == [ROWS - 11, 5] and result["self_join"] == 5
    for name, message in result["public_api"].items():
        assert "no JVM companion jar" in message and "/nonexistent/" in message, name
    # A write into a catalog table needs the companion for the table's location: without it
    # the INSERT fails, naming what to do, and neither table changes.
    insert = result["insert"]
    assert insert["error"] is not None and "lance_spark.configure" in insert["error"]
    assert "needs the table's path" in insert["error"]
    assert insert["before"] == insert["after"]
    # LanceTable.update / delete are statements Spark plans through the companion: without
    # it they fail naming what to do, and the table does not change.
    table_api = result["table_api"]
    for name, raised in table_api["raised"].items():
        assert raised.startswith("CompanionNotFoundError: "), (name, raised)
        assert "lance_spark.configure" in raised, name
    assert table_api["before"] == table_api["after"]


def test_a_plain_session_hears_once_which_recommended_settings_it_lacks(
    uri: str, tmp_path: Path
) -> None:
    result = _run("plain", uri, tmp_path, conf_dir=False)
    assert len(result["settings_warnings"]) == 1  # register was called twice
    message = result["settings_warnings"][0]
    assert "lance_spark.configure(SparkSession.builder)" in message
    for setting in _settings.RECOMMENDED:
        assert setting.key in message
        assert setting.is_set(result["settings"][setting.key]) is False  # none was set
    assert result["enabled"] is True  # the companion, register turns on by itself
    assert result["filtered"] == list(range(11, ROWS)) and result["count"] == ROWS


def test_configure_sets_the_recommended_settings_and_keeps_the_users(
    uri: str, tmp_path: Path
) -> None:
    # The driver's builder has -Dlance_spark.test=1 in spark.driver.extraJavaOptions and
    # maxBytesPerBatch=32m before configure.
    result = _run("settings", uri, tmp_path, conf_dir=False)
    assert result["settings_warnings"] == [] and result["warnings"] == []
    settings = result["settings"]
    assert all(s.is_set(settings[s.key]) for s in _settings.RECOMMENDED)
    assert settings[_settings.UNIX_SOCKET_CONF] == "true"
    assert "-Dlance_spark.test=1" in settings[_settings.DRIVER_JAVA_OPTIONS].split()
    for flag in _settings.ARROW_UNCHECKED_FLAGS:
        assert flag in settings[_settings.EXECUTOR_JAVA_OPTIONS].split()
    assert settings[_settings.MAX_BYTES_PER_BATCH_CONF] == "32m"  # the user's, kept
    assert result["filtered"] == list(range(11, ROWS)) and result["count"] == ROWS


_CONNECT_CLIENT = """
import json, sys
from pyspark.sql.connect.session import SparkSession
import lance_spark
session = SparkSession.builder.remote(sys.argv[1]).create()
df = session.read.format("lance").load(sys.argv[2])
print("RESULT " + json.dumps({
    "enabled": lance_spark.companion_enabled(session),
    "counts": [df.where("id > 10").count(), df.count()],
}))
"""


def test_a_connect_server_without_the_jar_is_reported_and_answers_right(
    uri: str, tmp_path: Path
) -> None:
    """A Connect server whose configuration names the companion but whose jar is missing:
    ``companion_enabled`` asks the server what it loaded (not its configuration), and a
    DataFrame counted after a filtered query on it counts every row. With the session
    catalog named too (all of ``spark_conf()``), every statement fails naming the missing
    class: no answer, so no wrong one."""
    from _servers import connect_server

    missing = "/nonexistent/companion.jar"
    confs = dict(
        lance_spark.spark_conf(),
        **{"spark.jars": missing, "spark.driver.extraClassPath": missing},
    )
    without_catalog = {k: v for k, v in confs.items() if k != "spark.sql.catalog.spark_catalog"}
    with connect_server(without_catalog) as url:
        result = _result_of([sys.executable, "-c", _CONNECT_CLIENT, url, uri], tmp_path)
    assert result == {"enabled": False, "counts": [ROWS - 11, ROWS]}
    with connect_server(confs) as url:
        done = subprocess.run(
            [sys.executable, "-c", _CONNECT_CLIENT, url, uri],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert done.returncode != 0 and "RESULT" not in done.stdout
    assert "CANNOT_LOAD_CATALOG" in done.stderr and "LanceSessionCatalog" in done.stderr


# A client that never imports lance_spark (nor calls register): only the server's
# configuration can switch filter pushdown on for its session.
_PLAIN_CONNECT_CLIENT = """
import contextlib, io, json, sys
from pyspark.sql.connect.session import SparkSession
session = SparkSession.builder.remote(sys.argv[1]).create()
frame = session.read.format("lance").load(sys.argv[2]).where("id > 10")
plan = io.StringIO()
with contextlib.redirect_stdout(plan):
    frame.explain()
print("RESULT " + json.dumps({
    "pushdown": session.conf.get("spark.sql.python.filterPushdown.enabled"),
    "plan": plan.getvalue(),
    "ids": sorted(r.id for r in frame.collect()),
    "imported": sorted(m for m in sys.modules if m.startswith("lance")),
}))
"""


def test_a_connect_server_started_with_spark_conf_pushes_filters_without_register(
    uri: str, tmp_path: Path
) -> None:
    """A Connect server started with ``spark_conf()`` only (Spark's defaults otherwise, not the
    repository's spark-defaults.conf): a client that never calls ``register`` still gets its
    filters pushed into Lance, because ``spark_conf()`` switches Spark's filter pushdown for
    Python data sources on."""
    from _servers import connect_server

    with connect_server(lance_spark.spark_conf(), repo_conf=False) as url:
        result = _result_of([sys.executable, "-c", _PLAIN_CONNECT_CLIENT, url, uri], tmp_path)
    assert result["imported"] == []  # the client never imported lance_spark
    assert result["pushdown"] == "true"
    assert result["ids"] == list(range(11, ROWS))
    plan = result["plan"]
    assert "LanceScan" in plan and "Filter " not in plan, plan  # Lance filters, not Spark


def test_companion_enabled_asks_the_connect_server(connect_spark: Any) -> None:
    """The tests' Connect server is started with ``spark_conf()``: it loaded the companion."""
    assert lance_spark.companion_enabled(connect_spark) is True


def test_doctor_passes_in_a_working_installation(tmp_path: Path) -> None:
    """``python -m lance_spark doctor`` outside the repository, without its conf: every check
    ok (Java, the jar, the workers' interpreter, the companion in a live session, its filter
    pushdown from configure, a Lance round trip through Spark, the recommended settings from
    configure)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("SPARK_CONF_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "lance_spark", "doctor"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    names = [ln.split(":")[0] for ln in lines if ln.startswith("ok")]
    assert names == [
        "ok    java",
        "ok    companion jar",
        "ok    worker python",
        "ok    companion in session",
        "ok    filter pushdown",
        "ok    session catalog",
        "ok    write and read",
        "ok    recommended settings",
    ]
    assert lines[-1] == "all checks passed"
