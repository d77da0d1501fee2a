"""Filter pushdown of ``LanceReader`` (no JVM): Spark's own ``pushFilters`` pushes nothing
(a reader planned with filters is reused by Spark for the DataFrame's next query,
SPARK-58551), the companion's ``push_filters`` pushes what Lance evaluates exactly."""

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


def test_spark_pushes_nothing_into_the_reader() -> None:
    # Not overridden: pyspark 4.3's plan_data_source_read accepts it with pushdown off
    # (no DATA_SOURCE_PUSHDOWN_DISABLED), and with pushdown on every filter stays Spark's.
    reader = _reader()
    assert LanceReader.pushFilters is DataSourceReader.pushFilters
    filters = [GreaterThan(("id",), 3), IsNull(("id",))]
    assert list(reader.pushFilters(filters)) == filters
    assert reader.pushed_filter is None


def test_the_companion_pushes_filters_lance_evaluates_exactly() -> None:
    reader = _reader()
    exact, other, on_list = GreaterThan(("id",), 3), IsNull(("id",)), EqualTo(("tags",), ["a"])
    rejected = list(reader.push_filters([exact, other, on_list]))
    assert rejected == [on_list]  # the same object, as Spark requires
    assert reader.pushed_filter is not None and "`id` > 3" in reader.pushed_filter
    assert "IS NULL" in reader.pushed_filter
    # Shipped to the executors with what it pushed.
    assert pickle.loads(pickle.dumps(reader)).pushed_filter == reader.pushed_filter
