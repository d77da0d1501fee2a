"""The Python half of the JVM companion (no JVM): what a scan request gives back, checked
against pylance on the same table."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import EqualTo, GreaterThan, InputPartition, StringContains
from pyspark.sql.types import LongType, StructField, StructType

from lance_spark.errors import ColumnNotFoundError, LanceSparkError
from lance_spark.source.datasource import LanceDataSource
from lance_spark.source.planning import FragmentInfo, limited
from lance_spark.source.reader import LanceReader, Projection
from lance_spark.source.scan_planner import PROTOCOL, ScanRequest, answer
from lance_spark.source.types import estimated_width

ROWS = 1000


@pytest.fixture
def uri(tmp_path: Path) -> str:
    table = pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "label": pa.array([f"l{i % 4}" for i in range(ROWS)]),
            "v": pa.FixedSizeListArray.from_arrays(
                pa.array([float(i) for i in range(ROWS * 8)], pa.float32()), 8
            ),
        }
    )
    path = str(tmp_path / "t.lance")
    lance.write_dataset(table, path, max_rows_per_file=300)
    return path


def _source(uri: str) -> LanceDataSource:
    return LanceDataSource({"path": uri})


def _request(**fields: object) -> ScanRequest:
    return ScanRequest.parse(json.dumps({"protocol": PROTOCOL, **fields}))


def _read_all(reader: LanceReader) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else pa.table({})


def test_request_from_another_jar_is_refused() -> None:
    with pytest.raises(LanceSparkError, match="protocol 99"):
        ScanRequest.parse(json.dumps({"protocol": 99}))


def test_filters_phase_answers_which_filters_lance_runs(tmp_path: Path) -> None:
    path = str(tmp_path / "tags.lance")
    lance.write_dataset(pa.table({"id": [1, 2], "label": ["a", "b"], "tags": [["x"], ["y"]]}), path)
    source = _source(path)
    exact, contains, on_list = (
        GreaterThan(("id",), 1),
        StringContains(("label",), "1"),
        EqualTo(("tags",), ["x"]),  # a list literal: not translated, Spark evaluates it
    )
    pushed, scan, reply = answer(source, source.schema(), [exact, contains, on_list], _request())
    assert pushed == [0, 1]
    # With them, the read of every column: the scan when Spark then prunes nothing.
    assert scan is not None and scan.projection.lance_columns == ("id", "label", "tags")
    assert scan.pushed_filter is not None and "`id` > 1" in scan.pushed_filter
    assert reply["metadata"]["ReadColumns"] == "[id, label, tags]"


def test_plan_reads_only_the_requested_columns(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    read = StructType([schema["label"]])
    pushed, scan, reply = answer(
        source, schema, [GreaterThan(("id",), 900)], _request(read_schema=read.json())
    )
    assert pushed == [0] and scan is not None
    assert scan.projection.lance_columns == ("label",)
    assert reply["metadata"]["ReadColumns"] == "[label]"
    got = _read_all(scan)
    assert got.schema.names == ["label"]
    expected = lance.dataset(uri).to_table(columns=["label"], filter="id > 900")
    assert sorted(got.column("label").to_pylist()) == sorted(expected.column("label").to_pylist())
    assert "rows" not in reply  # filtered: the row count is unknown before reading


def test_count_comes_from_lance(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    _, scan, reply = answer(source, schema, [], _request(aggregate="count"))
    assert scan is None and reply["count"] == ROWS
    _, _, reply = answer(source, schema, [EqualTo(("label",), "l2")], _request(aggregate="count"))
    assert reply["count"] == lance.dataset(uri).count_rows("label = 'l2'") == ROWS // 4


def test_limit_without_filter_plans_one_task_and_stops(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    _, scan, reply = answer(source, schema, [], _request(read_schema=schema.json(), limit=5))
    assert scan is not None and reply["metadata"]["PushedLimit"] == "5"
    partitions = scan.partitions()
    assert len(partitions) == 1
    assert _read_all(scan).num_rows == 5


def test_limit_with_filter_caps_every_task(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    _, scan, _ = answer(
        source, schema, [GreaterThan(("id",), 100)], _request(read_schema=schema.json(), limit=7)
    )
    assert scan is not None
    for partition in scan.partitions():
        rows = sum(b.num_rows for b in scan.read(partition))
        assert rows <= 7


def test_statistics_scale_with_the_columns_read(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    _, _, small = answer(
        source, schema, [], _request(read_schema=StructType([schema["id"]]).json())
    )
    _, _, large = answer(source, schema, [], _request(read_schema=schema.json()))
    assert small["rows"] == large["rows"] == ROWS
    files = sum(
        f.file_size_bytes
        for frag in lance.dataset(uri).get_fragments()
        for f in frag.metadata.files
    )
    assert large["bytes"] == files
    # id is 8 of the 8 + 20 + 32 bytes estimated per row
    assert small["bytes"] == files * 8 // 60


def test_empty_table_plans_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.lance")
    lance.write_dataset(pa.table({"id": pa.array([], pa.int64())}), path)
    source = _source(path)
    schema = source.schema()
    _, _, reply = answer(source, schema, [], _request(aggregate="count"))
    assert reply["count"] == 0
    _, scan, _ = answer(source, schema, [], _request(read_schema=schema.json(), limit=3))
    assert scan is not None and scan.partitions() == []


def test_unknown_column_in_read_schema_is_named(uri: str) -> None:
    source = _source(uri)
    schema = source.schema()
    bogus = StructType([StructField("nope", LongType())])
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        answer(source, schema, [], _request(read_schema=bogus.json()))


@given(st.permutations(["a", "b", "c", "_rowaddr"]), st.integers(min_value=0, max_value=4))
def test_projection_select_keeps_spark_order(order: list[str], keep: int) -> None:
    projection = Projection(("A", "B", "C"), ("a", "b", "c"), metadata_columns=("_rowaddr",))
    names = order[:keep]
    chosen = projection.select(names)
    data = [n for n in names if n != "_rowaddr"]
    assert list(chosen.spark_names) == data
    assert list(chosen.lance_columns) == [n.upper() for n in data]
    assert chosen.metadata_columns == (("_rowaddr",) if "_rowaddr" in names else ())


def test_limited_takes_fragments_until_the_limit() -> None:
    frags = [
        FragmentInfo(0, 10, 0),
        FragmentInfo(1, 10, 4),
        FragmentInfo(2, 10, 10),
        FragmentInfo(3, 5, 5),
    ]
    assert [f.fragment_id for f in limited(frags, 3)] == [1]
    assert [f.fragment_id for f in limited(frags, 5)] == [1, 2]
    assert [f.fragment_id for f in limited(frags, 100)] == [1, 2, 3]


def test_estimated_width() -> None:
    assert estimated_width(pa.list_(pa.float32(), 128)) == 512
    assert estimated_width(pa.int64()) == 8
    assert estimated_width(pa.bool_()) == 1
    assert estimated_width(pa.string()) == 20
    assert estimated_width(pa.struct([("a", pa.int32()), ("b", pa.float64())])) == 12


def test_input_partition_placeholder_reads_nothing(uri: str) -> None:
    source = _source(uri)
    scan = source.reader(source.schema())
    assert list(scan.read(InputPartition(None))) == []
