"""Streaming without a JVM: option parsing, offsets, what a version holds for a stream
(checked on tables pylance writes), and the check that recognises committed writes."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import InvalidOptionError, LanceSparkError, VersionNotFoundError
from lance_spark.source import transactions, txn_markers
from lance_spark.source.options import parse_stream_read_options, parse_write_options
from lance_spark.source.stream_reader import Offset, classify


def test_stream_read_options() -> None:
    opts = parse_stream_read_options(
        {
            "path": "/t",
            "startingVersion": "3",
            "maxBytesPerTrigger": "10m",
            "skipChangeCommits": "true",
            "maxFilesPerTrigger": "4",
        }
    )
    assert (opts.starting_version, opts.max_bytes, opts.max_files) == (3, 10 * 1024**2, 4)
    assert opts.skip_change_commits is True
    assert parse_stream_read_options({"startingVersion": "latest"}).starting_version == -1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingVersion": "0"}, "startingVersion=0 must be at least 1"),
        ({"startingVersion": "2", "startingTimestamp": "2026-01-01"}, "give one of them"),
        ({"maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger='lots' is not a size"),
        ({"maxFilesPerTrigger": "0"}, "maxFilesPerTrigger=0 must be at least 1"),
        ({"versionAsOf": "1"}, "'versionAsOf' is a read option"),
        ({"endingVersion": "3"}, "'endingVersion' is a read option"),
    ],
)
def test_bad_stream_read_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        parse_stream_read_options(options)


def test_txn_options() -> None:
    opts = parse_write_options({"txnAppId": "etl", "txnVersion": "7"})
    assert (opts.txn_app_id, opts.txn_version) == ("etl", 7)
    with pytest.raises(InvalidOptionError, match="txnVersion needs option txnAppId"):
        parse_write_options({"txnVersion": "7"})
    with pytest.raises(InvalidOptionError, match="'txnAppId' is a write option"):
        parse_write_options({"txnAppId": "etl"}, streaming=True)
    streaming = parse_write_options(
        {"streamingQueryId": "q", "checkpointLocation": "/ck"}, streaming=True
    )
    assert streaming.streaming_query_id == "q"
    # The look-back bound is gone: the sink finds its commits however far back they are.
    with pytest.raises(InvalidOptionError, match="unknown write option"):
        parse_write_options({"lance.streaming.dedupe.lookback.versions": "100"})


@given(st.integers(0, 2**40), st.integers(0, 2**20), st.booleans(), st.booleans())
def test_offset_json_round_trips_with_one_key_order(
    version: int, index: int, snap: bool, with_begin: bool
) -> None:
    begin = Offset(version // 2, index // 2, snap) if with_begin else None
    offset = Offset(version, index, snap, begin)
    as_json = json.loads(json.dumps(offset.to_json()))  # as Spark's offset log keeps it
    assert list(as_json) == ["version", "index", "snapshot", *(["from"] if with_begin else [])]
    back = Offset.from_json(as_json)
    assert (back, back.begin) == (offset, begin)
    assert back.to_json() == as_json


def test_offset_from_another_source_is_refused() -> None:
    for value in ({"logOffset": 3}, {"version": 1, "index": 0, "snapshot": False, "from": 2}):
        with pytest.raises(LanceSparkError, match="not a lance_spark stream offset"):
            Offset.from_json(value)


def _table(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def test_classify_appends_changes_and_compaction(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(10)), uri, enable_stable_row_ids=True)  # v1
    lance.write_dataset(_table(range(10, 20)), uri, mode="append")  # v2
    ds = lance.dataset(uri)
    ds.delete("id = 3")  # v3
    lance.write_dataset(_table(range(20, 25)), uri, mode="append")  # v4
    lance.dataset(uri).optimize.compact_files()  # v5
    lance.dataset(uri).create_scalar_index("id", "BTREE")  # v6

    def at(version: int) -> lance.LanceDataset:
        return lance.dataset(uri, version=version)

    first = classify(None, at(1), 1)
    assert first.kind == "append" and sum(u.rows for u in first.units) == 10
    second = classify(at(1), at(2), 2)
    assert second.kind == "append" and [u.rows for u in second.units] == [10]
    assert classify(at(2), at(3), 3).kind == "change"
    assert classify(at(3), at(4), 4).kind == "append"
    assert classify(at(4), at(5), 5).kind == "none"  # compaction moves rows only
    assert classify(at(5), at(6), 6).kind == "none"  # an index


def _writer(uri: str, app: str, number: int, *, ids: list[int], overwrite: bool = False) -> Any:
    """An idempotent write of ``ids`` as (``app``, ``number``), planned, its task run: what
    commit_results commits."""
    from pyspark.sql.types import LongType, StructField, StructType

    from lance_spark.source.writer import plan_write

    options = parse_write_options({"path": uri, "txnAppId": app, "txnVersion": str(number)})
    writer = plan_write(
        uri=uri,
        spark_schema=StructType([StructField("id", LongType())]),
        overwrite=overwrite,
        options=options,
        app_id="app-test",
    )
    batch = pa.record_batch([pa.array(ids, pa.int64())], names=["id"])
    return writer, writer.write(iter([batch]))


def _txn_write(uri: str, app: str, number: int, *, ids: list[int] | None = None) -> int | None:
    writer, message = _writer(uri, app, number, ids=ids or [-1])
    version: int | None = writer.commit_results([message], txn=writer.txn_id())
    return version


def _foreign_appends(uri: str, count: int) -> None:
    for i in range(count):
        lance.write_dataset(_table(range(i, i + 1)), uri, mode="append")


def _check(uri: str, app: str, number: int) -> transactions.Check:
    return transactions.check(uri, transactions.TxnId(app, number), storage={})


def _markers(uri: str, app: str, prefix: str) -> list[Path]:
    folder = Path(txn_markers.app_dir(uri, app))
    return sorted(folder.glob(f"{prefix}-*.json")) if folder.exists() else []


@pytest.fixture
def versions_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions whose transactions the checks read (the walk)."""
    read: list[int] = []
    original = transactions._transaction

    def counting(ds: Any, version: int) -> Any:
        read.append(version)
        return original(ds, version)

    monkeypatch.setattr(transactions, "_transaction", counting)
    return read


def test_check_answers_from_the_markers_without_reading_history(
    tmp_path: Path, versions_read: list[int]
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    assert _txn_write(uri, "a", 0) == 2
    assert _txn_write(uri, "b", 5) == 3
    assert _txn_write(uri, "a", 1) == 4
    _foreign_appends(uri, 250)  # v5..v254
    versions_read.clear()
    assert transactions.newest_commit(lance.dataset(uri), "a", uri=uri, storage={}) == (
        transactions.Committed(1, 4)
    )
    assert _check(uri, "a", 1).repeat == transactions.Committed(1, 4)
    assert _check(uri, "a", 0).repeat == transactions.Committed(1, 4)  # Delta's rule
    assert _check(uri, "a", 2).repeat is None
    assert _check(uri, "b", 5).repeat == transactions.Committed(5, 3)
    assert versions_read == []  # no attempt file anywhere: the state files are exact
    found = _check(uri, "c", 0)  # never wrote: no marker, so the history is read, once
    assert found.repeat is None and found.table is not None and found.table.version == 254
    assert versions_read == list(range(254, 0, -1))
    versions_read.clear()
    assert _check(uri, "c", 0).repeat is None
    assert versions_read == []
    assert _txn_write(uri, "a", 1) is None  # a replay commits nothing
    assert _txn_write(uri, "a", 2) == 255
    assert lance.dataset(uri).count_rows() == 2 + 250 + 4
    for app in ("a", "b"):
        assert _markers(uri, app, "attempt") == []
    assert versions_read == []


def test_new_and_idle_writers_are_judged_exactly_on_a_vacuumed_table(
    tmp_path: Path, versions_read: list[int]
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    _foreign_appends(uri, 5)  # v2..v6
    assert _txn_write(uri, "idle", 3) == 7
    assert versions_read == [6, 5, 4, 3, 2, 1]  # its first check: no marker yet
    versions_read.clear()
    _foreign_appends(uri, 5)  # v8..v12
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    with pytest.raises(OSError, match="not found"):
        lance.dataset(uri).read_transaction(7)  # the idle writer's commit is gone
    # The idle writer restarts: its last commit is known exactly, without version 7.
    assert _check(uri, "idle", 3).repeat == transactions.Committed(3, 7)
    assert _txn_write(uri, "idle", 3) is None
    assert _txn_write(uri, "idle", 4) == 13
    assert versions_read == []
    # A writer that never committed (a new streaming query) reads the versions cleanup left
    # (v13, v12; v11 is gone: the walk ends there), once.
    assert _check(uri, "new", 0).repeat is None
    assert versions_read == [13, 12, 11]
    assert _txn_write(uri, "new", 0) == 14
    assert _txn_write(uri, "new", 0) is None
    assert versions_read == [13, 12, 11]
    ds = lance.dataset(uri)
    assert ds.count_rows() == 2 + 10 + 3
    props = ds.read_transaction(14).transaction_properties or {}
    assert props[transactions.PROP_TXN_APP_ID] == "new"


def _kill_after_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next writer dies right after its Lance commit, before recording it (a check's
    record of no commit goes through)."""
    original = txn_markers.record_state

    def die(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("txn_version") is None:
            return original(*args, **kwargs)
        raise KeyboardInterrupt("killed after the Lance commit")

    monkeypatch.setattr(txn_markers, "record_state", die)


def test_killed_writer_replayed_after_foreign_commits_writes_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, versions_read: list[int]
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    assert _txn_write(uri, "q", 0) == 2
    with monkeypatch.context() as killed:
        _kill_after_commit(killed)
        with pytest.raises(KeyboardInterrupt):
            _txn_write(uri, "q", 1, ids=[1000, 1001])  # commits v3, records nothing
    assert len(_markers(uri, "q", "attempt")) == 1  # left behind by the dead writer
    _foreign_appends(uri, 205)  # v4..v208
    versions_read.clear()
    assert _txn_write(uri, "q", 1, ids=[1000, 1001]) is None  # the replay
    # Read from the latest version down to the dead writer's commit, no further.
    assert versions_read == list(range(208, 2, -1))
    ds = lance.dataset(uri)
    assert ds.version == 208
    assert ds.to_table(filter="id >= 1000")["id"].to_pylist() == [1000, 1001]
    # That check recorded what it read: the next one reads no version again.
    versions_read.clear()
    assert _check(uri, "q", 1).repeat == transactions.Committed(1, 3)
    assert versions_read == []
    # Vacuum settles the stale attempt before cleanup removes the versions after it.
    ds = lance.dataset(uri)
    assert transactions.resolve_stale_attempts(ds, uri, older_than=timedelta(0), storage={}) == 1
    assert _markers(uri, "q", "attempt") == []
    ds.cleanup_old_versions(older_than=timedelta(0))
    assert _check(uri, "q", 1).repeat == transactions.Committed(1, 3)
    assert _txn_write(uri, "q", 2) == 209
    assert versions_read == []


def test_stale_attempt_past_cleaned_up_versions_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    with monkeypatch.context() as killed:
        _kill_after_commit(killed)
        with pytest.raises(KeyboardInterrupt):
            _txn_write(uri, "q", 0)  # commits v2, records nothing
    _foreign_appends(uri, 3)
    # Lance's own cleanup (not the connector's vacuum) removes v2 before any check.
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    [attempt] = _markers(uri, "q", "attempt")
    with pytest.raises(VersionNotFoundError, match=rf"whether 'q' already committed.*{attempt}"):
        _txn_write(uri, "q", 0)
    # Other applications are not affected.
    assert _txn_write(uri, "other", 0) == 6
    # vacuum keeps the attempt (the answer is lost) rather than guess.
    ds = lance.dataset(uri)
    assert transactions.resolve_stale_attempts(ds, uri, older_than=timedelta(0), storage={}) == 0
    assert _markers(uri, "q", "attempt") == [attempt]


def _racing_writers(uri: str, app: str, number: int, count: int) -> list[Any]:
    from pyspark.sql.types import LongType, StructField, StructType

    from lance_spark.source.writer import plan_write

    writers = []
    for i in range(count):
        options = parse_write_options({"path": uri, "txnAppId": app, "txnVersion": str(number)})
        writer = plan_write(
            uri=uri,
            spark_schema=StructType([StructField("id", LongType())]),
            overwrite=False,
            options=options,
            app_id="app-test",
        )
        batch = pa.record_batch([pa.array([(number + 1) * 1000 + i] * 3, pa.int64())], names=["id"])
        writers.append((writer, writer.write(iter([batch]))))
    return writers


def _race_round(uri: str, number: int, count: int) -> list[int | None]:
    """``count`` writers of ("race", ``number``) and one plain append, released together by
    a Barrier; what each writer's commit returned (None: it skipped)."""
    from concurrent.futures import ThreadPoolExecutor

    writers = _racing_writers(uri, "race", number, count)
    barrier = threading.Barrier(count + 1)

    def commit_one(i: int) -> int | None:
        writer, message = writers[i]
        barrier.wait(timeout=60)
        return writer.commit_results([message], txn=writer.txn_id())

    def foreign() -> None:
        barrier.wait(timeout=60)
        lance.write_dataset(_table(range(7, 8)), uri, mode="append")

    with ThreadPoolExecutor(count + 1) as pool:
        plain = pool.submit(foreign)
        got = [f.result(timeout=300) for f in [pool.submit(commit_one, i) for i in range(count)]]
        plain.result(timeout=300)
    return got


def test_racing_idempotent_appends_commit_exactly_once(tmp_path: Path) -> None:
    """4 threads commit the same (app, version) at the same instant (a Barrier), over 5
    rounds, with a plain append racing them in every round: each round commits once."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)
    threads_per_round, rounds = 4, 5
    outcomes = [_race_round(uri, number, threads_per_round) for number in range(rounds)]
    ds = lance.dataset(uri)
    commits = [v for got in outcomes for v in got if v is not None]
    assert [sum(v is not None for v in got) for got in outcomes] == [1] * rounds
    assert len(set(commits)) == rounds
    for number in range(rounds):
        ids = ds.to_table(filter=f"id >= {(number + 1) * 1000} and id < {(number + 2) * 1000}")
        assert ids.num_rows == 3, number  # one writer's rows, once
    for version in commits:
        props = ds.read_transaction(version).transaction_properties or {}
        assert props["lance.streaming.queryId"] == "race"
    # 2 seed rows, 1 row per foreign append, 3 rows per round.
    assert ds.count_rows() == 2 + rounds + 3 * rounds
    # The losers deleted what they wrote: every data file belongs to the latest version.
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.metadata.files}
    assert {p.name for p in (Path(uri) / "data").iterdir()} == referenced
    # Every writer settled its attempt; the state files only move forward.
    assert _markers(uri, "race", "attempt") == []
    states = [json.loads(p.read_text()) for p in _markers(uri, "race", "state")]
    covers = [int(p.stem.split("-")[1]) for p in _markers(uri, "race", "state")]
    assert 1 <= len(states) <= txn_markers.KEEP_STATES + 1
    assert covers == sorted(covers) and covers[-1] >= max(commits)
    numbers = [s["txn_version"] for s in states]
    assert numbers == sorted(numbers) and numbers[-1] == rounds - 1
    assert states[-1]["table_version"] == max(commits)


def test_racing_idempotent_overwrites_commit_exactly_once(tmp_path: Path) -> None:
    """4 threads overwrite the table as the same (app, version) at the same instant, over 4
    rounds: each round commits once, as an overwrite the change feed recognises."""
    from concurrent.futures import ThreadPoolExecutor

    from lance_spark.source import dataset

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri, enable_stable_row_ids=True)
    threads, rounds = 4, 4
    committed = []
    for number in range(rounds):
        writers = [
            _writer(uri, "ow", number, ids=[number * 100 + i] * 2, overwrite=True)
            for i in range(threads)
        ]
        barrier = threading.Barrier(threads)

        def commit_one(
            i: int, writers: list[Any] = writers, barrier: threading.Barrier = barrier
        ) -> int | None:
            writer, message = writers[i]
            barrier.wait(timeout=60)
            version: int | None = writer.commit_results([message], txn=writer.txn_id())
            return version

        with ThreadPoolExecutor(threads) as pool:
            got = list(pool.map(commit_one, range(threads)))
        assert sum(v is not None for v in got) == 1, got
        [version] = [v for v in got if v is not None]
        winner = got.index(version)
        ds = lance.dataset(uri)
        assert ds.version == version
        assert ds.to_table()["id"].to_pylist() == [number * 100 + winner] * 2
        assert dataset.operation(ds, version) == "Overwrite"
        committed.append(version)
    assert committed == list(range(2, 2 + rounds))
    # The losers deleted what they wrote: every data file is some version's.
    referenced = {
        f.path
        for v in range(1, ds.version + 1)
        for fragment in lance.dataset(uri, version=v).get_fragments()
        for f in fragment.metadata.files
    }
    assert {p.name for p in (Path(uri) / "data").iterdir()} == referenced
    assert _markers(uri, "ow", "attempt") == []


def test_an_idempotent_commit_checks_once_and_a_lost_round_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's check is the one its first round commits on (no second check of the
    same versions); a round Lance refused checks the versions committed since. (Planning
    checks too, to skip the tasks of a repeat: not counted here.)"""
    uri = str(tmp_path / "t.lance")
    checks: list[str] = []
    original = transactions.check
    # Run by the next check, after it answered: a commit racing the writer's.
    race: list[Any] = []

    def counting(uri: str, txn: transactions.TxnId, **kwargs: Any) -> transactions.Check:
        checks.append(txn.app_id)
        found = original(uri, txn, **kwargs)
        if race:
            race.pop()()
        return found

    monkeypatch.setattr(transactions, "check", counting)

    def commit(number: int, *, ids: list[int], overwrite: bool = False) -> int | None:
        writer, message = _writer(uri, "w", number, ids=ids, overwrite=overwrite)
        checks.clear()
        version: int | None = writer.commit_results([message], txn=writer.txn_id())
        return version

    assert commit(0, ids=[1]) == 1  # creates the table
    assert checks == ["w"]
    assert commit(1, ids=[2]) == 2  # an append
    assert checks == ["w"]
    writer, message = _writer(uri, "w", 1, ids=[2])  # planned before the commit of (w, 1)
    assert _txn_write(uri, "w", 1) is None
    checks.clear()
    assert writer.commit_results([message], txn=writer.txn_id()) is None  # a repeat
    assert checks == ["w"]
    assert commit(2, ids=[5], overwrite=True) == 3  # an overwrite
    assert checks == ["w"]
    # replaceWhere reads the table (its deletion files) between the commit's check and its
    # commit, which does not rebase over an idempotent write: it checks again right before.
    from pyspark.sql.types import LongType, StructField, StructType

    from lance_spark.source.writer import plan_write

    options = parse_write_options(
        {"path": uri, "txnAppId": "w", "txnVersion": "3", "replaceWhere": "id = 5"}
    )
    writer = plan_write(
        uri=uri,
        spark_schema=StructType([StructField("id", LongType())]),
        overwrite=True,
        options=options,
        app_id="app-test",
    )
    message = writer.write(iter([pa.record_batch([pa.array([5, 5], pa.int64())], names=["id"])]))
    checks.clear()
    assert writer.commit_results([message], txn=writer.txn_id()) == 4
    assert checks == ["w", "w"]
    # Another application's idempotent append commits right after the writer's check: Lance
    # refuses the writer's first round, and the second checks again before committing.
    writer, message = _writer(uri, "w", 4, ids=[8])
    race.append(lambda: _txn_write(uri, "other", 0, ids=[7]))
    checks.clear()
    assert writer.commit_results([message], txn=writer.txn_id()) == 6
    assert checks == ["w", "other", "other", "w"]  # the other's planning and commit checks
    ds = lance.dataset(uri)
    assert ds.version == 6 and sorted(ds.to_table()["id"].to_pylist()) == [5, 5, 7, 8]
    assert _markers(uri, "w", "attempt") == []


# --- the streaming source: a batch is a function of its offsets -------------------------------


def _stream_reader(uri: str, **options: str) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    from lance_spark.source.stream_reader import stream_reader

    opts = parse_stream_read_options({"path": uri, "maxFilesPerTrigger": "2", **options})
    return stream_reader(uri, opts, StructType([StructField("id", LongType())]))


def _batch_ids(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    return sorted(
        i
        for partition in reader.partitions(start, end)
        for batch in reader.read(partition)
        for i in batch.column(0).to_pylist()
    )


@pytest.mark.parametrize("starting", [{}, {"startingVersion": "latest"}, {"startingVersion": "2"}])
def test_stream_batches_replanned_after_commits_read_the_same_rows(
    tmp_path: Path, starting: dict[str, str]
) -> None:
    """Batches planned with maxFilesPerTrigger=2 while another writer appends, re-planned
    by a restarted reader after more appends, a compaction and a delete, as Spark does from
    its offset log (for the first batch with a start it asks initialOffset() for again):
    the same rows, and the batches neither overlap nor leave a gap."""
    uri = str(tmp_path / "t.lance")
    appended: list[range] = []

    def append(n: int, per_file: int = 1024) -> None:
        ids = range(len(appended) * 100, len(appended) * 100 + n)
        appended.append(ids)
        lance.write_dataset(_table(ids), uri, mode="append", max_rows_per_file=per_file)

    append(12, per_file=3)  # v1: four fragments
    append(5)  # v2
    append(5)  # v3
    reader = _stream_reader(uri, **starting)
    start = reader.initialOffset()
    # The appends the stream reads: all (the snapshot), from version 2, from version 4.
    skip = {None: 0, "2": 1, "latest": 3}[starting.get("startingVersion")]
    expected = [i for ids in appended[skip:] for i in ids]
    batches = []
    for _ in range(20):
        if len(appended) < 7:
            append(8, per_file=3)  # the other writer: three fragments a version
            expected.extend(appended[-1])
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        batches.append((start, end, _batch_ids(reader, start, end)))
        start = end
    assert len(batches) > 4
    assert sorted(i for _, _, ids in batches for i in ids) == sorted(expected)
    assert all(0 < len(ids) <= 2 * 5 for _, _, ids in batches)  # two fragments at most

    append(4)
    ds = lance.dataset(uri)
    ds.optimize.compact_files()
    ds = lance.dataset(uri)
    ds.delete("id % 2 = 0")
    append(4)
    for n, (start, end, ids) in enumerate(batches):
        restarted = _stream_reader(uri, **starting)
        if n == 0:  # Spark keeps no start offset for the first batch: it asks again
            start = restarted.initialOffset()
        assert _batch_ids(restarted, start, end) == ids, n
    if starting != {"startingVersion": "2"}:
        # An end offset written before ends named their start, re-planned from a start that
        # moved on: an error naming the offsets, not another batch's rows.
        old_end = {k: v for k, v in batches[0][1].items() if k != "from"}
        restarted = _stream_reader(uri, **starting)
        with pytest.raises(LanceSparkError, match="do not follow one another"):
            restarted.partitions(restarted.initialOffset(), old_end)
