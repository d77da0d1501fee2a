"""The SQL front: statements on Lance tables that Spark cannot run by itself.

``register(spark)`` wraps ``spark.sql`` of that one session. Each statement is parsed with
sqlglot (Spark dialect); a statement that is not one this module handles, or that does not
parse, goes to Spark unchanged, so its result and its errors are Spark's own.

Handled now: the companion's statements (DESCRIBE HISTORY, RESTORE, ...), handed to its
parser: a running classic session keeps the parser it was built with.

MERGE / UPDATE / DELETE are Spark's own statements, planned by Spark on the companion's
tables (``SupportsRowLevelOperations``) for every client; CREATE / CTAS / REPLACE / DROP / ALTER TABLE, CREATE / DROP INDEX, SHOW TBLPROPERTIES and
DESCRIBE of Lance tables are Spark's own statements, done by the companion's session catalog
(``LanceSessionCatalog``) for every client; OPTIMIZE and CONVERT TO LANCE are the companion's
statements, and ``lance_search`` its table function.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lance_spark._spark import PLAIN_SQL_ATTR, companion_statement
from lance_spark.source.datasource import SessionDefaults
from lance_spark.source.session import DEFAULTS_ATTR
from lance_spark.sql import params

_MARKER = "_lance_spark_sql_installed"
_REPLACE_TABLE = re.compile(r"\s*REPLACE\s+TABLE\s", re.I)


def install(spark: SparkSession, defaults: SessionDefaults) -> None:
    """Wrap ``spark.sql`` of this session (once; ``defaults`` are updated every time)."""
    setattr(spark, DEFAULTS_ATTR, defaults)
    if getattr(spark, _MARKER, False):
        return
    original: Callable[..., DataFrame] = spark.sql
    setattr(spark, PLAIN_SQL_ATTR, original)

    @functools.wraps(original)
    def sql(sqlQuery: str, args: Any = None, **kwargs: Any) -> DataFrame:
        if not kwargs:
            # With args: the statement with its markers bound, for the front's statements
            # only; anything else goes to Spark as given, which binds them itself.
            bound = sqlQuery if args is None else params.bind(sqlQuery, args)
            if bound is not None:
                handled = _dispatch(spark, original, bound)
                if handled is not None:
                    return handled
        return original(sqlQuery, args, **kwargs)

    spark.sql = sql  # type: ignore[method-assign]
    setattr(spark, _MARKER, True)


def _dispatch(spark: SparkSession, run: Callable[..., DataFrame], text: str) -> DataFrame | None:
    """Run ``text`` when it is one of the companion's statements (see
    ``companion_statement``); None leaves it to Spark."""
    call = companion_statement(spark, text)
    return None if call is None else run(call)
