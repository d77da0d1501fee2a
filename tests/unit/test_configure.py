"""``lance_spark.configure`` / ``spark_conf``: the settings that load the JVM companion, its
filter pushdown and the quiet Python daemon (no JVM)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark.sql import SparkSession

import lance_spark
from lance_spark import _settings, _spark


def test_configure_keeps_what_the_builder_has() -> None:
    builder = SparkSession.builder.config("spark.jars", "/opt/a.jar").config(
        "spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"
    )
    options = lance_spark.configure(builder)._options  # type: ignore[attr-defined]
    assert options["spark.jars"] == f"/opt/a.jar,{lance_spark.companion_jar()}"
    assert options["spark.sql.extensions"] == (
        "io.delta.sql.DeltaSparkSessionExtension,lance_spark.companion.LanceExtensions"
    )
    assert options["spark.python.daemon.module"] == "lance_spark_daemon"
    assert options["spark.sql.python.filterPushdown.enabled"] == "true"
    for setting in _settings.RECOMMENDED:  # the recommended settings (tests/unit/test_settings)
        assert setting.is_set(options[setting.key])
    # A daemon module the user chose is kept.
    mine = SparkSession.builder.config("spark.python.daemon.module", "my_daemon")
    kept = lance_spark.configure(mine)._options  # type: ignore[attr-defined]
    assert kept["spark.python.daemon.module"] == "my_daemon"
    # So is a filter pushdown setting the user chose, even off.
    off = SparkSession.builder.config("spark.sql.python.filterPushdown.enabled", "false")
    kept = lance_spark.configure(off)._options  # type: ignore[attr-defined]
    assert kept["spark.sql.python.filterPushdown.enabled"] == "false"
    # And a session catalog the user chose (Delta's): register then warns (tests/spark).
    delta = SparkSession.builder.config(
        "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    )
    kept = lance_spark.configure(delta)._options  # type: ignore[attr-defined]
    assert kept["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    assert options["spark.sql.catalog.spark_catalog"] == "lance_spark.companion.LanceSessionCatalog"
    # Idempotent: configuring twice adds nothing.
    again = lance_spark.configure(builder)._options  # type: ignore[attr-defined]
    assert again["spark.jars"] == options["spark.jars"]


def test_spark_conf_names_the_jar_shipped_in_the_package() -> None:
    conf = lance_spark.spark_conf()
    assert conf == {
        "spark.jars": lance_spark.companion_jar(),
        "spark.driver.extraClassPath": lance_spark.companion_jar(),
        "spark.sql.extensions": "lance_spark.companion.LanceExtensions",
        # Lance tables in Spark's session catalog, for every client.
        "spark.sql.catalog.spark_catalog": "lance_spark.companion.LanceSessionCatalog",
        "spark.python.daemon.module": "lance_spark_daemon",
        # The companion pushes filters only with it, also for clients that never call register.
        "spark.sql.python.filterPushdown.enabled": "true",
        **{s.key: s.value for s in _settings.RECOMMENDED},
    }
    assert lance_spark.companion_jar().endswith("lance_spark/jars/lance-spark-companion.jar")


# A worker forked by ``python -m pyspark.daemon`` (Spark's planning daemons) that imported
# lance_spark: its daemon's worker loop ends a closed socket silently; other errors are Spark's.
QUIET_WORKER = """
import sys, types
daemon = types.ModuleType("pyspark.daemon")
calls = []
def worker(sock, authenticated):
    calls.append(sock)
    raise {error}("socket")
daemon.worker = worker
daemon.__spec__ = types.SimpleNamespace(name="pyspark.daemon")
sys.modules["__main__"] = daemon
from lance_spark import _spark
assert _spark.quiet_spark_daemon() and _spark.quiet_spark_daemon()  # idempotent
daemon.worker("sock", True)
"""


@pytest.mark.parametrize("error", ["BrokenPipeError", "ValueError"])
def test_spark_daemon_workers_end_a_closed_socket_silently(error: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", QUIET_WORKER.format(error=error)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1  # what Spark's daemon does with the worker either way
    if error == "BrokenPipeError":
        assert done.stderr == ""
    else:  # not ours to hide: any other error keeps its traceback
        assert "Traceback" in done.stderr and "ValueError: socket" in done.stderr


def test_other_main_modules_are_left_alone() -> None:
    assert _spark.quiet_spark_daemon() is False  # pytest's __main__ is no Spark daemon
