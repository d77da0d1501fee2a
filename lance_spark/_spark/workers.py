"""Spark's Python workers: what the connector does in them once per process."""

from __future__ import annotations

import gc
import os

# Set by Spark in the environment of its Python workers (tasks and planning calls) when it
# reuses them (spark.python.worker.reuse, the default).
_REUSED_WORKER_ENV = "SPARK_REUSE_WORKER"
_heap_frozen = False


def freeze_worker_heap() -> None:
    """In a reused Spark Python worker, keep what it holds now (the imported modules) out of
    every later garbage collection; once per process, nothing elsewhere.

    Spark limit (4.3): its Python daemon runs a full ``gc.collect()`` in a reused worker after
    every task and every planning call (``pyspark/daemon.py``). With pyspark, pyarrow and
    pylance imported that walks ~100,000 objects, ~30 ms, and the next call that lands on the
    worker waits for it: most of the fixed cost of a small query (a planning call of the JVM
    companion: 40 ms, 20 ms with this). ``gc.freeze`` (CPython 3.7+) moves the long-lived
    objects to a permanent generation, after one collection so that no garbage is kept;
    what later calls create is collected as before. It can go if Spark stops collecting.
    """
    global _heap_frozen
    if _heap_frozen or os.environ.get(_REUSED_WORKER_ENV) != "1":
        return
    _heap_frozen = True
    gc.collect()
    gc.freeze()
