"""Type mapping between Lance (Arrow schemas) and Spark, for reads and writes.

Every conversion between a Lance table's Arrow schema and Spark goes through this module:

* read: :func:`spark_schema_from_arrow` (the Spark schema of a table),
  :func:`arrow_read_schema` (the Arrow schema Spark demands of the batches ``read()`` yields) and
  :func:`conform_read_batch` (cast a batch read from Lance to that schema);
* write: :func:`arrow_schema_for_new_table` (the schema of a table created from Spark data),
  :func:`reconcile_write_schema` (append to an existing table: the table's types win) and
  :func:`conform_write_batch` (rename, reorder and losslessly cast Spark's batches).

Type map (Lance/Arrow -> Spark -> Arrow type of read batches)::

    bool                                  BooleanType           bool
    int8 / int16 / int32 / int64          Byte/Short/Int/Long   same
    uint8 / uint16 / uint32               Short/Int/Long        int16 / int32 / int64
    uint64                                DecimalType(20, 0)    decimal128(20, 0)
    float16 / float32                     FloatType             float32
    float64                               DoubleType            float64
    decimal32/64/128/256(p<=38, 0<=s<=p)  DecimalType(p, s)     decimal128(p, s)
    string / large_string / string_view   StringType            string
    binary / large_binary / binary_view
      / fixed_size_binary                 BinaryType            binary
    date32 / date64                       DateType              date32 (date64 floored)
    timestamp[any unit, tz]               TimestampType         timestamp[us, tz=UTC] (ns floored)
    timestamp[any unit]                   TimestampNTZType      timestamp[us]
    time32[s] / [ms], time64[us] / [ns]   TimeType(0/3/6/9)     time64[ns]
    duration[s / ms / us]                 DayTimeIntervalType   duration[us]
    list / large_list / fixed_size_list
      / list_view / large_list_view       ArrayType             list<element>
    struct                                StructType            struct
    map                                   MapType               map<key, value>
    dictionary<_, v>                      type of v             read type of v
    null                                  NullType              null
    extension arrow.json / arrow.uuid     StringType/BinaryType string / binary
    Lance blob column (extension          BinaryType            binary (scanned with
      lance.blob.v2, or large_binary                              blob_handling="all_binary")
      with lance-encoding:blob metadata)
    anything else (duration[ns], decimal precision > 38, intervals, other extensions):
    UnsupportedTypeError naming the column (dotted path) and the Arrow type.

Nullability (also of list elements, map values, struct fields) follows the Arrow field; Arrow
field metadata is not copied to Spark.

Facts checked against pyspark 4.3.0 / pyarrow 26 with a throwaway data source in ``local[2]``:

Read (batches yielded by ``DataSourceReader.read()``):

* The worker compares the *first* batch's schema with
  ``pyspark.sql.pandas.types.to_arrow_schema(schema, timezone="UTC")`` using
  ``pa.Schema.equals``; any difference fails with ``DATA_SOURCE_RETURN_SCHEMA_MISMATCH``.
  Later batches are not compared, but one whose schema differs from the first fails in the
  IPC writer ("Tried to write record batch with different schema"): every batch must match.
* So StringType must be ``string`` and BinaryType ``binary``: ``large_string``,
  ``string_view``, ``large_binary``, ``fixed_size_binary`` are rejected, also with
  ``spark.sql.execution.arrow.useLargeVarTypes=true`` (it does not affect this path).
* TimestampType must be ``timestamp[us, tz=UTC]`` exactly, whatever the session time zone
  (``ns``/``ms`` units, other zones and naive timestamps are rejected); TimestampNTZType must be
  ``timestamp[us]`` without zone. DateType: ``date32`` only. DecimalType(p, s): ``decimal128(p,
  s)`` only. FloatType: ``float32`` only (not ``float16``); ShortType: ``int16`` only (not
  ``uint8``). NullType: ``null``. TimeType(p): ``time64[ns]`` for every p.
  DayTimeIntervalType: ``duration[us]`` only.
* ArrayType: ``list`` only (not ``large_list``, ``fixed_size_list``, ``list_view``); the child
  may be named ``item`` or ``element`` (``Schema.equals`` ignores it, the JVM too).
  MapType: ``map`` whose entry fields are named ``key``/``value``: ``Schema.equals`` ignores the
  names but the JVM fails with a NullPointerException on other names. StructType: ``struct``
  with the same child names, order and types.
* Nullability must match at every level, both ways (a non-null Arrow field for a nullable Spark
  field is rejected too). Field metadata is ignored.
* TimeType exists (since 4.1) but is gated by ``spark.sql.timeType.enabled`` (false by
  default): a source can still return TIME columns and collect / show them, but filters and
  SQL on them fail with ``UNSUPPORTED_TIME_TYPE``. TIME(9) is accepted when enabled.

Write (batches Spark hands to ``DataSourceArrowWriter.write(iterator)``): exactly
``to_arrow_schema(spark_schema, timezone=<session time zone>, prefers_large_types=<useLargeVarTypes>)``:

* StringType (also CHAR/VARCHAR) -> ``string``, BinaryType -> ``binary``; ``large_string`` /
  ``large_binary`` (nested too, map keys included) when ``useLargeVarTypes=true``.
* TimestampType -> ``timestamp[us, tz=<session time zone>]`` (e.g. ``Etc/UTC``,
  ``America/Los_Angeles``); TimestampNTZType -> ``timestamp[us]``.
* Byte/Short/Integer/Long -> ``int8/16/32/64``, Float -> ``float32``, Double -> ``float64``,
  Decimal(p, s) -> ``decimal128(p, s)``, Date -> ``date32``, NullType -> ``null``,
  DayTimeIntervalType -> ``duration[us]``; TIME(p) (only with the conf on) -> ``time64[ns]``
  with field metadata ``SPARK::time::precision``. YearMonthIntervalType never reaches the
  writer: pyarrow cannot wrap Arrow's ``interval_months`` (``KeyError: 21`` in the worker).
* VariantType, GeometryType, GeographyType and user-defined types reach the writer as other
  types (binary encodings, structs): a write of them is refused naming the column
  (:func:`check_writable`), since they would read back changed; MLlib's vectors and matrices
  as top-level columns excepted (:data:`ROUND_TRIP_UDTS`: their struct, with the UDT's class
  in the Lance field metadata, read back as the UDT).
* ArrayType -> ``list<element: ...>``, MapType -> ``map<key, value>`` (``entries`` struct),
  StructType -> ``struct``; nullability follows the Spark schema (literals are non-null);
  column names keep their case.

Lance (pylance 14) stores ``list_view`` nowhere (unsupported), renames list children to
``item``, stores ``string_view`` as ``string``; pyarrow 26 casts ``list_view`` to ``list``
wrongly (drops values), so list views are rebuilt by hand here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    GeographyType,
    GeometryType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
    UserDefinedType,
    VariantType,
)

from lance_spark.errors import InvalidOptionError, SchemaMismatchError, UnsupportedTypeError

__all__ = [
    "BLOB_ENCODING_KEY",
    "BLOB_HANDLING",
    "READ_TIMEZONE",
    "arrow_read_schema",
    "arrow_schema_for_new_table",
    "blob_columns",
    "check_column_names",
    "check_defaults_given",
    "conform_read_batch",
    "conform_write_batch",
    "is_blob_field",
    "reconcile_write_schema",
    "spark_schema_from_arrow",
    "with_new_columns",
]

#: The time zone of TimestampType columns in read batches (Spark's worker demands UTC).
READ_TIMEZONE = "UTC"
#: Field metadata the JVM puts on TIME columns of write batches.
_TIME_PRECISION_KEY = b"SPARK::time::precision"
#: Field metadata of a Lance blob column (legacy form; Lance's file format 2.2 and later
#: store the column as the extension type below, which a field with this key becomes).
BLOB_ENCODING_KEY = b"lance-encoding:blob"
#: The extension type of a Lance blob column (blob v2, file format 2.2 and later).
_BLOB_EXTENSION = "lance.blob.v2"
#: How scans return blob columns: their bytes (a plain scan returns position / size structs).
BLOB_HANDLING: Literal["all_binary"] = "all_binary"
#: Extension types read as their storage type (values are exactly the storage values).
_READABLE_EXTENSIONS = frozenset({"arrow.json", "arrow.uuid"})
_MAX_SPARK_DECIMAL_PRECISION = 38
_MILLIS_PER_DAY = 86_400_000
#: Alignment arrow-rs (Lance) demands of decimal value buffers it imports (that of i128 / i256).
_DECIMAL_ALIGNMENT = 16

_SIMPLE_TYPES: dict[pa.DataType, DataType] = {
    pa.bool_(): BooleanType(),
    pa.int8(): ByteType(),
    pa.int16(): ShortType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.uint8(): ShortType(),
    pa.uint16(): IntegerType(),
    pa.uint32(): LongType(),
    pa.uint64(): DecimalType(20, 0),
    pa.float16(): FloatType(),
    pa.float32(): FloatType(),
    pa.float64(): DoubleType(),
    pa.string(): StringType(),
    pa.large_string(): StringType(),
    pa.string_view(): StringType(),
    pa.binary(): BinaryType(),
    pa.large_binary(): BinaryType(),
    pa.binary_view(): BinaryType(),
    pa.date32(): DateType(),
    pa.date64(): DateType(),
    pa.null(): NullType(),
}
_TIME_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}
# Spark's DAY TO SECOND interval counts microseconds: coarser units convert exactly.
_EXACT_DURATION_UNITS = frozenset({"s", "ms", "us"})


# --------------------------------------------------------------------------------------------
# Read: Arrow -> Spark
# --------------------------------------------------------------------------------------------


def spark_schema_from_arrow(schema: pa.Schema) -> StructType:
    """The Spark schema of a Lance table (or projection) with this Arrow schema.

    Raises :class:`UnsupportedTypeError` naming the column (dotted path when nested) and the
    Arrow type for types Spark cannot represent exactly.
    """
    return StructType([_spark_field(field, field.name) for field in schema])


def arrow_read_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema Spark accepts from ``read()`` for ``spark_schema_from_arrow(schema)``."""
    # The very function the worker compares batches against, so the two cannot drift apart.
    return to_arrow_schema(spark_schema_from_arrow(schema), timezone=READ_TIMEZONE)


def conform_read_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast a batch read from Lance to ``target`` (from :func:`arrow_read_schema`).

    Returns ``batch`` itself when it already matches; otherwise casts only the columns that
    differ (``fixed_size_list`` -> ``list`` and child renames reuse the value buffers).
    ``timestamp[ns]`` values are rounded down to whole microseconds (Spark keeps
    microseconds; flooring, as Spark, ``datetime`` and ``to_pylist()`` do, so that
    1969-12-31 23:59:59.999999999 reads as 23:59:59.999999, not as 1970-01-01), and
    ``date64`` values down to whole days, nested ones too; any other value Spark cannot hold
    raises :class:`UnsupportedTypeError`.
    """
    if batch.schema.equals(target) and all(_map_names_ok(f.type) for f in batch.schema):
        return batch
    arrays = [
        _to_read_array(_column(batch, field.name), field.type, field.name) for field in target
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# Bytes per value assumed for variable-width data (Spark's default size of a string) and per
# list (elements assumed per row), when estimating a scan's size for Spark's planner.
_VARIABLE_WIDTH = 20
_LIST_ELEMENTS = 4


def estimated_width(t: pa.DataType) -> int:
    """Bytes one value of ``t`` takes, roughly: exact for fixed widths (a 128-float vector is
    512), estimated for strings, binaries and lists. Only ratios between columns matter."""
    if isinstance(t, pa.BaseExtensionType):
        return estimated_width(t.storage_type)
    if pa.types.is_fixed_size_list(t):
        return max(1, int(t.list_size)) * estimated_width(t.value_type)
    if pa.types.is_struct(t):
        return max(1, sum(estimated_width(f.type) for f in _children(t)))
    if pa.types.is_map(t):
        return _LIST_ELEMENTS * (estimated_width(t.key_type) + estimated_width(t.item_type))
    if _is_list_like(t):
        return _LIST_ELEMENTS * estimated_width(t.value_type)
    if pa.types.is_dictionary(t):
        return estimated_width(t.value_type)
    try:
        return max(1, int(t.bit_width) // 8)
    except ValueError:  # variable width
        return _VARIABLE_WIDTH


def _spark_field(field: pa.Field, path: str) -> StructField:
    udt = stored_udt(field)
    if udt is not None:
        module, name = udt.rsplit(".", 1)
        udt_class = getattr(importlib.import_module(module), name)
        return StructField(field.name, udt_class(), field.nullable)
    return StructField(field.name, _spark_type(field.type, path), field.nullable)


def _spark_type(t: pa.DataType, path: str) -> DataType:
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == _BLOB_EXTENSION:
        return BinaryType()  # scans return the bytes (BLOB_HANDLING); the type is unhashable
    simple = _SIMPLE_TYPES.get(t)
    if simple is not None and not isinstance(t, pa.BaseExtensionType):
        return simple
    if pa.types.is_decimal(t):
        return _spark_decimal(t, path)
    if pa.types.is_fixed_size_binary(t):
        return BinaryType()
    if pa.types.is_timestamp(t):
        return TimestampType() if t.tz is not None else TimestampNTZType()
    if pa.types.is_time(t):
        return TimeType(_TIME_PRECISION[t.unit])
    if pa.types.is_duration(t):
        return _spark_duration(t, path)
    if pa.types.is_map(t):
        return MapType(
            _spark_type(t.key_type, f"{path}.key"),
            _spark_type(t.item_type, f"{path}.value"),
            t.item_field.nullable,
        )
    if _is_list_like(t):
        element = _spark_type(t.value_type, f"{path}.element")
        return ArrayType(element, t.value_field.nullable)
    if pa.types.is_struct(t):
        return StructType([_spark_field(f, f"{path}.{f.name}") for f in _children(t)])
    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type, path)
    if isinstance(t, pa.BaseExtensionType) and t.extension_name in _READABLE_EXTENSIONS:
        return _spark_type(t.storage_type, path)
    raise _unsupported(path, t, "Spark has no matching type")


def _spark_decimal(t: pa.DataType, path: str) -> DataType:
    if t.precision > _MAX_SPARK_DECIMAL_PRECISION:
        raise _unsupported(path, t, "Spark decimals hold at most 38 digits")
    if not 0 <= t.scale <= t.precision:
        raise _unsupported(path, t, "Spark decimals need 0 <= scale <= precision")
    return DecimalType(t.precision, t.scale)


def _spark_duration(t: pa.DataType, path: str) -> DataType:
    if t.unit not in _EXACT_DURATION_UNITS:
        raise _unsupported(
            path, t, "Spark's DAY TO SECOND interval holds microseconds, nanoseconds would be lost"
        )
    return DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)


def _unsupported(path: str, t: pa.DataType, reason: str) -> UnsupportedTypeError:
    return UnsupportedTypeError(
        f"column {path!r} has Arrow type {t}, which cannot be read into Spark: {reason}; "
        "leave the column out (the 'columns' option or a user-specified schema)"
    )


def _to_read_array(arr: pa.Array, dst: pa.DataType, path: str) -> pa.Array:
    if _spark_accepts(arr.type, dst):
        return arr
    arr = _without_list_views(arr)
    arr = _fill_under_null_parents(arr, dst)
    try:
        # pyarrow's truncating cast (allow_time_truncate) rounds toward zero, so -1 ns would
        # read as 0 us: floor timestamp[ns] to [us] and date64 to date32 first (the same
        # rounding _filters' grid literals assume). Every other unit change of the type map
        # is exact, so the cast below is a safe one: overflow raises.
        return pc.cast(_map_arrays(arr, _needs_flooring, _floor_to_spark_unit), dst)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise UnsupportedTypeError(
            f"column {path!r}: cannot convert Arrow {arr.type} values to {dst} for Spark: {e}"
        ) from e


def _fill_under_null_parents(arr: pa.Array, dst: pa.DataType) -> pa.Array:
    """A struct whose non-nullable child (in ``dst``) is null only where the struct itself is
    null (an MLlib vector column's ``type`` in a row without a vector) with those child slots
    set to zero, which Arrow's cast to the non-nullable child requires; other arrays as they
    are."""
    if not (pa.types.is_struct(arr.type) and pa.types.is_struct(dst) and arr.null_count):
        return arr
    struct: pa.StructArray = arr
    children = [struct.field(i) for i in range(arr.type.num_fields)]
    filled = False
    for i, child in enumerate(children):
        index = dst.get_field_index(arr.type.field(i).name)
        if index < 0 or dst.field(index).nullable or not child.null_count:
            continue
        if pc.any(pc.and_(child.is_null(), struct.is_valid())).as_py():
            return arr  # a null child in a present struct: the cast reports it
        children[i] = pc.fill_null(child, _zero(child.type))
        filled = True
    if not filled:
        return arr
    return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=struct.is_null())


def _zero(t: pa.DataType) -> pa.Scalar:
    if pa.types.is_boolean(t):
        return pa.scalar(False, t)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return pa.scalar(0, t)
    if _is_list_like(t):
        return pa.scalar([], t)
    return pa.scalar(None, t)  # leaves the nulls: the cast reports them


def _needs_flooring(t: pa.DataType) -> bool:
    return bool((pa.types.is_timestamp(t) and t.unit == "ns") or pa.types.is_date64(t))


def _floor_to_spark_unit(arr: pa.Array) -> pa.Array:
    """timestamp[ns] -> timestamp[us] (same zone) and date64 -> date32, rounding down."""
    t = arr.type
    if pa.types.is_date64(t):
        days = _floor_divide(arr.view(pa.int64()), _MILLIS_PER_DAY)
        return pc.cast(days, pa.int32()).view(pa.date32())  # raises beyond date32's range
    micros = _floor_divide(arr.view(pa.int64()), 1000)
    return micros.view(pa.timestamp("us", tz=t.tz))


def _floor_divide(values: pa.Array, divisor: int) -> pa.Array:
    """``values // divisor`` (int64, ``divisor > 0``), nulls kept; pyarrow's divide truncates."""
    quotient = pc.divide(values, divisor)
    # |quotient * divisor| <= |value|: no overflow, even for garbage under null slots.
    below = pc.less(pc.subtract(values, pc.multiply(quotient, divisor)), 0)
    return pc.subtract(quotient, pc.cast(below, pa.int64()))


def _spark_accepts(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when Spark takes ``src`` data for ``dst`` as is (the JVM needs map key/value names)."""
    return bool(src.equals(dst)) and _map_names_ok(src)


def _map_names_ok(t: pa.DataType) -> bool:
    if pa.types.is_map(t) and (t.key_field.name, t.item_field.name) != ("key", "value"):
        return False
    return all(_map_names_ok(f.type) for f in _children(t))


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise SchemaMismatchError(
            f"batch has no column {name!r} (or more than one); it has {', '.join(batch.schema.names)}"
        )
    return batch.column(index)


# --------------------------------------------------------------------------------------------
# Write: Spark's Arrow batches -> Lance
# --------------------------------------------------------------------------------------------


# Spark types whose values Spark hands to a Python writer as something else (a user-defined
# type as its SQL type, a variant as its binary encoding, a geometry or geography as a struct
# of SRID and WKB): written as such, they would come back as that other type, silently. Until
# they round-trip, a write of them is refused before any file is written.
_NOT_WRITABLE: dict[type[DataType], str] = {
    VariantType: "cast it to a string first (to_json(col)), or parse the JSON into columns",
    GeometryType: "write its WKB (st_asbinary(col)) and SRID as columns of their own",
    GeographyType: "write its WKB (st_asbinary(col)) as a column of its own",
}
# MLlib's vectors and matrices round-trip as top-level columns: stored as their SQL type (a
# struct, which pylance reads as such) with the UDT's Python class in the Lance field
# metadata, and read back as that UDT. Only these classes are ever instantiated from metadata.
UDT_METADATA_KEY = b"lance_spark.udt"
ROUND_TRIP_UDTS = frozenset(
    {
        "pyspark.ml.linalg.VectorUDT",
        "pyspark.ml.linalg.MatrixUDT",
        "pyspark.mllib.linalg.VectorUDT",
        "pyspark.mllib.linalg.MatrixUDT",
    }
)


# A column's default value, as Spark keeps it in a field's metadata (ResolveDefaultColumns):
# the SQL of the value INSERT / UPDATE / MERGE use, and the value of the rows that existed when
# the column was added (a literal's SQL). Lance keeps both in the field's metadata.
CURRENT_DEFAULT_KEY = "CURRENT_DEFAULT"
EXISTS_DEFAULT_KEY = "EXISTS_DEFAULT"
DEFAULT_KEYS = (CURRENT_DEFAULT_KEY, EXISTS_DEFAULT_KEY)


def spark_defaults(metadata: Mapping[str, Any] | None) -> dict[str, str]:
    """The default-value entries of a Spark field's metadata (none when it has no default)."""
    return {k: str(metadata[k]) for k in DEFAULT_KEYS if metadata and k in metadata}


def stored_defaults(metadata: Mapping[bytes, bytes] | None) -> dict[str, str]:
    """The default-value entries of a Lance field's metadata, as Spark's field metadata."""
    return {
        k: metadata[k.encode()].decode("utf-8", errors="replace")
        for k in DEFAULT_KEYS
        if metadata and k.encode() in metadata
    }


def udt_name(data_type: DataType) -> str | None:
    """The class of a user-defined type that round-trips (:data:`ROUND_TRIP_UDTS`), or None."""
    if not isinstance(data_type, UserDefinedType):
        return None
    name = f"{type(data_type).__module__}.{type(data_type).__name__}"
    return name if name in ROUND_TRIP_UDTS else None


def stored_udt(field: pa.Field) -> str | None:
    """The round-tripping user-defined type a Lance column is stored as, or None."""
    name = (field.metadata or {}).get(UDT_METADATA_KEY)
    if name is None:
        return None
    text = name.decode("utf-8", errors="replace")
    return text if text in ROUND_TRIP_UDTS else None


def with_udts(schema: pa.Schema, spark_schema: StructType) -> pa.Schema:
    """``schema`` with the Lance field metadata of ``spark_schema``'s user-defined type columns
    (matched by name, case-insensitively)."""
    udts = {f.name.lower(): udt_name(f.dataType) for f in spark_schema.fields}
    fields = []
    for f in schema:
        name = udts.get(f.name.lower())
        if name is not None:
            f = f.with_metadata({**(f.metadata or {}), UDT_METADATA_KEY: name.encode()})
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def check_same_udts(spark_schema: StructType, table: pa.Schema) -> None:
    """A write into existing columns keeps their user-defined types: a vector column takes
    vectors only, and a struct column no vectors (:class:`SchemaMismatchError` naming it)."""
    stored = {f.name.lower(): stored_udt(f) for f in table}
    for field in spark_schema.fields:
        key = field.name.lower()
        if key in stored and stored[key] != udt_name(field.dataType):
            has = (
                stored[key]
                or f"a plain {_spark_type(table.field(_name_in(table, key)).type, field.name).simpleString()}"
            )
            gets = udt_name(field.dataType) or field.dataType.simpleString()
            raise SchemaMismatchError(
                f"column {field.name!r} of the table holds {has}; the write gives it {gets}"
            )


def _name_in(schema: pa.Schema, lowered: str) -> str:
    return str(next(n for n in schema.names if n.lower() == lowered))


_UDT_HINTS = {
    "VectorUDT": "write it as an array of doubles (pyspark.ml.functions.vector_to_array(col))",
    "MatrixUDT": "write its values as an array of doubles and its shape as columns",
}


def check_writable(schema: StructType) -> None:
    """Refuse, naming the column (dotted path when nested), the Spark types that would not read
    back as themselves: :class:`UnsupportedTypeError` before anything is written. MLlib's
    vectors and matrices are writable as top-level columns (:data:`ROUND_TRIP_UDTS`)."""
    for field in schema.fields:
        if udt_name(field.dataType) is not None:
            continue
        _check_writable(field.dataType, field.name)


def _check_writable(data_type: DataType, path: str) -> None:
    if isinstance(data_type, UserDefinedType):
        name = type(data_type).__name__
        top = udt_name(data_type) is not None
        hint = _UDT_HINTS.get(name, f"write its SQL type ({data_type.sqlType().simpleString()})")
        raise UnsupportedTypeError(
            f"column {path!r} has the user-defined type {name}, which a Lance table would give "
            f"back as a plain {data_type.sqlType().simpleString()}"
            + (" inside another type (it round-trips as a column of its own)" if top else "")
            + f": {hint}"
        )
    for kind, hint in _NOT_WRITABLE.items():
        if isinstance(data_type, kind):
            raise UnsupportedTypeError(
                f"column {path!r} has type {data_type.simpleString()}, which Lance tables do "
                f"not hold yet: {hint}"
            )
    if isinstance(data_type, StructType):
        for child in data_type.fields:
            _check_writable(child.dataType, f"{path}.{child.name}")
    elif isinstance(data_type, ArrayType):
        _check_writable(data_type.elementType, f"{path}.element")
    elif isinstance(data_type, MapType):
        _check_writable(data_type.keyType, f"{path}.key")
        _check_writable(data_type.valueType, f"{path}.value")


def arrow_schema_for_new_table(
    schema: pa.Schema, *, vector_sizes: Mapping[str, int], blobs: Sequence[str] = ()
) -> pa.Schema:
    """The Arrow schema of a new Lance table created from Spark batches with ``schema``.

    Types are kept, except: timestamps with a zone are stored in UTC (the session zone is the
    writer's, not the data's), TIME columns take the narrowest unit that holds their Spark
    precision, field metadata is dropped, the columns named in ``vector_sizes`` (the
    ``<col>.arrow.fixed-size-list.size`` options) become ``fixed_size_list<..., n>`` and the
    binary columns named in ``blobs`` (the ``<col>.lance.encoding=blob`` options) Lance blob
    columns (:func:`as_blob_columns`).
    """
    check_column_names(schema)
    sizes = _vector_columns(schema, vector_sizes)
    fields = []
    for field in schema:
        stored = _storable_field(field)
        if field.name in sizes:
            stored = _as_vector(stored, sizes[field.name])
        fields.append(stored)
    return as_blob_columns(pa.schema(fields), blobs)


def is_blob_field(field: pa.Field) -> bool:
    """Whether ``field`` is a Lance blob column (either form: the blob v2 extension type, or
    ``large_binary`` with ``lance-encoding:blob`` metadata)."""
    t = field.type
    if isinstance(t, pa.BaseExtensionType):
        return bool(t.extension_name == _BLOB_EXTENSION)
    return _is_binary(t) and (field.metadata or {}).get(BLOB_ENCODING_KEY) == b"true"


def blob_columns(schema: pa.Schema) -> list[str]:
    """The names of the blob columns of ``schema`` (top-level: Lance has no nested blobs)."""
    return [f.name for f in schema if is_blob_field(f)]


def as_blob_columns(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """``schema`` with the binary columns ``columns`` (matched case-insensitively when unique)
    as Lance blob columns: ``large_binary`` with ``lance-encoding:blob`` metadata, the form
    every Lance file format takes (2.2 and later store it as blob v2).

    Raises :class:`SchemaMismatchError` for a column ``schema`` lacks and
    :class:`InvalidOptionError` for one that is not binary, naming it and its type.
    """
    wanted = set()
    for column in columns:
        name = _resolve_name(column, schema.names, "")
        if name is None:
            raise SchemaMismatchError(
                f"option {column}.lance.encoding=blob names column {column!r}, which the "
                f"written data does not have; columns: {', '.join(schema.names)}"
            )
        field = schema.field(name)
        if not is_blob_field(field) and not (
            pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)
        ):
            raise InvalidOptionError(
                f"option {column}.lance.encoding=blob: column {name!r} has type {field.type}; "
                "only a binary column can be a blob column"
            )
        wanted.add(name)
    fields = [
        pa.field(f.name, pa.large_binary(), f.nullable, {BLOB_ENCODING_KEY: b"true"})
        if f.name in wanted and not is_blob_field(f)
        else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def reconcile_write_schema(
    incoming: pa.Schema, table: pa.Schema, *, merge_schema: bool
) -> pa.Schema:
    """The schema batches appended to a table with schema ``table`` must have.

    Columns are matched by name (exactly, else case-insensitively when unique); the table's
    types win. The result is the table's schema, plus the incoming columns the table lacks
    (nullable, at the end) when ``merge_schema`` is true. Raises :class:`SchemaMismatchError`
    for a column whose type cannot be cast losslessly, an unknown column (without
    ``merge_schema``) and a missing non-nullable table column.
    """
    # Names the table has already (another writer may have made `a` and `A`) are not new.
    check_column_names(pa.schema([f for f in incoming if f.name not in table.names]))
    matches = _match_names(incoming.names, table.names, "")
    extra = []
    for field, name in zip(incoming, matches, strict=True):
        if name is None:
            extra.append(field)
        else:
            _check_cast(field.type, table.field(name).type, field.name)
    if extra and not merge_schema:
        raise SchemaMismatchError(
            f"column(s) {', '.join(repr(f.name) for f in extra)} are not in the table; "
            f"table columns: {', '.join(table.names)} (set mergeSchema to add them)"
        )
    _check_required_present(table, {n for n in matches if n is not None}, "")
    merged = [_storable_field(f).with_nullable(True) for f in extra]
    return pa.schema(list(table) + merged, metadata=table.metadata)


def conform_write_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Rename, reorder and cast an incoming Spark batch to ``target``.

    Missing nullable columns become nulls. Casts are lossless or raise
    :class:`SchemaMismatchError` naming the column and both types: integers are range
    checked, decimals must keep every digit, vectors must have the table's length, and a
    non-nullable column must receive no nulls. Decimal buffers that are not 16-byte aligned
    (Spark's only are 8-byte aligned) are copied (Lance cannot import them).
    """
    matches = _match_names(batch.schema.names, target.names, "")
    unknown = [n for n, m in zip(batch.schema.names, matches, strict=True) if m is None]
    if unknown:
        raise SchemaMismatchError(
            f"column(s) {', '.join(map(repr, unknown))} are not in the target schema; "
            f"columns: {', '.join(target.names)}"
        )
    index = {name: i for i, name in enumerate(matches)}
    arrays = []
    for field in target:
        i = index.get(field.name)
        if i is None:
            arrays.append(_missing_column(field, batch.num_rows))
        else:
            arrays.append(_to_write_array(batch.column(i), field, field.name))
    # Lance (arrow-rs) panics in write_fragments on a decimal value buffer that is not aligned
    # for i128 / i256 ("Memory pointer from external source (e.g, FFI) is not aligned with the
    # specified scalar type"); Spark's Arrow batches only align buffers to 8 bytes, and the
    # casts above may pass child arrays through. Copy those (only those) decimal arrays.
    arrays = [_map_arrays(a, pa.types.is_decimal, _aligned_decimals) for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _aligned_decimals(arr: pa.Array) -> pa.Array:
    """``arr`` (decimal) itself when its value buffer is aligned for Lance, else a copy."""
    data = arr.buffers()[1]
    alignment = min(arr.type.byte_width, _DECIMAL_ALIGNMENT)
    if data is None or data.address % alignment == 0:
        return arr
    return pa.concat_arrays([arr])  # fresh buffers from the memory pool (64-byte aligned)


def _vector_columns(schema: pa.Schema, vector_sizes: Mapping[str, int]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for column, size in vector_sizes.items():
        name = _resolve_name(column, schema.names, "")
        if name is None:
            raise SchemaMismatchError(
                f"option {column}.arrow.fixed-size-list.size names column {column!r}, which "
                f"the written data does not have; columns: {', '.join(schema.names)}"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise InvalidOptionError(
                f"option {column}.arrow.fixed-size-list.size must be a positive integer, "
                f"got {size!r}"
            )
        sizes[name] = size
    return sizes


def _as_vector(field: pa.Field, size: int) -> pa.Field:
    t = field.type
    numeric = _is_list_like(t) and (
        pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)
    )
    if not numeric:
        raise UnsupportedTypeError(
            f"column {field.name!r} has type {t}, but option "
            f"{field.name}.arrow.fixed-size-list.size needs an array of numbers "
            "(array<float>, array<double>, array<int>, ...)"
        )
    return field.with_type(pa.list_(t.value_field, size))


def _storable_field(field: pa.Field) -> pa.Field:
    """``field`` as a new table stores it: UTC timestamps, TIME units, no metadata."""
    t = _storable_type(field.type, field.metadata or {})
    return pa.field(field.name, t, nullable=field.nullable)


def _storable_type(t: pa.DataType, metadata: Mapping[bytes, bytes]) -> pa.DataType:
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC")
    if pa.types.is_time64(t) and t.unit == "ns" and _TIME_PRECISION_KEY in metadata:
        return _time_type(int(metadata[_TIME_PRECISION_KEY]))
    return _map_children(t, _storable_field)


def _time_type(precision: int) -> pa.DataType:
    # Spark's TIME values carry no digits beyond their precision, so the cast is exact.
    if precision == 0:
        return pa.time32("s")
    if precision <= 3:
        return pa.time32("ms")
    if precision <= 6:
        return pa.time64("us")
    return pa.time64("ns")


def _missing_column(field: pa.Field, num_rows: int) -> pa.Array:
    if not field.nullable and num_rows:
        raise SchemaMismatchError(
            f"column {field.name!r} ({field.type}) is not nullable in the table but is missing "
            "from the written data"
        )
    return pa.nulls(num_rows, field.type)


def _check_required_present(dst: Sequence[pa.Field], present: set[str], prefix: str) -> None:
    missing = [f for f in dst if not f.nullable and f.name not in present]
    if missing:
        names = ", ".join(f"{prefix}{f.name!r} ({f.type})" for f in missing)
        raise SchemaMismatchError(
            f"non-nullable table column(s) {names} are missing from the written data"
        )


def check_defaults_given(incoming: pa.Schema, table: pa.Schema) -> None:
    """Written rows (``incoming``) have every column of ``table`` that has a DEFAULT: Spark
    fills defaults (INSERT, UPDATE, MERGE, writes to the catalog table) before the data
    reaches the writer; a write that bypasses Spark's analysis (by path) would store nulls
    instead of the default. Raises :class:`SchemaMismatchError` naming the columns."""
    present = {n for n in _match_names(incoming.names, table.names, "") if n is not None}
    missing = [
        f"{f.name!r} (DEFAULT {stored_defaults(f.metadata)[CURRENT_DEFAULT_KEY]})"
        for f in table
        if f.name not in present and CURRENT_DEFAULT_KEY in stored_defaults(f.metadata)
    ]
    if missing:
        raise SchemaMismatchError(
            f"table column(s) {', '.join(missing)} are missing from the written data and have "
            "a default value, which a write by path cannot compute: give the column(s), or "
            "write through the catalog table (INSERT INTO, DataFrameWriterV2), where Spark "
            "fills defaults"
        )


# ---- name matching -------------------------------------------------------------------------

#: Top-level names Lance reserves for its own columns (pylance 14 refuses them at write).
LANCE_RESERVED_NAMES = frozenset(
    {"_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version"}
)


def check_column_names(schema: pa.Schema) -> None:
    """Reject written column names that would make a table Lance or Spark cannot use, before
    any file is written (:class:`SchemaMismatchError` naming the column).

    - names that differ only in case at one level (``id`` and ``ID``; struct fields too):
      Spark resolves names case-insensitively by default, so it could not query either;
    - empty names and names with a NUL character (Lance cannot reference them);
    - top-level names with a dot (Lance refuses them: a dot separates struct fields) or a
      backtick (pylance 14 writes them but no scan can read them back), and the names Lance
      reserves (``_rowid``, ``_rowaddr``, ...).

    Every other name works: spaces, commas, quotes, keywords, unicode, leading digits, and
    dots or backticks inside struct fields.
    """
    for field in schema:
        name = field.name
        if "." in name or "`" in name:
            raise SchemaMismatchError(
                f"column name {name!r} contains a {'dot' if '.' in name else 'backtick'}, "
                "which a top-level Lance column cannot have (a dot separates struct fields; "
                "pylance cannot read a column with a backtick back); rename the column, for "
                "example with withColumnRenamed"
            )
        if name in LANCE_RESERVED_NAMES:
            raise SchemaMismatchError(
                f"column name {name!r} is reserved by Lance for its own metadata columns "
                f"({', '.join(sorted(LANCE_RESERVED_NAMES))}); rename the column"
            )
    _check_level_names([f.name for f in schema], "")
    for field in schema:
        _check_nested_names(field.type, field.name)


def _check_level_names(names: Sequence[str], prefix: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        if not name or "\x00" in name:
            raise SchemaMismatchError(
                f"column name {prefix + name!r} is empty or contains a NUL character, which "
                "Lance cannot reference; rename the column"
            )
        other = seen.get(name.lower())
        if other == name:
            raise SchemaMismatchError(
                f"column {prefix + name!r} appears twice in the written data; rename one of them"
            )
        if other is not None:
            raise SchemaMismatchError(
                f"columns {prefix + other!r} and {prefix + name!r} of the written data differ "
                "only in case; Spark resolves column names ignoring case, so it could not "
                "query the table; rename one of them"
            )
        seen[name.lower()] = name


def _check_nested_names(t: pa.DataType, path: str) -> None:
    if pa.types.is_struct(t):
        _check_level_names([f.name for f in _children(t)], f"{path}.")
        for f in _children(t):
            _check_nested_names(f.type, f"{path}.{f.name}")
        return
    for child in _children(t):  # list elements, map keys and values: names are Arrow's
        _check_nested_names(child.type, path)


def _match_names(src: Sequence[str], dst: Sequence[str], prefix: str) -> list[str | None]:
    """For each ``src`` name the ``dst`` name it writes to, or None; no two share a target."""
    matches: list[str | None] = []
    taken: dict[str, str] = {}
    for name in src:
        target = _resolve_name(name, dst, prefix)
        if target is not None:
            if target in taken:
                raise SchemaMismatchError(
                    f"columns {prefix}{taken[target]!r} and {prefix}{name!r} of the written data "
                    f"both match table column {prefix}{target!r}"
                )
            taken[target] = name
        matches.append(target)
    return matches


def _resolve_name(name: str, candidates: Sequence[str], prefix: str) -> str | None:
    """Exact match first, then the unique case-insensitive one (Spark's default)."""
    if name in candidates:
        return name
    folded = [c for c in candidates if c.lower() == name.lower()]
    if len(folded) > 1:
        raise SchemaMismatchError(
            f"column {prefix}{name!r} matches several table columns ignoring case: "
            f"{', '.join(folded)}"
        )
    return folded[0] if folded else None


# ---- type-level cast checks ----------------------------------------------------------------


def _check_cast(src: pa.DataType, dst: pa.DataType, path: str) -> None:
    """Raise unless ``src`` values can be cast to ``dst`` without loss (values checked later)."""
    if src.equals(dst) or pa.types.is_null(src):
        return
    if pa.types.is_dictionary(src):
        return _check_cast(src.value_type, dst, path)
    if pa.types.is_dictionary(dst):
        return _check_cast(src, dst.value_type, path)
    if isinstance(src, pa.BaseExtensionType):
        return _check_cast(src.storage_type, dst, path)
    if isinstance(dst, pa.BaseExtensionType) and dst.extension_name == _BLOB_EXTENSION:
        if not _is_binary(src):
            raise _mismatch(path, src, dst, "a blob column takes binary values")
        return None
    if isinstance(dst, pa.BaseExtensionType):
        return _check_cast(src, dst.storage_type, path)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        _check_cast(src.key_type, dst.key_type, f"{path}.key")
        return _check_cast(src.item_type, dst.item_type, f"{path}.value")
    if _is_list_like(src) and _is_list_like(dst):
        return _check_list_cast(src, dst, path)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        return _check_struct_cast(src, dst, path)
    if not _leaf_cast_ok(src, dst):
        raise _mismatch(path, src, dst, "no lossless conversion")
    return None


def _check_list_cast(src: pa.DataType, dst: pa.DataType, path: str) -> None:
    fixed = pa.types.is_fixed_size_list
    if fixed(src) and fixed(dst) and src.list_size != dst.list_size:
        raise _mismatch(path, src, dst, "fixed-size lists of different sizes")
    _check_cast(src.value_type, dst.value_type, f"{path}.element")


def _check_struct_cast(src: pa.DataType, dst: pa.DataType, path: str) -> None:
    src_fields, dst_fields = _children(src), _children(dst)
    dst_names = [f.name for f in dst_fields]
    matches = _match_names([f.name for f in src_fields], dst_names, f"{path}.")
    for field, name in zip(src_fields, matches, strict=True):
        if name is None:
            raise SchemaMismatchError(
                f"struct field {path}.{field.name} is not in the table; the table's {path} has "
                f"fields {', '.join(dst_names)} (nested fields are never merged)"
            )
        _check_cast(field.type, dst.field(name).type, f"{path}.{field.name}")
    _check_required_present(dst_fields, {n for n in matches if n is not None}, f"{path}.")


def _leaf_cast_ok(src: pa.DataType, dst: pa.DataType) -> bool:
    types = pa.types
    if types.is_integer(src):
        return bool(types.is_integer(dst) or types.is_floating(dst) or types.is_decimal(dst))
    if types.is_floating(src):
        # float32 -> float16 only for float16 tables (read as FloatType); values are checked.
        narrowing_to_half = types.is_float32(src) and types.is_float16(dst)
        wide_enough = dst.bit_width >= src.bit_width or narrowing_to_half
        return bool(types.is_floating(dst) and wide_enough)
    if types.is_decimal(src):
        return bool(types.is_decimal(dst) or types.is_integer(dst))
    if types.is_timestamp(src):
        # TimestampType (an instant) and TimestampNTZType (a wall-clock time) do not mix.
        return bool(types.is_timestamp(dst) and (src.tz is None) == (dst.tz is None))
    for family in (_is_string, _is_binary, types.is_date, types.is_duration, types.is_time):
        if family(src):
            return bool(family(dst))
    return bool(types.is_boolean(src) and types.is_boolean(dst))


def _mismatch(path: str, src: pa.DataType, dst: pa.DataType, reason: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {path!r}: cannot write {src} into the table's {dst}: {reason}"
    )


# ---- value conversion ----------------------------------------------------------------------


def _to_write_array(arr: pa.Array, field: pa.Field, path: str) -> pa.Array:
    dst = field.type
    if _identical(arr.type, dst):
        _check_nulls(arr, field, path)
        return arr
    if isinstance(dst, pa.BaseExtensionType) and dst.extension_name == _BLOB_EXTENSION:
        _check_nulls(arr, field, path)
        return _blob_array(arr, dst, path)
    _check_cast(arr.type, dst, path)
    # Cast with every nested field nullable, check nulls ourselves, then take the table's
    # flags: pyarrow's own check also rejects nulls in the children of null structs (Spark
    # writes those), and does not check list elements at all.
    out = _cast_for_write(arr, _relaxed(dst), path)
    _check_nulls(out, field, path)
    return out if _identical(out.type, dst) else pa.array(_Retyped(out, dst))


def _cast_for_write(arr: pa.Array, dst: pa.DataType, path: str) -> pa.Array:
    src = arr.type
    arr = _without_list_views(arr)
    if pa.types.is_fixed_size_list(dst) and _is_list_like(arr.type):
        _check_list_lengths(arr, dst.list_size, path)
        if _no_list_values(arr):
            # Spark gives an all-null array column a values child of length 0 whose data
            # buffer has address 0, and pyarrow 26's cast list -> fixed_size_list segfaults
            # on it: there are no values to cast, so build the result without the cast.
            return _empty_fixed_size_lists(arr, dst)
    aligned = _align_names(arr.type, dst)
    if not _identical(aligned, arr.type):
        arr = arr.view(aligned)  # renames struct children only: same buffers
    if pa.types.is_integer(arr.type) and pa.types.is_decimal(dst):
        # pyarrow refuses int -> decimal unless the precision fits every int of the type;
        # go through a wide decimal so that the second cast checks the actual values.
        arr = pc.cast(arr, pa.decimal256(76, dst.scale))
    try:
        out = pc.cast(arr, dst, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise _mismatch(path, src, dst, str(e)) from e
    _check_half_floats(arr, out, path)
    return out


def _blob_array(arr: pa.Array, dst: pa.BaseExtensionType, path: str) -> pa.Array:
    """Binary ``arr`` as values of a blob v2 column (``dst``): its bytes inline in the
    storage struct's ``data`` child, its other children (external blob references) null."""
    if not _is_binary(arr.type):
        raise _mismatch(path, arr.type, dst, "a blob column takes binary values")
    storage = dst.storage_type
    children = [
        pc.cast(arr, f.type) if f.name == "data" else pa.nulls(len(arr), f.type) for f in storage
    ]
    mask = arr.is_null() if arr.null_count else None
    struct = pa.StructArray.from_arrays(children, fields=list(storage), mask=mask)
    return pa.ExtensionArray.from_storage(dst, struct)


def _no_list_values(arr: pa.Array) -> bool:
    """True when the values child of list-like ``arr`` is empty (or has no data buffer)."""
    values = arr.values
    if len(values) == 0:
        return True
    data = values.buffers()[1] if len(values.buffers()) > 1 else None
    return data is not None and data.address == 0


def _empty_fixed_size_lists(arr: pa.Array, dst: pa.DataType) -> pa.Array:
    """``arr``, whose valid rows are all empty lists (lengths checked), as ``dst`` lists."""
    if arr.null_count == len(arr):
        return pa.nulls(len(arr), dst)
    # Valid rows passed _check_list_lengths, so dst.list_size is 0 here.
    empty = pa.array([], type=dst.value_type)
    return pa.FixedSizeListArray.from_arrays(empty, type=dst, mask=arr.is_null())


def _check_list_lengths(arr: pa.Array, size: int, path: str) -> None:
    lengths = pc.list_value_length(arr)
    wrong = pc.and_kleene(arr.is_valid(), pc.not_equal(lengths, size))
    if pc.any(wrong).as_py():
        found = lengths[pc.index(wrong, True).as_py()].as_py()
        raise SchemaMismatchError(
            f"column {path!r}: the table stores arrays of length {size} "
            f"(fixed_size_list), found an array of length {found}"
        )


def _check_half_floats(before: pa.Array, after: pa.Array, path: str) -> None:
    """float32 -> float16 must give back every value (pyarrow's safe cast does not check)."""
    if not _contains_half_float(after.type):
        return
    for b, a, child_path in _child_pairs(before, after, path):
        _check_half_floats(b, a, child_path)
    if not (pa.types.is_float32(before.type) and pa.types.is_float16(after.type)):
        return
    back = pc.cast(after, pa.float32())
    same = pc.or_kleene(pc.equal(back, before), pc.and_(pc.is_nan(back), pc.is_nan(before)))
    if not pc.all(same).as_py():
        value = before[pc.index(same, False).as_py()].as_py()
        raise SchemaMismatchError(
            f"column {path!r}: cannot write float {value!r} into the table's float16 "
            "without losing precision"
        )


def _child_pairs(
    before: pa.Array, after: pa.Array, path: str
) -> list[tuple[pa.Array, pa.Array, str]]:
    """Row-aligned child arrays of ``before`` (name-aligned source) and ``after`` (cast)."""
    b, a = before.type, after.type
    if pa.types.is_struct(b) and pa.types.is_struct(a):
        names = [f.name for f in _children(b)]
        return [
            (before.field(f.name), after.field(f.name), f"{path}.{f.name}")
            for f in _children(a)
            if f.name in names
        ]
    if pa.types.is_map(b) and pa.types.is_map(a):
        eb, ea = _map_entries(before), _map_entries(after)
        return [
            (eb.field(0), ea.field(0), f"{path}.key"),
            (eb.field(1), ea.field(1), f"{path}.value"),
        ]
    if _is_list_like(b) and _is_list_like(a):
        return [(pc.list_flatten(before), pc.list_flatten(after), f"{path}.element")]
    return []


def _contains_half_float(t: pa.DataType) -> bool:
    return bool(pa.types.is_float16(t)) or any(_contains_half_float(f.type) for f in _children(t))


def _check_nulls(arr: pa.Array, field: pa.Field, path: str) -> None:
    if not field.nullable and arr.null_count:
        raise SchemaMismatchError(
            f"column {path!r} is not nullable in the table, but the written data has "
            f"{arr.null_count} null value(s) in it"
        )
    if _has_required_child(field.type):
        _check_child_nulls(arr, field.type, path)


def _check_child_nulls(arr: pa.Array, t: pa.DataType, path: str) -> None:
    if pa.types.is_struct(t):
        # Children of null structs may hold anything: look at valid rows only.
        valid = arr.filter(arr.is_valid()) if arr.null_count else arr
        for i, child in enumerate(_children(t)):
            _check_nulls(valid.field(i), child, f"{path}.{child.name}")
    elif pa.types.is_map(t):
        _check_nulls(_map_entries(arr).field(1), t.item_field, f"{path}.value")
    elif _is_list_like(t):
        _check_nulls(pc.list_flatten(arr), t.value_field, f"{path}.element")


def _has_required_child(t: pa.DataType) -> bool:
    return any(not f.nullable or _has_required_child(f.type) for f in _children(t))


def _align_names(src: pa.DataType, dst: pa.DataType) -> pa.DataType:
    """``src`` with struct children renamed to the ``dst`` names they match ignoring case."""
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        dst_names = [f.name for f in _children(dst)]
        fields = []
        for f in _children(src):
            name = _resolve_name(f.name, dst_names, "") or f.name
            child = _align_names(f.type, dst.field(name).type) if name in dst_names else f.type
            fields.append(pa.field(name, child, f.nullable, f.metadata))
        return pa.struct(fields)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        key = src.key_field.with_type(_align_names(src.key_type, dst.key_type))
        item = src.item_field.with_type(_align_names(src.item_type, dst.item_type))
        return pa.map_(key, item, keys_sorted=src.keys_sorted)
    if _is_list_like(src) and _is_list_like(dst):
        value = src.value_field.with_type(_align_names(src.value_type, dst.value_type))
        return _list_type_like(src, value)
    return src


class _Retyped:
    """``array`` under ``t``, a type that differs only in nullability flags (zero-copy).

    ``Array.view`` refuses nulls under a non-nullable child even where the parent is null;
    importing through the Arrow C data interface with the other type does not validate.
    """

    def __init__(self, array: pa.Array, t: pa.DataType) -> None:
        self._array = array
        self._type = t

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        _, array = self._array.__arrow_c_array__()
        return self._type.__arrow_c_schema__(), array


def with_new_columns(schema: pa.Schema, columns: StructType) -> pa.Schema:
    """``schema`` with the Spark ``columns`` (new, all-null in the existing rows) after its
    own, stored as a new table's would be (:func:`arrow_schema_for_new_table`)."""
    if not columns.fields:
        return schema
    arrow = to_arrow_schema(columns, timezone="UTC")
    fields = arrow_schema_for_new_table(
        pa.schema([f.remove_metadata() for f in arrow]), vector_sizes={}
    )
    return pa.schema([*schema, *nullable_schema(fields)])


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field, nested ones too, nullable (map keys excepted)."""
    return pa.schema([pa.field(f.name, _relaxed(f.type), nullable=True) for f in schema])


def _relaxed(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable (map keys excepted: Arrow forbids null keys)."""
    if pa.types.is_map(t):
        item = t.item_field
        return pa.map_(t.key_field, item.with_type(_relaxed(item.type)).with_nullable(True))
    return _map_children(t, lambda f: f.with_type(_relaxed(f.type)).with_nullable(True))


def _identical(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal including nested field names (``DataType.equals`` ignores list/map child names)."""
    return bool(a.equals(b)) and _nested_names(a) == _nested_names(b)


def _nested_names(t: pa.DataType) -> tuple[object, ...]:
    return tuple((f.name, _nested_names(f.type)) for f in _children(t))


# ---- Arrow helpers -------------------------------------------------------------------------


def _is_list_like(t: pa.DataType) -> bool:
    types = pa.types
    return bool(
        types.is_list(t)
        or types.is_large_list(t)
        or types.is_fixed_size_list(t)
        or types.is_list_view(t)
        or types.is_large_list_view(t)
    )


def _is_string(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_string(t) or types.is_large_string(t) or types.is_string_view(t))


def _is_binary(t: pa.DataType) -> bool:
    types = pa.types
    return bool(
        types.is_binary(t)
        or types.is_large_binary(t)
        or types.is_binary_view(t)
        or types.is_fixed_size_binary(t)
    )


def _children(t: pa.DataType) -> list[pa.Field]:
    """The child fields of a nested type (struct fields, list element, map key and value)."""
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    if _is_list_like(t):
        return [t.value_field]
    return []


def _map_children(t: pa.DataType, fn: Callable[[pa.Field], pa.Field]) -> pa.DataType:
    """``t`` with ``fn`` applied to its direct child fields."""
    if pa.types.is_struct(t):
        return pa.struct([fn(f) for f in _children(t)])
    if pa.types.is_map(t):
        return pa.map_(fn(t.key_field), fn(t.item_field), keys_sorted=t.keys_sorted)
    if _is_list_like(t):
        return _list_type_like(t, fn(t.value_field))
    return t


def _list_type_like(t: pa.DataType, value: pa.Field) -> pa.DataType:
    types = pa.types
    if types.is_fixed_size_list(t):
        return pa.list_(value, t.list_size)
    if types.is_large_list(t):
        return pa.large_list(value)
    if types.is_list_view(t):
        return pa.list_view(value)
    if types.is_large_list_view(t):
        return pa.large_list_view(value)
    return pa.list_(value)


def _contains_list_view(t: pa.DataType) -> bool:
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return True
    return any(_contains_list_view(f.type) for f in _children(t))


def _without_list_views(arr: pa.Array) -> pa.Array:
    """``arr`` with every list view turned into a list (pyarrow 26 casts them wrongly)."""
    t = arr.type
    if not _contains_list_view(t):
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [_without_list_views(arr.field(i)) for i in range(t.num_fields)]
        fields = [f.with_type(c.type) for f, c in zip(_children(t), children, strict=True)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_fixed_size_list(t):
        values = arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size)
        values = _without_list_views(values)
        value_type = pa.list_(t.value_field.with_type(values.type), t.list_size)
        return pa.FixedSizeListArray.from_arrays(values, type=value_type, mask=mask)
    if pa.types.is_map(t):
        entries = _map_entries(arr)
        keys, items = (_without_list_views(entries.field(i)) for i in range(2))
        offsets = _offsets(arr.view(pa.list_(t.field(0))), pa.int32())
        map_type = pa.map_(t.key_field.with_type(keys.type), t.item_field.with_type(items.type))
        return pa.MapArray.from_arrays(offsets, keys, items, type=map_type, mask=mask)
    large = pa.types.is_large_list(t) or pa.types.is_large_list_view(t)
    values = _without_list_views(pc.list_flatten(arr))
    value = t.value_field.with_type(values.type)
    if large:
        return pa.LargeListArray.from_arrays(
            _offsets(arr, pa.int64()), values, type=pa.large_list(value), mask=mask
        )
    return pa.ListArray.from_arrays(
        _offsets(arr, pa.int32()), values, type=pa.list_(value), mask=mask
    )


def _contains_type(t: pa.DataType, wanted: Callable[[pa.DataType], bool]) -> bool:
    if wanted(t):
        return True
    if pa.types.is_dictionary(t):
        return _contains_type(t.value_type, wanted)
    if isinstance(t, pa.BaseExtensionType):
        return _contains_type(t.storage_type, wanted)
    return any(_contains_type(f.type, wanted) for f in _children(t))


def _map_arrays(
    arr: pa.Array, wanted: Callable[[pa.DataType], bool], fn: Callable[[pa.Array], pa.Array]
) -> pa.Array:
    """``arr`` with ``fn`` applied to it or to each nested array whose type is ``wanted``.

    Only the parents of arrays that ``fn`` changed are rebuilt (validity and offsets kept,
    the other children reused): when ``fn`` returns every array it is given, the result is
    ``arr`` itself. Goes through structs, lists, large lists, fixed-size lists, maps,
    dictionaries and extension arrays, not list views (see :func:`_without_list_views`).
    """
    t = arr.type
    if wanted(t):
        return fn(arr)
    if not _contains_type(t, wanted):
        return arr
    if pa.types.is_dictionary(t):
        dictionary = arr.dictionary
        new_dictionary = _map_arrays(dictionary, wanted, fn)
        if new_dictionary is dictionary:
            return arr
        return pa.DictionaryArray.from_arrays(arr.indices, new_dictionary)
    if isinstance(t, pa.BaseExtensionType):
        storage = arr.storage
        new_storage = _map_arrays(storage, wanted, fn)
        if new_storage is storage:
            return arr
        return pa.ExtensionArray.from_storage(t, new_storage)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(t):
        children = [arr.field(i) for i in range(t.num_fields)]  # sliced like arr
        new = [_map_arrays(c, wanted, fn) for c in children]
        if all(n is c for n, c in zip(new, children, strict=True)):
            return arr
        fields = [f.with_type(n.type) for f, n in zip(_children(t), new, strict=True)]
        return pa.StructArray.from_arrays(new, fields=fields, mask=mask)
    if pa.types.is_map(t):
        keys, items = arr.keys, arr.items  # whole children, as the offsets
        new_keys, new_items = _map_arrays(keys, wanted, fn), _map_arrays(items, wanted, fn)
        if new_keys is keys and new_items is items:
            return arr
        map_type = pa.map_(
            t.key_field.with_type(new_keys.type),
            t.item_field.with_type(new_items.type),
            keys_sorted=t.keys_sorted,
        )
        return pa.MapArray.from_arrays(
            _unsliced(arr.offsets), new_keys, new_items, type=map_type, mask=mask
        )
    if pa.types.is_fixed_size_list(t):
        values = arr.values  # the whole child, ignoring arr's offset
        new_values = _map_arrays(values, wanted, fn)
        if new_values is values:
            return arr
        size = t.list_size
        new_values = new_values.slice(arr.offset * size, len(arr) * size)
        value_type = pa.list_(t.value_field.with_type(new_values.type), size)
        return pa.FixedSizeListArray.from_arrays(new_values, type=value_type, mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = arr.values  # the whole child, as the offsets
        new_values = _map_arrays(values, wanted, fn)
        if new_values is values:
            return arr
        value = t.value_field.with_type(new_values.type)
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        return cls.from_arrays(
            _unsliced(arr.offsets), new_values, type=_list_type_like(t, value), mask=mask
        )
    return arr


def _unsliced(offsets: pa.Array) -> pa.Array:
    """``offsets`` with offset 0 (``from_arrays`` refuses a null mask with sliced offsets)."""
    return offsets if offsets.offset == 0 else pa.concat_arrays([offsets])


def _map_entries(arr: pa.Array) -> pa.StructArray:
    """The key/value entries of the valid rows of a map array (a map is a list of structs)."""
    return pc.list_flatten(arr.view(pa.list_(arr.type.field(0))))


def _offsets(arr: pa.Array, offset_type: pa.DataType) -> pa.Array:
    """Offsets of a compact list layout of ``arr`` (null rows are empty)."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(offset_type)
    return pa.concat_arrays([pa.array([0], offset_type), pc.cumulative_sum(lengths)])
