"""The table API (:class:`LanceTable`) and its engines: row-level changes, merge, diff, columns.

Imports :mod:`lance_spark.source`, never :mod:`lance_spark.sql`.
"""

from lance_spark.table.builder import LanceTableBuilder
from lance_spark.table.lance_table import LanceTable
from lance_spark.table.merge import LanceMergeBuilder

__all__ = ["LanceMergeBuilder", "LanceTable", "LanceTableBuilder"]
