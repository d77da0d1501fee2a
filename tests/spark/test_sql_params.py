"""``spark.sql(text, args=...)`` on Lance tables: Spark binds the markers of its own statements
(UPDATE, DELETE, MERGE, queries); the front binds those of time travel it rewrites."""

from __future__ import annotations

import lance
import pytest
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _rows(uri: str) -> list[tuple[int, str]]:
    table = lance.dataset(uri).to_table().to_pylist()
    return sorted((r["id"], r["label"]) for r in table)


def test_dml_with_named_and_positional_parameters(spark: SparkSession, table_uri: str) -> None:
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, label string").write.format(
        "lance"
    ).mode("append").save(table_uri)
    path = f"lance.`{table_uri}`"
    result = spark.sql(f"UPDATE {path} SET label = :l WHERE id = :id", args={"l": "z", "id": 1})
    assert result.collect() == []  # Spark's result of a row-level operation
    assert _rows(table_uri) == [(1, "z"), (2, "b"), (3, "c")]
    spark.sql(f"DELETE FROM {path} WHERE label = ?", args=["b"])
    assert _rows(table_uri) == [(1, "z"), (3, "c")]
    spark.sql(
        f"MERGE INTO {path} t USING (SELECT :k AS id, :v AS label) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET label = s.label WHEN NOT MATCHED THEN INSERT *",
        args={"k": 9, "v": "new: ':k' stays"},
    )
    assert _rows(table_uri) == [(1, "z"), (3, "c"), (9, "new: ':k' stays")]
    # Time travel with a parameter, and a plain query Spark binds itself.
    old = spark.sql(f"SELECT label FROM {path} VERSION AS OF 1 WHERE id = :id", args={"id": 2})
    assert [r["label"] for r in old.collect()] == ["b"]
    spark.sql(f"CREATE TABLE params_pets USING lance LOCATION '{table_uri}'")
    try:
        now = spark.sql("SELECT count(*) AS n FROM params_pets WHERE id > ?", args=[2])
        assert now.first()["n"] == 2
    finally:
        spark.sql("DROP TABLE params_pets")
