"""The companion's job protocol for procedures whose work is a Spark job (``optimize``), run
in this process (no JVM): the procedure answers with a job whose reader's partitions are the
tasks; the tasks' results given back commit one version; a failed job leaves nothing; a
retryable conflict gives a new job (a new attempt)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition

from lance_spark.errors import InvalidOptionError
from lance_spark.source.datasource import LanceDataSource
from lance_spark.source.write_jobs import TaskResult, encode
from lance_spark.table import job_runner as jobs
from lance_spark.table import procedures


def _write_fragments(uri: str, count: int = 4) -> dict[str, list[Any]]:
    for start in range(0, 3 * count, 3):
        rows = pa.table({"id": pa.array(range(start, start + 3), pa.int64())})
        lance.write_dataset(rows, uri, mode="append" if start else "create")
    return lance.dataset(uri).to_table().sort_by("id").to_pydict()


def _call(uri: str, resume: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    call: dict[str, Any] = {"name": "optimize", "args": {}, "app_id": "app-7"}
    if resume is not None:
        call["resume"] = resume
    reply, reader = procedures.run(LanceDataSource({"path": uri}), call)
    json.dumps(reply)  # what goes back to the JVM is JSON
    return reply, reader


def _run_job(reader: jobs.TaskReader) -> list[str]:
    """What the companion does: each partition as a task; the results as base64."""
    blobs = []
    for partition in reader.partitions():
        for batch in reader.read(InputPartition(partition.value)):
            blobs += [base64.b64encode(b).decode("ascii") for b in batch.column(0).to_pylist()]
    return blobs


def _rows(reply: dict[str, Any]) -> list[dict[str, Any]]:
    stream = pa.ipc.open_stream(base64.b64decode(reply["arrow"]))
    return stream.read_all().to_pylist()


def _data_files(uri: str) -> set[str]:
    return {p.name for p in (Path(uri) / "data").iterdir()}


def test_optimize_is_a_job_then_one_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    before = _write_fragments(uri)
    reply, reader = _call(uri)
    assert isinstance(reader, jobs.TaskReader) and reader.count >= 1
    assert reply["job"]["state"]["attempt"] == 1
    assert lance.dataset(uri).version == 4  # nothing committed before the results come back
    done, none = _call(uri, {"state": reply["job"]["state"], "results": _run_job(reader)})
    assert none is None and "job" not in done
    assert _rows(done) == [
        {
            "fragments_removed": 4,
            "fragments_added": 1,
            "files_removed": 4,
            "files_added": 1,
            "version": 5,
        }
    ]
    dataset = lance.dataset(uri)
    assert len(dataset.get_fragments()) == 1
    assert dataset.to_table().sort_by("id").to_pydict() == before
    assert not (Path(uri) / "_staging").exists() or not any(
        (Path(uri) / "_staging").rglob("*.json")
    )


def test_nothing_to_compact_answers_at_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _write_fragments(uri, count=1)
    reply, reader = _call(uri)
    assert reader is None and "job" not in reply
    assert _rows(reply)[0]["version"] is None


def test_a_failed_job_leaves_the_table_and_its_files_as_they_were(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _write_fragments(uri)
    files = _data_files(uri)
    reply, reader = _call(uri)
    _run_job(reader)  # the tasks wrote their files; then the Spark job failed
    assert _data_files(uri) != files
    answer, none = _call(uri, {"state": reply["job"]["state"], "results": None})
    assert none is None and answer["arrow"] == ""
    assert lance.dataset(uri).version == 4
    assert _data_files(uri) == files


def test_a_shipped_task_error_is_raised_and_the_job_aborted(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _write_fragments(uri)
    files = _data_files(uri)
    reply, reader = _call(uri)
    _run_job(reader)
    shipped = TaskResult(error=InvalidOptionError("a task said no"))
    blob = base64.b64encode(encode(shipped).column(0)[0].as_py()).decode("ascii")
    with pytest.raises(InvalidOptionError, match="a task said no"):
        _call(uri, {"state": reply["job"]["state"], "results": [blob]})
    assert lance.dataset(uri).version == 4
    assert _data_files(uri) == files


def test_a_retryable_conflict_is_a_new_attempt(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    _write_fragments(uri)
    reply, reader = _call(uri)
    results = _run_job(reader)
    lance.dataset(uri).delete("id = 4")  # commits first, in a fragment the job rewrote
    again, second = _call(uri, {"state": reply["job"]["state"], "results": results})
    assert isinstance(second, jobs.TaskReader)
    assert again["job"]["state"]["attempt"] == 2
    done, _ = _call(uri, {"state": again["job"]["state"], "results": _run_job(second)})
    assert _rows(done)[0]["fragments_added"] == 1
    ids = lance.dataset(uri).to_table()["id"].to_pylist()
    assert sorted(ids) == [i for i in range(12) if i != 4]


def _convert_call(
    target: str, source: str, resume: dict[str, Any] | None = None, **args: Any
) -> tuple[dict[str, Any], Any]:
    call: dict[str, Any] = {
        "name": "convert",
        "args": {"source": source, **args},
        "app_id": "app-7",
    }
    if resume is not None:
        call["resume"] = resume
    reply, reader = procedures.run(LanceDataSource({"path": target}), call)
    json.dumps(reply)
    return reply, reader


def _parquet_source(tmp_path: Path) -> tuple[str, pa.Table]:
    import pyarrow.parquet as pq

    source = tmp_path / "events"
    source.mkdir()
    rows = pa.table({"id": pa.array(range(6), pa.int64()), "name": [f"n{i}" for i in range(6)]})
    pq.write_table(rows.slice(0, 3), source / "a.parquet")
    pq.write_table(rows.slice(3), source / "b.parquet")
    return str(source), rows


def _map_job(reply: dict[str, Any], data: pa.Table) -> list[str]:
    """What the companion does with a job that has an input and a function: the function
    (Spark's pickled command: the function and its row type) over each partition's batches."""
    from pyspark import serializers

    function, schema = serializers.CloudPickleSerializer().loads(  # type: ignore[no-untyped-call]
        base64.b64decode(reply["job"]["map"])
    )
    assert schema == jobs.RESULT_SCHEMA
    blobs = []
    for part in (data.slice(0, 2), data.slice(2)):  # two partitions
        for batch in function(iter(part.to_batches())):
            blobs += [base64.b64encode(b).decode("ascii") for b in batch.column(0).to_pylist()]
    return blobs


def test_convert_asks_for_the_data_then_runs_one_write_job(tmp_path: Path) -> None:
    source, rows = _parquet_source(tmp_path)
    target = str(tmp_path / "events.lance")
    first, reader = _convert_call(target, source)
    assert reader is None
    assert first["job"]["input"] == {"format": "parquet", "path": source, "options": {}}
    assert "map" not in first["job"]
    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )
    state = first["job"]["state"]
    second, _ = _convert_call(
        target, source, {"state": state, "results": None, "input": {"schema": schema, "files": 2}}
    )
    assert second["job"]["input"]["path"] == source
    results = _map_job(second, rows)
    done, _ = _convert_call(target, source, {"state": second["job"]["state"], "results": results})
    assert _rows(done) == [{"version": 1, "num_converted_files": 2, "num_output_rows": 6}]
    dataset = lance.dataset(target)
    assert dataset.to_table().sort_by("id") == rows
    entry = dataset.versions()[-1]
    assert dataset.version == 1 and entry["version"] == 1


def test_a_failed_convert_job_leaves_no_table(tmp_path: Path) -> None:
    source, rows = _parquet_source(tmp_path)
    target = str(tmp_path / "events.lance")
    first, _ = _convert_call(target, source)
    schema = (
        '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
    )
    second, _ = _convert_call(
        target,
        source,
        {"state": first["job"]["state"], "results": None, "input": {"schema": schema, "files": 2}},
    )
    _map_job(second, rows.select(["id"]))  # the tasks wrote their files, then the job failed
    failed, _ = _convert_call(target, source, {"state": second["job"]["state"], "results": None})
    assert failed["arrow"] == ""
    assert not Path(target).exists()


def test_convert_refuses_before_any_job(tmp_path: Path) -> None:
    source, _ = _parquet_source(tmp_path)
    target = str(tmp_path / "events.lance")
    with pytest.raises(InvalidOptionError, match="mode 'sometimes' is not one of"):
        _convert_call(target, source, mode="sometimes")
    with pytest.raises(InvalidOptionError, match="in or around the Parquet data"):
        _convert_call(source + "/t.lance", source)
    lance.write_dataset(pa.table({"id": [1]}), target)
    with pytest.raises(Exception, match="already exists"):
        _convert_call(target, source)
    ignored, _ = _convert_call(target, source, mode="ignore")
    assert _rows(ignored) == [{"version": None, "num_converted_files": 0, "num_output_rows": 0}]
    assert lance.dataset(target).version == 1
