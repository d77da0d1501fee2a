"""``register(spark)``: everything a session needs to use the ``lance`` format (the top)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from lance_spark import _spark, sql
from lance_spark.source.datasource import FORMAT_NAME, SessionDefaults
from lance_spark.source.session import (
    FILTER_PUSHDOWN_CONF,
    checked_storage,
    redact_storage_options,
    reset_private_formats,
    source_class,
    storage_conf,
)


def register(spark: SparkSession, *, storage_options: Mapping[str, str] | None = None) -> None:
    """Register the ``lance`` format on ``spark`` (idempotent; only this session changes).

    - switches on Spark's filter pushdown for Python data sources, which is off by default;
    - takes ``storage_options`` (credentials included) as Lance storage options for every read
      and write of this session, catalog tables, SQL and :class:`LanceTable` included. They
      stay in Python: never in the Spark conf, job properties, plans or the event log; they
      reach the Python workers only inside the pickled data source;
    - also takes ``spark.lance.storage.<key>`` confs, for keys that are not secrets (a
      secret-looking key there is a :class:`~lance_spark.errors.SecretInConfError`, because
      Spark copies its conf into job properties and the event log in clear text);
      ``storage_options`` win over the conf, per-operation ``storage.<key>`` options over both;
      call ``register`` again after changing them;
    - makes ``CREATE TABLE t (cols) USING lance LOCATION 'uri'`` create the Lance table;
    - lets reads and writes run from any Python thread (``threading``, thread pools).

    Without credentials anywhere, Lance uses its standard chains (environment variables such
    as ``AWS_ACCESS_KEY_ID``, profiles, instance roles).

    Example::

        spark.conf.set("spark.lance.storage.aws_region", "eu-west-1")
        lance_spark.register(spark, storage_options={
            "aws_access_key_id": key_id, "aws_secret_access_key": secret})
        spark.read.format("lance").load("s3://bucket/pets.lance").show()
    """
    storage = {**storage_conf(spark), **checked_storage(storage_options)}
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    redact_storage_options(spark)
    defaults = SessionDefaults(
        storage=storage,
        app_id=_spark.app_id(spark),
        parallelism=_spark.default_parallelism(spark),
    )
    spark.dataSource.register(source_class(defaults, FORMAT_NAME))
    reset_private_formats(spark)
    sql.install(spark, defaults)
    _spark.install_thread_sessions()  # writes from any Python thread (see _spark)
