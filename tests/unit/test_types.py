"""Unit tests of lance_spark.source.types: the Lance (Arrow) <-> Spark type mapping. No JVM."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lance import LanceDataset, LanceOperation
from lance.fragment import write_fragments
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

from lance_spark.errors import InvalidOptionError, SchemaMismatchError, UnsupportedTypeError
from lance_spark.source.types import (
    arrow_read_schema,
    arrow_schema_for_new_table,
    check_column_names,
    conform_read_batch,
    conform_write_batch,
    reconcile_write_schema,
    spark_schema_from_arrow,
)

DTI = DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)
UTC = dt.UTC


def _spark(t: pa.DataType, nullable: bool = True) -> DataType:
    schema = spark_schema_from_arrow(pa.schema([pa.field("c", t, nullable)]))
    return schema.fields[0].dataType


def _batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def _one(name: str, arr: pa.Array, nullable: bool = True) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([arr], schema=pa.schema([pa.field(name, arr.type, nullable)]))


def _spark_batch_schema(spark: StructType, *, tz: str = "UTC", large: bool = False) -> pa.Schema:
    """The Arrow schema Spark gives a DataSourceArrowWriter (checked against pyspark 4.3)."""
    return to_arrow_schema(spark, timezone=tz, prefers_large_types=large)


# --------------------------------------------------------------------------------------------
# spark_schema_from_arrow
# --------------------------------------------------------------------------------------------

SIMPLE_MAP = [
    (pa.bool_(), BooleanType()),
    (pa.int8(), ByteType()),
    (pa.int16(), ShortType()),
    (pa.int32(), IntegerType()),
    (pa.int64(), LongType()),
    (pa.uint8(), ShortType()),
    (pa.uint16(), IntegerType()),
    (pa.uint32(), LongType()),
    (pa.uint64(), DecimalType(20, 0)),
    (pa.float16(), FloatType()),
    (pa.float32(), FloatType()),
    (pa.float64(), DoubleType()),
    (pa.decimal32(7, 2), DecimalType(7, 2)),
    (pa.decimal64(15, 3), DecimalType(15, 3)),
    (pa.decimal128(10, 2), DecimalType(10, 2)),
    (pa.decimal128(38, 38), DecimalType(38, 38)),
    (pa.decimal256(38, 4), DecimalType(38, 4)),
    (pa.string(), StringType()),
    (pa.large_string(), StringType()),
    (pa.string_view(), StringType()),
    (pa.binary(), BinaryType()),
    (pa.large_binary(), BinaryType()),
    (pa.binary(16), BinaryType()),
    (pa.binary_view(), BinaryType()),
    (pa.date32(), DateType()),
    (pa.date64(), DateType()),
    (pa.timestamp("s", "UTC"), TimestampType()),
    (pa.timestamp("ms", "America/New_York"), TimestampType()),
    (pa.timestamp("us", "+02:00"), TimestampType()),
    (pa.timestamp("ns", "UTC"), TimestampType()),
    (pa.timestamp("s"), TimestampNTZType()),
    (pa.timestamp("us"), TimestampNTZType()),
    (pa.timestamp("ns"), TimestampNTZType()),
    (pa.time32("s"), TimeType(0)),
    (pa.time32("ms"), TimeType(3)),
    (pa.time64("us"), TimeType(6)),
    (pa.time64("ns"), TimeType(9)),
    (pa.duration("s"), DTI),
    (pa.duration("ms"), DTI),
    (pa.duration("us"), DTI),
    (pa.null(), NullType()),
    (pa.dictionary(pa.int32(), pa.string()), StringType()),
    (pa.dictionary(pa.int8(), pa.int64()), LongType()),
    (pa.json_(), StringType()),
    (pa.uuid(), BinaryType()),
]


@pytest.mark.parametrize(("arrow", "spark"), SIMPLE_MAP, ids=[str(a) for a, _ in SIMPLE_MAP])
def test_simple_types_map(arrow: pa.DataType, spark: DataType) -> None:
    assert _spark(arrow) == spark


@pytest.mark.parametrize(
    "make",
    [pa.list_, pa.large_list, lambda f: pa.list_(f, 3), pa.list_view, pa.large_list_view],
    ids=["list", "large_list", "fixed_size_list", "list_view", "large_list_view"],
)
@pytest.mark.parametrize("contains_null", [True, False])
def test_lists_map_to_arrays_with_element_nullability(make, contains_null: bool) -> None:  # type: ignore[no-untyped-def]
    t = make(pa.field("item", pa.float32(), nullable=contains_null))
    assert _spark(t) == ArrayType(FloatType(), containsNull=contains_null)


def test_nested_types_map_recursively_with_nullability() -> None:
    inner = pa.struct([pa.field("x", pa.int64(), nullable=False), pa.field("y", pa.large_string())])
    t = pa.struct(
        [
            pa.field("s", inner),
            pa.field("m", pa.map_(pa.string(), pa.field("value", pa.int32(), nullable=False))),
            pa.field("l", pa.list_(pa.list_(pa.uint64()))),
        ]
    )
    expected = StructType(
        [
            StructField(
                "s",
                StructType(
                    [StructField("x", LongType(), False), StructField("y", StringType(), True)]
                ),
            ),
            StructField("m", MapType(StringType(), IntegerType(), valueContainsNull=False)),
            StructField("l", ArrayType(ArrayType(DecimalType(20, 0)))),
        ]
    )
    assert _spark(t) == expected


def test_nullability_follows_the_arrow_field_and_metadata_is_not_copied() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int64(), nullable=False, metadata={"k": "v"}),
            pa.field("b", pa.struct([pa.field("c", pa.int8(), metadata={"x": "y"})])),
        ]
    )
    spark = spark_schema_from_arrow(schema)
    assert [f.nullable for f in spark.fields] == [False, True]
    assert all(f.metadata == {} for f in spark.fields)
    b_type = spark["b"].dataType
    assert isinstance(b_type, StructType)
    assert b_type["c"].metadata == {}


@pytest.mark.parametrize(
    ("arrow", "path", "type_text"),
    [
        (pa.decimal256(40, 2), "c", "decimal256(40, 2)"),
        (pa.decimal128(10, -2), "c", "decimal128(10, -2)"),
        (pa.duration("ns"), "c", "duration[ns]"),
        (pa.month_day_nano_interval(), "c", "month_day_nano_interval"),
        (pa.bool8(), "c", "extension<arrow.bool8>"),
        (
            pa.struct([pa.field("a", pa.struct([pa.field("b", pa.duration("ns"))]))]),
            "c.a.b",
            "duration[ns]",
        ),
        (pa.list_(pa.decimal256(50, 0)), "c.element", "decimal256(50, 0)"),
        (pa.map_(pa.string(), pa.month_day_nano_interval()), "c.value", "month_day_nano_interval"),
        (pa.map_(pa.duration("ns"), pa.int8()), "c.key", "duration[ns]"),
    ],
)
def test_unsupported_types_name_column_and_type(
    arrow: pa.DataType, path: str, type_text: str
) -> None:
    with pytest.raises(UnsupportedTypeError) as e:
        spark_schema_from_arrow(pa.schema([pa.field("c", arrow)]))
    assert repr(path) in str(e.value)
    assert type_text in str(e.value)


# --------------------------------------------------------------------------------------------
# arrow_read_schema / conform_read_batch
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lance", "read"),
    [
        (pa.large_string(), pa.string()),
        (pa.string_view(), pa.string()),
        (pa.dictionary(pa.int16(), pa.string()), pa.string()),
        (pa.large_binary(), pa.binary()),
        (pa.binary(4), pa.binary()),
        (pa.uint8(), pa.int16()),
        (pa.uint16(), pa.int32()),
        (pa.uint32(), pa.int64()),
        (pa.uint64(), pa.decimal128(20, 0)),
        (pa.float16(), pa.float32()),
        (pa.decimal256(12, 3), pa.decimal128(12, 3)),
        (pa.date64(), pa.date32()),
        (pa.timestamp("ns", "America/New_York"), pa.timestamp("us", "UTC")),
        (pa.timestamp("s", "UTC"), pa.timestamp("us", "UTC")),
        (pa.timestamp("ms"), pa.timestamp("us")),
        (pa.time32("s"), pa.time64("ns")),
        (pa.duration("ms"), pa.duration("us")),
        (pa.list_(pa.float32(), 4), pa.list_(pa.field("element", pa.float32()))),
        (pa.large_list(pa.int32()), pa.list_(pa.field("element", pa.int32()))),
        (pa.json_(), pa.string()),
    ],
    ids=str,
)
def test_arrow_read_schema_uses_the_types_spark_accepts(
    lance: pa.DataType, read: pa.DataType
) -> None:
    assert arrow_read_schema(pa.schema([pa.field("c", lance)])).field("c").type.equals(read)


def test_arrow_read_schema_keeps_nullability_and_map_entry_names() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field(
                "m", pa.map_(pa.field("k", pa.large_string(), False), pa.field("v", pa.int8()))
            ),
            pa.field("v", pa.list_(pa.field("item", pa.float32(), nullable=False), 2)),
        ]
    )
    read = arrow_read_schema(schema)
    assert not read.field("id").nullable
    assert (read.field("m").type.key_field.name, read.field("m").type.item_field.name) == (
        "key",
        "value",
    )
    assert read.field("m").type.key_type == pa.string()
    assert not read.field("v").type.value_field.nullable


def test_conform_read_batch_is_a_no_op_when_types_match() -> None:
    batch = _batch(a=pa.array([1, 2]), s=pa.array(["x", None]))
    target = arrow_read_schema(batch.schema)
    assert conform_read_batch(batch, target) is batch


def test_conform_read_batch_converts_every_lance_type() -> None:
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    nested = pa.struct(
        [pa.field("u", pa.uint8()), pa.field("d", pa.dictionary(pa.int8(), pa.string()))]
    )
    batch = _batch(
        u64=pa.array([2**64 - 1, None], pa.uint64()),
        u8=pa.array([255, 0], pa.uint8()),
        f16=pa.array([1.5, None], pa.float32()).cast(pa.float16()),
        ls=pa.array(["a", None], pa.large_string()),
        sv=pa.array(["a", "b"], pa.string_view()),
        fsb=pa.array([b"ab", None], pa.binary(2)),
        d64=pa.array([dt.date(2024, 1, 2), None], pa.date64()),
        ts_ny=pa.array([ts, None], pa.timestamp("us", "UTC")).cast(
            pa.timestamp("ns", "America/New_York")
        ),
        ntz_ms=pa.array([ts.replace(microsecond=123000), None], pa.timestamp("ms")),
        t32=pa.array([3723, None], pa.int32()).cast(pa.time32("s")),
        dur=pa.array([1500, None], pa.duration("ms")),
        dic=pa.array(["x", None, "x"][:2]).dictionary_encode(),
        vec=pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2)),
        ll=pa.array([[1], []], pa.large_list(pa.int16())),
        st=pa.array([{"u": 7, "d": "q"}, None], nested),
        js=pa.array(["{}", None]).cast(pa.json_()),
        dec=pa.array([decimal.Decimal("1.25"), None], pa.decimal256(10, 2)),
    )
    target = arrow_read_schema(batch.schema)
    out = conform_read_batch(batch, target)
    assert out.schema.equals(target)
    assert out.to_pydict() == {
        "u64": [decimal.Decimal(2**64 - 1), None],
        "u8": [255, 0],
        "f16": [1.5, None],
        "ls": ["a", None],
        "sv": ["a", "b"],
        "fsb": [b"ab", None],
        "d64": [dt.date(2024, 1, 2), None],
        "ts_ny": [ts.replace(tzinfo=UTC), None],
        "ntz_ms": [ts.replace(microsecond=123000), None],
        "t32": [dt.time(1, 2, 3), None],
        "dur": [dt.timedelta(seconds=1.5), None],
        "dic": ["x", None],
        "vec": [[1.0, 2.0], None],
        "ll": [[1], []],
        "st": [{"u": 7, "d": "q"}, None],
        "js": ["{}", None],
        "dec": [decimal.Decimal("1.25"), None],
    }


def test_conform_read_batch_truncates_nanosecond_timestamps_to_microseconds() -> None:
    batch = _one("t", pa.array([1_000_001_999], pa.timestamp("ns", "UTC")))
    out = conform_read_batch(batch, arrow_read_schema(batch.schema))
    assert out.column(0).cast(pa.int64()).to_pylist() == [1_000_001]


I64_MIN, I64_MAX = -(2**63), 2**63 - 1
MS_PER_DAY = 86_400_000
EPOCH_DAY = dt.date(1970, 1, 1)


def _micros(v: dt.datetime) -> int:
    epoch = dt.datetime(1970, 1, 1, tzinfo=v.tzinfo)
    return (v - epoch) // dt.timedelta(microseconds=1)


def test_conform_read_batch_floors_nanoseconds_and_date64_before_1970() -> None:
    # Spark, datetime and to_pylist() round down: -1 ns is 23:59:59.999999 on 1969-12-31, not
    # 1970-01-01 (pyarrow's truncating cast rounds toward zero).
    ns = pa.array([-1, -1000, -1001, None, 1999, -(86_400 * 10**9) - 1_001], pa.timestamp("ns"))
    day = MS_PER_DAY
    d64 = pa.array([-1, -day, -day - 1, None, day - 1, 1], pa.int64()).cast(pa.date64())
    batch = _batch(ntz=ns, ts=ns.cast(pa.timestamp("ns", "Asia/Tokyo")), d64=d64)
    out = conform_read_batch(batch, arrow_read_schema(batch.schema))
    assert out.schema.equals(arrow_read_schema(batch.schema))
    last = dt.datetime(1969, 12, 31, 23, 59, 59, 999_999)
    assert out.column("ntz").to_pylist() == [
        last,
        last,
        last - dt.timedelta(microseconds=1),
        None,
        dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        dt.datetime(1969, 12, 30, 23, 59, 59, 999_998),
    ]
    assert out.column("ts").to_pylist() == [
        None if v is None else v.replace(tzinfo=UTC) for v in out.column("ntz").to_pylist()
    ]
    assert out.column("d64").to_pylist() == [
        dt.date(1969, 12, 31),
        dt.date(1969, 12, 31),
        dt.date(1969, 12, 30),
        None,
        EPOCH_DAY,
        EPOCH_DAY,
    ]
    # what the filter pushdown (and the Spark round-trip test) compare with
    assert [None if v is None else _micros(v) for v in out.column("ntz").to_pylist()] == [
        None if v is None else v.value // 1000 for v in ns.to_pylist()
    ]


@settings(max_examples=60, deadline=None)
@given(
    ns=st.lists(
        st.one_of(st.none(), st.integers(I64_MIN + 1, I64_MAX), st.integers(-5000, 5000)),
        min_size=1,
        max_size=8,
    ),
    start=st.integers(0, 2),
)
def test_conform_read_batch_floors_nested_nanoseconds_and_date64(
    ns: list[int | None], start: int
) -> None:
    """Nested in lists / structs / maps / fixed-size lists / dictionaries, sliced, with nulls."""
    ts_type = pa.timestamp("ns", "UTC")
    ts = pa.array(ns, ts_type)
    ms = pa.array([None if n is None else n // 10**7 for n in ns], pa.int64()).cast(pa.date64())
    n = len(ns)
    mask = pa.array([i % 3 == 1 for i in range(n)])
    offsets = pa.array([0, *[(i + 1) // 2 for i in range(1, n)], n], pa.int32())
    columns = {
        "ts": ts,
        "list": pa.ListArray.from_arrays(offsets, ts, mask=mask),
        "large": pa.LargeListArray.from_arrays(offsets.cast(pa.int64()), ts),
        "struct": pa.StructArray.from_arrays([ts, ms], names=["t", "d"], mask=mask),
        "map": pa.MapArray.from_arrays(offsets, pa.array([str(i) for i in range(n)]), ts),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.concat_arrays([ts, ts]), 2),
        "dict": pa.DictionaryArray.from_arrays(pa.array(range(n), pa.int32()), ms),
    }
    first = min(start, n - 1)
    batch = _batch(**columns).slice(first)
    target = arrow_read_schema(batch.schema)
    out = conform_read_batch(batch, target)
    assert out.schema.equals(target)

    def floored(v: Any, t: pa.DataType) -> Any:
        """What Spark gets for to_pylist() value ``v`` of type ``t``: rounded down."""
        if v is None:
            return None
        if pa.types.is_timestamp(t):
            return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=v.value // 1000)
        if pa.types.is_date64(t):
            return v  # to_pylist() floors date64 already (checked in days below)
        if pa.types.is_dictionary(t):
            return floored(v, t.value_type)
        if pa.types.is_struct(t):
            return {f.name: floored(v[f.name], f.type) for f in t}
        if pa.types.is_map(t):
            return [(k, floored(x, t.item_type)) for k, x in v]
        return [floored(x, t.value_type) for x in v]

    for field in batch.schema:
        want = [floored(v, field.type) for v in batch.column(field.name).to_pylist()]
        assert out.column(field.name).to_pylist() == want, field.name
    micros = pc.cast(out.column("ts"), pa.int64()).to_pylist()
    assert micros == [None if v is None else v // 1000 for v in ns[first:]]
    days = pc.cast(out.column("struct").field("d"), pa.int32()).to_pylist()  # parent nulls aside
    assert days == [None if v is None else v // 10**7 // MS_PER_DAY for v in ns[first:]]


def test_conform_read_batch_date64_beyond_spark_dates_fails() -> None:
    batch = _one("d", pa.array([2**33 * MS_PER_DAY], pa.int64()).cast(pa.date64()))
    with pytest.raises(UnsupportedTypeError, match="'d'"):
        conform_read_batch(batch, arrow_read_schema(batch.schema))


def test_conform_read_batch_raises_for_values_spark_cannot_hold() -> None:
    batch = _one("t", pa.array([2**62], pa.timestamp("s")))
    with pytest.raises(UnsupportedTypeError) as e:
        conform_read_batch(batch, arrow_read_schema(batch.schema))
    assert "'t'" in str(e.value)
    assert "timestamp[s]" in str(e.value)


def test_conform_read_batch_fixed_size_list_reuses_the_value_buffer() -> None:
    vectors = pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2))
    batch = _one("v", vectors)
    out = conform_read_batch(batch, arrow_read_schema(batch.schema)).column(0)
    assert out.type == pa.list_(pa.float32())
    assert out.values.buffers()[1].address == vectors.values.buffers()[1].address


def test_conform_read_batch_renames_map_entries_to_key_and_value() -> None:
    t = pa.map_(pa.field("k", pa.string(), False), pa.field("v", pa.int32()))
    batch = _one("m", pa.array([[("a", 1)], None], t))
    target = arrow_read_schema(batch.schema)
    # pyarrow calls the two equal, but Spark's JVM fails on other names.
    assert batch.schema.equals(target)
    out = conform_read_batch(batch, target)
    assert (out.column(0).type.key_field.name, out.column(0).type.item_field.name) == (
        "key",
        "value",
    )
    assert out.column(0).to_pylist() == [[("a", 1)], None]


def test_conform_read_batch_rebuilds_list_views_correctly() -> None:
    # pyarrow 26's own list_view -> list cast drops values; the rebuild must not.
    view = pa.ListViewArray.from_arrays(
        pa.array([0, 1, 0], pa.int32()), pa.array([1, 2, 1], pa.int32()), pa.array([7, 8, 9])
    )
    rows = pa.concat_arrays([view, pa.nulls(1, view.type)]).slice(1)
    struct = pa.StructArray.from_arrays([rows], names=["l"], mask=pa.array([False, True, False]))
    batch = _batch(a=rows, s=struct)
    out = conform_read_batch(batch, arrow_read_schema(batch.schema))
    assert out.to_pylist() == batch.to_pylist()
    assert out.column(0).to_pylist() == [[8, 9], [7], None]


def test_conform_read_batch_makes_nullability_match_the_target() -> None:
    batch = _one("a", pa.array([1, 2]), nullable=True)
    target = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    assert conform_read_batch(batch, target).schema.equals(target)


# --------------------------------------------------------------------------------------------
# arrow_schema_for_new_table
# --------------------------------------------------------------------------------------------

SPARK_ALL = StructType(
    [
        StructField("id", LongType(), False),
        StructField("name", StringType()),
        StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()),
        StructField("amount", DecimalType(10, 2)),
        StructField("tags", ArrayType(StringType())),
        StructField("attrs", MapType(StringType(), IntegerType())),
        StructField(
            "point", StructType([StructField("x", DoubleType()), StructField("y", DoubleType())])
        ),
        StructField("embedding", ArrayType(FloatType())),
        StructField("nothing", NullType()),
        StructField("elapsed", DTI),
    ]
)


def test_new_table_keeps_spark_types_and_stores_instants_in_utc() -> None:
    incoming = _spark_batch_schema(SPARK_ALL, tz="America/Los_Angeles", large=True)
    schema = arrow_schema_for_new_table(incoming, vector_sizes={})
    assert schema.names == incoming.names
    assert schema.field("ts").type == pa.timestamp("us", "UTC")
    assert schema.field("ntz").type == pa.timestamp("us")
    assert schema.field("name").type == pa.large_string()
    assert not schema.field("id").nullable
    assert schema.field("embedding").type == pa.list_(pa.float32())


def test_new_table_drops_field_metadata_recursively() -> None:
    meta = {"SPARK::metadata::json": '{"lance.uri": "x"}'}
    incoming = pa.schema(
        [
            pa.field("a", pa.int64(), metadata=meta),
            pa.field("s", pa.struct([pa.field("b", pa.int8(), metadata=meta)]), metadata=meta),
        ]
    )
    schema = arrow_schema_for_new_table(incoming, vector_sizes={})
    assert schema.field("a").metadata is None
    assert schema.field("s").metadata is None
    assert schema.field("s").type.field("b").metadata is None


@pytest.mark.parametrize(
    ("precision", "expected"),
    [("0", pa.time32("s")), ("3", pa.time32("ms")), ("6", pa.time64("us")), ("9", pa.time64("ns"))],
)
def test_new_table_stores_time_in_the_unit_of_its_spark_precision(
    precision: str, expected: pa.DataType
) -> None:
    incoming = pa.schema(
        [pa.field("t", pa.time64("ns"), metadata={"SPARK::time::precision": precision})]
    )
    schema = arrow_schema_for_new_table(incoming, vector_sizes={})
    assert schema.field("t").type == expected
    assert _spark(expected) == TimeType(int(precision))


def test_new_table_vector_columns_become_fixed_size_lists() -> None:
    incoming = _spark_batch_schema(SPARK_ALL)
    schema = arrow_schema_for_new_table(incoming, vector_sizes={"EMBEDDING": 3})
    t = schema.field("embedding").type
    assert pa.types.is_fixed_size_list(t)
    assert t.list_size == 3
    assert t.value_type == pa.float32()
    assert _spark(t) == ArrayType(FloatType())


@pytest.mark.parametrize("column", ["tags", "name", "point"])
def test_new_table_vector_option_on_a_non_numeric_column_fails(column: str) -> None:
    incoming = _spark_batch_schema(SPARK_ALL)
    with pytest.raises(UnsupportedTypeError) as e:
        arrow_schema_for_new_table(incoming, vector_sizes={column: 4})
    assert repr(column) in str(e.value)
    assert str(incoming.field(column).type) in str(e.value)


def test_new_table_vector_option_errors() -> None:
    incoming = _spark_batch_schema(SPARK_ALL)
    with pytest.raises(SchemaMismatchError, match="'nope'"):
        arrow_schema_for_new_table(incoming, vector_sizes={"nope": 4})
    with pytest.raises(InvalidOptionError, match="embedding"):
        arrow_schema_for_new_table(incoming, vector_sizes={"embedding": 0})


# --------------------------------------------------------------------------------------------
# reconcile_write_schema
# --------------------------------------------------------------------------------------------

TABLE = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("Name", pa.string()),
        pa.field("score", pa.float32()),
        pa.field("vec", pa.list_(pa.float32(), 2)),
        pa.field("ts", pa.timestamp("ns", "UTC")),
    ],
    metadata={"table": "meta"},
)


def test_reconcile_matches_by_name_and_the_table_wins() -> None:
    incoming = pa.schema(
        [
            ("ts", pa.timestamp("us", "America/Los_Angeles")),
            ("vec", pa.list_(pa.float32())),
            ("name", pa.large_string()),
            ("id", pa.int64()),
        ]
    )
    target = reconcile_write_schema(incoming, TABLE, merge_schema=False)
    assert target.equals(TABLE, check_metadata=True)


def test_reconcile_prefers_the_exact_name_over_case_insensitive_ones() -> None:
    table = pa.schema([("a", pa.int64()), ("A", pa.string())])
    incoming = pa.schema([("A", pa.string()), ("a", pa.int64())])
    assert reconcile_write_schema(incoming, table, merge_schema=False).equals(table)


def test_reconcile_rejects_ambiguous_and_duplicate_matches() -> None:
    table = pa.schema([("ab", pa.int64()), ("AB", pa.int64())])
    with pytest.raises(SchemaMismatchError, match="several") as e:
        reconcile_write_schema(pa.schema([("Ab", pa.int64())]), table, merge_schema=False)
    assert "'Ab'" in str(e.value)
    with pytest.raises(SchemaMismatchError, match="both match"):
        reconcile_write_schema(
            pa.schema([("id", pa.int32()), ("ID", pa.int32())]), TABLE, merge_schema=False
        )


def test_reconcile_unknown_column_names_it_and_the_valid_ones() -> None:
    incoming = pa.schema([("id", pa.int32()), ("extra", pa.string())])
    with pytest.raises(SchemaMismatchError) as e:
        reconcile_write_schema(incoming, TABLE, merge_schema=False)
    message = str(e.value)
    assert "'extra'" in message
    assert all(name in message for name in TABLE.names)


def test_reconcile_merge_schema_appends_new_columns_as_nullable() -> None:
    incoming = pa.schema(
        [
            pa.field("new_ts", pa.timestamp("us", "Europe/Paris"), nullable=False),
            pa.field("id", pa.int32(), nullable=False),
            pa.field("note", pa.string(), metadata={"k": "v"}),
        ]
    )
    target = reconcile_write_schema(incoming, TABLE, merge_schema=True)
    assert target.names == [*TABLE.names, "new_ts", "note"]
    assert target.field("new_ts").type == pa.timestamp("us", "UTC")
    assert target.field("new_ts").nullable
    assert target.field("note").metadata is None


def test_reconcile_missing_columns() -> None:
    # Missing nullable columns are fine; a missing non-nullable one is not.
    target = reconcile_write_schema(pa.schema([("id", pa.int64())]), TABLE, merge_schema=False)
    assert target.equals(TABLE)
    with pytest.raises(SchemaMismatchError) as e:
        reconcile_write_schema(pa.schema([("score", pa.float32())]), TABLE, merge_schema=False)
    assert "'id'" in str(e.value)
    assert "int32" in str(e.value)


ALLOWED_CASTS = [
    (pa.int64(), pa.int32()),
    (pa.int16(), pa.uint8()),
    (pa.int32(), pa.float64()),
    (pa.int64(), pa.decimal128(5, 0)),
    (pa.float32(), pa.float64()),
    (pa.float32(), pa.float16()),
    (pa.decimal128(10, 2), pa.decimal128(5, 1)),
    (pa.decimal128(20, 0), pa.uint64()),
    (pa.string(), pa.large_string()),
    (pa.large_string(), pa.string()),
    (pa.binary(), pa.binary(16)),
    (pa.date32(), pa.date64()),
    (pa.timestamp("us", "America/Los_Angeles"), pa.timestamp("ns", "UTC")),
    (pa.timestamp("us"), pa.timestamp("ms")),
    (pa.time64("ns"), pa.time32("s")),
    (pa.duration("us"), pa.duration("ns")),
    (pa.null(), pa.int32()),
    (pa.string(), pa.dictionary(pa.int32(), pa.string())),
    (pa.string(), pa.json_()),
    (pa.list_(pa.float32()), pa.list_(pa.float16(), 8)),
    (pa.list_(pa.int64()), pa.large_list(pa.int8())),
    (pa.map_(pa.string(), pa.int64()), pa.map_(pa.large_string(), pa.int32())),
    (
        pa.struct([("B", pa.int64()), ("a", pa.string())]),
        pa.struct([("a", pa.string()), ("b", pa.int32()), ("c", pa.bool_())]),
    ),
]


@pytest.mark.parametrize(("src", "dst"), ALLOWED_CASTS, ids=str)
def test_reconcile_allows_casts_that_can_be_lossless(src: pa.DataType, dst: pa.DataType) -> None:
    table = pa.schema([("c", dst)])
    assert reconcile_write_schema(pa.schema([("c", src)]), table, merge_schema=False).equals(table)


REJECTED_CASTS = [
    # (incoming type, table type, path named in the error, types named in the error)
    (pa.float64(), pa.float32(), "c", ("double", "float")),
    (pa.float64(), pa.float16(), "c", ("double", "halffloat")),
    (pa.float64(), pa.int64(), "c", ("double", "int64")),
    (pa.float32(), pa.decimal128(10, 2), "c", ("float", "decimal128(10, 2)")),
    (pa.decimal128(10, 2), pa.float64(), "c", ("decimal128(10, 2)", "double")),
    (pa.string(), pa.int32(), "c", ("string", "int32")),
    (pa.binary(), pa.string(), "c", ("binary", "string")),
    (pa.int32(), pa.string(), "c", ("int32", "string")),
    (pa.bool_(), pa.int8(), "c", ("bool", "int8")),
    (
        pa.timestamp("us", "UTC"),
        pa.timestamp("us"),
        "c",
        ("timestamp[us, tz=UTC]", "timestamp[us]"),
    ),
    (
        pa.timestamp("us"),
        pa.timestamp("us", "UTC"),
        "c",
        ("timestamp[us]", "timestamp[us, tz=UTC]"),
    ),
    (pa.date32(), pa.timestamp("us"), "c", ("date32[day]", "timestamp[us]")),
    (pa.duration("us"), pa.int64(), "c", ("duration[us]", "int64")),
    (pa.list_(pa.float64()), pa.list_(pa.float32(), 4), "c.element", ("double", "float")),
    (pa.list_(pa.float32(), 3), pa.list_(pa.float32(), 4), "c", ("[3]", "[4]")),
    (pa.list_(pa.string()), pa.string(), "c", ("list<item: string>", "string")),
    (
        pa.map_(pa.string(), pa.binary()),
        pa.map_(pa.string(), pa.int32()),
        "c.value",
        ("binary", "int32"),
    ),
    (
        pa.struct([("a", pa.float64())]),
        pa.struct([("a", pa.float32())]),
        "c.a",
        ("double", "float"),
    ),
]


@pytest.mark.parametrize(
    ("src", "dst", "path", "type_texts"),
    REJECTED_CASTS,
    ids=[f"{c[0]}->{c[1]}" for c in REJECTED_CASTS],
)
def test_reconcile_rejects_lossy_casts_naming_column_and_types(
    src: pa.DataType, dst: pa.DataType, path: str, type_texts: tuple[str, str]
) -> None:
    with pytest.raises(SchemaMismatchError) as e:
        reconcile_write_schema(pa.schema([("c", src)]), pa.schema([("c", dst)]), merge_schema=False)
    message = str(e.value)
    assert repr(path) in message
    assert all(text in message for text in type_texts)


def test_reconcile_rejects_nested_struct_field_mismatches() -> None:
    table = pa.schema(
        [("s", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.int32(), False)]))]
    )
    extra = pa.schema([("s", pa.struct([("a", pa.int32()), ("b", pa.int32()), ("z", pa.int8())]))])
    with pytest.raises(SchemaMismatchError, match=r"s\.z"):
        reconcile_write_schema(extra, table, merge_schema=True)
    missing = pa.schema([("s", pa.struct([("a", pa.int32())]))])
    with pytest.raises(SchemaMismatchError, match=r"'b'"):
        reconcile_write_schema(missing, table, merge_schema=False)


# --------------------------------------------------------------------------------------------
# conform_write_batch
# --------------------------------------------------------------------------------------------


def test_conform_write_renames_reorders_casts_and_fills_missing_columns() -> None:
    spark = StructType(
        [
            StructField("TS", TimestampType()),
            StructField("name", StringType()),
            StructField("ID", LongType(), False),
            StructField("vec", ArrayType(FloatType())),
        ]
    )
    incoming = _spark_batch_schema(spark, tz="America/Los_Angeles", large=True)
    instant = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([instant, None], pa.timestamp("us", "UTC")).cast(incoming.field("TS").type),
            pa.array(["x", None], pa.large_string()),
            pa.array([1, 2], pa.int64()),
            pa.array([[1.0, 2.0], None], incoming.field("vec").type),
        ],
        schema=incoming,
    )
    target = reconcile_write_schema(incoming, TABLE, merge_schema=False)
    out = conform_write_batch(batch, target)
    assert out.schema.equals(TABLE, check_metadata=True)
    assert out.to_pydict() == {
        "id": [1, 2],
        "Name": ["x", None],
        "score": [None, None],
        "vec": [[1.0, 2.0], None],
        "ts": [instant, None],
    }
    # Child names match the table exactly (pyarrow's equality would ignore them).
    assert out.column("vec").type.value_field.name == TABLE.field("vec").type.value_field.name


def test_conform_write_keeps_identical_columns_untouched() -> None:
    batch = _batch(a=pa.array([1, 2]), b=pa.array(["x", "y"]))
    out = conform_write_batch(batch, batch.schema)
    for before, after in zip(batch.columns, out.columns, strict=True):
        assert [b.address for b in after.buffers() if b] == [
            b.address for b in before.buffers() if b
        ]


def test_conform_write_missing_non_nullable_column_fails() -> None:
    with pytest.raises(SchemaMismatchError, match="'id'"):
        conform_write_batch(_batch(score=pa.array([1.0], pa.float32())), TABLE)


def test_conform_write_unknown_column_fails() -> None:
    batch = _batch(id=pa.array([1], pa.int32()), other=pa.array([1]))
    with pytest.raises(SchemaMismatchError, match="'other'"):
        conform_write_batch(batch, TABLE)


@pytest.mark.parametrize(
    ("dst", "value"),
    [
        (pa.int32(), 2**31),
        (pa.int8(), -129),
        (pa.uint8(), -1),
        (pa.uint32(), 2**32),
        (pa.float32(), 2**24 + 1),
    ],
    ids=str,
)
def test_conform_write_integer_out_of_range_fails(dst: pa.DataType, value: int) -> None:
    with pytest.raises(SchemaMismatchError) as e:
        conform_write_batch(_batch(n=pa.array([1, value], pa.int64())), pa.schema([("n", dst)]))
    assert "'n'" in str(e.value)
    assert "int64" in str(e.value)
    assert str(dst) in str(e.value)


INT_TARGETS = [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=20),
    dst=st.sampled_from(INT_TARGETS),
)
def test_integer_casts_never_wrap(values: list[int | None], dst: pa.DataType) -> None:
    batch = _batch(n=pa.array(values, pa.int64()))
    info = (
        (0, 2**dst.bit_width - 1)
        if pa.types.is_unsigned_integer(dst)
        else (-(2 ** (dst.bit_width - 1)), 2 ** (dst.bit_width - 1) - 1)
    )
    fits = all(v is None or info[0] <= v <= info[1] for v in values)
    try:
        out = conform_write_batch(batch, pa.schema([("n", dst)]))
    except SchemaMismatchError:
        assert not fits
    else:
        assert fits
        assert out.column(0).to_pylist() == values


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(10**12), 10**12)), max_size=10))
def test_long_to_decimal_is_exact_or_fails(values: list[int | None]) -> None:
    dst = pa.decimal128(9, 2)
    batch = _batch(n=pa.array(values, pa.int64()))
    try:
        out = conform_write_batch(batch, pa.schema([("n", dst)]))
    except SchemaMismatchError:
        assert any(v is not None and abs(v) >= 10**7 for v in values)
    else:
        assert out.column(0).to_pylist() == [
            None if v is None else decimal.Decimal(v) for v in values
        ]


def test_conform_write_decimals_keep_every_digit() -> None:
    src = pa.array([decimal.Decimal("1.20"), decimal.Decimal("-3.40"), None], pa.decimal128(10, 2))
    ok = conform_write_batch(_batch(d=src), pa.schema([("d", pa.decimal128(3, 1))]))
    assert ok.column(0).to_pylist() == [decimal.Decimal("1.2"), decimal.Decimal("-3.4"), None]
    with pytest.raises(SchemaMismatchError, match="'d'"):
        conform_write_batch(
            _batch(d=pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2))),
            pa.schema([("d", pa.decimal128(10, 1))]),
        )
    with pytest.raises(SchemaMismatchError, match="'d'"):
        conform_write_batch(
            _batch(d=pa.array([decimal.Decimal("123.25")], pa.decimal128(10, 2))),
            pa.schema([("d", pa.decimal128(4, 2))]),
        )


def test_conform_write_decimal_back_into_uint64() -> None:
    back = conform_write_batch(
        _batch(u=pa.array([decimal.Decimal(2**64 - 1), None], pa.decimal128(20, 0))),
        pa.schema([("u", pa.uint64())]),
    )
    assert back.column(0).to_pylist() == [2**64 - 1, None]
    with pytest.raises(SchemaMismatchError, match="'u'"):
        conform_write_batch(
            _batch(u=pa.array([decimal.Decimal(-1)], pa.decimal128(20, 0))),
            pa.schema([("u", pa.uint64())]),
        )


def _misaligned_decimals(values: list[decimal.Decimal | None], t: pa.DataType) -> pa.Array:
    """Decimals whose value buffer starts at an address that is 8 mod 16, as Spark's can (its
    Arrow buffers are only 8-byte aligned)."""
    src = pa.array(values, t)
    size = len(src) * t.byte_width
    raw = pa.allocate_buffer(size + 16)
    start = (8 - raw.address) % 16
    memoryview(raw)[start : start + size] = memoryview(src.buffers()[1])[:size]
    validity = src.buffers()[0]
    out = pa.Array.from_buffers(t, len(src), [validity, raw.slice(start, size)], src.null_count)
    assert out.buffers()[1].address % 16 == 8
    assert out.to_pylist() == values
    return out


def _decimal_addresses(arr: pa.Array) -> list[int]:
    """Addresses of the value buffers of the decimal arrays in ``arr``, nested ones too."""
    t = arr.type
    if pa.types.is_decimal(t):
        return [arr.buffers()[1].address]
    if pa.types.is_struct(t):
        return [a for i in range(t.num_fields) for a in _decimal_addresses(arr.field(i))]
    if pa.types.is_map(t):
        return _decimal_addresses(arr.keys) + _decimal_addresses(arr.items)
    if pa.types.is_list(t):
        return _decimal_addresses(arr.values)
    return []


def test_conform_write_realigns_decimals_so_that_lance_can_write_them(tmp_path: Path) -> None:
    # Lance (arrow-rs) panics in write_fragments on a decimal buffer that is not 16-byte
    # aligned ("Memory pointer from external source (e.g, FFI) is not aligned").
    values = [decimal.Decimal("9999999999999999999999999999.9999999999"), None]
    values += [decimal.Decimal("-1E-10"), decimal.Decimal(0)]
    dec = _misaligned_decimals(values, pa.decimal128(38, 10))
    offsets = pa.array([0, 1, 1, 3, 4], pa.int32())
    mask = pa.array([False, True, False, False])
    widened = [decimal.Decimal("-12.34"), None, decimal.Decimal("0.01"), decimal.Decimal(0)]
    batch = _batch(
        dec=dec,
        st=pa.StructArray.from_arrays([dec, pa.array(range(4))], names=["d", "i"], mask=mask),
        lst=pa.ListArray.from_arrays(offsets, dec, mask=mask),
        m=pa.MapArray.from_arrays(offsets, pa.array(["a", "b", "c", "d"]), dec),
        cast=_misaligned_decimals(widened, pa.decimal128(10, 2)),  # a cast, not a pass-through
    )
    target = batch.schema.set(4, pa.field("cast", pa.decimal128(38, 2)))
    for first in (0, 1):
        rows = batch.slice(first)
        out = conform_write_batch(rows, target)
        assert out.to_pylist() == rows.to_pylist()
        assert all(a % 16 == 0 for c in out.columns for a in _decimal_addresses(c))
        uri = str(tmp_path / f"t{first}")
        fragments = write_fragments(pa.Table.from_batches([out]), uri)
        ds = LanceDataset.commit(uri, LanceOperation.Overwrite(out.schema, fragments))
        assert ds.to_table().to_pylist() == rows.to_pylist()


def test_conform_write_copies_only_misaligned_decimals() -> None:
    aligned = pa.array([decimal.Decimal("1.5"), None], pa.decimal128(10, 2))
    assert aligned.buffers()[1].address % 16 == 0
    batch = _batch(a=aligned, s=pa.StructArray.from_arrays([aligned], names=["d"]))
    out = conform_write_batch(batch, batch.schema)
    assert _decimal_addresses(out.column("a")) == _decimal_addresses(batch.column("a"))
    assert _decimal_addresses(out.column("s")) == _decimal_addresses(batch.column("s"))


def test_conform_write_double_into_float_fails_even_for_exact_values() -> None:
    with pytest.raises(SchemaMismatchError) as e:
        conform_write_batch(_batch(x=pa.array([1.5])), pa.schema([("x", pa.float32())]))
    assert "'x'" in str(e.value)
    assert "double" in str(e.value)
    assert "float" in str(e.value)


def test_conform_write_float_into_float16_checks_values() -> None:
    target = pa.schema([("h", pa.float16()), ("v", pa.list_(pa.float16(), 2))])
    good = _batch(
        h=pa.array([1.5, None, math.nan, -0.25], pa.float32()),
        v=pa.array([[1.0, 2.0], None, [0.5, 4.0], [8.0, 16.0]], pa.list_(pa.float32())),
    )
    out = conform_write_batch(good, target)
    assert out.column("h").cast(pa.float32()).to_pylist()[:2] == [1.5, None]
    assert out.column("v").to_pylist()[0] == [1.0, 2.0]
    with pytest.raises(SchemaMismatchError, match=r"'h'.*0\.1"):
        conform_write_batch(
            _batch(h=pa.array([0.1], pa.float32()), v=good.column("v").slice(0, 1)), target
        )
    with pytest.raises(SchemaMismatchError, match=r"'v\.element'"):
        conform_write_batch(
            _batch(
                h=pa.array([1.0], pa.float32()), v=pa.array([[0.1, 1.0]], pa.list_(pa.float32()))
            ),
            target,
        )


def test_conform_write_vectors_must_have_the_table_length() -> None:
    target = pa.schema([("vec", pa.list_(pa.float32(), 3))])
    ok = conform_write_batch(
        _batch(vec=pa.array([[1, 2, 3], None], pa.list_(pa.float32()))), target
    )
    assert ok.column(0).to_pylist() == [[1.0, 2.0, 3.0], None]
    with pytest.raises(SchemaMismatchError) as e:
        conform_write_batch(
            _batch(vec=pa.array([[1, 2, 3], [1, 2]], pa.list_(pa.float32()))), target
        )
    message = str(e.value)
    assert "'vec'" in message
    assert "length 3" in message
    assert "length 2" in message


def _all_null_vectors_from_spark(offsets: list[int], nulls: list[bool]) -> pa.Array:
    """An array<float> column as Spark sends it when no value is set: its values child has
    length 0 and a data buffer at address 0 (pyarrow 26's cast to fixed_size_list segfaults
    on it)."""
    values = pa.Array.from_buffers(pa.float32(), 0, [None, pa.foreign_buffer(0, 0)])
    offsets_array = pa.array(offsets, pa.int32())
    t = pa.list_(pa.field("element", pa.float32()))
    return pa.ListArray.from_arrays(offsets_array, values, type=t, mask=pa.array(nulls))


def test_conform_write_all_null_vectors_without_a_values_buffer() -> None:
    vectors = _all_null_vectors_from_spark([0, 0, 0], [True, True])
    assert vectors.values.buffers()[1].address == 0
    target = pa.schema([("s", pa.string()), ("v", pa.list_(pa.float32(), 4))])
    out = conform_write_batch(_batch(s=pa.array(["a", "b"]), v=vectors), target)
    assert out.schema.equals(target)
    assert out.to_pydict() == {"s": ["a", "b"], "v": [None, None]}
    assert out.column("v").null_count == 2
    # one empty (not null) list among them: the usual length error
    with pytest.raises(SchemaMismatchError, match=r"'v'.*length 4.*length 0"):
        conform_write_batch(
            _batch(v=_all_null_vectors_from_spark([0, 0, 0], [True, False])), target
        )
    # into a non-nullable vector column: the usual null error
    required = pa.schema([pa.field("v", pa.list_(pa.float32(), 4), nullable=False)])
    with pytest.raises(SchemaMismatchError, match=r"'v'.*2 null"):
        conform_write_batch(_batch(v=vectors), required)


def test_conform_write_null_into_non_nullable_fails() -> None:
    target = pa.schema([pa.field("id", pa.int32(), nullable=False)])
    with pytest.raises(SchemaMismatchError, match=r"'id'.*1 null"):
        conform_write_batch(_batch(id=pa.array([1, None], pa.int64())), target)
    with pytest.raises(SchemaMismatchError, match=r"'id'.*1 null"):
        conform_write_batch(_batch(id=pa.array([1, None], pa.int32())), target)
    with pytest.raises(SchemaMismatchError, match="'id'"):
        conform_write_batch(_batch(id=pa.nulls(1)), target)
    empty = conform_write_batch(
        _batch(other=pa.array([], pa.int8())).drop_columns(["other"]), target
    )
    assert empty.num_rows == 0


def test_conform_write_checks_nested_nulls_only_where_the_parent_is_valid() -> None:
    item = pa.struct([pa.field("x", pa.int64(), nullable=False)])
    target = pa.schema(
        [
            pa.field("s", item),
            pa.field("l", pa.list_(pa.field("item", pa.int64(), nullable=False))),
            pa.field("m", pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))),
        ]
    )
    ok = _batch(
        s=pa.StructArray.from_arrays(
            [pa.array([1, None])], names=["x"], mask=pa.array([False, True])
        ),
        l=pa.array([[1], None], pa.list_(pa.int64())),
        m=pa.array([[("a", 1)], None], pa.map_(pa.string(), pa.int64())),
    )
    assert conform_write_batch(ok, target).to_pydict()["s"] == [{"x": 1}, None]
    for column, bad, path in [
        ("s", pa.array([{"x": 1}, {"x": None}], pa.struct([("x", pa.int64())])), "s.x"),
        ("l", pa.array([[1, None], None], pa.list_(pa.int64())), "l.element"),
        ("m", pa.array([[("a", None)], None], pa.map_(pa.string(), pa.int64())), "m.value"),
    ]:
        batch = ok.set_column(ok.schema.get_field_index(column), column, bad)
        with pytest.raises(SchemaMismatchError, match=repr(path)):
            conform_write_batch(batch, target)


def test_conform_write_struct_children_match_by_name_ignoring_case() -> None:
    target = pa.schema(
        [("p", pa.struct([("x", pa.float64()), ("y", pa.float64()), ("label", pa.string())]))]
    )
    src = pa.array([{"Y": 2.0, "X": 1.0}], pa.struct([("Y", pa.float32()), ("X", pa.float64())]))
    out = conform_write_batch(_batch(p=src), target)
    assert out.schema.equals(target)
    assert out.column(0).to_pylist() == [{"x": 1.0, "y": 2.0, "label": None}]


def test_conform_write_nested_value_overflow_names_the_column() -> None:
    target = pa.schema([("m", pa.map_(pa.string(), pa.int32()))])
    batch = _batch(m=pa.array([[("a", 2**40)]], pa.map_(pa.string(), pa.int64())))
    with pytest.raises(SchemaMismatchError, match="'m'"):
        conform_write_batch(batch, target)


def test_conform_write_timestamps() -> None:
    instant = dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    la = pa.array([instant], pa.timestamp("us", "UTC")).cast(
        pa.timestamp("us", "America/Los_Angeles")
    )
    out = conform_write_batch(_batch(t=la), pa.schema([("t", pa.timestamp("ns", "UTC"))]))
    assert out.column(0).cast(pa.timestamp("us", "UTC")).to_pylist() == [instant]
    with pytest.raises(SchemaMismatchError, match="'t'"):
        conform_write_batch(_batch(t=la), pa.schema([("t", pa.timestamp("ms", "UTC"))]))
    with pytest.raises(SchemaMismatchError, match="'t'"):
        conform_write_batch(_batch(t=la), pa.schema([("t", pa.timestamp("us"))]))


def test_conform_write_into_dictionary_and_extension_columns() -> None:
    target = pa.schema([("d", pa.dictionary(pa.int32(), pa.string())), ("j", pa.json_())])
    out = conform_write_batch(
        _batch(
            d=pa.array(["a", None, "a"], pa.large_string()), j=pa.array(['{"a": 1}', None, "[]"])
        ),
        target,
    )
    assert out.schema.equals(target)
    assert out.column("d").to_pylist() == ["a", None, "a"]
    assert out.column("j").to_pylist() == ['{"a": 1}', None, "[]"]


def test_round_trip_through_spark_types() -> None:
    """A Lance table read into Spark and written back arrives unchanged."""
    table = pa.schema(
        [
            pa.field("u8", pa.uint8()),
            pa.field("u64", pa.uint64()),
            pa.field("h", pa.float16()),
            pa.field("fsb", pa.binary(2)),
            pa.field("vec", pa.list_(pa.float32(), 2)),
            pa.field("ts", pa.timestamp("ns", "UTC")),
            pa.field("d64", pa.date64()),
            pa.field("t", pa.time32("ms")),
        ]
    )
    rows = pa.RecordBatch.from_pylist(
        [
            {
                "u8": 255,
                "u64": 2**64 - 1,
                "h": 0.5,
                "fsb": b"ab",
                "vec": [1.0, 2.0],
                "ts": dt.datetime(2024, 1, 1, tzinfo=UTC),
                "d64": dt.date(2024, 1, 1),
                "t": dt.time(1, 2, 3, 456000),
            },
        ],
        schema=table,
    )
    read = conform_read_batch(rows, arrow_read_schema(table))
    spark = spark_schema_from_arrow(table)
    # What Spark would hand the writer for those Spark types.
    incoming = _spark_batch_schema(spark, tz="Asia/Tokyo", large=True)
    written = pa.RecordBatch.from_arrays(
        [c.cast(f.type) for c, f in zip(read.columns, incoming, strict=True)], schema=incoming
    )
    target = reconcile_write_schema(incoming, table, merge_schema=False)
    assert conform_write_batch(written, target).to_pylist() == rows.to_pylist()


# --- column names a table can hold ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ([("id", pa.int64()), ("ID", pa.int64())], ["'id'", "'ID'", "case"]),
        ([("a", pa.int64()), ("a", pa.int64())], ["'a'", "twice"]),
        ([("s", pa.struct([("x", pa.int8()), ("X", pa.int8())]))], ["'s.x'", "'s.X'"]),
        (
            [("l", pa.list_(pa.struct([("Ab", pa.int8()), ("aB", pa.int8())])))],
            ["'l.Ab'", "'l.aB'"],
        ),
        ([("a.b", pa.int64())], ["'a.b'", "dot"]),
        ([("we`ird", pa.int64())], ["'we`ird'", "backtick"]),
        ([("_rowid", pa.int64())], ["'_rowid'", "reserved"]),
        ([("", pa.int64())], ["''", "empty"]),
        ([("s", pa.struct([("a\x00b", pa.int8())]))], ["NUL"]),
    ],
)
def test_names_a_table_cannot_use_are_rejected_naming_them(
    fields: list[tuple[str, pa.DataType]], named: list[str]
) -> None:
    schema = pa.schema(fields)
    for check in (
        lambda: check_column_names(schema),
        lambda: arrow_schema_for_new_table(schema, vector_sizes={}),
        lambda: reconcile_write_schema(schema, pa.schema([("z", pa.int8())]), merge_schema=True),
    ):
        with pytest.raises(SchemaMismatchError) as e:
            check()
        for fragment in named:
            assert fragment in str(e.value)


def test_odd_names_a_table_can_use_pass() -> None:
    odd = ["a,b", "sp ace", 'qu"ote', "s'q", "ünï", "select", "from", "1lead", " x ", "_fragid"]
    nested = pa.struct([("a.b", pa.int8()), ("we`ird", pa.int8()), ("A", pa.int8())])
    schema = pa.schema([*((n, pa.int64()) for n in odd), ("s", nested)])
    check_column_names(schema)
    assert arrow_schema_for_new_table(schema, vector_sizes={}).names == schema.names


def test_an_append_may_name_case_twins_the_table_already_has() -> None:
    table = pa.schema([("a", pa.int64()), ("A", pa.string())])
    incoming = pa.schema(
        [("A", pa.string()), ("a", pa.int64()), ("b", pa.int8()), ("B", pa.int8())]
    )
    with pytest.raises(SchemaMismatchError, match="'b' and 'B'"):
        reconcile_write_schema(incoming, table, merge_schema=True)


def test_blob_columns_are_binary_for_spark_and_take_binary_on_write() -> None:
    import lance

    from lance_spark.source.types import as_blob_columns, blob_columns, is_blob_field

    incoming = pa.schema([pa.field("id", pa.int64()), pa.field("Img", pa.binary())])
    marked = as_blob_columns(incoming, ["img"])  # Spark lower-cases option keys
    assert blob_columns(marked) == ["Img"] and marked.field("Img").type == pa.large_binary()
    with pytest.raises(InvalidOptionError, match=r"column 'id' has type int64"):
        as_blob_columns(incoming, ["id"])
    with pytest.raises(SchemaMismatchError, match=r"'nope'.*columns: id, Img"):
        as_blob_columns(incoming, ["nope"])
    v2 = pa.field("Img", lance.blob_array([b"a"]).type)
    assert is_blob_field(v2)
    table = pa.schema([incoming.field("id"), v2])
    assert spark_schema_from_arrow(table)["Img"].dataType == BinaryType()
    batch = pa.record_batch([pa.array([1, 2]), pa.array([b"xy", None])], schema=incoming)
    out = conform_write_batch(batch, reconcile_write_schema(incoming, table, merge_schema=False))
    assert out.column(1).storage.field("data").to_pylist() == [b"xy", None]
    assert out.column(1).is_null().to_pylist() == [False, True]
    strings = pa.schema([incoming.field("id"), pa.field("Img", pa.string())])
    with pytest.raises(SchemaMismatchError, match="blob column takes binary"):
        reconcile_write_schema(strings, table, merge_schema=False)
