"""Streaming without a JVM: option parsing, offsets, what a version holds for a stream
(checked on tables pylance writes), and the check that recognises committed writes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import InvalidOptionError, VersionNotFoundError
from lance_spark.source import transactions
from lance_spark.source.commit import CommitInfo, append_op, commit
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


@given(st.integers(0, 2**40), st.integers(0, 2**20), st.booleans())
def test_offset_json_round_trips_with_one_key_order(version: int, index: int, snap: bool) -> None:
    offset = Offset(version, index, snap)
    as_json = offset.to_json()
    assert list(as_json) == ["version", "index", "snapshot"]
    assert Offset.from_json(as_json) == offset


def test_offset_from_another_source_is_refused() -> None:
    with pytest.raises(Exception, match="not a lance_spark stream offset"):
        Offset.from_json({"logOffset": 3})


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


def _txn_append(uri: str, app: str, number: int) -> None:
    from lance.fragment import write_fragments

    fragments = write_fragments(_table(range(1)), uri, mode="append")
    latest = lance.dataset(uri).version
    info = CommitInfo("WRITE", txn=transactions.TxnId(app, number))
    commit(uri, append_op(fragments), read_version=latest, info=info, storage={})


def _foreign_appends(uri: str, count: int) -> None:
    for i in range(count):
        lance.write_dataset(_table(range(i, i + 1)), uri, mode="append")


def _check(uri: str, app: str, number: int) -> transactions.Check:
    return transactions.check(uri, transactions.TxnId(app, number), storage={})


def test_check_finds_the_newest_commit_of_an_application_however_far_back(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    _txn_append(uri, "a", 0)  # v2
    _txn_append(uri, "b", 5)  # v3
    _txn_append(uri, "a", 1)  # v4
    _foreign_appends(uri, 250)  # v5..v254: far beyond the old bound of 100
    for app in ("a", "b"):
        transactions.forget(uri, app)
    assert transactions.newest_commit(lance.dataset(uri), "a", uri=uri) == (
        transactions.Committed(1, 4)
    )
    assert _check(uri, "a", 1).repeat == transactions.Committed(1, 4)
    assert _check(uri, "a", 0).repeat == transactions.Committed(1, 4)  # Delta's rule
    assert _check(uri, "a", 2).repeat is None
    assert _check(uri, "b", 5).repeat == transactions.Committed(5, 3)
    found = _check(uri, "c", 0)
    assert found.repeat is None and found.table is not None and found.table.version == 254
    # What a worker remembers is extended by the versions committed since.
    _foreign_appends(uri, 3)
    _txn_append(uri, "a", 2)  # v258
    assert _check(uri, "a", 2).repeat == transactions.Committed(2, 258)
    assert _check(uri, "c", 0).repeat is None


def test_check_stops_at_the_newest_commit_and_never_guesses_past_removed_versions(
    tmp_path: Path,
) -> None:
    from datetime import timedelta

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)  # v1
    _foreign_appends(uri, 5)  # v2..v6
    _txn_append(uri, "a", 3)  # v7
    _foreign_appends(uri, 5)  # v8..v12
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0))
    ds = lance.dataset(uri)
    with pytest.raises(OSError, match="not found"):
        ds.read_transaction(7)  # the commit of "a" is gone with the old versions...
    for app in ("a", "b"):
        transactions.forget(uri, app)
    # ...so whether "a" (or "b", never seen) committed cannot be known: an error, no guess.
    for app in ("a", "b"):
        with pytest.raises(VersionNotFoundError, match=rf"whether '{app}' already committed"):
            _check(uri, app, 4)
    # A commit newer than the removed versions answers without reading them.
    _txn_append(uri, "a", 4)  # v13
    transactions.forget(uri, "a")
    assert _check(uri, "a", 4).repeat == transactions.Committed(4, 13)
    assert _check(uri, "a", 5).repeat is None


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
        return writer.commit_results([message], txn=writer._txn())

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
