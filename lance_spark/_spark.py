"""Every touch of Spark internals (Py4J, ``sparkContext``, plans), each with a Spark Connect path.

This is the bottom of the package next to :mod:`lance_spark.errors`: it imports only pyspark.
On a Spark Connect session there is no JVM on the client (``sparkContext``, ``_jdf``, ``_jc``
and ``_jsparkSession`` raise ``JVM_ATTRIBUTE_NOT_SUPPORTED``), so each helper here answers
from what both APIs offer, and says in its docstring which Spark limit it works around.

Writes from Python threads (``active_session``, ``install_thread_sessions``)
-------------------------------------------------------------------------------
Reads and writes from any Python thread: the JVM's active session, set where Spark needs it.

Why (Spark 4.3, classic sessions): Spark decides whether ``format("lance")`` names a Python
data source in ``DataSource.lookupDataSource``, which the write path
(``DataFrameWriter.save`` / ``saveAsTable`` -> ``lookupDataSourceV2``) calls with no session:
it asks ``SparkSession.getActiveSession``, a JVM *thread-local*, for its data source manager.
Then ``PythonDataSourceV2`` builds the Python source from ``SparkSession.active`` (that
thread-local, else the default session). PySpark's pinned-thread mode (the default) gives each
Python thread its own JVM thread, and a new JVM thread has no active session (only the thread
that created the session, or one that called ``createDataFrame``, has one). So in a
``threading.Thread`` or a ``ThreadPoolExecutor``, ``df.write.format("lance").save()`` failed with
``DATA_SOURCE_NOT_FOUND``; reads worked only because ``DataFrameReader.load`` checks its own
session, and then used the *default* session's registration (so a session made with
``newSession()`` and registered on its own got another session's defaults). A pyspark_<name>
module found by Spark's discovery does not help: the write path's check needs an active session
before it looks at any registration.

The fix: ``install()`` makes the terminal calls of PySpark's classic reader and writer
(``load``, ``save``, ``saveAsTable``, ``insertInto``) run with their own session active in the
calling thread and restore the previous one afterwards, which is what Spark's
``SparkSession.withActive`` does around the commands it runs itself (SQL, ``spark.table``).
It changes nothing else: any format, same session, five local py4j calls per read or write.
With pinned-thread mode off, py4j may serve one Python thread from several JVM threads, so no
thread-local can be relied on there; that mode is not supported for writes from threads.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter

_MARKER = "_lance_spark_with_active_session"
_PATCHED: tuple[tuple[type, str], ...] = (
    (DataFrameReader, "load"),
    (DataFrameWriter, "save"),
    (DataFrameWriter, "saveAsTable"),
    (DataFrameWriter, "insertInto"),
)

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def active_session(spark: SparkSession) -> Iterator[None]:
    """Run the block with ``spark`` as the JVM's active session of this thread (classic only).

    Example::

        with active_session(spark):
            df.write.format("lance").mode("append").save(uri)
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server sets the session of each request itself
        yield
        return
    sessions = getattr(jvm, "org.apache.spark.sql.classic.SparkSession")
    previous = sessions.getActiveSession()
    sessions.setActiveSession(spark._jsparkSession)
    try:
        yield
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()


def install_thread_sessions() -> None:
    """Wrap the classic reader's and writer's terminal calls (once per process; idempotent)."""
    for cls, name in _PATCHED:
        method = getattr(cls, name)
        if not getattr(method, _MARKER, False):
            setattr(cls, name, _with_own_session(method))


def _with_own_session(method: F) -> F:
    @functools.wraps(method)
    def wrapper(self: DataFrameReader | DataFrameWriter, *args: Any, **kwargs: Any) -> Any:
        with active_session(self._spark):
            return method(self, *args, **kwargs)

    setattr(wrapper, _MARKER, True)
    return wrapper  # type: ignore[return-value]


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks, inner ones doubled), for ``F.col``."""
    return "`" + name.replace("`", "``") + "`"


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM on this side: no ``sparkContext``, ``_jdf``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


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
