"""Streaming without a JVM: option parsing, offsets, what a version holds for a stream
(checked on tables pylance writes), and the look-back that recognises committed writes."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import InvalidOptionError
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
    with pytest.raises(InvalidOptionError, match="above the maximum"):
        parse_write_options({"lance.streaming.dedupe.lookback.versions": "10001"})


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


def test_look_back_finds_the_newest_commit_of_an_application(tmp_path: Path) -> None:
    from lance.fragment import write_fragments

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(_table(range(2)), uri)

    def append(app: str, number: int) -> None:
        fragments = write_fragments(_table(range(1)), uri, mode="append")
        latest = lance.dataset(uri).version
        info = CommitInfo("WRITE", txn=transactions.TxnId(app, number))
        commit(uri, append_op(fragments), read_version=latest, info=info, storage={})

    append("a", 0)
    append("b", 5)
    append("a", 1)
    found = transactions.last_committed(uri, "a", storage={}, lookback=100)
    assert found == transactions.Committed(1, 4)
    assert transactions.skipped(uri, transactions.TxnId("a", 1), storage={}, lookback=100)
    assert transactions.skipped(uri, transactions.TxnId("a", 2), storage={}, lookback=100) is None
    # Beyond the look-back window the commit is not seen.
    assert transactions.last_committed(uri, "b", storage={}, lookback=1) is None
    assert transactions.last_committed(uri, "b", storage={}, lookback=2) == (
        transactions.Committed(5, 3)
    )
