"""The engine under MERGE / UPDATE / DELETE: retries of retryable conflicts, cleanup after a
failed job, and a MERGE into a 1M-row table that leaves untouched fragments alone."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import write_fragments
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import ConcurrentModificationError, LanceTable
from lance_spark.table import job_runner as jobs

pytestmark = pytest.mark.spark


def _files(uri: str) -> set[str]:
    found = set()
    for sub in ("data", "_deletions"):
        root = Path(uri) / sub
        if root.exists():
            found.update(f"{sub}/{p.name}" for p in root.iterdir())
    return found


def _table(spark: SparkSession, uri: str, rows: int = 100) -> LanceTable:
    spark.range(0, rows, numPartitions=2).selectExpr("id", "concat('v', id) AS val").write.format(
        "lance"
    ).mode("append").save(uri)
    return LanceTable.forPath(spark, uri)


def _racing_value(spark: SparkSession, uri: str, flag: Path) -> str:
    """A SQL function returning its argument that, the first time it runs (in the task of
    the statement's first attempt), has another writer commit an Update of row 41 of
    fragment 0 before the statement commits (plain pylance, as another job would)."""

    @F.udf("string")
    def racing(value: str) -> str:
        if not flag.exists():
            flag.touch()
            ds = lance.dataset(uri)
            changed = ds.get_fragment(0).delete_rows([41])
            new = write_fragments(
                pa.table({"id": pa.array([10_041], pa.int64()), "val": ["other"]}),
                uri,
                schema=ds.schema,
            )
            operation = lance.LanceOperation.Update(updated_fragments=[changed], new_fragments=new)
            lance.LanceDataset.commit(uri, operation, read_version=ds.version)
        return value

    name = f"racing_{uuid.uuid4().hex[:8]}"
    spark.udf.register(name, racing)
    return name


def test_retryable_conflict_is_redone_on_the_new_version(
    spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    """UPDATE (planned by Spark) meets a concurrent commit of the fragment it changes: its
    first attempt is refused (ConcurrentModificationError in the commit), and the table API
    redoes it on the new version."""
    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    racing = _racing_value(spark, table_uri, tmp_path / "raced")
    assert t.update("id < 5", {"val": f"{racing}('mine')"}).first().num_affected_rows == 5
    ds = lance.dataset(table_uri)
    assert ds.version == version + 2  # the other writer's version, then ours
    rows = {r["id"]: r["val"] for r in ds.to_table().to_pylist()}
    assert [rows[i] for i in range(5)] == ["mine"] * 5
    assert rows[10_041] == "other" and 41 not in rows  # the other writer's change is kept
    assert len(rows) == 100
    assert _files(table_uri) == _all_versions_files(table_uri)  # the lost attempt left none


def test_gives_up_after_bounded_attempts_naming_them(
    spark: SparkSession, table_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attempt of the MERGE meets a concurrent commit of the fragment it changes."""
    t = _table(spark, table_uri)
    monkeypatch.setattr(jobs, "RETRY", replace(jobs.RETRY, backoff_max_s=0.0))
    uri = table_uri

    def always_racing(value: str) -> str:
        # Another writer rewrites row 10 + n of fragment 0 (plain pylance).
        n = len(list(tmp_path.glob("race-*")))
        (tmp_path / f"race-{n}").touch()
        ds = lance.dataset(uri)
        changed = ds.get_fragment(0).delete_rows([10 + n])
        new = write_fragments(
            pa.table({"id": pa.array([10_010 + n], pa.int64()), "val": ["other"]}),
            uri,
            schema=ds.schema,
        )
        operation = lance.LanceOperation.Update(updated_fragments=[changed], new_fragments=new)
        lance.LanceDataset.commit(uri, operation, read_version=ds.version)
        return value

    name = f"always_racing_{uuid.uuid4().hex[:8]}"
    spark.udf.register(name, always_racing, "string")
    src = spark.createDataFrame([(1, "x")], "id long, val string")
    attempts = jobs.RETRY.attempts
    with pytest.raises(
        ConcurrentModificationError, match=rf"gave up after {attempts} attempt\(s\)"
    ):
        (
            t.alias("t")
            .merge(src.alias("s"), "s.id = t.id")
            .whenMatchedUpdate(set={"val": f"{name}(s.val)"})
            .execute()
        )
    assert len(list(tmp_path.glob("race-*"))) >= attempts
    assert lance.dataset(table_uri).to_table().to_pydict()["val"].count("x") == 0
    assert _files(table_uri) == _all_versions_files(table_uri)


def test_failed_merge_job_leaves_no_files_and_no_version(
    spark: SparkSession, table_uri: str
) -> None:
    spark.range(0, 10, numPartitions=2).selectExpr(
        "id", "array(cast(id AS float), 1.0f) AS v"
    ).write.format("lance").option("v.arrow.fixed-size-list.size", "2").mode("append").save(
        table_uri
    )
    before_files, version = _files(table_uri), lance.dataset(table_uri).version
    # Rows of both fragments are updated (two tasks write), one inserted row has a vector of
    # the wrong length: its task fails and the job is aborted.
    src = spark.createDataFrame(
        [(1, [9.0, 9.0]), (8, [9.0, 9.0]), (42, [1.0, 2.0, 3.0])], "id long, v array<float>"
    )
    t = LanceTable.forPath(spark, table_uri)
    with pytest.raises(Exception, match="length"):
        (
            t.alias("t")
            .merge(src.alias("s"), "s.id = t.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    assert lance.dataset(table_uri).version == version
    assert _files(table_uri) == before_files


def test_merge_into_a_million_rows_rewrites_only_touched_fragments(
    spark: SparkSession, table_uri: str
) -> None:
    spark.range(0, 1_000_000, numPartitions=2).selectExpr(
        "id", "id % 1000 AS bucket", "concat('row-', id) AS val"
    ).write.format("lance").option("max_rows_per_file", "100000").mode("append").save(table_uri)
    before = {f.fragment_id: f.metadata for f in lance.dataset(table_uri).get_fragments()}
    assert len(before) == 10
    # 1000 source rows: 900 update rows of the first fragment, 100 are new.
    src = spark.range(0, 1000).selectExpr(
        "CASE WHEN id < 900 THEN id * 7 ELSE 2000000 + id END AS id",
        "-1L AS bucket",
        "'merged' AS val",
    )
    t = LanceTable.forPath(spark, table_uri)
    metrics = (
        t.alias("t")
        .merge(src.alias("s"), "s.id = t.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .first()
    )
    assert (metrics.num_updated_rows, metrics.num_inserted_rows) == (900, 100)
    ds = lance.dataset(table_uri)
    after = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    touched = {fid for fid, meta in after.items() if fid in before and meta != before[fid]}
    assert touched == {0}
    for fid in set(before) - touched:  # untouched: same data files, no deletion file
        assert [f.path for f in after[fid].files] == [f.path for f in before[fid].files]
        assert after[fid].deletion_file is None
    assert after[0].deletion_file is not None
    assert [f.path for f in after[0].files] == [f.path for f in before[0].files]
    assert ds.count_rows() == 1_000_100
    assert ds.count_rows("val = 'merged'") == 1000
    assert ds.count_rows("val = 'merged' AND id < 900 * 7 AND id % 7 = 0") == 900


def test_delete_and_update_use_the_same_engine(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, rows=20)
    assert t.delete("id >= 15").first().num_affected_rows == 5
    assert t.update("id < 2", {"val": "'u'"}).first().num_affected_rows == 2
    history = t.history(2).collect()
    assert [h.operation for h in history] == ["UPDATE", "DELETE"]
    assert history[1].operationMetrics["numDeletedRows"] == "5"
    assert history[0].operationMetrics["numUpdatedRows"] == "2"
    assert _files(table_uri) == _all_versions_files(table_uri)  # no orphans


def _all_versions_files(uri: str) -> set[str]:
    """Files any version references (nothing was vacuumed)."""
    files: set[str] = set()
    for v in lance.dataset(uri).versions():
        ds = lance.dataset(uri, version=v["version"])
        for fragment in ds.get_fragments():
            meta = fragment.metadata
            files.update(f"data/{f.path}" for f in meta.files)
            if meta.deletion_file is not None:
                files.add(meta.deletion_file.path(fragment.fragment_id))
    return files
