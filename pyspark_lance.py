"""Spark 4's discovery of Python data sources: ``format("lance")`` without ``register``.

Spark imports every top-level module named ``pyspark_<name>`` that it finds on the Python
path of its workers and registers the ``DefaultSource`` each exports, for every session of
the application (classic or Spark Connect, ``newSession()`` included). Installing
``lance_spark`` installs this module, so ``format("lance")`` works with no setup.
``lance_spark.register(spark)`` still does more (session storage options, the SQL front,
filter pushdown switched on, writes from threads) and its registration wins in its session.
"""

from lance_spark.source.datasource import LanceDataSource as DefaultSource

__all__ = ["DefaultSource"]
