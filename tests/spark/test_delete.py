"""LanceTable.delete: a Spark job, one Delete commit, untouched fragments left alone."""

from __future__ import annotations

import lance
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _table(spark: SparkSession, uri: str) -> LanceTable:
    spark.range(0, 1000, numPartitions=4).selectExpr(
        "id", "concat('l', id % 3) AS label"
    ).write.format("lance").mode("append").save(uri)
    return LanceTable.forPath(spark, uri)


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist())


def test_delete_by_sql_condition_is_one_version_and_spares_untouched_fragments(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    before = {f.fragment_id: f.metadata for f in lance.dataset(table_uri).get_fragments()}
    result = t.delete("id >= 10 AND id < 20 OR id = 999")
    assert result.first().num_affected_rows == 11
    ds = lance.dataset(table_uri)
    assert ds.version == 2
    assert _ids(table_uri) == [i for i in range(1000) if not (10 <= i < 20 or i == 999)]
    after = {f.fragment_id: f.metadata for f in ds.get_fragments()}
    touched = {fid for fid, meta in after.items() if meta.deletion_file is not None}
    assert touched == {0, 3}  # ids 0-249 and 750-999
    for fid in set(before) - touched:
        assert after[fid].files[0].path == before[fid].files[0].path
    props = ds.read_transaction(2).transaction_properties
    assert props["lance_spark.operation"] == "DELETE"
    # Spark reads agree with pylance
    assert spark.read.format("lance").load(table_uri).count() == 989


def test_delete_by_column_and_whole_fragment(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    t.delete(F.col("id") < 250)  # all of fragment 0
    ds = lance.dataset(table_uri)
    assert 0 not in [f.fragment_id for f in ds.get_fragments()]
    assert _ids(table_uri) == list(range(250, 1000))


def test_delete_nothing_commits_nothing_and_none_deletes_all(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    assert t.delete("id < 0").first().num_affected_rows == 0
    assert lance.dataset(table_uri).version == 1
    assert t.delete().first().num_affected_rows == 1000
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.count_rows() == 0


def test_delete_rejects_non_deterministic_and_bad_conditions(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    # Spark plans the DELETE: its own error for a non-deterministic condition.
    with pytest.raises(AnalysisException, match="INVALID_NON_DETERMINISTIC_EXPRESSIONS"):
        t.delete("rand() < 0.5")
    with pytest.raises(Exception, match="nope"):
        t.delete("nope = 1")
    assert lance.dataset(table_uri).version == 1
