"""Every column name Spark allows, through every operation.

One base table holds all the odd names below as columns (plus a struct whose fields have a
dot, a backtick and a space in their names); each test works on a file copy of it, so the
Spark jobs that write it run once. Results are compared with Spark's own evaluation of the
same data (an in-memory DataFrame) and the table is read back with pylance.

Names Lance cannot hold at top level (a dot, a backtick), names that differ only in case,
and Lance's reserved names are rejected at write, naming the column, before any file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pytest
from _merge_cases import last_metrics
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, IsNull
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lance_spark import LanceTable
from lance_spark._spark import quote_identifier as q
from lance_spark.source.filters import translate_filters
from lance_spark.source.options import encode_names

pytestmark = pytest.mark.spark

ODD = [
    "a,b",
    "x, y ,z",
    "sp ace",
    " pad ",
    'qu"ote',
    "s'q",
    "ünï 日本",
    "select",
    "from",
    "order",
    "1lead",
    "new\nline",
    "[br",
    "back\\slash",
]
NESTED = ["a.b", "we`ird", "x y"]
N_ROWS = 12


def _value(i: int, row: int) -> int | None:
    """Column ``i``'s value in row ``row``: distinct per column, one NULL each."""
    return None if row % 6 == i % 6 else row * (i + 2)


def _schema() -> StructType:
    nested = StructType(
        [
            StructField(NESTED[0], LongType()),
            StructField(NESTED[1], LongType()),
            StructField(NESTED[2], StringType()),
        ]
    )
    return StructType(
        [StructField("id", LongType())]
        + [StructField(n, LongType()) for n in ODD]
        + [StructField("st", nested)]
    )


def _data() -> list[tuple[Any, ...]]:
    return [
        (row, *(_value(i, row) for i in range(len(ODD))), (row, -row, f"r{row}"))
        for row in range(N_ROWS)
    ]


@pytest.fixture(scope="module")
def base(spark: SparkSession) -> DataFrame:
    """The data as an in-memory DataFrame: Spark's own evaluation is the reference."""
    return spark.createDataFrame(_data(), _schema()).cache()


@pytest.fixture(scope="module")
def base_uri(base: DataFrame, tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("names") / "base.lance")
    base.write.format("lance").mode("append").save(uri)  # creates the table
    return uri


@pytest.fixture
def uri(base_uri: str, tmp_path: Path) -> str:
    """A copy of the base table (Lance tables hold only relative paths)."""
    target = str(tmp_path / "copy.lance")
    shutil.copytree(base_uri, target)
    return target


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["id"] is None, r["id"], repr(sorted(r.items()))))


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return _sorted([r.asDict(recursive=True) for r in frame.collect()])


def _lance_rows(uri: str) -> list[dict[str, Any]]:
    return _sorted(lance.dataset(uri).to_table().to_pylist())


def _check_table(spark: SparkSession, uri: str, expected: DataFrame) -> None:
    """pylance and a Spark read of the table both give exactly ``expected``."""
    assert lance.dataset(uri).schema.names == expected.columns
    assert _lance_rows(uri) == _rows(expected)
    assert _rows(spark.read.format("lance").load(uri)) == _rows(expected)


def _data_files(uri: str) -> set[str]:
    data = os.path.join(uri, "data")
    return set(os.listdir(data)) if os.path.isdir(data) else set()


def test_the_base_table_has_every_name(spark: SparkSession, base: DataFrame, base_uri: str) -> None:
    _check_table(spark, base_uri, base)
    st = lance.dataset(base_uri).schema.field("st").type
    assert [st.field(i).name for i in range(st.num_fields)] == NESTED
    # Projection by a user schema (names in another order, another case) with a metadata
    # column, and a pushed filter on a nested field with a backtick in its name.
    wanted = StructType(
        [StructField(n.upper(), LongType()) for n in reversed(ODD)]
        + [StructField("_rowaddr", LongType(), nullable=False)]
    )
    projected = spark.read.format("lance").schema(wanted).load(base_uri)
    assert projected.columns == [n.upper() for n in reversed(ODD)] + ["_rowaddr"]
    assert _rows(projected.drop("_rowaddr").withColumn("id", F.lit(0))) == _rows(
        base.select(*(F.col(q(n)).alias(n.upper()) for n in reversed(ODD))).withColumn(
            "id", F.lit(0)
        )
    )
    nested = F.col("st.`we``ird`") < -6
    table = spark.read.format("lance").load(base_uri)
    assert _rows(table.where(nested)) == _rows(base.where(nested))


@pytest.mark.parametrize("name", ODD)
def test_read_filters_and_projection(
    spark: SparkSession, base: DataFrame, base_uri: str, name: str
) -> None:
    schema = lance.dataset(base_uri).schema
    # The filters reach Lance (none is left to Spark for want of quoting).
    for f in (EqualTo((name,), 14), GreaterThan((name,), 20), IsNull((name,))):
        assert translate_filters([f], schema)[1] == []
    col = F.col(q(name))
    # A conjunction (each part is pushed separately) and a NULL check.
    conditions = [(col > 20) & ~col.isin(0, 24) & (col != 2 * (ODD.index(name) + 8)), col.isNull()]
    for condition in conditions:
        table = spark.read.format("lance").load(base_uri)
        assert _rows(table.where(condition)) == _rows(base.where(condition))
    projected = (
        spark.read.format("lance").option("columns", encode_names([name, "id"])).load(base_uri)
    )
    assert projected.columns == [name, "id"]
    assert _rows(projected) == _rows(base.select(col, "id"))


@pytest.mark.parametrize("name", ODD)
def test_delete_update_diff_merge_and_add_columns(
    spark: SparkSession,
    base: DataFrame,
    uri: str,
    view: Callable[[DataFrame], str],
    name: str,
) -> None:
    t = LanceTable.forPath(spark, uri)
    col = F.col(q(name))
    sql = q(name)
    path = f"lance.{q(uri)}"
    expected = base

    # DELETE naming one column: its narrowed read passes the name in the columns option.
    removed = next(v for v in (_value(ODD.index(name), r) for r in (3, 4)) if v is not None)
    assert t.delete(col == removed).first().num_affected_rows == 1
    expected = expected.where(F.coalesce(~(col == removed), F.lit(True)))
    _check_table(spark, uri, expected)

    # SQL UPDATE, then the change feed of that version.
    before = int(lance.dataset(uri).version)
    spark.sql(f"UPDATE {path} SET {sql} = {sql} + 1000 WHERE {sql} > 20").collect()
    changed = expected.where(col > 20).select("id")
    expected = expected.withColumn(name, F.when(col > 20, col + 1000).otherwise(col))
    _check_table(spark, uri, expected)
    post = t.diff(before).where("_change_type = 'update_postimage'")
    assert _rows(post.drop("_change_type", "_commit_version")) == _rows(
        expected.join(changed, "id", "left_semi")
    )

    # SQL MERGE on the odd column: one source row matches, one is inserted.
    key_schema = StructType([StructField("id", LongType()), StructField(name, LongType())])
    existing = expected.where(col.isNotNull()).orderBy("id").first()[name]
    source = base.sparkSession.createDataFrame([(100, existing), (101, 999_999)], key_schema)
    spark.sql(
        f"MERGE INTO {path} t USING {view(source)} s ON t.{sql} = s.{sql} "
        f"WHEN MATCHED THEN UPDATE SET t.id = s.id "
        f"WHEN NOT MATCHED THEN INSERT (id, {sql}) VALUES (s.id, s.{sql})"
    ).collect()
    merged = last_metrics(uri)
    assert (merged["numUpdatedRows"], merged["numInsertedRows"]) == (1, 1)
    expected = _merged(expected, source, name)
    _check_table(spark, uri, expected)

    # addColumns: a new odd name computed from this one.
    added = f"{name} + 1"
    t.addColumns({added: col + 1})
    expected = expected.withColumn(added, col + 1)
    _check_table(spark, uri, expected)


def _merged(target: DataFrame, source: DataFrame, name: str) -> DataFrame:
    """Spark's evaluation of the MERGE above: matched rows take the source id, unmatched
    source rows are inserted with only id and the key set."""
    key = q(name)
    joined = target.alias("t").join(
        source.alias("s"), F.col(f"t.{key}") == F.col(f"s.{key}"), "left"
    )
    kept = joined.select(
        *(
            F.coalesce(F.col("s.id"), F.col("t.id")).alias("id")
            if c == "id"
            else F.col(f"t.{q(c)}").alias(c)
            for c in target.columns
        )
    )
    new = source.join(target, source[key] == target[key], "left_anti")
    inserted = new.select(
        *(
            F.col(q(c))
            if c in ("id", name)
            else F.lit(None).cast(target.schema[c].dataType).alias(c)
            for c in target.columns
        )
    )
    return kept.unionByName(inserted)


def _net_change_counts(start: DataFrame, end: DataFrame) -> dict[str, int]:
    """Spark's evaluation of a diff by key ``id``: rows per change type."""
    others = [c for c in start.columns if c != "id"]
    joined = start.alias("b").join(end.alias("e"), "id")
    differs = F.lit(False)
    for c in others:
        differs = differs | ~F.col(f"b.{q(c)}").eqNullSafe(F.col(f"e.{q(c)}"))
    updated = joined.where(differs).count()
    counts = {
        "insert": end.join(start, "id", "left_anti").count(),
        "delete": start.join(end, "id", "left_anti").count(),
        "update_preimage": updated,
        "update_postimage": updated,
    }
    return {k: v for k, v in counts.items() if v}


def test_every_name_at_once_through_the_builder_sql_and_a_catalog_table(
    spark: SparkSession,
    base: DataFrame,
    uri: str,
    view: Callable[[DataFrame], str],
) -> None:
    t = LanceTable.forPath(spark, uri)
    touched = F.col("id") % 2 == 0
    # Builder UPDATE setting every odd column (Columns and SQL texts).
    assignments: dict[str, str | Column] = {
        n: (F.col(q(n)) * 10 if i % 2 else f"{q(n)} * 10") for i, n in enumerate(ODD)
    }
    assert t.update(touched, assignments).first().num_affected_rows == N_ROWS // 2
    expected = base
    for n in ODD:
        expected = expected.withColumn(n, F.when(touched, F.col(q(n)) * 10).otherwise(F.col(q(n))))
    _check_table(spark, uri, expected)

    # SQL DELETE whose condition names every odd column and a nested field.
    condition = " OR ".join(f"{q(n)} = {7 * (i + 2)}" for i, n in enumerate(ODD))
    condition += " OR st.`we``ird` = -5"
    spark.sql(f"DELETE FROM lance.{q(uri)} WHERE {condition}").collect()
    kept = expected.where(F.coalesce(~F.expr(condition), F.lit(True)))
    assert last_metrics(uri)["numDeletedRows"] == expected.count() - kept.count() > 0
    expected = kept
    _check_table(spark, uri, expected)

    # Builder MERGE: update all / insert all by id, the source's columns in another order.
    source = base.where("id >= 9").select(
        (F.col("id") + 1).alias("id"), *(F.col(q(n)) + 1 for n in reversed(ODD)), "st"
    )
    source = source.toDF("id", *reversed(ODD), "st")
    (
        t.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    expected = expected.join(source, "id", "left_anti").unionByName(source)
    _check_table(spark, uri, expected)

    # The change feed by key, against Spark's own comparison of the two versions.
    changes = {r[0]: r[1] for r in t.diff(1, key="id").groupBy("_change_type").count().collect()}
    assert changes == _net_change_counts(base, expected)

    # addColumns from a DataFrame joined on an odd key; ALTER TABLE ADD COLUMNS.
    key = ODD[2]
    extra = base.select(F.col(q(key)), (F.col("id") * 100).alias("z,z")).where(
        F.col(q(key)).isNotNull()
    )
    t.addColumns(extra, on=key)
    expected = expected.join(extra, on=key, how="left").select(
        *(F.col(q(c)) for c in [*expected.columns, "z,z"])
    )
    _check_table(spark, uri, expected)
    spark.sql(f"ALTER TABLE lance.{q(uri)} ADD COLUMNS ({q('n, m')} INT, `limit` INT)").collect()
    expected = expected.select(
        "*", F.lit(None).cast("int").alias("n, m"), F.lit(None).cast("int").alias("limit")
    )
    _check_table(spark, uri, expected)

    # A catalog table over it: UPDATE, DELETE, MERGE and SELECT by the table's name.
    name = f"names_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{uri}'")
    try:
        spark.sql(f"UPDATE {name} SET `select` = -1 WHERE `sp ace` IS NULL").collect()
        null_space = F.col(q("sp ace")).isNull()
        expected = expected.withColumn(
            "select", F.when(null_space, F.lit(-1).cast("long")).otherwise(F.col("select"))
        )
        spark.sql(f"DELETE FROM {name} WHERE `order` > 100 AND `limit` IS NULL").collect()
        expected = expected.where(F.coalesce(~(F.col("order") > 100), F.lit(True)))
        src = view(base.select("id", F.lit(5).cast("long").alias("a,b")).where("id < 4"))
        spark.sql(
            f"MERGE INTO {name} t USING {src} s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.`a,b` = s.`a,b`"
        ).collect()
        expected = expected.withColumn(
            "a,b", F.when(F.col("id") < 4, F.lit(5).cast("long")).otherwise(F.col(q("a,b")))
        )
        _check_table(spark, uri, expected)
        selected = spark.sql(f"SELECT `a,b`, `select`, id FROM {name} WHERE `from` > 30")
        assert _rows(selected) == _rows(
            expected.where(F.col("from") > 30).select(q("a,b"), "select", "id")
        )
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_merge_sources_may_have_names_a_table_cannot(
    spark: SparkSession, base: DataFrame, uri: str
) -> None:
    """A MERGE source with a dot or a backtick in a column name (Spark allows both)."""
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("x.y", LongType()),
            StructField("we`ird", LongType()),
        ]
    )
    source = spark.createDataFrame([(1, 10, 11), (50, 20, 21)], schema)
    result = (
        LanceTable.forPath(spark, uri)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"a,b": "s.`we``ird`", "select": F.col("s.`x.y`")})
        .whenNotMatchedInsert(values={"id": "s.id", "sp ace": "s.`x.y` + s.`we``ird`"})
        .execute()
        .first()
    )
    assert (result.num_updated_rows, result.num_inserted_rows) == (1, 1)
    one = F.col("id") == 1
    updated = base.withColumn("a,b", F.when(one, F.lit(11)).otherwise(F.col(q("a,b"))))
    updated = updated.withColumn("select", F.when(one, F.lit(10)).otherwise(F.col("select")))
    inserted = spark.createDataFrame(
        [(50, 41)], StructType([StructField("id", LongType()), StructField("sp ace", LongType())])
    )
    _check_table(spark, uri, updated.unionByName(inserted, allowMissingColumns=True))


def test_append_and_overwrite_with_every_name(
    spark: SparkSession, base: DataFrame, uri: str
) -> None:
    # Append: columns in another order and another case resolve to the table's names.
    reordered = base.where("id < 3").select(
        "st", *(F.col(q(n)).alias(n.upper()) for n in reversed(ODD)), "id"
    )
    reordered.write.format("lance").mode("append").save(uri)
    expected = base.unionByName(base.where("id < 3"))
    _check_table(spark, uri, expected)
    # Overwrite keeps every name.
    base.where("id > 5").write.format("lance").mode("overwrite").save(uri)
    _check_table(spark, uri, base.where("id > 5"))


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        (["id", "ID"], ["'id'", "'ID'"]),
        (["Name", "nAME", "x"], ["'Name'", "'nAME'"]),
        (["a.b"], ["'a.b'"]),
        (["we`ird"], ["'we`ird'"]),
        (["_rowaddr"], ["'_rowaddr'"]),
    ],
)
def test_names_a_table_cannot_hold_fail_before_any_file(
    spark: SparkSession, tmp_path: Path, uri: str, columns: list[str], named: list[str]
) -> None:
    frame = spark.range(3).select(*(F.col("id").alias(c) for c in columns))
    fresh = str(tmp_path / "fresh.lance")
    with pytest.raises(Exception) as e:
        frame.write.format("lance").mode("append").save(fresh)
    for fragment in named:
        assert fragment in str(e.value)
    assert not os.path.exists(fresh) or _data_files(fresh) == set()
    # Appending them (mergeSchema) to an existing table changes nothing either.
    version, files = lance.dataset(uri).version, _data_files(uri)
    with pytest.raises(Exception) as e:
        frame.write.format("lance").mode("append").option("mergeSchema", "true").save(uri)
    for fragment in named:
        if fragment != "'id'":  # the table's own `id` is matched, its twin is named
            assert fragment in str(e.value)
    assert lance.dataset(uri).version == version and _data_files(uri) == files


def test_nested_case_twins_are_rejected(spark: SparkSession, tmp_path: Path) -> None:
    frame = spark.range(2).selectExpr("named_struct('k', id, 'K', id) AS s")
    fresh = str(tmp_path / "nested.lance")
    with pytest.raises(Exception, match=r"'s\.k'.*'s\.K'"):
        frame.write.format("lance").mode("append").save(fresh)
    assert _data_files(fresh) == set()


def test_the_columns_option_refuses_an_ambiguous_plain_list(
    spark: SparkSession, base_uri: str
) -> None:
    with pytest.raises(Exception, match=r"ambiguous.*'a,b'.*\[\"a,b\"\]"):
        spark.read.format("lance").option("columns", "id,a,b").load(base_uri).collect()
    plain = spark.read.format("lance").option("columns", "id, select ,FROM").load(base_uri)
    assert plain.columns == ["id", "select", "from"]
    json_list = spark.read.format("lance").option("columns", '["a,b", " pad ", "st"]')
    assert json_list.load(base_uri).columns == ["a,b", " pad ", "st"]
