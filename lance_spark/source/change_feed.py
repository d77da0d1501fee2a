"""The change data feed: ``spark.read.format("lance").option("readChangeFeed", "true")``.

A version's changes are its difference from the version before, followed by stable row id
(Delta's change feed columns: ``_change_type`` ``insert`` / ``update_preimage`` /
``update_postimage`` / ``delete``, ``_commit_version``, ``_commit_timestamp``). The driver
compares the fragment lists of each version and the one before (manifests only) and plans
one task per version that changed rows; the task reads just what differs (the fragments of
``v - 1`` it removed or rewrote, those of ``v`` that are new or rewritten, and of a fragment
that only lost rows, the rows it lost) and matches them by ``_rowid``: only before ->
``delete``, only after -> ``insert``, on both sides with a value that differs, or rewritten by
an ``Update`` commit (``_row_last_updated_at_version = v``) -> the pre- and post-image. Compaction moves rows with their ids and values and is not
read at all; versions that change no fragment (indexes, config, tags) cost nothing.

``LanceTable.diff`` is this feed (plus its by-key mode for tables without stable row ids).
The columns are the ending version's: a column an older version lacks reads as null, and
update detection compares the columns both versions have. An overwrite or a restore in the
range is an error (its rows are not followed by id) unless ``reportOverwrites`` is set, which
reports what it changed as the rows of the versions compare.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from lance_spark.errors import InvalidOptionError, LanceSparkError, VersionNotFoundError
from lance_spark.source import dataset
from lance_spark.source import types as _types
from lance_spark.source.options import ChangeFeedOptions, TimeTravel

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
INSERT = "insert"
DELETE = "delete"
UPDATE_PREIMAGE = "update_preimage"
UPDATE_POSTIMAGE = "update_postimage"

_ROWID = "_rowid"
_UPDATED_AT = "_row_last_updated_at_version"
_REPLACING = frozenset({"Overwrite", "Restore"})


@dataclass(frozen=True)
class VersionChanges(InputPartition):
    """One task: the fragments of one version and of the one before that differ."""

    version: int
    before: tuple[int, ...]  # fragment ids of version - 1: removed, or rewritten
    after: tuple[int, ...]  # fragment ids of version: new, or rewritten
    rewritten: bool  # an Update commit: the rows it rewrote are updates even if equal
    timestamp_us: int
    # Fragments that only got (more) deleted rows: only those rows are kept from version - 1,
    # and version's side holds nothing new for them.
    trimmed: tuple[int, ...] = ()


def change_schema(table: StructType) -> StructType:
    """``table``'s columns and the change feed's."""
    return StructType(
        [
            *table.fields,
            StructField(CHANGE_TYPE, StringType(), nullable=False),
            StructField(COMMIT_VERSION, LongType(), nullable=False),
            StructField(COMMIT_TIMESTAMP, TimestampType(), nullable=False),
        ]
    )


@dataclass(frozen=True)
class History:
    """The table's latest version and its version log, read once per planning: only the
    manifests of the versions a feed reports are read (see :class:`dataset.VersionLog`)."""

    latest: lance.LanceDataset
    log: dataset.VersionLog

    @classmethod
    def read(cls, uri: str, storage: Mapping[str, str]) -> History:
        latest = dataset.open_latest(uri, storage=storage)
        return cls(latest, dataset.VersionLog(latest, uri=uri))


def resolve_range(
    uri: str,
    options: ChangeFeedOptions,
    storage: Mapping[str, str],
    *,
    history: History | None = None,
) -> tuple[int, int]:
    """(first version reported, last version reported)."""
    history = history or History.read(uri, storage)
    if options.starting_timestamp is not None:
        first = history.log.first_at_or_after(options.starting_timestamp)
        if first is None:
            raise VersionNotFoundError(
                f"startingTimestamp {options.starting_timestamp.isoformat()} is after the "
                f"latest commit of the Lance table at {uri!r}"
            )
        start = first
    else:
        start = int(options.starting_version or 0)
    end = _resolve_end(history.latest, options, uri, log=history.log)
    if start > end:
        raise InvalidOptionError(
            f"the change feed's starting version {start} is after its ending version {end}"
        )
    return max(start, 1), end


def ending_version(uri: str, options: ChangeFeedOptions, storage: Mapping[str, str]) -> int:
    """The last version a change feed read reports (the latest when no ending is given)."""
    return _resolve_end(dataset.open_latest(uri, storage=storage), options, uri)


def _resolve_end(
    latest: lance.LanceDataset,
    options: ChangeFeedOptions,
    uri: str,
    *,
    log: dataset.VersionLog | None = None,
) -> int:
    if options.ending_timestamp is not None:
        travel = TimeTravel(timestamp=options.ending_timestamp)
        return dataset.resolve_version(latest, travel, uri=uri, log=log)
    if options.ending_version is not None:
        travel = TimeTravel(version=options.ending_version)
        return dataset.resolve_version(latest, travel, uri=uri, log=log)
    return int(latest.version)


def plan(
    uri: str,
    *,
    start: int,
    end: int,
    storage: Mapping[str, str],
    report_overwrites: bool,
    history: History | None = None,
) -> tuple[VersionChanges, ...]:
    """One partition per version of ``[start, end]`` that changed rows."""
    history = history or History.read(uri, storage)
    if not history.latest.has_stable_row_ids:
        raise InvalidOptionError(
            f"the Lance table at {uri!r} has no stable row ids, so its change feed cannot "
            "follow rows from commit to commit (tables created by lance_spark have them); "
            "LanceTable.diff(start, end, key=<column>) compares two versions by key instead"
        )
    try:
        return _plan_versions(uri, history.log, start, end, report_overwrites)
    except VersionNotFoundError:  # listed only now, to say which versions are gone
        existing = set(history.log.numbers())
        wanted = range(max(start - 1, 1), end + 1)
        missing = [v for v in wanted if v not in existing]
        raise VersionNotFoundError(
            f"the change feed of the Lance table at {uri!r} for versions {start} to {end} needs "
            f"versions {', '.join(map(str, missing))}, which no longer exist (removed by "
            "cleanup); read a later range"
        ) from None


def _plan_versions(
    uri: str, log: dataset.VersionLog, start: int, end: int, report_overwrites: bool
) -> tuple[VersionChanges, ...]:
    """The changes of each version of ``[start, end]``, reading only those manifests (and
    version ``start - 1``'s)."""
    changes: list[VersionChanges] = []
    before = log.open(start - 1) if start > 1 else None
    for version in range(start, end + 1):
        after = log.open(version)
        old = {} if before is None else _fragments(before)
        new = _fragments(after)
        operation = dataset.operation(after, version)
        # Deletions only grow, except when a restore or overwrite puts back older fragments.
        trimmed = tuple(
            sorted(
                i
                for i in old
                if i in new and operation not in _REPLACING and _only_deletions(old[i], new[i])
            )
        )
        removed = tuple(
            sorted(i for i, meta in old.items() if new.get(i) != meta and i not in trimmed)
        )
        added = tuple(
            sorted(i for i, meta in new.items() if old.get(i) != meta and i not in trimmed)
        )
        if (removed or added or trimmed) and operation not in dataset.ROW_PRESERVING_OPERATIONS:
            if operation in _REPLACING and old and not report_overwrites:
                raise InvalidOptionError(
                    f"version {version} of the Lance table at {uri!r} is an "
                    f"{operation.lower()}, whose rows the change feed cannot follow by row "
                    f"id; read the versions before or after it, or set reportOverwrites=true "
                    "to report what it changed as deletes and inserts"
                )
            changes.append(
                VersionChanges(
                    version,
                    removed,
                    added,
                    rewritten=operation == "Update",
                    timestamp_us=micros(log.timestamp(version)),
                    trimmed=trimmed,
                )
            )
        before = after
    return tuple(changes)


def _fragments(ds: lance.LanceDataset) -> dict[int, dict[str, Any]]:
    """Fragment id -> its metadata (files, deletion file, row ids): equal means unchanged."""
    return {int(f.fragment_id): f.metadata.to_json() for f in ds.get_fragments()}


def _only_deletions(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The fragment changed only by rows deleted from it (a DELETE, or the old copies of rows
    an UPDATE or MERGE rewrote elsewhere)."""
    if _deleted(new) <= _deleted(old):
        return False
    rest = {k: v for k, v in old.items() if k != "deletion_file"}
    return rest == {k: v for k, v in new.items() if k != "deletion_file"}


def _deleted(meta: dict[str, Any]) -> int:
    deletion = meta.get("deletion_file") or {}
    return int(deletion.get("num_deleted_rows") or 0)


def micros(when: datetime) -> int:
    """``when`` in microseconds since the epoch (Spark's timestamp unit)."""
    return int(when.astimezone(UTC).timestamp() * 1_000_000)


@dataclass
class ChangeFeedReader(DataSourceReader):
    """Reads the change feed planned by :func:`plan` (no filter push-down: Spark filters)."""

    uri: str
    changes: tuple[VersionChanges, ...]
    output_schema: StructType
    storage: Mapping[str, str] = field(repr=False, default_factory=dict)
    batch_size: int = 8192

    def partitions(self) -> Sequence[InputPartition]:
        return list(self.changes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, VersionChanges):
            return
        target = to_arrow_schema(self.output_schema, timezone="UTC")
        names = [n for n in self.output_schema.names if n not in CHANGE_COLUMNS]
        table_target = pa.schema([target.field(n) for n in names])
        after_ds = dataset.open_version(self.uri, partition.version, storage=self.storage)
        after = _rows(self, after_ds, partition.after, names, with_updated_at=True)
        if partition.version > 1 and (partition.before or partition.trimmed):
            before_ds = dataset.open_version(self.uri, partition.version - 1, storage=self.storage)
            before = _rows(self, before_ds, partition.before, names, with_updated_at=False)
            if partition.trimmed:
                deleted = _deleted_rows(self, before_ds, after_ds, partition.trimmed, names)
                before = pa.concat_tables([before, deleted], promote_options="permissive")
            compared = [
                n for n in names if n in before_ds.schema.names and n in after_ds.schema.names
            ]
        else:
            before = _empty(names, after_ds.schema)
            compared = []
        for kind, rows in _classify(before, after, compared, partition):
            for chunk in rows.to_batches(max_chunksize=self.batch_size):
                yield _output(chunk, kind, partition, names, table_target, target)


def _rows(
    reader: ChangeFeedReader,
    ds: lance.LanceDataset,
    fragment_ids: Sequence[int],
    names: Sequence[str],
    *,
    with_updated_at: bool,
) -> pa.Table:
    """The rows of ``fragment_ids`` of ``ds``: the columns of ``names`` it has, ``_rowid``."""
    if not fragment_ids:
        return _empty(names, ds.schema)
    present = [n for n in names if n in ds.schema.names]
    columns = [*present, *([_UPDATED_AT] if with_updated_at else [])]
    fragments = []
    for i in fragment_ids:
        fragment = ds.get_fragment(i)
        if fragment is None:
            raise LanceSparkError(f"version {ds.version} of {reader.uri!r} has no fragment {i}")
        fragments.append(fragment)
    with dataset.reading_data(reader.uri, ds, list(fragment_ids), storage=reader.storage):
        return ds.scanner(
            fragments=fragments,
            columns=columns,
            with_row_id=True,
            blob_handling=_types.BLOB_HANDLING,
        ).to_table()


def _deleted_rows(
    reader: ChangeFeedReader,
    before: lance.LanceDataset,
    after: lance.LanceDataset,
    fragment_ids: Sequence[int],
    names: Sequence[str],
) -> pa.Table:
    """The rows of ``fragment_ids`` live in ``before`` and deleted in ``after``: the live row
    addresses of both (no column data), then one pass over ``before``'s rows keeping those."""
    present = [n for n in names if n in before.schema.names]
    kept: list[pa.Table] = [_empty(names, before.schema)]
    with dataset.reading_data(reader.uri, before, list(fragment_ids), storage=reader.storage):
        for i in fragment_ids:
            old, new = before.get_fragment(i), after.get_fragment(i)
            if old is None or new is None:
                raise LanceSparkError(
                    f"{reader.uri!r} has no fragment {i} in version {after.version}"
                )
            gone = _lost_addresses(old, new)
            if len(gone) == 0:
                continue
            scan = old.scanner(
                columns=present,
                with_row_id=True,
                with_row_address=True,
                batch_size=reader.batch_size,
                blob_handling=_types.BLOB_HANDLING,
            )
            for batch in scan.to_batches():
                lost = pc.is_in(batch.column("_rowaddr"), value_set=gone)
                rows = pa.Table.from_batches([batch]).filter(lost)
                if rows.num_rows:
                    kept.append(rows.select([*present, _ROWID]))
    return pa.concat_tables(kept, promote_options="permissive")


def _lost_addresses(old: Any, new: Any) -> pa.Array:
    """Row addresses live in fragment ``old`` and deleted in ``new`` (the same fragment one
    version later): one hash of the new live set, so each batch then looks up a small set."""

    def live(fragment: Any) -> pa.Array:
        table = fragment.scanner(columns=[], with_row_address=True).to_table()
        return table.column("_rowaddr").combine_chunks()

    before = live(old)
    return before.filter(pc.invert(pc.is_in(before, value_set=live(new))))


def _empty(names: Sequence[str], schema: pa.Schema) -> pa.Table:
    """No rows, with the columns of ``names`` that ``schema`` has and ``_rowid``, typed as the
    scans return them (a blob column as large_binary, as ``blob_handling`` reads it)."""
    present = [n for n in names if n in schema.names]

    def scanned(field: pa.Field) -> pa.DataType:
        return pa.large_binary() if _types.is_blob_field(field) else field.type

    return pa.table(
        {
            **{n: pa.array([], scanned(schema.field(n))) for n in present},
            _ROWID: pa.array([], pa.uint64()),
        }
    )


def _classify(
    before: pa.Table, after: pa.Table, compared: Sequence[str], partition: VersionChanges
) -> Iterator[tuple[str, pa.Table]]:
    before_ids = before.column(_ROWID)
    after_ids = after.column(_ROWID)
    position = pc.index_in(after_ids, value_set=before_ids)  # per after row: its before row
    matched = position.is_valid()
    yield DELETE, before.filter(pc.invert(pc.is_in(before_ids, value_set=after_ids)))
    yield INSERT, after.filter(pc.invert(matched))
    after_matched = after.filter(matched)
    before_matched = before.take(position.filter(matched))
    changed = _differs(before_matched, after_matched, compared)
    if partition.rewritten and _UPDATED_AT in after_matched.column_names:
        rewritten = pc.equal(after_matched.column(_UPDATED_AT), partition.version)
        changed = pc.or_(changed, pc.fill_null(rewritten, False))
    yield UPDATE_PREIMAGE, before_matched.filter(changed)
    yield UPDATE_POSTIMAGE, after_matched.filter(changed)


def _differs(before: pa.Table, after: pa.Table, names: Sequence[str]) -> pa.Array:
    """Per row: whether any of ``names`` differs (nulls equal to nulls)."""
    differs = pa.repeat(pa.scalar(False), after.num_rows)
    for name in names:
        old = before.column(name).combine_chunks()
        new = after.column(name).combine_chunks()
        if old.type != new.type:
            try:
                old = old.cast(new.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                new = new.cast(old.type)
        differs = pc.or_(differs, _not_equal(old, new))
    return differs


def _not_equal(old: pa.Array, new: pa.Array) -> pa.Array:
    both_null = pc.and_(old.is_null(), new.is_null())
    try:
        equal = pc.fill_null(pc.equal(old, new), False)
    except pa.ArrowNotImplementedError:  # nested types: compared as Python values
        equal = pa.array(
            [a == b for a, b in zip(old.to_pylist(), new.to_pylist(), strict=True)], pa.bool_()
        )
    return pc.invert(pc.or_(equal, both_null))


def _output(
    chunk: pa.RecordBatch,
    kind: str,
    partition: VersionChanges,
    names: Sequence[str],
    table_target: pa.Schema,
    target: pa.Schema,
) -> pa.RecordBatch:
    rows = chunk.num_rows
    present = chunk.schema.names
    fields = [chunk.schema.field(n) if n in present else table_target.field(n) for n in names]
    arrays = [
        chunk.column(n) if n in present else pa.nulls(rows, f.type)
        for n, f in zip(names, fields, strict=True)
    ]
    data = _types.conform_read_batch(
        pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)), table_target
    )
    extra = change_columns(kind, partition.version, partition.timestamp_us, rows, target)
    return pa.RecordBatch.from_arrays([*data.columns, *extra], schema=target)


def change_columns(
    kind: str, version: int, timestamp_us: int, rows: int, target: pa.Schema
) -> list[pa.Array]:
    """``_change_type``, ``_commit_version`` and ``_commit_timestamp`` for ``rows`` rows, typed
    as ``target`` (the feed's Arrow schema) holds them."""
    stamp = pa.scalar(timestamp_us, pa.int64()).cast(target.field(COMMIT_TIMESTAMP).type)
    return [
        pa.repeat(pa.scalar(kind, target.field(CHANGE_TYPE).type), rows),
        pa.repeat(pa.scalar(version, target.field(COMMIT_VERSION).type), rows),
        pa.repeat(stamp, rows),
    ]


def reader(
    uri: str,
    options: ChangeFeedOptions,
    *,
    output_schema: StructType,
    storage: Mapping[str, str],
    batch_size: int,
) -> ChangeFeedReader:
    history = History.read(uri, storage)
    start, end = resolve_range(uri, options, storage, history=history)
    changes = plan(
        uri,
        start=start,
        end=end,
        storage=storage,
        report_overwrites=options.report_overwrites,
        history=history,
    )
    return ChangeFeedReader(
        uri=uri,
        changes=changes,
        output_schema=output_schema,
        storage=dict(storage),
        batch_size=batch_size,
    )
