"""Lance blob columns through Spark: the `<col>.lance.encoding=blob` write option, reads that
return the bytes (and never touch them when the column is not selected), LanceTable.blobs."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from lance_spark import LanceTable
from lance_spark.errors import InvalidArgumentError, InvalidOptionError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("label", StringType()),
        StructField("image", BinaryType()),
    ]
)


def _images(n: int, *, big: int = 0) -> list[bytes | None]:
    """Distinct blobs; every third one ``big`` bytes (Lance stores those in files of their
    own), row 4 a null."""
    out: list[bytes | None] = []
    for i in range(n):
        size = big if big and i % 3 == 0 else 100 + i
        out.append(None if i == 4 else bytes([i % 251]) * size + i.to_bytes(4, "little"))
    return out


def _df(spark: SparkSession, images: list[bytes | None], start: int = 0) -> DataFrame:
    rows = [(start + i, f"l{i % 3}", b) for i, b in enumerate(images)]
    return spark.createDataFrame(rows, SCHEMA)


def _write(df: DataFrame, uri: str, mode: str = "overwrite", **options: str) -> None:
    df.write.format("lance").mode(mode).options(**options).save(uri)


def _is_blob(ds: lance.LanceDataset, column: str) -> bool:
    t = ds.schema.field(column).type
    return getattr(t, "extension_name", None) == "lance.blob.v2"


def test_spark_writes_a_blob_column_pylance_reads(spark: SparkSession, table_uri: str) -> None:
    images = _images(10)
    _write(_df(spark, images), table_uri, **{"image.lance.encoding": "blob"})
    ds = lance.dataset(table_uri)
    assert _is_blob(ds, "image")
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    blobs = ds.take_blobs("image", indices=list(range(len(ids))))
    got = {i: (None if b is None else b.read()) for i, b in zip(ids, blobs, strict=True)}
    # pylance returns a null blob as an empty file or None; the bytes of the others are equal
    assert {i: v for i, v in got.items() if i != 4} == {
        i: v for i, v in enumerate(images) if i != 4
    }
    assert got[4] in (None, b"")


def test_spark_reads_blobs_as_binary(spark: SparkSession, table_uri: str) -> None:
    images = _images(10)
    _write(_df(spark, images), table_uri, **{"IMAGE.lance.encoding": "BLOB"})  # any case
    df = spark.read.format("lance").load(table_uri)
    assert df.schema["image"].dataType == BinaryType()
    got = {r.id: r.image for r in df.collect()}
    assert got == {i: (None if b is None else bytes(b)) for i, b in enumerate(images)}
    filtered = df.where("label = 'l1'").select("image", "id").collect()
    assert {r.id: r.image for r in filtered} == {i: images[i] for i in range(10) if i % 3 == 1}


def test_a_scan_without_the_blob_column_never_reads_it(spark: SparkSession, table_uri: str) -> None:
    """Large blobs live in files of their own: with those gone, a scan of the other columns
    still works (it never opens them), a scan of the blob column fails."""
    images = _images(7, big=3_000_000)
    _write(_df(spark, images).coalesce(1), table_uri, **{"image.lance.encoding": "blob"})
    sidecars = list(pathlib.Path(table_uri).rglob("*.blob"))
    assert sidecars, "Lance kept the large blobs inline"
    for f in sidecars:
        f.unlink()
    df = spark.read.format("lance").load(table_uri)
    rows = df.select("id", "label").where("id < 100").collect()
    assert sorted((r.id, r.label) for r in rows) == [(i, f"l{i % 3}") for i in range(7)]
    assert df.count() == 7
    with pytest.raises(Exception):  # noqa: B017 - the missing file, whatever Spark wraps it in
        df.select("image").collect()


def test_append_keeps_writing_blobs(spark: SparkSession, table_uri: str) -> None:
    _write(_df(spark, _images(5)), table_uri, **{"image.lance.encoding": "blob"})
    more = [b"appended-%d" % i for i in range(3)]
    _write(_df(spark, list(more), start=100), table_uri, mode="append")  # no option needed
    _write(
        _df(spark, [b"again"], start=200), table_uri, "append", **{"image.lance.encoding": "blob"}
    )
    ds = lance.dataset(table_uri)
    assert _is_blob(ds, "image")
    got = {r.id: r.image for r in spark.read.format("lance").load(table_uri).collect()}
    assert got[101] == b"appended-1" and got[200] == b"again" and len(got) == 9
    row = ds.to_table(columns=["id"], with_row_id=True).to_pylist()
    rowid = next(r["_rowid"] for r in row if r["id"] == 102)
    (blob,) = ds.take_blobs("image", ids=[rowid])
    assert blob is not None and blob.read() == b"appended-2"


def test_blob_on_an_existing_plain_column_is_an_error(spark: SparkSession, table_uri: str) -> None:
    _write(_df(spark, _images(3)), table_uri)  # a plain binary column
    with pytest.raises(InvalidOptionError, match=r"'image'.*not a blob column"):
        _write(
            _df(spark, [b"x"], start=10), table_uri, "append", **{"image.lance.encoding": "blob"}
        )
    # overwriteSchema recreates the table's schema: then it becomes one
    _write(
        _df(spark, [b"x"]), table_uri, overwriteSchema="true", **{"image.lance.encoding": "blob"}
    )
    assert _is_blob(lance.dataset(table_uri), "image")


def test_blob_on_a_non_binary_column_is_an_error(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(InvalidOptionError, match=r"'label' has type string"):
        _write(_df(spark, _images(2)), table_uri, **{"label.lance.encoding": "blob"})
    with pytest.raises(InvalidOptionError, match=r"encodings: blob"):
        _write(_df(spark, _images(2)), table_uri, **{"image.lance.encoding": "zstd"})
    assert not pathlib.Path(table_uri).exists()


def test_pylance_blob_table_reads_through_spark(spark: SparkSession, table_uri: str) -> None:
    data = [os.urandom(50 + 97 * i) for i in range(6)] + [None]
    source = pa.table({"id": pa.array(range(7), pa.int64()), "image": lance.blob_array(data)})
    lance.write_dataset(source, table_uri)
    df = spark.read.format("lance").load(table_uri)
    assert df.schema["image"].dataType == BinaryType()
    assert {r.id: r.image for r in df.collect()} == dict(enumerate(data))
    # the legacy form (large_binary + lance-encoding:blob metadata, file format 2.1)
    legacy = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("image", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    old_uri = table_uri + "_21"
    lance.write_dataset(
        pa.table({"id": range(7), "image": data}, schema=legacy),
        old_uri,
        data_storage_version="2.1",
    )
    old = spark.read.format("lance").load(old_uri)
    assert {r.id: r.image for r in old.collect()} == dict(enumerate(data))
    _write(_df(spark, [b"new"], start=7).select("id", "image"), old_uri, "append")
    assert LanceTable.forPath(spark, old_uri).blobs("image", where="id = 7")[0].read() == b"new"  # type: ignore[union-attr]


def test_lance_table_blobs(spark: SparkSession, table_uri: str) -> None:
    images = _images(9)
    _write(_df(spark, images).coalesce(1), table_uri, **{"image.lance.encoding": "blob"})
    t = LanceTable.forPath(spark, table_uri)
    by_filter = t.blobs("image", where="id >= 6")
    assert sorted(b.read() for b in by_filter if b is not None) == sorted(
        b for b in images[6:] if b is not None
    )
    everything = t.blobs("image")
    assert len(everything) == 9
    first = everything[0]
    assert first is not None
    with first as f:
        f.seek(2)
        assert f.read(3) == images[0][2:5]  # type: ignore[index]
    ds = lance.dataset(table_uri)
    addresses = ds.to_table(columns=[], with_row_address=True).column("_rowaddr").to_pylist()
    assert [b.read() if b else None for b in t.blobs("image", addresses=addresses[:2])] == [
        images[0],
        images[1],
    ]
    with pytest.raises(InvalidArgumentError, match=r"'label' is not a blob column.*image"):
        t.blobs("label")
    with pytest.raises(InvalidArgumentError, match=r"at most one of ids, addresses"):
        t.blobs("image", [0], where="id = 1")


def test_the_table_builder_declares_blob_columns(spark: SparkSession, table_uri: str) -> None:
    builder = LanceTable.create(spark).location(table_uri).addColumn("id", "bigint")
    builder.addColumn("image", "binary", blob=True).execute()
    # a table with no rows yet keeps the declaration's (legacy) form: a blob column either way
    field = lance.dataset(table_uri).schema.field("image")
    assert _is_blob(lance.dataset(table_uri), "image") or field.metadata == {
        b"lance-encoding:blob": b"true"
    }
    _write(_df(spark, [b"built"]).select("id", "image"), table_uri, "append")
    assert LanceTable.forPath(spark, table_uri).blobs("image")[0].read() == b"built"  # type: ignore[union-attr]
    bad = LanceTable.create(spark).location(table_uri + "_bad").addColumn("n", "int", blob=True)
    with pytest.raises(InvalidOptionError, match=r"'n' has type int32"):
        bad.execute()


def test_round_trip_with_lancedb(spark: SparkSession, tmp_path: pathlib.Path) -> None:
    import lancedb

    images = _images(12, big=200_000)
    db = lancedb.connect(str(tmp_path))
    # LanceDB writes a blob column (its v2 form); Spark reads its bytes.
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("label", pa.string()),
            pa.field("image", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    rows = pa.table(
        {"id": list(range(12)), "label": [f"l{i % 3}" for i in range(12)], "image": images},
        schema=schema,
    )
    db.create_table("by_lancedb", rows)
    read = spark.read.format("lance").load(str(tmp_path / "by_lancedb.lance"))
    assert dict(read.dtypes)["image"] == "binary"
    assert {r.id: r.image for r in read.collect()} == {
        i: (None if b is None else bytes(b)) for i, b in enumerate(images)
    }
    # Spark writes one; LanceDB opens it as a blob table and reads the same bytes.
    _write(_df(spark, images), str(tmp_path / "by_spark.lance"), **{"image.lance.encoding": "blob"})
    table = db.open_table("by_spark")
    assert table.count_rows() == 12 and _is_blob(table.to_lance(), "image")
    ds = table.to_lance()
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    files = ds.take_blobs("image", indices=list(range(len(ids))))
    got = {i: f.read() for i, f in zip(ids, files, strict=True) if f is not None and i != 4}
    assert got == {i: b for i, b in enumerate(images) if i != 4}


def test_diff_of_a_blob_table_shows_deleted_rows(spark: SparkSession, table_uri: str) -> None:
    images = _images(6)
    _write(_df(spark, images).coalesce(1), table_uri, **{"image.lance.encoding": "blob"})
    t = LanceTable.forPath(spark, table_uri)
    t.delete("id = 2")  # a deletion file in the one fragment: its deleted rows are read back
    changes = t.diff(1).where("_change_type = 'delete'").collect()
    assert [(r.id, r.image) for r in changes] == [(2, images[2])]


def _plan(df: DataFrame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


def test_a_scan_of_the_blob_column_is_never_broadcast(spark: SparkSession, table_uri: str) -> None:
    """The manifest's sizes leave out the blob files, so a scan that reads the blob column
    gives Spark no size (its default: never broadcast, however large the images are); a scan
    of the other columns keeps the manifest's estimate (a small table is broadcast)."""
    _write(_df(spark, _images(30, big=200_000)), table_uri, **{"image.lance.encoding": "blob"})
    table = spark.read.format("lance").load(table_uri)
    keys = spark.range(0, 50_000_000)  # too large to broadcast (planned, never run)
    assert "BroadcastHashJoin" not in _plan(keys.join(table.select("id", "image"), "id"))
    assert "BuildRight" in _plan(keys.join(table.select("id", "label"), "id"))
