"""The streaming source: a table's rows as they are committed, version after version.

Offsets are Lance versions. ``{"version": v, "index": i, "snapshot": false}`` means every
version up to ``v`` is processed, plus the first ``i`` new fragments of version ``v + 1``
(admission control splits a version by fragments); ``"snapshot": true`` means the first
``i`` fragments of version ``v``'s snapshot are processed (a stream without
``startingVersion`` starts with the table as it is, then follows the versions after it).

What a version holds for the stream is decided from its manifest and the one before it
(:func:`classify`): the rows of the fragments it added (an append: ``Append``, a MERGE that
only inserted, the first ``Overwrite`` of an empty table), nothing (indexes, config, tags,
compaction, which moves rows without changing them), or a change of existing rows (UPDATE,
DELETE, MERGE, overwrite, restore): the stream stops there with an error naming the version
and ``skipChangeCommits``, the option that skips such versions (Delta's rule). Each task
reads fragments of one version at that version, so later deletes or compaction do not
change what a batch returns, and a restart from the checkpoint reads exactly the same rows.

An offset that ends a batch also names where the batch starts (``"from"``): Spark logs only
end offsets, and the first batch's start is :meth:`~LanceStreamReader.initialOffset` asked
again when Spark plans the batch and after a restart, which (for the snapshot or
``startingVersion=latest``) moves on as versions are committed; the batch read from there
to its logged end held other rows (the next snapshot's, read twice; or none).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lance_spark.errors import (
    InvalidOptionError,
    LanceSparkError,
    StreamChangeError,
    VersionNotFoundError,
)
from lance_spark.source import change_feed as _change_feed
from lance_spark.source import dataset
from lance_spark.source.change_feed import VersionChanges
from lance_spark.source.options import StreamReadOptions
from lance_spark.source.planning import FragmentSlice, LancePartition
from lance_spark.source.reader import LanceReader, Projection

# Appended fragments of one version read by one task, up to this many rows.
_ROWS_PER_PARTITION = 1_000_000


@dataclass(frozen=True, order=True)
class Offset:
    version: int
    index: int = 0
    snapshot: bool = False
    # The start of the batch this offset ends (set by latestOffset; None in checkpoints
    # written before it was recorded). Not part of the position: offsets compare without it.
    begin: Offset | None = field(default=None, compare=False)

    @property
    def position(self) -> Offset:
        return Offset(self.version, self.index, self.snapshot)

    def to_json(self) -> dict[str, Any]:
        # One key order always: Spark compares offsets by their JSON text.
        value: dict[str, Any] = {
            "version": self.version,
            "index": self.index,
            "snapshot": self.snapshot,
        }
        if self.begin is not None:
            value["from"] = self.begin.position.to_json()
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Offset:
        try:
            begin = value.get("from")
            return cls(
                int(value["version"]),
                int(value["index"]),
                bool(value["snapshot"]),
                None if begin is None else cls.from_json(begin).position,
            )
        except (KeyError, TypeError, ValueError, AttributeError, LanceSparkError):
            raise LanceSparkError(
                f"offset {value!r} is not a lance_spark stream offset; was the checkpoint "
                "written by another source?"
            ) from None


@dataclass(frozen=True)
class Unit:
    """One fragment of one version that the stream reads (or, for a change feed stream, the
    changes of one version: ``changes``)."""

    version: int
    fragment_id: int
    rows: int
    size_bytes: int
    files: int = 1
    changes: VersionChanges | None = None


@dataclass(frozen=True)
class VersionRows:
    """What one version holds for the stream."""

    version: int
    kind: str  # "append", "none" or "change"
    operation: str
    units: tuple[Unit, ...] = ()
    columns: tuple[str, ...] = ()  # the version's column names


@dataclass(frozen=True)
class StreamPartition(InputPartition):
    """One task: fragments of one version, read at that version."""

    version: int
    fragment_ids: tuple[int, ...]
    absent: tuple[str, ...]  # stream columns this version does not have: read as null
    # A change feed stream's first snapshot: its rows are inserts of this (version, time).
    inserted_at: tuple[int, int] | None = None


@dataclass
class LanceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's micro-batch reader of a Lance table (``spark.readStream.format("lance")``)."""

    uri: str
    options: StreamReadOptions = field(repr=False)
    schema: StructType = field(default_factory=StructType)
    # Driver-side state of the running query (never needed by tasks).
    _versions: dict[int, VersionRows] = field(default_factory=dict, repr=False)
    _snapshots: dict[int, tuple[Unit, ...]] = field(default_factory=dict, repr=False)
    _feeds: dict[int, VersionChanges | None] = field(default_factory=dict, repr=False)
    _available_now: int | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_versions"], state["_snapshots"], state["_feeds"] = {}, {}, {}
        return state

    # --- offsets --------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        latest = self._latest()
        start = self.options.starting_version
        if self.options.starting_timestamp is not None:
            ds = dataset.open_latest(self.uri, storage=self.options.storage)
            first = dataset.first_version_since(ds, self.options.starting_timestamp)
            start = latest + 1 if first is None else first
        if start is None:  # the table as it is now, then the versions after it
            return Offset(latest, 0, snapshot=True).to_json()
        if start == -1:  # startingVersion=latest: the versions committed from now on
            return Offset(latest).to_json()
        if start > latest + 1:
            raise VersionNotFoundError(
                f"startingVersion={start} is after the latest version ({latest}) of the Lance "
                f"table at {self.uri!r}; use startingVersion=latest to read only new versions"
            )
        return Offset(start - 1).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files is not None:
            return ReadMaxFiles(self.options.max_files)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return Offset(self._latest()).to_json()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = Offset.from_json(start)
        max_files, max_bytes = self._caps(limit)
        position, files, size = begin, 0, 0
        try:
            for unit, after in self._steps(begin, self._target()):
                if unit is not None:
                    over = (max_files is not None and files + unit.files > max_files) or (
                        max_bytes is not None and size + unit.size_bytes > max_bytes
                    )
                    if files and over:  # at least one fragment per batch
                        break
                    files, size = files + unit.files, size + unit.size_bytes
                position = after
        except StreamChangeError:
            if position == begin:
                raise
            # Deliver what comes before the change first; the next batch stops on it.
        if position == begin:
            return dict(start)  # no new batch: the start as Spark has it, text and all
        return Offset(position.version, position.index, position.snapshot, begin).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        stop = Offset.from_json(end)
        # The start the batch was planned from. Spark's may differ for the first batch: it
        # asks initialOffset() again, which moves with the table (see the module's doc).
        begin = stop.begin or Offset.from_json(start).position
        units: list[Unit] = []
        if begin != stop:
            for unit, after in self._steps(begin, stop.version + 1):
                if unit is not None:
                    units.append(unit)
                if after == stop:
                    break
            else:
                raise LanceSparkError(
                    f"stream offsets {dict(start)} to {dict(end)} of the Lance table at "
                    f"{self.uri!r} do not follow one another (the end is not after the start); "
                    "the checkpoint's first batch was probably planned from a table version "
                    "that is no longer the latest. Start a new query (new checkpoint) with "
                    "startingVersion set"
                )
        return self._partitions(units)

    def commit(self, end: dict[str, Any]) -> None:
        # Versions before the committed offset are never asked for again.
        done = Offset.from_json(end).version
        for cache in (self._versions, self._snapshots, self._feeds):
            for version in [v for v in cache if v < done]:
                del cache[version]

    # --- tasks ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, VersionChanges):
            feed = _change_feed.ChangeFeedReader(
                uri=self.uri,
                changes=(partition,),
                output_schema=self.schema,
                storage=dict(self.options.storage),
                batch_size=self.options.batch_size,
            )
            return feed.read(partition)
        if not isinstance(partition, StreamPartition):
            return iter(())
        table = StructType(
            [f for f in self.schema.fields if f.name not in _change_feed.CHANGE_COLUMNS]
        )
        names = [n for n in table.names if n not in partition.absent]
        reader = LanceReader(
            uri=self.uri,
            version=partition.version,
            table_schema=pa.schema([]),
            projection=Projection(tuple(names), tuple(names), (), partition.absent),
            storage=dict(self.options.storage),
            batch_size=self.options.batch_size,
            output_schema=table,
        )
        slices = [FragmentSlice(i) for i in partition.fragment_ids]
        batches = reader.read(LancePartition.of(0, slices))
        if partition.inserted_at is None:
            return batches
        return _as_inserts(batches, partition.inserted_at, self.schema)

    # --- the walk over versions -------------------------------------------------------------
    def _steps(self, start: Offset, target: int) -> Iterator[tuple[Unit | None, Offset]]:
        """From ``start``, each fragment to read (or None where a version adds no rows) with
        the offset after it, up to version ``target``."""
        position = start
        if position.snapshot:
            units = self._snapshot(position.version)
            for k in range(position.index, len(units)):
                last = k + 1 == len(units)
                after = Offset(position.version) if last else Offset(position.version, k + 1, True)
                yield units[k], after
            if position.index >= len(units):
                yield None, Offset(position.version)
            position = Offset(position.version)
        version = position.version + 1
        index = position.index
        while version <= target:
            if self.options.read_change_feed:
                changes = self._feed(version, target)
                if changes is None:
                    yield None, Offset(version)
                else:
                    files = max(1, len(changes.before) + len(changes.after))
                    yield Unit(version, -1, 0, 0, files, changes), Offset(version)
                version, index = version + 1, 0
                continue
            rows = self._version(version)
            if rows.kind == "change" and not self.options.skip_change_commits:
                raise StreamChangeError(
                    f"version {version} of the Lance table at {self.uri!r} changed existing rows "
                    f"({rows.operation}); a stream of this table reads appended rows only. Set "
                    "the option skipChangeCommits=true to skip such versions, or start a new "
                    f"query (new checkpoint) with startingVersion={version + 1}"
                )
            extra = [c for c in rows.columns if c not in self.schema.names]
            if rows.kind == "append" and extra:
                raise StreamChangeError(
                    f"version {version} of the Lance table at {self.uri!r} has column(s) "
                    f"{', '.join(extra)} that this stream's schema does not (it is fixed when "
                    "the query starts); restart the query to read them"
                )
            units = rows.units if rows.kind == "append" else ()
            for k in range(index, len(units)):
                last = k + 1 == len(units)
                yield units[k], Offset(version) if last else Offset(version - 1, k + 1)
            if index >= len(units):
                yield None, Offset(version)
            version, index = version + 1, 0

    def _version(self, version: int) -> VersionRows:
        if version not in self._versions:
            after = self._open(version)
            before = self._open(version - 1) if version > 1 else None
            self._versions[version] = classify(before, after, version)
        return self._versions[version]

    def _feed(self, version: int, target: int) -> VersionChanges | None:
        """What ``version`` changed. The versions up to ``target`` are planned with it, with
        one read of the table's history; when that range holds a version the feed refuses,
        ``version`` alone is planned, so the error comes when the stream reaches that one."""
        if version not in self._feeds:
            try:
                end, changes = target, self._plan(version, target)
            except (InvalidOptionError, VersionNotFoundError):
                end, changes = version, self._plan(version, version)
            planned = {c.version: c for c in changes}
            for v in range(version, end + 1):
                self._feeds[v] = planned.get(v)
        return self._feeds[version]

    def _plan(self, start: int, end: int) -> tuple[VersionChanges, ...]:
        try:
            return _change_feed.plan(
                self.uri,
                start=start,
                end=end,
                storage=self.options.storage,
                report_overwrites=self.options.report_overwrites,
            )
        except InvalidOptionError as err:
            if start != end:
                raise
            raise StreamChangeError(str(err)) from err

    def _snapshot(self, version: int) -> tuple[Unit, ...]:
        if version not in self._snapshots:
            ds = self._open(version)
            self._snapshots[version] = tuple(
                _unit(version, f.metadata) for f in ds.get_fragments() if _live(f.metadata)
            )
        return self._snapshots[version]

    def _partitions(self, units: Sequence[Unit]) -> list[InputPartition]:
        partitions: list[InputPartition] = [u.changes for u in units if u.changes is not None]
        units = [u for u in units if u.changes is None]
        stamps: dict[int, int] = {}  # commit times of the snapshot's version, read once
        group: list[Unit] = []
        for unit in [*units, None]:
            flush = unit is None or (
                group
                and (
                    unit.version != group[0].version
                    or sum(u.rows for u in group) + unit.rows > _ROWS_PER_PARTITION
                )
            )
            if flush and group:
                version = group[0].version
                columns = self._version_columns(version)
                absent = tuple(
                    n
                    for n in self.schema.names
                    if n not in columns and n not in _change_feed.CHANGE_COLUMNS
                )
                inserted_at = None
                if self.options.read_change_feed:  # the snapshot a change feed stream starts with
                    if version not in stamps:
                        stamps[version] = self._timestamp_us(version)
                    inserted_at = (version, stamps[version])
                partitions.append(
                    StreamPartition(
                        version, tuple(u.fragment_id for u in group), absent, inserted_at
                    )
                )
                group = []
            if unit is not None:
                group.append(unit)
        return partitions

    def _timestamp_us(self, version: int) -> int:
        history = _change_feed.History.read(self.uri, self.options.storage)
        return _change_feed.micros(history.log.timestamp(version))

    def _version_columns(self, version: int) -> tuple[str, ...]:
        if version in self._versions:
            return self._versions[version].columns
        return tuple(self._open(version).schema.names)

    def _caps(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        if isinstance(limit, ReadAllAvailable):
            return None, None
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else self.options.max_files
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes
        return max_files, max_bytes

    def _target(self) -> int:
        return self._available_now if self._available_now is not None else self._latest()

    def _latest(self) -> int:
        return int(dataset.open_latest(self.uri, storage=self.options.storage).version)

    def _open(self, version: int) -> lance.LanceDataset:
        try:
            return dataset.open_version(self.uri, version, storage=self.options.storage)
        except (OSError, ValueError) as err:
            raise VersionNotFoundError(
                f"version {version} of the Lance table at {self.uri!r}, which this stream has "
                f"not read yet, cannot be opened ({str(err).splitlines()[0]}); it was probably "
                "removed by cleanup. Start a new query (new checkpoint) from a version that "
                "exists"
            ) from err


def _as_inserts(
    batches: Iterator[pa.RecordBatch], inserted_at: tuple[int, int], schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Snapshot rows as change feed rows: inserts of the snapshot's version."""
    target = to_arrow_schema(schema, timezone="UTC")
    version, micros = inserted_at
    for batch in batches:
        extra = _change_feed.change_columns(
            _change_feed.INSERT, version, micros, batch.num_rows, target
        )
        yield pa.RecordBatch.from_arrays([*batch.columns, *extra], schema=target)


def classify(
    before: lance.LanceDataset | None, after: lance.LanceDataset, version: int
) -> VersionRows:
    """What ``version`` (opened as ``after``) holds for a stream, from the fragment lists of it
    and of the version before (``before``; None for version 1)."""
    old = {} if before is None else {int(f.fragment_id): f.metadata for f in before.get_fragments()}
    new = {int(f.fragment_id): f.metadata for f in after.get_fragments()}
    operation = dataset.operation(after, version)
    columns = tuple(after.schema.names)
    removed = [i for i in old if i not in new]
    changed = [i for i in old if i in new and _rows_of(old[i]) != _rows_of(new[i])]
    added = sorted(i for i in new if i not in old)
    if operation in dataset.ROW_PRESERVING_OPERATIONS:
        return VersionRows(version, "none", operation, columns=columns)
    if removed or changed:
        return VersionRows(version, "change", operation, columns=columns)
    if not added:
        return VersionRows(version, "none", operation, columns=columns)
    units = tuple(_unit(version, new[i]) for i in added if _live(new[i]))
    return VersionRows(version, "append", operation, units, columns)


def _rows_of(meta: Any) -> tuple[int, object]:
    """What makes a fragment's rows the same: its physical rows and its deletion file."""
    return (int(meta.physical_rows), meta.to_json().get("deletion_file"))


def _live(meta: Any) -> bool:
    return _live_rows(meta) > 0


def _live_rows(meta: Any) -> int:
    deleted = meta.deletion_file.num_deleted_rows if meta.deletion_file is not None else 0
    return int(meta.physical_rows) - int(deleted or 0)


def _unit(version: int, meta: Any) -> Unit:
    size = sum(int(f.file_size_bytes or 0) for f in meta.files)
    return Unit(version, int(meta.id), _live_rows(meta), size)


def stream_reader(uri: str, options: StreamReadOptions, schema: StructType) -> LanceStreamReader:
    """The reader of a stream (``schema``: the table's, fixed when the query starts)."""
    return LanceStreamReader(uri, options, schema)
