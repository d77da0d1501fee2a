"""The overlap check of row-level statements against concurrent commits (no JVM): plain
pylance commits play the other writers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

from lance_spark.errors import CommitConflictError
from lance_spark.source import commit as _commit
from lance_spark.source import conflicts

NO_STORAGE: dict[str, str] = {}


def _table(path: Path, *, stable: bool = True) -> str:
    uri = str(path / "t.lance")
    rows = pa.table({"k": pa.array(range(30), pa.int64()), "v": ["a"] * 30})
    lance.write_dataset(rows, uri, max_rows_per_file=10, enable_stable_row_ids=stable)
    return uri


def _append(uri: str, keys: list[int]) -> None:
    rows = pa.table({"k": pa.array(keys, pa.int64()), "v": ["b"] * len(keys)})
    lance.write_dataset(rows, uri, mode="append")


def _keys(*values: int) -> conflicts.ReadSet:
    """A MERGE's read set, its target read pruned to the source's keys ``values``."""
    keys = ",".join(str(v) for v in values)
    return conflicts.ReadSet(untouched_rows=True, filter=f"`k` IN ({keys})")


def _overlap(
    uri: str, read_version: int, read_set: conflicts.ReadSet, touched: set[int] | None = None
) -> conflicts.Overlap | None:
    return conflicts.find_overlap(
        uri,
        storage=NO_STORAGE,
        read_version=read_version,
        latest=lance.dataset(uri),
        touched=touched or set(),
        read_set=read_set,
    )


def test_an_append_of_a_source_key_overlaps_naming_version_and_filter(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    read = lance.dataset(uri).version
    _append(uri, [100, 101])
    _append(uri, [200, 55])
    assert _overlap(uri, read, _keys(300, 301)) is None
    found = _overlap(uri, read, _keys(55, 300))
    assert found is not None
    assert found.version == read + 2
    assert found.operation == "Append"
    assert "1 row(s) matching this statement's read filter `k` IN (55,300)" in found.what


def test_any_added_row_overlaps_a_condition_read_set(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    read = lance.dataset(uri).version
    _append(uri, [100])
    found = _overlap(uri, read, conflicts.ReadSet())
    assert found is not None and "1 row(s)" in found.what


def test_a_read_filter_counts_only_the_rows_it_matches(tmp_path: Path) -> None:
    """A MERGE Spark planned reads the target through its key filter: appended rows the
    filter does not match are no overlap, and a filter Lance cannot apply counts as one."""
    uri = _table(tmp_path)
    read = lance.dataset(uri).version
    _append(uri, [100, 101])
    assert _overlap(uri, read, conflicts.ReadSet(filter="`k` IN (5,300)")) is None
    found = _overlap(uri, read, conflicts.ReadSet(filter="`k` IN (101,300)"))
    assert found is not None and found.version == read + 1
    assert "1 row(s) matching this statement's read filter `k` IN (101,300)" in found.what
    bad = _overlap(uri, read, conflicts.ReadSet(filter="`nope` IN (1)"))
    assert bad is not None and "could not be checked" in bad.what
    lance.dataset(uri).delete("k = 25")
    merge = conflicts.ReadSet(untouched_rows=True, filter="`k` IN (21)")
    assert _overlap(uri, read + 1, merge) is not None  # fragment 2 held key 21
    assert _overlap(uri, read + 1, replace(merge, filter="`k` IN (3)")) is None


def test_a_change_of_a_touched_fragment_overlaps(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    ds = lance.dataset(uri)
    read = ds.version
    ds.delete("k = 25")  # fragment 2
    assert _overlap(uri, read, conflicts.ReadSet(), touched={0, 1}) is None
    found = _overlap(uri, read, conflicts.ReadSet(), touched={1, 2})
    assert found is not None and "fragment(s) 2" in found.what


def test_a_deleted_matched_row_overlaps_a_merge_only(tmp_path: Path) -> None:
    """A MERGE reads matched rows it may leave alone; an UPDATE/DELETE changes (touches)
    every row it reads."""
    uri = _table(tmp_path)
    ds = lance.dataset(uri)
    read = ds.version
    ds.delete("k = 25")
    assert _overlap(uri, read, _keys(3)) is None  # fragment 2 never held key 3
    found = _overlap(uri, read, _keys(21))
    assert found is not None and "deleted rows among fragment(s) 2" in found.what
    assert _overlap(uri, read, conflicts.ReadSet(untouched_rows=False)) is None


def test_compaction_only_moves_rows(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    read = lance.dataset(uri).version
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    ds = lance.dataset(uri)
    assert type(ds.read_transaction(ds.version).operation).__name__ == "Rewrite"
    assert _overlap(uri, read, _keys(3)) is None
    assert _overlap(uri, read, conflicts.ReadSet(), touched={0}) is not None


def test_a_schema_change_overlaps(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    read = lance.dataset(uri).version
    lance.dataset(uri).add_columns({"w": "k * 2"})
    found = _overlap(uri, read, _keys(1000))
    assert found is not None and "schema" in found.what


def test_sentinel_is_the_lowest_fragment_unless_touched(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    ds = lance.dataset(uri)
    found = conflicts.sentinel(ds, set())
    assert found is not None and found.id == 0
    assert conflicts.sentinel(ds, {0}) is None
    ds.delete("true")
    assert conflicts.sentinel(lance.dataset(uri), set()) is None


def test_next_fragment_id_skips_ids_an_index_still_covers(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    ds = lance.dataset(uri)
    ds.create_scalar_index("k", "BTREE")
    lance.dataset(uri).delete("true")
    assert conflicts.next_fragment_id(lance.dataset(uri)) == 3


def _insert_only(uri: str, keys: list[int]) -> lance.LanceOperation.BaseOperation:
    """A row-level commit that only inserts, built as row_level builds it on the read version."""
    from lance_spark.source import row_level
    from lance_spark.source.write_jobs import TaskResult

    ds = lance.dataset(uri)
    rows = pa.table({"k": pa.array(keys, pa.int64()), "v": ["m"] * len(keys)})
    new = write_fragments(rows, uri, schema=ds.schema)
    outcome = TaskResult(new_fragments=tuple(new))
    return row_level.row_level_op(outcome, ds, "true")


@pytest.mark.parametrize("empty", [False, True], ids=["fragments", "no-fragment"])
def test_two_racing_row_level_commits_conflict_and_appends_do_not(
    tmp_path: Path, empty: bool
) -> None:
    """The window between the check and the commit: of two row-level commits on the same
    read version Lance fails the second (retryable); an append still commits."""
    uri = _table(tmp_path)
    if empty:
        lance.dataset(uri).delete("true")
    read = lance.dataset(uri).version
    first, second = _insert_only(uri, [500]), _insert_only(uri, [500])
    info = _commit.CommitInfo(operation="MERGE")
    assert _commit.commit(uri, first, read_version=read, info=info, storage=NO_STORAGE) == read + 1
    with pytest.raises(CommitConflictError) as raised:
        _commit.commit(uri, second, read_version=read, info=info, storage=NO_STORAGE)
    assert raised.value.retryable
    _append(uri, [600])
    ds = lance.dataset(uri)
    assert sorted(ds.to_table().column("k").to_pylist()).count(500) == 1
    if not empty:  # the sentinel fragment is listed unchanged: index and rows intact
        assert ds.count_rows() == 32
