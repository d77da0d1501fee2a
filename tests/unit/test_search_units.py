"""Search without Spark: planning, the task functions against numpy brute force, ranks, and
the SQL front's table-name rewriting of ``lance_search`` calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import (
    ColumnNotFoundError,
    InvalidOptionError,
    TableNotFoundError,
    VersionNotFoundError,
)
from lance_spark.source import search_plans as search

DIM = 6


def _write(path: Path, n: int = 500, seed: int = 1) -> tuple[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(8, DIM))[rng.integers(0, 8, n)] * 3 + rng.normal(size=(n, DIM))
    vectors = vectors.astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "tag": pa.array([f"t{i % 5}" for i in range(n)]),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
        }
    )
    uri = str(path / "t.lance")
    lance.write_dataset(table, uri)
    return uri, vectors


def _exact(
    vectors: np.ndarray, q: np.ndarray, k: int, allowed: np.ndarray | None = None
) -> list[int]:
    d = ((vectors - q) ** 2).sum(axis=1)
    if allowed is not None:
        d = np.where(allowed, d, np.inf)
    return [int(i) for i in np.lexsort((np.arange(len(d)), d))[:k]]


def test_plan_pins_the_version_and_defaults(tmp_path: Path) -> None:
    uri, _ = _write(tmp_path)
    plan = search.plan_search(uri, storage={}, vector=[0.0] * DIM, k=3)
    assert (plan.version, plan.column, plan.dimension, plan.refine_factor) == (1, "vec", DIM, None)
    assert plan.columns == ("id", "tag", "vec")
    assert plan.spark_schema.fieldNames() == ["id", "tag", "vec", "_distance"]
    lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    indexed = search.plan_search(uri, storage={}, vector=[0.0] * DIM)
    assert indexed.version == 2 and indexed.refine_factor == search.DEFAULT_REFINE_FACTOR
    assert (
        search.plan_search(uri, storage={}, vector=[0.0] * DIM, refine_factor=1).refine_factor == 1
    )
    # Another metric than the index's is a flat search: no refine needed.
    assert (
        search.plan_search(uri, storage={}, vector=[0.0] * DIM, metric="dot").refine_factor is None
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"vector": [1.0, 2.0]}, InvalidOptionError, "2 values; column 'vec' holds vectors of 6"),
        ({"vector": "abc"}, InvalidOptionError, "sequence of numbers"),
        ({"vector": [float("nan")] * DIM}, InvalidOptionError, "NaN"),
        ({"vector": [0.0] * DIM, "k": -1}, InvalidOptionError, "k must be a positive integer"),
        ({"vector": [0.0] * DIM, "k": 2.5}, InvalidOptionError, "k must be a positive integer"),
        ({"vector": [0.0] * DIM, "nprobes": 0}, InvalidOptionError, "nprobes"),
        ({"vector": [0.0] * DIM, "metric": "L1"}, InvalidOptionError, "unknown metric 'l1'"),
        ({"vector": [0.0] * DIM, "column": "nope"}, ColumnNotFoundError, "'nope'"),
        ({"vector": [0.0] * DIM, "column": "tag"}, InvalidOptionError, "'tag' is string"),
        ({"vector": [0.0] * DIM, "version": 7}, VersionNotFoundError, "7"),
        ({"vector": [0.0] * DIM, "filter": "id >>> 3"}, InvalidOptionError, "filter 'id >>> 3'"),
        ({"text": "x"}, InvalidOptionError, "INVERTED"),
        ({"text": "  "}, InvalidOptionError, "non-empty"),
        ({}, InvalidOptionError, "needs a query"),
    ],
)
def test_plan_refuses_bad_requests(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    uri, _ = _write(tmp_path, n=50)
    with pytest.raises(error, match=match):
        search.plan_search(uri, storage={}, **kwargs)


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="no Lance table"):
        search.plan_search(str(tmp_path / "none.lance"), storage={}, vector=[0.0])


def test_search_batches_equal_brute_force_with_prefilter(tmp_path: Path) -> None:
    uri, vectors = _write(tmp_path)
    q = vectors[3] + 0.1
    plan = search.plan_search(uri, storage={}, vector=q, k=7, filter="tag = 't2'")
    result = pa.Table.from_batches(list(search.search_batches(plan)))
    allowed = np.array([i % 5 == 2 for i in range(len(vectors))])
    assert result.column("id").to_pylist() == _exact(vectors, q, 7, allowed)
    assert result.schema.field("vec").type == pa.list_(pa.field("element", pa.float32()))
    rows = list(search.search_rows(plan))
    assert [r[0] for r in rows] == result.column("id").to_pylist()


def test_nearest_batches_equal_brute_force_across_chunks(tmp_path: Path) -> None:
    uri, vectors = _write(tmp_path)
    plan = search.plan_search(uri, storage={}, k=3, columns=["id"], vector_from_rows=True)
    n = search.NEAREST_CHUNK_ROWS + 40  # two Lance calls per batch
    queries = [list(map(float, vectors[i % len(vectors)] + 0.05)) for i in range(n)]
    queries[5] = None  # type: ignore[call-overload]
    batch = pa.RecordBatch.from_pydict(
        {"qid": list(range(n)), "q": pa.array(queries, pa.list_(pa.float32()))}
    )
    out = pa.Table.from_batches(list(search.nearest_batches(plan, "q", [batch])))
    assert out.column_names == ["qid", "q", "id", "_distance", "_rank"]
    got: dict[int, list[tuple[int, int]]] = {}
    for row in out.to_pylist():
        got.setdefault(row["qid"], []).append((row["_rank"], row["id"]))
    assert 5 not in got and len(got) == n - 1
    for qid, pairs in got.items():
        q = np.asarray(queries[qid], dtype=np.float32)
        assert [i for _, i in sorted(pairs)] == _exact(vectors, q, 3)
        assert sorted(r for r, _ in pairs) == [1, 2, 3]


def test_nearest_batches_refuse_wrong_dimensions(tmp_path: Path) -> None:
    uri, _ = _write(tmp_path, n=20)
    plan = search.plan_search(uri, storage={}, k=1, vector_from_rows=True)
    batch = pa.RecordBatch.from_pydict({"q": pa.array([[1.0, 2.0]], pa.list_(pa.float64()))})
    with pytest.raises(InvalidOptionError, match="'q' holds a vector of 2 values"):
        list(search.nearest_batches(plan, "q", [batch]))


def test_ivf_pq_default_refine_reaches_recall(tmp_path: Path) -> None:
    uri, vectors = _write(tmp_path, n=3000, seed=4)
    lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=8, num_sub_vectors=3)
    rng = np.random.default_rng(9)
    queries = vectors[rng.integers(0, len(vectors), 30)] + rng.normal(scale=0.2, size=(30, DIM))
    plan = search.plan_search(uri, storage={}, k=10, columns=["id"], vector_from_rows=True)
    found = search.search_table(plan, queries.astype(np.float32))
    by_query: dict[int, set[int]] = {}
    for row in found.to_pylist():
        by_query.setdefault(row["query_index"], set()).add(row["id"])
    recall = np.mean(
        [len(by_query[i] & set(_exact(vectors, q, 10))) / 10 for i, q in enumerate(queries)]
    )
    assert recall >= 0.9


@given(st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=30))
def test_ranks_restart_for_every_query(sizes: list[int]) -> None:
    query_index = np.repeat(np.arange(len(sizes)), sizes)
    expected = np.concatenate([np.arange(1, s + 1) for s in sizes])
    assert search._ranks(query_index).tolist() == expected.tolist()


# --- the SQL front: catalog names in lance_search calls -------------------------------------------


class _Table:
    def __init__(self, uri: str) -> None:
        self.uri = uri
