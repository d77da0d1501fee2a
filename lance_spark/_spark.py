"""Every touch of Spark internals (Py4J, ``sparkContext``, plans), each with a Spark Connect path.

This is the bottom of the package next to :mod:`lance_spark.errors`: it imports only pyspark
(and sqlglot, to read SQL text in Connect expressions).
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
import gc
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
from pyspark.sql.types import DataType, StructType

from lance_spark.errors import CompanionNotFoundError, InvalidArgumentError, InvalidOptionError

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


# --- spark.sql without the SQL front ---------------------------------------------------------
PLAIN_SQL_ATTR = "_lance_spark_plain_sql"


def plain_sql(spark: SparkSession) -> Callable[..., DataFrame]:
    """Spark's own ``spark.sql`` of ``spark`` (the SQL front keeps it here when it wraps it):
    what the connector's own catalog statements run with, never the front's handling."""
    found: Callable[..., DataFrame] = getattr(spark, PLAIN_SQL_ATTR, spark.sql)
    return found


def sql_with_relation(
    spark: SparkSession, statement: Callable[[str], str], frame: DataFrame
) -> DataFrame:
    """Run the SQL ``statement(name)`` (Spark's own ``spark.sql``) in which ``name`` is
    ``frame``, for this statement only. A temporary view would not do: dropping it uncaches
    every plan that gives the same rows, a cache the caller made of ``frame`` too (Spark's
    ``Catalog.dropTempView``). Classic: a view dropped from the session catalog alone;
    Connect: ``spark.sql``'s DataFrame arguments (sent with the statement, no view)."""
    sql = plain_sql(spark)
    if is_connect(spark):
        mark = f"lance_spark_relation_{uuid.uuid4().hex}"
        # spark.sql formats the text with str.format: the statement's own braces doubled.
        text = statement(mark).replace("{", "{{").replace("}", "}}").replace(mark, "{relation}")
        return sql(text, relation=frame)
    name = f"lance_spark_relation_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(name)
    try:
        return sql(statement(name))
    finally:
        java: Any = spark
        java._jsparkSession.sessionState().catalog().dropTempView(name)


# --- DataFrameWriter / DataFrameWriterV2 calls on Lance tables -----------------------------
_WRITE_ATTR = "_lance_spark_write"
_WRITE_MARKER = "_lance_spark_write_hook"


@dataclass
class WriteRequest:
    """A terminal call of ``df.write`` or ``df.writeTo(t)``, with what the writer recorded.

    ``call``: ``save``, ``saveAsTable``, ``insertInto`` (``df.write``) or ``append``,
    ``overwrite``, ``overwritePartitions``, ``create``, ``replace``, ``createOrReplace``
    (``df.writeTo``). ``source`` is the format / ``using`` (None: not given)."""

    spark: SparkSession
    df: DataFrame
    call: str
    source: str | None = None
    mode: str | None = None
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    table: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    condition: Column | None = None  # writeTo(t).overwrite(condition)
    overwrite: bool | None = None  # insertInto(t, overwrite)


WriteHandler = Callable[[WriteRequest], bool]  # True: done; False: Spark's own call runs


def install_write_hooks(handle: WriteHandler) -> None:
    """Offer every terminal call of ``df.write`` / ``df.writeTo(t)`` (classic and Connect) to
    ``handle`` first (once per process).

    Spark limit (4.3): a Python data source gets neither a catalog table's location nor its
    name on ``writeTo(t)``, ``insertInto``, ``saveAsTable`` or ``CREATE OR REPLACE``, has no
    ErrorIfExists / Ignore save modes, and reports ``partitionBy`` as a mismatch with the
    table's partitioning. The handler turns such calls on Lance tables into path writes the
    source can do. The classic writers keep their settings only in the JVM, so their setters
    also record them here; the Connect writers keep them in ``_write``. Can go when Spark's
    Python data sources take part in catalog writes (a Python TableProvider / catalog).
    """
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
    from pyspark.sql.connect.readwriter import DataFrameWriter as ConnectWriter
    from pyspark.sql.connect.readwriter import DataFrameWriterV2 as ConnectWriterV2
    from pyspark.sql.readwriter import DataFrameWriterV2

    if getattr(DataFrameWriter.save, _WRITE_MARKER, False):
        return

    def recorded(writer: Any) -> dict[str, Any]:
        state: dict[str, Any] = writer.__dict__.setdefault(
            _WRITE_ATTR, {"options": {}, "properties": {}}
        )
        return state

    def record_setter(
        cls: type,
        name: str,
        note: Callable[[dict[str, Any], tuple[Any, ...], dict[str, Any]], None],
    ) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        def setter(self: Any, *args: Any, **kwargs: Any) -> Any:
            note(recorded(self), args, kwargs)
            return original(self, *args, **kwargs)

        setattr(cls, name, setter)

    def columns(args: tuple[Any, ...]) -> tuple[str, ...]:
        cols = args[0] if len(args) == 1 and isinstance(args[0], list | tuple) else args
        return tuple(str(c) for c in cols)

    for cls in (DataFrameWriter, DataFrameWriterV2):
        record_setter(
            cls,
            "option",
            lambda r, a, k: (
                r["options"].__setitem__(str(a[0]), option_text(a[1])) if a[1] is not None else None
            ),
        )
        record_setter(
            cls,
            "options",
            lambda r, a, k: r["options"].update(
                {key: option_text(v) for key, v in k.items() if v is not None}
            ),
        )
    record_setter(DataFrameWriter, "format", lambda r, a, k: r.__setitem__("source", str(a[0])))
    record_setter(
        DataFrameWriter,
        "mode",
        lambda r, a, k: r.__setitem__("mode", a[0]) if a and a[0] is not None else None,
    )
    record_setter(
        DataFrameWriter, "partitionBy", lambda r, a, k: r.__setitem__("partition_by", columns(a))
    )
    record_setter(DataFrameWriterV2, "using", lambda r, a, k: r.__setitem__("source", str(a[0])))
    record_setter(
        DataFrameWriterV2,
        "tableProperty",
        lambda r, a, k: r["properties"].__setitem__(str(a[0]), str(a[1])),
    )
    record_setter(
        DataFrameWriterV2,
        "partitionedBy",
        lambda r, a, k: r.__setitem__("partition_by", tuple(str(c) for c in (a[0], *a[1:]))),
    )
    plain_init = DataFrameWriterV2.__init__

    def init(self: Any, df: DataFrame, table: str) -> None:
        plain_init(self, df, table)
        recorded(self)["table"] = table

    DataFrameWriterV2.__init__ = functools.wraps(plain_init)(init)  # type: ignore[method-assign]

    def classic(self: Any) -> dict[str, Any]:
        """The recorded settings of a classic DataFrameWriter or DataFrameWriterV2."""
        r = recorded(self)
        state = {
            "df": self._df,
            "source": r.get("source"),
            "mode": r.get("mode"),
            "partition_by": r.get("partition_by", ()),
            "options": dict(r["options"]),
            "properties": dict(r["properties"]),
        }
        if "table" in r:  # writeTo(table); saveAsTable / insertInto name theirs
            state["table"] = r["table"]
        return state

    def connect_v1(self: Any) -> dict[str, Any]:
        w = self._write
        return {
            "df": ConnectFrame(self._df, self._spark),
            "source": w.source,
            "mode": w.mode,
            "partition_by": tuple(w.partitioning_cols),
            "options": {k: v for k, v in w.options.items() if v is not None},
        }

    def connect_v2(self: Any) -> dict[str, Any]:
        w = self._write
        return {
            "df": ConnectFrame(self._df, self._spark),
            "source": w.provider,
            "table": self._table_name,
            "partition_by": tuple(str(c) for c in w.partitioning_columns),
            "options": {k: v for k, v in w.options.items() if v is not None},
            "properties": {k: v for k, v in w.table_properties.items() if v is not None},
        }

    def v1(cls: Any, state: Callable[[Any], dict[str, Any]]) -> None:
        plain_save, plain_table, plain_insert = cls.save, cls.saveAsTable, cls.insertInto

        @functools.wraps(plain_save)
        def save(
            self: Any,
            path: str | None = None,
            format: str | None = None,
            mode: str | None = None,
            partitionBy: Any = None,
            **options: Any,
        ) -> None:
            _apply(self, format, mode, partitionBy, options)
            req = WriteRequest(spark=self._spark, call="save", path=path, **state(self))
            if not handle(req):
                with connector_errors(req.source):
                    plain_save(self, path)

        @functools.wraps(plain_table)
        def saveAsTable(
            self: Any,
            name: str,
            format: str | None = None,
            mode: str | None = None,
            partitionBy: Any = None,
            **options: Any,
        ) -> None:
            _apply(self, format, mode, partitionBy, options)
            req = WriteRequest(spark=self._spark, call="saveAsTable", table=name, **state(self))
            if not handle(req):
                plain_table(self, name)

        @functools.wraps(plain_insert)
        def insertInto(self: Any, tableName: str, overwrite: bool | None = None) -> None:
            req = WriteRequest(
                spark=self._spark,
                call="insertInto",
                table=tableName,
                overwrite=overwrite,
                **state(self),
            )
            if not handle(req):
                plain_insert(self, tableName, overwrite)

        for method in (save, saveAsTable, insertInto):
            setattr(method, _WRITE_MARKER, True)
            setattr(method, _MARKER, True)
        cls.save, cls.saveAsTable, cls.insertInto = save, saveAsTable, insertInto

    def v2(cls: Any, state: Callable[[Any], dict[str, Any]]) -> None:
        for name in (
            "append",
            "overwrite",
            "overwritePartitions",
            "create",
            "replace",
            "createOrReplace",
        ):
            original = getattr(cls, name)

            def terminal(
                self: Any, *args: Any, _name: str = name, _original: Callable[..., Any] = original
            ) -> None:
                condition = args[0] if _name == "overwrite" and args else None
                req = WriteRequest(
                    spark=self._spark, call=_name, condition=condition, **state(self)
                )
                if not handle(req):
                    _original(self, *args)

            setattr(cls, name, functools.wraps(original)(terminal))

    v1(DataFrameWriter, classic)
    v1(ConnectWriter, connect_v1)
    v2(DataFrameWriterV2, classic)
    v2(ConnectWriterV2, connect_v2)


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


def _apply(
    writer: Any, format: str | None, mode: str | None, partition_by: Any, options: dict[str, Any]
) -> None:
    """The arguments of ``save`` / ``saveAsTable``, applied as their setters would."""
    if format is not None:
        writer.format(format)
    if mode is not None:
        writer.mode(mode)
    if partition_by is not None:
        writer.partitionBy(partition_by)
    if options:
        writer.options(**options)


def option_text(value: Any) -> str:
    """An option value as Spark passes it to a data source (``true``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks, inner ones doubled), for ``F.col``."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_pairs(pairs: Mapping[str, str]) -> str:
    """``'k1' = 'v1', 'k2' = 'v2'``: the list of an OPTIONS, WITH or TBLPROPERTIES clause."""
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in pairs.items())


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM on this side: no ``sparkContext``, ``_jdf``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parse_data_type(spark: SparkSession, text: str) -> DataType:
    """A Spark SQL type name (``bigint``, ``decimal(10, 2)``, ``array<float>``) as a
    ``DataType``, parsed by Spark itself (on Connect too); a bad one is an
    :class:`InvalidOptionError` naming it."""
    from pyspark.errors import PySparkException

    try:
        return spark.createDataFrame([], f"`c` {text}").schema["c"].dataType
    except (PySparkException, ValueError):
        raise InvalidOptionError(f"{text!r} is not a Spark SQL data type") from None


def parse_schema(spark: SparkSession, ddl: str) -> StructType:
    """A Spark DDL column list (``id bigint NOT NULL, label string COMMENT 'the label'``)
    as a ``StructType`` (NOT NULL and comments kept), parsed by Spark itself (on Connect
    too); a bad one is an :class:`InvalidOptionError` naming it."""
    from pyspark.errors import PySparkException

    try:
        return spark.createDataFrame([], ddl).schema
    except (PySparkException, ValueError) as err:
        raise InvalidOptionError(
            f"{ddl!r} is not a Spark DDL column list (name type [NOT NULL] [COMMENT '...'], "
            f"...): {error_summary(err)}"
        ) from None


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


def python_function_command(func: Any, return_type: DataType | None = None) -> bytes:
    """The pickled command of a Python function as Spark's JVM runs it (``SimplePythonFunction``
    bytes: ``(func, return_type)``, or the bare function of a UDTF class), for the companion
    to build the Spark job or table function from. pyspark's ``_wrap_function`` pickles the
    same, but needs a SparkContext; the companion's planner worker has none."""
    from pyspark import serializers

    pickler: Any = serializers.CloudPickleSerializer()  # type: ignore[no-untyped-call]
    return bytes(pickler.dumps(func if return_type is None else (func, return_type)))


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


# --- Expression analysis ------------------------------------------------------------------------
#
# Classic sessions answer from Spark's analysed plan (Py4J). A Spark Connect client has no plan:
# each helper answers either with an analysis-only round trip (``df.schema`` runs the analyser
# and raises Spark's own AnalysisException) or from the Column's expression tree
# (``column._expr``) and the SQL text in it (sqlglot). Where Connect can only approximate, the
# approximation is the safe side: more referenced columns (a wider read), no equi-join key (no
# pruning, the conservative conflict check), "does not only generate rows" (the source is cached).

_NON_DETERMINISTIC = frozenset(
    {"INVALID_NON_DETERMINISTIC_EXPRESSIONS", "AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION"}
)
_NOT_ONE_PER_ROW = (
    "INVALID_WHERE_CONDITION",
    "WINDOW_FUNCTION_NOT_ALLOWED_IN_CLAUSE",
    "UNSUPPORTED_GENERATOR",
)
_PROBE = "__lance_spark_probe"
# Appended to "is not deterministic" when :func:`deterministic` cannot tell (None).
UNCHECKED_DETERMINISM = (
    " or its determinism cannot be checked on Spark Connect (aggregate, window and generator "
    "functions cannot be put in the join that asks Spark)"
)


def _plan(frame: DataFrame) -> Any:
    return frame._jdf.queryExecution().analyzed()


def _attribute_names(output: Any) -> dict[int, str]:
    """exprId -> name of the attributes in a JVM plan's ``output``."""
    names: dict[int, str] = {}
    iterator = output.iterator()
    while iterator.hasNext():
        attribute = iterator.next()
        names[int(attribute.exprId().id())] = str(attribute.name())
    return names


def _resolved(frame: DataFrame, column: Column) -> Any:
    """``column`` analysed against ``frame`` (classic): the JVM expression."""
    plan = _plan(frame.select(column))
    if _name(plan) == "Aggregate":  # an aggregate function: no Project
        return plan.aggregateExpressions().head()
    return plan.projectList().head()


def referenced_columns(frame: DataFrame, base: DataFrame, columns: Iterable[Column]) -> set[str]:
    """The names of ``base``'s columns that ``columns`` (resolved in ``frame``, a DataFrame
    built on ``base``) refer to.

    Classic: exact (by exprId, so a same-named column of another input does not count).
    Connect: by name, case-insensitively, over every identifier in the expression tree and in
    its SQL text (a struct field, a qualifier or a lambda variable named like a column counts
    too); a star, a subquery or an unknown node counts as every column. Never fewer columns
    than Spark would read; raises no AnalysisException (the caller's plan reports errors)."""
    if not is_connect(frame.sparkSession):
        names = _attribute_names(_plan(base).output())
        found: set[str] = set()
        for column in columns:
            references = _resolved(frame, column).references().iterator()
            while references.hasNext():
                name = names.get(int(references.next().exprId().id()))
                if name is not None:
                    found.add(name)
        return found
    available = list(base.columns)
    words: set[str] = set()
    for column in columns:
        used = expression_names(column._expr)
        if used is None:
            return set(available)
        words |= used
    return {n for n in available if n.lower() in words}


def deterministic(frame: DataFrame, column: Column) -> bool | None:
    """Whether ``column`` (resolved against ``frame``) is deterministic; raises Spark's
    AnalysisException when it does not resolve.

    Classic: ``Expression.deterministic`` of the analysed expression. Connect: Spark's check
    analysis refuses a non-deterministic expression in a join condition (an operator other than
    Project, Filter, Aggregate, Window, Generate) with INVALID_NON_DETERMINISTIC_EXPRESSIONS,
    so ``column`` is put in one and analysed; same answer for rand, uuid, shuffle, Python UDFs
    (deterministic unless ``asNondeterministic()``). None on Connect when Spark refuses the
    probe for another reason first (an aggregate, window or generator function, which a join
    condition cannot hold): the determinism of those cannot be asked there."""
    if not is_connect(frame.sparkSession):
        return bool(_resolved(frame, column).deterministic())
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    probe = frame.sparkSession.range(1).select(F.lit(1).alias(_PROBE))
    try:
        frame.join(probe, on=F.isnull(column) | F.isnotnull(column)).schema  # noqa: B018
    except AnalysisException as err:
        if str(err.getCondition() or "") in _NON_DETERMINISTIC:
            return False
        frame.select(column).schema  # noqa: B018  (raises if it does not resolve)
        return None
    return True


def one_value_per_row(rows: DataFrame, column: Column) -> bool:
    """Whether ``column`` gives one value per row of ``rows`` (no aggregate, window or
    generator function); raises Spark's AnalysisException when it does not resolve.

    Classic: ``rows.select(column)`` is a Project right over ``rows``' plan. Connect: Spark
    refuses those functions in a filter (INVALID_WHERE_CONDITION, WINDOW_FUNCTION_NOT_ALLOWED_IN_
    CLAUSE, UNSUPPORTED_GENERATOR.*), so ``rows.where(isnull(column))`` is analysed."""
    if not is_connect(rows.sparkSession):
        base = _plan(rows)
        plan = _plan(rows.select(column.alias(_PROBE)))
        return bool(plan.getClass().getSimpleName() == "Project" and plan.child().sameResult(base))
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    rows.select(column.alias(_PROBE)).schema  # noqa: B018  (raises if it does not resolve)
    try:
        rows.where(F.isnull(column)).schema  # noqa: B018
    except AnalysisException as err:
        if str(err.getCondition() or "").startswith(_NOT_ONE_PER_ROW):
            return False
        raise
    return True


def expression_sql(frame: DataFrame, column: Column) -> str:
    """``column``'s Spark SQL text (resolved against ``frame`` on classic, without an alias
    Spark gives it); on Connect rendered from the expression tree (:func:`render`)."""
    if not is_connect(frame.sparkSession):
        plan = _plan(frame.select(column.alias(_PROBE)))
        return str(plan.projectList().head().child().sql())
    return render(column._expr)


def condition_sql(frame: DataFrame, condition: Column) -> str:
    """A filter condition's Spark SQL text, resolved against ``frame`` (classic); on Connect
    rendered from the expression tree (:func:`render`)."""
    if not is_connect(frame.sparkSession):
        return str(_plan(frame.filter(condition)).condition().sql())
    return render(condition._expr)


def column_text(column: Column) -> str:
    """A Column's text without resolving it (classic: the JVM Column's ``toString``)."""
    expr = getattr(column, "_expr", None)
    if type(column).__module__.startswith("pyspark.sql.connect") and expr is not None:
        return render(expr)
    java: Any = column._jc
    return str(java.toString())


def column_sql(frame: DataFrame, column: Column) -> str:
    """A Column as Spark SQL text that Spark parses back to the same expression, for a
    statement the table API runs as SQL (classic: resolved against ``frame``; Connect: the
    expression tree rendered exactly, :func:`render`)."""
    if not is_connect(frame.sparkSession):
        return expression_sql(frame, column)
    return render(column._expr, exact=True)


# Leaves that produce the same rows on every evaluation (nothing is read).
_GENERATED_LEAVES = frozenset({"Range", "LocalRelation", "OneRowRelation"})
# Spark calls these deterministic, but each query sees its own time. Matched in the plan's
# text (one call, not a walk over every expression): a column that happens to be named like
# them only costs the cache.
_TIME_FUNCTIONS = ("current_", "now(", "localtimestamp", "unix_timestamp(")


def generates_rows(frame: DataFrame) -> bool:
    """Whether ``frame`` is a deterministic plan whose leaves only generate rows: evaluating
    it twice gives the same rows for sure. Connect exposes no analysed plan: always False
    there (the caller then caches the frame, which is correct, only not free)."""
    if is_connect(frame.sparkSession):
        return False
    plan = _plan(frame)
    if not bool(plan.deterministic()):
        return False
    text = str(plan.toString()).lower()
    if any(name in text for name in _TIME_FUNCTIONS):
        return False
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        if str(leaves.next().nodeName()) not in _GENERATED_LEAVES:
            return False
    return True


def _name(java_object: Any) -> str:
    return str(java_object.getClass().getSimpleName())


def frame_alias(frame: DataFrame) -> str | None:
    """The alias ``DataFrame.alias`` gave ``frame`` as its last step, or None."""
    if is_connect(frame.sparkSession):
        return _top_alias(frame)
    plan = frame._jdf.queryExecution().logical()
    return str(plan.alias()) if str(plan.nodeName()) == "SubqueryAlias" else None


def _top_alias(frame: DataFrame) -> str | None:
    """The alias of ``frame`` (``DataFrame.alias`` as its last step), or None."""
    from pyspark.sql.connect import plan as connect_plan

    node: Any = frame._plan
    return str(node._alias) if isinstance(node, connect_plan.SubqueryAlias) else None


# --- Connect expression trees and SQL text (pure: no session needed) ----------------------------

# Leaves of a Connect expression tree that name no column.
_NAMELESS_LEAVES = ("LiteralExpression", "UnresolvedNamedLambdaVariable", "DistributedSequenceID")
# Nodes whose ``children`` are all they read.
_INNER_NODES = (
    "UnresolvedFunction",
    "CaseWhen",
    "CastExpression",
    "ColumnAlias",
    "CommonInlineUserDefinedFunction",
    "LambdaFunction",
    "WindowExpression",
    "SortOrder",
    "UnresolvedExtractValue",
    "WithField",
    "DropField",
    "CallFunction",
    "NamedArgumentExpression",
)


def parse_identifier(text: str) -> tuple[str, ...] | None:
    """Spark's name parts of an unparsed identifier (``a.b``, ```a.b`.c``, backticks doubled
    inside quotes), following ``UnresolvedAttribute.parseAttributeName``; None where Spark
    reports a syntax error."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch != "`":
                current.append(ch)
            elif text[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            else:
                quoted = False
                if i + 1 < len(text) and text[i + 1] != ".":
                    return None
        elif ch == "`":
            if current:
                return None
            quoted = True
        elif ch == ".":
            if i == 0 or text[i - 1] == "." or i == len(text) - 1:
                return None
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        return None
    parts.append("".join(current))
    return tuple(parts)


def sql_names(text: str) -> set[str] | None:
    """Every word of a Spark SQL expression that could name a column, lower-cased (names,
    quoted identifiers, keywords; not string or number literals); None when it may read every
    column (a star) or sqlglot cannot read it."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tokens = sqlglot.tokenize(text, read="spark")
        tree = sqlglot.parse_one(text, read="spark")
    except SqlglotError:
        return None
    if tree is None or any(True for _ in tree.find_all(exp.Star)):
        return None
    words = set()
    for token in tokens:
        kind = token.token_type.name
        if kind == "NUMBER" or kind.endswith("STRING"):
            continue
        words.add(token.text.lower())
    return words


def expression_names(expr: Any) -> set[str] | None:
    """The lower-cased names a Connect expression tree may read (name parts of column
    references, words of SQL text in it); None when it may read any column (a star, a regex,
    a subquery, a node this function does not know)."""
    words: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind == "ColumnReference":
            parts = parse_identifier(str(node._unparsed_identifier))
            if parts is None:
                return None
            words.update(p.lower() for p in parts)
        elif kind == "SQLExpression":
            found = sql_names(str(node._expr))
            if found is None:
                return None
            words |= found
        elif kind in _NAMELESS_LEAVES:
            continue
        elif kind in _INNER_NODES:
            stack.extend(node.children)
        else:  # UnresolvedStar, UnresolvedRegex, SubqueryExpression, anything new
            return None
    return words


# Connect's function names of Column operators, rendered infix.
_INFIX = {
    "==": "=",
    "!=": "!=",
    "<=>": "<=>",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "%": "%",
    "and": "AND",
    "or": "OR",
    "&": "&",
    "|": "|",
    "^": "^",
    "like": "LIKE",
    "ilike": "ILIKE",
    "rlike": "RLIKE",
}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def render(expr: Any, *, exact: bool = False) -> str:
    """Readable Spark SQL text of a Connect expression tree, for history and messages: infix
    operators, identifiers quoted where needed, SQL literals; nodes it does not know are shown
    as Connect prints them, or (``exact``) refused with :class:`InvalidArgumentError`, for
    text that Spark parses again as the same expression."""
    kind = type(expr).__name__
    if kind == "ColumnReference":
        parts = parse_identifier(str(expr._unparsed_identifier))
        if parts is None:
            return str(expr._unparsed_identifier)
        return ".".join(_sql_identifier(p) for p in parts)
    if kind == "SQLExpression":
        return str(expr._expr)
    if kind == "LiteralExpression":
        return _sql_literal(expr._value, expr._dataType)
    if kind == "UnresolvedStar":
        target = expr._unparsed_target
        return "*" if target is None else str(target)
    if kind == "ColumnAlias":
        names = ", ".join(_sql_identifier(str(a)) for a in expr._alias)
        return f"{render(expr._child, exact=exact)} AS {names}"
    if kind == "CastExpression":
        data_type = expr._data_type
        type_text = data_type if isinstance(data_type, str) else data_type.simpleString()
        cast = "TRY_CAST" if expr._eval_mode == "try" else "CAST"
        return f"{cast}({render(expr._expr, exact=exact)} AS {str(type_text).upper()})"
    if kind == "CaseWhen":
        branches = "".join(
            f" WHEN {render(c, exact=exact)} THEN {render(v, exact=exact)}"
            for c, v in expr._branches
        )
        otherwise = (
            "" if expr._else_value is None else f" ELSE {render(expr._else_value, exact=exact)}"
        )
        return f"CASE{branches}{otherwise} END"
    if kind == "UnresolvedExtractValue":
        return f"{render(expr._child, exact=exact)}[{render(expr._extraction, exact=exact)}]"
    if kind == "UnresolvedFunction":
        return _render_function(
            str(expr._name), list(expr._args), bool(expr._is_distinct), exact=exact
        )
    if kind == "CommonInlineUserDefinedFunction":
        args = ", ".join(render(a, exact=exact) for a in expr._arguments)
        return f"{expr._function_name}({args})"
    if kind == "UnresolvedNamedLambdaVariable":
        return ".".join(str(p) for p in expr._name_parts)
    if kind == "LambdaFunction":
        names = ", ".join(render(a, exact=exact) for a in expr._arguments)
        names = names if len(expr._arguments) == 1 else f"({names})"
        return f"{names} -> {render(expr._function, exact=exact)}"
    if exact:
        raise InvalidArgumentError(
            f"a Column holding {kind} cannot be run as a SQL statement's expression: pass it "
            "as a SQL string (F.expr's text) instead"
        )
    return repr(expr)


def _render_function(name: str, args: list[Any], distinct: bool, *, exact: bool) -> str:
    lowered = name.lower()
    if lowered in _INFIX and len(args) == 2:
        return f"({render(args[0], exact=exact)} {_INFIX[lowered]} {render(args[1], exact=exact)})"
    if lowered == "not" and len(args) == 1:
        return f"(NOT {render(args[0], exact=exact)})"
    if lowered == "negative" and len(args) == 1:
        return f"(- {render(args[0], exact=exact)})"
    if lowered in ("isnull", "isnotnull") and len(args) == 1:
        return f"({render(args[0], exact=exact)} IS {'NOT ' if lowered == 'isnotnull' else ''}NULL)"
    if lowered == "in" and args:
        return f"({render(args[0], exact=exact)} IN ({', '.join(render(a, exact=exact) for a in args[1:])}))"
    inner = ", ".join(render(a, exact=exact) for a in args)
    return f"{name}({'DISTINCT ' if distinct else ''}{inner})"


def _sql_identifier(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else quote_identifier(name)


def _sql_literal(value: Any, data_type: Any) -> str:
    import datetime

    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, (bytes, bytearray)):
        return "X'" + bytes(value).hex().upper() + "'"
    if isinstance(data_type, DateType):
        return f"DATE '{DateType().fromInternal(value)}'"
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        moment = data_type.fromInternal(value)
        if isinstance(moment, datetime.datetime):
            keyword = "TIMESTAMP_NTZ" if isinstance(data_type, TimestampNTZType) else "TIMESTAMP"
            return f"{keyword} '{moment.isoformat(sep=' ')}'"
    if isinstance(value, (list, tuple)):
        element = getattr(data_type, "elementType", None)
        return "array(" + ", ".join(_sql_literal(v, element) for v in value) + ")"
    return str(value)


# --------------------------------------------------------------------------------------------
# The JVM companion (jvm/): what turns it on and what tells whether it is on
# --------------------------------------------------------------------------------------------

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
COMPANION_PROTOCOL = 7
# The SQL function the companion adds to the sessions it is loaded in: its PROTOCOL.
COMPANION_PROTOCOL_FUNCTION = "lance_companion_protocol"


def companion_jar_path() -> str:
    """Where the package keeps the companion's jar (which may be missing: see
    :func:`companion_jar`)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars", COMPANION_JAR_NAME)


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


# --------------------------------------------------------------------------------------------
# Progress of a job
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobProgress:
    """How far a Spark job run by the connector is (``LanceTable.convertToLance``): tasks
    finished of the tasks Spark has scheduled so far. The last report has ``finished`` set,
    and ``rows`` (the rows written) when the job succeeded.

    Example::

        def show(p: JobProgress) -> None:
            print(f"{p.tasks_done}/{p.tasks_total} tasks", "done" if p.finished else "")

        LanceTable.convertToLance(spark, "/data/pets.parquet", "/data/pets.lance",
                                  progress=show)
    """

    tasks_done: int
    tasks_total: int
    finished: bool = False
    rows: int | None = None


ProgressReport = Callable[[JobProgress], None]


class JobTracker:
    """Reports the progress of the Spark jobs one block of code runs; made by
    :func:`track_jobs`, which feeds it, and ended by :meth:`finish`."""

    def __init__(self, report: ProgressReport, poll: Callable[[], tuple[int, int]] | None) -> None:
        self._report = report
        self._poll = poll
        self._lock = threading.Lock()
        self._last = (0, 0)
        self._finished = False

    def update(self, done: int, total: int) -> None:
        """Report (done, total) tasks when they changed."""
        with self._lock:
            if self._finished or (done, total) == self._last or total <= 0:
                return
            self._last = (done, total)
        self._report(JobProgress(done, total))

    def finish(self, *, tasks: int | None = None, rows: int | None = None) -> None:
        """The last report. ``tasks``: the tasks the caller knows finished (Spark Connect
        reports progress only every ``spark.connect.progress.reportInterval``, so a short
        job may have reported none)."""
        if self._poll is not None:
            self.update(*self._poll())
        with self._lock:
            self._finished = True
            done, total = self._last
        if tasks is not None:
            done = max(done, tasks)
            total = max(total, done)
        self._report(JobProgress(done, total, finished=True, rows=rows))


_JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@contextmanager
def track_jobs(
    spark: SparkSession, report: ProgressReport, *, description: str, interval_s: float = 0.5
) -> Iterator[JobTracker]:
    """Report to ``report`` the progress of the jobs this thread runs in the block; the block
    calls :meth:`JobTracker.finish` when its jobs are done.

    Classic sessions: the jobs run in a job group of their own (with ``description``, shown
    in Spark's UI; the thread's previous group is restored afterwards), whose stages a
    thread polls from ``sparkContext.statusTracker()`` every ``interval_s``. Spark Connect
    has no status tracker on the client: a progress handler
    (``spark.registerProgressHandler``, Spark 4) receives the server's reports of the
    session's operations while the block runs.
    """
    if is_connect(spark):
        tracker = JobTracker(report, None)

        def handler(
            stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None, done: bool
        ) -> None:
            stages = list(stages or ())
            tracker.update(
                sum(int(s.num_completed_tasks) for s in stages),
                sum(int(s.num_tasks) for s in stages),
            )

        connect: Any = spark
        connect.registerProgressHandler(handler)
        try:
            yield tracker
        finally:
            connect.removeProgressHandler(handler)
        return

    context = spark.sparkContext
    status = context.statusTracker()
    group = f"lance_spark-{uuid.uuid4().hex}"

    def poll() -> tuple[int, int]:
        done = total = 0
        for job_id in status.getJobIdsForGroup(group):
            job = status.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = status.getStageInfo(stage_id)
                if stage is not None:
                    done += int(stage.numCompletedTasks)
                    total += int(stage.numTasks)
        return done, total

    tracker = JobTracker(report, poll)
    previous = {key: context.getLocalProperty(key) for key in _JOB_PROPERTIES}
    context.setJobGroup(group, description, interruptOnCancel=False)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval_s):
            tracker.update(*poll())

    watcher = threading.Thread(target=watch, name="lance_spark-progress", daemon=True)
    watcher.start()
    try:
        yield tracker
    finally:
        stop.set()
        watcher.join()
        restore: Any = context.setLocalProperty  # None clears a property (py4j passes null)
        for key, value in previous.items():
            restore(key, value)


# --------------------------------------------------------------------------------------------
# Spark's Python workers
# --------------------------------------------------------------------------------------------

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
