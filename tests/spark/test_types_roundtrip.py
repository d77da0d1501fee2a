"""Every type of the type map, both ways: pylance -> Spark, Spark -> pylance, and back.

Expected Spark and Arrow schemas are written out here, never computed with lance_spark.source.types.
Values are compared after turning both sides into plain Python values:

* Arrow (``to_pylist()``): uint64 -> Decimal, extension uuid -> its 16 bytes, maps -> dicts,
  timestamps -> whole microseconds rounded down (what is left after dropping the digits
  below a microsecond), aware ones in UTC;
* Spark (``collect()``): Rows -> dicts; TimestampType values come back as naive datetimes in
  the driver's *local* zone (``datetime.fromtimestamp``, not the session time zone), so they
  are made aware with ``astimezone`` before comparing; the instants of the top-level
  TimestampType columns are also checked zone-free with ``unix_micros``.

Floats compare bit-exactly in sign (-0.0) and NaN equals NaN; scalar types must match exactly
(``True`` is not ``1``, a ``date`` is not a ``datetime``).
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
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
)

from lance_spark import LanceTable

pytestmark = pytest.mark.spark

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)
NAN, INF = float("nan"), float("inf")
F32_MAX = 3.4028234663852886e38  # exactly representable in float32
F32_TINY = 1.401298464324817e-45  # the smallest float32 subnormal
DAY_TO_SECOND = DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)


# --------------------------------------------------------------------------------------------
# Plain-value normalisation and comparison
# --------------------------------------------------------------------------------------------


def _epoch_micros(v: Any) -> int:
    """Microseconds since the epoch (wall clock for naive values), rounded down."""
    if hasattr(v, "nanosecond"):  # pandas.Timestamp, what to_pylist() gives for unit ns
        return int(v.value) // 1000
    base = EPOCH_UTC if v.tzinfo is not None else EPOCH_NAIVE
    return (v - base) // timedelta(microseconds=1)


def _from_arrow(v: Any, t: pa.DataType) -> Any:
    """A value of ``to_pylist()`` as Spark should hand it over."""
    if v is None:
        return None
    if isinstance(t, pa.BaseExtensionType):
        return _from_arrow(v.bytes if isinstance(v, uuid.UUID) else v, t.storage_type)
    if pa.types.is_dictionary(t):
        return _from_arrow(v, t.value_type)
    if pa.types.is_map(t):
        return {k: _from_arrow(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _from_arrow(v[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_from_arrow(x, t.value_type) for x in v]
    if pa.types.is_uint64(t):
        return Decimal(v)
    if pa.types.is_timestamp(t):
        us = timedelta(microseconds=_epoch_micros(v))
        return EPOCH_UTC + us if t.tz is not None else EPOCH_NAIVE + us
    return v


def _from_spark(v: Any, t: DataType) -> Any:
    """A value of ``collect()`` in the form of :func:`_from_arrow`."""
    if v is None:
        return None
    if isinstance(t, StructType):
        return {f.name: _from_spark(v[f.name], f.dataType) for f in t.fields}
    if isinstance(t, ArrayType):
        return [_from_spark(x, t.elementType) for x in v]
    if isinstance(t, MapType):
        return {_from_spark(k, t.keyType): _from_spark(x, t.valueType) for k, x in v.items()}
    if isinstance(t, TimestampType):
        return v.astimezone(UTC)  # naive = local time of this process (pyspark's fromInternal)
    return v


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _assert_columns_equal(got: dict[str, list[Any]], want: dict[str, list[Any]]) -> None:
    assert list(got) == list(want)
    bad = [
        f"{name}: got {got[name]!r}, want {want[name]!r}"
        for name in want
        if not _same(got[name], want[name])
    ]
    assert not bad, "\n".join(bad)


def _assert_schema(got: StructType, want: StructType) -> None:
    """Equal types, names and nullability (field metadata, where the connector keeps the
    table uri, is ignored)."""
    plain = StructType([StructField(f.name, f.dataType, f.nullable) for f in got.fields])
    bad = [f"{g!r} != {w!r}" for g, w in zip(plain.fields, want.fields, strict=False) if g != w]
    assert plain.names == want.names and not bad, "\n".join(bad) or f"{plain.names}"


def _arrow_columns(table: pa.Table, key: str = "id") -> dict[str, list[Any]]:
    table = table.sort_by(key)
    return {
        f.name: [_from_arrow(v, f.type) for v in table.column(f.name).to_pylist()]
        for f in table.schema
    }


def _spark_columns(rows: list[Any], schema: StructType, key: str = "id") -> dict[str, list[Any]]:
    rows = sorted(rows, key=lambda r: r[key])
    return {f.name: [_from_spark(r[f.name], f.dataType) for r in rows] for f in schema.fields}


# --------------------------------------------------------------------------------------------
# 1. pylance -> Spark
# --------------------------------------------------------------------------------------------

TS_NS = [1_704_164_645_678_912_345, -14_182_939_876_544_000, 0, None]  # 2024-01-02, 1969-07-20
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def _timestamps(unit: str, tz: str | None) -> pa.Array:
    values = [None if v is None else v // UNIT_NS[unit] for v in TS_NS]
    return pa.array(values, pa.timestamp(unit, tz=tz))


def _uuids(*ints: int | None) -> pa.Array:
    storage = pa.array([None if i is None else uuid.UUID(int=i).bytes for i in ints], pa.binary(16))
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


# (column, Arrow values, the Spark type the column must read as); row 3 is null everywhere.
ARROW_COLUMNS: list[tuple[str, pa.Array, DataType]] = [
    ("id", pa.array([0, 1, 2, 3], pa.int64()), LongType()),
    ("bool", pa.array([True, False, True, None]), BooleanType()),
    ("i8", pa.array([-128, 127, 0, None], pa.int8()), ByteType()),
    ("i16", pa.array([-(2**15), 2**15 - 1, 0, None], pa.int16()), ShortType()),
    ("i32", pa.array([-(2**31), 2**31 - 1, 0, None], pa.int32()), IntegerType()),
    ("i64", pa.array([-(2**63), 2**63 - 1, 0, None], pa.int64()), LongType()),
    ("u8", pa.array([2**8 - 1, 0, 1, None], pa.uint8()), ShortType()),
    ("u16", pa.array([2**16 - 1, 0, 1, None], pa.uint16()), IntegerType()),
    ("u32", pa.array([2**32 - 1, 0, 1, None], pa.uint32()), LongType()),
    ("u64", pa.array([2**64 - 1, 0, 2**63, None], pa.uint64()), DecimalType(20, 0)),
    ("f16", pa.array([NAN, INF, -0.0, None], pa.float16()), FloatType()),
    ("f16b", pa.array([65504.0, -INF, 0.000060975552, None], pa.float16()), FloatType()),
    ("f32", pa.array([F32_MAX, F32_TINY, NAN, None], pa.float32()), FloatType()),
    ("f64", pa.array([NAN, -INF, -0.0, None], pa.float64()), DoubleType()),
    (
        "dec128",
        pa.array(
            [
                Decimal("9999999999999999999999999999.9999999999"),
                Decimal("-1E-10"),
                Decimal(0),
                None,
            ],
            pa.decimal128(38, 10),
        ),
        DecimalType(38, 10),
    ),
    (
        "dec256",
        pa.array(
            [
                Decimal("-999999999999999999999999999999999999.99"),
                Decimal("1.50"),
                Decimal(0),
                None,
            ],
            pa.decimal256(38, 2),
        ),
        DecimalType(38, 2),
    ),
    ("str", pa.array(["héllo ☃", "", "a\x00b", None], pa.string()), StringType()),
    ("lstr", pa.array(["ü", "", "x" * 300, None], pa.large_string()), StringType()),
    ("bin", pa.array([b"\x00\xff", b"", b"x", None], pa.binary()), BinaryType()),
    ("lbin", pa.array([b"", b"\xfe" * 40, b"y", None], pa.large_binary()), BinaryType()),
    ("fsb", pa.array([b"abc", b"\x00\x01\x02", b"xyz", None], pa.binary(3)), BinaryType()),
    (
        "d32",
        pa.array([date(1, 1, 1), date(9999, 12, 31), date(1969, 12, 31), None], pa.date32()),
        DateType(),
    ),
    (
        "d64",
        pa.array([date(1970, 1, 1), date(2262, 4, 11), date(1900, 3, 1), None], pa.date64()),
        DateType(),
    ),
    *(
        (f"ts_{unit}_{label}", _timestamps(unit, tz), TimestampType())
        for unit in UNIT_NS
        for label, tz in (("utc", "UTC"), ("tokyo", "Asia/Tokyo"))
    ),
    *((f"ntz_{unit}", _timestamps(unit, None), TimestampNTZType()) for unit in UNIT_NS),
    ("t32_s", pa.array([0, 86_399, 43_201, None], pa.time32("s")), TimeType(0)),
    ("t32_ms", pa.array([86_399_999, 0, 1, None], pa.time32("ms")), TimeType(3)),
    ("t64_us", pa.array([86_399_999_999, 0, 1, None], pa.time64("us")), TimeType(6)),
    (
        "t64_ns",
        pa.array([86_399_999_999_999, 1, 3_723_004_005_006, None], pa.time64("ns")),
        TimeType(9),
    ),
    ("dur_s", pa.array([172_805, -1, 0, None], pa.duration("s")), DAY_TO_SECOND),
    ("dur_ms", pa.array([-1_500, 86_400_000 * 3650, 1, None], pa.duration("ms")), DAY_TO_SECOND),
    ("dur_us", pa.array([7, -1, 0, None], pa.duration("us")), DAY_TO_SECOND),
    (
        "lst",
        pa.array([[1, None, 3], [], [2**31 - 1], None], pa.list_(pa.int32())),
        ArrayType(IntegerType(), True),
    ),
    (
        "llst",
        pa.array([["a", None], [], ["b"], None], pa.large_list(pa.string())),
        ArrayType(StringType(), True),
    ),
    (
        "vec",
        pa.array(
            [[1.0, None, 3.0, 4.5], [0.0, -0.0, NAN, 0.001], [INF, -INF, 1.0, 2.0], None],
            pa.list_(pa.float32(), 4),
        ),
        ArrayType(FloatType(), True),
    ),
    (
        "st",
        pa.array(
            [
                {"a": 1, "inner": {"xs": [1, 2], "s": "x"}},
                {"a": None, "inner": None},
                {"a": 3, "inner": {"xs": None, "s": None}},
                None,
            ],
            pa.struct(
                [
                    ("a", pa.int32()),
                    ("inner", pa.struct([("xs", pa.list_(pa.int64())), ("s", pa.string())])),
                ]
            ),
        ),
        StructType(
            [
                StructField("a", IntegerType(), True),
                StructField(
                    "inner",
                    StructType(
                        [
                            StructField("xs", ArrayType(LongType(), True), True),
                            StructField("s", StringType(), True),
                        ]
                    ),
                    True,
                ),
            ]
        ),
    ),
    (
        "m",
        pa.array(
            [[("k", 1), ("j", None)], [], [("z", -(2**63))], None],
            pa.map_(pa.string(), pa.int64()),
        ),
        MapType(StringType(), LongType(), True),
    ),
    (
        "dict",
        pa.array(["red", "blue", "red", None]).dictionary_encode(),
        StringType(),
    ),
    ("nul", pa.nulls(4), NullType()),
    ("json", pa.array(['{"a":1}', "[1,2]", '"s"', None], pa.json_()), StringType()),
    ("uuid", _uuids(1, 2**128 - 1, 0, None), BinaryType()),
]


def test_every_arrow_type_reads_into_spark(spark: SparkSession, table_uri: str) -> None:
    table = pa.table({name: values for name, values, _ in ARROW_COLUMNS})
    assert table.schema.field("dict").type == pa.dictionary(pa.int32(), pa.string())
    lance.write_dataset(table, table_uri)

    df = spark.read.format("lance").load(table_uri)
    expected_schema = StructType([StructField(n, t, True) for n, _, t in ARROW_COLUMNS])
    _assert_schema(df.schema, expected_schema)

    tz_columns = [n for n, _, t in ARROW_COLUMNS if isinstance(t, TimestampType)]
    micros = [F.unix_micros(c).alias(f"{c}__micros") for c in tz_columns]
    rows = df.select("*", *micros).collect()  # the one Spark action of this test

    want = _arrow_columns(table)
    _assert_columns_equal(_spark_columns(rows, df.schema), want)
    # Instants of the TimestampType columns, without any time zone in between.
    got_micros = {
        c: [r[f"{c}__micros"] for r in sorted(rows, key=lambda r: r.id)] for c in tz_columns
    }
    want_micros = {
        c: [None if v is None else _epoch_micros(v) for v in want[c]] for c in tz_columns
    }
    assert got_micros == want_micros
    # A few documented conversions, spelled out.
    by_id = {r.id: r for r in rows}
    assert by_id[0].u64 == Decimal(18446744073709551615) and by_id[0].u32 == 4294967295
    assert by_id[0].u8 == 255 and by_id[0].u16 == 65535
    assert math.isnan(by_id[0].f16) and by_id[1].f16 == INF
    assert math.copysign(1.0, by_id[2].f16) == -1.0
    assert by_id[0].ts_ns_utc__micros == 1_704_164_645_678_912  # ns digits dropped
    assert by_id[0].ntz_ns == datetime(2024, 1, 2, 3, 4, 5, 678_912)
    assert by_id[1].ntz_s == datetime(1969, 7, 20, 20, 17, 40)
    assert by_id[0].m == {"k": 1, "j": None}
    assert by_id[1].st.asDict(recursive=True) == {"a": None, "inner": None}
    assert by_id[3].st is None and by_id[3].nul is None


def test_nanosecond_timestamps_before_1970_drop_only_the_nanoseconds(
    spark: SparkSession, table_uri: str
) -> None:
    ns = [-1, -86_400 * 10**9 - 1_001, 1_999]  # 1969-12-31 23:59:59.999999999, ...
    table = pa.table(
        {
            "id": pa.array([0, 1, 2], pa.int64()),
            "ts": pa.array(ns, pa.timestamp("ns", tz="UTC")),
            "ntz": pa.array(ns, pa.timestamp("ns")),
        }
    )
    lance.write_dataset(table, table_uri)
    df = spark.read.format("lance").load(table_uri)
    rows = df.collect()
    got = _spark_columns(rows, df.schema)
    assert got["ntz"][0] == datetime(1969, 12, 31, 23, 59, 59, 999_999)
    _assert_columns_equal(got, _arrow_columns(table))


# --------------------------------------------------------------------------------------------
# 2 + 3. Spark -> pylance -> Spark
# --------------------------------------------------------------------------------------------

SPARK_SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("by", ByteType()),
        StructField("sh", ShortType()),
        StructField("lo", LongType()),
        StructField("fl", FloatType()),
        StructField("do", DoubleType()),
        StructField("dec38", DecimalType(38, 10)),
        StructField("dec10", DecimalType(10, 2)),
        StructField("s", StringType()),
        StructField("bi", BinaryType()),
        StructField("bo", BooleanType()),
        StructField("da", DateType()),
        StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()),
        StructField("arr", ArrayType(IntegerType())),
        StructField("vec", ArrayType(FloatType())),
        StructField("m", MapType(StringType(), LongType())),
        StructField(
            "st",
            StructType(
                [
                    StructField("x", IntegerType()),
                    StructField(
                        "inner",
                        StructType(
                            [
                                StructField("tags", ArrayType(StringType())),
                                StructField("at", TimestampType()),
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)
SPARK_ROWS = [
    (
        1,
        -128,
        -(2**15),
        -(2**63),
        1.5,
        NAN,
        Decimal("1234567890123456789012345678.0123456789"),
        Decimal("-12345678.99"),
        "héllo",
        b"\x00\xff",
        True,
        date(1, 1, 1),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999),
        [1, None, 3],
        [1.0, 2.0, 3.0, 4.0],
        {"a": 1, "b": None},
        (7, (["t", None], datetime(2024, 2, 29, 12, 0, tzinfo=UTC))),
    ),
    (
        2,
        127,
        2**15 - 1,
        2**63 - 1,
        -INF,
        -0.0,
        Decimal("-0.0000000001"),
        Decimal("0.01"),
        "",
        b"",
        False,
        date(9999, 12, 31),
        datetime(2024, 6, 1, 12, 30, 0, 123_456, tzinfo=UTC),
        datetime(1970, 1, 1),
        [],
        [NAN, -0.0, INF, 0.001],
        {},
        (None, None),
    ),
    (3, *([None] * 17)),
]
# The Arrow schema the connector gives a table it creates from SPARK_SCHEMA.
LANCE_SCHEMA = pa.schema(
    [
        ("id", pa.int32()),
        ("by", pa.int8()),
        ("sh", pa.int16()),
        ("lo", pa.int64()),
        ("fl", pa.float32()),
        ("do", pa.float64()),
        ("dec38", pa.decimal128(38, 10)),
        ("dec10", pa.decimal128(10, 2)),
        ("s", pa.string()),
        ("bi", pa.binary()),
        ("bo", pa.bool_()),
        ("da", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("arr", pa.list_(pa.field("element", pa.int32()))),
        ("vec", pa.list_(pa.field("item", pa.float32()), 4)),
        ("m", pa.map_(pa.string(), pa.int64())),
        (
            "st",
            pa.struct(
                [
                    ("x", pa.int32()),
                    (
                        "inner",
                        pa.struct(
                            [
                                ("tags", pa.list_(pa.field("element", pa.string()))),
                                ("at", pa.timestamp("us", tz="UTC")),
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)


def _spark_frame(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(SPARK_ROWS, SPARK_SCHEMA)


def _check_spark_to_lance_and_back(spark: SparkSession, df: DataFrame, uri: str) -> None:
    rows = df.collect()
    df.write.format("lance").option("vec.arrow.fixed-size-list.size", "4").mode("append").save(uri)
    ds = lance.dataset(uri)
    want_schema = pa.schema([LANCE_SCHEMA.field(n) for n in df.columns])
    assert ds.schema.equals(want_schema), f"{ds.schema}\n!=\n{want_schema}"
    assert all(f.nullable for f in ds.schema)
    assert ds.schema.field("vec").type == pa.list_(pa.float32(), 4)
    assert ds.schema.field("ts").type.tz == "UTC"
    want = _spark_columns(rows, df.schema)
    _assert_columns_equal(_arrow_columns(ds.to_table()), want)

    # 3. and back through Spark: same schema, same rows.
    back = spark.read.format("lance").load(uri)
    _assert_schema(back.schema, df.schema)
    _assert_columns_equal(_spark_columns(back.collect(), back.schema), want)


def test_every_spark_type_writes_to_lance_and_reads_back(
    spark: SparkSession, table_uri: str
) -> None:
    _check_spark_to_lance_and_back(spark, _spark_frame(spark), table_uri)


# --------------------------------------------------------------------------------------------
# 4. Appends keep the table's (non-Spark) types
# --------------------------------------------------------------------------------------------

NARROW_SCHEMA = pa.schema(
    [
        ("s", pa.large_string()),
        ("i", pa.int32()),
        ("f", pa.float32()),
        ("v", pa.list_(pa.float32(), 4)),
        ("ts", pa.timestamp("ns", tz="UTC")),
        ("u", pa.uint32()),
    ]
)
NARROW_DDL = "s string, i int, f float, v array<float>, ts timestamp, u long"


def _narrow_table(uri: str) -> None:
    first = pa.table(
        {
            "s": ["a"],
            "i": [1],
            "f": [0.5],
            "v": [[1.0, 2.0, 3.0, 4.0]],
            "ts": pa.array([1], pa.timestamp("ns", tz="UTC")),
            "u": [7],
        },
        schema=NARROW_SCHEMA,
    )
    lance.write_dataset(first, uri)


def test_append_keeps_the_tables_narrower_types(spark: SparkSession, table_uri: str) -> None:
    _narrow_table(table_uri)
    rows = [
        (
            "b",
            2**31 - 1,
            1.25,
            [0.5, 1.0, NAN, -0.0],
            datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            2**32 - 1,
        ),
        (None, None, None, None, None, None),
        ("", -(2**31), -INF, [1.0, None, 3.0, 4.0], datetime(1969, 1, 1, tzinfo=UTC), 0),
    ]
    spark.createDataFrame(rows, NARROW_DDL).coalesce(1).write.format("lance").mode("append").save(
        table_uri
    )
    ds = lance.dataset(table_uri)
    assert ds.version == 2
    assert ds.schema.equals(NARROW_SCHEMA), ds.schema
    table = ds.to_table()
    got = {
        f.name: [_from_arrow(v, f.type) for v in table.column(f.name).to_pylist()]
        for f in table.schema
    }
    assert _same(got["s"], ["a", "b", None, ""])
    assert _same(got["i"], [1, 2**31 - 1, None, -(2**31)])
    assert _same(got["f"], [0.5, 1.25, None, -INF])
    assert _same(
        got["v"], [[1.0, 2.0, 3.0, 4.0], [0.5, 1.0, NAN, -0.0], None, [1.0, None, 3.0, 4.0]]
    )
    assert got["ts"] == [
        EPOCH_UTC,  # 1 ns, read back rounded down to microseconds by _from_arrow
        datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        None,
        datetime(1969, 1, 1, tzinfo=UTC),
    ]
    assert table.column("ts").to_pylist()[0].value == 1  # the first row keeps its nanosecond
    assert got["u"] == [7, 2**32 - 1, None, 0]


@pytest.mark.parametrize("bad", [2**32, -1], ids=["too_big", "negative"])
def test_append_of_a_value_the_table_type_cannot_hold_fails_naming_the_column(
    spark: SparkSession, table_uri: str, bad: int
) -> None:
    _narrow_table(table_uri)
    row = ("c", 3, 1.0, [1.0, 2.0, 3.0, 4.0], datetime(2024, 1, 1, tzinfo=UTC), bad)
    df = spark.createDataFrame([row], NARROW_DDL)
    with pytest.raises(Exception, match=r"column 'u': cannot write int64 into the table's uint32"):
        df.write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 1 and ds.count_rows() == 1
    assert ds.schema.equals(NARROW_SCHEMA)


def test_append_of_a_batch_of_only_null_vectors(spark: SparkSession, table_uri: str) -> None:
    _narrow_table(table_uri)
    df = spark.createDataFrame([("n", None)], "s string, v array<float>").coalesce(1)
    df.write.format("lance").mode("append").save(table_uri)
    ds = lance.dataset(table_uri)
    assert ds.version == 2
    assert ds.to_table(columns=["s", "v"]).to_pylist()[1] == {"s": "n", "v": None}


# --------------------------------------------------------------------------------------------
# 5. Types Spark cannot hold
# --------------------------------------------------------------------------------------------


def test_column_of_a_type_spark_cannot_hold_is_named_on_load(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "unsupported.lance")
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "dur": pa.array([1, None], pa.duration("ns")),
            "st": pa.array(
                [{"d": Decimal("1.25")}, None], pa.struct([("d", pa.decimal256(50, 2))])
            ),
        }
    )
    lance.write_dataset(table, uri)

    def load(columns: str | None = None) -> DataFrame:
        reader = spark.read.format("lance")
        return (reader.option("columns", columns) if columns else reader).load(uri)

    with pytest.raises(Exception, match=r"column 'dur' has Arrow type duration\[ns\]"):
        load()
    with pytest.raises(Exception, match=r"column 'st\.d' has Arrow type decimal256\(50, 2\)"):
        load("id,st")
    # The message's advice works: leave the column out.
    assert sorted(r.id for r in load("id").collect()) == [1, 2]


_GEOMETRY_WKB = "X'0101000000000000000000F03F0000000000000040'"  # POINT(1 2)


@pytest.mark.parametrize(
    ("select", "column", "type_name"),
    [
        ("""parse_json('{"a": 1}') AS v""", "v", "variant"),
        (f"st_geomfromwkb({_GEOMETRY_WKB}, 4326) AS g", "g", "geometry(4326)"),
        (f"st_geogfromwkb({_GEOMETRY_WKB}) AS g", "g", "geography(4326)"),
        ("""named_struct('x', 1, 'v', parse_json('[1]')) AS s""", "s.v", "variant"),
        ("""array(parse_json('1')) AS a""", "a.element", "variant"),
    ],
)
def test_types_that_would_read_back_changed_are_refused_before_any_file(
    spark: SparkSession, table_uri: str, select: str, column: str, type_name: str
) -> None:
    frame = spark.sql(f"SELECT 1 AS id, {select}")
    with pytest.raises(Exception, match=re.escape(f"column '{column}' has type {type_name},")):
        frame.write.format("lance").mode("append").save(table_uri)
    assert not Path(table_uri).exists() or not any(Path(table_uri).rglob("*.lance"))


def test_mllib_vectors_and_matrices_round_trip(spark: SparkSession, table_uri: str) -> None:
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import Matrices, MatrixUDT, Vectors, VectorUDT
    from pyspark.mllib.linalg import Vectors as OldVectors
    from pyspark.mllib.linalg import VectorUDT as OldVectorUDT

    rows = [
        (1, Vectors.dense([1.0, 2.0]), Matrices.dense(2, 1, [1.0, 2.0]), OldVectors.dense([7.0])),
        (2, Vectors.sparse(3, [1], [5.0]), Matrices.dense(1, 1, [3.0]), None),
        (3, None, None, OldVectors.sparse(2, [0], [1.0])),
    ]
    frame = spark.createDataFrame(rows, ["id", "features", "m", "old"])
    frame.write.format("lance").mode("append").save(table_uri)
    back = spark.read.format("lance").load(table_uri)
    assert isinstance(back.schema["features"].dataType, VectorUDT)
    assert isinstance(back.schema["m"].dataType, MatrixUDT)
    assert isinstance(back.schema["old"].dataType, OldVectorUDT)
    assert sorted(back.collect(), key=lambda r: r.id) == sorted(frame.collect(), key=lambda r: r.id)
    present = back.where("features IS NOT NULL")  # vector_to_array refuses null (Spark's)
    arrays = present.select("id", vector_to_array("features").alias("a")).orderBy("id").collect()
    assert [r.a for r in arrays] == [[1.0, 2.0], [0.0, 5.0, 0.0]]
    # pylance reads the SQL type MLlib stores a vector as.
    stored = {r["id"]: r["features"] for r in lance.dataset(table_uri).to_table().to_pylist()}
    assert stored[1] == {"type": 1, "size": None, "indices": None, "values": [1.0, 2.0]}
    assert stored[2] == {"type": 0, "size": 3, "indices": [1], "values": [5.0]}
    # Appends and row-level changes keep the type; a plain struct is not a vector.
    frame.where("id = 1").write.format("lance").mode("append").save(table_uri)
    assert spark.read.format("lance").load(table_uri).where("id = 1").count() == 2
    LanceTable.forPath(spark, table_uri).update("id = 2", {"id": "20"})
    spark.sql(f"UPDATE lance.`{table_uri}` SET id = 30 WHERE id = 3")
    changed = spark.read.format("lance").load(table_uri).where("id IN (20, 30)").orderBy("id")
    assert [(r.id, r.features) for r in changed.collect()] == [(20, rows[1][1]), (30, None)]
    plain = frame.select("id", F.struct(F.lit(1).cast("tinyint").alias("type")).alias("features"))
    with pytest.raises(
        Exception, match=r"column 'features' of the table holds pyspark\.ml\.linalg\.VectorUDT"
    ):
        plain.write.format("lance").mode("append").save(table_uri)


def test_a_vector_inside_another_type_is_refused_naming_the_column(
    spark: SparkSession, table_uri: str
) -> None:
    from pyspark.ml.linalg import Vectors

    vectors = spark.createDataFrame([(1, Vectors.dense([1.0, 2.0]))], ["id", "features"])
    nested = vectors.select("id", F.array("features").alias("many"))
    with pytest.raises(
        Exception, match=r"'many\.element' has the user-defined type VectorUDT.*inside"
    ):
        nested.write.format("lance").mode("append").save(table_uri)
    assert not Path(table_uri).exists() or not any(Path(table_uri).rglob("*.lance"))
