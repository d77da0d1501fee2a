"""Index builds as Spark jobs: ``createIndex``, ``optimizeIndices``, CREATE INDEX and
``OPTIMIZE t INDEXES`` (lance_spark.source.index_builds)."""

from __future__ import annotations

import os
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from lance_spark import IndexExistsError, InvalidOptionError, LanceSparkError, LanceTable
from lance_spark.source import index_builds

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

DIM = 8


def _rows(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    vectors = rng.random((n, DIM), dtype=np.float32)
    return pa.table(
        {
            "id": ids,
            "label": [f"l{i % 5}" for i in ids],
            "tags": [[f"t{i % 3}", f"u{i % 4}"] for i in ids],
            "text": [f"word{i % 7} common {'rare' if i % 50 == 0 else 'plain'}" for i in ids],
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )


def _write(uri: str, table: pa.Table, *, mode: str = "create") -> lance.LanceDataset:
    return lance.write_dataset(table, uri, mode=mode, max_rows_per_file=300)


def _segments(uri: str, name: str) -> list[set[int]]:
    ds = lance.dataset(uri)
    return [
        set(s.fragment_ids) for d in ds.describe_indices() if d.name == name for s in d.segments
    ]


def _index_folders(uri: str) -> set[str]:
    path = os.path.join(uri, "_indices")
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def test_scalar_indexes_are_built_per_fragment_group_and_answer_like_spark(
    spark: SparkSession, table_uri: str
) -> None:
    source = _rows(0, 1500, seed=1)
    _write(table_uri, source)  # 5 fragments
    t = LanceTable.forPath(spark, table_uri)
    before = lance.dataset(table_uri).version
    t.createIndex("id", "BTREE")
    t.createIndex("label", "BITMAP")
    t.createIndex("tags", "LABEL_LIST")
    t.createIndex("text", "INVERTED")
    assert lance.dataset(table_uri).version == before + 4  # one version per index
    for name in ("id_idx", "label_idx", "tags_idx", "text_idx"):
        segments = _segments(table_uri, name)
        # One segment per task (local[2]: two), together covering every fragment once.
        assert len(segments) == 2, name
        assert sorted(f for s in segments for f in s) == list(range(5))
    rows = {r["name"]: r for r in t.listIndices().collect()}
    assert rows["id_idx"]["numIndexedRows"] == 1500 and rows["id_idx"]["numUnindexedRows"] == 0
    assert rows["id_idx"]["numSegments"] == 2 and rows["id_idx"]["type"] == "BTree"

    # Answers through the indexes equal Spark's own evaluation of the same rows.
    lance_df = spark.read.format("lance").load(table_uri).select("id", "label", "tags")
    memory = spark.createDataFrame(source.select(["id", "label", "tags"]).to_pylist())
    for where in ("id BETWEEN 290 AND 310 OR id = 1499", "label = 'l3'", "id = 7"):
        got = sorted(r.id for r in lance_df.filter(where).collect())
        assert got == sorted(r.id for r in memory.filter(where).collect()), where
    plan = lance.dataset(table_uri).scanner(filter="id = 7").explain_plan()
    assert "ScalarIndexQuery" in plan and "id_idx" in plan
    labelled = lance.dataset(table_uri).scanner(filter="array_has_any(tags, ['t1'])")
    assert "tags_idx" in labelled.explain_plan()
    assert labelled.to_table().num_rows == sum(1 for i in range(1500) if i % 3 == 1)

    # Full-text search over the segments finds what a single-call pylance index finds.
    found = sorted(r.id for r in t.search(text="rare", column="text", k=100).collect())
    assert found == [i for i in range(1500) if i % 50 == 0]


def test_vector_index_shares_one_trained_model_across_segments(
    spark: SparkSession, table_uri: str
) -> None:
    source = _rows(0, 1500, seed=2)
    _write(table_uri, source)
    t = LanceTable.forPath(spark, table_uri)
    t.createIndex("v", "IVF_FLAT", num_partitions=4, metric="l2")
    assert len(_segments(table_uri, "v_idx")) == 2
    ds = lance.dataset(table_uri)
    vectors = source.column("v").combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    for probe in (3, 700, 1499):
        query = vectors[probe]
        exact = np.argsort(((vectors - query) ** 2).sum(axis=1), kind="stable")[:10]
        got = ds.to_table(nearest={"column": "v", "q": query, "k": 10, "nprobes": 4})
        # IVF_FLAT probing every partition is exact: the segments hold every vector once.
        assert sorted(got["id"].to_pylist()) == sorted(int(i) for i in exact)
    plan = ds.scanner(nearest={"column": "v", "q": vectors[0], "k": 10}).explain_plan()
    assert "ANNSubIndex" in plan and "v_idx" in plan

    with pytest.raises(IndexExistsError, match=r"'v_idx' already exists.*replace=True"):
        t.createIndex("v", "IVF_PQ", num_partitions=4, num_sub_vectors=2, name="v_idx")
    t.createIndex("v", "IVF_PQ", num_partitions=4, num_sub_vectors=2, name="v_idx", replace=True)
    (row,) = [r for r in t.listIndices().collect() if r["name"] == "v_idx"]
    assert (row["type"], row["numIndexedRows"], row["numSegments"]) == ("IVF_PQ", 1500, 2)
    got = lance.dataset(table_uri).to_table(
        nearest={"column": "v", "q": vectors[5], "k": 10, "nprobes": 4, "refine_factor": 20}
    )
    assert 5 in got["id"].to_pylist()


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("IVF_SQ", {}),
        ("IVF_HNSW_PQ", {"num_sub_vectors": 2, "m": 8, "ef_construction": 100}),
        ("IVF_HNSW_SQ", {"m": 8, "ef_construction": 100}),
    ],
)
def test_every_other_vector_type_is_built_as_segments_that_find_the_nearest_rows(
    classic_spark: SparkSession, table_uri: str, kind: str, params: dict[str, int]
) -> None:
    source = _rows(0, 1500, seed=6)
    _write(table_uri, source)
    t = LanceTable.forPath(classic_spark, table_uri)
    t.createIndex("v", kind, num_partitions=2, **params)
    segments = _segments(table_uri, "v_idx")
    assert len(segments) == 2 and sorted(f for s in segments for f in s) == list(range(5))
    (row,) = [r for r in t.listIndices().collect() if r["name"] == "v_idx"]
    assert (row["type"], row["numIndexedRows"], row["numUnindexedRows"]) == (kind, 1500, 0)
    ds = lance.dataset(table_uri)
    vectors = source.column("v").combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    found = 0
    for probe in range(0, 1500, 100):
        query = vectors[probe]
        exact = np.argsort(((vectors - query) ** 2).sum(axis=1), kind="stable")[:10]
        nearest = {"column": "v", "q": query, "k": 10, "nprobes": 2, "refine_factor": 10}
        got = ds.to_table(columns=["id", "_distance"], nearest=nearest)["id"].to_pylist()
        assert got[0] == probe  # the row itself, at distance 0
        found += len(set(got) & {int(i) for i in exact})
    # Both segments searched, with the exact distances re-ranking: (nearly) exact answers.
    assert found >= 0.9 * 150, found
    plan = ds.scanner(nearest={"column": "v", "q": vectors[0], "k": 10}).explain_plan()
    assert "v_idx" in plan


def test_optimize_indices_indexes_appended_fragments_without_retraining(
    spark: SparkSession, table_uri: str
) -> None:
    _write(table_uri, _rows(0, 900, seed=3))
    t = LanceTable.forPath(spark, table_uri)
    t.createIndex("id", "BTREE")
    t.createIndex("v", "IVF_PQ", num_partitions=4, num_sub_vectors=2)
    kept = lance.dataset(table_uri)
    model = index_builds.load_model(kept, table_uri, "v_idx", storage={})
    assert model is not None and model[1] is not None

    _write(table_uri, _rows(900, 300, seed=4), mode="append")
    rows = {r["name"]: r for r in t.listIndices().collect()}
    assert rows["id_idx"]["numUnindexedRows"] == 300 and rows["v_idx"]["numUnindexedRows"] == 300
    detail = t.detail().collect()[0]
    assert {i["name"]: i["numUnindexedRows"] for i in detail["indexes"]} == {
        "id_idx": 300,
        "v_idx": 300,
    }

    before = lance.dataset(table_uri).version
    result = {r["index"]: r for r in t.optimizeIndices().collect()}
    assert lance.dataset(table_uri).version == before + 1  # both indexes in one commit
    for name in ("id_idx", "v_idx"):
        assert result[name]["numFragmentsIndexed"] == 1
        assert (result[name]["numIndexedRows"], result[name]["numUnindexedRows"]) == (1200, 0)
        assert result[name]["version"] == before + 1
        assert len(_segments(table_uri, name)) == 3  # the build's two and the new one
    ds = lance.dataset(table_uri)
    assert ds.to_table(filter="id = 1000").num_rows == 1
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 1000").explain_plan()
    # The new segment was assigned with the build's centroids: no model was trained again.
    again = index_builds.load_model(ds, table_uri, "v_idx", storage={})
    assert again is not None and again[1] is not None and model[1] is not None
    assert again[1].centroids.equals(model[1].centroids)

    # Up to date: nothing to do, no version.
    (row,) = t.optimizeIndices("id_idx").collect()
    assert (row["numFragmentsIndexed"], row["version"]) == (0, None)
    assert lance.dataset(table_uri).version == before + 1
    # retrain: one build again, its segments replaced.
    t.optimizeIndices(["v_idx"], retrain=True)
    assert sorted(f for s in _segments(table_uri, "v_idx") for f in s) == list(range(4))
    assert len(_segments(table_uri, "v_idx")) == 2
    with pytest.raises(InvalidOptionError, match=r"'nope' does not exist.*id_idx, v_idx"):
        t.optimizeIndices("nope")


def test_optimize_indices_of_an_index_pylance_built(spark: SparkSession, table_uri: str) -> None:
    ds = _write(table_uri, _rows(0, 600, seed=5))
    ds.create_scalar_index("text", "INVERTED")  # parameters unknown to the connector
    ds.create_scalar_index("id", "BTREE")
    _write(table_uri, _rows(600, 300, seed=6), mode="append")
    t = LanceTable.forPath(spark, table_uri)
    result = {r["index"]: r for r in t.optimizeIndices().collect()}
    assert {n: r["numUnindexedRows"] for n, r in result.items()} == {"id_idx": 0, "text_idx": 0}
    found = sorted(r.id for r in t.search(text="rare", column="text", k=100).collect())
    assert found == [i for i in range(900) if i % 50 == 0]


def test_a_failed_index_job_commits_nothing_and_leaves_no_index_files(
    spark: SparkSession, table_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(table_uri, _rows(0, 900, seed=7))
    t = LanceTable.forPath(spark, table_uri)
    version = lance.dataset(table_uri).version

    # The tasks fail (Lance refuses a LABEL_LIST on a string column): nothing is left.
    with pytest.raises(Exception, match=r"(?i)label"):
        t.createIndex("label", "LABEL_LIST")
    assert lance.dataset(table_uri).version == version and _index_folders(table_uri) == set()

    # The tasks wrote their segments and the commit fails: they are deleted.
    def refuse(*args: object, **kwargs: object) -> int:
        assert _index_folders(table_uri), "the tasks wrote their segments"
        raise LanceSparkError("commit refused by the test")

    monkeypatch.setattr(index_builds, "commit_build", refuse)
    with pytest.raises(LanceSparkError, match="refused by the test"):
        t.createIndex("id", "BTREE")
    assert lance.dataset(table_uri).version == version and _index_folders(table_uri) == set()
    assert t.listIndices().count() == 0


def test_sql_create_index_and_optimize_indexes(spark: SparkSession, table_uri: str) -> None:
    _write(table_uri, _rows(0, 900, seed=8))
    spark.sql(f"CREATE INDEX by_id ON lance.`{table_uri}` (id)")
    assert len(_segments(table_uri, "by_id")) == 2
    _write(table_uri, _rows(900, 300, seed=9), mode="append")
    (row,) = spark.sql(f"OPTIMIZE lance.`{table_uri}` INDEXES").collect()
    assert (row["index"], row["numFragmentsIndexed"], row["numUnindexedRows"]) == ("by_id", 1, 0)
    (row,) = spark.sql(f"OPTIMIZE lance.`{table_uri}` INDEX by_id RETRAIN").collect()
    assert row["numSegments"] == 2 and row["numIndexedRows"] == 1200
    detail = spark.sql(f"DESCRIBE DETAIL lance.`{table_uri}`").collect()[0]
    assert [(i["name"], i["numIndexedRows"]) for i in detail["indexes"]] == [("by_id", 1200)]


def test_pq_indexes_on_a_small_table_train_on_every_row(spark: SparkSession, tmp_path: Any) -> None:
    """IVF_PQ and IVF_HNSW_PQ on 300 rows (fewer than Lance's sample of 256 rows per PQ
    centroid): CREATE INDEX trains on every row, as pylance's own build does, and each query
    finds its own row first. Parameters the table cannot take are refused, naming them, and
    leave no index."""
    dim = 16
    vectors = np.random.default_rng(11).random((300, dim), dtype=np.float32)
    table = pa.table(
        {
            "id": np.arange(300, dtype=np.int64),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        }
    )
    for kind, extra in (("IVF_PQ", ""), ("IVF_HNSW_PQ", ", m = 8, ef_construction = 100")):
        uri = str(tmp_path / f"{kind}.lance")
        lance.write_dataset(table, uri, max_rows_per_file=100)
        spark.sql(
            f"CREATE INDEX v_idx ON lance.`{uri}` (v) USING {kind} "
            f"WITH (num_partitions = 4, num_sub_vectors = 4{extra})"
        )
        (row,) = LanceTable.forPath(spark, uri).listIndices().collect()
        assert (row["type"], row["numIndexedRows"], row["numUnindexedRows"]) == (kind, 300, 0)
        ds = lance.dataset(uri)
        assert (
            "v_idx" in ds.scanner(nearest={"column": "v", "q": vectors[0], "k": 1}).explain_plan()
        )
        for probe in range(0, 300, 20):
            nearest = {
                "column": "v",
                "q": vectors[probe],
                "k": 3,
                "nprobes": 4,
                "refine_factor": 10,
            }
            assert ds.to_table(columns=["id"], nearest=nearest)["id"][0].as_py() == probe, kind

    version, folders = lance.dataset(uri).version, _index_folders(uri)
    for params, message in (
        ("num_partitions = 400, num_sub_vectors = 4", r"num_partitions=400 .* has 300 .*<= 300"),
        ("num_partitions = 4, num_sub_vectors = 5", r"num_sub_vectors=5 .* dimension 16"),
        ("num_partitions = 4, num_sub_vectors = 4, num_bits = 16", r"num_bits=16 .* 65536 rows"),
    ):
        with pytest.raises(AnalysisException, match="InvalidOptionError: .*" + message):
            spark.sql(f"CREATE INDEX big ON lance.`{uri}` (v) USING IVF_PQ WITH ({params})")
    with pytest.raises(InvalidOptionError, match="num_partitions=301"):
        LanceTable.forPath(spark, uri).createIndex("v", "IVF_PQ", name="big", num_partitions=301)
    ds = lance.dataset(uri)
    assert ds.version == version and _index_folders(uri) == folders
    assert [d.name for d in ds.describe_indices()] == ["v_idx"]


def test_auto_index_indexes_what_a_write_appends_past_the_threshold(
    spark: SparkSession, table_uri: str
) -> None:
    def append(start: int, n: int, **options: str) -> None:
        frame = spark.range(start, start + n, numPartitions=2).selectExpr("id", "id % 5 AS k")
        frame.write.format("lance").mode("append").options(**options).save(table_uri)

    append(0, 400)
    t = LanceTable.forPath(spark, table_uri)
    t.createIndex("id", "BTREE")
    auto = {"autoIndex": "true", "autoIndex.minRows": "250"}
    append(400, 200, **auto)  # 200 rows behind: under the threshold
    version = lance.dataset(table_uri).version
    (row,) = t.listIndices().collect()
    assert row["numUnindexedRows"] == 200
    append(600, 100, **auto)  # 300 behind: the write indexes them, a version of its own
    ds = lance.dataset(table_uri)
    assert ds.version == version + 2
    (row,) = t.listIndices().collect()
    assert (row["numIndexedRows"], row["numUnindexedRows"]) == (700, 0)
    assert [r.operation for r in t.history(1).collect()] == ["OPTIMIZE INDEX"]
    assert sorted(
        r.id for r in spark.read.format("lance").load(table_uri).filter("id >= 650").collect()
    ) == list(range(650, 700))
