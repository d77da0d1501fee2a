"""The staging-marker protocol of lance_spark.source.staging, with pylance and no JVM."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec.implementations.local
import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments

from lance_spark.source import staging as _files

TABLE = pa.table({"id": pa.array(range(10), pa.int64())})


def _written(uri: str) -> set[str]:
    return {f"data/{p.name}" for p in (Path(uri) / "data").iterdir()}


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, path)
    return path


def _attempt(uri: str, job: str) -> tuple[list[lance.fragment.FragmentMetadata], set[str]]:
    """One task attempt: writes two files through TaskFiles, as the writer does."""
    files = _files.TaskFiles(uri, job, storage={})
    reader = pa.RecordBatchReader.from_batches(TABLE.schema, files.watch(TABLE.to_batches()))
    fragments = write_fragments(
        reader, uri, schema=TABLE.schema, max_rows_per_file=5, progress=files.progress()
    )
    paths = {f"data/{f.path}" for fragment in fragments for f in fragment.files}
    assert files.record(data=[p.removeprefix("data/") for p in paths])
    return fragments, paths


def test_finish_deletes_what_the_commit_does_not_use(uri: str) -> None:
    before = _written(uri)
    _files.begin_job(uri, "job", storage={})
    _, lost = _attempt(uri, "job")  # a failed or speculative attempt
    kept_fragments, kept = _attempt(uri, "job")
    assert _written(uri) == before | lost | kept
    ds = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(kept_fragments), read_version=1)
    assert _files.finish_job(uri, "job", read_version=1, storage={}) == len(lost)
    assert _written(uri) == before | kept
    assert not (Path(uri) / "_lance_spark").exists()
    assert ds.count_rows() == 20


def test_abort_deletes_everything_and_a_late_task_cleans_up_after_itself(uri: str) -> None:
    before = _written(uri)
    _files.begin_job(uri, "job", storage={})
    _attempt(uri, "job")
    assert _files.abort_job(uri, "job", [], read_version=1, storage={}) == 2
    assert _written(uri) == before and not (Path(uri) / "_lance_spark").exists()
    # A task still running after the abort: its first finished file closes it.
    with pytest.raises(OSError, match="write job over"):
        _attempt(uri, "job")
    assert _written(uri) == before and not (Path(uri) / "_lance_spark").exists()


def test_abort_cleans_up_when_a_late_task_removes_its_marker_meanwhile(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load a late task may see the job closed and delete its files and its marker
    between the driver's listing of the markers and its reading them: the driver still
    deletes every other task's files (it used to give the whole cleanup up)."""
    before = _written(uri)
    _files.begin_job(uri, "job", storage={})
    _attempt(uri, "job")
    _attempt(uri, "job")
    staging_dir = Path(uri) / "_lance_spark/staging/job"
    vanished = str(staging_dir / "late-task.json")  # listed, gone when read
    glob = fsspec.implementations.local.LocalFileSystem.glob

    def listing(self: Any, path: str, **kwargs: Any) -> Any:
        found = glob(self, path, **kwargs)
        return [*found, vanished] if path.endswith("*.json") else found

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "glob", listing)
    assert _files.abort_job(uri, "job", [], read_version=1, storage={}) == 4
    assert _written(uri) == before and not (Path(uri) / "_lance_spark").exists()


def test_abort_keeps_files_a_version_references(uri: str) -> None:
    """A commit that landed but reported an error: its files stay."""
    _files.begin_job(uri, "job", storage={})
    fragments, paths = _attempt(uri, "job")
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), read_version=1)
    assert _files.abort_job(uri, "job", [], read_version=1, storage={}) == 0
    assert paths <= _written(uri)
    assert lance.dataset(uri).count_rows() == 20


def test_open_temporaries_are_recorded_and_aborted(uri: str) -> None:
    _files.begin_job(uri, "job", storage={})
    files = _files.TaskFiles(uri, "job", storage={})
    temporary = Path(uri) / "data" / ".tmpAbC123"
    other = Path(uri) / "data" / ".tmpOther"  # another writer's: not open in this process
    other.touch()
    with temporary.open("wb"):
        files.check_temporaries()
    markers = list((Path(uri) / "_lance_spark/staging/job").glob("*.json"))
    assert len(markers) == 1 and "data/.tmpAbC123" in markers[0].read_text()
    _files.abort_job(uri, "job", [], read_version=1, storage={})
    assert not temporary.exists() and other.exists()


def test_the_per_batch_check_reads_descriptors_only_when_they_change(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _files.begin_job(uri, "job", storage={})
    files = _files.TaskFiles(uri, "job", storage={})
    scans: list[int] = []
    real = _files._open_temporaries

    def counted(root: str, fds: Iterable[str]) -> set[str]:
        scans.append(1)
        return real(root, fds)

    monkeypatch.setattr(_files, "_open_temporaries", counted)
    temporary = Path(uri) / "data" / ".tmpLate01"
    handles = []

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(8):
            if i == 5:  # a temporary opened between two pulls, with no progress hook call
                handles.append(temporary.open("wb"))
            yield pa.record_batch([pa.array([i])], names=["id"])

    assert len(list(files.watch(batches()))) == 8
    for handle in handles:
        handle.close()
    markers = list((Path(uri) / "_lance_spark/staging/job").glob("*.json"))
    assert len(markers) == 1 and "data/.tmpLate01" in markers[0].read_text()
    # 9 pulls; the descriptors were read in full at the first and after the open only.
    assert len(scans) <= 3


def test_begin_job_survives_another_job_removing_the_empty_staging_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job that ends removes the staging folders it leaves empty; a job beginning at that
    # moment made the parents, then found them gone (seen under load in a race of MERGEs).
    uri = str(tmp_path / "t.lance")
    staging = Path(uri) / "_lance_spark"
    real_touch = fsspec.implementations.local.LocalFileSystem.touch
    removed = []

    def touch(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        if not removed:
            shutil.rmtree(staging)  # the other job's _remove_empty_dirs, just in between
            removed.append(path)
        return real_touch(self, path, *args, **kwargs)

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "touch", touch)
    _files.begin_job(uri, "job", storage={})
    assert removed
    assert (staging / "staging" / "job" / _files.OPEN_MARKER).exists()


def _age(root: Path, paths: Iterable[str], seconds: float) -> None:
    """Set the modification time of ``paths`` (relative to ``root``) ``seconds`` from now."""
    when = time.time() + seconds
    for path in paths:
        os.utime(root / path, (when, when))


def test_vacuum_judges_every_stale_job_with_one_listing_and_one_walk(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs a killed driver left: their markers go when every file they name is referenced
    (committed), gone (its attempt's files deleted) or removed by this vacuum (old and
    unreferenced); a job naming a file younger than the retention, or with a marker that
    cannot be read, keeps them. The versions are walked once for all the jobs, and no file
    is asked for by itself (the folders' listings answer)."""
    root = Path(uri)
    named = {}
    for job in ("committed", "gone", "young", "old"):
        _files.begin_job(uri, job, storage={})
        fragments, named[job] = _attempt(uri, job)
        if job == "committed":
            lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), read_version=1)
    for path in named["gone"]:
        (root / path).unlink()
    _files.begin_job(uri, "unreadable", storage={})
    broken = root / "_lance_spark/staging/unreadable/broken.json"
    broken.write_text("{not json")
    staged = [str(p.relative_to(root)) for p in (root / "_lance_spark").rglob("*") if p.is_file()]
    _age(root, [*staged, *named["old"]], -7200)
    _age(root, named["young"], 3600)  # still being written, say

    walks: list[set[str]] = []
    asked: list[str] = []
    referenced_in, exists = _files._referenced_in, _files._exists

    def walk(table_uri: str, lines: Any, wanted: Any, **kwargs: Any) -> set[str]:
        walks.append(set(wanted))
        return referenced_in(table_uri, lines, wanted, **kwargs)

    def one_file(file_uri: str, **kwargs: Any) -> bool:
        asked.append(file_uri)
        return exists(file_uri, **kwargs)

    before = _written(uri)
    monkeypatch.setattr(_files, "_referenced_in", walk)
    monkeypatch.setattr(_files, "_exists", one_file)
    orphans = _files.find_orphans(
        lance.dataset(uri), uri, older_than=timedelta(hours=1), storage={}
    )
    assert {f.path for f in orphans.files} == named["old"]
    assert sorted(Path(j).name for j in orphans.jobs) == ["committed", "gone", "old"]
    assert walks == [named["committed"] | named["young"]] and asked == []
    orphans.remove(uri, storage={})
    assert sorted(p.name for p in (root / "_lance_spark/staging").iterdir()) == [
        "unreadable",
        "young",
    ]
    assert _written(uri) == before - named["old"] and named["young"] <= before
    assert lance.dataset(uri).count_rows() == 20


def test_named_files_are_found_by_listing_their_folders_on_an_object_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fsspec's in-memory file system, an object store without folders: one listing per
    folder not listed yet, no existence check per file."""
    fs = fsspec.filesystem("memory")
    base = f"/lance-spark-{uuid.uuid4().hex}/t.lance"
    fs.pipe({f"{base}/data/a.lance": b"a", f"{base}/_deletions/1-2-0.arrow": b"d"})
    calls: list[str] = []
    real_exists = type(fs).exists

    def exists(self: Any, path: str, **kwargs: Any) -> bool:
        calls.append(path)
        return bool(real_exists(self, path, **kwargs))

    monkeypatch.setattr(type(fs), "exists", exists)
    try:
        # _deletions was listed already (by vacuum): the listing it made is used as it is.
        listed = _files._Listing({"_deletions"}, {"_deletions/1-2-0.arrow": (0.0, 1)})
        wanted = {
            "data/a.lance",
            "data/b.lance",
            "_deletions/1-2-0.arrow",
            "_deletions/3-4-0.arrow",
        }
        found = _files._existing(f"memory://{base}", wanted, listed, storage={})
        assert found == {"data/a.lance", "_deletions/1-2-0.arrow"}
        assert calls == [f"{base}/data"]  # the folder, before listing it
    finally:
        fs.rm(base.rsplit("/", 1)[0], recursive=True)


def test_new_tables_stay_out_of_other_tables_and_vacuum_spares_nested_ones(tmp_path: Path) -> None:
    """``check_new_location`` refuses a location inside a Lance table's folder or holding
    one, naming both; a table made there anyway (pylance) keeps its files through the outer
    table's vacuum: skipped when young, and when older than Lance's 7 days (Lance's own
    cleanup would take its files) the vacuum is refused and deletes nothing."""
    from lance_spark.errors import InvalidOptionError, LanceSparkError
    from lance_spark.table.context import TableContext
    from lance_spark.table.maintenance import vacuum_row

    outer = tmp_path / "outer.lance"
    lance.write_dataset(TABLE, str(outer))
    for place in ("data/x.lance", "_indices/x.lance", "_versions/x.lance", "a/b.lance"):
        with pytest.raises(
            InvalidOptionError, match=f"inside the folder of the Lance table at '{outer}'"
        ):
            _files.check_new_location(f"{outer}/{place}", storage={})
    with pytest.raises(InvalidOptionError, match=f"folder holds the Lance table at '{outer}'"):
        _files.check_new_location(str(tmp_path), storage={})
    _files.check_new_location(str(tmp_path / "next.lance"), storage={})  # a sibling is fine
    nested = {
        n: pa.table({"id": [i]}) for i, n in enumerate(("data/in.lance", "_indices/in.lance"))
    }
    for name, rows in nested.items():
        lance.write_dataset(rows, str(outer / name))
    lance.write_dataset(TABLE, str(outer), mode="append")
    table = TableContext(spark=None, uri=str(outer), storage={})  # type: ignore[arg-type]
    assert vacuum_row(table, 0, dry_run=False)[-1] == []  # young: skipped
    every = [p for p in outer.rglob("*") if p.is_file()]
    _age(outer, [str(p.relative_to(outer)) for p in every], -9 * 86400)
    with pytest.raises(LanceSparkError, match=f"'{outer}/data/in.lance'"):
        vacuum_row(table, 0, dry_run=False)
    assert [p for p in outer.rglob("*") if p.is_file()] == every  # nothing deleted
    for name, rows in nested.items():
        assert lance.dataset(str(outer / name)).to_table().equals(rows)
