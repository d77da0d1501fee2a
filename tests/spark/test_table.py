"""LanceTable: the Delta-like table API (history, restore, tags, maintenance, indexes, clone)."""

from __future__ import annotations

import itertools
import os

import lance
import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import (
    ColumnNotFoundError,
    InvalidOptionError,
    LanceTable,
    TableNotFoundError,
    VersionNotFoundError,
)
from lance_spark.source.dataset import version_timestamps

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

_names = (f"lance_tbl_{i}" for i in itertools.count())


def _frame(spark: SparkSession, start: int, n: int, parts: int = 2) -> DataFrame:
    return spark.range(start, start + n, numPartitions=parts).selectExpr(
        "id", "concat('l', id % 3) AS label"
    )


def _append(spark: SparkSession, uri: str, start: int, n: int, parts: int = 2) -> None:
    _frame(spark, start, n, parts).write.format("lance").mode("append").save(uri)


def _ids(uri: str, version: int | str | None = None) -> list[int]:
    return sorted(lance.dataset(uri, version=version).to_table()["id"].to_pylist())


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def test_for_path_for_name_is_lance_table(spark: SparkSession, table_uri: str, tmp_path) -> None:
    assert not LanceTable.isLanceTable(spark, table_uri)
    with pytest.raises(TableNotFoundError, match=r"table\.lance"):
        LanceTable.forPath(spark, table_uri)
    _append(spark, table_uri, 0, 10)
    assert LanceTable.isLanceTable(spark, table_uri)
    t = LanceTable.forPath(spark, table_uri)
    assert t.countRows() == 10 and "table.lance" in repr(t)

    name = next(_names)
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{table_uri}'")
    try:
        by_name = LanceTable.forName(spark, name)
        assert os.path.samefile(by_name.uri, table_uri)
        assert by_name.countRows("id < 4") == 4
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
    with pytest.raises(TableNotFoundError, match="no_such_table"):
        LanceTable.forName(spark, "no_such_table")
    other = next(_names)
    spark.sql(f"CREATE TABLE {other} (id INT) USING parquet LOCATION '{tmp_path / 'pq'}'")
    try:
        with pytest.raises(TableNotFoundError, match=rf"{other}.*not a Lance table"):
            LanceTable.forName(spark, other)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {other}")


def test_history_restore_and_foreign_versions(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, 0, 20)  # v1 WRITE
    _frame(spark, 20, 10).write.format("lance").option("userMetadata", "second").mode(
        "append"
    ).save(table_uri)  # v2
    _frame(spark, 100, 5).write.format("lance").mode("overwrite").save(table_uri)  # v3
    t = LanceTable.forPath(spark, table_uri)

    with pytest.raises(VersionNotFoundError, match=r"version 9 .*existing versions: 1-3"):
        t.restoreToVersion(9)
    metrics = t.restoreToVersion(2).first()  # v4
    assert metrics is not None
    ds = lance.dataset(table_uri)
    assert ds.version == 4 and _ids(table_uri) == _ids(table_uri, 2) == list(range(30))
    assert metrics.num_of_files_after_restore == 4 and metrics.num_restored_files == 4
    assert metrics.num_removed_files == 2 and metrics.table_size_after_restore > 0
    assert ds.read_transaction(4).transaction_properties["lance_spark.operation"] == "RESTORE"

    # restoreToTimestamp: the timestamp of version 3 restores version 3
    stamp = dict(version_timestamps(ds))[3]
    t.restoreToTimestamp(stamp)  # v5
    assert lance.dataset(table_uri).version == 5 and _ids(table_uri) == list(range(100, 105))
    t.restoreToVersion(4)  # v6
    assert t.optimize().executeCompaction().first().fragments_removed == 4  # v7 Rewrite

    data = pa.table({"id": pa.array([500], pa.int64()), "label": ["x"]})
    lance.write_dataset(data, table_uri, mode="append")  # v8, plain pylance
    lance.dataset(table_uri).delete("id = 0")  # v9
    lance.dataset(table_uri).optimize.compact_files()  # v10 reserves fragment ids, v11 Rewrite

    rows = t.history().collect()
    assert [r.version for r in rows] == list(range(11, 0, -1))
    ops = [r.operation for r in rows]
    assert ops == [
        "OPTIMIZE", "UNKNOWN", "DELETE", "WRITE", "OPTIMIZE", "RESTORE", "RESTORE", "RESTORE",
        "WRITE", "WRITE", "WRITE",
    ]  # fmt: skip
    by_version = {r.version: r for r in rows}
    assert by_version[2].userMetadata == "second" and by_version[1].userMetadata is None
    assert by_version[2].operationParameters == {"mode": "Append"}
    assert by_version[3].operationParameters == {"mode": "Overwrite"}
    assert by_version[2].operationMetrics["numOutputRows"] == "10"
    assert by_version[7].operationMetrics["fragments_removed"] == "4"  # the connector's
    assert by_version[4].operationParameters == {"version": "2"}
    assert by_version[4].operationMetrics["num_restored_files"] == "4"
    assert by_version[5].operationParameters["version"] == "3"
    assert by_version[1].appId == spark.conf.get("spark.app.id")
    assert by_version[7].appId == spark.conf.get("spark.app.id")
    for foreign in (by_version[11], by_version[10], by_version[9], by_version[8]):
        assert foreign.operationParameters == {} and foreign.operationMetrics == {}
        assert foreign.userMetadata is None and foreign.appId is None
    assert rows[0].timestamp >= rows[-1].timestamp
    assert [r.version for r in t.history(2).collect()] == [11, 10]
    assert sorted(r.id for r in t.toDF().collect()) == [*range(1, 30), 500]


def test_to_df_time_travel_and_tags(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, 0, 5)
    _append(spark, table_uri, 5, 5)
    t = LanceTable.forPath(spark, table_uri)
    t.createTag("first", 1)
    t.createTag("latest")
    tags = t.listTags().collect()
    assert [(r.tag, r.version) for r in tags] == [("first", 1), ("latest", 2)]
    assert tags[0].createdAt is not None
    with pytest.raises(InvalidOptionError, match="'first' already exists"):
        t.createTag("first", 2)
    with pytest.raises(VersionNotFoundError, match="version 7"):
        t.createTag("nope", 7)

    assert t.toDF().count() == 10
    assert t.toDF(version=1).count() == 5
    assert t.toDF(tag="first").count() == 5
    stamp = dict(version_timestamps(lance.dataset(table_uri)))[1]
    assert t.toDF(timestamp=stamp).count() == 5
    assert t.toDF(timestamp=stamp.isoformat()).count() == 5
    with pytest.raises(Exception, match="at most one"):
        t.toDF(version=1, tag="first").count()

    t.deleteTag("first")
    assert [r.tag for r in t.listTags().collect()] == ["latest"]
    with pytest.raises(VersionNotFoundError, match=r"'first' does not exist.*latest"):
        t.deleteTag("first")


def test_count_rows_and_compaction_keeps_rows(spark: SparkSession, table_uri: str) -> None:
    for i in range(6):
        _append(spark, table_uri, i * 10, 10, parts=2)
    t = LanceTable.forPath(spark, table_uri)
    assert len(lance.dataset(table_uri).get_fragments()) == 12
    assert t.countRows() == 60 == spark.read.format("lance").load(table_uri).count()
    want = spark.read.format("lance").load(table_uri).filter("label = 'l1'").count()
    assert t.countRows("label = 'l1'") == want == 20

    with pytest.raises(InvalidOptionError, match="target_rows_per_fragment"):
        t.optimize().executeCompaction(target_rows_per_fragment=0)
    m = t.optimize().executeCompaction(target_rows_per_fragment=1000).first()
    assert m is not None and m.fragments_removed == 12 and m.fragments_added == 1
    ds = lance.dataset(table_uri)
    assert len(ds.get_fragments()) == 1 and _ids(table_uri) == list(range(60))
    assert type(ds.read_transaction(ds.version).operation).__name__ == "Rewrite"


def test_vacuum_keeps_current_and_tagged(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, 0, 10)
    for i in range(1, 4):
        _frame(spark, i * 100, 10).write.format("lance").mode("overwrite").save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    t.createTag("keep", 2)
    before = _data_files(table_uri)
    assert len(before) == 8

    with pytest.raises(
        InvalidOptionError, match=r"vacuum\(\) argument 'retentionHours' takes .* not -1"
    ):
        t.vacuum(-1)
    assert t.vacuum(168).first().old_versions == 0  # nothing that old
    dry = t.vacuum(0, dryRun=True).first()
    assert dry.dry_run and dry.old_versions == 2 and dry.data_files_removed == 4
    # Every file is referenced by some version: none is an orphan.
    assert dry.unreferenced_files_removed == 0 and dry.unreferenced_files == []
    assert dry.staging_markers_removed == 0
    assert _data_files(table_uri) == before

    done = t.vacuum(0).first()
    assert not done.dry_run and done.old_versions == 2 and done.bytes_removed > 0
    assert done.asDict() == {**dry.asDict(), "dry_run": False}  # the dry run's numbers
    assert len(_data_files(table_uri)) == 4
    assert [v["version"] for v in lance.dataset(table_uri).versions()] == [2, 4]
    assert sorted(r.id for r in t.toDF().collect()) == list(range(300, 310))
    assert sorted(r.id for r in t.toDF(tag="keep").collect()) == list(range(100, 110))


def test_indexes(spark: SparkSession, table_uri: str) -> None:
    rng = np.random.default_rng(0)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(512 * 8, dtype=np.float32)), 8)
    table = pa.table(
        {
            "id": pa.array(range(512), pa.int64()),
            "label": [f"l{i % 4}" for i in range(512)],
            "v": vectors,
        }
    )
    lance.write_dataset(table, table_uri)
    t = LanceTable.forPath(spark, table_uri)

    def read(where: str) -> list[int]:
        df = spark.read.format("lance").option("columns", "id,label").load(table_uri)
        return sorted(r.id for r in df.filter(where).collect())

    plain = read("id BETWEEN 10 AND 20 OR id = 400")
    t.createIndex("id", "btree")
    t.createIndex("label", "BITMAP", name="label_bitmap")
    t.createIndex("v", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    indices = {r.name: (r.columns, r.type) for r in t.listIndices().collect()}
    assert indices == {
        "id_idx": (["id"], "BTree"),
        "label_bitmap": (["label"], "Bitmap"),
        "v_idx": (["v"], "IVF_PQ"),
    }
    assert read("id BETWEEN 10 AND 20 OR id = 400") == plain == [*range(10, 21), 400]
    assert len(read("label = 'l2'")) == 128

    with pytest.raises(InvalidOptionError, match=r"'HASH'.*BTREE.*IVF_PQ"):
        t.createIndex("id", "HASH")
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        t.createIndex("nope", "BTREE")
    with pytest.raises(InvalidOptionError, match=r"'label'.*fixed_size_list"):
        t.createIndex("label", "IVF_PQ")
    t.dropIndex("id_idx")
    assert sorted(r.name for r in t.listIndices().collect()) == ["label_bitmap", "v_idx"]
    with pytest.raises(InvalidOptionError, match=r"'id_idx' does not exist.*label_bitmap"):
        t.dropIndex("id_idx")
    assert read("id BETWEEN 10 AND 20 OR id = 400") == plain


def test_shallow_clone_is_independent(spark: SparkSession, tmp_path) -> None:
    source = str(tmp_path / "source.lance")
    _append(spark, source, 0, 10)
    _append(spark, source, 10, 10)
    t = LanceTable.forPath(spark, source)
    clone = t.shallowClone(str(tmp_path / "clone.lance"), version=1)
    assert _ids(clone.uri) == list(range(10))
    latest = t.shallowClone(str(tmp_path / "latest.lance"))
    assert sorted(r.id for r in latest.toDF().collect()) == list(range(20))
    with pytest.raises(InvalidOptionError, match=r"exists.*replace=True"):
        t.shallowClone(clone.uri)

    _append(spark, clone.uri, 100, 5)
    assert _ids(clone.uri) == [*range(10), *range(100, 105)]
    assert lance.dataset(source).version == 2 and _ids(source) == list(range(20))
    assert _ids(source, 1) == list(range(10))


def _rows(uri: str, version: int | None = None) -> list[tuple[object, ...]]:
    table = lance.dataset(uri, version=version).to_table()
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names), strict=True))


def test_shallow_clone_replace_keeps_the_target_history(spark: SparkSession, tmp_path) -> None:
    """Delta's ``replace=True``: the clone is the target's next version; the target's earlier
    versions stay readable, and both tables change independently afterwards."""
    third = str(tmp_path / "third.lance")
    _append(spark, third, 0, 10)
    # The source is a clone itself (its first files are the third table's), has deleted rows
    # in one fragment and an index.
    source = LanceTable.forPath(spark, third).shallowClone(str(tmp_path / "source.lance"))
    _append(spark, source.uri, 10, 10)
    source.delete("id IN (3, 14)")
    source.createIndex("id", "BTREE")
    target_uri = str(tmp_path / "target.lance")
    spark.createDataFrame([(1.5, "x")], "w double, s string").write.format("lance").mode(
        "append"
    ).save(target_uri)
    LanceTable.forPath(spark, target_uri).createIndex("w", "BTREE")
    before = lance.dataset(target_uri).version
    expected = _rows(source.uri)

    with pytest.raises(InvalidOptionError, match=r"exists.*replace=True"):
        source.shallowClone(target_uri)
    assert lance.dataset(target_uri).version == before
    target = source.shallowClone(target_uri, replace=True)

    ds = lance.dataset(target_uri)
    assert _rows(target_uri) == expected and ds.schema == lance.dataset(source.uri).schema
    frame = target.toDF()
    assert sorted(tuple(r) for r in frame.collect()) == expected
    assert frame.columns == ["id", "label"] and frame.where("id = 14").count() == 0
    assert ds.describe_indices() == []  # the target's index went with its rows
    history = target.history().orderBy("version").collect()
    assert [r.operation for r in history[-2:]] == ["ADD BASE PATHS", "CLONE"]
    params = history[-1].operationParameters
    assert params["sourceVersion"] == str(lance.dataset(source.uri).version)
    assert params["isShallow"] == "true" and "source.lance" in params["source"]
    metrics = history[-1].operationMetrics
    assert int(metrics["numOutputRows"]) == len(expected)
    # the two fragments with a deleted row are copied (their 8 live rows), the two others
    # referred to
    assert (metrics["numCopiedRows"], metrics["numReferencedFiles"]) == ("8", "2")
    assert _rows(target_uri, before) == [(1.5, "x")]  # the target's history stays readable

    # Replacing again (an older version) registers no base anew: one version.
    latest = ds.version
    source.shallowClone(target_uri, version=1, replace=True)
    assert lance.dataset(target_uri).version == latest + 1
    assert _rows(target_uri) == _rows(source.uri, 1)
    source.shallowClone(target_uri, replace=True)

    # Independent afterwards, and vacuuming the target removes none of the source's files.
    _append(spark, target_uri, 100, 2)
    target.delete("id = 0")
    source.delete("id = 1")
    assert _ids(target_uri) == sorted([*(r[0] for r in expected if r[0] != 0), 100, 101])
    assert _ids(source.uri) == [i for i in (r[0] for r in expected) if i != 1]
    target.vacuum(0)
    assert _ids(source.uri) == [i for i in (r[0] for r in expected) if i != 1]
    assert _ids(third) == list(range(10))
    assert _ids(target_uri) == sorted([*(r[0] for r in expected if r[0] != 0), 100, 101])
    assert target.toDF().count() == len(expected) + 1

    with pytest.raises(InvalidOptionError, match=r"target=.*the table itself"):
        source.shallowClone(source.uri, replace=True)
    other_format = str(tmp_path / "legacy.lance")
    version = lance.dataset(source.uri).data_storage_version
    lance.write_dataset(
        pa.table({"id": [1]}),
        other_format,
        data_storage_version="2.0" if version != "2.0" else "2.1",
    )
    with pytest.raises(InvalidOptionError, match=rf"file format 2\.\d.*stored in {version}"):
        source.shallowClone(other_format, replace=True)
    assert lance.dataset(other_format).version == 1


def test_shallow_clone_replace_refuses_to_copy_blob_columns(spark: SparkSession, tmp_path) -> None:
    """A fragment with deleted rows would be copied, and the copy does not handle blob
    columns: refused before anything is committed (no ADD BASE PATHS version either)."""
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), field])
    source = str(tmp_path / "blobs.lance")
    rows = pa.table({"id": [1, 2], "b": [b"x", b"y"]}, schema=schema)
    lance.write_dataset(rows, source, data_storage_version="2.1").delete("id = 1")
    target = str(tmp_path / "target.lance")
    lance.write_dataset(pa.table({"id": [9]}), target, data_storage_version="2.1")
    with pytest.raises(InvalidOptionError, match=r"deleted rows .* blob column"):
        LanceTable.forPath(spark, source).shallowClone(target, replace=True)
    assert lance.dataset(target).version == 1 and _ids(target) == [9]
