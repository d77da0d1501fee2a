"""Reads and writes from Python threads (issue 11, item 5).

In PySpark's pinned-thread mode every Python thread has its own JVM thread, which has no
active SparkSession; Spark's write path looked the format up there and failed with
DATA_SOURCE_NOT_FOUND (see lance_spark/_threads.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import lance
import pytest
from pyspark.sql import SparkSession

from lance_spark import LanceTable
from lance_spark.source.commit import PROP_APP_ID

pytestmark = pytest.mark.spark

T = TypeVar("T")
_names = itertools.count()


def _in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a plain ``threading.Thread`` and return its result (or raise its error)."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            out["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=600)
    assert not thread.is_alive(), "the thread did not finish"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def _jvm_active(spark: SparkSession) -> object:
    sessions = getattr(spark._jvm, "org.apache.spark.sql.classic.SparkSession")
    active = sessions.getActiveSession()
    return active.get() if active.isDefined() else None


@pytest.fixture
def table_name(spark: SparkSession) -> Iterator[str]:
    name = f"threads_{next(_names)}"
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_pool_writes_to_different_tables(spark: SparkSession, tmp_path: object) -> None:
    uris = [f"{tmp_path}/t{i}.lance" for i in range(4)]

    def write(i: int) -> None:
        spark.range(i * 100, i * 100 + 50).selectExpr("id", "cast(id AS string) AS s").write.format(
            "lance"
        ).mode("overwrite").save(uris[i])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))
    for i, uri in enumerate(uris):
        ds = lance.dataset(uri)
        assert sorted(ds.to_table().column("id").to_pylist()) == list(range(i * 100, i * 100 + 50))
        # the session's defaults reach a write made in another thread
        props = ds.read_transaction(ds.version).transaction_properties
        assert props[PROP_APP_ID] == spark.sparkContext.applicationId


def test_pool_appends_to_one_table(spark: SparkSession, table_uri: str) -> None:
    spark.range(0).write.format("lance").mode("append").save(table_uri)  # version 1, empty

    def append(i: int) -> None:
        spark.range(i * 1000, i * 1000 + 25).write.format("lance").mode("append").save(table_uri)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(append, range(4)))
    ds = lance.dataset(table_uri)
    assert sorted(ds.to_table().column("id").to_pylist()) == sorted(
        i * 1000 + j for i in range(4) for j in range(25)
    )
    assert ds.version == 5  # one version per append
    added = [
        lance.dataset(table_uri, version=v).count_rows()
        - lance.dataset(table_uri, version=v - 1).count_rows()
        for v in range(2, 6)
    ]
    assert added == [25, 25, 25, 25]


def test_plain_thread_write_then_reads(spark: SparkSession, table_uri: str) -> None:
    _in_thread(lambda: spark.range(10).write.format("lance").mode("overwrite").save(table_uri))
    assert lance.dataset(table_uri).count_rows() == 10
    assert _in_thread(lambda: spark.read.format("lance").load(table_uri).count()) == 10
    assert spark.read.format("lance").load(table_uri).count() == 10


def test_update_merge_delete_from_threads(spark: SparkSession, table_uri: str) -> None:
    spark.range(10).selectExpr("id", "'a' AS val").write.format("lance").mode("append").save(
        table_uri
    )
    table = LanceTable.forPath(spark, table_uri)

    updated = _in_thread(lambda: table.update(condition="id < 3", set={"val": "'u'"}).first())
    assert updated.num_affected_rows == 3

    def merge() -> None:
        source = spark.range(8, 12).selectExpr("id", "'m' AS val")
        table.alias("t").merge(
            source.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

    _in_thread(merge)
    _in_thread(lambda: table.delete("id = 5"))
    rows = _in_thread(
        lambda: {r.id: r.val for r in LanceTable.forPath(spark, table_uri).toDF().collect()}
    )
    expected = {i: "u" if i < 3 else "m" if i >= 8 else "a" for i in range(12) if i != 5}
    assert rows == expected
    assert {r["id"]: r["val"] for r in lance.dataset(table_uri).to_table().to_pylist()} == expected


def test_catalog_table_and_sql_from_a_thread(
    spark: SparkSession, table_uri: str, table_name: str
) -> None:
    spark.range(3).selectExpr("id", "'a' AS val").write.format("lance").mode("append").save(
        table_uri
    )
    spark.sql(f"CREATE TABLE {table_name} USING lance LOCATION '{table_uri}'")

    def work() -> list[tuple[int, str]]:
        # (insertInto / saveAsTable on a catalog table: the connector's writer gets no path
        # from them, in any thread; SQL INSERT is the way)
        spark.sql(f"INSERT INTO {table_name} SELECT 3, 'b'")
        spark.sql(f"INSERT INTO {table_name} SELECT 6, 'd'")
        spark.sql(f"UPDATE {table_name} SET val = 'x' WHERE id = 0")
        spark.sql(
            f"MERGE INTO {table_name} t USING (SELECT 1 AS id, 'm' AS val) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET *"
        )
        spark.sql(f"DELETE FROM {table_name} WHERE id = 2")
        return sorted((r.id, r.val) for r in spark.table(table_name).collect())

    expected = [(0, "x"), (1, "m"), (3, "b"), (6, "d")]
    assert _in_thread(work) == expected
    assert sorted((r["id"], r["val"]) for r in lance.dataset(table_uri).to_table().to_pylist()) == (
        expected
    )


def test_the_callers_active_session_is_restored(spark: SparkSession, table_uri: str) -> None:
    before = _jvm_active(spark)
    assert before is not None
    spark.range(2).write.format("lance").mode("append").save(table_uri)
    assert _jvm_active(spark).equals(before)  # type: ignore[union-attr]
    # a thread that had no active session still has none afterwards
    assert _in_thread(
        lambda: (spark.read.format("lance").load(table_uri).count(), _jvm_active(spark))
    ) == (2, None)
