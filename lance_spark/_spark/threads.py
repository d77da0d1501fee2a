"""Reads and writes from any Python thread: the JVM's active session, set where Spark needs
it (``active_session``, ``install_thread_sessions``).

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

The fix: ``install_thread_sessions()`` makes the terminal calls of PySpark's classic reader and writer
(``load``, ``save``, ``saveAsTable``, ``insertInto``) run with their own session active in the
calling thread and restore the previous one afterwards, which is what Spark's
``SparkSession.withActive`` does around the commands it runs itself (SQL, ``spark.table``).
It changes nothing else: any format, same session, five local py4j calls per read or write.
With pinned-thread mode off, py4j may serve one Python thread from several JVM threads, so no
thread-local can be relied on there; that mode is not supported for writes from threads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter

ACTIVE_SESSION_MARKER = "_lance_spark_with_active_session"
_PATCHED: tuple[tuple[type, str], ...] = (
    (DataFrameReader, "load"),
    (DataFrameWriter, "save"),
    (DataFrameWriter, "saveAsTable"),
    (DataFrameWriter, "insertInto"),
)

_F = TypeVar("_F", bound=Callable[..., Any])


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
        if not getattr(method, ACTIVE_SESSION_MARKER, False):
            setattr(cls, name, _with_own_session(method))


def _with_own_session(method: _F) -> _F:
    @functools.wraps(method)
    def wrapper(self: DataFrameReader | DataFrameWriter, *args: Any, **kwargs: Any) -> Any:
        with active_session(self._spark):
            return method(self, *args, **kwargs)

    setattr(wrapper, ACTIVE_SESSION_MARKER, True)
    return wrapper  # type: ignore[return-value]
