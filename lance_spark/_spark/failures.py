"""Spark's errors on the client: a connector error rebuilt from Spark's text of it, the
exceptions a failed query raises, and the one line that says what went wrong."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

# A connector error raised in a write task, as Spark's error text shows it.
_TASK_ERROR = re.compile(r"lance_spark\.errors\.(\w+): (.*?)(?:\n SQLSTATE|\n\tat |\n\n|\Z)", re.S)


@contextmanager
def connector_errors(source: str | None) -> Iterator[None]:
    """A ``lance`` write whose Spark job failed with a connector error (raised in a task or
    by the source's planning) raises that error, as its own type, from Spark's.

    Spark limit (4.3): a Python data source's errors reach the caller as Spark's
    ``PythonException`` / ``AnalysisException`` text; only the text names the connector's
    error type. Can go when Spark keeps a Python worker's exception type."""
    from pyspark.errors import PySparkException

    from lance_spark import errors

    try:
        yield
    except PySparkException as err:
        match = _TASK_ERROR.search(str(err)) if (source or "").lower() == "lance" else None
        found = getattr(errors, match.group(1), None) if match else None
        translated = None
        if match and isinstance(found, type) and issubclass(found, errors.LanceSparkError):
            try:
                translated = found(match.group(2).strip())
            except TypeError:  # an error type that needs more than its message
                translated = None
        if translated is None:
            raise
        raise translated from err


def spark_errors() -> tuple[type[Exception], ...]:
    """The exceptions a failed Spark query raises on the client: pyspark's own, and on
    classic sessions the ``Py4JJavaError`` of JVM errors pyspark does not convert (Spark
    4.3: a Parquet footer that cannot be read while inferring a schema)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JJavaError)


def error_summary(err: BaseException) -> str:
    """The first non-empty line of a Spark error's message (a JVM error: its own message,
    not py4j's trace)."""
    java = getattr(err, "java_exception", None)
    text = str(java.toString()) if java is not None else str(err)
    return next((line.strip() for line in text.splitlines() if line.strip()), type(err).__name__)
