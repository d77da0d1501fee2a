"""Pushed-down filters give exactly Spark's answer.

The same rows are loaded twice: as a Lance table read through the connector (filters pushed
to Lance) and as a plain Spark DataFrame (Spark evaluates). Every filter must select the
same rows from both, for a generated variety of data and predicates.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

STRINGS = [
    "",
    "a",
    "A",
    "abc",
    "ab%c",
    "a_c",
    "it's",
    "back\\slash",
    "50%",
    "_x",
    "naïve",
    "日本語",
    "emoji 🐍",
    "line\nbreak",
    "%",
    "_",
    "\\",
    "'",
    "a'b''c",
    "tab\tx",
    "ABC",
    "abc ",
]
DOUBLES = [0.0, -0.0, 1.5, -1.5, math.nan, math.inf, -math.inf, 1e300, -2.5e-300, 3.0]


def _rows(n: int, seed: int) -> pa.Table:
    rnd = random.Random(seed)
    base = datetime(2024, 3, 10, 6, 30, tzinfo=UTC)

    def maybe(value: object) -> object:
        return None if rnd.random() < 0.15 else value

    ints = [maybe(rnd.choice([0, 1, -1, 7, 42, 2**31, -(2**62), 2**63 - 1])) for _ in range(n)]
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "i": pa.array(ints, pa.int64()),
            "small": pa.array([maybe(rnd.randint(-5, 5)) for _ in range(n)], pa.int32()),
            "d": pa.array([maybe(rnd.choice(DOUBLES)) for _ in range(n)], pa.float64()),
            "f": pa.array(
                [maybe(rnd.choice([0.5, -0.0, math.nan, 2.25])) for _ in range(n)], pa.float32()
            ),
            "s": pa.array([maybe(rnd.choice(STRINGS)) for _ in range(n)], pa.string()),
            "b": pa.array([maybe(rnd.random() < 0.5) for _ in range(n)], pa.bool_()),
            "day": pa.array(
                [maybe(date(2024, 1, 1) + timedelta(days=rnd.randint(0, 60))) for _ in range(n)],
                pa.date32(),
            ),
            "ts": pa.array(
                [maybe(base + timedelta(hours=rnd.randint(-48, 48))) for _ in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array(
                [
                    maybe((base + timedelta(minutes=rnd.randint(0, 300))).replace(tzinfo=None))
                    for _ in range(n)
                ],
                pa.timestamp("us"),
            ),
            "price": pa.array(
                [maybe(Decimal(rnd.randint(-1000, 1000)).scaleb(-2)) for _ in range(n)],
                pa.decimal128(10, 2),
            ),
            "weird name": pa.array([maybe(rnd.randint(0, 3)) for _ in range(n)], pa.int64()),
            "select": pa.array([maybe(rnd.choice(["x", "y"])) for _ in range(n)], pa.string()),
            "st": pa.array(
                [maybe({"a": rnd.randint(0, 3), "name": rnd.choice(STRINGS)}) for _ in range(n)],
                pa.struct([("a", pa.int64()), ("name", pa.string())]),
            ),
        }
    )


def _lit(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "double('NaN')"
        if math.isinf(value):
            return "double('Infinity')" if value > 0 else "double('-Infinity')"
        return f"double({value!r})"
    if isinstance(value, int):
        return f"{value}L" if abs(value) > 2**31 else str(value)
    if isinstance(value, Decimal):
        return f"CAST({value} AS DECIMAL(10,2))"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ')}'"
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    text = (
        str(value)
        .replace("\\", "\\\\")
        .replace("'", "\\'")
        .replace("\n", "\\n")
        .replace("\t", "\\t")
    )
    return f"'{text}'"


COLUMNS = {
    "i": "`i`",
    "small": "`small`",
    "d": "`d`",
    "f": "`f`",
    "s": "`s`",
    "b": "`b`",
    "day": "`day`",
    "ts": "`ts`",
    "ntz": "`ntz`",
    "price": "`price`",
    "weird name": "`weird name`",
    "select": "`select`",
    "st.a": "st.a",
    "st.name": "st.name",
}


def _values(table: pa.Table, column: str) -> list[object]:
    if column.startswith("st."):
        vals = [None if v is None else v[column[3:]] for v in table["st"].to_pylist()]
    else:
        vals = table[column].to_pylist()
    extra: list[object] = {
        "d": [math.nan, -0.0, 0.0, math.inf],
        "f": [math.nan, 0.0],
        "s": ["a%", "%", "_", "\\"],
    }.get(column, [])
    return [v for v in vals if v is not None] + extra


def _predicates(table: pa.Table, count: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out: list[str] = []
    for _ in range(count):
        name = rnd.choice(list(COLUMNS))
        col = COLUMNS[name]
        values = _values(table, name)
        v = rnd.choice(values)
        kind = rnd.randrange(12)
        if kind == 0:
            out.append(f"{col} = {_lit(v)}")
        elif kind == 1:
            out.append(f"{col} <=> {_lit(rnd.choice([v, None]))}")
        elif kind == 2:
            out.append(f"{col} {rnd.choice(['>', '>=', '<', '<='])} {_lit(v)}")
        elif kind == 3:
            items = [_lit(rnd.choice([*values, None])) for _ in range(rnd.randint(1, 4))]
            out.append(f"{col} IN ({', '.join(items)})")
        elif kind == 4:
            out.append(f"{col} IS {rnd.choice(['', 'NOT '])}NULL")
        elif kind == 5:
            out.append(f"NOT ({col} = {_lit(v)})")
        elif kind == 6 and isinstance(v, str):
            piece = v[: rnd.randint(0, len(v))]
            escaped = piece.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = rnd.choice([f"{escaped}%", f"%{escaped}", f"%{escaped}%"])
            out.append(f"{col} LIKE {_lit(pattern)}")
        elif kind == 7:
            items = [_lit(rnd.choice(values)) for _ in range(rnd.randint(1, 3))]
            out.append(f"NOT ({col} IN ({', '.join(items)}))")
        elif kind == 8:
            other = rnd.choice(list(COLUMNS))
            out.append(f"{col} IS NOT NULL AND {COLUMNS[other]} IS NULL")
        elif kind == 9:
            out.append(f"NOT ({col} <=> {_lit(v)})")
        elif kind == 10:
            out.append(f"({col} = {_lit(v)}) AND NOT ({col} > {_lit(rnd.choice(values))})")
        else:
            out.append(f"{col} != {_lit(v)}")
    return out


@pytest.fixture(scope="module")
def frames(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DataFrame, DataFrame, pa.Table]:
    table = _rows(400, seed=7)
    uri = str(tmp_path_factory.mktemp("filters") / "t.lance")
    # several fragments so pruning by fragment statistics is exercised
    lance.write_dataset(table, uri, max_rows_per_file=100)
    lance_df = spark.read.format("lance").load(uri)
    plain_df = spark.createDataFrame(table)
    return lance_df, plain_df, table


def _ids(df: DataFrame, predicate: str) -> list[int]:
    return sorted(r.id for r in df.filter(predicate).select("id").collect())


def test_generated_filters_match_spark(frames: tuple[DataFrame, DataFrame, pa.Table]) -> None:
    lance_df, plain_df, table = frames
    mismatches = []
    for predicate in _predicates(table, count=120, seed=11):
        expected = _ids(plain_df, predicate)
        got = _ids(lance_df, predicate)
        if got != expected:
            mismatches.append((predicate, len(expected), len(got)))
    assert mismatches == []


@pytest.mark.parametrize(
    "predicate",
    [
        "d = double('NaN')",
        "d > 1e308",
        "d >= double('NaN')",
        "d < double('NaN')",
        "d = 0.0",
        "d = -0.0",
        "f = float('NaN')",
        "f <= 0.0",
        "s = 'it\\'s'",
        "s = 'back\\\\slash'",
        "s LIKE 'ab\\%%'",
        "s LIKE '%\\_%'",
        "s LIKE '%\\\\%'",
        "s LIKE '日本%'",
        "s = 'line\\nbreak'",
        "`weird name` = 2",
        "`select` = 'x'",
        "st.a = 2",
        "st.name LIKE 'a%'",
        "ts > TIMESTAMP '2024-03-10 06:30:00'",
        "ntz <= TIMESTAMP_NTZ '2024-03-10 08:00:00'",
        "day = DATE '2024-01-15'",
        "price > CAST(1.50 AS DECIMAL(10,2))",
        "price IN (CAST(1.50 AS DECIMAL(10,2)), CAST(-3.00 AS DECIMAL(10,2)))",
        "i = 9223372036854775807L",
        "i IN (1, NULL)",
        "NOT (i IN (1, NULL))",
        "b",
        "NOT b",
        "b <=> NULL",
    ],
)
def test_edge_filters_match_spark(
    frames: tuple[DataFrame, DataFrame, pa.Table], predicate: str
) -> None:
    lance_df, plain_df, _ = frames
    assert _ids(lance_df, predicate) == _ids(plain_df, predicate)


def _plan(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_filters_are_pushed_to_lance(frames: tuple[DataFrame, DataFrame, pa.Table]) -> None:
    lance_df, _, _ = frames
    # Filters the source accepts are not re-evaluated: Spark drops its Filter node.
    pushed = _plan(lance_df.filter("i = 7 AND s LIKE 'ab%' AND ts IS NOT NULL"))
    assert "Filter " not in pushed, pushed
    kept = _plan(lance_df.filter("i % 2 = 0"))
    assert "Filter " in kept, kept
