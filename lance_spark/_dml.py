"""Row-level changes as Spark jobs committed as one Lance transaction (design.md section 3).

The target is read at a pinned version with ``_rowaddr``; Spark evaluates the condition (and,
for UPDATE, the new values). The change rows are hash-partitioned by fragment so that each
touched fragment's deletion file is written by exactly one task; the same task streams the
rewritten rows into new fragment files. The driver collects one small row per touched or
written fragment and commits ONE transaction (``Delete``, or ``Update`` when rows are
rewritten) on the pinned version. Untouched fragments are not rewritten, and nothing of the
table is collected to the driver.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import _commit, _dataset, _files, _types
from lance_spark.errors import ColumnNotFoundError, CommitConflictError, InvalidOptionError

_OFFSET_MASK = 0xFFFFFFFF
_TOUCHED_SCHEMA = "fragment_id long, fragment string, deleted long"
# Columns the change rows carry besides the table's own (all start with "__lance_spark").
_FRAG = "__lance_spark_fragment_id"
_OFFSET = "__lance_spark_offset"
_RESULT_SCHEMA = "kind string, fragment_id long, fragment string, rows long"


def update_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
    assignments: Mapping[str, str | Column],
    app_id: str | None,
) -> int:
    """Set ``assignments`` (column -> SQL expression or Column) on the matching rows."""
    ds = _dataset.open_latest(uri, storage=storage)
    version = int(ds.version)
    table = ds.schema
    target = _read_with_rowaddr(spark, uri, version, storage)
    unknown = sorted(set(assignments) - set(table.names))
    if unknown:
        raise ColumnNotFoundError(
            f"UPDATE sets column {unknown[0]!r}, which the Lance table at {uri!r} does not "
            f"have; columns: {', '.join(table.names)}"
        )
    if condition is None:
        matched, predicate = target, "true"
    else:
        column, predicate = _checked(target, condition)
        matched = target.filter(column)
    types = dict(zip(target.columns, (f.dataType for f in target.schema.fields), strict=True))
    values = [
        _as_column(assignments[name]).cast(types[name]).alias(name)
        if name in assignments
        else F.col(f"`{name}`")
        for name in table.names
    ]
    changes = matched.select(
        F.shiftrightunsigned("_rowaddr", 32).alias(_FRAG),
        F.col("_rowaddr").bitwiseAND(F.lit(_OFFSET_MASK)).alias(_OFFSET),
        *values,
    )
    return _apply_changes(
        changes,
        uri=uri,
        version=version,
        table=table,
        storage=storage,
        info=lambda n: _commit.CommitInfo(
            operation="UPDATE",
            parameters={"predicate": predicate, "set": ", ".join(sorted(assignments))},
            metrics={"numUpdatedRows": n},
            app_id=app_id,
        ),
    )


def _apply_changes(
    changes: DataFrame,
    *,
    uri: str,
    version: int,
    table: pa.Schema,
    storage: Mapping[str, str],
    info: Callable[[int], _commit.CommitInfo],
) -> int:
    """One job: delete the rows at (fragment, offset), write the rows' new values; one commit."""
    results = (
        changes.repartition(_FRAG)
        .mapInArrow(_rewrite_task(uri, version, table, dict(storage)), _RESULT_SCHEMA)
        .collect()
    )
    rewritten = sum(int(r.rows) for r in results if r.kind == "deleted")
    new = [FragmentMetadata.from_json(r.fragment) for r in results if r.kind == "new"]
    if rewritten == 0:
        _files.delete_files(_data_uris(uri, new), storage=storage)
        return 0
    updated = [
        FragmentMetadata.from_json(r.fragment)
        for r in results
        if r.kind == "deleted" and r.fragment
    ]
    removed = [int(r.fragment_id) for r in results if r.kind == "deleted" and not r.fragment]
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new
    )
    try:
        _commit.commit(uri, operation, read_version=version, info=info(rewritten), storage=storage)
    except CommitConflictError:
        _files.delete_files(_data_uris(uri, new), storage=storage)
        raise
    return rewritten


def _rewrite_task(
    uri: str, version: int, table: pa.Schema, storage: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Each task: stream its rows' new values into fragment files, then write one deletion
    file per fragment it holds (all rows of a fragment are in one task)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        offsets: dict[int, list[int]] = defaultdict(list)

        def rows() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for fragment_id, offset in zip(
                    batch.column(_FRAG).to_pylist(), batch.column(_OFFSET).to_pylist(), strict=True
                ):
                    offsets[int(fragment_id)].append(int(offset))
                data = batch.drop_columns([_FRAG, _OFFSET])
                yield _types.conform_write_batch(data, table)

        written = write_fragments(
            pa.RecordBatchReader.from_batches(table, rows()),
            uri,
            schema=table,
            storage_options=storage or None,
        )
        out: dict[str, list[Any]] = {"kind": [], "fragment_id": [], "fragment": [], "rows": []}
        for new in written:
            out["kind"].append("new")
            out["fragment_id"].append(None)
            out["fragment"].append(_to_json(new))
            out["rows"].append(int(new.physical_rows))
        for fragment_id, doc, deleted in _delete_offsets(uri, version, storage, offsets):
            out["kind"].append("deleted")
            out["fragment_id"].append(fragment_id)
            out["fragment"].append(doc)
            out["rows"].append(deleted)
        if out["kind"]:
            yield pa.RecordBatch.from_pydict(out, schema=_RESULT_ARROW)

    return run


_RESULT_ARROW = pa.schema(
    [
        ("kind", pa.string()),
        ("fragment_id", pa.int64()),
        ("fragment", pa.string()),
        ("rows", pa.int64()),
    ]
)


def _delete_offsets(
    uri: str, version: int, storage: Mapping[str, str], offsets: Mapping[int, list[int]]
) -> Iterator[tuple[int, str | None, int]]:
    """Write one deletion file per fragment: (fragment id, new metadata JSON or None when no
    row is left, rows deleted)."""
    if not offsets:
        return
    ds = _dataset.open_version(uri, version, storage=storage)
    for fragment_id, rows_of_fragment in sorted(offsets.items()):
        # delete_rows writes the new deletion file and returns the fragment's new metadata.
        new = _fragment(ds, fragment_id, uri, version).delete_rows(rows_of_fragment)
        yield fragment_id, None if new is None else _to_json(new), len(rows_of_fragment)


def _fragment(ds: lance.LanceDataset, fragment_id: int, uri: str, version: int) -> Any:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise LookupError(f"fragment {fragment_id} of {uri} version {version} is gone")
    return fragment


def _data_uris(uri: str, fragments: list[FragmentMetadata]) -> list[str]:
    return [_files.data_file_uri(uri, f.path) for fragment in fragments for f in fragment.files]


def _as_column(value: str | Column) -> Column:
    return F.expr(value) if isinstance(value, str) else value


def delete_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
    app_id: str | None,
) -> int:
    """Delete the rows matching ``condition`` (all rows when None); returns how many."""
    ds = _dataset.open_latest(uri, storage=storage)
    version = int(ds.version)
    target = _read_with_rowaddr(spark, uri, version, storage)
    if condition is None:
        matched, predicate = target, "true"
    else:
        column, predicate = _checked(target, condition)
        matched = target.filter(column)
    addresses = matched.select(
        F.shiftrightunsigned("_rowaddr", 32).alias("fragment_id"),
        F.col("_rowaddr").bitwiseAND(F.lit(_OFFSET_MASK)).alias("offset"),
    )
    touched = (
        addresses.repartition("fragment_id")
        .mapInArrow(_delete_task(uri, version, dict(storage)), _TOUCHED_SCHEMA)
        .collect()
    )
    deleted = sum(int(r.deleted) for r in touched)
    if deleted == 0:
        return 0  # nothing matched: no new version
    updated = [FragmentMetadata.from_json(r.fragment) for r in touched if r.fragment]
    removed = [int(r.fragment_id) for r in touched if not r.fragment]
    _commit.commit(
        uri,
        lance.LanceOperation.Delete(updated, removed, predicate),
        read_version=version,
        info=_commit.CommitInfo(
            operation="DELETE",
            parameters={"predicate": predicate},
            metrics={
                "numDeletedRows": deleted,
                "numTouchedFragments": len(touched),
                "numRemovedFragments": len(removed),
            },
            app_id=app_id,
        ),
        storage=storage,
    )
    return deleted


def _read_with_rowaddr(
    spark: SparkSession, uri: str, version: int, storage: Mapping[str, str]
) -> DataFrame:
    reader = spark.read.format("lance").option("version", version)
    for key, value in storage.items():
        reader = reader.option(f"storage.{key}", value)
    return reader.option("metadata_columns", "_rowaddr").load(uri)


def _checked(target: DataFrame, condition: str | Column) -> tuple[Column, str]:
    """The condition as a Column and as SQL text; rejects non-deterministic conditions."""
    column = F.expr(condition) if isinstance(condition, str) else condition
    resolved = target.filter(column)._jdf.queryExecution().analyzed().condition()
    text = condition if isinstance(condition, str) else str(resolved.sql())
    if not bool(resolved.deterministic()):
        raise InvalidOptionError(
            f"the condition {text!r} is not deterministic (for example rand() or uuid()): "
            "a row-level change must select the same rows however often it is evaluated"
        )
    return column, text


def _delete_task(
    uri: str, version: int, storage: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs: one deletion file per fragment in its partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        offsets: dict[int, list[int]] = defaultdict(list)
        for batch in batches:
            for fragment_id, offset in zip(
                batch.column("fragment_id").to_pylist(),
                batch.column("offset").to_pylist(),
                strict=True,
            ):
                offsets[int(fragment_id)].append(int(offset))
        rows: dict[str, list[Any]] = {"fragment_id": [], "fragment": [], "deleted": []}
        for fragment_id, fragment, deleted in _delete_offsets(uri, version, storage, offsets):
            rows["fragment_id"].append(fragment_id)
            rows["fragment"].append(fragment)
            rows["deleted"].append(deleted)
        if not rows["fragment_id"]:
            return
        yield pa.RecordBatch.from_pydict(
            rows,
            schema=pa.schema(
                [("fragment_id", pa.int64()), ("fragment", pa.string()), ("deleted", pa.int64())]
            ),
        )

    return run


def _to_json(fragment: FragmentMetadata) -> str:
    return json.dumps(fragment.to_json())
