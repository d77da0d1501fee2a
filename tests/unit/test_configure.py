"""``lance_spark.configure`` / ``spark_conf``: the settings that load the JVM companion and the
quiet Python daemon (no JVM)."""

from __future__ import annotations

from pyspark.sql import SparkSession

import lance_spark
from lance_spark import _settings


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
    for setting in _settings.RECOMMENDED:  # the recommended settings (tests/unit/test_settings)
        assert setting.is_set(options[setting.key])
    # A daemon module the user chose is kept.
    mine = SparkSession.builder.config("spark.python.daemon.module", "my_daemon")
    kept = lance_spark.configure(mine)._options  # type: ignore[attr-defined]
    assert kept["spark.python.daemon.module"] == "my_daemon"
    # Idempotent: configuring twice adds nothing.
    again = lance_spark.configure(builder)._options  # type: ignore[attr-defined]
    assert again["spark.jars"] == options["spark.jars"]


def test_spark_conf_names_the_jar_shipped_in_the_package() -> None:
    conf = lance_spark.spark_conf()
    assert conf == {
        "spark.jars": lance_spark.companion_jar(),
        "spark.sql.extensions": "lance_spark.companion.LanceExtensions",
        "spark.python.daemon.module": "lance_spark_daemon",
        **{s.key: s.value for s in _settings.RECOMMENDED},
    }
    assert lance_spark.companion_jar().endswith("lance_spark/jars/lance-spark-companion.jar")
