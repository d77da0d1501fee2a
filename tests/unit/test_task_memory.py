"""The write tasks stream (issue 17, memory bounded per task), without a JVM.

Each task function (the data source writer's ``write``, the change task of MERGE / UPDATE /
DELETE, the ``addColumns`` task) is fed a generator of Arrow batches that notes, at each pull,
how much of pyarrow's memory pool is in use and how many files the task has finished. A task
that collected its input before writing (``list(iterator)``, ``Table.from_batches``...) would
hold every batch at the last pull and would have finished no file before it; a streaming one
holds a few batches at any time and has finished files long before its input ends. The
tasks' results are then committed with pylance and checked, so the streaming keeps the exact
outcome (rows, deletions, carried row ids, errors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark.errors import LanceSparkError, SchemaMismatchError
from lance_spark.source import row_level
from lance_spark.source.options import WriteOptions
from lance_spark.source.write_jobs import StagedJob, TaskResult
from lance_spark.source.writer import LanceWriter, WriteMode
from lance_spark.table import columns

DIM = 64
VECTOR = pa.list_(pa.float32(), DIM)
SCHEMA = pa.schema([("id", pa.int64()), ("vector", VECTOR)])
ROW_BYTES = 8 + 4 * DIM


def _vectors(rows: int, seed: int) -> pa.FixedSizeListArray:
    values = np.random.default_rng(seed).random(rows * DIM, dtype=np.float32)
    # concat_arrays copies into pyarrow's pool (pa.array over numpy would borrow numpy's memory)
    return pa.FixedSizeListArray.from_arrays(pa.concat_arrays([pa.array(values)]), DIM)


def _finished(uri: str, folder: str) -> int:
    root = Path(uri) / folder
    if not root.exists():
        return 0
    return sum(1 for p in root.iterdir() if not p.name.startswith(".tmp"))


class Probe:
    """Wraps a generator of batches; at each pull notes pyarrow's pool use and ``progress()``."""

    def __init__(self, progress: Callable[[], int]) -> None:
        self._progress = progress
        self.pulled = 0
        self.bytes = 0
        self.peak_pool = 0
        self.progress_at: list[int] = []  # progress() when each batch was pulled

    def feed(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.peak_pool = max(self.peak_pool, pa.total_allocated_bytes())
            self.progress_at.append(self._progress())
            self.pulled += 1
            self.bytes += batch.nbytes
            yield batch
        self.peak_pool = max(self.peak_pool, pa.total_allocated_bytes())

    def check_streamed(self) -> None:
        # Collecting would hold all of them at once: at most a tenth may be live.
        assert self.peak_pool < self.bytes / 10, (self.peak_pool, self.bytes)
        # Files were finished while the input was still being read.
        assert self.progress_at[-1] > 0, self.progress_at


def _job(uri: str, version: int | None) -> StagedJob:
    return StagedJob.begin(uri, read_version=version, storage={})


# --- the data source writer -------------------------------------------------------------------


def _rows(count: int, batch_rows: int, start: int = 0) -> Iterator[pa.RecordBatch]:
    for first in range(start, start + count, batch_rows):
        n = min(batch_rows, start + count - first)
        ids = pa.array(list(range(first, first + n)), pa.int64())
        yield pa.record_batch([ids, _vectors(n, first)], schema=SCHEMA)


def test_writer_streams_its_input_into_rolled_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    options = WriteOptions(uri=uri, max_rows_per_file=20_000)
    writer = LanceWriter(uri, WriteMode.CREATE, None, SCHEMA, options)
    writer.open_job()
    probe = Probe(lambda: _finished(uri, "data"))
    result = writer.write(probe.feed(_rows(400_000, 1_000)))
    probe.check_streamed()
    assert probe.progress_at[-1] >= 15  # of the 20 files
    writer.commit([result])
    ds = lance.dataset(uri)
    assert ds.count_rows() == 400_000
    assert [f.count_rows() for f in ds.get_fragments()] == [20_000] * 20
    ids = ds.to_table(columns=["id"]).column("id")
    assert pc.all(pc.equal(ids, pa.array(range(400_000), pa.int64()))).as_py()


def test_writer_raises_a_bad_batch_as_itself_and_leaves_no_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    writer = LanceWriter(uri, WriteMode.CREATE, None, SCHEMA, WriteOptions(uri=uri))
    writer.open_job()
    bad = pa.record_batch([pa.array([1], pa.int64()), pa.array(["x"])], names=["id", "other"])
    with pytest.raises(SchemaMismatchError, match="other"):
        writer.write(iter([*_rows(5_000, 1_000), bad]))
    writer.abort([])
    assert _finished(uri, "data") == 0


# --- the change task (MERGE / UPDATE / DELETE) ------------------------------------------------

FRAGMENTS = 4
FRAGMENT_ROWS = 10_000


def _table(uri: str) -> lance.LanceDataset:
    def batches() -> Iterator[pa.RecordBatch]:
        yield from _rows(FRAGMENTS * FRAGMENT_ROWS, 5_000)

    return lance.write_dataset(
        pa.RecordBatchReader.from_batches(SCHEMA, batches()),
        uri,
        max_rows_per_file=FRAGMENT_ROWS,
        enable_stable_row_ids=True,
    )


_CHANGE = pa.schema(
    [
        (row_level.FRAG, pa.int64()),
        (row_level.OFFSET, pa.int64()),
        (row_level.ROW_ID, pa.int64()),
        (row_level.KIND, pa.string()),
        ("id", pa.int64()),
        ("vector", VECTOR),
    ]
)


def _change_rows(
    rows: list[tuple[int | None, int | None, int | None, str, int]], seed: int = 0
) -> pa.RecordBatch:
    frag, offset, row_id, kind, ids = (list(c) for c in zip(*rows, strict=True))
    return pa.record_batch(
        [
            pa.array(frag, pa.int64()),
            pa.array(offset, pa.int64()),
            pa.array(row_id, pa.int64()),
            pa.array(kind, pa.string()),
            pa.array(ids, pa.int64()),
            _vectors(len(rows), seed),
        ],
        schema=_CHANGE,
    )


def _upsert(ds: lance.LanceDataset, batch_rows: int, inserts: int) -> Iterator[pa.RecordBatch]:
    """Change rows as the engine orders them: every even row updated (id + 1_000_000) and
    every row at offset % 10 == 1 deleted, fragment by fragment, then ``inserts`` new rows."""
    rows: list[tuple[int | None, int | None, int | None, str, int]] = []
    addresses = ds.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    for row_id, address, value in zip(
        addresses.column("_rowid").to_pylist(),
        addresses.column("_rowaddr").to_pylist(),
        addresses.column("id").to_pylist(),
        strict=True,
    ):
        fragment, offset = address >> 32, address & 0xFFFFFFFF
        if offset % 2 == 0:
            rows.append((fragment, offset, row_id, row_level.KIND_UPDATE, value + 1_000_000))
        elif offset % 10 == 1:
            rows.append((fragment, offset, None, row_level.KIND_DELETE, value))
    rows.sort(key=lambda r: (r[3] == row_level.KIND_INSERT, r[0], r[1]))
    rows.extend((None, None, None, row_level.KIND_INSERT, 2_000_000 + i) for i in range(inserts))
    for start in range(0, len(rows), batch_rows):
        yield _change_rows(rows[start : start + batch_rows], seed=start)


def _run_change(job: StagedJob, batches: Iterator[pa.RecordBatch]) -> TaskResult:
    assert job.read_version is not None
    task = row_level.change_task(job.uri, job.read_version, SCHEMA, True, job.job_id, {}, 4_000)
    (result,) = list(task(batches))
    return result


def _commit(uri: str, version: int, result: TaskResult) -> lance.LanceDataset:
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=list(result.removed_fragment_ids),
        updated_fragments=list(result.updated_fragments),
        new_fragments=list(result.new_fragments),
    )
    return lance.LanceDataset.commit(uri, operation, read_version=version)


def test_change_task_streams_and_writes_each_fragment_s_deletions_when_its_rows_end(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t.lance")
    ds = _table(uri)
    before = ds.to_table(columns=["id"], with_row_id=True)
    old_ids = dict(
        zip(before.column("id").to_pylist(), before.column("_rowid").to_pylist(), strict=True)
    )
    probe = Probe(lambda: _finished(uri, "_deletions"))
    job = _job(uri, ds.version)
    result = _run_change(job, probe.feed(_upsert(ds, 500, inserts=3_000)))
    probe.check_streamed()
    # The deletion files of the first three fragments were written before the last rows came.
    assert probe.progress_at[-1] == FRAGMENTS - 1
    updated = FRAGMENTS * FRAGMENT_ROWS // 2
    deleted = FRAGMENTS * FRAGMENT_ROWS // 10
    assert result.counts == {
        row_level.KIND_UPDATE: updated,
        row_level.KIND_DELETE: deleted,
        row_level.KIND_INSERT: 3_000,
    }
    assert not result.removed_fragment_ids
    assert sorted(f.id for f in result.updated_fragments) == list(range(FRAGMENTS))
    # One write per 4,000 rows: the files a single write would have rolled.
    assert [f.physical_rows for f in result.new_fragments] == [4_000] * 5 + [3_000]

    after = _commit(uri, ds.version, result).to_table(columns=["id"], with_row_id=True)
    job.finish()  # keeps what the version references
    values = after.column("id").to_pylist()
    assert len(values) == FRAGMENTS * FRAGMENT_ROWS - deleted + 3_000
    expected = {i + 1_000_000 for i in range(0, FRAGMENTS * FRAGMENT_ROWS, 2)}
    expected |= {i for i in range(FRAGMENTS * FRAGMENT_ROWS) if i % 2 and i % 10 != 1}
    expected |= set(range(2_000_000, 2_003_000))
    assert set(values) == expected
    # The rewritten rows keep their stable row ids, across the rolled files.
    row_ids = dict(zip(values, after.column("_rowid").to_pylist(), strict=True))
    assert all(row_ids[i + 1_000_000] == old_ids[i] for i in range(0, len(old_ids), 2))


def test_change_task_refuses_a_fragment_s_rows_apart(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = _table(uri)
    rows = [(0, 2, 2, row_level.KIND_UPDATE, 1), (1, 2, None, row_level.KIND_DELETE, 0)]
    later = [(0, 4, 4, row_level.KIND_UPDATE, 1)]
    # Raised as itself, although Lance's writer pulled the rows when it was raised.
    with pytest.raises(LanceSparkError, match=r"fragment 0 .* apart"), _job(uri, ds.version) as job:
        _run_change(job, iter([_change_rows(rows), _change_rows(later)]))
    assert _finished(uri, "_deletions") == 0  # the aborted job removed what the task wrote


def test_change_task_deletes_a_whole_fragment(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = _table(uri)
    rows = [(3, o, None, row_level.KIND_DELETE, 0) for o in range(FRAGMENT_ROWS)]
    with _job(uri, ds.version) as job:
        task = row_level.change_task(uri, ds.version, None, True, job.job_id, {})
        (result,) = list(task(iter([_change_rows(rows)])))
    assert result.removed_fragment_ids == (3,) and not result.new_fragments
    assert result.counts[row_level.KIND_DELETE] == FRAGMENT_ROWS


def test_chunks_are_read_lazily() -> None:
    pulled = []

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(5):
            pulled.append(i)
            yield pa.record_batch([pa.array(range(3))], names=["a"])

    chunks = row_level.chunks(batches(), 4)
    first = next(chunks)
    assert pulled == [0]  # only to know there is a chunk
    assert [b.num_rows for b in first] == [3, 1]
    assert pulled == [0, 1]
    assert [[b.num_rows for b in c] for c in chunks] == [[2, 2], [1, 3], [3]]
    assert pulled == [0, 1, 2, 3, 4]


# --- the addColumns task ------------------------------------------------------------------------


def test_add_columns_task_streams_fragment_by_fragment(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    ds = _table(uri)
    target = pa.schema([("w", VECTOR)])
    names = [columns._FRAG, columns._OFFSET, "w"]

    def values() -> Iterator[pa.RecordBatch]:
        for fragment in range(FRAGMENTS):
            for start in range(0, FRAGMENT_ROWS, 500):
                offsets = list(range(start, start + 500))
                yield pa.record_batch(
                    [
                        pa.array([fragment] * 500, pa.int64()),
                        pa.array(offsets, pa.int64()),
                        _vectors(500, fragment * FRAGMENT_ROWS + start),
                    ],
                    names=names,
                )

    probe = Probe(lambda: _finished(uri, "data") - FRAGMENTS)
    job = _job(uri, ds.version)
    task = columns._add_task(uri, ds.version, target, {}, job.job_id, False)
    (result,) = list(task(probe.feed(values())))
    probe.check_streamed()
    assert probe.progress_at[-1] == FRAGMENTS - 1  # files of earlier fragments were done
    assert result.counts == {
        columns._ROWS: FRAGMENTS * FRAGMENT_ROWS,
        columns._MATCHED_ROWS: 40_000,
    }
    assert result.schema is not None
    merged = lance.LanceDataset.commit(
        uri,
        lance.LanceOperation.Merge(list(result.updated_fragments), result.schema),
        read_version=ds.version,
    )
    job.finish()
    assert merged.schema.names == ["id", "vector", "w"]
    assert merged.count_rows() == FRAGMENTS * FRAGMENT_ROWS
