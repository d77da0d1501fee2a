"""The ``lance`` data source: options, types, filters, planning, reader, writer, commit, staging.

Nothing here imports :mod:`lance_spark.table` or :mod:`lance_spark.sql`.
"""

from lance_spark.source.datasource import FORMAT_NAME, LanceDataSource, SessionDefaults

__all__ = ["FORMAT_NAME", "LanceDataSource", "SessionDefaults"]
