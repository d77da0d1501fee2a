"""The SQL front: ``spark.sql`` statements on Lance tables that Spark cannot run by itself.

Imports :mod:`lance_spark.table` and :mod:`lance_spark.source`; only ``_register`` imports it.
"""

from lance_spark.sql.front import install

__all__ = ["install"]
