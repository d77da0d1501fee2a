"""The write path's commit, driven directly (no JVM): conflicts, abort, one version per job."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lance_spark.errors import CommitConflictError, ConcurrentModificationError
from lance_spark.source import commit as _commit
from lance_spark.source.options import parse_write_options
from lance_spark.source.write_jobs import TaskResult
from lance_spark.source.writer import WriteMode, plan_write

SCHEMA = StructType([StructField("id", LongType()), StructField("label", StringType())])


def _batches(start: int, n: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch(
            [pa.array(range(start, start + n), pa.int64()), pa.array(["x"] * n)],
            names=["id", "label"],
        )
    ]


def _files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def _plan(uri: str, *, overwrite: bool = False, **options: str):  # type: ignore[no-untyped-def]
    return plan_write(
        uri=uri,
        spark_schema=SCHEMA,
        overwrite=overwrite,
        options=parse_write_options({"path": uri, **options}),
        app_id="app-test",
    )


def test_tasks_write_fragments_and_the_driver_commits_once(tmp_path: object) -> None:
    uri = str(tmp_path) + "/t.lance"
    writer = _plan(uri)
    assert writer.mode is WriteMode.CREATE
    messages = [writer.write(iter(_batches(i * 10, 10))) for i in range(5)]
    assert all(isinstance(m, TaskResult) for m in messages)
    writer.commit(messages)
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 50 and len(ds.get_fragments()) == 5


def test_abort_deletes_what_tasks_wrote(tmp_path: object) -> None:
    uri = str(tmp_path) + "/t.lance"
    first = _plan(uri)
    first.commit([first.write(iter(_batches(0, 10)))])
    before = _files(uri)
    writer = _plan(uri)
    messages = [writer.write(iter(_batches(100, 10))), None]
    assert _files(uri) != before
    writer.abort(messages)
    assert _files(uri) == before
    assert lance.dataset(uri).version == 1


def test_append_rebases_over_a_concurrent_append(tmp_path: object) -> None:
    uri = str(tmp_path) + "/t.lance"
    lance.write_dataset(pa.Table.from_batches(_batches(0, 5)), uri)
    writer = _plan(uri)
    messages = [writer.write(iter(_batches(10, 5)))]
    lance.write_dataset(pa.Table.from_batches(_batches(20, 5)), uri, mode="append")
    writer.commit(messages)
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.count_rows() == 15


def test_lost_race_is_a_conflict_naming_versions_and_leaves_table_and_files(
    tmp_path: object,
) -> None:
    uri = str(tmp_path) + "/t.lance"
    lance.write_dataset(pa.Table.from_batches(_batches(0, 5)), uri)
    writer = _plan(uri)  # append planned on version 1
    messages = [writer.write(iter(_batches(10, 5)))]
    lance.write_dataset(pa.Table.from_batches(_batches(50, 3)), uri, mode="overwrite")  # v2
    before = _files(uri) - {f for m in messages for f in _paths(m)}
    with pytest.raises(CommitConflictError, match=r"started from version 1 but version 2"):
        writer.commit(messages)
    ds = lance.dataset(uri)
    assert ds.version == 2 and sorted(ds.to_table()["id"].to_pylist()) == [50, 51, 52]
    assert _files(uri) == before


def test_a_conflict_lance_calls_retryable_is_a_concurrent_modification_even_as_text(
    tmp_path: object,
) -> None:
    """Two deletes of the same fragment from version 1: Lance refuses the second as
    retryable. The error keeps that in its type, so a task's error, which reaches the driver
    as Spark's text (type name and message), is still redone."""
    uri = str(tmp_path) + "/t.lance"
    lance.write_dataset(pa.Table.from_batches(_batches(0, 5)), uri)
    delete = lance.LanceOperation.Update(removed_fragment_ids=[0], updated_fragments=[])
    info = _commit.CommitInfo(operation="DELETE")
    assert _commit.commit(uri, delete, read_version=1, info=info, storage={}) == 2
    with pytest.raises(ConcurrentModificationError) as raised:
        _commit.commit(uri, delete, read_version=1, info=info, storage={})
    err = raised.value
    assert (err.retryable, err.read_version, err.conflicting_version) == (True, 1, 2)
    again = ConcurrentModificationError(str(err))  # as _spark.connector_errors rebuilds it
    assert (again.retryable, again.read_version, again.conflicting_version) == (True, 1, 2)
    assert lance.dataset(uri).version == 2


def _paths(message: TaskResult) -> list[str]:
    return list(message.files)
