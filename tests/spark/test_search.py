"""Search from Spark: ``LanceTable.search``, the ``lance_search`` SQL function, the
nearest-neighbour join ``LanceTable.nearest`` and full-text search.

Every expectation is Spark's own brute force over the same rows (an in-memory DataFrame):
the distance as a Spark expression, ``orderBy`` and ``limit`` (a window per query for the
join). Exact searches (no index, IVF_FLAT probing every partition) must equal it; IVF_PQ at
its default settings must reach recall@10 >= 0.9.
"""

from __future__ import annotations

from collections.abc import Sequence

import lance
import numpy as np
import pytest
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lance_spark import LanceTable
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

DIM = 8
ROWS = 1200
CLUSTERS = 12
LABELS = ("red", "green", "blue")
WORDS = ("cats", "dogs", "birds", "fish")


def _data(seed: int = 7) -> tuple[np.ndarray, list[tuple[int, str, str, list[float]]]]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(CLUSTERS, DIM)) * 4
    vectors = (centers[rng.integers(0, CLUSTERS, ROWS)] + rng.normal(size=(ROWS, DIM))).astype(
        np.float32
    )
    rows = [
        (
            i,
            LABELS[i % len(LABELS)],
            f"note {i} about {WORDS[i % len(WORDS)]} and {WORDS[(i // 4) % len(WORDS)]}",
            [float(x) for x in vectors[i]],
        )
        for i in range(ROWS)
    ]
    return vectors, rows


def _frame(spark: SparkSession, rows: Sequence[tuple[int, str, str, list[float]]]) -> DataFrame:
    return spark.createDataFrame(rows, "id long, label string, note string, vec array<float>")


@pytest.fixture
def table(spark: SparkSession, table_uri: str) -> tuple[LanceTable, DataFrame, np.ndarray]:
    """A Lance table written through Spark, the same rows as a Spark DataFrame, and vectors."""
    vectors, rows = _data()
    frame = _frame(spark, rows)
    frame.write.format("lance").mode("append").option(
        "vec.arrow.fixed-size-list.size", str(DIM)
    ).save(table_uri)
    return LanceTable.forPath(spark, table_uri), frame, vectors


def _queries(n: int, seed: int = 11) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors, _ = _data()
    picks = vectors[rng.integers(0, ROWS, n)]
    return (picks + rng.normal(scale=0.3, size=picks.shape)).astype(np.float32)


def _l2(column: str, query: Sequence[float]) -> F.Column:
    """Squared L2 distance between ``column`` and ``query``, computed by Spark."""
    q = F.array(*[F.lit(float(x)) for x in query])
    return F.aggregate(
        F.zip_with(F.col(column), q, lambda a, b: (a - b) * (a - b)), F.lit(0.0), lambda s, x: s + x
    )


def _spark_top(frame: DataFrame, query: Sequence[float], k: int, where: str | None = None):  # type: ignore[no-untyped-def]
    if where is not None:
        frame = frame.where(where)
    ranked = frame.select("id", _l2("vec", query).alias("d")).orderBy("d", "id").limit(k)
    return [(r["id"], r["d"]) for r in ranked.collect()]


def _ids_and_distances(df: DataFrame) -> list[tuple[int, float]]:
    return [(r["id"], r["_distance"]) for r in df.collect()]


def _assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert [d for _, d in found] == pytest.approx([d for _, d in expected], rel=1e-4, abs=1e-4)


# --- vector search ----------------------------------------------------------------------------


def test_search_without_index_equals_spark_brute_force(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    for q in _queries(3):
        result = t.search([float(x) for x in q], k=10)
        assert result.columns == ["id", "label", "note", "vec", "_distance"]
        _assert_same(_ids_and_distances(result), _spark_top(frame, q, 10))


def test_search_result_rows_are_the_tables_rows(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    q = _queries(1)[0]
    found = t.search(q, k=5).drop("_distance")
    expected = frame.join(found.select("id"), "id").select(*found.columns)
    assert sorted(found.collect()) == sorted(expected.collect())


def test_ivf_flat_probing_every_partition_is_exact(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    t.createIndex("vec", "IVF_FLAT", num_partitions=4)
    for q in _queries(3, seed=3):
        found = _ids_and_distances(t.search(q, k=10, nprobes=4))
        _assert_same(found, _spark_top(frame, q, 10))


def test_ivf_pq_recall_at_default_settings(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    t.createIndex("vec", "IVF_PQ", num_partitions=8, num_sub_vectors=4)
    queries = _queries(20, seed=5)
    recall = []
    for q in queries[:5]:
        found = {i for i, _ in _ids_and_distances(t.search(q, k=10))}
        exact = {i for i, _ in _spark_top(frame, q, 10)}
        recall.append(len(found & exact) / 10)
    assert np.mean(recall) >= 0.9, recall


def test_filter_is_applied_before_the_search(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    q = _queries(1, seed=2)[0]
    found = t.search(q, k=7, filter="label = 'blue' AND id > 100")
    _assert_same(_ids_and_distances(found), _spark_top(frame, q, 7, "label = 'blue' AND id > 100"))
    assert {r["label"] for r in found.collect()} == {"blue"}


def test_cosine_metric_equals_spark(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    q = [float(x) for x in _queries(1, seed=9)[0]]
    qv = F.array(*[F.lit(x) for x in q])
    dot = F.aggregate(F.zip_with("vec", qv, lambda a, b: a * b), F.lit(0.0), lambda s, x: s + x)
    norm = F.sqrt(F.aggregate(F.transform("vec", lambda a: a * a), F.lit(0.0), lambda s, x: s + x))
    cosine = F.lit(1.0) - dot / (norm * F.lit(float(np.linalg.norm(q))))
    expected = frame.select("id", cosine.alias("d")).orderBy("d", "id").limit(6).collect()
    found = _ids_and_distances(t.search(q, k=6, metric="cosine"))
    _assert_same(found, [(r["id"], r["d"]) for r in expected])


def test_columns_and_version(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, _, _ = table
    q = _queries(1, seed=4)[0]
    before = t.search(q, k=3, columns=["id", "label"])
    assert before.columns == ["id", "label", "_distance"]
    # Version 2 drops the nearest row; version 1 still finds it.
    nearest_id = before.first()["id"]
    t.delete(f"id = {nearest_id}")
    assert nearest_id not in [r["id"] for r in t.search(q, k=3).collect()]
    assert nearest_id == t.search(q, k=3, version=1).first()["id"]
    t.createTag("before-delete", 1)
    assert nearest_id == t.search(q, k=1, version="before-delete").first()["id"]


def test_search_in_sql_by_path_and_by_catalog_name(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    q = [float(x) for x in _queries(1, seed=6)[0]]
    literal = "array(" + ", ".join(repr(x) for x in q) + ")"
    expected = _spark_top(frame, q, 4)
    by_path = spark.sql(f"SELECT * FROM lance_search('{t.uri}', {literal}, 4)")
    assert by_path.columns == ["id", "label", "note", "vec", "_distance"]
    _assert_same(_ids_and_distances(by_path), expected)

    spark.sql(f"CREATE TABLE search_pets USING lance LOCATION '{t.uri}'")
    try:
        named = spark.sql(
            f"SELECT id, _distance FROM lance_search(table => 'search_pets', vector => {literal}, "
            "k => 4, filter => 'id >= 0') ORDER BY _distance"
        )
        _assert_same(_ids_and_distances(named), expected)
        joined = spark.sql(
            f"SELECT s.id, p.label FROM lance_search('search_pets', {literal}, 2) s "
            "JOIN search_pets p ON s.id = p.id"
        )
        assert sorted(r["id"] for r in joined.collect()) == sorted(i for i, _ in expected[:2])
    finally:
        spark.sql("DROP TABLE search_pets")
    with pytest.raises(AnalysisException, match=r"TABLE_OR_VIEW_NOT_FOUND.*no_such_table"):
        spark.sql(f"SELECT * FROM lance_search('no_such_table', {literal}, 4)")


def test_search_errors_name_what_is_wrong(table, spark: SparkSession, tmp_path) -> None:  # type: ignore[no-untyped-def]
    t, _, _ = table
    q = [0.0] * DIM
    with pytest.raises(InvalidOptionError, match=r"3 values.*'vec'.*8"):
        t.search([1.0, 2.0, 3.0])
    with pytest.raises(
        InvalidOptionError, match=r"search\(\) argument 'k' takes a positive int, not 0"
    ):
        t.search(q, k=0)
    with pytest.raises(InvalidOptionError, match="unknown metric 'manhattan'"):
        t.search(q, metric="manhattan")
    with pytest.raises(InvalidOptionError, match="not both"):
        t.search(q, text="cats")
    with pytest.raises(InvalidOptionError, match="needs a query"):
        t.search()
    with pytest.raises(InvalidOptionError, match="filter 'nope = ' "):
        t.search(q, filter="nope = ")
    with pytest.raises(ColumnNotFoundError, match="'missing'"):
        t.search(q, columns=["id", "missing"])
    with pytest.raises(InvalidOptionError, match="column 'label' is string, not a vector"):
        t.search(q, column="label")
    plain = str(tmp_path / "plain.lance")
    spark.range(3).write.format("lance").mode("append").save(plain)
    with pytest.raises(InvalidOptionError, match="no vector"):
        LanceTable.forPath(spark, plain).search(q)
    with pytest.raises(PySparkException, match="3 values"):
        spark.sql(f"SELECT * FROM lance_search('{t.uri}', array(1.0, 2.0, 3.0), 4)").collect()


# --- the nearest-neighbour join ----------------------------------------------------------------


def _spark_knn(frame: DataFrame, queries: DataFrame, k: int) -> dict[int, list[tuple[int, float]]]:
    """Spark's exact k nearest rows of ``frame`` for every query: a cross join, the distance
    as an expression, a window per query."""
    pairs = queries.crossJoin(frame.select("id", F.col("vec").alias("tv")))
    dist = F.aggregate(
        F.zip_with("qvec", "tv", lambda a, b: (a - b) * (a - b)), F.lit(0.0), lambda s, x: s + x
    )
    window = Window.partitionBy("qid").orderBy("d", "id")
    ranked = (
        pairs.select("qid", "id", dist.alias("d"))
        .withColumn("r", F.row_number().over(window))
        .where(F.col("r") <= k)
    )
    out: dict[int, list[tuple[int, float]]] = {}
    for r in ranked.orderBy("qid", "r").collect():
        out.setdefault(r["qid"], []).append((r["id"], r["d"]))
    return out


def _query_frame(spark: SparkSession, vectors: np.ndarray) -> DataFrame:
    rows = [(1000 + i, f"q{i}", [float(x) for x in v]) for i, v in enumerate(vectors)]
    rows.append((9999, "no vector", None))  # type: ignore[arg-type]
    return spark.createDataFrame(rows, "qid long, qname string, qvec array<float>").repartition(3)


def test_nearest_join_equals_spark_exact_knn(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    queries = _query_frame(spark, _queries(25, seed=13))
    result = t.nearest(queries, column="vec", k=4, query_column="qvec", columns=["id", "label"])
    assert result.columns == ["qid", "qname", "qvec", "id", "label", "_distance", "_rank"]
    rows = result.collect()
    found: dict[int, list[tuple[int, float, int]]] = {}
    for r in rows:
        found.setdefault(r["qid"], []).append((r["id"], r["_distance"], r["_rank"]))
    expected = _spark_knn(frame, queries.where("qvec IS NOT NULL"), 4)
    assert set(found) == set(expected)  # the null query vector has no neighbours
    for qid, neighbours in expected.items():
        got = sorted(found[qid], key=lambda x: x[2])
        assert [x[2] for x in got] == [1, 2, 3, 4]
        _assert_same([(i, d) for i, d, _ in got], neighbours)
    # Labels come from the table's rows.
    labels = {r["id"]: r["label"] for r in frame.select("id", "label").collect()}
    assert all(r["label"] == labels[r["id"]] for r in rows)


def test_nearest_with_ivf_pq_index_recall(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    t.createIndex("vec", "IVF_PQ", num_partitions=8, num_sub_vectors=4)
    queries = _query_frame(spark, _queries(40, seed=17)).where("qvec IS NOT NULL")
    found: dict[int, set[int]] = {}
    for r in t.nearest(queries, k=10, query_column="qvec", columns=["id"]).collect():
        found.setdefault(r["qid"], set()).add(r["id"])
    expected = _spark_knn(frame, queries, 10)
    recall = np.mean([len(found[q] & {i for i, _ in e}) / 10 for q, e in expected.items()])
    assert recall >= 0.9, recall


def test_nearest_self_join_finds_near_duplicates(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, _, vectors = table
    # A near-duplicate of row 17 appended: its nearest other row is 17.
    dup = [float(x) + 1e-3 for x in vectors[17]]
    _frame(spark, [(ROWS, "red", "copy of 17", dup)]).write.format("lance").mode("append").save(
        t.uri
    )
    queries = t.toDF().select(F.col("id").alias("qid"), F.col("vec").alias("qvec"))
    pairs = (
        t.nearest(queries, k=2, query_column="qvec", columns=["id"])
        .where("qid != id")
        .where(F.col("_distance") < 0.01)
    )
    assert sorted((r["qid"], r["id"]) for r in pairs.collect()) == [(17, ROWS), (ROWS, 17)]


def test_nearest_errors(table, spark: SparkSession) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    with pytest.raises(InvalidOptionError, match=r"'id', 'vec'.*clash"):
        t.nearest(frame.select("id", "vec"), k=2)
    with pytest.raises(ColumnNotFoundError, match="no column 'vec'"):
        t.nearest(frame.select(F.col("vec").alias("q")), k=2)
    with pytest.raises(InvalidOptionError, match="'q' is string, not an array"):
        t.nearest(frame.select(F.col("label").alias("q")), query_column="q")
    short = spark.createDataFrame([(1, [1.0, 2.0])], "qid long, q array<double>")
    with pytest.raises(PySparkException, match="'q' holds a vector of 2 values"):
        t.nearest(short, query_column="q", columns=["id"]).collect()


# --- full-text search --------------------------------------------------------------------------


def test_full_text_search_matches_spark(table) -> None:  # type: ignore[no-untyped-def]
    t, frame, _ = table
    with pytest.raises(InvalidOptionError, match="INVERTED"):
        t.search(text="cats", column="note")
    t.createIndex("note", "INVERTED")
    result = t.search(text="birds", column="note", k=ROWS)
    assert result.columns == ["id", "label", "note", "vec", "_score"]
    rows = result.collect()
    expected = frame.where(F.col("note").contains("birds")).select("id").collect()
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in expected)
    scores = [r["_score"] for r in rows]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    # Notes that say "birds" twice rank first.
    twice = {r["id"] for r in frame.where("note LIKE '%birds and birds%'").collect()}
    assert {r["id"] for r in rows[: len(twice)]} == twice
    filtered = t.search(text="birds", k=ROWS, filter="label = 'red'", columns=["id"]).collect()
    assert sorted(r["id"] for r in filtered) == sorted(
        r["id"] for r in frame.where("note LIKE '%birds%' AND label = 'red'").collect()
    )
    with pytest.raises(InvalidOptionError, match="INVERTED index on it"):
        t.search(text="cats", column="label")


def test_pylance_sees_the_same_search(table) -> None:  # type: ignore[no-untyped-def]
    t, _, _ = table
    q = _queries(1, seed=21)[0]
    direct = lance.dataset(t.uri).to_table(
        nearest={"column": "vec", "q": q, "k": 5},
        columns=["id"],
        disable_scoring_autoprojection=True,
    )
    assert [r["id"] for r in t.search(q, k=5).collect()] == direct.column("id").to_pylist()


def test_mllib_vector_columns_come_back_as_vectors(spark: SparkSession, table_uri: str) -> None:
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("emb", ArrayType(FloatType())),
            StructField("features", VectorUDT()),
        ]
    )
    rows = [(i, [float(i), 1.0], Vectors.dense([i, 2.0]) if i % 2 else None) for i in range(6)]
    spark.createDataFrame(rows, schema).write.format("lance").option(
        "emb.arrow.fixed-size-list.size", 2
    ).mode("append").save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    found = t.search([3.0, 1.0], k=2, column="emb").collect()
    assert [(r.id, r.features) for r in found] == [(3, Vectors.dense([3.0, 2.0])), (2, None)]
    by_sql = spark.sql(
        f"SELECT id, features FROM lance_search('{table_uri}', array(1.0, 1.0), 1, 'emb')"
    ).collect()
    assert [(r.id, r.features) for r in by_sql] == [(1, Vectors.dense([1.0, 2.0]))]
    queries = spark.createDataFrame([(0, [5.0, 1.0])], "q int, qvec array<float>")
    pairs = t.nearest(queries, column="emb", k=1, query_column="qvec", columns=["id", "features"])
    assert [(r.id, r.features) for r in pairs.collect()] == [(5, Vectors.dense([5.0, 2.0]))]
