"""Lance branches through Spark: created, read, written, merged and time-travelled on a branch,
each checked against pylance (the branch's own dataset at <table>/tree/<name>) and for leaving
the main branch's versions alone."""

from __future__ import annotations

import os

import lance
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import (
    BranchNotFoundError,
    InvalidOptionError,
    LanceTable,
    VersionNotFoundError,
)

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _frame(spark: SparkSession, ids: list[int]) -> DataFrame:
    return spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, label string")


def _append(spark: SparkSession, uri: str, ids: list[int], *, branch: str | None = None) -> None:
    writer = _frame(spark, ids).write.format("lance").mode("append")
    if branch is not None:
        writer = writer.option("branch", branch)
    writer.save(uri)


def _rows(df: DataFrame) -> list[tuple[int, str]]:
    return sorted((r.id, r.label) for r in df.collect())


def _lance_rows(uri: str, version: int | None = None) -> list[tuple[int, str]]:
    data = lance.dataset(uri, version=version).to_table().to_pydict()
    return sorted(zip(data["id"], data["label"], strict=True))


def _versions(uri: str) -> list[int]:
    return sorted(int(v["version"]) for v in lance.dataset(uri).versions())


def test_read_write_and_time_travel_on_a_branch(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, [0, 1, 2])  # main v1
    _append(spark, table_uri, [3, 4])  # main v2
    t = LanceTable.forPath(spark, table_uri)
    exp = t.createBranch("exp", version=1)
    assert exp.currentBranch == "exp" and t.currentBranch == "main"
    branch_uri = os.path.join(table_uri, "tree", "exp")
    assert exp.uri == branch_uri and "branch='exp'" in repr(exp)
    # A branch starts as the version it was created from: its version 1 is main's version 1.
    assert _versions(branch_uri) == [1]
    read = spark.read.format("lance").option("branch", "exp").load(table_uri)
    assert _rows(read) == _rows(_frame(spark, [0, 1, 2])) == _lance_rows(branch_uri)

    _append(spark, table_uri, [10, 11], branch="exp")  # exp v2
    _frame(spark, [20]).write.format("lance").option("branch", "exp").mode("append").save(
        table_uri
    )  # exp v3
    assert _versions(branch_uri) == [1, 2, 3]
    assert _lance_rows(branch_uri) == _rows(_frame(spark, [0, 1, 2, 10, 11, 20]))
    # main's versions are untouched, and main's later writes do not show on the branch
    assert _versions(table_uri) == [1, 2]
    assert _lance_rows(table_uri) == _rows(_frame(spark, [0, 1, 2, 3, 4]))
    _append(spark, table_uri, [5])  # main v3
    assert (
        _rows(exp.toDF()) == _lance_rows(branch_uri) == _rows(_frame(spark, [0, 1, 2, 10, 11, 20]))
    )
    assert _rows(t.toDF()) == _rows(_frame(spark, [0, 1, 2, 3, 4, 5]))

    # time travel within the branch: its version 2 is not main's version 2
    as_of = (
        spark.read.format("lance").option("branch", "exp").option("versionAsOf", 2).load(table_uri)
    )
    assert _rows(as_of) == _lance_rows(branch_uri, 2) == _rows(_frame(spark, [0, 1, 2, 10, 11]))
    assert _rows(t.toDF(version=2)) == _rows(_frame(spark, [0, 1, 2, 3, 4]))
    assert _rows(exp.toDF(version=1)) == _rows(_frame(spark, [0, 1, 2]))
    assert [r.version for r in exp.history().collect()] == [3, 2, 1]
    with pytest.raises(Exception, match=r"version 7 .*existing versions: 1-3"):  # Spark wraps it
        exp.toDF(version=7).collect()

    # overwrite on the branch
    _frame(spark, [99]).write.format("lance").option("branch", "exp").mode("overwrite").save(
        table_uri
    )
    assert _lance_rows(branch_uri) == [(99, "v99")] and _versions(branch_uri) == [1, 2, 3, 4]
    assert _versions(table_uri) == [1, 2, 3]
    assert _lance_rows(table_uri) == _rows(_frame(spark, [0, 1, 2, 3, 4, 5]))

    branches = {r.branch: r for r in t.listBranches().collect()}
    assert sorted(branches) == ["exp", "main"]
    assert (branches["main"].version, branches["main"].parentBranch) == (3, None)
    got = branches["exp"]
    assert (got.version, got.parentBranch, got.parentVersion) == (4, "main", 1)
    assert got.createdAt is not None


def test_merge_update_delete_on_a_branch(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, [1, 2, 3, 4])
    t = LanceTable.forPath(spark, table_uri)
    t.createBranch("fix")
    fix = t.branch("fix")
    source = _frame(spark, [3, 4, 5]).selectExpr("id", "concat(label, '-new') AS label")
    fix.alias("t").merge(
        source.alias("s"), "s.id = t.id"
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    # Spark's own evaluation of the same MERGE on the in-memory rows
    expected = _frame(spark, [1, 2, 3, 4]).join(source, "id", "left_anti").unionByName(source)
    branch_uri = os.path.join(table_uri, "tree", "fix")
    assert _lance_rows(branch_uri) == _rows(expected) == _rows(fix.toDF())

    fix.update("id = 1", {"label": "'one'"})
    fix.delete("id = 2")
    expected = expected.where("id != 2").selectExpr(
        "id", "CASE WHEN id = 1 THEN 'one' ELSE label END AS label"
    )
    assert _lance_rows(branch_uri) == _rows(expected)
    assert [r.operation for r in fix.history().collect()][:3] == ["DELETE", "UPDATE", "MERGE"]
    # main: still its one version and its rows
    assert _versions(table_uri) == [1]
    assert _lance_rows(table_uri) == _rows(_frame(spark, [1, 2, 3, 4]))


def test_branch_errors(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, [1, 2])
    t = LanceTable.forPath(spark, table_uri)
    t.createBranch("exp")
    for bad in ("a b", "a/b", "..", "x.lock", ""):
        with pytest.raises(InvalidOptionError, match="not a valid branch name"):
            t.createBranch(bad)
    with pytest.raises(InvalidOptionError, match="'main' is the table's main branch"):
        t.createBranch("main")
    with pytest.raises(InvalidOptionError, match="'exp' already exists"):
        t.createBranch("exp")
    assert t.createBranch("exp", ifNotExists=True).currentBranch == "exp"
    with pytest.raises(VersionNotFoundError, match=r"version 5 .*existing versions: 1"):
        t.createBranch("late", version=5)
    with pytest.raises(BranchNotFoundError, match=r"'nope' does not exist.*branches: main, exp"):
        t.deleteBranch("nope")
    t.deleteBranch("nope", ifExists=True)
    with pytest.raises(InvalidOptionError, match="main branch"):
        t.deleteBranch("main")
    with pytest.raises(BranchNotFoundError, match=r"'nope' does not exist.*branches: main, exp"):
        t.branch("nope")
    with pytest.raises(Exception, match=r"'nope' does not exist.*branches: main, exp"):
        spark.read.format("lance").option("branch", "nope").load(table_uri).collect()
    with pytest.raises(Exception, match=r"'nope' does not exist.*branches: main, exp"):
        _append(spark, table_uri, [3], branch="nope")
    with pytest.raises(Exception, match="option branch is empty"):
        spark.read.format("lance").option("branch", " ").load(table_uri).collect()
    assert not os.path.exists(os.path.join(table_uri, "tree", "nope"))  # nothing created there
    assert _versions(table_uri) == [1] and sorted(lance.dataset(table_uri).branches.list()) == [
        "exp"
    ]

    # a tag names a version of one branch
    exp = t.branch("exp")
    _append(spark, table_uri, [3], branch="exp")
    exp.createTag("exp-head")
    assert _rows(exp.toDF(tag="exp-head")) == _rows(_frame(spark, [1, 2, 3]))
    with pytest.raises(Exception, match="tag 'exp-head' is version 2 of branch 'exp'"):
        t.toDF(tag="exp-head").collect()
    with pytest.raises(InvalidOptionError, match="tag 'exp-head' names a version of it"):
        t.deleteBranch("exp")
    exp.createBranch("sub")
    exp.deleteTag("exp-head")
    with pytest.raises(InvalidOptionError, match="branch 'sub' was created from it"):
        t.deleteBranch("exp")
    assert _rows(t.branch("sub").toDF()) == _rows(_frame(spark, [1, 2, 3]))
    t.deleteBranch("sub")
    t.deleteBranch("exp")
    assert [r.branch for r in t.listBranches().collect()] == ["main"]
    assert not os.path.exists(os.path.join(table_uri, "tree", "exp"))
    with pytest.raises(BranchNotFoundError, match=r"branches: main$"):
        t.branch("exp")


def test_vacuum_of_main_keeps_a_branch_readable(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, [1, 2])  # v1: the branch's data files are these
    t = LanceTable.forPath(spark, table_uri)
    t.createBranch("keep")
    _frame(spark, [7]).write.format("lance").mode("overwrite").save(table_uri)  # v2
    t.vacuum(0)
    assert _lance_rows(os.path.join(table_uri, "tree", "keep")) == [(1, "v1"), (2, "v2")]
    assert _rows(t.branch("keep").toDF()) == _rows(_frame(spark, [1, 2]))
    assert _lance_rows(table_uri) == [(7, "v7")]


def test_catalog_table_read_with_a_branch(spark: SparkSession, table_uri: str) -> None:
    _append(spark, table_uri, [1, 2])
    spark.sql("DROP TABLE IF EXISTS branched")
    spark.sql(f"CREATE TABLE branched USING lance LOCATION '{table_uri}'")
    try:
        t = LanceTable.forName(spark, "branched")
        exp = t.createBranch("exp")
        exp.addColumns({"twice": "id * 2"})  # the branch's schema only
        # The branch as a table has the branch's columns; the option on the main table reads
        # the branch's rows with the catalog entry's (main's) columns, as Iceberg does.
        read = spark.table("branched.branch_exp")
        assert sorted(tuple(r) for r in read.collect()) == [(1, "v1", 2), (2, "v2", 4)]
        read = spark.read.option("branch", "exp").table("branched")
        assert sorted(tuple(r) for r in read.collect()) == [(1, "v1"), (2, "v2")]
        exp.createTag("exp-first", 1)
        tagged = spark.read.option("tag", "exp-first").table("branched.branch_exp")
        assert _rows(tagged) == _rows(_frame(spark, [1, 2]))
        assert spark.table("branched").columns == ["id", "label"]  # the entry: main's
        assert lance.dataset(table_uri).schema.names == ["id", "label"]
    finally:
        spark.sql("DROP TABLE IF EXISTS branched")
