"""``LanceTable.detail()`` and ``DESCRIBE DETAIL``: one row describing the table, Delta's
``DESCRIBE DETAIL`` columns where Lance has the fact, plus Lance's own (fragments, storage
format, stable row ids, indexes, tags). Everything comes from the latest manifest, except
``createdAt`` (the oldest surviving version's commit time)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lance_spark.source import dataset, index_builds
from lance_spark.source.types import spark_schema_from_arrow
from lance_spark.table.catalog import TABLE_COMMENT_KEY, properties
from lance_spark.table.context import TableContext

FORMAT = "lance"

# How far an index covers the table (index_builds.describe), in DESCRIBE DETAIL's indexes,
# listIndices and optimizeIndices.
INDEX_COVERAGE_FIELDS = [
    StructField("numIndexedRows", LongType(), False),
    StructField("numUnindexedRows", LongType(), False),  # appended since the last build
    StructField("numSegments", LongType(), False),
]
INDEX_TYPE = StructType(
    [
        StructField("name", StringType(), False),
        StructField("columns", ArrayType(StringType(), False), False),
        StructField("type", StringType(), False),
        *INDEX_COVERAGE_FIELDS,
    ]
)

DETAIL_SCHEMA = StructType(
    [
        StructField("format", StringType(), False),
        StructField("id", StringType(), True),  # Lance tables have no table id
        StructField("name", StringType(), True),  # the catalog name, when opened by name
        StructField("description", StringType(), True),  # the table comment
        StructField("location", StringType(), False),
        StructField("version", LongType(), False),
        StructField("createdAt", TimestampType(), True),
        StructField("lastModified", TimestampType(), True),
        StructField("partitionColumns", ArrayType(StringType(), False), False),
        StructField("numFragments", LongType(), False),
        StructField("numFiles", LongType(), False),
        StructField("numDeletionFiles", LongType(), False),
        StructField("sizeInBytes", LongType(), False),
        StructField("numRows", LongType(), False),
        StructField("numDeletedRows", LongType(), False),
        StructField("schema", StringType(), False),
        StructField("indexes", ArrayType(INDEX_TYPE, False), False),
        StructField("tags", MapType(StringType(), LongType(), False), False),
        StructField("storageFormatVersion", StringType(), False),
        StructField("stableRowIds", BooleanType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
    ]
)


def detail(table: TableContext, *, name: str | None = None) -> DataFrame:
    """See :meth:`LanceTable.detail`."""
    return table.spark.createDataFrame([detail_row(table, name=name)], DETAIL_SCHEMA)


def detail_row(table: TableContext, *, name: str | None = None) -> tuple[Any, ...]:
    """The row of :func:`detail` (``DETAIL_SCHEMA``); needs no Spark session."""
    ds = table.open()
    fragments = ds.get_fragments()
    data_files = [f for fragment in fragments for f in fragment.data_files()]
    deletion_files = sum(1 for fragment in fragments if fragment.metadata.deletion_file)
    deleted = sum(int(fragment.metadata.num_deletions or 0) for fragment in fragments)
    size = sum(int(f.file_size_bytes or 0) for f in data_files)
    log = dataset.VersionLog(ds, uri=table.uri)  # two manifests read, not every one
    numbers = log.numbers()
    tags: dict[str, Any] = ds.tags.list()
    config = properties(ds)
    return (
        FORMAT,
        None,
        name,
        config.get(TABLE_COMMENT_KEY),
        table.uri,
        int(ds.version),
        log.timestamp(numbers[0]) if numbers else None,
        log.timestamp(int(ds.version)),
        [],
        len(fragments),
        len(data_files),
        deletion_files,
        size,
        int(ds.count_rows()),
        deleted,
        spark_schema_from_arrow(ds.schema).simpleString(),
        index_builds.describe(ds),
        {str(k): int(v["version"]) for k, v in tags.items()},
        str(ds.data_storage_version),
        bool(ds.has_stable_row_ids),
        config,
    )
