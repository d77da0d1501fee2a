"""Concurrent MERGE / UPDATE / DELETE are serializable (issue 11): threads sharing the test
session and two driver processes race on overlapping keys; the table ends equal to the serial
replay of the statements that committed, in commit order, and never holds a key twice.
Concurrent appends still never conflict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lance_spark import ConcurrentModificationError, LanceTable
from lance_spark.source import commit as _commit
from lance_spark.table import changes
from lance_spark.table import job_runner as jobs

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

State = dict[int, str]


def _table(spark: SparkSession, uri: str) -> None:
    spark.range(0, 100, numPartitions=3).selectExpr("id AS k", "'init' AS val").write.format(
        "lance"
    ).mode("append").save(uri)


def _read(uri: str) -> list[tuple[int, str]]:
    rows = lance.dataset(uri).to_table().to_pylist()
    return sorted((int(r["k"]), str(r["val"])) for r in rows)


class _Op:
    """One statement run by a thread, and what it does to a Python dict (the replay)."""

    def __init__(
        self,
        predicate: str,
        run: Callable[[SparkSession, str], None],
        replay: Callable[[State], None],
    ) -> None:
        # Spark's SQL of the statement's condition, as the history records it; unique, it
        # finds the statement's version in the history.
        self.predicate = predicate
        self.run = run
        self.replay = replay
        self.error: BaseException | None = None


def _upsert_all(i: int, keys: range) -> _Op:
    def run(spark: SparkSession, uri: str) -> None:
        src = spark.createDataFrame([(k, f"m{i}") for k in keys], "k long, val string")
        (
            LanceTable.forPath(spark, uri)
            .alias(f"t{i}")
            .merge(src.alias(f"s{i}"), f"t{i}.k = s{i}.k")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    def replay(state: State) -> None:
        for k in keys:
            state[k] = f"m{i}"

    return _Op(f"(t{i}.k = s{i}.k)", run, replay)


def _upsert_set(i: int, keys: range) -> _Op:
    def run(spark: SparkSession, uri: str) -> None:
        src = spark.createDataFrame([(k,) for k in keys], "k long")
        (
            LanceTable.forPath(spark, uri)
            .alias(f"t{i}")
            .merge(src.alias(f"s{i}"), f"t{i}.k = s{i}.k")
            .whenMatchedUpdate(set={"val": f"concat(t{i}.val, '|m{i}')"})
            .whenNotMatchedInsert(values={"k": f"s{i}.k", "val": f"'m{i}'"})
            .execute()
        )

    def replay(state: State) -> None:
        for k in keys:
            state[k] = state[k] + f"|m{i}" if k in state else f"m{i}"

    return _Op(f"(t{i}.k = s{i}.k)", run, replay)


def _update(condition: str, recorded: str, test: Callable[[int], bool], suffix: str) -> _Op:
    def run(spark: SparkSession, uri: str) -> None:
        LanceTable.forPath(spark, uri).update(condition, {"val": f"concat(val, '{suffix}')"})

    def replay(state: State) -> None:
        for k in state:
            if test(k):
                state[k] += suffix

    return _Op(recorded, run, replay)


def _delete(condition: str, recorded: str, test: Callable[[int], bool]) -> _Op:
    def run(spark: SparkSession, uri: str) -> None:
        LanceTable.forPath(spark, uri).delete(condition)

    def replay(state: State) -> None:
        for k in [k for k in state if test(k)]:
            del state[k]

    return _Op(recorded, run, replay)


def _committed_predicates(uri: str, since: int) -> list[str]:
    """The predicate of every version after ``since``, in commit order."""
    ds = lance.dataset(uri)
    found = []
    for version in range(since + 1, ds.version + 1):
        tx = ds.read_transaction(version)
        assert tx is not None
        parameters = json.loads(tx.transaction_properties[_commit.PROP_PARAMETERS])
        found.append(parameters["predicate"])
    return found


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the attempts of row-level statements (each attempt reads the table's latest
    version once)."""
    counter = {"attempts": 0}
    lock = threading.Lock()

    def counted(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                counter["attempts"] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(changes, "statement_version", counted(changes.statement_version))
    return counter


def _race(spark: SparkSession, uri: str, threads_ops: list[list[_Op]]) -> None:
    barrier = threading.Barrier(len(threads_ops))
    unexpected: list[BaseException] = []

    def work(ops: list[_Op]) -> None:
        barrier.wait(timeout=300)
        for op in ops:
            try:
                op.run(spark, uri)
            except ConcurrentModificationError as err:
                op.error = err
            except Exception as err:  # noqa: BLE001  (reported by the test below)
                unexpected.append(err)

    threads = [threading.Thread(target=work, args=(ops,)) for ops in threads_ops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
        assert not thread.is_alive()
    assert not unexpected, "\n".join(repr(e)[:3000] for e in unexpected)


def _check_serial(uri: str, version: int, ops: list[_Op]) -> list[str]:
    """The table equals the replay of the committed statements in commit order; statements
    that gave up committed nothing. Returns the committed predicates."""
    committed = _committed_predicates(uri, version)
    by_predicate = {op.predicate: op for op in ops}
    assert len(by_predicate) == len(ops)
    assert len(committed) == len(set(committed))  # each statement committed at most once
    for op in ops:
        assert (op.predicate in committed) == (op.error is None), op.predicate
    state: State = {k: "init" for k in range(100)}
    for predicate in committed:
        by_predicate[predicate].replay(state)
    rows = _read(uri)
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys)), "a key is in the table twice"
    assert dict(rows) == state
    return committed


def test_threads_merging_overlapping_keys_serialize(
    spark: SparkSession, table_uri: str, attempts: dict[str, int]
) -> None:
    _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    plan = [
        # The same new keys (100..119) and existing ones (95..99) in every MERGE.
        [
            _upsert_all(0, range(95, 120)),
            _update(
                "k >= 98 AND k < 112", "((k >= 98L) AND (k < 112L))", lambda k: 98 <= k < 112, "|u0"
            ),
        ],
        [
            _delete("k = 5 OR k = 110", "((k = 5L) OR (k = 110L))", lambda k: k in (5, 110)),
            _upsert_set(1, range(95, 120)),
        ],
        [
            _upsert_set(2, range(90, 125)),
            _update(
                "k % 3 = 0 AND k > 90",
                "(((k % 3L) = 0L) AND (k > 90L))",
                lambda k: k % 3 == 0 and k > 90,
                "|u2",
            ),
        ],
        [
            _delete("k = 6 OR k = 121", "((k = 6L) OR (k = 121L))", lambda k: k in (6, 121)),
            _upsert_all(3, range(100, 130)),
        ],
    ]
    ops = [op for thread_ops in plan for op in thread_ops]
    _race(spark, table_uri, plan)
    committed = _check_serial(table_uri, version, ops)
    gave_up = [op for op in ops if op.error is not None]
    print(
        f"\nthreads: 4 writers, {len(ops)} statements, {attempts['attempts']} attempts, "
        f"{len(committed)} committed, {len(gave_up)} ConcurrentModificationError"
    )
    assert attempts["attempts"] >= len(ops)
    assert len(committed) >= 1


def test_two_merges_of_the_same_new_keys_leave_each_key_once(
    spark: SparkSession, table_uri: str, attempts: dict[str, int]
) -> None:
    """The issue's reproduction: two threads upserting keys 5000..5049, which the table
    does not have."""
    _table(spark, table_uri)
    version = lance.dataset(table_uri).version
    plan = [[_upsert_set(i, range(5000, 5050))] for i in range(2)]
    _race(spark, table_uri, plan)
    committed = _check_serial(table_uri, version, [op for ops in plan for op in ops])
    assert len(committed) == 2  # both succeed: the second is redone on the first's version
    assert len(_read(table_uri)) == 150


def _appending_udf(spark: SparkSession, uri: str, marks: Path, key: Callable[[int], int]) -> str:
    """The name of a string UDF that, the first time it runs in each attempt of a statement
    (``marks/attempt`` holds the attempt's number), appends a row with the key ``key(n)``
    to the table, as another writer would while the statement runs; returns its argument."""

    def appends(val: str | None) -> str | None:
        n = int((marks / "attempt").read_text())
        try:
            os.close(os.open(marks / f"done-{n}", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return val
        row = pa.table({"k": pa.array([key(n)], pa.int64()), "val": ["other"]})
        lance.write_dataset(row, uri, mode="append")
        return val

    name = f"appends_{uuid.uuid4().hex[:8]}"
    spark.udf.register(name, appends, "string")
    return name


def _numbered_attempts(monkeypatch: pytest.MonkeyPatch, marks: Path) -> None:
    """Each attempt of a statement writes its number to ``marks/attempt`` first."""
    real = changes.statement_version
    count = [0]

    def version(uri: str, storage: Any) -> int:
        count[0] += 1
        (marks / "attempt").write_text(str(count[0]))
        return real(uri, storage)

    monkeypatch.setattr(changes, "statement_version", version)


def test_a_statement_that_keeps_losing_raises_and_changes_nothing(
    spark: SparkSession, table_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While each attempt runs, another writer appends a row with a key the MERGE inserts:
    every attempt overlaps, and after RETRY.attempts the MERGE raises, naming both
    versions."""
    _table(spark, table_uri)
    monkeypatch.setattr(jobs, "RETRY", replace(jobs.RETRY, backoff_max_s=0.0))
    _numbered_attempts(monkeypatch, tmp_path)
    appends = _appending_udf(spark, table_uri, tmp_path, lambda n: 999 + n)
    src = spark.createDataFrame([(1000 + i, "mine") for i in range(20)], "k long, val string")
    t = LanceTable.forPath(spark, table_uri)
    with pytest.raises(ConcurrentModificationError, match=r"gave up after 8 attempt") as info:
        (
            t.alias("t")
            .merge(src.alias("s"), "t.k = s.k")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsert(values={"k": "s.k", "val": f"{appends}(s.val)"})
            .execute()
        )
    err = info.value
    assert err.read_version is not None and err.conflicting_version == err.read_version + 1
    assert f"read version {err.read_version}" in str(err)
    assert f"version {err.conflicting_version}" in str(err)
    assert "1 row(s) matching this statement's read filter `k` IN (" in str(err)
    assert len(list(tmp_path.glob("done-*"))) == jobs.RETRY.attempts
    rows = _read(table_uri)
    assert [v for _, v in rows].count("mine") == 0
    assert len(rows) == 100 + jobs.RETRY.attempts


def test_appends_of_disjoint_keys_do_not_redo_a_merge(
    spark: SparkSession,
    table_uri: str,
    tmp_path: Path,
    attempts: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A concurrent append whose keys the MERGE's source does not have is no overlap."""
    _table(spark, table_uri)
    _numbered_attempts(monkeypatch, tmp_path)
    appends = _appending_udf(spark, table_uri, tmp_path, lambda n: 7000)
    src = spark.createDataFrame([(3, "mine"), (500, "mine")], "k long, val string")
    t = LanceTable.forPath(spark, table_uri)
    (
        t.alias("t")
        .merge(src.alias("s"), "t.k = s.k")
        .whenMatchedUpdate(set={"val": f"{appends}(s.val)"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    assert len(list(tmp_path.glob("done-*"))) == 1
    assert attempts["attempts"] == 1
    rows = dict(_read(table_uri))
    assert rows[3] == "mine" and rows[500] == "mine" and rows[7000] == "other"


_DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from pyspark.sql import SparkSession
    import lance_spark
    from lance_spark import LanceTable
    from lance_spark.table import changes

    uri, barrier, me, peers, mode = sys.argv[1:6]
    spark = (SparkSession.builder.master("local[1]").appName(f"race-{me}")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    lance_spark.register(spark)
    attempts = 0
    real_version = changes.statement_version
    def version(*args, **kwargs):
        global attempts
        attempts += 1
        return real_version(*args, **kwargs)
    changes.statement_version = version
    src0 = spark.range(1).selectExpr("id AS k", "'x' AS val")  # warm up before the barrier
    src0.collect()

    def wait(name):
        Path(barrier, f"{name}-{me}").touch()
        deadline = time.time() + 600
        while len([p for p in Path(barrier).iterdir() if p.name.startswith(name + "-")]) < int(peers):
            if time.time() > deadline:
                sys.exit("barrier timeout")
            time.sleep(0.05)

    wait("merge")
    for r in range(3):
        keys = spark.range(1000 + 50 * r, 1050 + 50 * r).selectExpr("id AS k", f"'p{me}r{r}' AS val")
        (LanceTable.forPath(spark, uri).alias("t").merge(keys.alias("s"), "t.k = s.k")
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    wait("append")
    appends = 0
    for r in range(3):
        rows = spark.range(1).selectExpr(f"{10000 + 100 * int(me) + r} AS k", "'a' AS val")
        rows.write.format("lance").mode("append").save(uri)
        appends += 1
    print(json.dumps({"attempts": attempts, "appends": appends}))
    spark.stop()
    """
)


def test_two_driver_processes_merging_overlapping_new_keys(
    spark: SparkSession, table_uri: str, tmp_path: Path
) -> None:
    _table(spark, table_uri)
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
            [sys.executable, str(script), table_uri, str(barrier), str(me), "2", "merge"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(2)
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"driver failed:\n{out[-3000:]}\n{err[-6000:]}"
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rows = _read(table_uri)
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys)), "a key is in the table twice"
    # 100 initial keys, 150 merged keys, 6 appended rows (none lost, none refused).
    assert set(keys) == set(range(100)) | set(range(1000, 1150)) | {
        10000 + 100 * me + r for me in range(2) for r in range(3)
    }
    print(f"\nprocesses: 2 drivers x 3 MERGEs + 3 appends each, reports {reports}")
    assert all(r["appends"] == 3 for r in reports)
