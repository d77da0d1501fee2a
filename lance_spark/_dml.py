"""Row-level changes as Spark jobs committed as one Lance transaction (design.md section 3).

The target is read at a pinned version with ``_rowaddr``; Spark evaluates the condition (and,
for UPDATE, the new values). The change rows are hash-partitioned by fragment so that each
touched fragment's deletion file is written by exactly one task; for UPDATE the same task
streams the rewritten rows into new fragment files. The driver collects one small row per
touched or written fragment and commits ONE transaction (``Delete`` or ``Update``) on the
pinned version. Untouched fragments are not rewritten, and nothing of the table is collected
to the driver.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import _commit, _dataset, _files, _session, _types
from lance_spark.errors import ColumnNotFoundError, CommitConflictError, InvalidOptionError

_OFFSET_MASK = 0xFFFFFFFF
# Columns the change rows carry besides the table's own (all start with "__lance_spark").
_FRAG = "__lance_spark_fragment_id"
_OFFSET = "__lance_spark_offset"
_RESULT_ARROW = pa.schema(
    [
        ("kind", pa.string()),  # "new": a fragment written; "deleted": a deletion file written
        ("fragment_id", pa.int64()),
        ("fragment", pa.string()),  # FragmentMetadata JSON; None: no row of it is left
        ("rows", pa.int64()),
    ]
)
_RESULT_SCHEMA = "kind string, fragment_id long, fragment string, rows long"


@dataclass(frozen=True)
class _Target:
    """The table pinned at one version, read with ``_rowaddr``, and the rows to change."""

    version: int
    schema: pa.Schema
    rows: DataFrame
    matched: DataFrame
    predicate: str


@dataclass(frozen=True)
class _Changes:
    """What the tasks of one change job wrote."""

    changed_rows: int
    updated: list[FragmentMetadata]  # fragments with a new deletion file
    removed: list[int]  # fragments of which no row is left
    new: list[FragmentMetadata]  # fragments holding rewritten rows


def delete_where(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    condition: str | Column | None,
    app_id: str | None,
) -> int:
    """Delete the rows matching ``condition`` (all rows when None); returns how many."""
    target = _pin(spark, uri, storage, condition)
    changes = _run(target.matched.select(*_address_columns()), uri, target, storage, None)
    if changes.changed_rows == 0:
        return 0  # nothing matched: no new version
    _commit.commit(
        uri,
        lance.LanceOperation.Delete(changes.updated, changes.removed, target.predicate),
        read_version=target.version,
        info=_commit.CommitInfo(
            operation="DELETE",
            parameters={"predicate": target.predicate},
            metrics={
                "numDeletedRows": changes.changed_rows,
                "numTouchedFragments": len(changes.updated) + len(changes.removed),
                "numRemovedFragments": len(changes.removed),
            },
            app_id=app_id,
        ),
        storage=storage,
    )
    return changes.changed_rows


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
    target = _pin(spark, uri, storage, condition)
    table = target.schema
    unknown = sorted(set(assignments) - set(table.names))
    if unknown:
        raise ColumnNotFoundError(
            f"UPDATE sets column {unknown[0]!r}, which the Lance table at {uri!r} does not "
            f"have; columns: {', '.join(table.names)}"
        )
    types = {f.name: f.dataType for f in target.rows.schema.fields}
    values = [
        _as_column(assignments[name]).cast(types[name]).alias(name)
        if name in assignments
        else F.col(f"`{name}`")
        for name in table.names
    ]
    changes = _run(target.matched.select(*_address_columns(), *values), uri, target, storage, table)
    if changes.changed_rows == 0:
        return 0
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=changes.removed,
        updated_fragments=changes.updated,
        new_fragments=changes.new,
    )
    info = _commit.CommitInfo(
        operation="UPDATE",
        parameters={"predicate": target.predicate, "set": ", ".join(sorted(assignments))},
        metrics={"numUpdatedRows": changes.changed_rows},
        app_id=app_id,
    )
    try:
        _commit.commit(uri, operation, read_version=target.version, info=info, storage=storage)
    except CommitConflictError:
        _files.delete_files(_data_uris(uri, changes.new), storage=storage)
        raise
    return changes.changed_rows


# --- the driver side ----------------------------------------------------------------------------


def _pin(
    spark: SparkSession, uri: str, storage: Mapping[str, str], condition: str | Column | None
) -> _Target:
    ds = _dataset.open_latest(uri, storage=storage)
    version = int(ds.version)
    rows = (
        _session.lance_reader(spark, storage)
        .option("version", version)
        .option("metadata_columns", "_rowaddr")
        .load(uri)
    )
    if condition is None:
        return _Target(version, ds.schema, rows, rows, "true")
    column, predicate = _checked(rows, condition)
    return _Target(version, ds.schema, rows, rows.filter(column), predicate)


def _checked(target: DataFrame, condition: str | Column) -> tuple[Column, str]:
    """The condition as a Column and as SQL text; rejects non-deterministic conditions."""
    column = _as_column(condition)
    resolved = target.filter(column)._jdf.queryExecution().analyzed().condition()
    text = condition if isinstance(condition, str) else str(resolved.sql())
    if not bool(resolved.deterministic()):
        raise InvalidOptionError(
            f"the condition {text!r} is not deterministic (for example rand() or uuid()): "
            "a row-level change must select the same rows however often it is evaluated"
        )
    return column, text


def _address_columns() -> list[Column]:
    return [
        F.shiftrightunsigned("_rowaddr", 32).alias(_FRAG),
        F.col("_rowaddr").bitwiseAND(F.lit(_OFFSET_MASK)).alias(_OFFSET),
    ]


def _run(
    changes: DataFrame,
    uri: str,
    target: _Target,
    storage: Mapping[str, str],
    table: pa.Schema | None,
) -> _Changes:
    """One job over the change rows; ``table`` None: delete only, else also rewrite them."""
    task = _change_task(uri, target.version, table, dict(storage))
    results = changes.repartition(_FRAG).mapInArrow(task, _RESULT_SCHEMA).collect()
    deleted = [r for r in results if r.kind == "deleted"]
    return _Changes(
        changed_rows=sum(int(r.rows) for r in deleted),
        updated=[FragmentMetadata.from_json(r.fragment) for r in deleted if r.fragment],
        removed=[int(r.fragment_id) for r in deleted if not r.fragment],
        new=[FragmentMetadata.from_json(r.fragment) for r in results if r.kind == "new"],
    )


# --- the tasks ----------------------------------------------------------------------------------


def _change_task(
    uri: str, version: int, table: pa.Schema | None, storage: dict[str, str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Each task: stream its rows' new values (if any) into fragment files, then write one
    deletion file per fragment it holds (all rows of a fragment are in one task)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        offsets: dict[int, list[int]] = defaultdict(list)

        def collect(batch: pa.RecordBatch) -> pa.RecordBatch:
            for fragment_id, offset in zip(
                batch.column(_FRAG).to_pylist(), batch.column(_OFFSET).to_pylist(), strict=True
            ):
                offsets[int(fragment_id)].append(int(offset))
            return batch.drop_columns([_FRAG, _OFFSET])

        out: dict[str, list[Any]] = {name: [] for name in _RESULT_ARROW.names}
        if table is None:
            for batch in batches:
                collect(batch)
        else:
            rows = (_types.conform_write_batch(collect(b), table) for b in batches)
            for new in write_fragments(
                pa.RecordBatchReader.from_batches(table, rows),
                uri,
                schema=table,
                storage_options=storage or None,
            ):
                _append(out, "new", None, _to_json(new), int(new.physical_rows))
        if offsets:
            ds = _dataset.open_version(uri, version, storage=storage)
            for fragment_id, rows_of_fragment in sorted(offsets.items()):
                # delete_rows writes the deletion file and returns the fragment's new
                # metadata, or None when no row of the fragment is left.
                new = _fragment(ds, fragment_id, uri, version).delete_rows(rows_of_fragment)
                doc = None if new is None else _to_json(new)
                _append(out, "deleted", fragment_id, doc, len(rows_of_fragment))
        if out["kind"]:
            yield pa.RecordBatch.from_pydict(out, schema=_RESULT_ARROW)

    return run


def _append(out: dict[str, list[Any]], *values: Any) -> None:
    for name, value in zip(_RESULT_ARROW.names, values, strict=True):
        out[name].append(value)


def _fragment(ds: lance.LanceDataset, fragment_id: int, uri: str, version: int) -> Any:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise LookupError(f"fragment {fragment_id} of {uri} version {version} is gone")
    return fragment


def _data_uris(uri: str, fragments: list[FragmentMetadata]) -> list[str]:
    return [_files.data_file_uri(uri, f.path) for fragment in fragments for f in fragment.files]


def _as_column(value: str | Column) -> Column:
    return F.expr(value) if isinstance(value, str) else value


def _to_json(fragment: FragmentMetadata) -> str:
    return json.dumps(fragment.to_json())
