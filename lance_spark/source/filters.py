"""Spark pushed-down filters -> one Lance SQL predicate, exactly or not at all.

Spark does not re-check a filter that a reader accepts, so every accepted filter must select
exactly the rows Spark would select. Anything that cannot be translated exactly is rejected
(handed back to Spark, which then evaluates it itself). The accepted filters are joined with
``AND``; each one keeps SQL's three-valued logic, which is also Spark's: a comparison with a
NULL operand is NULL, ``NOT NULL`` is NULL, and a row is kept only when the predicate is TRUE.

Translation (``c`` is the quoted column, ``v`` the literal rendered in ``c``'s own Arrow type):

* ``EqualTo(c, v)`` -> ``c = v``; ``GreaterThan`` / ``>=`` / ``<`` / ``<=`` -> ``c > v`` ...
* ``EqualNullSafe(c, None)`` -> ``c IS NULL``; ``EqualNullSafe(c, v)`` ->
  ``c IS NOT NULL AND c = v``, which is never NULL, as in Spark.
* ``In(c, [v1, v2])`` -> ``c IN (v1, v2)``; ``In(c, [v1, None])`` ->
  ``(c IN (v1)) OR (CAST(NULL AS BOOLEAN))``, so a row that matches nothing yields NULL (and
  ``NOT`` of it excludes the row), as in Spark. The NULL is kept out of the list on purpose:
  Lance (DataFusion's IN-list simplifier) rewrites ``c IN (a) AND NOT (c IN (b, NULL))`` to
  ``c IN (a - b)``, losing the NULL, which selects rows Spark would not.
* ``IsNull`` / ``IsNotNull`` -> ``c IS [NOT] NULL`` (any column type, structs and lists too;
  a NULL struct makes its fields NULL, in Lance as in Spark).
* ``Not(f)`` -> ``NOT (f)`` when ``f`` translates.
* ``StringStartsWith`` / ``StringEndsWith`` / ``StringContains`` -> ``starts_with(c, 's')`` /
  ``ends_with(c, 's')`` / ``contains(c, 's')``: literal, case-sensitive checks (no LIKE, so
  ``%``, ``_`` and ``\\`` need no escaping; Lance's LIKE only accepts ``\\`` as escape).

Lance SQL facts this relies on (pylance 14, checked by ``tests/unit/test_filters.py``):

* Identifiers are quoted with backticks, which keep case, spaces, keywords and dots (nested
  fields: each name quoted, joined with dots); a backtick inside is doubled. That reaches a
  nested field with a backtick, but not a top-level column (the lookup fails however it is
  quoted; pylance cannot even project one): rejected, as are empty names and NUL.
* String literals: ``''`` is the only escape; a backslash is an ordinary character; newlines
  and any Unicode (NUL included) can appear as is.
* A literal must convert to the column's type without loss or the scan fails (``i8 = 300``,
  ``i64 = 1.0``, ``dec = 1.5`` all fail), so literals are rendered in the column's own type:
  integers as digits (``i64::MIN`` through a ``CAST``: ``-9223372036854775808`` parses as a
  float), decimals as ``CAST('1.50' AS DECIMAL(p,s))`` (a bare ``1.50`` is a float), date32
  as ``DATE 'yyyy-mm-dd'``, date64 and timestamps as ``arrow_cast(<int>, '<exact type>')``
  with the column's unit and zone (a ``TIMESTAMP '...'`` literal is read as wall time in the
  column's zone: wrong for non-UTC zones, and truncated to ms / s columns), binary as
  ``X'hex'``, floats by ``repr`` and ``CAST('NaN' | 'inf' | '-inf' AS DOUBLE)``.
* Floats: Lance compares with Spark's semantics already (NaN = NaN, NaN above +inf, -0.0 =
  0.0 via its signed-zero rewrite), also through BTREE / BITMAP / ZONEMAP / BLOOMFILTER
  indexes and in IN lists, so float filters are plain comparisons.

Columns whose Spark value differs from the stored one (see ``_types``): ``timestamp[ms]`` and
``[s]`` are widened to microseconds; ``timestamp[ns]`` and ``date64`` are rounded down
(floored, also before 1970: to microseconds, to days, as ``conform_read_batch`` does, so
-1 ns is -1 us and -1 ms is 1969-12-31); ``uint64`` is ``DECIMAL(20, 0)``; and a decimal
literal may have more digits than the column's scale. For these "grid" types a literal ``v``
becomes two stored values: ``lo``, the smallest one Spark sees as ``>= v``, and ``hi``, the
largest one Spark sees as ``<= v``. Then ``> v`` is ``c > hi``, ``>= v`` is ``c >= lo``,
``< v`` is ``c < lo``, ``<= v`` is ``c <= hi`` and ``= v`` is ``c = lo`` when ``lo == hi``,
else ``c >= lo AND c <= hi`` (an empty range when nothing matches: FALSE, or NULL on a NULL
row, exactly Spark's answer).

Deliberate rejections (the filter goes back to Spark, nothing is lost but the pushdown):

* unknown columns (names are matched exactly: the reader resolves Spark's case first),
  ambiguous (duplicate) field names, paths through anything but structs;
* names containing a backtick (see above);
* comparisons on structs, lists, maps (Spark's equality of those is not SQL's), float16 (a
  float32 literal has no exact float16 form), decimals other than decimal128, dictionaries of
  non-strings, binary_view, time, duration and extension types: not pinned down by tests;
* a Python value whose type does not match the column's (float for an int column, naive
  datetime for a zoned timestamp column, ...): the user schema and the table disagree, and
  Spark's comparison would involve a cast this module does not reproduce;
* values the column cannot hold (``300`` for ``int8``, a float that is not a float32 value, a
  timestamp beyond ``timestamp[ns]``, a binary of another length for ``fixed_size_binary``),
  ``None`` in a comparison (Spark folds those away), an empty ``In`` list (Spark's answer
  depends on a legacy conf there);
* string filters on non-string columns; strings with lone surrogates (not UTF-8).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from lance_spark.errors import UnquotableColumnError

__all__ = ["in_list_predicate", "quote_column", "translate_filters"]


class _Rejected(Exception):
    """Internal: the filter has no exact Lance translation."""


def translate_filters(
    filters: Sequence[Filter], schema: pa.Schema
) -> tuple[str | None, list[Filter]]:
    """Return (lance_predicate or None if nothing was pushed, rejected filters -- the SAME objects as given)."""
    accepted: list[str] = []
    rejected: list[Filter] = []
    for f in filters:
        try:
            accepted.append(_translate(f, schema))
        except _Rejected:
            rejected.append(f)
    if not accepted:
        return None, rejected
    return " AND ".join(f"({p})" for p in accepted), rejected


def in_list_predicate(path: Sequence[str], values: pa.Array, schema: pa.Schema) -> str | None:
    """``c IN (...)`` for the non-null ``values``, or None when it has no exact translation.

    The same predicate as ``translate_filters([In(path, values)])`` without the NULLs. For
    many values of an integer or string column given in the column's own Arrow type (a MERGE
    source's keys), the literals are rendered by Arrow compute, not one by one: 50,000 keys
    take milliseconds instead of half a second.
    """
    present = values.drop_null()
    if len(present) == 0:
        return None
    try:
        col, dtype = _column(path, schema)
    except _Rejected:
        return None
    if present.type.equals(dtype) and _vector_renderable(present):
        if pa.types.is_integer(dtype):
            text = pc.cast(present, pa.string())
        else:
            quote = pa.scalar("'", present.type)
            escaped = pc.replace_substring(present, "'", "''")
            text = pc.binary_join_element_wise(quote, escaped, quote, pa.scalar("", present.type))
        return f"{col} IN ({','.join(text.to_pylist())})"
    found, rejected = translate_filters([In(tuple(path), tuple(present.to_pylist()))], schema)
    return None if rejected else found


def _vector_renderable(values: pa.Array) -> bool:
    """Integers (but i64::MIN, which needs a CAST) and plain strings render as is."""
    t = values.type
    if pa.types.is_integer(t):
        return not (pa.types.is_int64(t) and pc.min(values).as_py() == -(1 << 63))
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def quote_column(path: Sequence[str]) -> str:
    """Lance SQL reference for a (possibly nested) column: each name in backticks (which keep
    case, spaces, dots and keywords verbatim), inner backticks doubled, joined with dots.

    Raises :class:`UnquotableColumnError` for a name Lance cannot reference: an empty one,
    one with a NUL character, and a top-level one with a backtick (pylance 14 resolves a
    top-level name by parsing it again, so no quoting reaches such a column; a nested field
    with a backtick is found when the backtick is doubled).
    """
    if not path:
        raise UnquotableColumnError("an empty column path cannot be referenced")
    for depth, name in enumerate(path):
        if not name or "\x00" in name:
            raise UnquotableColumnError(
                f"column name {name!r} is empty or contains a NUL character, which Lance SQL "
                "cannot reference"
            )
        if depth == 0 and "`" in name:
            raise UnquotableColumnError(
                f"column name {name!r} contains a backtick, which Lance SQL cannot reference "
                "in a top-level column"
            )
    return ".".join("`" + name.replace("`", "``") + "`" for name in path)


# --- filter dispatch -------------------------------------------------------------------------


def _translate(f: Filter, schema: pa.Schema) -> str:
    handler = _HANDLERS.get(type(f))
    if handler is None:
        raise _Rejected
    return handler(f, schema)


def _equal_to(f: Any, schema: pa.Schema) -> str:
    col, dtype = _column(f.attribute, schema)
    return _equals(col, _literal(dtype, f.value))


def _equal_null_safe(f: Any, schema: pa.Schema) -> str:
    if f.value is None:
        return f"{_field_ref(f.attribute, schema)[0]} IS NULL"
    col, dtype = _column(f.attribute, schema)
    return f"{col} IS NOT NULL AND {_equals(col, _literal(dtype, f.value))}"


def _comparison(op: str) -> Callable[[Any, pa.Schema], str]:
    def translate(f: Any, schema: pa.Schema) -> str:
        col, dtype = _column(f.attribute, schema)
        lit = _literal(dtype, f.value)
        # c > v and c <= v only depend on hi; c >= v and c < v only on lo (see module doc).
        bound = lit.hi if op in (">", "<=") else lit.lo
        if bound is None:
            raise _Rejected
        return f"{col} {op} {bound}"

    return translate


def _in(f: Any, schema: pa.Schema) -> str:
    col, dtype = _column(f.attribute, schema)
    if not isinstance(f.value, list | tuple) or not f.value:
        raise _Rejected
    values = list(f.value)
    literals = [_literal(dtype, v) for v in values if v is not None]
    if any(lit.lo is None or lit.hi is None for lit in literals):
        raise _Rejected  # a value the column cannot hold (300 for int8), as for EqualTo
    parts: list[str] = []
    if literals and all(lit.is_point for lit in literals):
        parts.append(f"{col} IN ({', '.join(str(lit.lo) for lit in literals)})")
    else:
        parts.extend(_equals(col, lit) for lit in literals)
    if len(literals) < len(values):
        # Not a NULL item inside the list: Lance's planner rewrites `c IN (a) AND NOT c IN
        # (b, NULL)` to `c IN (a - b)`, dropping the NULL (wrong rows for Not(In(.., None))).
        parts.append(_NULL)
    if len(parts) == 1:
        return parts[0]
    return " OR ".join(f"({p})" for p in parts)


_NULL = "CAST(NULL AS BOOLEAN)"  # a bare NULL is not accepted as a whole filter


def _is_null(f: Any, schema: pa.Schema) -> str:
    return f"{_field_ref(f.attribute, schema)[0]} IS NULL"


def _is_not_null(f: Any, schema: pa.Schema) -> str:
    return f"{_field_ref(f.attribute, schema)[0]} IS NOT NULL"


def _not(f: Any, schema: pa.Schema) -> str:
    return f"NOT ({_translate(f.child, schema)})"


def _string_function(name: str) -> Callable[[Any, pa.Schema], str]:
    def translate(f: Any, schema: pa.Schema) -> str:
        col, dtype = _field_ref(f.attribute, schema)
        if not _is_string_type(dtype) or not isinstance(f.value, str):
            raise _Rejected
        return f"{name}({col}, {_string_literal(f.value)})"

    return translate


_HANDLERS: dict[type[Filter], Callable[[Any, pa.Schema], str]] = {
    EqualTo: _equal_to,
    EqualNullSafe: _equal_null_safe,
    GreaterThan: _comparison(">"),
    GreaterThanOrEqual: _comparison(">="),
    LessThan: _comparison("<"),
    LessThanOrEqual: _comparison("<="),
    In: _in,
    IsNull: _is_null,
    IsNotNull: _is_not_null,
    Not: _not,
    StringStartsWith: _string_function("starts_with"),
    StringEndsWith: _string_function("ends_with"),
    StringContains: _string_function("contains"),
}


@dataclass(frozen=True)
class _Literal:
    """A Spark value as stored values of the column: see "grid" types in the module doc.

    ``lo`` / ``hi`` are SQL literals in the column's type, or None when outside its range.
    """

    lo: str | None
    hi: str | None
    is_point: bool  # the value is exactly one stored value (then lo == hi)


def _equals(col: str, lit: _Literal) -> str:
    if lit.lo is None or lit.hi is None:
        raise _Rejected
    if lit.is_point:
        return f"{col} = {lit.lo}"
    return f"{col} >= {lit.lo} AND {col} <= {lit.hi}"


# --- columns ---------------------------------------------------------------------------------


def _field_ref(path: Sequence[Any], schema: pa.Schema) -> tuple[str, pa.DataType]:
    """The quoted reference and Arrow type of a (nested) column; any type."""
    if not path or not all(isinstance(name, str) for name in path):
        raise _Rejected
    # get_field_index is -1 for a missing name and for a duplicated (ambiguous) one.
    index = schema.get_field_index(path[0])
    if index < 0:
        raise _Rejected
    dtype = schema.field(index).type
    for name in path[1:]:
        if not pa.types.is_struct(dtype):
            raise _Rejected
        index = dtype.get_field_index(name)
        if index < 0:
            raise _Rejected
        dtype = dtype.field(index).type
    try:
        return quote_column(path), dtype
    except UnquotableColumnError:
        raise _Rejected from None


def _column(path: Sequence[Any], schema: pa.Schema) -> tuple[str, pa.DataType]:
    """Like _field_ref, for comparisons with a literal: only types we render literals for."""
    col, dtype = _field_ref(path, schema)
    if _literal_renderer(dtype) is None:
        raise _Rejected
    return col, dtype


def _is_string_type(dtype: pa.DataType) -> bool:
    """string / large_string / string_view, also dictionary-encoded (Spark: StringType)."""
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_string_view(dtype)
    )


def _is_binary_type(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
    )


# --- literals --------------------------------------------------------------------------------


def _literal(dtype: pa.DataType, value: Any) -> _Literal:
    render = _literal_renderer(dtype)
    if render is None or value is None:
        raise _Rejected
    return render(dtype, value)


def _literal_renderer(dtype: pa.DataType) -> Callable[[pa.DataType, Any], _Literal] | None:
    for accepts, render in _RENDERERS:
        if accepts(dtype):
            return render
    return None


def _point(sql: str) -> _Literal:
    return _Literal(sql, sql, is_point=True)


def _grid(lo: int, hi: int, render: Callable[[int], str | None]) -> _Literal:
    """A literal between stored values: lo = first stored value >= it, hi = last one <= it."""
    return _Literal(render(lo), render(hi), is_point=lo == hi)


def _integer_literal(dtype: pa.DataType, value: Any) -> _Literal:
    # Decimal: Spark reads uint64 as DECIMAL(20, 0), so its literals for it are decimals.
    exact = _exact_number(value)
    if pa.types.is_signed_integer(dtype):
        low, high = -(1 << (dtype.bit_width - 1)), (1 << (dtype.bit_width - 1)) - 1
    else:
        low, high = 0, (1 << dtype.bit_width) - 1

    def render(n: int) -> str | None:
        return _integer_sql(n) if low <= n <= high else None

    return _grid(math.ceil(exact), math.floor(exact), render)


def _exact_number(value: Any) -> Fraction:
    """An int or Decimal literal as an exact fraction; anything else is rejected."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise _Rejected
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _Rejected
        # Bound the exponent before exact arithmetic (Decimal("1E+999999999") is legal); no
        # column of ours holds such magnitudes or digits.
        if not value.is_zero() and abs(value.adjusted()) > _MAX_DECIMAL_EXPONENT:
            raise _Rejected
    return Fraction(value)


_MAX_DECIMAL_EXPONENT = 80


def _integer_sql(value: int) -> str:
    # "-9223372036854775808" is parsed as minus a u64 that does not fit i64, i.e. a float.
    if value == -(1 << 63):
        return f"CAST('{value}' AS BIGINT)"
    return str(value)


def _float_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, float):
        raise _Rejected
    if pa.types.is_float32(dtype) and not _is_float32(value):
        raise _Rejected  # Spark's literal for a FloatType column is always a float32 value
    if math.isnan(value):
        return _point("CAST('NaN' AS DOUBLE)")
    if math.isinf(value):
        return _point("CAST('inf' AS DOUBLE)" if value > 0 else "CAST('-inf' AS DOUBLE)")
    return _point(repr(value))  # shortest repr round-trips exactly; -0.0 stays -0.0


def _is_float32(value: float) -> bool:
    if math.isnan(value):
        return True
    try:
        narrowed: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return False
    return narrowed == value


def _decimal_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, Decimal):
        raise _Rejected
    precision, scale = dtype.precision, dtype.scale
    if not 0 <= scale <= precision:
        raise _Rejected
    limit = 10**precision  # stored unscaled values lie strictly between -limit and limit
    unscaled = _exact_number(value) * 10**scale

    def render(n: int) -> str | None:
        if not -limit < n < limit:
            return None
        digits = str(abs(n)).rjust(scale + 1, "0")
        text = digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"
        sign = "-" if n < 0 else ""
        return f"CAST('{sign}{text}' AS DECIMAL({precision},{scale}))"

    return _grid(math.ceil(unscaled), math.floor(unscaled), render)


def _string_literal_value(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, str):
        raise _Rejected
    return _point(_string_literal(value))


def _string_literal(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: no Spark string holds them
        raise _Rejected from None
    return "'" + value.replace("'", "''") + "'"


def _binary_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, bytes | bytearray):
        raise _Rejected
    # Lance cannot convert a literal of another length to fixed_size_binary[n].
    if pa.types.is_fixed_size_binary(dtype) and len(value) != dtype.byte_width:
        raise _Rejected
    return _point(f"X'{bytes(value).hex()}'")


def _bool_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, bool):
        raise _Rejected
    return _point("true" if value else "false")


def _date_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, date) or isinstance(value, datetime):
        raise _Rejected
    if pa.types.is_date32(dtype):
        return _point(f"DATE '{value.isoformat()}'")
    # date64 holds milliseconds; Spark sees them rounded down to whole days.
    days = (value - _EPOCH.date()).days
    return _floored_grid(days, _MILLIS_PER_DAY, lambda n: _int64_cast(n, "Date64"))


_MILLIS_PER_DAY = 86_400_000


_UNITS = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}
_MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=UTC)


def _timestamp_literal(dtype: pa.DataType, value: Any) -> _Literal:
    if not isinstance(value, datetime) or dtype.unit not in _UNITS:
        raise _Rejected
    aware = value.tzinfo is not None and value.utcoffset() is not None
    # A zoned column is Spark's TIMESTAMP (an instant), a zone-less one TIMESTAMP_NTZ.
    if aware != (dtype.tz is not None):
        raise _Rejected
    micros = (value - (_EPOCH_UTC if aware else _EPOCH)) // timedelta(microseconds=1)
    arrow_type = _arrow_timestamp_type(dtype)

    def render(n: int) -> str | None:
        return _int64_cast(n, arrow_type)

    if dtype.unit == "ns":  # Spark keeps microseconds
        return _floored_grid(micros, 1000, render)
    stored = Fraction(micros, _MICROS_PER_UNIT[dtype.unit])
    return _grid(math.ceil(stored), math.floor(stored), render)


def _floored_grid(value: int, factor: int, render: Callable[[int], str | None]) -> _Literal:
    """Spark sees stored ``n`` as ``floor(n / factor)`` (``_types.conform_read_batch`` rounds
    down, before 1970 too): ``value`` covers the stored values ``lo..hi``."""
    lo = value * factor
    return _grid(lo, lo + factor - 1, render)


def _int64_cast(n: int, arrow_type: str) -> str | None:
    if not _I64_MIN <= n <= _I64_MAX:
        return None
    return f"arrow_cast({n}, '{arrow_type}')"


def _arrow_timestamp_type(dtype: pa.DataType) -> str:
    tz = dtype.tz
    if tz is None:
        return f"Timestamp({_UNITS[dtype.unit]}, None)"
    if any(ch in tz for ch in "'\"\\"):
        raise _Rejected
    return f'Timestamp({_UNITS[dtype.unit]}, Some("{tz}"))'


_RENDERERS: list[tuple[Callable[[pa.DataType], bool], Callable[[pa.DataType, Any], _Literal]]] = [
    (pa.types.is_integer, _integer_literal),
    (lambda t: pa.types.is_float32(t) or pa.types.is_float64(t), _float_literal),
    (pa.types.is_decimal128, _decimal_literal),
    (_is_string_type, _string_literal_value),
    (_is_binary_type, _binary_literal),
    (pa.types.is_boolean, _bool_literal),
    (lambda t: pa.types.is_date32(t) or pa.types.is_date64(t), _date_literal),
    (pa.types.is_timestamp, _timestamp_literal),
]
