"""MERGE target pruning by the join keys of a small source.

A MERGE whose ON condition holds ``t.k = s.k`` (a target column equal to a source column,
ANDed with anything else) can only match target rows whose ``k`` the source has. When the
source is small, its distinct keys are collected on the driver and pushed into the Lance scan
of the target as ``k IN (...)``: the job reads, joins and shuffles the few target rows the
source can match instead of every key of the table (Delta Lake prunes the same way, with a
first join that finds the touched files). With a scalar index on ``k`` Lance answers the IN
list from the index and the reader plans only the fragments that hold matches.

No pruning (the plain join over the whole target) when:

- a ``WHEN NOT MATCHED BY SOURCE`` clause acts on target rows the source does not match;
- the condition has no such equality of two plain columns of the same type;
- the source has more than ``spark.lance.merge.keyPruning.maxSourceRows`` rows (0 disables);
- the keys have no exact Lance literal (the filter translator rejects them).

The source is evaluated twice, once for its keys and once in the join; a source that gave
other rows the second time could match target rows that were never read. So the source is
cached (memory and disk) for the MERGE, unless the caller cached it already or it only
generates rows (a deterministic plan over ``spark.range`` or literal rows, which reads
nothing that could change): then the key pass computes just the key column, and the join
computes the source again. Delta Lake's ``merge.materializeSource=auto`` makes the same
choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import _spark
from lance_spark._spark import quote_identifier
from lance_spark.errors import InvalidOptionError
from lance_spark.source.filters import in_list_predicate

MAX_SOURCE_ROWS_CONF = "spark.lance.merge.keyPruning.maxSourceRows"
# Up to this many source rows the keys are collected and pushed down. At 50,000 keys the IN
# list renders in ~10 ms and costs Lance 0.11-0.14 s per 2.5M-row scan task (pylance 14);
# the full join it saves costs seconds at that table size.
DEFAULT_MAX_SOURCE_ROWS = 100_000


@dataclass(frozen=True)
class EquiKey:
    """``target_column = source_column`` in a MERGE condition."""

    target_column: str
    source_column: str


def max_source_rows(spark: SparkSession) -> int:
    raw = spark.conf.get(MAX_SOURCE_ROWS_CONF, str(DEFAULT_MAX_SOURCE_ROWS))
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidOptionError(
            f"{MAX_SOURCE_ROWS_CONF} must be a whole number >= 0 (0 turns MERGE key pruning "
            f"off), got {raw!r}"
        )
    return value


class KeyPruner:
    """Collects a small MERGE source's keys once and turns them into a target filter.

    ``release()`` must be called when the MERGE is over: it drops the cache it made.
    """

    def __init__(self, source: DataFrame, *, max_rows: int, enabled: bool) -> None:
        self._source = source
        self._max_rows = max_rows
        self._enabled = enabled and max_rows > 0
        self._keys: dict[str, pa.Array | None] = {}
        self._cached_by_us = False

    def predicate(self, key: EquiKey, target_schema: pa.Schema) -> str | None:
        """A Lance predicate keeping the target rows whose key the source has, or None."""
        keys = self.keys(key)
        if keys is None:
            return None
        return in_list_predicate((key.target_column,), keys, target_schema)

    def keys(self, key: EquiKey) -> pa.Array | None:
        """The source's distinct non-null values of ``key.source_column`` (None: pruning is
        off or the source is too large); also what the MERGE can read, for the conflict
        check of :mod:`lance_spark.table.conflicts`."""
        if not self._enabled:
            return None
        return self._source_keys(key.source_column)

    def release(self) -> None:
        if self._cached_by_us:
            self._source.unpersist()
            self._cached_by_us = False

    def _source_keys(self, column: str) -> pa.Array | None:
        if column in self._keys:
            return self._keys[column]
        if self._source.storageLevel == StorageLevel.NONE and not generates_rows(self._source):
            self._source.persist(StorageLevel.MEMORY_AND_DISK)
            self._cached_by_us = True
        # Bounded: the limit stops after max_rows + 1 rows, whatever the source's size. A
        # source within the limit was read to its end, so every partition is cached.
        values = (
            self._source.select(F.col(quote_identifier(column))).limit(self._max_rows + 1).toArrow()
        )
        keys: pa.Array | None = None
        if values.num_rows <= self._max_rows:
            keys = pc.unique(values.column(0).combine_chunks()).drop_null()
        else:
            self.release()  # too large: the plain join, nothing cached
        self._keys[column] = keys
        return keys


def generates_rows(frame: DataFrame) -> bool:
    """Whether ``frame`` is a deterministic plan whose leaves only generate rows: evaluating
    it twice gives the same rows for sure (always False on Spark Connect, see
    :func:`lance_spark._spark.generates_rows`)."""
    return _spark.generates_rows(frame)


def find_equi_key(target_rows: DataFrame, source: DataFrame, condition: Any) -> EquiKey | None:
    """The first ``target column = source column`` conjunct of ``condition`` (a Column
    resolved against ``target_rows`` joined with ``source``), or None."""
    key = _spark.equi_key(target_rows, source, condition)
    return None if key is None else EquiKey(*key)
