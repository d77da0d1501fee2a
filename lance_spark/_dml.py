"""Row-level changes as Spark jobs committed as one Lance transaction (design.md section 3).

DELETE: the target is read at a pinned version with ``_rowaddr``; Spark evaluates the
condition; the matching row addresses are hash-partitioned by fragment so that each touched
fragment's deletion file is written by exactly one task; the driver collects one small row
per touched fragment and commits ONE ``Delete`` on the pinned version. Untouched fragments
are not rewritten, and nothing of the table is collected to the driver.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import _commit, _dataset
from lance_spark.errors import InvalidOptionError

_OFFSET_MASK = 0xFFFFFFFF
_TOUCHED_SCHEMA = "fragment_id long, fragment string, deleted long"


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
        if not offsets:
            return
        ds = _dataset.open_version(uri, version, storage=storage)
        rows: dict[str, list[Any]] = {"fragment_id": [], "fragment": [], "deleted": []}
        for fragment_id, rows_of_fragment in sorted(offsets.items()):
            # delete_rows writes the new deletion file and returns the fragment's new
            # metadata, or None when no row of the fragment is left.
            fragment = ds.get_fragment(fragment_id)
            if fragment is None:
                raise LookupError(f"fragment {fragment_id} of {uri} version {version} is gone")
            new = fragment.delete_rows(rows_of_fragment)
            rows["fragment_id"].append(fragment_id)
            rows["fragment"].append(None if new is None else _to_json(new))
            rows["deleted"].append(len(rows_of_fragment))
        yield pa.RecordBatch.from_pydict(
            rows,
            schema=pa.schema(
                [("fragment_id", pa.int64()), ("fragment", pa.string()), ("deleted", pa.int64())]
            ),
        )

    return run


def _to_json(fragment: FragmentMetadata) -> str:
    return json.dumps(fragment.to_json())
