"""lance_spark: Spark's Python data source for Lance tables.

Example::

    import lance_spark
    lance_spark.register(spark)
    df = spark.read.format("lance").load("/data/pets.lance")
    df.write.format("lance").mode("append").save("/data/pets.lance")
"""

from __future__ import annotations

__version__ = "0.1.0"

from lance_spark._merge import LanceMergeBuilder
from lance_spark._session import register
from lance_spark._source import LanceDataSource
from lance_spark.errors import (
    CardinalityViolationError,
    ColumnNotFoundError,
    CommitConflictError,
    ConcurrentModificationError,
    CorruptTableError,
    InvalidOptionError,
    LanceSparkError,
    SchemaMismatchError,
    SecretInConfError,
    SqlSyntaxError,
    TableNotFoundError,
    UnsupportedTypeError,
    VersionNotFoundError,
)
from lance_spark.table import LanceTable

__all__ = [
    "CardinalityViolationError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "ConcurrentModificationError",
    "CorruptTableError",
    "InvalidOptionError",
    "LanceDataSource",
    "LanceMergeBuilder",
    "LanceSparkError",
    "LanceTable",
    "SchemaMismatchError",
    "SecretInConfError",
    "SqlSyntaxError",
    "TableNotFoundError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "__version__",
    "register",
]
