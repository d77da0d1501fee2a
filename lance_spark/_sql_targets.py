"""Which table a SQL statement names: a catalog table created ``USING lance`` or a path
identifier ``lance.`/data/pets.lance``` (also ``s3://...``). Anything else is not ours."""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from sqlglot import expressions as exp

from lance_spark._reader import uri_from_schema
from lance_spark._source import FORMAT_NAME, _normalise_uri
from lance_spark.table import LanceTable


def path_of(table: exp.Table) -> str | None:
    """The path of a ``lance.`<path>``` identifier, else None."""
    if table.args.get("catalog") is not None or table.db.lower() != FORMAT_NAME:
        return None
    return table.name or None


def lance_table(spark: SparkSession, table: exp.Table) -> LanceTable | None:
    """The Lance table ``table`` names, or None when it is not a Lance table (or absent):
    then the statement belongs to Spark."""
    path = path_of(table)
    if path is not None:
        return LanceTable.forPath(spark, _normalise_uri(path))
    name = table_name(table)
    try:
        schema = spark.table(name).schema
    except AnalysisException:
        return None  # not found: Spark's own error will say so
    location = uri_from_schema(schema)
    if not location:
        return None
    return LanceTable.forPath(spark, _normalise_uri(location))


def table_name(table: exp.Table) -> str:
    """The table's multi-part name as Spark SQL (no alias, no time travel)."""
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p]
    return ".".join(p.sql(dialect="spark") for p in parts)
