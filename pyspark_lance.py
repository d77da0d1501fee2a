"""Spark 4's discovery of Python data sources: ``format("lance")`` without ``register``.

Spark imports every top-level module named ``pyspark_<name>`` that it finds on the Python
path of its workers and registers the ``DefaultSource`` each exports, for every session of
the application (classic or Spark Connect, ``newSession()`` included). Installing
``lance_spark`` installs this module, so ``format("lance")`` works with no setup.
``lance_spark.register(spark)`` still does more (session storage options, the SQL front,
filter pushdown switched on, writes from threads) and its registration wins in its session.

This module is also the worker module of the JVM companion's planning calls (``main``):
Spark's Python daemon runs only worker modules whose name starts with ``pyspark``.
"""

from typing import IO

from lance_spark.source import scan_planner
from lance_spark.source.datasource import LanceDataSource as DefaultSource

__all__ = ["DefaultSource", "main"]


def main(infile: IO[bytes], outfile: IO[bytes]) -> None:
    """The companion's planner worker: scans, and the session catalog's procedures."""
    from lance_spark.table.procedures import run  # only when a worker plans (not discovery)

    scan_planner.main(infile, outfile, procedures=run)


if __name__ == "__main__":  # the planner worker without Spark's daemon (spark.python.use.daemon)
    from pyspark.worker_util import get_sock_file_to_executor

    with get_sock_file_to_executor() as sock_file:
        main(sock_file, sock_file)
