"""Filter translation: what Lance selects must be exactly what Spark would select.

No JVM: filters are built directly and the translated predicate runs on Lance datasets written
with pylance. A pure-Python evaluator of Spark's semantics (three-valued logic, NaN and -0.0,
timestamps as microseconds, UTF-8 byte order) is the reference. Property tests generate filters
over a table holding every supported type and the awkward values (NULLs, NaN, +-0.0, +-inf,
extremes, quotes, backslashes, LIKE wildcards, NUL, non-ASCII); the same table is written with
several fragments, deletions and each kind of scalar index, since index and statistics pruning
must not change answers. Targeted tests pin each rule and each rejection.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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

from lance_spark.errors import SchemaMismatchError, UnquotableColumnError
from lance_spark.source.filters import (
    in_list_predicate,
    quote_column,
    translate_filters,
)
from lance_spark.source.types import arrow_read_schema, conform_read_batch

SPARK_UTC = ZoneInfo("UTC")  # what pyspark puts on TimestampType literals
EPOCH = datetime(1970, 1, 1)
EPOCH_UTC = EPOCH.replace(tzinfo=UTC)
N_ROWS = 240
DELETED = {r for r in range(N_ROWS) if r % 11 == 3}

# --- the reference: Spark's semantics in Python ----------------------------------------------


def _float_key(x: float) -> tuple[bool, float]:
    # Spark: NaN = NaN, NaN above everything (+inf too), -0.0 = 0.0.
    return (True, 0.0) if math.isnan(x) else (False, x + 0.0)


def _micros(v: datetime) -> int:
    epoch = EPOCH if v.tzinfo is None else EPOCH_UTC
    return int((v - epoch) // timedelta(microseconds=1))


@dataclass(frozen=True)
class Kind:
    """How Spark sees one column: comparison key for stored values and for literals."""

    name: str
    key: Callable[[Any], Any] = lambda v: v
    literal: Callable[[Any], Any] = lambda v: v

    def compare(self, stored: Any, literal: Any) -> int:
        a, b = self.key(stored), self.key(self.literal(literal))
        return int(a > b) - int(a < b)


FLOAT = Kind("float", key=_float_key)
PLAIN = Kind("plain")
STRING = Kind("string", key=lambda v: v.encode("utf-8"))
TIMESTAMP = Kind("timestamp", literal=_micros)  # stored values are kept as microseconds
Row = dict[str, Any]


def _lookup(row: Row, path: Sequence[str]) -> Any:
    value: Any = row
    for name in path:
        if value is None:
            return None
        value = value[name]
    return value


def in_list(path: tuple[str, ...], values: list[Any]) -> In:
    """In as pyspark builds it: with a list (the dataclass annotation says tuple)."""
    return In(path, values)  # type: ignore[arg-type]


def spark_eval(f: Filter, row: Row) -> bool | None:
    """Spark's three-valued answer for one filter on one row."""
    if isinstance(f, Not):
        inner = spark_eval(f.child, row)
        return None if inner is None else not inner
    path = f.attribute  # type: ignore[attr-defined]
    v = _lookup(row, path)
    if isinstance(f, IsNull):
        return v is None
    if isinstance(f, IsNotNull):
        return v is not None
    if isinstance(f, EqualNullSafe):
        if v is None or f.value is None:
            return v is None and f.value is None
        return KINDS[path].compare(v, f.value) == 0
    if v is None:
        return None
    if isinstance(f, In):
        if any(x is not None and KINDS[path].compare(v, x) == 0 for x in f.value):
            return True
        return None if any(x is None for x in f.value) else False
    if isinstance(f, StringStartsWith):
        return bool(v.startswith(f.value))
    if isinstance(f, StringEndsWith):
        return bool(v.endswith(f.value))
    if isinstance(f, StringContains):
        return f.value in v
    c = KINDS[path].compare(v, f.value)  # type: ignore[attr-defined]
    return {
        EqualTo: c == 0,
        GreaterThan: c > 0,
        GreaterThanOrEqual: c >= 0,
        LessThan: c < 0,
        LessThanOrEqual: c <= 0,
    }[type(f)]


def spark_rows(filters: Sequence[Filter], rows: Sequence[Row], deleted: set[int]) -> set[int]:
    return {
        r["row"]
        for r in rows
        if r["row"] not in deleted and all(spark_eval(f, r) is True for f in filters)
    }


# --- the table: every type, awkward values, the Spark view of each ----------------------------


@dataclass
class Column:
    """Arrow storage and Spark view of one column, plus the literals worth trying on it."""

    arrow: pa.Array
    spark: list[Any]
    kind: Kind = PLAIN
    literals: list[Any] = field(default_factory=list)


TRICKY = ["", "a", "A", "ab", "a'b", "'", "''", "\\", "a\\b", "\\'", "%", "a%", "_", "a_b", "\n"]
TRICKY += ["ü", "Ü", "😀", "\x00", "a\x00b", "ab'c\\%_", "aa", "ba", "b", " a", "a "]
ALPHABET = ["a", "b", "A", "'", "\\", "%", "_", "\n", "ü", "😀", "\x00", " "]

I64 = (-(1 << 63), (1 << 63) - 1)
F32_MAX = 3.4028234663852886e38
F32_TINY = 1.401298464324817e-45
SPECIAL_FLOATS = [math.nan, -0.0, 0.0, math.inf, -math.inf, 1.5, -1.5, 2.0, 0.1]
US_RANGE = (_micros(datetime(1, 1, 1)), _micros(datetime(9999, 12, 31, 23, 59, 59, 999999)))


def _pick(rng: random.Random, pool: Sequence[Any], null_rate: float = 0.12) -> list[Any]:
    return [None if rng.random() < null_rate else rng.choice(pool) for _ in range(N_ROWS)]


def _timestamp_column(
    rng: random.Random, dtype: pa.TimestampType, stored_pool: list[int]
) -> Column:
    stored = _pick(rng, stored_pool)
    if dtype.unit == "ns":  # Spark gets them rounded down to microseconds (before 1970 too)
        spark = [None if n is None else n // 1000 for n in stored]
    else:
        micros_per_unit = {"s": 1_000_000, "ms": 1_000, "us": 1}[dtype.unit]
        spark = [None if n is None else n * micros_per_unit for n in stored]
    arrow = pa.array(stored, pa.int64()).cast(dtype)
    zone = SPARK_UTC if dtype.tz is not None else None
    micros = sorted({m for m in spark if m is not None})
    near = {m + d for m in micros for d in (-1, 0, 1, 500, -999_999)}
    # beyond these a literal has no timestamp[ns] neighbours: rejected (see test_rejected)
    low, high = (I64[0] // 1000 + 1, I64[1] // 1000 - 1) if dtype.unit == "ns" else US_RANGE
    literals = [
        (EPOCH + timedelta(microseconds=m)).replace(tzinfo=zone)
        for m in near
        if max(low, US_RANGE[0]) <= m <= min(high, US_RANGE[1])
    ]
    return Column(arrow, spark, TIMESTAMP, literals)


def _build_columns(seed: int = 7) -> dict[str, Column]:
    rng = random.Random(seed)
    cols: dict[str, Column] = {
        "row": Column(pa.array(range(N_ROWS), pa.int64()), list(range(N_ROWS)))
    }

    def ints(name: str, dtype: pa.DataType, low: int, high: int) -> None:
        pool = [low, high, 0, 1, -1 if low < 0 else 2, *range(max(low, -4), 5)]
        values = _pick(rng, pool)
        cols[name] = Column(pa.array(values, dtype), values, PLAIN, pool)

    ints("i8", pa.int8(), -128, 127)
    ints("i32", pa.int32(), -(1 << 31), (1 << 31) - 1)
    ints("i64", pa.int64(), *I64)
    ints("u32", pa.uint32(), 0, (1 << 32) - 1)
    # Spark reads uint64 as DECIMAL(20, 0): its values and literals are decimals
    u64_pool = [0, 1, 2, 5, 1 << 63, (1 << 64) - 1]
    u64 = _pick(rng, u64_pool)
    u64_spark = [None if v is None else Decimal(v) for v in u64]
    u64_lits = [Decimal(v) for v in u64_pool] + [Decimal("0.5"), Decimal("2.5"), Decimal("5.00")]
    cols["u64"] = Column(pa.array(u64, pa.uint64()), u64_spark, PLAIN, u64_lits)
    ints("a b", pa.int32(), -5, 5)
    ints("MixedCase", pa.int64(), -5, 5)

    f64_pool = [*SPECIAL_FLOATS, 1.7976931348623157e308, 5e-324, -5e-324, 1e308]
    f64 = _pick(rng, f64_pool)
    cols["f64"] = Column(pa.array(f64, pa.float64()), f64, FLOAT, f64_pool)
    f32_pool = [*SPECIAL_FLOATS[:-1], F32_MAX, -F32_MAX, F32_TINY, 0.5]
    f32 = _pick(rng, f32_pool)
    cols["f32"] = Column(pa.array(f32, pa.float32()), f32, FLOAT, f32_pool)
    unicode_f = _pick(rng, SPECIAL_FLOATS)
    cols["ünï"] = Column(pa.array(unicode_f, pa.float64()), unicode_f, FLOAT, SPECIAL_FLOATS)

    dec_pool = [
        Decimal(x) for x in ("0.00", "-0.01", "0.01", "1.50", "-1.50", "9999999.99", "-9999999.99")
    ]
    dec = _pick(rng, dec_pool)
    dec_lits = [*dec_pool, Decimal("1.5"), Decimal("1.505"), Decimal("-1.505"), Decimal("0.001")]
    cols["dec"] = Column(pa.array(dec, pa.decimal128(9, 2)), dec, PLAIN, dec_lits)
    big = "9999999999999999999999999999.9999999999"  # no arithmetic: Decimal rounds to 28 digits
    dec38_pool = [
        Decimal(big),
        Decimal("-" + big),
        Decimal(0),
        Decimal("1E-10"),
        Decimal("-1E-10"),
        Decimal(7),
    ]
    dec38 = _pick(rng, dec38_pool)
    cols["dec38"] = Column(pa.array(dec38, pa.decimal128(38, 10)), dec38, PLAIN, dec38_pool)

    for name, dtype in (("s", pa.string()), ("ls", pa.large_string()), ("select", pa.string())):
        values = _pick(rng, TRICKY)
        cols[name] = Column(pa.array(values, dtype), values, STRING, TRICKY)
    dictionary = _pick(rng, TRICKY)
    cols["dict"] = Column(pa.array(dictionary).dictionary_encode(), dictionary, STRING, TRICKY)
    binary_pool = [b"", b"\x00", b"\xff", b"\x7f", b"ab", b"a", b"\x00\xff", b"'"]
    for name, dtype in (("bin", pa.binary()), ("lbin", pa.large_binary())):
        binary = _pick(rng, binary_pool)
        cols[name] = Column(pa.array(binary, dtype), binary, PLAIN, binary_pool)
    fixed_pool = [b"ab", b"\x00\x00", b"\xff\xff", b"\x00\xff", b"a'", b"\x7f\x80"]
    fixed = _pick(rng, fixed_pool)
    cols["fsb"] = Column(pa.array(fixed, pa.binary(2)), fixed, PLAIN, fixed_pool)
    flags = _pick(rng, [True, False])
    cols["b"] = Column(pa.array(flags, pa.bool_()), flags, PLAIN, [True, False])
    date_pool = [
        date(1, 1, 1),
        date(9999, 12, 31),
        date(1969, 12, 31),
        date(1970, 1, 1),
        date(2024, 2, 29),
    ]
    dates = _pick(rng, date_pool)
    cols["d"] = Column(pa.array(dates, pa.date32()), dates, PLAIN, date_pool)
    # date64 holds milliseconds; Spark sees them rounded down to days (-1 ms is 1969-12-31)
    day = 86_400_000
    ms_before_1970 = [-1, -day - 1, -day, -day + 1, -5 * day - 7, -719_162 * day + 1]  # 0001-01-01
    ms = _pick(rng, [0, 1, day, 19_000 * day + 5, 2_932_896 * day, *ms_before_1970])
    d64 = [None if n is None else date(1970, 1, 1) + timedelta(n // day) for n in ms]
    d64_pool = sorted({d for d in d64 if d is not None} | {date(1969, 12, 26), date(2022, 1, 9)})
    cols["d64"] = Column(pa.array(ms, pa.int64()).cast(pa.date64()), d64, PLAIN, d64_pool)

    us_pool = [*US_RANGE, 0, -1, 1, 1_704_121_200_000_000, 1_704_121_200_000_001]
    cols["ts_utc"] = _timestamp_column(rng, pa.timestamp("us", "UTC"), us_pool)
    cols["ts_ntz"] = _timestamp_column(rng, pa.timestamp("us"), us_pool)
    ns_pool = [-1500, -1000, -999, -1, 0, 1, 999, 1000, 1500, 1_704_121_200_000_000_500, I64[1]]
    ns_pool += [-1001, -2000, -2001, -14_182_939_876_543_211, I64[0] + 1]  # floored, not truncated
    cols["ts_ns"] = _timestamp_column(rng, pa.timestamp("ns", "UTC"), ns_pool)
    ms_pool = [-1, 0, 1, 1_704_121_200_000, 1_704_121_200_001, -62_135_596_800_000]
    cols["ts_ms"] = _timestamp_column(rng, pa.timestamp("ms"), ms_pool)
    s_pool = [-1, 0, 1, 1_704_121_200, 1_704_121_201]
    cols["ts_s_ny"] = _timestamp_column(rng, pa.timestamp("s", "America/New_York"), s_pool)

    _add_nested(rng, cols)
    return cols


def _add_nested(rng: random.Random, cols: dict[str, Column]) -> None:
    x = _pick(rng, [-2, -1, 0, 1, 2])
    y = _pick(rng, TRICKY)
    dotted = _pick(rng, SPECIAL_FLOATS)
    z = _pick(rng, [-1, 0, 1])
    inner_valid = [rng.random() > 0.15 for _ in range(N_ROWS)]
    valid = [rng.random() > 0.15 for _ in range(N_ROWS)]
    inner = pa.StructArray.from_arrays(
        [pa.array(z, pa.int32())], names=["z"], mask=pa.array([not v for v in inner_valid])
    )
    arrow = pa.StructArray.from_arrays(
        [pa.array(x, pa.int64()), pa.array(y, pa.string()), pa.array(dotted, pa.float64()), inner],
        names=["x", "y", "x.y", "inner"],
        mask=pa.array([not v for v in valid]),
    )
    spark = [
        {"x": x[i], "y": y[i], "x.y": dotted[i], "inner": {"z": z[i]} if inner_valid[i] else None}
        if valid[i]
        else None
        for i in range(N_ROWS)
    ]
    cols["st"] = Column(arrow, spark)
    lists = _pick(rng, [[], [1], [1, None], [2, 3]])
    cols["lst"] = Column(pa.array(lists, pa.list_(pa.int64())), lists)


COLUMNS = _build_columns()
TABLE = pa.table({name: c.arrow for name, c in COLUMNS.items()})
ROWS: list[Row] = [{name: c.spark[i] for name, c in COLUMNS.items()} for i in range(N_ROWS)]
NESTED: dict[tuple[str, ...], tuple[Kind, list[Any]]] = {
    ("st", "x"): (PLAIN, [-2, -1, 0, 1, 2, 3]),
    ("st", "y"): (STRING, TRICKY),
    ("st", "x.y"): (FLOAT, SPECIAL_FLOATS),
    ("st", "inner", "z"): (PLAIN, [-1, 0, 1]),
}
KINDS: dict[tuple[str, ...], Kind] = {(n,): c.kind for n, c in COLUMNS.items()}
KINDS.update({p: k for p, (k, _) in NESTED.items()})
LITERALS: dict[tuple[str, ...], list[Any]] = {
    (n,): c.literals for n, c in COLUMNS.items() if c.literals
}
LITERALS.update({p: lits for p, (_, lits) in NESTED.items()})
STRING_PATHS = [p for p, k in KINDS.items() if k is STRING]
NULLABLE_PATHS = [*LITERALS, ("st",), ("st", "inner"), ("lst",)]


@dataclass(frozen=True)
class Variant:
    """One physical layout of TABLE; the answers must not depend on it."""

    name: str
    dataset: lance.LanceDataset
    deleted: frozenset[int] = frozenset()
    per_fragment: bool = False  # also run the predicate on each fragment's own scanner

    def rows(self, predicate: str) -> set[int]:
        if self.per_fragment:
            found: set[int] = set()
            for frag in self.dataset.get_fragments():
                found |= set(frag.to_table(filter=predicate, columns=["row"])["row"].to_pylist())
            return found
        return set(self.dataset.to_table(filter=predicate, columns=["row"])["row"].to_pylist())


INDEXABLE = ["i8", "i32", "i64", "u32", "u64", "f32", "f64", "dec", "s", "ls", "bin", "lbin"]
INDEXABLE += ["fsb", "b", "d", "d64"]
INDEXABLE += ["ts_utc", "ts_ntz", "ts_ns", "ts_ms", "ts_s_ny", "a b", "MixedCase", "select"]


def _write(path: Path, index: Any, extra: dict[str, Any] | None = None) -> lance.LanceDataset:
    ds = lance.write_dataset(TABLE, str(path), max_rows_per_file=50, max_rows_per_group=16)
    for col in INDEXABLE if index else []:
        if index == "BLOOMFILTER" and col in ("dec", "b", "fsb"):
            continue  # not supported by that index kind
        ds.create_scalar_index(col, index)
    for col, kind in (extra or {}).items():
        ds.create_scalar_index(col, kind)
    return ds


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> list[Variant]:
    root = tmp_path_factory.mktemp("filters")
    plain = lance.write_dataset(TABLE, str(root / "plain"))
    btree = _write(root / "btree", "BTREE")
    btree.delete(" OR ".join(f"`row` = {r}" for r in sorted(DELETED)))
    return [
        Variant("plain", plain),
        Variant("btree+deletes", lance.dataset(str(root / "btree")), frozenset(DELETED)),
        Variant("bitmap+ngram", _write(root / "bitmap", "BITMAP", {"s": "NGRAM", "ls": "NGRAM"})),
        Variant(
            "zonemap", _write(root / "zonemap", "ZONEMAP", {"dict": "ZONEMAP"}), per_fragment=True
        ),
        Variant("bloom+inverted", _write(root / "bloom", "BLOOMFILTER", {"s": "INVERTED"})),
    ]


def check(variants: Sequence[Variant], filters: Sequence[Filter]) -> str:
    """Translate, insist everything was accepted, compare every layout with the reference."""
    predicate, rejected = translate_filters(filters, TABLE.schema)
    assert rejected == [], f"unexpectedly rejected: {rejected}"
    assert predicate is not None
    for v in variants:
        expected = spark_rows(filters, ROWS, set(v.deleted))
        got = v.rows(predicate)
        assert got == expected, (
            f"{v.name}: {predicate!r}\n"
            f"  missing {sorted(expected - got)[:10]}\n  extra {sorted(got - expected)[:10]}"
        )
    return predicate


# --- strategies -------------------------------------------------------------------------------


SHORT_TEXT = st.text(st.sampled_from(ALPHABET), max_size=3)


def _literal_strategy(path: tuple[str, ...]) -> st.SearchStrategy[Any]:
    pool = st.sampled_from(LITERALS[path])
    kind = KINDS[path]
    dtype = _arrow_type(path)
    extra: st.SearchStrategy[Any] | None = None
    if path == ("u64",):
        extra = st.decimals(0, (1 << 64) - 1, places=1)
    elif pa.types.is_signed_integer(dtype):
        extra = st.integers(-(1 << (dtype.bit_width - 1)), (1 << (dtype.bit_width - 1)) - 1)
    elif pa.types.is_unsigned_integer(dtype):
        extra = st.integers(0, (1 << dtype.bit_width) - 1)
    elif pa.types.is_float32(dtype):
        extra = st.floats(width=32)
    elif pa.types.is_float64(dtype):
        extra = st.floats()
    elif pa.types.is_decimal(dtype):
        limit = Decimal(10) ** (dtype.precision - dtype.scale) - 1
        extra = st.decimals(-limit, limit, places=dtype.scale + 2)
    elif kind is STRING:
        extra = SHORT_TEXT
    elif pa.types.is_fixed_size_binary(dtype):
        extra = st.binary(min_size=2, max_size=2)
    elif pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        extra = st.binary(max_size=2)
    elif pa.types.is_date32(dtype) or pa.types.is_date64(dtype):
        extra = st.dates()
    elif pa.types.is_timestamp(dtype):
        years = (1678, 2261) if dtype.unit == "ns" else (1, 9999)
        naive = st.datetimes(datetime(years[0], 1, 1), datetime(years[1], 12, 31))
        extra = naive.map(lambda d: d.replace(tzinfo=SPARK_UTC)) if dtype.tz else naive
    return pool if extra is None else st.one_of(pool, pool, extra)


def _arrow_type(path: Sequence[str]) -> pa.DataType:
    dtype = TABLE.schema.field(path[0]).type
    for name in path[1:]:
        dtype = dtype.field(name).type
    return dtype


@st.composite
def leaf_filters(draw: st.DrawFn) -> Filter:
    kind = draw(st.sampled_from(["cmp", "cmp", "eqns", "in", "null", "string"]))
    if kind == "null":
        return draw(st.sampled_from([IsNull, IsNotNull]))(draw(st.sampled_from(NULLABLE_PATHS)))
    if kind == "string":
        path = draw(st.sampled_from(STRING_PATHS))
        cls = draw(st.sampled_from([StringStartsWith, StringEndsWith, StringContains]))
        return cls(path, draw(st.one_of(st.sampled_from(TRICKY), SHORT_TEXT)))
    path = draw(st.sampled_from(sorted(LITERALS)))
    value = _literal_strategy(path)
    if kind == "eqns":
        return EqualNullSafe(path, draw(st.one_of(st.none(), value)))
    if kind == "in":
        values = draw(st.lists(st.one_of(value, value, value, st.none()), min_size=1, max_size=4))
        # pyspark hands over a list; the dataclass says tuple: accept both
        return In(path, draw(st.sampled_from([list, tuple]))(values))
    ops = [EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual]
    return draw(st.sampled_from(ops))(path, draw(value))


filters_strategy = st.recursive(leaf_filters(), lambda child: st.builds(Not, child), max_leaves=1)
SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(st.lists(filters_strategy, min_size=1, max_size=3))
def test_random_filters_match_spark(variants: list[Variant], filters: list[Filter]) -> None:
    check(variants, filters)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(filters_strategy)
def test_each_filter_and_its_negation_match_spark(variants: list[Variant], f: Filter) -> None:
    check(variants, [f])
    check(variants, [Not(f)])


ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)  # no lone surrogates
ODD_NAME = "x -- /* 'y' \"z\" \u2028"
STRING_OPS: dict[type[Filter], Callable[[str, str], bool]] = {
    EqualTo: lambda v, lit: v == lit,
    GreaterThan: lambda v, lit: v.encode() > lit.encode(),
    StringStartsWith: str.startswith,
    StringEndsWith: str.endswith,
    StringContains: lambda v, lit: lit in v,
}


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(ANY_TEXT, min_size=1, max_size=6),
    literal=ANY_TEXT,
    cls=st.sampled_from(sorted(STRING_OPS, key=lambda c: c.__name__)),
)
def test_any_unicode_string_literal(
    tmp_path_factory: pytest.TempPathFactory, data: list[str], literal: str, cls: Any
) -> None:
    table = pa.table({"row": range(len(data)), ODD_NAME: data})
    ds = lance.write_dataset(table, str(tmp_path_factory.mktemp("text") / "t"))
    predicate, rejected = translate_filters([cls((ODD_NAME,), literal)], table.schema)
    assert rejected == []
    expected = [i for i, v in enumerate(data) if STRING_OPS[cls](v, literal)]
    assert sorted(ds.to_table(filter=predicate)["row"].to_pylist()) == expected


# --- targeted cases ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ([EqualTo(("i64",), 1)], "(`i64` = 1)"),
        ([EqualTo(("a b",), 1), IsNull(("select",))], "(`a b` = 1) AND (`select` IS NULL)"),
        ([EqualTo(("st", "x.y"), 1.5)], "(`st`.`x.y` = 1.5)"),
        ([EqualTo(("i64",), I64[0])], "(`i64` = CAST('-9223372036854775808' AS BIGINT))"),
        ([EqualNullSafe(("i8",), None)], "(`i8` IS NULL)"),
        ([EqualNullSafe(("i8",), 3)], "(`i8` IS NOT NULL AND `i8` = 3)"),
        ([in_list(("i8",), [1, None])], "((`i8` IN (1)) OR (CAST(NULL AS BOOLEAN)))"),
        ([in_list(("i8",), [None])], "(CAST(NULL AS BOOLEAN))"),
        ([Not(EqualTo(("b",), True))], "(NOT (`b` = true))"),
        ([EqualTo(("f64",), math.nan)], "(`f64` = CAST('NaN' AS DOUBLE))"),
        ([LessThan(("f64",), -math.inf)], "(`f64` < CAST('-inf' AS DOUBLE))"),
        ([EqualTo(("dec",), Decimal("-0.5"))], "(`dec` = CAST('-0.50' AS DECIMAL(9,2)))"),
        ([EqualTo(("d",), date(1, 2, 3))], "(`d` = DATE '0001-02-03')"),
        ([EqualTo(("bin",), b"\x00\xff")], "(`bin` = X'00ff')"),
        ([StringStartsWith(("s",), "a'%")], "(starts_with(`s`, 'a''%'))"),
        ([StringEndsWith(("s",), "\\")], "(ends_with(`s`, '\\'))"),
        ([StringContains(("s",), "_")], "(contains(`s`, '_'))"),
        (
            [EqualTo(("ts_s_ny",), datetime(2024, 1, 1, 15, tzinfo=SPARK_UTC))],
            "(`ts_s_ny` = arrow_cast(1704121200, 'Timestamp(Second, Some(\"America/New_York\"))'))",
        ),
        (
            [GreaterThan(("ts_ms",), datetime(1970, 1, 1, 0, 0, 0, 1500))],
            "(`ts_ms` > arrow_cast(1, 'Timestamp(Millisecond, None)'))",
        ),
        (  # floored: -1 us covers -1000 ns .. -1 ns
            [EqualTo(("ts_ns",), datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=SPARK_UTC))],
            "(`ts_ns` >= arrow_cast(-1000, 'Timestamp(Nanosecond, Some(\"UTC\"))') AND "
            "`ts_ns` <= arrow_cast(-1, 'Timestamp(Nanosecond, Some(\"UTC\"))'))",
        ),
        (  # floored: 1969-12-31 covers -86400000 ms .. -1 ms
            [EqualTo(("d64",), date(1969, 12, 31))],
            "(`d64` >= arrow_cast(-86400000, 'Date64') AND `d64` <= arrow_cast(-1, 'Date64'))",
        ),
    ],
)
def test_translation_text(filters: list[Filter], expected: str) -> None:
    assert translate_filters(filters, TABLE.schema) == (expected, [])


@pytest.mark.parametrize(
    "f",
    [
        # NaN is equal to itself and above +inf; -0.0 equals 0.0 (Spark's float semantics)
        EqualTo(("f64",), math.nan),
        GreaterThan(("f64",), math.inf),
        LessThan(("f64",), math.nan),
        GreaterThanOrEqual(("f32",), math.nan),
        EqualTo(("f64",), -0.0),
        EqualTo(("f32",), 0.0),
        LessThan(("f64",), 0.0),
        GreaterThan(("f64",), -0.0),
        in_list(("f32",), [math.nan, -0.0]),
        Not(EqualTo(("f64",), math.nan)),
        EqualNullSafe(("st", "x.y"), math.nan),
        # NULL in IN: TRUE on a match, else NULL, so its negation selects nothing
        in_list(("i8",), [1, None]),
        Not(in_list(("i8",), [1, None])),
        Not(in_list(("s",), [None])),
        Not(EqualNullSafe(("i32",), 0)),
        Not(EqualNullSafe(("i32",), None)),
        # extremes and literal types
        EqualTo(("i64",), I64[0]),
        LessThanOrEqual(("i64",), I64[0]),
        GreaterThanOrEqual(("i64",), I64[1]),
        EqualTo(("u32",), (1 << 32) - 1),
        EqualTo(("i8",), -128),
        EqualTo(("dec38",), Decimal("-9999999999999999999999999999.9999999999")),
        EqualTo(("dec38",), Decimal("1E-10")),
        EqualTo(("b",), True),
        Not(EqualTo(("b",), True)),
        GreaterThan(("b",), False),
        EqualTo(("d",), date(1, 1, 1)),
        GreaterThan(("d",), date(1969, 12, 31)),
        LessThan(("bin",), b"\x80"),
        # uint64 is DECIMAL(20, 0) to Spark
        EqualTo(("u64",), Decimal((1 << 64) - 1)),
        LessThan(("u64",), Decimal("0.5")),
        GreaterThan(("u64",), Decimal("18446744073709551614.5")),
        EqualTo(("u64",), Decimal("2.5")),
        EqualTo(("i64",), Decimal("5.00")),  # an exact number is exact whatever its type
        EqualTo(("fsb",), b"\x00\xff"),
        GreaterThan(("fsb",), b"a'"),
        EqualTo(("lbin",), b""),
        StringStartsWith(("dict",), "a"),
        EqualTo(("dict",), "a'b"),
        # date64: milliseconds rounded down to days (-1 ms is 1969-12-31)
        EqualTo(("d64",), date(1969, 12, 31)),
        EqualTo(("d64",), date(1969, 12, 30)),
        GreaterThanOrEqual(("d64",), date(1969, 12, 31)),
        LessThanOrEqual(("d64",), date(1969, 12, 30)),
        EqualTo(("d64",), date(1970, 1, 1)),
        LessThan(("d64",), date(1970, 1, 1)),
        GreaterThan(("d64",), date(1969, 12, 26)),
        # decimals with more digits than the column's scale: never equal, ranges exact
        EqualTo(("dec",), Decimal("1.505")),
        Not(EqualTo(("dec",), Decimal("1.505"))),
        GreaterThan(("dec",), Decimal("1.495")),
        LessThanOrEqual(("dec",), Decimal("-1.505")),
        in_list(("dec",), [Decimal("1.505"), Decimal("1.5")]),
        # strings: quotes, backslashes, LIKE wildcards, NUL, newline, non-ASCII are literal
        *[EqualTo(("s",), s) for s in TRICKY],
        *[StringStartsWith(("s",), s) for s in ("a", "'", "\\", "%", "_", "ü", "a\x00")],
        *[StringEndsWith(("ls",), s) for s in ("b", "''", "\\'", "%", "\n", "😀", "")],
        *[StringContains(("select",), s) for s in ("'", "\\", "%_", "_", "ü", "\x00", "")],
        GreaterThan(("s",), "ü"),  # UTF-8 byte order = code point order, not locale
        LessThan(("s",), "a"),
        EqualTo(("st", "y"), "a'b"),
        # nested fields: a NULL parent makes the child NULL
        EqualTo(("st", "x"), 1),
        Not(EqualTo(("st", "x"), 1)),
        IsNull(("st", "inner", "z")),
        IsNotNull(("st", "inner")),
        IsNull(("st",)),
        IsNull(("lst",)),
        IsNotNull(("lst",)),
    ],
    ids=repr,
)
def test_semantics(variants: list[Variant], f: Filter) -> None:
    check(variants, [f])


@pytest.mark.parametrize("name", ["ts_ns", "d64"])
def test_the_reference_sees_what_the_reader_gives_spark(name: str) -> None:
    # The grid literals of ts_ns / d64 assume the reader's rounding (down, before 1970 too):
    # the reference's view of those columns must be what conform_read_batch hands Spark.
    batch = TABLE.select([name]).combine_chunks().to_batches()[0]
    read = conform_read_batch(batch, arrow_read_schema(batch.schema)).column(0).to_pylist()
    if name == "ts_ns":
        read = [None if v is None else _micros(v) for v in read]
    assert read == COLUMNS[name].spark
    assert any(v is not None and v < (0 if name == "ts_ns" else date(1970, 1, 1)) for v in read)


def _at(micros: int, zone: Any = None) -> datetime:
    return (EPOCH + timedelta(microseconds=micros)).replace(tzinfo=zone)


@pytest.mark.parametrize(
    "f",
    [
        # tz-aware literals compare as instants, whatever the column's zone
        EqualTo(("ts_s_ny",), datetime(2024, 1, 1, 15, tzinfo=SPARK_UTC)),
        EqualTo(("ts_s_ny",), datetime(2024, 1, 1, 10, tzinfo=ZoneInfo("America/New_York"))),
        EqualTo(("ts_utc",), datetime(2024, 1, 1, 20, 30, tzinfo=ZoneInfo("Asia/Kolkata"))),
        GreaterThan(("ts_utc",), datetime(1, 1, 1, tzinfo=SPARK_UTC)),
        EqualTo(("ts_utc",), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=SPARK_UTC)),
        LessThan(("ts_ntz",), datetime(1970, 1, 1)),
        EqualTo(("ts_ntz",), datetime(1969, 12, 31, 23, 59, 59, 999999)),
        # literals between two stored values of a coarse column
        EqualTo(("ts_ms",), _at(1500)),
        Not(EqualTo(("ts_ms",), _at(1500))),
        GreaterThan(("ts_ms",), _at(-500)),
        GreaterThanOrEqual(("ts_ms",), _at(-500)),
        LessThan(("ts_ms",), _at(500)),
        LessThanOrEqual(("ts_ms",), _at(-1500)),
        in_list(("ts_ms",), [_at(1000), _at(1500), None]),
        GreaterThan(("ts_s_ny",), _at(500_000, SPARK_UTC)),
        # nanoseconds are rounded down to microseconds: -999 ns is -1 us, -1001 ns is -2 us
        EqualTo(("ts_ns",), _at(0, SPARK_UTC)),
        EqualTo(("ts_ns",), _at(-2, SPARK_UTC)),
        LessThan(("ts_ns",), _at(-1, SPARK_UTC)),
        GreaterThan(("ts_ns",), _at(-2, SPARK_UTC)),
        EqualTo(("ts_ns",), _at(-1, SPARK_UTC)),
        EqualTo(("ts_ns",), _at(1, SPARK_UTC)),
        GreaterThan(("ts_ns",), _at(0, SPARK_UTC)),
        LessThan(("ts_ns",), _at(0, SPARK_UTC)),
        GreaterThanOrEqual(("ts_ns",), _at(-1, SPARK_UTC)),
        LessThanOrEqual(("ts_ns",), _at(-1, SPARK_UTC)),
        in_list(("ts_ns",), [_at(0, SPARK_UTC), _at(-1, SPARK_UTC)]),
        Not(EqualNullSafe(("ts_ns",), _at(0, SPARK_UTC))),
    ],
    ids=repr,
)
def test_timestamps(variants: list[Variant], f: Filter) -> None:
    check(variants, [f])


class Custom(Filter):
    """A filter class the translator has never heard of."""


@pytest.mark.parametrize(
    "f",
    [
        EqualTo(("nope",), 1),
        EqualTo(("I64",), 1),  # names are case-sensitive; the reader resolves case first
        EqualTo(("st", "nope"), 1),
        EqualTo(("i64", "x"), 1),  # a path through a non-struct
        IsNull(("lst", "element")),
        EqualTo((), 1),
        EqualTo(("lst",), [1, 2]),  # array equality
        EqualTo(("st",), {"x": 1}),  # struct equality
        EqualTo(("st", "inner"), {"z": 1}),
        in_list(("i8",), []),  # Spark's answer depends on a legacy conf
        In(("s",), "ab"),  # type: ignore[arg-type]  # a string is not a list of values
        EqualTo(("i8",), None),
        GreaterThan(("i8",), None),
        EqualTo(("i8",), 128),  # out of the column's range
        LessThan(("u32",), -1),
        EqualTo(("i64",), 1 << 63),
        EqualTo(("i64",), 1.0),  # Python type does not match the column
        EqualTo(("i64",), True),
        EqualTo(("f64",), 1),
        EqualTo(("f32",), 0.1),  # not a float32 value
        EqualTo(("f32",), 1e39),
        EqualTo(("dec",), 1.5),
        EqualTo(("dec",), Decimal("NaN")),
        EqualTo(("dec",), Decimal("1E+99999999")),
        EqualTo(("dec",), Decimal("100000000")),  # beyond decimal(9,2)
        EqualTo(("s",), b"a"),
        EqualTo(("s",), "\ud800"),  # a lone surrogate is no Spark string
        EqualTo(("bin",), "a"),
        EqualTo(("fsb",), b"abc"),  # Lance cannot convert it to fixed_size_binary[2]
        LessThan(("fsb",), b"a"),
        EqualTo(("u64",), Decimal("-1")),  # out of range
        GreaterThanOrEqual(("u64",), Decimal("18446744073709551615.5")),
        EqualTo(("u64",), 1.0),
        EqualTo(("b",), 1),
        EqualTo(("d",), datetime(2024, 1, 1)),  # a datetime is not a date
        EqualTo(("d",), "2024-01-01"),
        EqualTo(("ts_utc",), datetime(2024, 1, 1)),  # naive literal, zoned column
        EqualTo(("ts_ntz",), datetime(2024, 1, 1, tzinfo=SPARK_UTC)),  # and the reverse
        EqualTo(("ts_ns",), datetime(1600, 1, 1, tzinfo=SPARK_UTC)),  # beyond timestamp[ns]
        EqualTo(("ts_ms",), date(2024, 1, 1)),
        StringStartsWith(("i64",), "1"),
        StringContains(("bin",), "a"),
        StringEndsWith(("s",), None),  # type: ignore[arg-type]
        Not(EqualTo(("nope",), 1)),
        Not(Not(in_list(("i8",), []))),
        in_list(("i8",), [1, 300]),  # 300 does not fit int8 (was rendered as `None`)
        Custom(),
    ],
    ids=repr,
)
def test_rejected(f: Filter) -> None:
    assert translate_filters([f], TABLE.schema) == (None, [f])


def test_rejected_are_the_same_objects_in_order() -> None:
    a, b, c, d = EqualTo(("nope",), 1), EqualTo(("i8",), 1), in_list(("i8",), []), IsNull(("s",))
    predicate, rejected = translate_filters([a, b, c, d], TABLE.schema)
    assert predicate == "(`i8` = 1) AND (`s` IS NULL)"
    assert len(rejected) == 2
    assert rejected[0] is a
    assert rejected[1] is c
    assert translate_filters([], TABLE.schema) == (None, [])


# --- types and names the main table does not hold ------------------------------------------


def test_unsupported_column_types_reject_comparisons_but_not_null_checks() -> None:
    values: dict[str, tuple[pa.DataType, Any]] = {
        "h": (pa.float16(), 1.0),
        "di": (pa.dictionary(pa.int32(), pa.int64()), 1),
        "fsl": (pa.list_(pa.int64(), 2), [1, 2]),
        "ll": (pa.large_list(pa.int64()), [1]),
        "m": (pa.map_(pa.string(), pa.int64()), {"a": 1}),
        "d256": (pa.decimal256(40, 2), Decimal("1.00")),
        "d32": (pa.decimal32(5, 2), Decimal("1.00")),
        "t": (pa.time64("us"), time(1, 2)),
        "dur": (pa.duration("us"), timedelta(seconds=1)),
        "bv": (pa.binary_view(), b"a"),
        "j": (pa.json_(), '{"a": 1}'),
    }
    schema = pa.schema([(name, dtype) for name, (dtype, _) in values.items()])
    for name, (_, value) in values.items():
        f = EqualTo((name,), value)
        assert translate_filters([f], schema) == (None, [f])
        assert translate_filters([IsNull((name,))], schema) == (f"(`{name}` IS NULL)", [])


def test_fixed_size_list_null_checks(tmp_path: Path) -> None:
    table = pa.table(
        {"row": [0, 1, 2], "fsl": pa.array([[1, 2], None, [3, None]], pa.list_(pa.int64(), 2))}
    )
    ds = lance.write_dataset(table, str(tmp_path / "t"))
    predicate, _ = translate_filters([IsNull(("fsl",))], table.schema)
    assert ds.to_table(filter=predicate)["row"].to_pylist() == [1]


AWKWARD_NAMES = [
    "a b",
    "select",
    "order",
    "MixedCase",
    "ünï",
    "1num",
    'dq"',
    "it's",
    "tab\tname",
    "new\nline",
    "back\\slash",
    "%_",
]


def test_awkward_column_names(tmp_path: Path) -> None:
    table = pa.table({name: pa.array([i, 100 + i]) for i, name in enumerate(AWKWARD_NAMES)})
    table = table.append_column(
        "s", pa.StructArray.from_arrays([pa.array([1, 2])] * 2, names=["x.y", "Select Me"])
    )
    ds = lance.write_dataset(table, str(tmp_path / "names"))
    for i, name in enumerate(AWKWARD_NAMES):
        predicate, rejected = translate_filters([EqualTo((name,), 100 + i)], table.schema)
        assert rejected == []
        assert ds.to_table(filter=predicate)[name].to_pylist() == [100 + i]
    for path in (("s", "x.y"), ("s", "Select Me")):
        predicate, _ = translate_filters([GreaterThan(path, 1)], table.schema)
        assert ds.to_table(filter=predicate)["s"].to_pylist() == [{"x.y": 2, "Select Me": 2}]


def test_quote_column() -> None:
    assert quote_column(["a"]) == "`a`"
    assert quote_column(("s", "x.y")) == "`s`.`x.y`"
    assert quote_column(("select", "a b")) == "`select`.`a b`"
    assert quote_column(("s", "we`ird")) == "`s`.`we``ird`"  # nested: doubled
    with pytest.raises(UnquotableColumnError, match="back`tick"):
        quote_column(("back`tick",))
    for bad in ((), ("",), ("s", ""), ("a\x00b",), ("s", "a\x00b")):
        with pytest.raises(UnquotableColumnError):
            quote_column(bad)


def test_nested_backtick_names_are_quoted_by_doubling(tmp_path: Path) -> None:
    inner = pa.StructArray.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["we`ird", "`"])
    table = pa.table({"s": inner})
    ds = lance.write_dataset(table, str(tmp_path / "nested"))
    for path, value in ((("s", "we`ird"), 2), (("s", "`"), 3)):
        predicate, rejected = translate_filters([EqualTo(path, value)], table.schema)
        assert rejected == [] and predicate is not None
        assert ds.to_table(filter=predicate).num_rows == 1


# Any name Arrow can hold (valid UTF-8): control characters, quotes, backticks, dots, commas.
_ANY_NAME = st.text(st.characters(codec="utf-8"), min_size=0, max_size=12) | st.sampled_from(
    ["`", "``", "a`b", "a.b", ".", ",", " ", "\x00", "select", "_rowid", "1x", '"', "'"]
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(name=_ANY_NAME)
def test_a_filter_on_any_name_is_rejected_or_selects_exactly_the_right_rows(name: str) -> None:
    """Top-level and nested: the rendered predicate either is rejected (Spark then filters)
    or, evaluated by Lance, selects exactly the rows Spark would; and a name the write-side
    check accepts is one Lance can store, read back and filter on."""
    import tempfile

    from lance_spark.source.types import check_column_names

    values = pa.array([1, 2, None, 2], pa.int64())
    other = "other" if name.lower() != "other" else "other2"
    struct = "s" if name.lower() != "s" else "t"
    nested = pa.StructArray.from_arrays([values, pa.array([0, 0, 0, 0])], names=[name, "k"])
    if name.lower() == "k":
        nested = pa.StructArray.from_arrays([values], names=[name])
    top = pa.table({other: pa.array([0, 1, 2, 3]), name: values, struct: nested})
    nested_only = pa.table({other: pa.array([0, 1, 2, 3]), struct: nested})
    try:
        check_column_names(top.schema)
        accepted = True
    except SchemaMismatchError:
        accepted = False
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ds = lance.write_dataset(top, f"{tmp}/top")
            read = ds.to_table()
        except (OSError, ValueError):
            assert not accepted, f"{name!r} passes the write check but Lance cannot store it"
            ds, read = None, None
        if accepted:
            assert ds is not None and read is not None
            assert read.column_names == [other, name, struct]
            assert ds.to_table(columns=[name])[name].to_pylist() == values.to_pylist()
        cases: list[tuple[lance.LanceDataset, tuple[str, ...]]] = []
        if ds is not None:
            cases.append((ds, (name,)))
        if name and "\x00" not in name:  # Lance refuses such struct fields when writing
            cases.append((lance.write_dataset(nested_only, f"{tmp}/nested"), (struct, name)))
        for dataset, path in cases:
            for f, expected in (
                (EqualTo(path, 2), [1, 3]),
                (IsNull(path), [2]),
                (Not(GreaterThan(path, 1)), [0]),
            ):
                predicate, rejected = translate_filters([f], dataset.schema)
                if rejected:
                    assert predicate is None and rejected == [f]
                    continue
                assert predicate is not None
                got = dataset.to_table(columns=[other], filter=predicate)[other].to_pylist()
                assert sorted(got) == expected, (path, predicate)
            if len(path) == 1 and accepted:
                # What the write check accepts, the filters can reference.
                assert translate_filters([IsNull(path)], dataset.schema)[1] == []


def test_backtick_names_are_rejected_because_lance_cannot_reference_them(tmp_path: Path) -> None:
    table = pa.table({"back`tick": [1, 2]})
    ds = lance.write_dataset(table, str(tmp_path / "bt"))
    f = EqualTo(("back`tick",), 1)
    assert translate_filters([f], table.schema) == (None, [f])
    with pytest.raises((OSError, ValueError)):  # the Lance fact behind the rejection
        ds.to_table(filter="`back``tick` = 1")


def test_duplicate_nested_names_are_ambiguous() -> None:
    inner = pa.struct([("a", pa.int64()), ("a", pa.int64())])
    schema = pa.schema([("s", inner)])
    f = EqualTo(("s", "a"), 1)
    assert translate_filters([f], schema) == (None, [f])


# --- the Lance SQL facts the translation relies on ------------------------------------------


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> lance.LanceDataset:
    table = pa.table(
        {
            "s": ["a\\b", "a'b", "a%b", "aXb", "Ab"],
            "i": pa.array([1, 2, 3, 4, 5], pa.int8()),
            "dec": pa.array(
                [Decimal(x) for x in ("1.50", "1.51", "0", "2", "3")], pa.decimal128(5, 2)
            ),
            "ts": pa.array([0, 1, 2, 3, 4], pa.int64()).cast(pa.timestamp("s", "America/New_York")),
        }
    )
    return lance.write_dataset(table, str(tmp_path_factory.mktemp("facts") / "t"))


def _select(ds: lance.LanceDataset, predicate: str) -> list[Any]:
    return list(ds.to_table(filter=predicate)["s"].to_pylist())


def test_fact_backslash_is_literal_and_quote_is_doubled(facts: lance.LanceDataset) -> None:
    assert _select(facts, "s = 'a\\b'") == ["a\\b"]
    assert _select(facts, "s = 'a''b'") == ["a'b"]


def test_fact_like_escape_is_backslash_only(facts: lance.LanceDataset) -> None:
    # why the string filters use starts_with / ends_with / contains instead of LIKE
    assert _select(facts, "s LIKE 'a\\%b'") == ["a%b"]
    with pytest.raises((OSError, ValueError)):
        _select(facts, "s LIKE 'a!%b' ESCAPE '!'")


def test_fact_literals_must_fit_the_column_type(facts: lance.LanceDataset) -> None:
    # why literals are rendered in the column's own type
    for predicate in ("i = 1.0", "i = 300", "dec = 1.5"):
        with pytest.raises((OSError, ValueError)):
            _select(facts, predicate)
    assert _select(facts, "dec = CAST('1.5' AS DECIMAL(5,2))") == ["a\\b"]


def test_fact_timestamp_literal_is_read_in_the_column_zone(facts: lance.LanceDataset) -> None:
    # why timestamps are rendered as arrow_cast(<int>, <exact type>)
    assert _select(facts, "ts = TIMESTAMP '1970-01-01 00:00:01'") == []
    typed = "ts = arrow_cast(1, 'Timestamp(Second, Some(\"America/New_York\"))')"
    assert _select(facts, typed) == ["a'b"]


def test_fact_unquoted_names_fold_case_but_backticks_do_not(facts: lance.LanceDataset) -> None:
    assert _select(facts, "S = 'Ab'") == ["Ab"]  # why every name is quoted
    assert _select(facts, "`s` = 'Ab'") == ["Ab"]
    with pytest.raises((OSError, ValueError)):
        _select(facts, "`S` = 'Ab'")


def test_fact_null_in_a_negated_in_list_is_lost_next_to_another_in_list(
    facts: lance.LanceDataset,
) -> None:
    # why In(.., [.., None]) puts its NULL outside the list: for i = 1, NOT (i IN (2, NULL)) is
    # NULL, so SQL (and Spark) select nothing here; Lance merges the lists and drops the NULL.
    assert _select(facts, "(i IN (1)) AND (NOT (i IN (2, NULL)))") == ["a\\b"]
    assert _select(facts, "(i IN (1)) AND (NOT ((i IN (2)) OR (CAST(NULL AS BOOLEAN))))") == []


# --- in_list_predicate: a MERGE source's keys as one IN list -------------------------------

KEY_TYPES = {
    "i64": (pa.int64(), st.integers(-(1 << 63), (1 << 63) - 1)),
    "i8": (pa.int8(), st.integers(-128, 127)),
    "u32": (pa.uint32(), st.integers(0, (1 << 32) - 1)),
    "s": (pa.string(), ANY_TEXT),
    "ls": (pa.large_string(), ANY_TEXT),
    "d": (pa.date32(), st.dates()),
}


@settings(max_examples=40, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(KEY_TYPES)))
def test_in_list_predicate_selects_exactly_the_keys(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, name: str
) -> None:
    dtype, values = KEY_TYPES[name]
    stored = data.draw(st.lists(st.one_of(values, st.none()), min_size=1, max_size=8))
    keys = data.draw(st.lists(st.one_of(st.sampled_from(stored), values, st.none()), max_size=6))
    table = pa.table({"row": range(len(stored)), "k": pa.array(stored, dtype)})
    ds = lance.write_dataset(table, str(tmp_path_factory.mktemp("keys") / "t"))
    predicate = in_list_predicate(("k",), pa.array(keys, dtype), table.schema)
    wanted = {k for k in keys if k is not None}
    if not wanted:
        assert predicate is None  # nothing can match: the caller does not prune
        return
    assert predicate is not None
    expected = [i for i, v in enumerate(stored) if v is not None and v in wanted]
    assert sorted(ds.to_table(filter=predicate)["row"].to_pylist()) == expected


def test_in_list_predicate_text_and_rejections() -> None:
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("i8", pa.int8())])
    assert in_list_predicate(("id",), pa.array([3, None, 1]), schema) == "`id` IN (3,1)"
    assert in_list_predicate(("s",), pa.array(["a'b", "c"]), schema) == "`s` IN ('a''b','c')"
    # i64::MIN needs a CAST: the generic translation renders it.
    assert in_list_predicate(("id",), pa.array([-(1 << 63)]), schema) == (
        "(`id` IN (CAST('-9223372036854775808' AS BIGINT)))"
    )
    # Keys of another type go through the exact translation, which rejects what cannot fit.
    assert in_list_predicate(("i8",), pa.array([1, 3]), schema) == "(`i8` IN (1, 3))"
    assert in_list_predicate(("i8",), pa.array([1, 300]), schema) is None
    assert in_list_predicate(("nope",), pa.array([1]), schema) is None
    assert in_list_predicate(("id",), pa.array([None], pa.int64()), schema) is None
