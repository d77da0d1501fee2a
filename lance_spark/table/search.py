"""``LanceTable.search`` and ``LanceTable.nearest``: search results as Spark DataFrames.

The driver plans (:func:`lance_spark.source.search_plans.plan_search`: version pinned, arguments
checked); Spark tasks search. ``search`` is one query, run by a one-row ``mapInArrow``; the
nearest-neighbour join runs ``mapInArrow`` over the query DataFrame itself, so the queries
and the table stay where they are: each task opens the pinned version and asks Lance for
the neighbours of its rows, a batch of query vectors per Lance call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import ArrayType, NumericType, StructType

from lance_spark.errors import ColumnNotFoundError, InvalidOptionError
from lance_spark.source import search_plans as _search
from lance_spark.source.search_plans import SearchPlan
from lance_spark.table.context import TableContext


def search(table: TableContext, plan: SearchPlan) -> DataFrame:
    """See :meth:`LanceTable.search`: ``plan``'s one query, in one Spark task."""
    task = functools.partial(_one_search, plan)
    return table.spark.range(1, numPartitions=1).mapInArrow(task, plan.spark_schema)


def nearest(
    table: TableContext, queries: DataFrame, plan: SearchPlan, *, query_column: str | None
) -> DataFrame:
    """See :meth:`LanceTable.nearest`: ``plan`` (made with ``vector_from_rows``) for every
    row of ``queries``, in the queries' own partitions."""
    query_schema = queries.schema
    name = _query_column(query_schema, query_column or plan.column or "")
    schema = _search.nearest_schema(plan, query_schema)
    _check_distinct_names(query_schema, plan)
    task = functools.partial(_nearest_task, plan, name)
    return queries.mapInArrow(task, schema)


def _one_search(plan: SearchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:  # the one input row: search once
        pass
    yield from _search.search_batches(plan)


def _nearest_task(
    plan: SearchPlan, query_column: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    yield from _search.nearest_batches(plan, query_column, batches)


def _query_column(schema: StructType, name: str) -> str:
    matches = [f for f in schema.fields if f.name == name]
    if not matches:
        folded = [f for f in schema.fields if f.name.lower() == name.lower()]
        if len(folded) != 1:
            raise ColumnNotFoundError(
                f"the query DataFrame has no column {name!r} (the query vectors; name it with "
                f"query_column=); its columns: {', '.join(schema.fieldNames())}"
            )
        matches = folded
    f = matches[0]
    if not (isinstance(f.dataType, ArrayType) and isinstance(f.dataType.elementType, NumericType)):
        raise InvalidOptionError(
            f"query column {f.name!r} is {f.dataType.simpleString()}, not an array of numbers "
            "(the query vectors)"
        )
    return f.name


def _check_distinct_names(queries: StructType, plan: SearchPlan) -> None:
    table_names = {n.lower() for n in (*plan.columns, _search.DISTANCE_COLUMN, _search.RANK_COLUMN)}
    clashes = [f.name for f in queries.fields if f.name.lower() in table_names]
    if clashes:
        raise InvalidOptionError(
            f"the query DataFrame's column(s) {', '.join(repr(c) for c in clashes)} would clash "
            "with the table's columns in the result; rename them "
            "(queries.withColumnRenamed(...)) or choose the table's columns with columns=[...]"
        )
