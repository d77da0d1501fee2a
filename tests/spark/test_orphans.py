"""No orphan files: retried and speculative task attempts, failed jobs, killed tasks and a
SIGKILLed driver (then vacuum). Files are checked against what pylance says the versions
reference."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from _servers import alive as _alive
from _servers import descendants as _descendants
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lance_spark import LanceTable

DRIVER = Path(__file__).with_name("_orphan_driver.py")
COMMIT_GATE = Path(__file__).with_name("_commit_gate")  # its sitecustomize blocks commits
GATED = ("kill-replace-where", "kill-update", "kill-merge-deletes")
# The MERGE commits where Spark calls the write's commit (a Python worker, not the driver's
# interpreter): the gate stops it there too.
BLOCKED_AT_COMMIT = (*GATED, "kill-merge")
REPO = Path(__file__).resolve().parents[2]
_TIMEOUT = 600.0  # generous: two busy cores


# --- helpers ----------------------------------------------------------------------------------


def _written(uri: str) -> set[str]:
    """Every file under data/ and _deletions/, relative to the table's root."""
    found = set()
    for folder in ("data", "_deletions"):
        root = Path(uri) / folder
        if root.is_dir():
            found.update(f"{folder}/{p.name}" for p in root.iterdir())
    return found


def _referenced(uri: str) -> set[str]:
    """The data and deletion files some version of the table references."""
    ds = lance.dataset(uri)
    files = set()
    for v in ds.versions():
        for fragment in ds.checkout_version(v["version"]).get_fragments():
            meta = fragment.metadata
            files.update(f"data/{f.path}" for f in meta.files)
            if meta.deletion_file is not None:
                files.add(meta.deletion_file.path(meta.id))
    return files


def _unreferenced(uri: str) -> set[str]:
    return _written(uri) - _referenced(uri)


def _unreferenced_anywhere(uri: str) -> set[str]:
    """Every file of the table's folder (but the connector's staging folder) that no version
    references: data, deletion and index files, manifests, transaction files, anything."""
    ds = lance.dataset(uri)
    kept = _referenced(uri) | {"_versions/latest_version_hint.json"}
    indexes = set()
    for v in ds.versions():
        number = v["version"]
        kept |= {f"_versions/{number}.manifest", f"_versions/{2**64 - 1 - number:020d}.manifest"}
        txn = ds.read_transaction(number)
        if txn is not None:
            kept.add(f"_transactions/{txn.read_version}-{txn.uuid}.txn")
        indexes |= {i["uuid"] for i in ds.checkout_version(number).list_indices()}
    found = set()
    for path in Path(uri).rglob("*"):
        relative = str(path.relative_to(uri))
        if path.is_file() and not relative.startswith("_lance_spark/"):
            found.add(relative)
    return {
        p for p in found - kept if not (p.startswith("_indices/") and p.split("/")[1] in indexes)
    }


def _rows(uri: str) -> list[dict[str, object]]:
    return sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: str(r["id"]))


def _staging(uri: str) -> list[str]:
    root = Path(uri) / "_lance_spark" / "staging"  # (an index's kept parameters are beside it)
    return sorted(str(p.relative_to(uri)) for p in root.rglob("*")) if root.exists() else []


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())


def _wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _TIMEOUT
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {_TIMEOUT} s")
        time.sleep(0.2)


def _kill_all(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver, its process group and every process below it (the Python workers
    too, as a machine failure would), and wait until all are gone: a worker that outlived
    the driver could still remove its own temporary files while the test looks at them."""
    doomed = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + _TIMEOUT
    while any(_alive(pid) for pid in doomed):
        assert time.monotonic() < deadline, "processes of the killed driver still run"
        time.sleep(0.1)


def _idle(spark: SparkSession) -> None:
    """Wait until no stage runs: tasks Spark killed after a job failed are gone."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + _TIMEOUT
    while tracker.getActiveStageIds():
        assert time.monotonic() < deadline, "tasks still running"
        time.sleep(0.1)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Callable[[str, str], tuple[subprocess.Popen[bytes], Path]]]:
    """Start ``_orphan_driver.py`` in its own process group; the group is killed at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(scenario: str, uri: str) -> tuple[subprocess.Popen[bytes], Path]:
        work = tmp_path / f"work-{scenario}"
        work.mkdir()
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_CONF_DIR": str(REPO / "conf"),
            "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "spark")]),
        }
        if scenario in BLOCKED_AT_COMMIT:
            env["PYTHONPATH"] = os.pathsep.join([str(COMMIT_GATE), env["PYTHONPATH"]])
            env["LANCE_SPARK_TEST_COMMIT_GATE"] = str(work)
        log = (tmp_path / f"{scenario}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), scenario, uri, str(work)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append(proc)
        return proc, work

    yield start
    for proc in started:
        if proc.poll() is None:
            _kill_all(proc)


def _step(work: Path, name: str) -> dict[str, int]:
    result: dict[str, int] = json.loads((work / f"{name}.json").read_text())
    return result


def _log(tmp_path: Path, scenario: str) -> str:
    return (tmp_path / f"{scenario}.log").read_text(errors="replace")[-4000:]


# --- task retries -------------------------------------------------------------------------------


def test_retried_tasks_leave_no_unreferenced_files(
    driver: Callable[[str, str], tuple[subprocess.Popen[bytes], Path]],
    table_uri: str,
    tmp_path: Path,
) -> None:
    proc, work = driver("retries", table_uri)
    assert proc.wait(timeout=_TIMEOUT) == 0, _log(tmp_path, "retries")
    # Every first attempt failed (the append's after its writer finished files; the MERGE's
    # and addColumns' source tasks, and their writing tasks after writing), and was retried.
    failed = [_step(work, step)["failed"] for step in ("append", "merge", "addColumns")]
    assert failed[0] == 4 and failed[0] < failed[1] < failed[2], failed
    ds = lance.dataset(table_uri)
    assert ds.count_rows() == 1250 and _ids(table_uri) == list(range(1250))
    assert ds.schema.names == ["id", "val", "tag"]
    assert _unreferenced(table_uri) == set()
    assert _staging(table_uri) == []


# --- a killed driver, then vacuum -------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["kill-append", "kill-merge"])
def test_vacuum_removes_what_a_killed_driver_left(
    spark: SparkSession,
    driver: Callable[[str, str], tuple[subprocess.Popen[bytes], Path]],
    table_uri: str,
    tmp_path: Path,
    scenario: str,
) -> None:
    proc, work = driver(scenario, table_uri)
    created = work / "created.json"
    _wait_for("table", created.exists, proc)
    version = _step(work, "created")["version"]
    committed = set(_written(table_uri))
    if scenario == "kill-append":
        # Three tasks finished their files; the fourth holds an open Lance temporary.
        def written() -> bool:
            new = _written(table_uri) - committed
            return len([p for p in new if p.endswith(".lance")]) >= 3 and any(
                "/.tmp" in p for p in new
            )

        _wait_for("files of the running append", written, proc)
    else:
        _wait_for("the MERGE's commit", (work / "commit-reached.json").exists, proc)
    _kill_all(proc)

    left = _unreferenced(table_uri)
    assert left and _staging(table_uri)  # what a killed driver leaves
    assert lance.dataset(table_uri).version == version
    assert _ids(table_uri) == list(range(200))

    t = LanceTable.forPath(spark, table_uri)
    dry = t.vacuum(0, dryRun=True).first()
    assert dry.dry_run and sorted(dry.unreferenced_files) == sorted(left)
    assert dry.unreferenced_files_removed == len(left) and dry.staging_markers_removed > 0
    assert _unreferenced(table_uri) == left  # a dry run deletes nothing

    done = t.vacuum(0).first()
    assert not done.dry_run and sorted(done.unreferenced_files) == sorted(left)
    assert done.staging_markers_removed == dry.staging_markers_removed
    assert done.data_files_removed >= len([p for p in left if p.startswith("data/")])
    assert _unreferenced(table_uri) == set()
    assert _written(table_uri) == committed
    assert _staging(table_uri) == []
    assert lance.dataset(table_uri).version == version
    assert sorted(r.id for r in t.toDF().select("id").collect()) == list(range(200))
    again = t.vacuum(0).first()
    assert again.unreferenced_files_removed == 0 and again.staging_markers_removed == 0


@pytest.mark.parametrize("scenario", GATED)
def test_vacuum_removes_the_deletion_files_of_a_killed_change(
    spark: SparkSession,
    driver: Callable[[str, str], tuple[subprocess.Popen[bytes], Path]],
    table_uri: str,
    tmp_path: Path,
    scenario: str,
) -> None:
    """replaceWhere, UPDATE and MERGE killed at their commit, their deletion files written:
    pylance's cleanup does not list an unreferenced deletion file newer than the oldest
    version; vacuum finds it anyway, and then removes the job's markers."""
    proc, work = driver(scenario, table_uri)
    _wait_for("the committed UPDATE", (work / "ready.json").exists, proc)
    version = _step(work, "ready")["version"]
    rows = _rows(table_uri)
    committed = _written(table_uri)
    assert any(p.startswith("_deletions/") for p in committed)
    _wait_for("the change's commit", (work / "commit-reached.json").exists, proc)
    _kill_all(proc)

    left, staged = _unreferenced_anywhere(table_uri), _staging(table_uri)
    deletions = {p for p in left if p.startswith("_deletions/")}
    assert deletions and staged  # what the killed change left
    assert lance.dataset(table_uri).version == version and _rows(table_uri) == rows

    t = LanceTable.forPath(spark, table_uri)
    dry = t.vacuum(0, dryRun=True).first()
    assert sorted(dry.unreferenced_files) == sorted(left) and dry.staging_markers_removed > 0
    assert _unreferenced_anywhere(table_uri) == left  # a dry run deletes nothing

    done = t.vacuum(0).first()
    assert sorted(done.unreferenced_files) == sorted(left)
    assert done.deletion_files_removed >= len(deletions)
    assert done.staging_markers_removed == dry.staging_markers_removed
    print(
        f"{scenario}: killed at its commit; before vacuum(0) {len(left)} unreferenced "
        f"file(s) ({len(deletions)} deletion), {len(staged)} staging file(s); "
        f"after: {len(_unreferenced_anywhere(table_uri))}, {len(_staging(table_uri))}"
    )
    assert _unreferenced_anywhere(table_uri) == set()
    assert _staging(table_uri) == []
    assert _written(table_uri) <= committed
    assert lance.dataset(table_uri).version == version and _rows(table_uri) == rows
    again = t.vacuum(0).first()
    assert again.unreferenced_files_removed == 0 and again.staging_markers_removed == 0


def test_vacuum_keeps_unreferenced_files_younger_than_the_retention(
    spark: SparkSession, table_uri: str
) -> None:
    spark.range(10).write.format("lance").mode("append").save(table_uri)
    # A write in progress: files written, not committed yet, plus its staging marker.
    lance.fragment.write_fragments(
        lance.dataset(table_uri).to_table(), table_uri, mode="append", max_rows_per_file=5
    )
    job = Path(table_uri) / "_lance_spark/staging/job-in-progress"
    job.mkdir(parents=True)
    (job / "_OPEN").touch()
    pending = _unreferenced(table_uri)
    assert len(pending) == 2

    result = LanceTable.forPath(spark, table_uri).vacuum(1).first()
    assert result.unreferenced_files_removed == 0 and result.staging_markers_removed == 0
    assert _unreferenced(table_uri) == pending and (job / "_OPEN").exists()

    # Once they are older than the retention, the job is taken for dead.
    old = time.time() - 2 * 3600
    for path in [*pending, "_lance_spark/staging/job-in-progress/_OPEN"]:
        os.utime(Path(table_uri) / path, (old, old))
    result = LanceTable.forPath(spark, table_uri).vacuum(1).first()
    assert result.unreferenced_files_removed == 2 and result.staging_markers_removed == 1
    assert sorted(result.unreferenced_files) == sorted(pending)
    assert _unreferenced(table_uri) == set() and _staging(table_uri) == []
    assert lance.dataset(table_uri).count_rows() == 10


def test_vacuum_finds_deletion_and_index_files_and_keeps_markers_until_their_files_go(
    spark: SparkSession, table_uri: str
) -> None:
    spark.range(0, 100, 1, 4).selectExpr("id", "concat('v', id) AS val").write.format("lance").mode(
        "append"
    ).save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    t.update("id < 10", {"val": "'u'"})  # a deletion file the versions reference
    t.createIndex("id", "BTREE")
    ds = lance.dataset(table_uri)
    rows, version = _rows(table_uri), ds.version
    # What a dead job left: a deletion file newer than the oldest version (pylance's cleanup
    # does not list it), the files of an index it built, and a temporary still being written
    # (by a task that outlived its driver), the deletion file and the temporary named by the
    # job's marker.
    changed = ds.get_fragment(1).delete_rows([0, 1])
    assert changed is not None and changed.deletion_file is not None
    deletion = changed.deletion_file.path(1)
    segments = ds.list_indices()  # the index's segments (one per task of its build)
    index = segments[0]
    root = Path(table_uri)
    shutil.copytree(root / "_indices" / index["uuid"], root / "_indices" / str(uuid.uuid4()))
    temporary = "data/.tmpWriting"
    (root / temporary).write_bytes(b"partial")
    job = root / "_lance_spark/staging/dead-job"
    job.mkdir(parents=True)
    (job / "_OPEN").touch()
    (job / "a.json").write_text(json.dumps({"files": [deletion], "temporary": [temporary]}))
    left = _unreferenced_anywhere(table_uri)
    indexed = {p for p in left if p.startswith("_indices/")}
    assert left == {deletion, temporary} | indexed and len(indexed) == 2

    # The temporary is still being written: modified after the vacuum's cutoff.
    later = time.time() + 3600
    os.utime(root / temporary, (later, later))
    done = t.vacuum(0).first()
    assert sorted(done.unreferenced_files) == sorted(left - {temporary})
    assert done.deletion_files_removed == 1 and done.index_files_removed == 2
    assert done.staging_markers_removed == 0  # the temporary it names is still there
    assert _unreferenced_anywhere(table_uri) == {temporary} and (job / "a.json").exists()

    now = time.time()
    os.utime(root / temporary, (now, now))
    dry = t.vacuum(0, dryRun=True).first()
    assert dry.unreferenced_files == [temporary] and dry.staging_markers_removed == 2
    done = t.vacuum(0).first()
    assert done.unreferenced_files == [temporary] and done.staging_markers_removed == 2
    assert _unreferenced_anywhere(table_uri) == set() and _staging(table_uri) == []
    assert lance.dataset(table_uri).version == version and _rows(table_uri) == rows
    kept = [i["uuid"] for i in lance.dataset(table_uri).list_indices()]
    assert kept == [i["uuid"] for i in segments]
    assert t.toDF().where("id = 42").count() == 1


def test_vacuum_removes_every_unreferenced_file_of_the_table_folders(
    spark: SparkSession, table_uri: str
) -> None:
    """The rule (docs/table-api.md): every file under data/, _deletions/ and _indices/ that no
    version references, whatever its name, once older than the retention; nothing else."""
    spark.range(0, 100, 1, 2).selectExpr("id", "concat('v', id) AS val").write.format("lance").mode(
        "append"
    ).save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    t.delete("id < 5")
    t.createIndex("id", "BTREE")
    rows, root = _rows(table_uri), Path(table_uri)
    ds = lance.dataset(table_uri)
    (index,) = ds.describe_indices()
    live_index = index.segments[0].uuid
    a_data_file = ds.get_fragments()[0].metadata.files[0].path
    swept = [
        "data/abc.txt",
        "data/sub/abc.txt",
        "data/.tmpKilledWriter",  # a Lance temporary no marker names
        "data/stray.lance",
        "_deletions/abc.txt",
        "_indices/abc.txt",
    ]
    kept = [
        f"_indices/{live_index}/abc.txt",  # an index's folder is used whole
        f"data/{a_data_file.removesuffix('.lance')}/abc.txt",  # a used data file's folder
        "abc.txt",  # not a folder of Lance's
        "other/abc.txt",
        "_versions/abc.txt",
        "_lance_spark/abc.txt",
    ]
    for path in swept + kept:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        if path == "data/stray.lance":
            shutil.copy(root / "data" / a_data_file, root / path)
        else:
            (root / path).write_text("not Lance's")
    old = time.time() - 2 * 3600
    for path in swept + kept:
        os.utime(root / path, (old, old))
    (root / "data/young.txt").write_text("being written")  # younger than the retention

    dry = t.vacuum(1, dryRun=True).first()
    assert sorted(dry.unreferenced_files) == sorted(swept)
    assert all((root / p).exists() for p in swept)
    done = t.vacuum(1).first()
    assert sorted(done.unreferenced_files) == sorted(swept)
    assert done.unreferenced_files_removed == len(swept)
    # Lance's kinds counted as such (its cleanup takes a temporary for a data file); the
    # files that are not Lance's only in the total
    assert (done.data_files_removed, done.index_files_removed) == (2, 1)
    assert done.deletion_files_removed == 0
    assert not any((root / p).exists() for p in swept)
    assert all((root / p).exists() for p in [*kept, "data/young.txt"])
    assert _rows(table_uri) == rows and lance.dataset(table_uri).count_rows() == 95
    assert t.toDF().where("id = 42").count() == 1


def test_vacuum_keeps_the_blob_files_of_used_data_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Lance 2.2 stores large blobs in files of their own (data/<data file>/*.blob), which no
    manifest names: vacuum keeps them with their data file, and removes them with it."""
    uri = str(tmp_path / "blobs.lance")
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    values = [b"x" * (4 << 20), b"y" * 10, b"z" * (3 << 20)]
    lance.write_dataset(
        pa.table({"id": [1, 2, 3], "b": values}, schema=schema), uri, data_storage_version="2.2"
    )
    blobs = sorted(p for p in (Path(uri) / "data").rglob("*.blob"))
    assert blobs, "pylance wrote no blob file: the test checks nothing"
    old = time.time() - 2 * 3600
    for path in (Path(uri) / "data").rglob("*"):
        os.utime(path, (old, old))

    t = LanceTable.forPath(spark, uri)
    assert t.vacuum(0).first().unreferenced_files == []
    assert sorted(p for p in (Path(uri) / "data").rglob("*.blob")) == blobs
    ds = lance.dataset(uri)
    read = [f.readall() for f in ds.take_blobs("b", indices=[0, 1, 2])]
    assert read == values

    # Overwritten: the old data file and its blob files go together (Lance's cleanup).
    lance.write_dataset(pa.table({"id": [4], "b": [b"w"]}, schema=schema), uri, mode="overwrite")
    t.vacuum(0)
    assert not any(p.exists() for p in blobs)
    assert lance.dataset(uri).to_table()["id"].to_pylist() == [4]


# --- failed jobs --------------------------------------------------------------------------------


def test_task_killed_mid_write_leaves_no_temporary(spark: SparkSession, table_uri: str) -> None:
    """One task fails while another holds an open Lance temporary (the task Spark then kills
    would leave its ``data/.tmp*``): the abort deletes it too."""
    spark.range(10).selectExpr("id", "'a' AS val").write.format("lance").mode("append").save(
        table_uri
    )
    before = _written(table_uri)
    staging = Path(table_uri) / "_lance_spark/staging"

    def temporary_recorded() -> bool:
        for marker in staging.glob("*/*.json"):
            if json.loads(marker.read_text()).get("temporary"):
                return True
        return False

    def job_open() -> bool:
        return any(staging.glob("*/_OPEN"))

    @F.udf("string")
    def slow_or_failing(i: int) -> str:
        deadline = time.monotonic() + 300
        if i == 0:  # partition 1: fail once partition 0's writer recorded its temporary
            while not temporary_recorded():
                if time.monotonic() > deadline:
                    raise RuntimeError("no temporary was recorded")
                time.sleep(0.05)
            raise RuntimeError("fails while another task writes")
        # Partition 0, past the first 1,000 rows (the JVM companion reads them before the
        # writer gets any, to size the task's batches) and 150 more: wait for the abort.
        if i == 2150:
            while job_open() and time.monotonic() < deadline:
                time.sleep(0.05)
        # Spark buffers what it sends a Python worker (64 KiB): long values make the first
        # rows reach the writer while this task waits.
        return f"v{i}" + "x" * 2000

    # Partition 0: ids 1000..2999; partition 1: id 0 (fails).
    rows = spark.range(1000, 3000, 1, 1).union(spark.range(0, 1, 1, 1))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        with pytest.raises(PySparkException, match="fails while another task writes"):
            rows.select("id", slow_or_failing("id").alias("val")).write.format("lance").mode(
                "append"
            ).save(table_uri)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    _idle(spark)
    assert _written(table_uri) == before
    assert _staging(table_uri) == []
    assert lance.dataset(table_uri).version == 1


def test_failed_jobs_leave_no_files(spark: SparkSession, table_uri: str) -> None:
    spark.range(0, 400, 1, 4).selectExpr("id", "'a' AS val").write.format("lance").mode(
        "append"
    ).save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    t.update("id < 10", {"val": "'b'"})  # a deletion file exists
    before, version = _written(table_uri), lance.dataset(table_uri).version

    @F.udf("string")
    def fails_at_350(i: int) -> str:
        if i == 350:
            raise RuntimeError("task failure on purpose")
        return f"x{i}"

    source = spark.range(0, 400, 1, 4).select("id", fails_at_350("id").alias("val"))
    with pytest.raises(PySparkException, match="task failure on purpose"):
        source.write.format("lance").mode("append").save(table_uri)
    _idle(spark)
    with pytest.raises(PySparkException, match="task failure on purpose"):
        (
            t.alias("t")
            .merge(source.alias("s"), "t.id = s.id")
            .whenMatchedUpdate(set={"val": "s.val"})
            .execute()
        )
    _idle(spark)
    with pytest.raises(PySparkException, match="task failure on purpose"):
        t.addColumns(source.withColumnRenamed("val", "tag"), on="id")
    _idle(spark)
    assert _written(table_uri) == before
    assert _staging(table_uri) == []
    assert lance.dataset(table_uri).version == version
