"""The reader: resolves projection and pushed filters on the driver, scans fragments in tasks.

Everything on :class:`LanceReader` is pickled to the executors, so it holds only small plain
values (uri, pinned version, column names, a predicate string). Tasks open the dataset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition, Not
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from lance_spark.errors import ColumnNotFoundError, UnsupportedTypeError
from lance_spark.source import dataset as _dataset
from lance_spark.source import types as _types
from lance_spark.source.filters import translate_filters
from lance_spark.source.options import (
    METADATA_COLUMN_NAMES,
    ROW_VERSION_COLUMNS,
    ReadOptions,
    check_plain_names,
)
from lance_spark.source.planning import (
    FragmentInfo,
    FragmentSlice,
    LancePartition,
    limited,
    plan_partitions,
)

COMMENT_METADATA_KEY = b"comment"  # Lance field metadata of a column's comment


@dataclass(frozen=True)
class Projection:
    """The columns a scan returns: Lance names, the Spark names they get, metadata columns."""

    lance_columns: tuple[str, ...]
    spark_names: tuple[str, ...]  # same length as lance_columns
    metadata_columns: tuple[str, ...] = ()
    # Columns of a catalog table's schema that the version being read does not have yet:
    # they read as NULL (the catalog schema is fixed, the table's schema evolves).
    absent: tuple[str, ...] = ()

    def select(self, names: Sequence[str]) -> Projection:
        """The part of this projection that a scan needs (Spark's pruned columns), in order."""
        lance_of = dict(zip(self.spark_names, self.lance_columns, strict=True))
        lance_columns: list[str] = []
        spark_names: list[str] = []
        for name in names:
            if name in lance_of:
                lance_columns.append(lance_of[name])
                spark_names.append(name)
            elif name not in self.metadata_columns and name not in self.absent:
                raise ColumnNotFoundError(
                    f"column {name!r} is not read by this scan; it reads "
                    f"{', '.join((*self.spark_names, *self.metadata_columns, *self.absent))}"
                )
        return Projection(
            tuple(lance_columns),
            tuple(spark_names),
            tuple(m for m in self.metadata_columns if m in names),
            tuple(a for a in self.absent if a in names),
        )


def table_projection(table_schema: pa.Schema, options: ReadOptions) -> Projection:
    """Projection from the ``columns`` and ``metadata_columns`` options (no user schema)."""
    if options.columns is None:
        names = tuple(table_schema.names)
    else:
        if options.columns_plain is not None:
            check_plain_names(options.columns_plain, table_schema.names)
        names = tuple(_resolve_name(table_schema, c) for c in options.columns)
    return Projection(names, names, options.metadata_columns)


def user_projection(
    table_schema: pa.Schema, user: StructType, *, allow_absent: bool = False
) -> Projection:
    """Projection from a user-specified schema: its columns, by name, in its order.

    ``allow_absent`` (catalog tables): a nullable column the table lacks reads as NULL.
    """
    lance_columns: list[str] = []
    spark_names: list[str] = []
    metadata: list[str] = []
    absent: list[str] = []
    for f in user.fields:
        if f.name in METADATA_COLUMN_NAMES and f.name not in table_schema.names:
            metadata.append(f.name)
            continue
        if allow_absent and f.nullable and not _has_name(table_schema, f.name):
            absent.append(f.name)
            continue
        name = _resolve_name(table_schema, f.name)
        actual = _types.spark_schema_from_arrow(pa.schema([table_schema.field(name)]))[0].dataType
        if actual != f.dataType:
            raise UnsupportedTypeError(
                f"column {f.name!r} is declared as {f.dataType.simpleString()} in the given "
                f"schema, but the Lance table stores it as {actual.simpleString()}"
            )
        lance_columns.append(name)
        spark_names.append(f.name)
    if metadata and [f.name for f in user.fields][-len(metadata) :] != metadata:
        raise ColumnNotFoundError(
            f"metadata columns {', '.join(metadata)} must come last in the given schema"
        )
    return Projection(tuple(lance_columns), tuple(spark_names), tuple(metadata), tuple(absent))


def spark_schema(table_schema: pa.Schema, projection: Projection) -> StructType:
    """The Spark schema of a scan. A column's comment (ALTER COLUMN ... COMMENT) is Spark's
    ``comment`` field metadata, which DESCRIBE shows, and its default value Spark's
    ``CURRENT_DEFAULT`` / ``EXISTS_DEFAULT`` (what INSERT, UPDATE and MERGE use); nothing else
    is added: the table's
    location comes from the path option (the session catalog gives catalog tables theirs)."""
    arrow = pa.schema([table_schema.field(c) for c in projection.lance_columns])
    mapped = _types.spark_schema_from_arrow(arrow)
    fields = []
    for name, lance_name, f in zip(
        projection.spark_names, projection.lance_columns, mapped.fields, strict=True
    ):
        stored = arrow.field(lance_name).metadata or {}
        comment = stored.get(COMMENT_METADATA_KEY)
        metadata = {"comment": comment.decode("utf-8", errors="replace")} if comment else {}
        metadata.update(_types.stored_defaults(stored))
        fields.append(StructField(name, f.dataType, f.nullable, metadata or None))
    fields += [StructField(m, LongType(), nullable=False) for m in projection.metadata_columns]
    return StructType(fields)


def _has_name(table_schema: pa.Schema, name: str) -> bool:
    return any(n.lower() == name.lower() for n in table_schema.names)


def _resolve_name(table_schema: pa.Schema, name: str) -> str:
    if name in table_schema.names:
        return name
    matches: list[str] = [n for n in table_schema.names if n.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    raise ColumnNotFoundError(
        f"column {name!r} does not exist in the Lance table; columns: {', '.join(table_schema.names)}"
    )


# Index-pruned planning is used when the indexed filter matches at most 1/N of the rows.
_INDEX_PRUNE_FRACTION = 20
_OFFSET_MASK = 0xFFFFFFFF


@dataclass
class LanceReader(DataSourceReader):
    uri: str
    version: int
    table_schema: pa.Schema
    projection: Projection
    storage: Mapping[str, str] = field(repr=False)
    user_filter: str | None = None
    batch_size: int = 8192
    rows_per_partition: int = 1_000_000
    min_partitions: int = 2
    # Read from the manifest the driver already opened in reader(): partitions() needs only
    # these three numbers per fragment, not a second open of the dataset. Planning-only:
    # not pickled to the tasks (see __getstate__).
    fragments: tuple[FragmentInfo, ...] = ()
    # The size of the version's data files (the manifest's summary; None: not recorded).
    data_bytes: int | None = None
    pushed_filter: str | None = None
    output_schema: StructType = field(default_factory=StructType)
    # A LIMIT the JVM companion pushed (only when every filter was pushed): each task stops
    # after this many rows; Spark applies the LIMIT again over the tasks.
    limit: int | None = None

    # No pushFilters: Spark 4.3 keeps a Python reader planned with pushed filters on the
    # DataFrame and reuses it for the DataFrame's next query, whatever its filters
    # (SPARK-58551: a reused DataFrame reads too few rows). Only the JVM companion, which
    # plans every scan afresh, pushes filters (push_filters, through scan_planner); without
    # it Spark evaluates every filter itself: right, only slower. This can go when Spark
    # plans a Python read per query.

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader into every task after planning; tasks read the fragments
        # their partition names, so the planning-only fragment list (one entry per fragment,
        # megabytes for 100,000 fragments) stays on the driver.
        state = dict(self.__dict__)
        state["fragments"] = ()
        return state

    def push_filters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Push the filters Lance can evaluate exactly into this reader (``pushed_filter``);
        yields the others, which Spark evaluates. Called by the companion's scan planning."""
        renamed = dict(zip(self.projection.spark_names, self.projection.lance_columns, strict=True))
        by_lance: list[Filter] = []
        originals: dict[int, Filter] = {}
        for f in filters:
            lance_filter = _rename_filter(f, renamed)
            if lance_filter is None:
                yield f
                continue
            originals[id(lance_filter)] = f
            by_lance.append(lance_filter)
        predicate, rejected = translate_filters(by_lance, self.table_schema)
        self.pushed_filter = predicate
        for r in rejected:
            yield originals[id(r)]

    def for_scan(self, read_schema: StructType, *, limit: int | None) -> LanceReader:
        """This reader narrowed to the columns of ``read_schema`` (Spark's pruned schema, nested
        fields included) and to ``limit`` rows: what the JVM companion plans each scan with."""
        return dataclasses.replace(
            self,
            projection=self.projection.select(read_schema.names),
            output_schema=read_schema,
            limit=limit,
        )

    @property
    def predicate(self) -> str | None:
        """The Lance filter of this read: the ``filter`` option and the pushed filters."""
        return _and(self.user_filter, self.pushed_filter)

    def count_rows(self) -> int:
        """The rows this read returns, without reading them when no filter applies (a pushed
        ``COUNT(*)``): live rows from the manifest, or Lance's ``count_rows(filter)``."""
        if self.predicate is None:
            return sum(f.live_rows for f in self.fragments)
        ds = _dataset.open_version(self.uri, self.version, storage=self.storage)
        return int(ds.count_rows(filter=self.predicate))

    def statistics(self) -> tuple[int | None, int | None]:
        """(rows, bytes) for Spark's planner, from the manifest: the rows when no filter applies,
        and the data files' size scaled to the share of the row width the scan reads. No bytes
        when the scan reads a blob column: the manifest's sizes leave out the blob files (the
        images of a table), so any figure would be far too small and Spark would broadcast
        the table in a join; without one Spark takes its default (never broadcast)."""
        rows = sum(f.live_rows for f in self.fragments)
        rows_or_none = rows if self.predicate is None else None
        blobs = set(_types.blob_columns(self.table_schema))
        if blobs & set(self.projection.lance_columns):
            return rows_or_none, None
        widths = {
            f.name: _types.estimated_width(f.type) for f in self.table_schema if f.name not in blobs
        }
        total = sum(widths.values()) or 1
        read = sum(widths[c] for c in self.projection.lance_columns)
        read += 8 * len(self.projection.metadata_columns)
        # Files written before Lance recorded their size: estimated from the row width.
        size = self.data_bytes or sum(f.physical_rows for f in self.fragments) * total
        return rows_or_none, max(1, size * read // total)

    def describe(self) -> dict[str, str]:
        """What this read does, for EXPLAIN (never storage options)."""
        columns = [*self.projection.lance_columns, *self.projection.metadata_columns]
        described = {
            "Location": self.uri,
            "Version": str(self.version),
            "ReadColumns": f"[{', '.join(columns)}]",
            "ReadSchema": self.output_schema.simpleString(),
        }
        if self.predicate is not None:
            described["LanceFilter"] = self.predicate
        if self.limit is not None:
            described["PushedLimit"] = str(self.limit)
        return described

    def partitions(self) -> Sequence[InputPartition]:
        predicate = self.predicate
        if predicate is not None:
            pruned = self._index_partitions(predicate)
            if pruned is not None:
                return pruned
        elif self.limit is not None:
            # No filter: the first fragments holding `limit` rows, in one task.
            return plan_partitions(
                limited(self.fragments, self.limit),
                rows_per_partition=self.rows_per_partition,
                min_partitions=1,
            )
        return plan_partitions(
            self.fragments,
            rows_per_partition=self.rows_per_partition,
            min_partitions=self.min_partitions,
        )

    def _index_partitions(self, predicate: str) -> list[LancePartition] | None:
        """Partitions covering only the rows a scalar index says match, or None when Lance
        would not answer ``predicate`` from an index (or it matches too many rows to gain).

        With a selective indexed filter most fragments hold no match; planning them all
        would start a task per fragment that opens the table and finds nothing. The index
        lookup on the driver costs milliseconds and gives the matching row addresses.
        """
        ds = _dataset.open_version(self.uri, self.version, storage=self.storage)
        if not _may_use_index(ds, predicate):
            return None
        lookup = ds.scanner(filter=predicate, columns=[], with_row_address=True)
        if "ScalarIndexQuery" not in lookup.explain_plan():
            return None
        addresses = lookup.to_table().column("_rowaddr")
        live = sum(f.live_rows for f in self.fragments)
        if len(addresses) > max(1, live // _INDEX_PRUNE_FRACTION):
            return None
        by_fragment: dict[int, list[int]] = {}
        fragment_ids = pc.shift_right(addresses, 32).to_pylist()
        offsets = pc.bit_wise_and(addresses, _OFFSET_MASK).to_pylist()
        for fragment_id, offset in zip(fragment_ids, offsets, strict=True):
            by_fragment.setdefault(int(fragment_id), []).append(int(offset))
        slices = tuple(
            FragmentSlice(fid, min(found), max(found) + 1)
            for fid, found in sorted(by_fragment.items())
        )
        # The matches are few (at most 1/_INDEX_PRUNE_FRACTION of the table): one task each
        # for up to min_partitions groups of fragments.
        groups = max(1, min(self.min_partitions, len(slices)))
        return [LancePartition.of(i, slices[i::groups]) for i in range(groups) if slices[i::groups]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LancePartition):
            # partitions() returned none (empty table): Spark still runs one task with a
            # placeholder InputPartition(None).
            return
        ds = _dataset.open_version(self.uri, self.version, storage=self.storage)
        # Spark checks each batch against exactly this schema (nullability and list field
        # names included), so it is derived from the declared Spark schema itself.
        target = to_arrow_schema(self.output_schema, timezone="UTC")
        # The projected columns' part of it, the target of the type conversion.
        converted = pa.schema([target.field(n) for n in self.projection.spark_names])
        meta = self.projection.metadata_columns
        remaining = self.limit
        with _dataset.reading_data(self.uri, ds, partition.fragment_ids, storage=self.storage):
            for batch in _scan(
                ds,
                partition,
                list(self.projection.lance_columns),
                self.predicate,
                meta,
                self.batch_size,
                self.limit,
            ):
                if remaining is not None:
                    if batch.num_rows >= remaining:
                        yield _to_spark(
                            batch.slice(0, remaining), self.projection, converted, target
                        )
                        return
                    remaining -= batch.num_rows
                yield _to_spark(batch, self.projection, converted, target)


def _may_use_index(ds: Any, predicate: str) -> bool:
    """Whether ``predicate`` names an indexed column at all. Asking Lance (explain_plan) parses
    and plans the whole predicate, which takes ~0.1 s for a MERGE's IN list of 50,000 keys;
    the index list is in the manifest already."""
    names = {str(n).rsplit(".", 1)[-1] for d in ds.describe_indices() for n in d.field_names}
    return any(name in predicate for name in names)


def _scan(
    ds: Any,
    partition: LancePartition,
    columns: list[str],
    predicate: str | None,
    meta: Sequence[str],
    batch_size: int,
    limit: int | None = None,
) -> Iterator[pa.RecordBatch]:
    kwargs: dict[str, Any] = {
        # Lance returns the row version columns when they are asked for as columns.
        "columns": [*columns, *(m for m in meta if m in ROW_VERSION_COLUMNS)],
        "batch_size": batch_size,
        "with_row_id": "_rowid" in meta,
        "with_row_address": "_rowaddr" in meta or "_fragid" in meta,
        # Blob columns as their bytes (not Lance's position / size descriptions); a scan
        # that does not project them never reads them.
        "blob_handling": _types.BLOB_HANDLING,
    }
    if limit is not None:  # each scanner stops early; read() caps the total
        kwargs["limit"] = limit
    whole = partition.whole_fragment_ids
    if whole:  # one scanner for all of them, however many small fragments there are
        fragments = [ds.get_fragment(i) for i in whole]
        scanner = ds.scanner(fragments=fragments, filter=predicate, scan_in_order=True, **kwargs)
        yield from scanner.to_batches()
    for s in partition.parts:
        low = (s.fragment_id << 32) | int(s.start or 0)
        high = (s.fragment_id << 32) | int(s.stop or 0)
        # A row-address range keeps the split exact whatever the deletions and the filter.
        ranged = _and(predicate, f"_rowaddr >= {low} AND _rowaddr < {high}")
        scanner = ds.get_fragment(s.fragment_id).scanner(filter=ranged, **kwargs)
        yield from scanner.to_batches()


def _to_spark(
    batch: pa.RecordBatch, projection: Projection, converted: pa.Schema, target: pa.Schema
) -> pa.RecordBatch:
    """Rename, convert and order a scanned batch into exactly the schema Spark expects."""
    names = projection.spark_names
    data = pa.RecordBatch.from_arrays(
        [batch.column(c) for c in projection.lance_columns],
        schema=pa.schema(
            [
                batch.schema.field(c).with_name(name)
                for c, name in zip(projection.lance_columns, names, strict=True)
            ]
        ),
    )
    data = _types.conform_read_batch(data, converted)
    arrays: list[pa.Array] = []
    for f in target:
        if f.name in projection.metadata_columns:
            values = batch.column("_rowaddr" if f.name == "_fragid" else f.name)
            if f.name == "_fragid":
                values = pc.shift_right(values, 32)
            arrays.append(values.cast(pa.int64()))
        elif f.name in projection.absent:
            arrays.append(pa.nulls(batch.num_rows, f.type))
        else:
            arrays.append(data.column(f.name))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def fragment_infos(ds: Any) -> tuple[FragmentInfo, ...]:
    """What the planner needs of each fragment of the opened version: ids and row counts,
    read without building each fragment's metadata object (100,000 fragments: ~0.4 s)."""
    return tuple(
        FragmentInfo(int(f.fragment_id), int(f.physical_rows), _live_rows(f))
        for f in ds.get_fragments()
    )


def _live_rows(fragment: Any) -> int:
    physical = int(fragment.physical_rows)
    return physical - int(fragment.num_deletions or 0)


def data_bytes(ds: Any) -> int | None:
    """The size of the opened version's data files, from the manifest's summary (None when
    its files do not record their size)."""
    summary = ds.get_version().get("metadata") or {}
    size = int(summary.get("total_files_size") or 0)
    return size or None


def _and(*parts: str | None) -> str | None:
    present = [p for p in parts if p]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return " AND ".join(f"({p})" for p in present)


def _rename_filter(f: Filter, renamed: Mapping[str, str]) -> Filter | None:
    """The filter on Lance column names, or None when it touches a metadata column."""
    child = getattr(f, "child", None)
    if isinstance(child, Filter):
        inner = _rename_filter(child, renamed)
        return None if inner is None else Not(inner)
    path = tuple(getattr(f, "attribute", ()))
    if not path or path[0] not in renamed:
        return None
    if renamed[path[0]] == path[0]:
        return f
    changes: dict[str, Any] = {"attribute": (renamed[path[0]], *path[1:])}
    return cast(Filter, dataclasses.replace(cast(Any, f), **changes))
