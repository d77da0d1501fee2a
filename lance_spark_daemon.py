"""Spark's Python daemon, without a traceback when Spark stops reading a worker early.

After ``show()``, ``limit(n)`` or ``take(n)`` the JVM closes a Python worker's socket as soon
as it has the rows it needs. The worker's last ``flush()`` in ``pyspark/daemon.py`` then
fails, and (SPARK-54344, Spark 4.1+) the daemon prints a ``BrokenPipeError`` traceback for
every such worker and kills it. The worker has nothing left to deliver, so this module runs
the same daemon and ends such a worker the same way (exit code 1, never reused), silently.
Any other error is Spark's, unchanged.

Enabled with ``spark.python.daemon.module=lance_spark_daemon`` (set by
``lance_spark.configure``, ``lance_spark.spark_conf()`` and ``conf/spark-defaults.conf``).
It imports neither ``lance_spark`` nor Lance: a daemon must not start threads before it
forks. It can go when Spark's daemon treats a closed socket as the normal end it is.
"""

from __future__ import annotations

import os
import socket

from pyspark import daemon as _daemon

_spark_worker = _daemon.worker


def worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _spark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        os._exit(1)  # what the daemon does after printing the traceback


if __name__ == "__main__":
    _daemon.worker = worker
    _daemon.manager()
