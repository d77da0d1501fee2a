"""LanceTable.updateColumns: one Spark job writes, per fragment, a data file holding only the
updated columns; the other columns' files stay; one Lance version."""

from __future__ import annotations

import glob
import os
import uuid
from collections.abc import Iterator
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable
from lance_spark._spark import default_parallelism
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, SchemaMismatchError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _table(spark: SparkSession, uri: str) -> LanceTable:
    """1000 rows in 4 fragments (id, label, score, image), 145 rows deleted (855 left), and
    a BTREE index on ``label``."""
    spark.range(0, 1000, numPartitions=4).selectExpr(
        "id",
        "concat('l', id) AS label",
        "cast(id AS double) AS score",
        "cast(concat('img', id) AS binary) AS image",
    ).write.format("lance").mode("append").save(uri)
    t = LanceTable.forPath(spark, uri)
    t.delete("id % 10 = 3 OR id BETWEEN 600 AND 649")
    lance.dataset(uri).create_scalar_index("label", "BTREE")
    return t


def _files_of(ds: lance.LanceDataset, field_id: int) -> dict[int, list[str]]:
    """Per fragment, the data files holding field ``field_id``."""
    return {
        f.fragment_id: [d.path for d in f.metadata.files if field_id in d.fields]
        for f in ds.get_fragments()
    }


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def _source(spark: SparkSession) -> DataFrame:
    """Keys in fragments 0, 1 and 3 (some deleted: x3), keys the table lacks and a null key."""
    keys = [*range(0, 500, 4), *range(900, 1000, 7), 5000, 5001, None]
    return spark.createDataFrame(
        [(k, None if k is None else f"new{k}", None if k is None else k / 2) for k in keys],
        "id long, label string, score float",
    )


def test_matched_rows_get_the_values_other_files_untouched(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    before = lance.dataset(table_uri)
    version = before.version
    image_files = _files_of(before, before.lance_schema.field("image").id())
    old = t.toDF(version=version).toArrow()
    source = _source(spark)
    # Spark's own evaluation, on an in-memory copy of the table: a left join and coalesce.
    memory = spark.createDataFrame(old.to_pandas(), t.toDF().schema)
    s = source.alias("s")
    expected = {
        r["id"]: r
        for r in memory.alias("t")
        .join(s, F.col("t.id") == F.col("s.id"), "left")
        .select(
            "t.id",
            F.coalesce("s.label", "t.label").alias("label"),
            F.coalesce(F.col("s.score").cast("double"), "t.score").alias("score"),
            "t.image",
        )
        .toArrow()
        .to_pylist()
    }
    matched = sum(1 for k in source.toArrow().column("id").to_pylist() if k in expected)

    result = t.updateColumns(source, on="id").first()

    assert (result.num_updated_columns, result.num_affected_rows) == (2, matched)
    ds = lance.dataset(table_uri)
    assert ds.version == version + 1  # exactly one new version
    assert ds.schema == before.schema  # same columns, same types
    rows = {r["id"]: r for r in ds.to_table().to_pylist()}
    assert rows == expected
    assert rows[4]["label"] == "new4" and rows[5]["label"] == "l5"
    # The image column's files are the same files; untouched fragment 2 keeps all its files.
    after_image = _files_of(ds, ds.lance_schema.field("image").id())
    assert after_image == image_files
    old_files = {f.fragment_id: [d.path for d in f.metadata.files] for f in before.get_fragments()}
    new_files = {f.fragment_id: [d.path for d in f.metadata.files] for f in ds.get_fragments()}
    assert new_files[2] == old_files[2]
    for fid in (0, 1, 3):
        added = [p for p in new_files[fid] if p not in old_files[fid]]
        assert len(added) == 1, (fid, new_files[fid])
    # Filters (the label index must not answer for the rewritten fragments) match Spark's own.
    for condition in ("label = 'new4'", "label = 'l4'", "label = 'l5'", "label LIKE 'new9%'"):
        got = sorted(r.id for r in t.toDF().where(condition).collect())
        want = sorted(i for i, r in expected.items() if _matches(condition, r["label"]))
        assert got == want, condition
        lance_ids = sorted(ds.to_table(columns=["id"], filter=condition).column("id").to_pylist())
        assert lance_ids == want, condition
    history = t.history(1).first()
    assert history.operation == "UPDATE COLUMNS"
    assert history.operationParameters == {"columns": "label, score", "on": "id"}
    assert history.operationMetrics["numUpdatedRows"] == str(matched)


def _matches(condition: str, label: str) -> bool:
    if " LIKE " in condition:
        return label.startswith(condition.split("'")[1].rstrip("%"))
    return label == condition.split("'")[1]


def test_no_match_commits_nothing(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    source = spark.createDataFrame([(5000, "x"), (3, "deleted row")], "id long, label string")
    result = t.updateColumns(source, on="id").first()
    assert (result.num_updated_columns, result.num_affected_rows) == (1, 0)
    assert lance.dataset(table_uri).version == version


def test_errors_leave_the_table_unchanged(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    version, files = lance.dataset(table_uri).version, _data_files(table_uri)
    df = spark.createDataFrame([(1, "a", 2)], "id long, label string, nope int")
    with pytest.raises(ColumnNotFoundError, match=r"'nope'.*columns: id, label, score, image"):
        t.updateColumns(df, on="id")
    with pytest.raises(ColumnNotFoundError, match="key 'key'"):
        t.updateColumns(df, on="key")
    wrong_type = spark.createDataFrame([(1, 7)], "id long, label int")
    with pytest.raises(SchemaMismatchError, match=r"'label'.*int32.*string"):
        t.updateColumns(wrong_type, on="id")
    with pytest.raises(InvalidOptionError, match="no column besides the key"):
        t.updateColumns(df.select("id"), on="id")
    twice = spark.createDataFrame([(1, "a", "b")], "id long, label string, LABEL string")
    with pytest.raises(InvalidOptionError, match="twice"):
        t.updateColumns(twice, on="id")
    assert lance.dataset(table_uri).version == version
    assert _data_files(table_uri) == files


def test_duplicate_key_and_failing_source_leave_no_version_or_files(
    spark: SparkSession, table_uri: str
) -> None:
    t = _table(spark, table_uri)
    version, files = lance.dataset(table_uri).version, _data_files(table_uri)
    before = lance.dataset(table_uri).to_table()
    # One task per fragment (no coalescing), so other tasks write their files before (or
    # while) the failing task fails: the abort must delete what they wrote.
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    try:
        twice = spark.createDataFrame(
            [(i, "x") for i in range(0, 1000, 3)] + [(999, "again")], "id long, label string"
        )
        with pytest.raises(InvalidOptionError, match=r"key 999 more than once"):
            t.updateColumns(twice, on="id")
        failing = spark.range(0, 1000).select(
            "id",
            F.when(F.col("id") == 977, F.raise_error(F.lit("boom in a task")))
            .otherwise(F.concat(F.lit("f"), F.col("id").cast("string")))
            .alias("label"),
        )
        with pytest.raises(Exception, match="boom in a task"):
            t.updateColumns(failing, on="id")
    finally:
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")
    _wait_until_no_task_runs(spark)
    ds = lance.dataset(table_uri)
    assert ds.version == version
    assert ds.to_table() == before
    assert _data_files(table_uri) == files
    assert not glob.glob(os.path.join(table_uri, "data", ".tmp*"))
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))


def test_vector_column_and_later_writes(spark: SparkSession, table_uri: str) -> None:
    """An array source into a fixed-size-list column; the table stays writable after."""
    rows = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "vec": pa.array([[float(i)] * 3 for i in range(6)], pa.list_(pa.float32(), 3)),
            "name": pa.array([f"n{i}" for i in range(6)]),
        }
    )
    lance.write_dataset(rows, table_uri, max_rows_per_file=3)
    t = LanceTable.forPath(spark, table_uri)
    source = spark.createDataFrame(
        [(1, [9.0, 9.0, 9.0]), (4, [8.0, 8.0, 8.0])], "id long, vec array<float>"
    )
    assert t.updateColumns(source, on="id").first().num_affected_rows == 2
    got = {r["id"]: r["vec"] for r in lance.dataset(table_uri).to_table().to_pylist()}
    assert got == {
        0: [0.0] * 3,
        1: [9.0] * 3,
        2: [2.0] * 3,
        3: [3.0] * 3,
        4: [8.0] * 3,
        5: [5.0] * 3,
    }
    assert lance.dataset(table_uri).schema == rows.schema
    wrong_length = spark.createDataFrame([(2, [1.0])], "id long, vec array<float>")
    with pytest.raises(SchemaMismatchError):
        t.updateColumns(wrong_length, on="id")
    t.update("id = 1", {"name": "'renamed'"})
    assert [(r.id, r.name, r.vec[0]) for r in t.toDF().where("id = 1").collect()] == [
        (1, "renamed", 9.0)
    ]


def _wait_until_no_task_runs(spark: SparkSession) -> None:
    """Return once no task runs on the session's executors (see test_add_columns)."""
    slots = default_parallelism(spark)

    def done(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    frame = spark.range(0, slots, 1, numPartitions=slots)
    assert frame.mapInArrow(done, frame.schema, barrier=True).count() == slots


def test_rows_appended_during_the_job_are_updated_too(
    spark: SparkSession, table_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serializable: rows another writer appends while the job runs (with keys of the
    DataFrame) make the attempt run again on the newer version; no lost update."""
    from lance_spark.table import job_runner

    t = _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    real = job_runner.run_tasks
    calls: list[int] = []

    def run_then_append(rows: DataFrame, task: job_runner.Task) -> Any:
        done = real(rows, task)
        if not calls:  # the first attempt only: another writer appends meanwhile
            extra = pa.table(
                {
                    "id": pa.array([2000], pa.int64()),
                    "label": ["l2000"],
                    "score": [0.0],
                    "image": pa.array([b"x"], pa.binary()),
                }
            )
            lance.write_dataset(extra, table_uri, mode="append")
        calls.append(1)
        return done

    monkeypatch.setattr(job_runner, "run_tasks", run_then_append)
    source = spark.createDataFrame([(4, "new4"), (2000, "new2000")], "id long, label string")
    assert t.updateColumns(source, on="id").first().num_affected_rows == 2
    assert len(calls) == 2  # the attempt was redone
    ds = lance.dataset(table_uri)
    assert ds.version == version + 2  # the append, then one UPDATE COLUMNS
    labels = {r["id"]: r["label"] for r in ds.to_table(columns=["id", "label"]).to_pylist()}
    assert (labels[4], labels[2000], labels[5]) == ("new4", "new2000", "l5")


# --- ALTER TABLE t UPDATE COLUMNS ... FROM source ON key (the companion's statement) -----------


def _quoted(uri: str) -> str:
    return "'" + uri.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_sql_statement_matches_the_api(spark: SparkSession, tmp_path: Any, view: Any) -> None:
    """The SQL statement and ``updateColumns`` give identical tables from identical ones (the
    API's result is checked against Spark's own evaluation above); a column list updates only
    those columns; only their files are written; one version each."""
    by_api, by_sql = str(tmp_path / "api.lance"), str(tmp_path / "sql.lance")
    _table(spark, by_api)
    t = _table(spark, by_sql)
    before = lance.dataset(by_sql)
    image_files = _files_of(before, before.lance_schema.field("image").id())
    source = _source(spark)
    name = view(source)

    want = LanceTable.forPath(spark, by_api).updateColumns(source, on="id").first()
    got = spark.sql(f"ALTER TABLE {_quoted(by_sql)} UPDATE COLUMNS label, score FROM {name} ON id")

    assert got.collect() == [want]
    ds = lance.dataset(by_sql)
    assert ds.version == before.version + 1
    assert ds.to_table() == lance.dataset(by_api).to_table()
    assert _files_of(ds, ds.lance_schema.field("image").id()) == image_files
    history = t.history(1).first()
    assert (history.operation, history.operationParameters) == (
        "UPDATE COLUMNS",
        {"columns": "label, score", "on": "id"},
    )

    # One column of the source (others ignored), the key spelled in another case.
    doubled = view(source.select("id", (F.col("score") * 2).alias("score"), "label"))
    spark.sql(f"ALTER TABLE {_quoted(by_sql)} UPDATE COLUMNS (SCORE) FROM {doubled} ON ID")
    rows = {r["id"]: r for r in lance.dataset(by_sql).to_table().to_pylist()}
    assert rows[4]["score"] == 4.0 and rows[4]["label"] == "new4"
    assert rows[5]["score"] == 5.0 and rows[5]["label"] == "l5"
    assert lance.dataset(by_sql).version == before.version + 2


def test_sql_statement_errors_change_nothing(
    spark: SparkSession, table_uri: str, view: Any
) -> None:
    """Every refused statement names what is wrong and leaves no version, file or staging."""
    _table(spark, table_uri)
    version, files = lance.dataset(table_uri).version, _data_files(table_uri)
    before = lance.dataset(table_uri).to_table()
    table = _quoted(table_uri)
    good = view(spark.createDataFrame([(1, "a", 2)], "id long, label string, nope int"))
    wrong_type = view(spark.createDataFrame([(1, 7)], "id long, label int"))
    twice = view(
        spark.createDataFrame(
            [(i, "x") for i in range(0, 1000, 3)] + [(999, "again")], "id long, label string"
        )
    )
    refused = {
        f"UPDATE COLUMNS nope FROM {good} ON id": r"column 'nope' of the source is not a column of the Lance",
        f"UPDATE COLUMNS other FROM {good} ON id": r"'other' is not a column of the source",
        f"UPDATE COLUMNS id FROM {good} ON id": r"'id' is the key",
        f"UPDATE COLUMNS label FROM {good} ON key": r"key 'key' is not a column of the Lance",
        f"UPDATE COLUMNS label FROM {wrong_type} ON id": r"'label'.*int32.*string",
        "UPDATE COLUMNS label FROM no_such_view ON id": r"TABLE_OR_VIEW_NOT_FOUND.*no_such_view",
        f"UPDATE COLUMNS label FROM {twice} ON id": r"key 999 more than once",
    }
    for statement, error in refused.items():
        with pytest.raises(Exception, match=error):
            spark.sql(f"ALTER TABLE {table} {statement}").collect()
    _wait_until_no_task_runs(spark)
    ds = lance.dataset(table_uri)
    assert ds.version == version
    assert ds.to_table() == before
    assert _data_files(table_uri) == files
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))


def test_sql_statement_is_redone_after_an_overlapping_append(
    classic_spark: SparkSession, table_uri: str
) -> None:
    """The statement's procedure, driven call by call as the companion drives it: an append
    with a key of the source committed while the job ran makes the commit a retryable
    conflict, so the procedure asks for the job again on the newer version; the appended row
    is updated too, in one version (serializable like MERGE)."""
    from lance_spark.source import write_jobs
    from lance_spark.table import procedures
    from lance_spark.table.context import TableContext

    spark = classic_spark
    _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    source = f"source_{uuid.uuid4().hex[:12]}"
    spark.createDataFrame(
        [(4, "new4"), (2000, "new2000")], "id long, label string"
    ).createOrReplaceTempView(source)
    procedure = procedures.JOB_PROCEDURES["update_columns"]
    table = TableContext(spark, table_uri, {})
    path = "lance.`" + table_uri.replace("`", "``") + "`"  # as the statement's parser names it
    args = {"table": path, "source": source, "on": "id", "columns": "label"}

    def run(job: Any) -> list[bytes]:
        task = job.task

        def ship(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for result in task(batches):
                yield write_jobs.encode(result)

        rows = spark.sql(job.input.query).mapInArrow(ship, write_jobs.RESULT_DDL).collect()
        return [bytes(r[0]) for r in rows]

    asked = procedure(table, args, None)
    assert isinstance(asked, procedures.Job) and isinstance(asked.input, procedures.Query)
    schema = spark.sql(asked.input.query).schema
    info = procedures.InputInfo(schema=schema, files=0)
    first = procedure(table, args, procedures.Resume(state=asked.state, results=None, input=info))
    assert isinstance(first, procedures.Job)
    results = run(first)
    extra = pa.table(
        {
            "id": pa.array([2000], pa.int64()),
            "label": ["l2000"],
            "score": [0.0],
            "image": pa.array([b"x"], pa.binary()),
        }
    )
    lance.write_dataset(extra, table_uri, mode="append")  # another writer, meanwhile
    again = procedure(table, args, procedures.Resume(state=first.state, results=results))
    assert isinstance(again, procedures.Job)  # the conflict: the job once more
    assert again.state["attempt"] == 2 and again.state["plan"]["version"] == version + 1
    done = procedure(table, args, procedures.Resume(state=again.state, results=run(again)))
    assert done == (procedures.UPDATE_COLUMNS_SCHEMA, [(1, 2)])
    ds = lance.dataset(table_uri)
    assert ds.version == version + 2  # the append, then one UPDATE COLUMNS
    labels = dict(zip(*ds.to_table(columns=["id", "label"]).to_pydict().values(), strict=True))
    assert (labels[4], labels[2000], labels[5]) == ("new4", "new2000", "l5")
    assert not os.path.exists(os.path.join(table_uri, "_lance_spark"))
    spark.catalog.dropTempView(source)


def test_names_with_braces_and_spaces(spark: SparkSession, table_uri: str) -> None:
    """The join is one SQL query: names are quoted whole (braces are not PySpark's format
    fields)."""
    key, value = "the key", "odd {name} here"
    lance.write_dataset(
        pa.table({key: pa.array([1, 2, 3], pa.int64()), value: ["a", "b", "c"]}), table_uri
    )
    source = spark.createDataFrame([(2, "B")], "`the key` long, `odd {name} here` string")
    t = LanceTable.forPath(spark, table_uri)
    assert t.updateColumns(source, on=key).first().num_affected_rows == 1
    assert lance.dataset(table_uri).to_table().to_pydict() == {
        key: [1, 2, 3],
        value: ["a", "B", "c"],
    }


# --- indexes over updated columns --------------------------------------------------------------

_INDEXED_FILTERS = ("v = 10", "v = -10", "v = 7", "v > 390", "c = 3", "c = 101", "c = 900")


def _check_indexes_answer_current_values(spark: SparkSession, uri: str, step: str) -> None:
    """Each filter on the indexed columns gives the same rows through the indexes (pylance's
    default), without them, and in Spark (one query for all the filters)."""
    ds = lance.dataset(uri)
    flags = [F.expr(c).alias(f"f{i}") for i, c in enumerate(_INDEXED_FILTERS)]
    rows = spark.read.format("lance").load(uri).select("k", *flags).collect()
    for i, condition in enumerate(_INDEXED_FILTERS):
        indexed = ds.to_table(columns=["k"], filter=condition).column("k").to_pylist()
        scanned = ds.to_table(columns=["k"], filter=condition, use_scalar_index=False)
        want = sorted(scanned.column("k").to_pylist())
        assert sorted(indexed) == want, (step, condition)
        assert sorted(r.k for r in rows if r[f"f{i}"]) == want, (step, condition)


def test_indexes_over_updated_columns_never_answer_old_values(
    classic_spark: SparkSession, tmp_path: Any
) -> None:
    """A BTREE (v) and a BITMAP (c) index stay right through every writer that changes values
    in place (updateColumns, ALTER TABLE ... UPDATE COLUMNS, UPDATE and MERGE, which move rows
    under their stable row ids, restore), before and after optimizeIndices: the backfill
    leaves the rewritten fragments unindexed, and the optimize builds again the segments that
    hold entries for their old values. Server-side only: one mode."""
    spark, uri = classic_spark, str(tmp_path / "t.lance")
    spark.range(0, 400, numPartitions=4).selectExpr(
        "id AS k", "id AS v", "id % 7 AS c"
    ).write.format("lance").save(uri)
    t = LanceTable.forPath(spark, uri)
    t.createIndex("v", "BTREE", name="v_idx")
    t.createIndex("c", "BITMAP", name="c_idx")
    check = _check_indexes_answer_current_values
    fragment_rows = {f.fragment_id: f.count_rows() for f in lance.dataset(uri).get_fragments()}

    t.updateColumns(
        spark.range(0, 20).selectExpr("id AS k", "-id AS v", "100 + id % 3 AS c"), on="k"
    )
    check(spark, uri, "updateColumns")
    # The touched fragment (0) is left out of both indexes: its rows are unindexed.
    unindexed = {r.name: r.numUnindexedRows for r in t.listIndices().collect()}
    assert unindexed == {"v_idx": fragment_rows[0], "c_idx": fragment_rows[0]}
    backfilled = lance.dataset(uri).version
    t.optimizeIndices()
    assert {r.name: r.numUnindexedRows for r in t.listIndices().collect()} == {
        "v_idx": 0,
        "c_idx": 0,
    }
    check(spark, uri, "optimize after updateColumns")

    spark.sql(f"UPDATE lance.`{uri}` SET v = 7, c = 900 WHERE k IN (150, 250)")
    t.alias("t").merge(
        spark.createDataFrame([(350, 10, 3), (999, 7, 3)], "k long, v long, c long").alias("s"),
        "t.k = s.k",
    ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    check(spark, uri, "UPDATE and MERGE")
    t.optimizeIndices()
    check(spark, uri, "optimize after UPDATE and MERGE")

    spark.range(100, 120).selectExpr(
        "id AS k", "id % 3 + 100 AS c", "-id AS v"
    ).createOrReplaceTempView("index_backfill_source")
    try:
        spark.sql(f"ALTER TABLE {_quoted(uri)} UPDATE COLUMNS v, c FROM index_backfill_source ON k")
    finally:
        spark.catalog.dropTempView("index_backfill_source")
    check(spark, uri, "UPDATE COLUMNS")
    t.optimizeIndices()
    check(spark, uri, "optimize after UPDATE COLUMNS")

    t.restoreToVersion(backfilled)
    check(spark, uri, "restore")
    t.optimizeIndices()
    check(spark, uri, "optimize after restore")
