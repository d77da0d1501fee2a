"""What a session is and has, asked the same way on classic and Spark Connect: its kind,
application id, parallelism, confs; Spark's own parsing of type names and DDL; a Python
function pickled as Spark's JVM runs it."""

from __future__ import annotations

import os
import re
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, StructType

from lance_spark._spark.failures import error_summary
from lance_spark.errors import InvalidOptionError


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM on this side: no ``sparkContext``, ``_jdf``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parse_data_type(spark: SparkSession, text: str) -> DataType:
    """A Spark SQL type name (``bigint``, ``decimal(10, 2)``, ``array<float>``) as a
    ``DataType``, parsed by Spark itself (on Connect too); a bad one is an
    :class:`InvalidOptionError` naming it."""
    from pyspark.errors import PySparkException

    try:
        return spark.createDataFrame([], f"`c` {text}").schema["c"].dataType
    except (PySparkException, ValueError):
        raise InvalidOptionError(f"{text!r} is not a Spark SQL data type") from None


def parse_schema(spark: SparkSession, ddl: str) -> StructType:
    """A Spark DDL column list (``id bigint NOT NULL, label string COMMENT 'the label'``)
    as a ``StructType`` (NOT NULL and comments kept), parsed by Spark itself (on Connect
    too); a bad one is an :class:`InvalidOptionError` naming it."""
    from pyspark.errors import PySparkException

    try:
        return spark.createDataFrame([], ddl).schema
    except (PySparkException, ValueError) as err:
        raise InvalidOptionError(
            f"{ddl!r} is not a Spark DDL column list (name type [NOT NULL] [COMMENT '...'], "
            f"...): {error_summary(err)}"
        ) from None


def python_function_command(func: Any, return_type: DataType | None = None) -> bytes:
    """The pickled command of a Python function as Spark's JVM runs it (``SimplePythonFunction``
    bytes: ``(func, return_type)``, or the bare function of a UDTF class), for the companion
    to build the Spark job or table function from. pyspark's ``_wrap_function`` pickles the
    same, but needs a SparkContext; the companion's planner worker has none."""
    from pyspark import serializers

    pickler: Any = serializers.CloudPickleSerializer()  # type: ignore[no-untyped-call]
    return bytes(pickler.dumps(func if return_type is None else (func, return_type)))


def app_id(spark: SparkSession) -> str:
    """The Spark application id (``sparkContext.applicationId``; ``spark.app.id`` on Connect)."""
    if is_connect(spark):
        return str(spark.conf.get("spark.app.id") or "")
    return str(spark.sparkContext.applicationId)


def default_parallelism(spark: SparkSession) -> int:
    """``sparkContext.defaultParallelism``; on Connect, from ``spark.default.parallelism`` or
    the ``local[N]`` master, else 2 (Connect exposes no scheduler)."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return max(1, int(configured))
    master = str(spark.conf.get("spark.master", "") or "")
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if match:
        count = match.group(1)
        return max(1, os.cpu_count() or 1) if count == "*" else max(1, int(count))
    return 2


def conf_items(spark: SparkSession) -> dict[str, Any]:
    """Every conf of the session: the SparkConf (spark-defaults.conf, ``--conf``) and the
    session's SQL confs on top. Connect has no SparkConf, but its ``conf.getAll`` includes it
    (a session's SQL conf starts from the SparkConf)."""
    pairs: dict[str, Any] = {}
    if not is_connect(spark):
        pairs.update(dict(spark.sparkContext.getConf().getAll()))
    pairs.update(spark.conf.getAll)
    return pairs
