"""LanceTable.convertToLance: a Parquet table copied into one Lance version by one Spark job."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import (
    InvalidOptionError,
    JobProgress,
    LanceSparkError,
    LanceTable,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from lance_spark._spark import default_parallelism

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

UTC = dt.UTC
_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int16()),
        ("count", pa.int32()),
        ("flag", pa.bool_()),
        ("score", pa.float64()),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local_ts", pa.timestamp("us")),
        ("day", pa.date32()),
        ("price", pa.decimal128(12, 3)),
        ("emb", pa.list_(pa.float32())),
        ("tags", pa.list_(pa.string())),
        ("point", pa.struct([("x", pa.int32()), ("y", pa.string())])),
    ]
)


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "small": [i % 300 - 150 for i in ids],
            "count": [None if i % 7 == 0 else i * 3 for i in ids],
            "flag": [i % 2 == 0 for i in ids],
            "score": [i / 4 for i in ids],
            "name": [None if i % 5 == 0 else f"name-{i}" for i in ids],
            "blob": [bytes([i % 256, 7]) for i in ids],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i) for i in ids],
            "local_ts": [dt.datetime(2024, 6, 1, 12) + dt.timedelta(minutes=i) for i in ids],
            "day": [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in ids],
            "price": [Decimal(i) / 1000 + Decimal("12.5") for i in ids],
            "emb": [[float(i), 0.5, -1.0] for i in ids],
            "tags": [[f"t{i % 3}"] * (i % 3) for i in ids],
            "point": [{"x": i, "y": None if i % 4 == 0 else str(i)} for i in ids],
        },
        schema=_SCHEMA,
    )


@pytest.fixture
def parquet_dir(tmp_path: Path) -> str:
    """A Hive-partitioned Parquet table (label=cat / label=dog), three files, 30 rows."""
    root = tmp_path / "pets.parquet"
    for label, start, n in (("cat", 0, 10), ("cat", 10, 5), ("dog", 15, 15)):
        folder = root / f"label={label}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(_rows(start, n), folder / f"part-{start:05d}.parquet")
    return str(root)


def _utc(table: pa.Table) -> list[dict[str, object]]:
    """Rows sorted by id, zoned timestamps in UTC (Spark's are in the session's zone)."""
    fields = [
        pa.field(f.name, pa.timestamp(f.type.unit, tz="UTC"))
        if pa.types.is_timestamp(f.type) and f.type.tz is not None
        else f
        for f in table.schema
    ]
    rows = table.cast(pa.schema(fields)).to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def _same_rows(left: DataFrame, right: DataFrame) -> None:
    assert [(f.name, f.dataType) for f in left.schema] == [
        (f.name, f.dataType) for f in right.schema
    ]
    assert left.count() == right.count()
    assert left.exceptAll(right).count() == 0 and right.exceptAll(left).count() == 0


def test_convert_copies_every_row_and_type(
    spark: SparkSession, parquet_dir: str, table_uri: str
) -> None:
    seen: list[JobProgress] = []
    table = LanceTable.convertToLance(spark, parquet_dir, table_uri, progress=seen.append)
    assert isinstance(table, LanceTable) and table.uri == table_uri

    source = spark.read.parquet(parquet_dir)
    ds = lance.dataset(table_uri)
    assert ds.version == 1 and ds.count_rows() == 30
    # The Parquet schema, the partition column (Spark's discovery) last; lists stay lists.
    assert ds.schema.names == [*_SCHEMA.names, "label"]
    for name in ("small", "count", "ts", "local_ts", "day", "price", "emb", "point"):
        assert ds.schema.field(name).type == _SCHEMA.field(name).type, name
    assert ds.schema.field("label").type == pa.string()
    # Row by row: pylance's read of the Lance table, and Spark's, against Spark's Parquet read.
    assert _utc(ds.to_table()) == _utc(source.toArrow())
    _same_rows(table.toDF(), source)

    finished = [p for p in seen if p.finished]
    assert len(finished) == 1 and seen[-1] is finished[0]
    assert finished[0].rows == 30 and finished[0].tasks_done == finished[0].tasks_total >= 1
    assert all(p.tasks_done <= p.tasks_total for p in seen)

    latest = table.history().collect()[0]
    assert latest["operation"] == "CONVERT"
    assert latest["operationParameters"]["sourcePath"] == parquet_dir
    assert latest["operationParameters"]["sourceFormat"] == "parquet"
    assert latest["operationMetrics"]["numConvertedFiles"] == "3"
    assert latest["operationMetrics"]["numOutputRows"] == "30"


def test_convert_modes_on_an_existing_table(
    spark: SparkSession, parquet_dir: str, table_uri: str
) -> None:
    LanceTable.convertToLance(spark, parquet_dir, table_uri, progress=False)
    with pytest.raises(TableAlreadyExistsError, match=r"table\.lance.*mode 'overwrite'"):
        LanceTable.convertToLance(spark, parquet_dir, table_uri, progress=False)
    LanceTable.convertToLance(spark, parquet_dir, table_uri, mode="ignore", progress=False)
    assert lance.dataset(table_uri).version == 1

    # overwrite: a new version with only the converted rows, as vectors when asked.
    vectors = {"emb.arrow.fixed-size-list.size": 3}
    table = LanceTable.convertToLance(
        spark, parquet_dir, table_uri, mode="overwrite", options=vectors, progress=False
    )
    ds = lance.dataset(table_uri)
    assert ds.version == 2 and ds.count_rows() == 30
    assert ds.schema.field("emb").type == pa.list_(pa.float32(), 3)
    assert sorted(ds.to_table()["emb"].to_pylist()) == sorted(
        [float(i), 0.5, -1.0] for i in range(30)
    )
    assert lance.dataset(table_uri, version=1).schema.field("emb").type == pa.list_(pa.float32())

    LanceTable.convertToLance(spark, parquet_dir, table_uri, mode="append", progress=False)
    ds = lance.dataset(table_uri)
    assert ds.version == 3 and ds.count_rows() == 60
    assert sorted(ds.to_table()["id"].to_pylist()) == sorted(list(range(30)) * 2)
    history = table.history().collect()
    assert [r["operation"] for r in history] == ["CONVERT"] * 3
    assert [r["operationParameters"]["mode"] for r in history] == [
        "Append",
        "Overwrite",
        "Create",
    ]


def test_convert_a_single_file_with_read_options(
    spark: SparkSession, tmp_path: Path, table_uri: str
) -> None:
    source = tmp_path / "files"
    source.mkdir()
    pq.write_table(_rows(0, 4), source / "one.parquet")
    pq.write_table(_rows(4, 2).drop_columns(["tags"]), source / "two.parquet")
    (source / "notes.txt").write_text("not data")
    LanceTable.convertToLance(spark, str(source / "one.parquet"), table_uri, progress=False)
    assert sorted(lance.dataset(table_uri).to_table()["id"].to_pylist()) == [0, 1, 2, 3]

    # Spark's Parquet options pass through: mergeSchema reads both files' columns, the glob
    # leaves the text file out.
    merged = str(tmp_path / "merged.lance")
    options = {"mergeSchema": True, "pathGlobFilter": "*.parquet"}
    LanceTable.convertToLance(spark, str(source), merged, parquetOptions=options, progress=False)
    rows = lance.dataset(merged).to_table().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == list(range(6))
    assert [r["tags"] for r in rows[4:]] == [None, None]


def test_convert_refuses_bad_sources_and_targets(
    spark: SparkSession, parquet_dir: str, tmp_path: Path, table_uri: str
) -> None:
    missing = str(tmp_path / "nowhere")
    with pytest.raises(TableNotFoundError, match="nowhere"):
        LanceTable.convertToLance(spark, missing, table_uri, progress=False)
    not_parquet = tmp_path / "csv"
    not_parquet.mkdir()
    (not_parquet / "rows.csv").write_text("id,label\n1,cat\n")
    with pytest.raises(InvalidOptionError, match=r"csv.*as Parquet"):
        LanceTable.convertToLance(spark, str(not_parquet), table_uri, progress=False)
    with pytest.raises(InvalidOptionError, match=r"'everything'.*overwrite"):
        LanceTable.convertToLance(spark, parquet_dir, table_uri, mode="everything")
    with pytest.raises(InvalidOptionError, match="in or around the Parquet data"):
        LanceTable.convertToLance(spark, parquet_dir, parquet_dir + "/x.lance", progress=False)
    with pytest.raises(TypeError, match="argument 'progress' takes True, False or a function"):
        LanceTable.convertToLance(spark, parquet_dir, table_uri, progress="yes")  # type: ignore[arg-type]
    assert not os.path.exists(table_uri)

    LanceTable.convertToLance(spark, parquet_dir, table_uri, progress=False)
    with pytest.raises(InvalidOptionError, match=r"table\.lance' is a Lance table"):
        LanceTable.convertToLance(spark, table_uri, str(tmp_path / "copy.lance"), progress=False)


def test_a_failed_convert_leaves_nothing(
    spark: SparkSession, parquet_dir: str, tmp_path: Path, table_uri: str
) -> None:
    # Two files whose `id` columns disagree: the job fails reading one of them.
    broken = tmp_path / "broken.parquet"
    broken.mkdir()
    pq.write_table(_rows(0, 5), broken / "a.parquet")
    pq.write_table(_rows(5, 5).set_column(0, "id", pa.array(["x"] * 5)), broken / "b.parquet")
    with pytest.raises(LanceSparkError, match=r"table\.lance.*nothing was committed"):
        LanceTable.convertToLance(spark, str(broken), table_uri, progress=False)
    _wait_until_no_task_runs(spark)  # tasks Spark killed after the failure may still run
    assert not LanceTable.isLanceTable(spark, table_uri)
    assert [f for _, _, files in os.walk(table_uri) for f in files] == []

    # An existing table stays as it was.
    LanceTable.convertToLance(spark, parquet_dir, table_uri, progress=False)
    before = sorted(os.listdir(os.path.join(table_uri, "data")))
    with pytest.raises(LanceSparkError, match="nothing was committed"):
        LanceTable.convertToLance(spark, str(broken), table_uri, mode="overwrite", progress=False)
    _wait_until_no_task_runs(spark)
    assert lance.dataset(table_uri).version == 1
    assert sorted(os.listdir(os.path.join(table_uri, "data"))) == before


def _wait_until_no_task_runs(spark: SparkSession) -> None:
    """Return once no task runs (as in test_add_columns): a barrier stage with one task per
    slot starts only when every slot is free."""
    slots = default_parallelism(spark)

    def done(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    frame = spark.range(0, slots, 1, numPartitions=slots)
    assert frame.mapInArrow(done, frame.schema, barrier=True).count() == slots


def test_convert_draws_a_progress_bar_on_stderr(
    spark: SparkSession, parquet_dir: str, table_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    LanceTable.convertToLance(spark, parquet_dir, table_uri)
    err = capsys.readouterr().err
    assert f"convert {parquet_dir} -> {table_uri}" in err
    assert err.rstrip().endswith("s") and "30 rows" in err
