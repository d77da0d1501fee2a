"""``register(spark)``: everything a session needs to use the ``lance`` format (the top)."""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import _settings, _spark, sql
from lance_spark.errors import LanceSparkError, PerformanceWarning
from lance_spark.source.datasource import FORMAT_NAME, SessionDefaults
from lance_spark.source.options import parse_auto_compact_conf, parse_auto_index_conf
from lance_spark.source.session import (
    FILTER_PUSHDOWN_CONF,
    checked_storage,
    redact_storage_options,
    reset_private_formats,
    source_class,
    storage_conf,
)
from lance_spark.table import writes


def register(spark: SparkSession, *, storage_options: Mapping[str, str] | None = None) -> None:
    """Register the ``lance`` format on ``spark`` (idempotent; only this session changes).

    - checks that this PySpark has the private attributes lance_spark uses (else an
      :class:`~lance_spark.errors.UnsupportedPySparkError` naming them, and nothing changes);
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
    - takes the session's auto compaction from the confs ``spark.lance.autoCompact.enabled``
      (default false) and ``spark.lance.autoCompact.minNumFiles`` (default 50): writes then
      compact the table after committing when it has that many small fragments (the write
      options ``autoCompact`` / ``autoCompact.minNumFiles`` override them); read here, like
      the storage confs;
    - makes ``CREATE TABLE t (cols) USING lance LOCATION 'uri'`` create the Lance table;
    - lets reads and writes run from any Python thread (``threading``, thread pools);
    - checks once per application that Spark's Python workers can import ``lance_spark``
      (a :class:`~lance_spark.errors.LanceSparkError` saying to set ``PYSPARK_PYTHON`` if
      not), and keeps the console quiet: no Lance fork-safety warning, no per-task "No
      existing dataset" warning, no ``BrokenPipeError`` traceback from Spark's Python daemon
      after ``show()`` / ``limit()`` (its daemon module, see ``lance_spark_daemon``);
    - turns on the JVM companion for a classic session (its jar ships in the package), which
      makes each read its own scan: only the columns a query needs, LIMIT and ``COUNT(*)``
      pushed to Lance, statistics for Spark's joins, Arrow batches handed to Spark as columns,
      and filters pushed into Lance (without it Spark filters the rows itself: it would reuse
      a reader planned with filters for a DataFrame's next query, SPARK-58551), writes
      into catalog tables (their location), Lance's SQL statements and the ``lance_search``
      table function (``SELECT * FROM lance_search('t', array(0.1, 0.2), 10)``, see
      :meth:`~lance_spark.LanceTable.search`). A Spark Connect session
      gets it from its server's configuration (see :func:`spark_conf`); without it,
      ``register`` warns once;
    - says once (a :class:`~lance_spark.errors.PerformanceWarning`) which of the recommended
      settings for Python data sources the session lacks (see :func:`configure`); it changes
      none of them.

    Without credentials anywhere, Lance uses its standard chains (environment variables such
    as ``AWS_ACCESS_KEY_ID``, profiles, instance roles).

    Example::

        spark.conf.set("spark.lance.storage.aws_region", "eu-west-1")
        lance_spark.register(spark, storage_options={
            "aws_access_key_id": key_id, "aws_secret_access_key": secret})
        spark.read.format("lance").load("s3://bucket/pets.lance").show()
    """
    _spark.check_pyspark_surface()  # before any patch: a PySpark we cannot serve changes nothing
    conf = _spark.conf_items(spark)
    storage = {**storage_conf(spark), **checked_storage(storage_options)}
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    redact_storage_options(spark)
    defaults = SessionDefaults(
        storage=storage,
        app_id=_spark.app_id(spark),
        parallelism=_spark.default_parallelism(spark),
        auto_compact=parse_auto_compact_conf(conf),
        auto_index=parse_auto_index_conf(conf),
    )
    _spark.quiet_reregistration(spark)
    spark.dataSource.register(source_class(defaults, FORMAT_NAME))
    reset_private_formats(spark)
    sql.install(spark, defaults)
    _spark.install_thread_sessions()  # writes from any Python thread (see _spark)
    _spark.install_write_hooks(writes.handle)  # writeTo, saveAsTable, save modes (see there)
    _check_workers(spark)  # before the daemon module changes: Spark's own daemon runs the probe
    _spark.quiet_python_daemon(spark)  # no traceback per worker after show() (see _spark)
    if not _spark.enable_companion(spark):
        _warn_without_companion(spark)
    elif not _spark.use_session_catalog(spark):
        _warn_other_session_catalog(spark)
    _warn_missing_settings(spark, conf)


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Add the JVM companion (jar and session extension, with
    ``spark.sql.python.filterPushdown.enabled=true``, which it needs to push filters into
    Lance) and the recommended settings for Python data sources to a session builder, as
    Delta's ``configure_spark_with_delta_pip`` does; settings already on the builder are kept
    (JVM options are appended to).

    The recommended settings, each with its trade-off (docs: Configuration, "Recommended settings"):

    - ``spark.python.unix.domain.socket.enabled=true``: Python workers talk to the JVM over
      a Unix domain socket (about 35 ms less per Python round trip);
    - ``-Darrow.enable_unsafe_memory_access=true -Darrow.enable_null_check_for_get=false`` in
      ``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions``: no Arrow Java
      bounds and null checks (a malformed Arrow buffer then reads out of bounds);
    - ``spark.sql.execution.arrow.maxBytesPerBatch=2147483647``: no per-row batch size check
      when rows go to Python (batches are then bounded by ``maxRecordsPerBatch`` rows only).

    ``register`` turns the companion on for a running classic session by itself, but the
    settings above are read when the application starts: only the builder can set them.

    Example::

        spark = lance_spark.configure(SparkSession.builder.appName("app")).getOrCreate()
        lance_spark.register(spark)
    """
    current: dict[str, str] = dict(getattr(builder, "_options", {}) or {})
    for key, value in _spark.companion_conf(current).items():
        builder = builder.config(key, value)
    for key, value in _settings.builder_settings(current).items():
        builder = builder.config(key, value)
    return builder


def spark_conf() -> dict[str, str]:
    """The Spark settings that load the JVM companion (``spark.jars``: the jar shipped in this
    package, and ``spark.sql.extensions``) and that it needs
    (``spark.sql.python.filterPushdown.enabled=true``: filters pushed into Lance also in the
    sessions of clients that never call :func:`register`), with the recommended settings of
    :func:`configure`. For a Spark Connect server or ``spark-submit``, where no Python runs
    before the session is built.

    Example::

        args = [f"--conf={k}={v}" for k, v in lance_spark.spark_conf().items()]
        subprocess.run(["start-connect-server.sh", *args])
    """
    return {**_spark.companion_conf(), **_settings.builder_settings({})}


_warned = threading.Event()
_warned_settings = threading.Event()
_checked_apps: set[str] = set()


# The probe runs in a Python worker that may lack lance_spark, so it must not need it: made
# in a module namespace that cannot be imported, cloudpickle ships it by value.
_PROBE_SOURCE = """
def probe(_):
    import sys
    try:
        import lance_spark  # noqa: F401
        error = ""
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return f"{sys.executable}\\n{error}"
"""


def _worker_probe() -> Callable[[Any], str]:
    namespace: dict[str, Any] = {"__name__": "lance_spark_worker_probe"}
    exec(_PROBE_SOURCE, namespace)
    probe: Callable[[Any], str] = namespace["probe"]
    return probe


def _check_workers(spark: SparkSession) -> None:
    """Once per application: a one-row job whose Python worker must import lance_spark.
    Without it every read and write fails later with a ModuleNotFoundError from inside a
    task; here it fails at once, saying what to set."""
    app = _spark.app_id(spark)
    if app in _checked_apps:
        return
    # A plain Python UDF (no Arrow): the worker needs nothing but pyspark to run it.
    probe = F.udf(_worker_probe(), "string", useArrow=False)
    try:
        (row,) = spark.range(1).select(probe("id").alias("said")).collect()
    except PySparkException as err:
        missing = re.search(r"No module named '([^']+)'", str(err))
        if missing is None:
            raise
        raise LanceSparkError(
            f"Spark's Python workers cannot import {missing.group(1)}. Set PYSPARK_PYTHON (and "
            f"PYSPARK_DRIVER_PYTHON) to {sys.executable} (or to an interpreter where "
            "lance_spark is installed) before starting Spark."
        ) from None
    python, error = row["said"].split("\n", 1)
    if error:
        raise LanceSparkError(
            f"Spark's Python workers cannot import lance_spark: they run {python} ({error}). "
            f"Set PYSPARK_PYTHON (and PYSPARK_DRIVER_PYTHON) to {sys.executable} (or to an "
            "interpreter where lance_spark is installed) before starting Spark."
        )
    _checked_apps.add(app)


def _warn_without_companion(spark: SparkSession) -> None:
    if _warned.is_set():
        return
    _warned.set()
    if not os.path.isfile(_spark.companion_jar_path()):
        fix = (
            f"this installation has no companion jar ({_spark.companion_jar_path()}): "
            "reinstall lance_spark from a wheel built with a JDK"
        )
    elif _spark.is_connect(spark):
        fix = "start the Spark Connect server with the settings of lance_spark.spark_conf()"
    else:
        fix = "build the session with lance_spark.configure(SparkSession.builder)"
    warnings.warn(
        "lance_spark: the JVM companion is not loaded, so Lance reads by path are right but "
        "slower (Spark reads every column and filters the rows itself), and catalog tables "
        "USING lance, VERSION AS OF, lance.`path`, Lance's statements and lance_search in "
        f"SQL fail (the companion serves them); to load it, {fix}.",
        stacklevel=3,
    )


def _warn_other_session_catalog(spark: SparkSession) -> None:
    warnings.warn(
        f"lance_spark: this session's {_spark.SESSION_CATALOG_CONF} is "
        f"{spark.conf.get(_spark.SESSION_CATALOG_CONF)!r}, not {_spark.SESSION_CATALOG_CLASS!r}: "
        "catalog tables USING lance (and VERSION AS OF, lance.`path`) are served only by the "
        "latter; reads and writes by path work",
        stacklevel=3,
    )


def _warn_missing_settings(spark: SparkSession, conf: Mapping[str, object]) -> None:
    """Once per process: the recommended settings (``_settings.RECOMMENDED``) the session
    lacks (``conf``: its settings). A Spark Connect session reports its server's."""
    if _warned_settings.is_set():
        return
    values = {k: str(v) for k, v in conf.items()}
    lacking = _settings.missing(values.get)
    if not lacking:
        return
    _warned_settings.set()
    where = (
        "in the Spark Connect server's configuration"
        if _spark.is_connect(spark)
        else "by building the session with lance_spark.configure(SparkSession.builder)"
    )
    warnings.warn(
        "lance_spark: this session lacks settings that make Python data sources (lance "
        f"among them) faster; set them {where} (register changes none of them; the docs' "
        "Configuration page gives each one's trade-off):\n" + _settings.describe(lacking),
        PerformanceWarning,
        stacklevel=3,
    )
