"""A Spark driver of its own for tests/spark/test_companion_setup.py (run as a subprocess):
how a session gets the JVM companion, or does without it.

    python _companion_driver.py configure <table>   # built with lance_spark.configure
    python _companion_driver.py missing   <table>   # no jar: register warns, Spark plans reads
    python _companion_driver.py plain     <table>   # no recommended settings: register says so
    python _companion_driver.py settings  <table>   # configure on a builder with the user's own

Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from typing import Any

from pyspark.sql import DataFrame, SparkSession

import lance_spark
from lance_spark import _settings, _spark

RESULT_PREFIX = "RESULT "


def _plan(frame: DataFrame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain()
    return out.getvalue()


USER_JAVA_OPTION = "-Dlance_spark.test=1"


def main(mode: str, uri: str) -> dict[str, Any]:
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if mode == "settings":  # settings of the user's that configure must keep
        builder = builder.config("spark.driver.extraJavaOptions", USER_JAVA_OPTION).config(
            _settings.MAX_BYTES_PER_BATCH_CONF, "32m"
        )
    if mode in ("configure", "settings"):
        builder = lance_spark.configure(builder)
    elif mode == "missing":  # a package whose jar was not built
        from lance_spark._spark import companion

        def missing() -> str:
            return "/nonexistent/lance-spark-companion.jar"

        # Where it is defined (what the companion's own functions call) and where the rest of
        # the package reads it (the _spark package's name for it).
        companion.companion_jar_path = missing  # type: ignore[assignment]
        _spark.companion_jar_path = missing  # type: ignore[assignment]
    spark = builder.getOrCreate()
    try:
        before = _spark.companion_enabled(spark)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lance_spark.register(spark)
            lance_spark.register(spark)  # warns once per process

        def table() -> DataFrame:
            return spark.read.format("lance").load(uri)

        reused = table()
        filtered_then_all = (reused.where("id > 10").count(), reused.count())
        insert = _insert_between_tables(spark, uri) if mode == "missing" else None
        public_api = _public_api_without_jar() if mode == "missing" else None
        table_api = _table_api_without_jar(spark, uri) if mode == "missing" else None
        # The other reuse patterns of SPARK-58551: a temp view queried twice, a self-join.
        table().createOrReplaceTempView("companion_view")
        view = [
            spark.sql(f"SELECT * FROM companion_view WHERE {cond}").count()
            for cond in ("id > 10", "id < 5")
        ]
        left, right = reused.where("id < 5").alias("l"), reused.where("id < 8").alias("r")
        self_join = left.join(right, "id").count()
        return {
            "enabled_before_register": before,
            "enabled": _spark.companion_enabled(spark),
            "warnings": [str(w.message) for w in caught if "companion" in str(w.message)],
            "settings_warnings": [
                str(w.message)
                for w in caught
                if issubclass(w.category, lance_spark.PerformanceWarning)
            ],
            "plan": _plan(table().where("id > 10").select("id")),
            "filtered": sorted(r.id for r in table().where("id > 10").select("id").collect()),
            "count": table().count(),
            "limit": len(table().limit(3).collect()),
            "reused": filtered_then_all,
            "insert": insert,
            "public_api": public_api,
            "table_api": table_api,
            "view": view,
            "self_join": self_join,
            "conf": {
                key: spark.conf.get(key, "") for key in ("spark.jars", "spark.sql.extensions")
            },
            "settings": {s.key: spark.conf.get(s.key, None) for s in _settings.RECOMMENDED},
        }
    finally:
        spark.stop()


def _public_api_without_jar() -> dict[str, str]:
    """What ``companion_jar()``, ``spark_conf()`` and ``configure()`` raise without the jar."""
    raised = {}
    calls = {
        "companion_jar": lance_spark.companion_jar,
        "spark_conf": lance_spark.spark_conf,
        "configure": lambda: lance_spark.configure(SparkSession.builder),
    }
    for name, call in calls.items():
        try:
            call()
            raised[name] = "nothing"
        except lance_spark.CompanionNotFoundError as err:
            raised[name] = str(err)
    return raised


def _table_api_without_jar(spark: SparkSession, uri: str) -> dict[str, Any]:
    """What ``LanceTable.update`` and ``delete`` (statements Spark plans through the
    companion) raise without it, and the table's version before and after."""
    import lance

    table = lance_spark.LanceTable.forPath(spark, uri)
    before = lance.dataset(uri).version
    raised = {}
    calls = {
        "update": lambda: table.update("id < 3", {"id": "id + 100"}),
        "delete": lambda: table.delete("id < 3"),
    }
    for name, call in calls.items():
        try:
            call()
            raised[name] = "nothing"
        except Exception as err:  # noqa: BLE001 - the test checks the type and message
            raised[name] = f"{type(err).__name__}: {err}"
    return {"raised": raised, "before": before, "after": lance.dataset(uri).version}


def _insert_between_tables(spark: SparkSession, uri: str) -> dict[str, Any]:
    """``INSERT INTO tgt SELECT * FROM src`` between two Lance catalog tables: the error it
    raised (None: none), and both tables' versions before and after."""
    import lance

    target = uri + ".target"
    spark.createDataFrame([], "id long").write.format("lance").save(target)
    spark.sql(f"CREATE TABLE companion_src USING lance LOCATION '{uri}'")
    spark.sql(f"CREATE TABLE companion_tgt USING lance LOCATION '{target}'")

    def versions() -> list[int]:
        return [lance.dataset(u).version for u in (uri, target)]

    before = versions()
    error = None
    try:
        spark.sql("INSERT INTO companion_tgt SELECT * FROM companion_src")
    except Exception as err:  # noqa: BLE001 - the test checks the message
        error = str(err)
    return {"error": error, "before": before, "after": versions()}


if __name__ == "__main__":
    print(RESULT_PREFIX + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
