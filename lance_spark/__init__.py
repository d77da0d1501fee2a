"""lance_spark: Spark's Python data source for Lance tables.

Example::

    import lance_spark
    lance_spark.register(spark)
    df = spark.read.format("lance").load("/data/pets.lance")
    df.write.format("lance").mode("append").save("/data/pets.lance")
"""

from __future__ import annotations

# _quiet first: it must run before anything imports lance (see its docstring).
from lance_spark import _quiet, _spark  # noqa: F401  (_quiet: imported for its effect)
from lance_spark._register import configure, register, spark_conf
from lance_spark._spark import JobProgress, companion_enabled, companion_jar
from lance_spark._version import __version__
from lance_spark.errors import (
    ArgumentTypeError,
    BranchNotFoundError,
    CardinalityViolationError,
    ColumnNotFoundError,
    CommitConflictError,
    CompanionNotFoundError,
    ConcurrentModificationError,
    CorruptTableError,
    IndexExistsError,
    InvalidArgumentError,
    InvalidOptionError,
    LanceSparkError,
    PerformanceWarning,
    ReplaceWhereMismatchError,
    SchemaMismatchError,
    SecretInConfError,
    StreamChangeError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedTypeError,
    VersionNotFoundError,
)
from lance_spark.source import LanceDataSource
from lance_spark.table import LanceMergeBuilder, LanceTable, LanceTableBuilder

__all__ = [
    "ArgumentTypeError",
    "BranchNotFoundError",
    "CardinalityViolationError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "CompanionNotFoundError",
    "ConcurrentModificationError",
    "CorruptTableError",
    "IndexExistsError",
    "InvalidArgumentError",
    "InvalidOptionError",
    "JobProgress",
    "LanceDataSource",
    "LanceMergeBuilder",
    "LanceSparkError",
    "LanceTable",
    "LanceTableBuilder",
    "PerformanceWarning",
    "ReplaceWhereMismatchError",
    "SchemaMismatchError",
    "SecretInConfError",
    "StreamChangeError",
    "TableAlreadyExistsError",
    "TableNotFoundError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
    "__version__",
    "companion_enabled",
    "companion_jar",
    "configure",
    "register",
    "spark_conf",
]

# In Spark's Python workers, which import this package to run the data source: keep the
# imported modules out of the garbage collection Spark runs after every call there.
_spark.freeze_worker_heap()
# In a planning worker forked by Spark's own daemon: no BrokenPipeError traceback from it at
# spark.stop() (see _spark.quiet_spark_daemon).
_spark.quiet_spark_daemon()
