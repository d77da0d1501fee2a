"""Planning many small fragments (no JVM): what ships to the tasks stays small whatever the
fragment count, and the partitions still read every row exactly once."""

from __future__ import annotations

import pickle
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.source.datasource import LanceDataSource
from lance_spark.source.planning import FragmentSlice, LancePartition
from lance_spark.source.reader import LanceReader

FRAGMENTS = 1500


@pytest.fixture(scope="module")
def small_fragments(tmp_path_factory: pytest.TempPathFactory) -> str:
    """FRAGMENTS one-row fragments; the rows of fragments 0 and 7 are deleted (Lance then
    drops those fragments: the ids have a gap)."""
    uri = str(tmp_path_factory.mktemp("fragments") / "t.lance")
    ids = pa.array(range(FRAGMENTS), pa.int64())
    data = pa.table({"id": ids, "x": pa.array([float(i) for i in range(FRAGMENTS)])})
    ds = lance.write_dataset(data, uri, max_rows_per_file=1, max_rows_per_group=1)
    ds.delete("id = 0 OR id = 7")
    return uri


def _plan(uri: str, **options: str) -> tuple[LanceReader, list[LancePartition]]:
    source = LanceDataSource({"path": uri, **options})
    reader = source.reader(source.schema())
    assert isinstance(reader, LanceReader)
    parts = [p for p in reader.partitions() if isinstance(p, LancePartition)]
    return reader, parts


def test_what_ships_to_tasks_does_not_grow_with_fragments(small_fragments: str) -> None:
    reader, parts = _plan(small_fragments, min_partitions="3")
    assert len(reader.fragments) == FRAGMENTS - 2  # the driver planned with all of them
    shipped = pickle.loads(pickle.dumps(reader))
    assert shipped.fragments == ()  # planning-only: not pickled into every task
    assert len(pickle.dumps(reader)) < 4096
    assert len(parts) == 3
    for part in parts:
        # Runs of consecutive ids: 1-6, then 8 on, cut into three partitions.
        assert len(part.whole) <= 3 and part.parts == ()
        assert len(pickle.dumps(part)) < 512


def test_partitions_read_every_row_once(small_fragments: str) -> None:
    reader, parts = _plan(small_fragments, min_partitions="3")
    shipped = pickle.loads(pickle.dumps(reader))
    ids: list[int] = []
    for part in parts:
        for batch in shipped.read(pickle.loads(pickle.dumps(part))):
            ids.extend(batch.column("id").to_pylist())
    expected = [i for i in range(FRAGMENTS) if i not in (0, 7)]
    assert sorted(ids) == expected
    assert reader.count_rows() == len(expected)


def test_statistics_use_the_manifest_summary(small_fragments: str) -> None:
    reader, _ = _plan(small_fragments)
    total = int(lance.dataset(small_fragments).get_version()["metadata"]["total_files_size"])
    rows, size = reader.statistics()
    assert rows == FRAGMENTS - 2
    assert reader.data_bytes == total and 0 < size <= total


slices = st.lists(
    st.tuples(st.integers(0, 60), st.none() | st.tuples(st.integers(0, 50), st.integers(1, 9))),
    max_size=40,
)


@given(slices)
def test_a_partition_keeps_its_slices(raw: list[tuple[int, tuple[int, int] | None]]) -> None:
    given_slices = [
        FragmentSlice(fid) if part is None else FragmentSlice(fid, part[0], part[0] + part[1])
        for fid, part in raw
    ]
    partition = LancePartition.of(4, given_slices)
    whole = [s for s in given_slices if s.is_whole]
    ranged = [s for s in given_slices if not s.is_whole]
    assert partition.slices == (*whole, *ranged)
    assert partition.fragment_ids == [s.fragment_id for s in (*whole, *ranged)]
    assert len(partition.whole) <= len(whole)


def test_runs_of_consecutive_fragments_are_two_numbers(tmp_path: Path) -> None:
    partition = LancePartition.of(0, [FragmentSlice(i) for i in range(10_000, 60_000)])
    assert partition.whole == ((10_000, 60_000),)
    assert len(pickle.dumps(partition)) < 256
