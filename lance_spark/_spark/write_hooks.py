"""The terminal calls of ``df.write`` / ``df.writeTo(t)`` (classic and Connect), offered to
the connector first (``install_write_hooks``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.readwriter import DataFrameWriter

from lance_spark._spark.failures import connector_errors
from lance_spark._spark.sql import option_text
from lance_spark._spark.threads import ACTIVE_SESSION_MARKER

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
    from pyspark.sql.connect.readwriter import DataFrameWriter as ConnectWriter
    from pyspark.sql.connect.readwriter import DataFrameWriterV2 as ConnectWriterV2
    from pyspark.sql.readwriter import DataFrameWriterV2

    if getattr(DataFrameWriter.save, _WRITE_MARKER, False):
        return
    _record_classic_settings()
    _hook_v1(DataFrameWriter, _classic_state, handle)
    _hook_v1(ConnectWriter, _connect_v1_state, handle)
    _hook_v2(DataFrameWriterV2, _classic_state, handle)
    _hook_v2(ConnectWriterV2, _connect_v2_state, handle)


_Note = Callable[[dict[str, Any], tuple[Any, ...], dict[str, Any]], None]
_State = Callable[[Any], dict[str, Any]]


def _recorded(writer: Any) -> dict[str, Any]:
    """What the setters of a classic writer recorded (kept on the writer)."""
    state: dict[str, Any] = writer.__dict__.setdefault(
        _WRITE_ATTR, {"options": {}, "properties": {}}
    )
    return state


def _record_setter(cls: type, name: str, note: _Note) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def setter(self: Any, *args: Any, **kwargs: Any) -> Any:
        note(_recorded(self), args, kwargs)
        return original(self, *args, **kwargs)

    setattr(cls, name, setter)


def _columns(args: tuple[Any, ...]) -> tuple[str, ...]:
    cols = args[0] if len(args) == 1 and isinstance(args[0], list | tuple) else args
    return tuple(str(c) for c in cols)


def _note_option(r: dict[str, Any], a: tuple[Any, ...], k: dict[str, Any]) -> None:
    if a[1] is not None:
        r["options"][str(a[0])] = option_text(a[1])


def _note_options(r: dict[str, Any], a: tuple[Any, ...], k: dict[str, Any]) -> None:
    r["options"].update({key: option_text(v) for key, v in k.items() if v is not None})


def _note_mode(r: dict[str, Any], a: tuple[Any, ...], k: dict[str, Any]) -> None:
    if a and a[0] is not None:
        r["mode"] = a[0]


def _record_classic_settings() -> None:
    """The classic writers' setters record what they set (their state is in the JVM)."""
    from pyspark.sql.readwriter import DataFrameWriterV2

    for cls in (DataFrameWriter, DataFrameWriterV2):
        _record_setter(cls, "option", _note_option)
        _record_setter(cls, "options", _note_options)
    _record_setter(DataFrameWriter, "format", lambda r, a, k: r.update(source=str(a[0])))
    _record_setter(DataFrameWriter, "mode", _note_mode)
    _record_setter(
        DataFrameWriter, "partitionBy", lambda r, a, k: r.update(partition_by=_columns(a))
    )
    _record_setter(DataFrameWriterV2, "using", lambda r, a, k: r.update(source=str(a[0])))
    _record_setter(
        DataFrameWriterV2,
        "tableProperty",
        lambda r, a, k: r["properties"].__setitem__(str(a[0]), str(a[1])),
    )
    _record_setter(
        DataFrameWriterV2,
        "partitionedBy",
        lambda r, a, k: r.update(partition_by=tuple(str(c) for c in (a[0], *a[1:]))),
    )
    plain_init = DataFrameWriterV2.__init__

    def init(self: Any, df: DataFrame, table: str) -> None:
        plain_init(self, df, table)
        _recorded(self)["table"] = table

    DataFrameWriterV2.__init__ = functools.wraps(plain_init)(init)  # type: ignore[method-assign]


def _classic_state(writer: Any) -> dict[str, Any]:
    """The recorded settings of a classic DataFrameWriter or DataFrameWriterV2."""
    r = _recorded(writer)
    state = {
        "df": writer._df,
        "source": r.get("source"),
        "mode": r.get("mode"),
        "partition_by": r.get("partition_by", ()),
        "options": dict(r["options"]),
        "properties": dict(r["properties"]),
    }
    if "table" in r:  # writeTo(table); saveAsTable / insertInto name theirs
        state["table"] = r["table"]
    return state


def _connect_v1_state(writer: Any) -> dict[str, Any]:
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame

    w = writer._write
    return {
        "df": ConnectFrame(writer._df, writer._spark),
        "source": w.source,
        "mode": w.mode,
        "partition_by": tuple(w.partitioning_cols),
        "options": {k: v for k, v in w.options.items() if v is not None},
    }


def _connect_v2_state(writer: Any) -> dict[str, Any]:
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame

    w = writer._write
    return {
        "df": ConnectFrame(writer._df, writer._spark),
        "source": w.provider,
        "table": writer._table_name,
        "partition_by": tuple(str(c) for c in w.partitioning_columns),
        "options": {k: v for k, v in w.options.items() if v is not None},
        "properties": {k: v for k, v in w.table_properties.items() if v is not None},
    }


def _hook_v1(cls: Any, state: _State, handle: WriteHandler) -> None:
    """``save``, ``saveAsTable`` and ``insertInto`` of a ``df.write`` writer class."""
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
        setattr(method, ACTIVE_SESSION_MARKER, True)
    cls.save, cls.saveAsTable, cls.insertInto = save, saveAsTable, insertInto


_V2_CALLS = ("append", "overwrite", "overwritePartitions", "create", "replace", "createOrReplace")


def _hook_v2(cls: Any, state: _State, handle: WriteHandler) -> None:
    """The terminal calls of a ``df.writeTo(t)`` writer class."""
    for name in _V2_CALLS:
        original = getattr(cls, name)

        def terminal(
            self: Any, *args: Any, _name: str = name, _original: Callable[..., Any] = original
        ) -> None:
            condition = args[0] if _name == "overwrite" and args else None
            req = WriteRequest(spark=self._spark, call=_name, condition=condition, **state(self))
            if not handle(req):
                _original(self, *args)

        setattr(cls, name, functools.wraps(original)(terminal))


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
