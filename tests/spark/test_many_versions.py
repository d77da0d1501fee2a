"""Reading a table with many versions reads only the manifests a query needs.

Every manifest a query must not need is damaged (overwritten with garbage): a read that
listed the versions, as ``ds.versions()`` does, would fail with CorruptTableError. Time
travel, ``history(limit)``, the change feed and ``diff`` over a recent range, and
``detail()`` still work and return what pylance returns for the same versions.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lance_spark import LanceTable
from lance_spark.errors import CorruptTableError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

VERSIONS = 30
KEPT = {1, 5, VERSIONS - 2, VERSIONS - 1, VERSIONS}  # the only readable manifests


def _manifest(uri: str, version: int) -> str:
    return f"{uri}/_versions/{2**64 - 1 - version:020d}.manifest"


@pytest.fixture
def damaged(spark: SparkSession, table_uri: str) -> dict[int, list[int]]:
    """A table of VERSIONS versions (Spark's first, then one-row appends by pylance) whose
    manifests outside KEPT are damaged; returns the ids of each kept version."""
    spark.range(3).write.format("lance").save(table_uri)
    for i in range(3, VERSIONS + 2):
        lance.write_dataset(pa.table({"id": pa.array([i], pa.int64())}), table_uri, mode="append")
    expected = {
        v: sorted(lance.dataset(table_uri, version=v).to_table()["id"].to_pylist()) for v in KEPT
    }
    for version in range(1, VERSIONS + 1):
        if version not in KEPT:
            Path(_manifest(table_uri, version)).write_bytes(b"not a manifest")
    return expected


def test_an_old_version_is_read_without_the_others(
    spark: SparkSession, table_uri: str, damaged: dict[int, list[int]]
) -> None:
    for version in (5, 1, VERSIONS - 1):
        df = spark.read.format("lance").option("versionAsOf", version).load(table_uri)
        assert sorted(r.id for r in df.collect()) == damaged[version]
        assert df.where("id >= 0").count() == len(damaged[version])
    latest = spark.read.format("lance").load(table_uri)
    assert sorted(r.id for r in latest.collect()) == damaged[VERSIONS]
    # The damage is real: a query that needs every manifest says which one is broken.
    with pytest.raises(CorruptTableError, match="damaged"):
        LanceTable.forPath(spark, table_uri).history().collect()


def test_recent_history_changes_and_detail_read_only_their_versions(
    spark: SparkSession, table_uri: str, damaged: dict[int, list[int]]
) -> None:
    table = LanceTable.forPath(spark, table_uri)
    history = table.history(limit=3).collect()
    assert [r.version for r in history] == [VERSIONS, VERSIONS - 1, VERSIONS - 2]
    assert [r.operation for r in history] == ["WRITE"] * 3
    assert history[0].timestamp >= history[1].timestamp >= history[2].timestamp

    feed = (
        spark.read.format("lance")
        .option("readChangeFeed", "true")
        .option("startingVersion", VERSIONS - 1)
        .load(table_uri)
    )
    rows = sorted((r.id, r._change_type, r._commit_version) for r in feed.collect())
    new_ids = sorted(set(damaged[VERSIONS]) - set(damaged[VERSIONS - 2]))
    assert rows == [(i, "insert", VERSIONS - 1 + n) for n, i in enumerate(new_ids)]

    diff = table.diff(VERSIONS - 2, VERSIONS).collect()
    assert sorted((r.id, r._change_type) for r in diff) == [(i, "insert") for i in new_ids]

    detail = table.detail().collect()[0]
    assert detail.version == VERSIONS and detail.createdAt is not None
    assert detail.lastModified >= detail.createdAt
