"""The connector on a real Spark standalone cluster: executors in their own JVMs and Pythons.

The cluster run happens in a subprocess (one SparkContext per process, and pytest's may be the
local session); the same write and queries then run on the local session for comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pytest
from _cluster_job import (
    RESULT_PREFIX,
    ROWS,
    VECTOR_DIM,
    VECTOR_ROWS,
    expected_rows,
    query_table,
    scan_tasks,
    vector_value,
    write_table,
)
from _servers import spark_env, standalone_cluster

JOB = Path(__file__).resolve().parent / "_cluster_job.py"

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    with standalone_cluster(workers=2, cores_per_worker=1, memory="1g") as url:
        yield url


def start_cluster_job(master_url: str, uri: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(JOB), master_url, uri],
        env=spark_env(),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def cluster_job_result(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(stderr.splitlines()[-60:])
        pytest.fail(f"cluster job exited with {proc.returncode}\nstdout:\n{stdout}\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_PREFIX) :])
    print("cluster job timings (s):", result["timings"])
    return result


def totals(tasks: list[dict[str, Any]]) -> tuple[int, int, float]:
    return (
        sum(t["rows"] for t in tasks),
        sum(t["sum_id"] for t in tasks),
        sum(t["sum_x"] for t in tasks),
    )


def test_write_and_filtered_read_match_local(cluster_url: str, spark: Any, tmp_path: Path) -> None:
    cluster_uri = str(tmp_path / "cluster.lance")
    local_uri = str(tmp_path / "local.lance")
    job_dir = tmp_path / "driver"
    job_dir.mkdir()

    # The local run overlaps the cluster job: both spend most of their time waiting.
    job = start_cluster_job(cluster_url, cluster_uri, job_dir)
    try:
        write_table(spark, local_uri)
        local_rows = query_table(spark, local_uri)
        local_tasks = scan_tasks(spark, local_uri)
    except BaseException:
        job.kill()
        job.communicate()
        raise
    on_cluster = cluster_job_result(job)

    expected = expected_rows()
    assert len(expected) > 100
    assert on_cluster["rows"] == expected
    assert local_rows == expected
    full = (ROWS, ROWS * (ROWS - 1) // 2, sum(i * 0.25 - 100.0 for i in range(ROWS)))
    assert totals(on_cluster["tasks"]) == pytest.approx(full)
    assert totals(local_tasks) == pytest.approx(full)

    # One Spark job, one Lance commit, whatever the number of tasks.
    ds = lance.dataset(cluster_uri)
    assert ds.version == 1
    assert len(ds.versions()) == 1
    assert ds.count_rows() == ROWS
    assert len(ds.get_fragments()) >= 2  # written by several tasks
    assert lance.dataset(local_uri).version == 1

    # The Python side of the scan ran in worker processes of two executors, not in the driver.
    assert on_cluster["executors"] == 2
    tasks = on_cluster["tasks"]
    pids = {t["pid"] for t in tasks}
    assert on_cluster["driver_pid"] not in pids
    assert os.getpid() not in pids
    executor_dirs = {t["cwd"] for t in tasks}
    assert on_cluster["driver_cwd"] not in executor_dirs
    assert len(executor_dirs) == 2, executor_dirs
    assert len({t["ppid"] for t in tasks}) >= 2  # one Python daemon per executor JVM

    # The JVM companion, from configuration: its scans ran on the executors.
    companion = on_cluster["companion"]
    assert "LanceScan" in companion["plan"], companion["plan"]
    assert companion["pruned_sum"] == sum(i for i in range(ROWS) if i % 3 == 1)
    assert companion["limited"] == 5
    assert companion["count"] == companion["reused_count"] == ROWS
    assert companion["filtered_count"] == len([i for i in range(ROWS) if i % 3 == 1])

    # A stream (Lance source -> Lance sink, availableNow, run twice on one checkpoint): every
    # row once, one version, recorded with the query's id.
    stream = on_cluster["stream"]
    assert (stream["rows"], stream["sum_id"]) == (ROWS, ROWS * (ROWS - 1) // 2)
    copy = lance.dataset(stream["uri"])
    assert [v["version"] for v in copy.versions()] == [1]
    props = copy.read_transaction(1).transaction_properties
    assert props["lance.streaming.queryId"] == stream["query_id"]

    # The nearest-neighbour join ran in executor tasks: equal to numpy's exact search.
    vectors = np.array(
        [[vector_value(i, j) for j in range(VECTOR_DIM)] for i in range(VECTOR_ROWS)], np.float32
    )
    expected_pairs = []
    for qid in range(0, VECTOR_ROWS, 15):
        distances = ((vectors - (vectors[qid] + np.float32(0.001))) ** 2).sum(axis=1)
        order = np.lexsort((np.arange(VECTOR_ROWS), distances))[:3]
        expected_pairs += [[qid, int(i), rank + 1] for rank, i in enumerate(order)]
    assert on_cluster["nearest"] == sorted(expected_pairs)
