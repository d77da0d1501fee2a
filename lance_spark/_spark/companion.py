"""The JVM companion (``jvm/``): what turns it on and what tells whether it is on."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from lance_spark._spark.session import is_connect
from lance_spark.errors import CompanionNotFoundError

COMPANION_EXTENSION = "lance_spark.companion.LanceExtensions"
# "false" switches the companion off for a session at run time (LanceScanRule reads it).
COMPANION_ENABLED_CONF = "spark.lance.companion.enabled"
COMPANION_JAR_NAME = "lance-spark-companion.jar"
_EXTENSIONS_CONF = "spark.sql.extensions"
_JARS_CONF = "spark.jars"
_DRIVER_CLASSPATH_CONF = "spark.driver.extraClassPath"
# Spark asks a Python data source to push filters only when this is true (its default is
# false); the companion pushes filters into a Lance scan only then (LanceScanBuilder).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


# Spark's session catalog: the companion's LanceSessionCatalog serves Lance tables from it
# (locations, VERSION AS OF, lance.`path`, t.branch_b) for every client.
SESSION_CATALOG_CONF = "spark.sql.catalog.spark_catalog"
SESSION_CATALOG_CLASS = "lance_spark.companion.LanceSessionCatalog"

# Must equal LanceExtensions.PROTOCOL of the jar: both sides change together.
COMPANION_PROTOCOL = 9
# The SQL function the companion adds to the sessions it is loaded in: its PROTOCOL.
COMPANION_PROTOCOL_FUNCTION = "lance_companion_protocol"


def companion_jar_path() -> str:
    """Where the package keeps the companion's jar (which may be missing: see
    :func:`companion_jar`)."""
    return os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jars", COMPANION_JAR_NAME
    )


def companion_jar() -> str:
    """Path of the JVM companion's jar shipped inside the package, for ``spark.jars`` /
    ``spark-submit --jars``; raises :class:`~lance_spark.errors.CompanionNotFoundError` when
    this installation has none.

    Example::

        spark-submit --jars "$(python -c 'import lance_spark; print(lance_spark.companion_jar())')"
    """
    path = companion_jar_path()
    if not os.path.isfile(path):
        raise CompanionNotFoundError(
            f"this lance_spark installation has no JVM companion jar ({path}): reinstall "
            "lance_spark from a wheel built with a JDK (pip install builds one when javac is "
            "on the PATH), or in a checkout run make jar"
        )
    return path


_DAEMON_CONF = "spark.python.daemon.module"
QUIET_DAEMON_MODULE = "lance_spark_daemon"


def companion_conf(current: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark settings that load the companion (jar, session extension and the session
    catalog that serves Lance tables), merged into the comma-separated lists ``current`` may
    already hold, and the ones it needs: Spark's filter
    pushdown for Python data sources (without it the companion pushes no filter into Lance, in
    every session that does not call ``register``) and the quiet Python daemon. A value of
    those two already in ``current`` is kept."""
    current = current or {}

    def merged(key: str, value: str) -> str:
        present = [v.strip() for v in str(current.get(key) or "").split(",") if v.strip()]
        return ",".join(present if value in present else [*present, value])

    jar = companion_jar()
    classpath = [p for p in str(current.get(_DRIVER_CLASSPATH_CONF) or "").split(os.pathsep) if p]
    return {
        _JARS_CONF: merged(_JARS_CONF, jar),
        # Also on the driver's own class path: a Thrift JDBC server loads the session catalog
        # with the class loader of its handler threads, which does not see spark.jars.
        _DRIVER_CLASSPATH_CONF: os.pathsep.join(
            classpath if jar in classpath else [*classpath, jar]
        ),
        _EXTENSIONS_CONF: merged(_EXTENSIONS_CONF, COMPANION_EXTENSION),
        # Lance tables in spark_catalog; a session catalog the user chose (Delta's, Iceberg's)
        # is kept, and then Lance catalog tables fail with a message saying so.
        SESSION_CATALOG_CONF: str(current.get(SESSION_CATALOG_CONF) or SESSION_CATALOG_CLASS),
        # A daemon that ends workers Spark stopped reading (show(), limit) without printing
        # a BrokenPipeError traceback each time (see lance_spark_daemon); a daemon module
        # the user chose is kept.
        _DAEMON_CONF: str(current.get(_DAEMON_CONF) or QUIET_DAEMON_MODULE),
        # Filters pushed into Lance also in sessions whose clients never call register (a
        # Spark Connect server's, a spark-submit job's); a value the user chose is kept.
        FILTER_PUSHDOWN_CONF: str(current.get(FILTER_PUSHDOWN_CONF) or "true"),
    }


def quiet_python_daemon(spark: SparkSession) -> bool:
    """Use :data:`QUIET_DAEMON_MODULE` as this classic application's Python daemon when no
    daemon module is configured; True when it is (or already was) in use.

    Spark limit (4.3): ``spark.python.daemon.module`` is a SparkContext setting that a
    session cannot set. Every Python runner reads it from the live SparkContext conf when it
    is created (workers are pooled per daemon module), so setting it there takes effect for
    the runners created afterwards; a daemon already started keeps running, unused.
    Can go when Spark's daemon stops printing a traceback for a worker it stopped reading.
    """
    if is_connect(spark):
        return QUIET_DAEMON_MODULE in str(spark.conf.get(_DAEMON_CONF, "") or "")
    conf = spark.sparkContext._jsc.sc().conf()
    current = conf.get(_DAEMON_CONF, "")
    if current:
        return bool(current == QUIET_DAEMON_MODULE)
    import importlib.util

    if importlib.util.find_spec(QUIET_DAEMON_MODULE) is None:
        return False
    conf.set(_DAEMON_CONF, QUIET_DAEMON_MODULE)
    return True


_SPARK_DAEMON_MODULE = "pyspark.daemon"


def quiet_spark_daemon() -> bool:
    """In a Python worker forked by Spark's own daemon (``python -m pyspark.daemon``), make
    that daemon end this worker silently when Spark closes its socket (see
    ``lance_spark_daemon``); True when it did.

    Spark limit (4.3): the planning calls of Python data sources (``PythonPlannerRunner``:
    create, read and write planning, commits, filter push-down, lookup, the companion's
    calls) start their daemon as ``pyspark.daemon`` (``PythonWorkerFactory``'s default
    module), whatever ``spark.python.daemon.module`` says, and ``spark.stop()`` closes the
    sockets of their idle workers before it stops the daemon: each such worker printed a
    ``BrokenPipeError`` traceback. The worker loop of that daemon (this process's
    ``__main__``) looks its ``worker`` function up for every call, so the calls after the
    one that imported ``lance_spark`` are covered. Can go with ``lance_spark_daemon``.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is None or getattr(spec, "name", None) != _SPARK_DAEMON_MODULE:
        return False
    if not callable(getattr(main, "worker", None)):
        return False
    import lance_spark_daemon

    lance_spark_daemon.quiet(main)
    return True


_DATA_SOURCE_MANAGER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


def quiet_reregistration(spark: SparkSession) -> None:
    """``register`` replaces the ``lance`` source Spark discovered by itself (pyspark_lance)
    with one that carries the session's settings, and Spark's DataSourceManager logs a
    WARN saying so. Only that logger is set to ERROR (classic; a Connect server logs on its
    side). Can go when Spark stops warning about a deliberate re-registration."""
    if is_connect(spark):
        return
    jvm: Any = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        _DATA_SOURCE_MANAGER_LOGGER, level
    )


def companion_enabled(spark: SparkSession) -> bool:
    """Whether the JVM companion is loaded in this session (classic or Spark Connect).

    Classic: asked of the JVM. Spark Connect has no JVM on the client: the server is asked
    what it loaded (:func:`companion_protocol`), not what its configuration names.

    Example::

        spark = lance_spark.configure(SparkSession.builder).getOrCreate()
        assert lance_spark.companion_enabled(spark)
    """
    if is_connect(spark):
        return companion_protocol(spark) == COMPANION_PROTOCOL
    extensions = _companion_class(spark)
    return extensions is not None and bool(extensions.isInstalled(spark._jsparkSession))


def companion_protocol(spark: SparkSession) -> int | None:
    """The protocol of the companion the session's server loaded (its SQL function
    ``lance_companion_protocol()``), or None when it loaded none. What a Spark Connect
    client, which has no JVM, can ask: the server's ``spark.sql.extensions`` may name the
    companion while its jar is missing (Spark then logs the error and carries on)."""
    try:
        row = spark.sql(f"SELECT {COMPANION_PROTOCOL_FUNCTION}()").first()
    except Exception:  # noqa: BLE001 - any failure to resolve the function means "not loaded"
        return None
    return None if row is None else int(row[0])


def enable_companion(spark: SparkSession) -> bool:
    """Turn the companion on for a running classic session; False when it cannot be.

    Spark limit (4.3): session extensions are read from ``spark.sql.extensions`` when a session
    is built. But the session's optimizer reads its injected pre-CBO rules again at every run
    (``BaseSessionStateBuilder.customPreCBORules``), so injecting into the running session's
    ``SparkSessionExtensions`` takes effect from the next query. The jar goes on the driver's
    class loader (PySpark's JVM runs user code in a ``MutableURLClassLoader``) and, through
    ``addJar``, to the executors.
    """
    if is_connect(spark):
        return companion_enabled(spark)
    extensions = _companion_class(spark)
    if extensions is None:
        jar = companion_jar_path()
        if not os.path.isfile(jar):
            return False
        jvm: Any = spark._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        if "MutableURLClassLoader" not in loader.getClass().getName():
            return False
        loader.addURL(jvm.java.io.File(jar).toURI().toURL())
        spark.sparkContext._jsc.sc().addJar(jar)
        extensions = _companion_class(spark)
        if extensions is None:
            return False
    extensions.installOn(spark._jsparkSession)
    return True


_COMPANION_PARSER = "lance_spark.companion.LanceSqlParser"
_TRANSLATES_ATTR = "_lance_spark_translates_statements"


def companion_statement(spark: SparkSession, text: str) -> str | None:
    """The ``CALL`` of the session catalog's procedure that the companion's SQL parser makes
    of ``text`` (``DESCRIBE HISTORY``, ``RESTORE``, ``VACUUM``), for a classic session whose
    parser predates the companion; None for any other statement or session.

    Spark limit (4.3): a session's SQL parser is built with the session, so a companion turned
    on by ``register`` for a running session has no parser of its own there; its translation
    is called directly (one implementation for every client). Sessions built with the
    companion (``configure``, a Spark Connect server) parse these statements themselves."""
    translates = getattr(spark, _TRANSLATES_ATTR, None)
    if translates is None:
        if is_connect(spark):
            translates = False
        elif not companion_enabled(spark):
            return None  # not cached: register may turn it on later
        else:
            parser = spark._jsparkSession.sessionState().sqlParser()
            translates = parser.getClass().getName() != _COMPANION_PARSER
        setattr(spark, _TRANSLATES_ATTR, translates)
    if not translates:
        return None
    jvm: Any = spark._jvm
    found = jvm.lance_spark.companion.LanceSqlParser.translate(text)
    return None if found is None else str(found)


def require_companion(spark: SparkSession, what: str, err: BaseException) -> None:
    """Raise :class:`CompanionNotFoundError` (from ``err``, the failure of a statement Spark
    could not plan) when the session has no companion serving Lance tables, which ``what``
    needs; return otherwise (``err`` is then the statement's own error)."""
    if serves_lance_tables(spark) and companion_enabled(spark):
        return
    raise CompanionNotFoundError(
        f"{what} run as statements Spark plans, which needs the JVM companion in the "
        "session: build it with lance_spark.configure(SparkSession.builder) (or a Spark "
        "Connect server started with lance_spark.spark_conf()); python -m lance_spark doctor "
        "checks a session"
    ) from err


def serves_lance_tables(spark: SparkSession) -> bool:
    """True when the companion's ``LanceSessionCatalog`` is this session's ``spark_catalog``
    (it creates, replaces, alters and writes ``USING lance`` tables itself)."""
    return spark.conf.get(SESSION_CATALOG_CONF, None) == SESSION_CATALOG_CLASS


def use_session_catalog(spark: SparkSession) -> bool:
    """Make the companion's ``LanceSessionCatalog`` this session's ``spark_catalog`` unless
    another one is configured; True when it is (or already was) the session catalog.

    Spark reads ``spark.sql.catalog.spark_catalog`` each time it asks for the session catalog
    (``CatalogManager.v2SessionCatalog``) and creates a custom one on first use, so setting it
    on a running session takes effect from the next statement, on a classic session and on a
    Spark Connect server that has the companion's jar."""
    current = spark.conf.get(SESSION_CATALOG_CONF, None)
    if not current:
        spark.conf.set(SESSION_CATALOG_CONF, SESSION_CATALOG_CLASS)
        return True
    return current == SESSION_CATALOG_CLASS


def _companion_class(spark: SparkSession) -> Any:
    """The companion's ``LanceExtensions`` class through Py4J, or None when it is not loaded."""
    from py4j.java_gateway import JavaClass
    from py4j.protocol import Py4JJavaError

    jvm: Any = spark._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(COMPANION_EXTENSION, False, loader)
    except Py4JJavaError as err:
        if err.java_exception.getClass().getName() == "java.lang.ClassNotFoundException":
            return None
        raise
    found = jvm.lance_spark.companion.LanceExtensions
    return found if isinstance(found, JavaClass) else None
