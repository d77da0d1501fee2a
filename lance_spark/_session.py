"""``register(spark)``: everything a session needs to use the ``lance`` format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrameReader, SparkSession

from lance_spark import _sql, _threads
from lance_spark._options import STORAGE_PREFIX
from lance_spark._source import FORMAT_NAME, LanceDataSource, SessionDefaults

STORAGE_CONF_PREFIX = "spark.lance.storage."
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the ``lance`` format on ``spark`` (idempotent; only this session changes).

    - switches on Spark's filter pushdown for Python data sources, which is off by default;
    - captures ``spark.lance.storage.<key>`` confs as Lance storage options for every read and
      write (call ``register`` again after changing them);
    - makes ``CREATE TABLE t (cols) USING lance LOCATION 'uri'`` create the Lance table;
    - lets reads and writes run from any Python thread (``threading``, thread pools).

    Example::

        spark.conf.set("spark.lance.storage.aws_region", "eu-west-1")
        lance_spark.register(spark)
        spark.read.format("lance").load("s3://bucket/pets.lance").show()
    """
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    defaults = SessionDefaults(
        storage=_storage_conf(spark),
        app_id=spark.sparkContext.applicationId,
        parallelism=max(1, int(spark.sparkContext.defaultParallelism)),
    )
    # A class made here (not importable by name) is pickled by value, so the defaults reach
    # the Python workers that plan and run reads and writes: they cannot read the Spark conf.
    source = type("LanceDataSource", (LanceDataSource,), {"defaults": defaults})
    spark.dataSource.register(source)
    _sql.install(spark, defaults)
    _threads.install()  # writes from any Python thread (see _threads for the Spark limit)


def lance_reader(spark: SparkSession, storage: Mapping[str, str]) -> DataFrameReader:
    """``spark.read.format("lance")`` with ``storage`` as ``storage.<key>`` options."""
    reader = spark.read.format(FORMAT_NAME)
    for key, value in storage.items():
        reader = reader.option(f"{STORAGE_PREFIX}{key}", value)
    return reader


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks, inner ones doubled), for ``F.col``."""
    return "`" + name.replace("`", "``") + "`"


def _storage_conf(spark: SparkSession) -> dict[str, str]:
    pairs: dict[str, Any] = dict(spark.sparkContext.getConf().getAll())
    pairs.update(spark.conf.getAll)
    return {
        key[len(STORAGE_CONF_PREFIX) :]: str(value)
        for key, value in pairs.items()
        if key.startswith(STORAGE_CONF_PREFIX)
    }
