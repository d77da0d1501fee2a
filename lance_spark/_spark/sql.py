"""Spark SQL text from Python: Spark's own ``spark.sql`` beside the SQL front, a statement
with a DataFrame in it, and quoting of identifiers, literals and option lists."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lance_spark._spark.session import is_connect

PLAIN_SQL_ATTR = "_lance_spark_plain_sql"


def plain_sql(spark: SparkSession) -> Callable[..., DataFrame]:
    """Spark's own ``spark.sql`` of ``spark`` (the SQL front keeps it here when it wraps it):
    what the connector's own catalog statements run with, never the front's handling."""
    found: Callable[..., DataFrame] = getattr(spark, PLAIN_SQL_ATTR, spark.sql)
    return found


def sql_with_relation(
    spark: SparkSession, statement: Callable[[str], str], frame: DataFrame
) -> DataFrame:
    """Run the SQL ``statement(name)`` (Spark's own ``spark.sql``) in which ``name`` is
    ``frame``, for this statement only. A temporary view would not do: dropping it uncaches
    every plan that gives the same rows, a cache the caller made of ``frame`` too (Spark's
    ``Catalog.dropTempView``). Classic: a view dropped from the session catalog alone;
    Connect: ``spark.sql``'s DataFrame arguments (sent with the statement, no view)."""
    sql = plain_sql(spark)
    if is_connect(spark):
        mark = f"lance_spark_relation_{uuid.uuid4().hex}"
        # spark.sql formats the text with str.format: the statement's own braces doubled.
        text = statement(mark).replace("{", "{{").replace("}", "}}").replace(mark, "{relation}")
        return sql(text, relation=frame)
    name = f"lance_spark_relation_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(name)
    try:
        return sql(statement(name))
    finally:
        java: Any = spark
        java._jsparkSession.sessionState().catalog().dropTempView(name)


def option_text(value: Any) -> str:
    """An option value as Spark passes it to a data source (``true``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks, inner ones doubled), for ``F.col``."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_pairs(pairs: Mapping[str, str]) -> str:
    """``'k1' = 'v1', 'k2' = 'v2'``: the list of an OPTIONS, WITH or TBLPROPERTIES clause."""
    return ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in pairs.items())
