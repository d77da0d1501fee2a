"""Idempotent writes racing: writers of one ``(txnAppId, txnVersion)`` from threads of one
driver and from two driver processes, released together, commit exactly once per round
(checked with pylance: versions, their transaction properties and the rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import pytest

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
APP = "racing"


def _commits(uri: str) -> dict[int, list[int]]:
    """txnVersion -> the table versions that committed it (for APP)."""
    ds = lance.dataset(uri)
    found: dict[int, list[int]] = {}
    for info in ds.versions():
        version = int(info["version"])
        props = (ds.read_transaction(version).transaction_properties or {}) if version else {}
        if props.get("lance.streaming.queryId") == APP:
            found.setdefault(int(props["lance.streaming.epochId"]), []).append(version)
    return found


def _writers_of(uri: str, number: int) -> list[int]:
    """Which writers' rows of round ``number`` the table holds (each writer writes 10 rows
    with ids ``number * 1000 + writer * 10 + 0..9``)."""
    table = lance.dataset(uri).to_table(
        columns=["id"], filter=f"id >= {number * 1000} and id < {(number + 1) * 1000}"
    )
    ids = table.column("id").to_pylist()
    writers = sorted({(i - number * 1000) // 10 for i in ids})
    assert len(ids) == 10 * len(writers)
    return writers


def _unreferenced(uri: str) -> set[str]:
    ds = lance.dataset(uri)
    referenced = set()
    for v in ds.versions():
        for fragment in ds.checkout_version(v["version"]).get_fragments():
            referenced.update(f.path for f in fragment.metadata.files)
    return {p.name for p in (Path(uri) / "data").iterdir()} - referenced


def test_threads_writing_the_same_txn_commit_once_per_round(spark: Any, table_uri: str) -> None:
    spark.range(0, 3).write.format("lance").save(table_uri)
    threads, rounds = 4, 5

    def write(number: int, writer: int, barrier: threading.Barrier) -> None:
        start = number * 1000 + writer * 10
        frame = spark.range(start, start + 10, 1, 2)
        barrier.wait(timeout=120)
        (
            frame.write.format("lance")
            .mode("append")
            .option("txnAppId", APP)
            .option("txnVersion", number)
            .save(table_uri)
        )

    with ThreadPoolExecutor(threads) as pool:
        for number in range(1, rounds + 1):
            barrier = threading.Barrier(threads)
            futures = [pool.submit(write, number, w, barrier) for w in range(threads)]
            for future in futures:
                future.result(timeout=600)
    commits = _commits(table_uri)
    winners = {number: _writers_of(table_uri, number) for number in range(1, rounds + 1)}
    print(f"\nthreads: {rounds} rounds x {threads}: commits {commits}, rows of {winners}")
    assert {n: len(v) for n, v in commits.items()} == {n: 1 for n in range(1, rounds + 1)}
    assert all(len(w) == 1 for w in winners.values())
    assert lance.dataset(table_uri).count_rows() == 3 + 10 * rounds
    assert _unreferenced(table_uri) == set()  # the skipped writes left no file


def test_threads_overwriting_as_the_same_txn_commit_once_per_round(
    spark: Any, table_uri: str
) -> None:
    from lance_spark import LanceTable

    spark.range(0, 3).write.format("lance").save(table_uri)
    threads, rounds = 4, 4

    def write(number: int, writer: int, barrier: threading.Barrier) -> None:
        start = number * 1000 + writer * 10
        frame = spark.range(start, start + 10, 1, 2)
        barrier.wait(timeout=120)
        (
            frame.write.format("lance")
            .mode("overwrite")
            .option("txnAppId", APP)
            .option("txnVersion", number)
            .save(table_uri)
        )

    with ThreadPoolExecutor(threads) as pool:
        for number in range(1, rounds + 1):
            barrier = threading.Barrier(threads)
            futures = [pool.submit(write, number, w, barrier) for w in range(threads)]
            for future in futures:
                future.result(timeout=600)
            # The table is one writer's rows of this round, once.
            assert len(_writers_of(table_uri, number)) == 1
            assert lance.dataset(table_uri).count_rows() == 10
    commits = _commits(table_uri)
    assert commits == {n: [n + 1] for n in range(1, rounds + 1)}
    assert _unreferenced(table_uri) == set()
    history = {r["version"]: r for r in LanceTable.forPath(spark, table_uri).history().collect()}
    for [version] in commits.values():
        assert history[version]["operation"] == "WRITE"
        assert history[version]["operationParameters"]["mode"] == "Overwrite"


_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from pyspark.sql import SparkSession
    import lance_spark

    uri, barrier, me, peers, rounds = sys.argv[1:6]
    spark = (SparkSession.builder.master("local[1]").appName(f"txn-{me}")
             .config("spark.ui.enabled", "false").getOrCreate())
    lance_spark.register(spark)

    def wait(name):
        Path(barrier, f"{name}-{me}").touch()
        deadline = time.time() + 600
        while len([p for p in Path(barrier).iterdir() if p.name.startswith(name + "-")]) < int(peers):
            if time.time() > deadline:
                sys.exit("barrier timeout")
            time.sleep(0.02)

    for number in range(1, int(rounds) + 1):
        start = number * 1000 + int(me) * 10
        frame = spark.range(start, start + 10, 1, 1)
        wait(f"round{number}")
        (frame.write.format("lance").mode("append").option("txnAppId", "racing")
            .option("txnVersion", number).save(uri))
    print(json.dumps({"rounds": int(rounds)}))
    spark.stop()
    """
)


def test_two_driver_processes_writing_the_same_txn_commit_once_per_round(
    spark: Any, table_uri: str, tmp_path: Path
) -> None:
    spark.range(0, 3).write.format("lance").save(table_uri)
    rounds = 5
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_CONF_DIR": str(REPO / "conf"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), table_uri, str(barrier), str(me), "2", str(rounds)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(2)
    ]
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"driver failed:\n{out[-3000:]}\n{err[-6000:]}"
            assert json.loads(out.strip().splitlines()[-1]) == {"rounds": rounds}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    commits = _commits(table_uri)
    winners = {number: _writers_of(table_uri, number) for number in range(1, rounds + 1)}
    print(f"\nprocesses: {rounds} rounds x 2 drivers: commits {commits}, rows of {winners}")
    assert {n: len(v) for n, v in commits.items()} == {n: 1 for n in range(1, rounds + 1)}
    assert all(len(w) == 1 for w in winners.values())
    assert lance.dataset(table_uri).count_rows() == 3 + 10 * rounds
    assert _unreferenced(table_uri) == set()
