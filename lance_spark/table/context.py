"""``TableContext``: what every table operation needs (session, location, storage options)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import lance
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from lance_spark import _spark
from lance_spark.errors import TableNotFoundError
from lance_spark.source.dataset import open_latest


@dataclass(frozen=True)
class TableContext:
    """A Lance table as the table API addresses it; opens the latest version anew each time.

    Example::

        ctx = TableContext(spark, "/data/pets.lance", {})
        ctx.open().version
    """

    spark: SparkSession
    uri: str  # where the table's branch is (the table's own location for the main branch)
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    branch: str | None = None  # None: the main branch
    main_uri: str | None = None  # the table's own location, when ``uri`` is a branch's
    application: str | None = None  # the Spark application's id, when there is no session

    @property
    def root(self) -> str:
        """The table's own location (its main branch), where its branches are listed."""
        return self.main_uri or self.uri

    def open(self) -> lance.LanceDataset:
        """The latest version (:class:`TableNotFoundError` if there is no table)."""
        return open_latest(self.uri, storage=self.storage)

    def exists(self) -> bool:
        """True when a Lance table (at least one committed version) is at ``uri``."""
        try:
            self.open()
        except (TableNotFoundError, OSError):
            return False
        return True

    @property
    def app_id(self) -> str:
        return self.application or _spark.app_id(self.spark)

    def one_row(self, metrics: Mapping[str, int], names: tuple[str, ...]) -> DataFrame:
        """A one-row DataFrame of bigint ``metrics``, columns in the order of ``names``."""
        schema = StructType([StructField(k, LongType(), False) for k in names])
        return self.spark.createDataFrame([tuple(int(metrics[k]) for k in names)], schema)
