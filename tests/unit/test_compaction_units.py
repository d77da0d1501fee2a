"""Compaction without Spark: the autoCompact options and confs, the small-fragment count, the
in-process compaction of a write's auto compaction, and the commit's conflict."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark.errors import CommitConflictError, InvalidOptionError
from lance_spark.source import compaction
from lance_spark.source.options import (
    AUTO_COMPACT_CONF,
    AUTO_COMPACT_MIN_NUM_FILES_CONF,
    DEFAULT_AUTO_COMPACT_MIN_NUM_FILES,
    AutoCompact,
    parse_auto_compact_conf,
    parse_write_options,
)
from lance_spark.source.write_jobs import StagedJob, combine


def test_auto_compact_options() -> None:
    assert parse_write_options({}).auto_compact == AutoCompact(False, 50)
    assert DEFAULT_AUTO_COMPACT_MIN_NUM_FILES == 50
    got = parse_write_options({"autoCompact": "TRUE", "autoCompact.minNumFiles": "7"})
    assert got.auto_compact == AutoCompact(True, 7)
    # Spark lower-cases keys; the streaming sink takes them too
    got = parse_write_options({"autocompact": "true"}, streaming=True)
    assert got.auto_compact == AutoCompact(True, 50)
    # the session's settings, overridden key by key by the options
    session = AutoCompact(True, 3)
    assert parse_write_options({}, session_auto_compact=session).auto_compact == session
    got = parse_write_options({"autoCompact": "false"}, session_auto_compact=session)
    assert got.auto_compact == AutoCompact(False, 3)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"autoCompact": "sometimes"}, "autoCompact='sometimes' must be true or false"),
        ({"autoCompact.minNumFiles": "0"}, "autoCompact.minNumFiles=0 must be at least 1"),
        ({"autoCompact.minNumFiles": "ten"}, "autoCompact.minNumFiles='ten' is not a whole"),
        ({"autoCompact.minFiles": "3"}, "Did you mean 'autoCompact.minNumFiles'"),
    ],
)
def test_bad_auto_compact_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        parse_write_options(options)


def test_auto_compact_conf() -> None:
    assert parse_auto_compact_conf({}) == AutoCompact(False, 50)
    conf = {AUTO_COMPACT_CONF: "true", AUTO_COMPACT_MIN_NUM_FILES_CONF: " 12 ", "x": "y"}
    assert parse_auto_compact_conf(conf) == AutoCompact(True, 12)
    with pytest.raises(InvalidOptionError, match=r"spark\.lance\.autoCompact\.enabled='on'"):
        parse_auto_compact_conf({AUTO_COMPACT_CONF: "on"})
    with pytest.raises(InvalidOptionError, match=r"autoCompact\.minNumFiles='-1'.*at least 1"):
        parse_auto_compact_conf({AUTO_COMPACT_MIN_NUM_FILES_CONF: "-1"})


def _small_table(uri: str, fragments: int, rows: int = 2) -> None:
    for i in range(fragments):
        data = pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())})
        lance.write_dataset(data, uri, mode="append" if i else "create", enable_stable_row_ids=True)


def test_small_fragments_counts_live_rows(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _small_table(uri, 3, rows=4)
    ds = lance.dataset(uri)
    assert compaction.small_fragments(ds) == 3
    assert compaction.small_fragments(ds, 4) == 0  # 4 rows each: not below a target of 4
    ds.delete("id = 0")
    assert compaction.small_fragments(lance.dataset(uri), 4) == 1


def test_compact_here_commits_one_version_with_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _small_table(uri, 5)
    rows = sorted(lance.dataset(uri).to_table()["id"].to_pylist())
    done = compaction.compact_here(uri, storage={}, app_id="app-1", auto=True)
    ds = lance.dataset(uri)
    assert done.version == ds.version == 6 and len(ds.get_fragments()) == 1
    assert dict(done.metrics) == {
        "fragments_removed": 5,
        "fragments_added": 1,
        "files_removed": 5,
        "files_added": 1,
    }
    props = ds.read_transaction(6).transaction_properties or {}
    assert props["lance_spark.operation"] == "OPTIMIZE" and props["lance_spark.appId"] == "app-1"
    assert json.loads(props["lance_spark.operationMetrics"]) == dict(done.metrics)
    assert sorted(ds.to_table()["id"].to_pylist()) == rows
    assert not os.path.exists(tmp_path / "t.lance" / "_lance_spark" / "staging")
    # nothing left to do: no version
    assert compaction.compact_here(uri, storage={}, app_id=None).version is None
    assert lance.dataset(uri).version == 6


def test_conflicting_commit_changes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _small_table(uri, 4)
    ds = lance.dataset(uri)
    planned = compaction.plan(ds, None)
    assert len(planned.tasks) == 1
    data_dir = tmp_path / "t.lance" / "data"
    files = set(os.listdir(data_dir))
    conflict = pytest.raises(CommitConflictError, match=r"OPTIMIZE .* version 4")
    job = StagedJob.begin(uri, read_version=planned.read_version, storage={})
    with conflict as caught, job:
        done = combine(
            compaction.execute_task(uri, planned.read_version, t, storage={}, job_id=job.job_id)
            for t in planned.tasks
        )
        assert len(set(os.listdir(data_dir)) - files) == 1  # the rewritten file
        lance.dataset(uri).delete("id = 2")  # v5: rows of the same fragments
        compaction.commit_rewrites(uri, planned, done.rewrites, storage={}, app_id=None)
    assert caught.value.retryable
    ds = lance.dataset(uri)
    assert ds.version == 5 and len(ds.get_fragments()) == 4
    assert set(os.listdir(data_dir)) == files  # the aborted job deleted its file


def test_auto_compact_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = str(tmp_path / "t.lance")
    _small_table(uri, 3)
    assert compaction.maybe_auto_compact(uri, 3, min_num_files=4, storage={}, app_id=None) is None
    assert lance.dataset(uri).version == 3
    done = compaction.maybe_auto_compact(uri, 3, min_num_files=3, storage={}, app_id=None)
    assert done is not None and done.version == 4
    with caplog.at_level(logging.WARNING):
        missing = str(tmp_path / "missing.lance")
        assert (
            compaction.maybe_auto_compact(missing, 1, min_num_files=1, storage={}, app_id=None)
            is None
        )
    assert "auto compaction" in caplog.text and "the write is committed" in caplog.text
