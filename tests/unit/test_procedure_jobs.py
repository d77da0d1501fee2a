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
from lance_spark.source.jobs import TaskResult, encode
from lance_spark.table import jobs, procedures


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
