"""Spark's Python daemon, without a traceback when Spark stops reading a worker early.

After ``show()``, ``limit(n)`` or ``take(n)`` the JVM closes a Python worker's socket as soon
as it has the rows it needs, and at ``spark.stop()`` it closes the sockets of its idle
workers before it stops their daemon. The worker's last ``flush()`` in ``pyspark/daemon.py``
then fails, and (SPARK-54344, Spark 4.1+) the daemon prints a ``BrokenPipeError`` traceback
for every such worker and kills it. The worker has nothing left to deliver, so this module
runs the same daemon and ends such a worker the same way (exit code 1, never reused),
silently. Any other error is Spark's, unchanged.

Enabled with ``spark.python.daemon.module=lance_spark_daemon`` (set by
``lance_spark.configure``, ``lance_spark.spark_conf()`` and ``conf/spark-defaults.conf``).
Spark 4.3 starts the daemons of its planning calls (the ``pyspark.sql.worker.*`` modules of
Python data sources, the companion's ``pyspark_lance``) as ``python -m pyspark.daemon``
whatever that setting says; :func:`quiet` is applied there by ``lance_spark`` when a forked
worker imports it (``lance_spark._spark.quiet_spark_daemon``).
It imports neither ``lance_spark`` nor Lance: a daemon must not start threads before it
forks. It can go when Spark's daemon treats a closed socket as the normal end it is.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from types import ModuleType

from pyspark import daemon as _daemon

Worker = Callable[[socket.socket, bool], int]
_QUIET = "_lance_spark_quiet"


def quiet(daemon: ModuleType) -> None:
    """Make ``daemon`` (Spark's daemon module: imported, or the ``__main__`` of
    ``python -m pyspark.daemon``) end a worker whose socket Spark closed without a traceback,
    for every call its worker loop makes from now on (idempotent)."""
    spark_worker: Worker = daemon.worker
    if getattr(spark_worker, _QUIET, False):
        return

    def worker(sock: socket.socket, authenticated: bool) -> int:
        try:
            return spark_worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            os._exit(1)  # what the daemon does after printing the traceback

    setattr(worker, _QUIET, True)
    daemon.worker = worker


if __name__ == "__main__":
    quiet(_daemon)
    _daemon.manager()
