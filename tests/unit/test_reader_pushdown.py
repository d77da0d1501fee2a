"""``LanceReader.pushFilters`` as Spark's read planning sees it (no JVM): not taken for an
override when filter pushdown is off, and pushing filters when Spark calls it."""

from __future__ import annotations

import pickle

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, EqualTo, GreaterThan, IsNull

from lance_spark.source.reader import LanceReader, Projection


def _reader() -> LanceReader:
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))])
    return LanceReader(
        uri="/nowhere.lance",
        version=1,
        table_schema=schema,
        projection=Projection(("id", "tags"), ("id", "tags")),
        storage={},
    )


def test_spark_does_not_refuse_the_reader_with_pushdown_off() -> None:
    # What pyspark 4.3's plan_data_source_read checks before raising
    # DATA_SOURCE_PUSHDOWN_DISABLED (the conf's default is off).
    reader = _reader()
    assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters
    assert LanceReader.pushFilters is DataSourceReader.pushFilters


def test_filters_are_pushed_when_spark_calls_push_filters() -> None:
    reader = _reader()
    exact, other, on_list = GreaterThan(("id",), 3), IsNull(("id",)), EqualTo(("tags",), ["a"])
    rejected = list(reader.pushFilters([exact, other, on_list]))
    assert rejected == [on_list]  # the same object, as Spark requires
    assert reader.pushed_filter is not None and "`id` > 3" in reader.pushed_filter
    assert "IS NULL" in reader.pushed_filter
    # Shipped to the executors with what it pushed.
    assert pickle.loads(pickle.dumps(reader)).pushed_filter == reader.pushed_filter
