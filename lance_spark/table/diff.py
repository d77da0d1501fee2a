"""``LanceTable.diff``: the rows changed between two versions, like Delta's change data feed.

Two modes, both evaluated by Spark (nothing of the table is collected to the driver):

- **per commit** (tables with stable row ids, no ``key``): the change data feed of
  :mod:`lance_spark.source.change_feed` (``readChangeFeed``) for the versions in
  ``(start, end]``: one task per version that changed rows reads only the fragments that
  differ and matches them by ``_rowid``. Commits that change no fragment (indexes, config,
  tags) and compaction cost no scan and show nothing; an overwrite or a restore shows what
  it changed.
- **by key** (``key`` given; the only mode for tables without stable row ids): the start and
  end versions are joined on the key columns and compared the same way; the net change is
  reported with ``_commit_version = end``.

Columns are the end version's; a column a version lacks reads as null, a column the end
version lacks is dropped, and update detection compares the columns both sides have (so a
column added with values is not an update of every row). Maps are compared as JSON: the same
entries in another order count as a change.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import lance
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    StructType,
)

from lance_spark import _spark
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, VersionNotFoundError
from lance_spark.source import dataset, session
from lance_spark.source.change_feed import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)
from lance_spark.source.options import TimeTravel
from lance_spark.table.context import TableContext

_P = "__lance_spark_diff"  # prefix of the join's working columns
_BEFORE = f"{_P}_in_before"
_AFTER = f"{_P}_in_after"


@dataclass(frozen=True)
class _Side:
    """One version's rows to compare (its columns, the identity and working columns)."""

    rows: DataFrame
    columns: Mapping[str, DataType]  # the version's columns (Spark types)


def diff(
    table: TableContext,
    *,
    start_version: int,
    end_version: int | None,
    key: str | Sequence[str] | None,
) -> DataFrame:
    """Changed rows in ``(start_version, end_version]`` with ``_change_type`` and
    ``_commit_version``; ``end_version`` None: the latest version.

    ``start_version`` 0 means "before the first version" (every row of version 1 is an
    insert). With ``key``, the net change between the two versions, matched on the key.
    """
    spark, uri, storage = table.spark, table.uri, table.storage
    latest = table.open()
    start, end = _versions(latest, uri=uri, start=start_version, end=end_version)
    read = _Reader(spark, uri, storage)
    target = _spark_columns(read(end))
    reserved = [c for c in (CHANGE_TYPE, COMMIT_VERSION) if c in target]
    if reserved:
        raise InvalidOptionError(
            f"the Lance table at {uri!r} has a column named {reserved[0]!r}, which diff() "
            "adds to its result; rename the column to use diff()"
        )
    if key is not None:
        return _by_key(read, uri=uri, start=start, end=end, key=key, target=target)
    if not latest.has_stable_row_ids:  # a table's row ids are stable from its creation on
        raise InvalidOptionError(
            f"the Lance table at {uri!r} has no stable row ids, so diff() cannot follow rows "
            "from commit to commit; pass key=<column> (or a list of columns) that identifies "
            "a row to compare the two versions by key (tables created by lance_spark have "
            "stable row ids)"
        )
    existing = set(dataset.VersionLog(latest, uri=uri).numbers())  # no manifest read
    return _per_commit(
        read, uri=uri, storage=storage, start=start, end=end, target=target, existing=existing
    )


# --- versions -----------------------------------------------------------------------------------


def _versions(
    latest: lance.LanceDataset, *, uri: str, start: int, end: int | None
) -> tuple[int, int]:
    start = _version_number(start, "startVersion")
    if start != 0:  # 0: before the first version
        dataset.resolve_version(latest, TimeTravel(version=start), uri=uri)
    if end is None:
        resolved_end = int(latest.version)
    else:
        travel = TimeTravel(version=_version_number(end, "endVersion"))
        resolved_end = dataset.resolve_version(latest, travel, uri=uri)
    if start >= resolved_end:
        raise InvalidOptionError(
            f"diff startVersion={start} must be smaller than endVersion={resolved_end} "
            "(changes are reported for the versions after startVersion, up to endVersion)"
        )
    return start, resolved_end


def _version_number(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidOptionError(f"diff {name}={value!r} is not a version number (an int >= 0)")
    return value


# --- per commit (stable row ids) ------------------------------------------------------------------


def _per_commit(
    read: _Reader,
    *,
    uri: str,
    storage: Mapping[str, str],
    start: int,
    end: int,
    target: Mapping[str, DataType],
    existing: set[int],
) -> DataFrame:
    """The change feed of ``(start, end]`` (one implementation: :mod:`change_feed`), with
    overwrites and restores reported as what they changed."""
    missing = [v for v in range(max(start, 1), end + 1) if v not in existing]
    if missing:
        raise VersionNotFoundError(
            f"diff of the Lance table at {uri!r} needs every version from {max(start, 1)} to "
            f"{end}, but versions {', '.join(map(str, missing))} no longer exist (vacuumed); "
            "diff a later range, or pass key= to compare just the two versions"
        )
    changes = (
        session.lance_reader(read.spark, storage)
        .option("readChangeFeed", "true")
        .option("startingVersion", start + 1)
        .option("endingVersion", end)
        .option("reportOverwrites", "true")
        .load(uri)
    )
    return changes.select(
        *[F.col(_spark.quote_identifier(n)) for n in target], CHANGE_TYPE, COMMIT_VERSION
    )


# --- by key ---------------------------------------------------------------------------------------


def _by_key(
    read: _Reader,
    *,
    uri: str,
    start: int,
    end: int,
    key: str | Sequence[str],
    target: Mapping[str, DataType],
) -> DataFrame:
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidOptionError(f"diff key={key!r} must be a column name or a list of them")
    if len(set(keys)) != len(keys):
        raise InvalidOptionError(f"diff key={key!r} names a column twice")
    after_rows = read(end)
    before_rows = after_rows.where(F.lit(False)) if start == 0 else read(start)
    for version, rows in ((end, after_rows), (start, before_rows)):
        names = rows.columns
        unknown = [k for k in keys if k not in names]
        if unknown:
            raise ColumnNotFoundError(
                f"diff key column {unknown[0]!r} does not exist in version {version} of the "
                f"Lance table at {uri!r}; columns: {', '.join(names)}"
            )
    return _compare(
        _side(_unique(before_rows, keys, start, uri)),
        _side(_unique(after_rows, keys, end, uri)),
        keys=keys,
        target=target,
        version=end,
    )


def _unique(rows: DataFrame, keys: list[str], version: int, uri: str) -> DataFrame:
    """``rows`` with a check, evaluated by the job, that no key value occurs twice."""
    message = (
        f"diff key ({', '.join(keys)}) is not unique in version {version} of the Lance table "
        f"at {uri}: a key must identify one row"
    )
    count = F.count(F.lit(1)).over(
        Window.partitionBy(*[F.col(_spark.quote_identifier(k)) for k in keys])
    )
    check = F.when(count > 1, F.raise_error(F.lit(message)))
    return rows.withColumn(f"{_P}_check", check)


# --- the comparison -------------------------------------------------------------------------------


def _side(rows: DataFrame) -> _Side:
    return _Side(rows, {f.name: f.dataType for f in rows.schema.fields})


def _compare(
    before: _Side, after: _Side, *, keys: list[str], target: Mapping[str, DataType], version: int
) -> DataFrame:
    """One row per change, ``target``'s columns: the rows of ``before`` and ``after`` in one
    full outer join on ``keys`` (null-safe), reported with ``_commit_version = version``."""
    names = list(target)

    def project(side: _Side, tag: str, marker: str) -> DataFrame:
        cols = [
            F.col(_spark.quote_identifier(k)).alias(f"{_P}_{tag}_id{i}") for i, k in enumerate(keys)
        ]
        for i, name in enumerate(names):
            value = (
                F.col(_spark.quote_identifier(name)).cast(target[name])
                if name in side.columns
                else F.lit(None).cast(target[name])
            )
            cols.append(value.alias(f"{_P}_{tag}{i}"))
        check = f"{_P}_check"
        present = F.lit(True)
        if check in side.rows.columns:  # the key check: evaluated whenever the row is used
            present = F.coalesce(F.col(check).cast("boolean"), present)
        return side.rows.select(*cols, present.alias(marker))

    condition = functools.reduce(
        Column.__and__,
        [F.col(f"{_P}_b_id{i}").eqNullSafe(F.col(f"{_P}_a_id{i}")) for i in range(len(keys))],
    )
    joined = project(before, "b", _BEFORE).join(
        project(after, "a", _AFTER), condition, "full_outer"
    )
    in_before = F.col(_BEFORE).isNotNull()
    in_after = F.col(_AFTER).isNotNull()
    differs = functools.reduce(
        Column.__or__,
        [
            ~_comparable(F.col(f"{_P}_b{i}"), target[name]).eqNullSafe(
                _comparable(F.col(f"{_P}_a{i}"), target[name])
            )
            for i, name in enumerate(names)
            # only the columns both versions have take part in the comparison
            if name not in keys and name in before.columns and name in after.columns
        ],
        F.lit(False),
    )
    updated = in_before & in_after & differs

    def image(tag: str, keep: Column, kind: Column) -> Column:
        fields = [F.col(f"{_P}_{tag}{i}").alias(name) for i, name in enumerate(names)]
        committed = F.lit(version).cast(LongType()).alias(COMMIT_VERSION)
        return F.when(keep, F.struct(*fields, kind.alias(CHANGE_TYPE), committed))

    old = image(
        "b",
        in_before & (~in_after | updated),
        F.when(in_after, F.lit(UPDATE_PREIMAGE)).otherwise(F.lit(DELETE)),
    )
    new = image(
        "a",
        in_after & (~in_before | updated),
        F.when(in_before, F.lit(UPDATE_POSTIMAGE)).otherwise(F.lit(INSERT)),
    )
    images = F.filter(F.array(old, new), lambda s: s.isNotNull())
    return joined.select(F.inline(images))


def _comparable(column: Column, data_type: DataType) -> Column:
    """Spark cannot compare maps: those (and types holding them) are compared as JSON."""
    return F.to_json(F.struct(column.alias("v"))) if _has_map(data_type) else column


def _has_map(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False


# --- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reader:
    """Reads versions of one table through the connector."""

    spark: SparkSession
    uri: str
    storage: Mapping[str, str] = field(repr=False)  # may hold secrets

    def __call__(self, version: int) -> DataFrame:
        """``version``'s rows."""
        return (
            session.lance_reader(self.spark, self.storage).option("version", version).load(self.uri)
        )


def _spark_columns(rows: DataFrame) -> dict[str, DataType]:
    return {f.name: f.dataType for f in rows.schema.fields}
