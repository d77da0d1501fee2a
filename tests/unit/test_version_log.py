"""Time travel reads a bounded number of manifests, however many versions the table has.

No JVM: lance_spark.source.dataset and the data source's planning directly. The manifests
read are counted by Lance itself (``io_stats_incremental``: read operations of the dataset's
object store, which checkouts of other versions share), and cross-checked by damaging every
manifest a resolution must not read.
"""

from __future__ import annotations

import math
import shutil
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark.errors import VersionNotFoundError
from lance_spark.source import dataset as _dataset
from lance_spark.source.datasource import LanceDataSource
from lance_spark.source.options import TimeTravel

VERSIONS = 40


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A table with VERSIONS versions: version v holds ids 0 .. v-1 (one-row appends)."""
    uri = str(tmp_path_factory.mktemp("versions") / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    for i in range(1, VERSIONS):
        lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append")
    return uri


def _reads(ds: lance.LanceDataset) -> int:
    return int(ds.io_stats_incremental().read_iops)


def _manifest(uri: str, version: int) -> str:
    return f"{uri}/_versions/{2**64 - 1 - version:020d}.manifest"


def test_listing_every_version_reads_every_manifest(many: str) -> None:
    """The baseline the log avoids: ds.versions() reads all of them."""
    latest = _dataset.open_latest(many, storage={})
    _reads(latest)
    assert len(_dataset.version_timestamps(latest)) == VERSIONS
    assert _reads(latest) >= VERSIONS


def test_a_version_number_reads_one_manifest(many: str) -> None:
    latest = _dataset.open_latest(many, storage={})
    _reads(latest)
    assert _dataset.resolve_version(latest, TimeTravel(version=5), uri=many) == 5
    assert _reads(latest) <= 2  # the manifest of version 5 (and its footer)


def test_a_missing_version_lists_the_versions_without_reading_them(many: str) -> None:
    latest = _dataset.open_latest(many, storage={})
    _reads(latest)
    with pytest.raises(VersionNotFoundError, match=f"existing versions: 1-{VERSIONS}"):
        _dataset.resolve_version(latest, TimeTravel(version=VERSIONS + 7), uri=many)
    assert _reads(latest) <= 2  # the failed open; the listing reads names only
    with pytest.raises(VersionNotFoundError, match=f"version {VERSIONS + 7} of"):
        _dataset.open_resolved(many, TimeTravel(version=VERSIONS + 7), storage={})


def test_timestamps_are_found_by_binary_search(many: str) -> None:
    stamps = _dataset.version_timestamps(_dataset.open_latest(many, storage={}))
    bound = 2 * (math.ceil(math.log2(VERSIONS)) + 1)  # a manifest (two reads) per step
    for version, stamp in stamps[:: max(1, VERSIONS // 8)] + stamps[-1:]:
        for when, expected in ((stamp, version), (stamp + timedelta(microseconds=1), version)):
            latest = _dataset.open_latest(many, storage={})
            _reads(latest)
            found = _dataset.resolve_version(latest, TimeTravel(timestamp=when), uri=many)
            assert found == expected
            assert _reads(latest) <= bound


def test_binary_search_agrees_with_a_linear_scan(many: str) -> None:
    stamps = _dataset.version_timestamps(_dataset.open_latest(many, storage={}))
    # Every commit time, and a moment just before and just after each.
    moments = sorted(
        {s + timedelta(microseconds=d) for _, s in stamps for d in (-1, 0, 1)}
        | {stamps[0][1] - timedelta(days=1), stamps[-1][1] + timedelta(days=1)}
    )
    log = _dataset.VersionLog(_dataset.open_latest(many, storage={}), uri=many)
    for when in moments:
        before = [v for v, s in stamps if s <= when]
        after = [v for v, s in stamps if s >= when]
        assert log.last_at_or_before(when) == (max(before) if before else None)
        assert log.first_at_or_after(when) == (min(after) if after else None)


def test_a_timestamp_before_the_first_version_is_an_error(many: str) -> None:
    first = _dataset.version_timestamps(_dataset.open_latest(many, storage={}))[0][1]
    with pytest.raises(VersionNotFoundError, match="before the first version"):
        _dataset.open_resolved(many, TimeTravel(timestamp=first - timedelta(1)), storage={})


def test_gaps_left_by_cleanup(tmp_path: Path) -> None:
    uri = str(tmp_path / "gaps.lance")
    ds = lance.write_dataset(pa.table({"id": pa.array([0], pa.int64())}), uri)
    for i in range(1, 6):
        ds = lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), uri, mode="append")
    ds.tags.create("keep", 2)
    ds.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    latest = _dataset.open_latest(uri, storage={})
    log = _dataset.VersionLog(latest, uri=uri)
    assert log.numbers() == [2, 6]
    with pytest.raises(VersionNotFoundError, match="existing versions: 2, 6"):
        _dataset.open_resolved(uri, TimeTravel(version=4), storage={})
    stamp = log.timestamp(2)
    assert log.last_at_or_before(stamp + timedelta(microseconds=1)) == 2
    assert log.first_at_or_after(stamp + timedelta(microseconds=1)) == 6


def test_planning_an_old_version_reads_no_other_manifest(many: str, tmp_path: Path) -> None:
    """The data source's schema() and reader() for versionAsOf=5 open version 5 directly:
    with every other manifest but the latest damaged, they still plan it."""
    uri = str(tmp_path / "copy.lance")
    shutil.copytree(many, uri)
    for version in range(1, VERSIONS):
        if version != 5:
            Path(_manifest(uri, version)).write_bytes(b"garbage")
    source = LanceDataSource({"path": uri, "versionAsOf": "5"})
    schema = source.schema()
    reader = source.reader(schema)
    assert getattr(reader, "version", None) == 5
    assert sum(f.live_rows for f in getattr(reader, "fragments", ())) == 5
