"""The job runner's parts without a JVM: TaskResult's encoding, errors shipped from tasks,
the retry loop and StagedJob (lance_spark.source.write_jobs, lance_spark.table.job_runner)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lance.fragment import DataFile, FragmentMetadata, write_fragments
from lance.schema import LanceSchema

from lance_spark import errors
from lance_spark.errors import (
    CommitConflictError,
    ConcurrentModificationError,
    InvalidOptionError,
    LanceSparkError,
    SchemaMismatchError,
)
from lance_spark.source import staging
from lance_spark.source import write_jobs as source_jobs
from lance_spark.source.write_jobs import ErrorRelay, StagedJob, TaskResult
from lance_spark.table import job_runner as jobs

TABLE = pa.table({"id": pa.array(range(10), pa.int64())})

# --- TaskResult: encode / decode / combine ---------------------------------------------------

_names = st.text(min_size=1, max_size=12)
_ids = st.integers(min_value=0, max_value=2**31)
_fragments = st.builds(
    FragmentMetadata,
    id=_ids,
    files=st.lists(
        st.builds(
            DataFile,
            path=_names.map(lambda s: f"{s}.lance"),
            fields=st.lists(_ids, max_size=4),
            column_indices=st.lists(_ids, max_size=4),
            file_major_version=st.integers(0, 3),
            file_minor_version=st.integers(0, 3),
            file_size_bytes=st.none() | _ids,
        ),
        max_size=3,
    ),
    physical_rows=_ids,
)
_errors = st.sampled_from(
    [
        errors.InvalidOptionError,
        errors.SchemaMismatchError,
        errors.CardinalityViolationError,
        errors.LanceSparkError,
    ]
).flatmap(lambda cls: st.text(max_size=200).map(cls))
_schemas = st.sampled_from(
    [
        LanceSchema.from_pyarrow(pa.schema([("a", pa.int64())])),
        LanceSchema.from_pyarrow(pa.schema([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
    ]
)
_results = st.builds(
    TaskResult,
    new_fragments=st.lists(_fragments, max_size=3).map(tuple),
    updated_fragments=st.lists(_fragments, max_size=3).map(tuple),
    removed_fragment_ids=st.lists(_ids, max_size=3).map(tuple),
    counts=st.dictionaries(_names, st.integers(0, 2**40), max_size=3),
    files=st.lists(_names, max_size=3).map(tuple),
    schema=st.none() | _schemas,
    error=st.none() | _errors,
)


def _same(a: TaskResult, b: TaskResult) -> None:
    """Field by field; an error compares by type, message and attributes (exceptions compare
    by identity)."""
    assert (type(a.error), str(a.error), getattr(a.error, "__dict__", None)) == (
        type(b.error),
        str(b.error),
        getattr(b.error, "__dict__", None),
    )
    assert a.schema == b.schema
    assert (a.new_fragments, a.updated_fragments, a.removed_fragment_ids) == (
        b.new_fragments,
        b.updated_fragments,
        b.removed_fragment_ids,
    )
    assert (dict(a.counts), a.files) == (dict(b.counts), b.files)


@settings(max_examples=60, deadline=None)
@given(st.lists(_results, max_size=4))
def test_task_results_round_trip_through_one_arrow_column(results: list[TaskResult]) -> None:
    batches = [source_jobs.encode(r) for r in results]
    assert all(b.schema == source_jobs.RESULT_ARROW and b.num_rows == 1 for b in batches)
    # What Spark's collect() gives back for a binary column: bytearray.
    blobs = [bytearray(b.column(0)[0].as_py()) for b in batches]
    decoded = source_jobs.decode(blobs)
    assert len(decoded) == len(results)
    for before, after in zip(results, decoded, strict=True):
        _same(before, after)


def test_real_fragments_round_trip(tmp_path: Path) -> None:
    """Fragments as Lance writes them (deletion file, stable row ids) survive the encoding."""
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(TABLE, uri, max_rows_per_file=5, enable_stable_row_ids=True)
    changed = ds.get_fragment(0).delete_rows([1, 2])
    new = write_fragments(TABLE, uri, schema=ds.schema)
    result = TaskResult(new_fragments=tuple(new), updated_fragments=(changed,))
    (decoded,) = source_jobs.decode([source_jobs.encode(result).column(0)[0].as_py()])
    assert decoded == result
    op = lance.LanceOperation.Update(
        updated_fragments=list(decoded.updated_fragments),
        new_fragments=list(decoded.new_fragments),
    )
    assert lance.LanceDataset.commit(uri, op, read_version=ds.version).count_rows() == 18


def test_decode_refuses_what_is_not_a_task_result() -> None:
    with pytest.raises(LanceSparkError, match="returned dict, not a TaskResult"):
        source_jobs.decode([pickle.dumps({"kind": "new"})])


def test_combine_sums_in_task_order() -> None:
    schema = LanceSchema.from_pyarrow(pa.schema([("a", pa.int64())]))
    first = TaskResult(
        removed_fragment_ids=(3,), counts={"rows": 2, "x": 1}, files=("a",), schema=schema
    )
    second = TaskResult(removed_fragment_ids=(1,), counts={"rows": 5}, files=("b", "c"))
    third = TaskResult(schema=schema)
    done = source_jobs.combine([first, second, third])
    assert done.removed_fragment_ids == (3, 1)
    assert done.counts == {"rows": 7, "x": 1}
    assert done.files == ("a", "b", "c")
    assert done.schema == schema
    assert source_jobs.combine([]) == TaskResult()


def test_combine_raises_the_first_shipped_error_as_itself() -> None:
    first = InvalidOptionError("the key 7 more than once")
    results = [TaskResult(counts={"rows": 1}), TaskResult(error=first)]
    results.append(TaskResult(error=SchemaMismatchError("later")))
    with pytest.raises(InvalidOptionError) as raised:
        source_jobs.combine(results)
    assert raised.value is first


def test_combine_refuses_tasks_that_disagree_on_the_schema() -> None:
    a = LanceSchema.from_pyarrow(pa.schema([("a", pa.int64())]))
    b = LanceSchema.from_pyarrow(pa.schema([("b", pa.int64())]))
    with pytest.raises(LanceSparkError, match="different table schemas"):
        source_jobs.combine([TaskResult(schema=a), TaskResult(schema=b)])


# --- errors raised in tasks ------------------------------------------------------------------


class _NeedsKeyword(LanceSparkError):
    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message)
        self.where = where


def _task(error: BaseException | None) -> jobs.Task:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[TaskResult]:
        rows = sum(b.num_rows for b in batches)
        if error is not None:
            raise error
        yield TaskResult(counts={"rows": rows})

    return run


def _driver(task: jobs.Task) -> TaskResult:
    """What run_tasks does with one partition, without Spark: ship, collect, decode."""
    shipped = jobs._shipping(task)(iter(TABLE.to_batches()))
    return source_jobs.combine(source_jobs.decode(b.column(0)[0].as_py() for b in shipped))


def test_a_task_result_reaches_the_driver() -> None:
    assert _driver(_task(None)).counts == {"rows": 10}


def test_a_connector_error_in_a_task_is_raised_on_the_driver_as_itself() -> None:
    message = "a: b\nlance_spark.errors.Other: not this one"  # the old regex took the last line
    err = ConcurrentModificationError(message, read_version=3, conflicting_version=4)
    with pytest.raises(ConcurrentModificationError) as raised:
        _driver(_task(err))
    assert raised.value is not err  # it travelled pickled
    assert str(raised.value) == message
    assert (raised.value.read_version, raised.value.conflicting_version) == (3, 4)
    assert any("Raised in a Spark task" in note for note in raised.value.__notes__)


def test_other_errors_fail_the_task_as_before() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _driver(_task(RuntimeError("boom")))
    # A connector error that pickle cannot rebuild is raised in the task, unchanged.
    with pytest.raises(_NeedsKeyword, match="odd"):
        _driver(_task(_NeedsKeyword("odd", where="here")))


def test_relay_raises_the_error_lance_turned_into_text(tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")

    def batches() -> Iterator[pa.RecordBatch]:
        yield from TABLE.to_batches()
        raise SchemaMismatchError("column 'v' has 3 values, the table's vectors 2")

    relay = ErrorRelay()
    reader = pa.RecordBatchReader.from_batches(TABLE.schema, relay.watch(batches()))
    with pytest.raises(SchemaMismatchError, match="column 'v' has 3 values") as raised, relay:
        write_fragments(reader, uri, schema=TABLE.schema)
    assert isinstance(raised.value.__cause__, OSError)  # what Lance raised
    with pytest.raises(OSError, match="disk"), ErrorRelay():  # nothing relayed: unchanged
        raise OSError("disk full")


# --- the retry loop --------------------------------------------------------------------------


def _conflicts(n: int, *, retryable: bool = True) -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= n:
            if retryable:
                raise ConcurrentModificationError(
                    f"lost race {len(calls)}", read_version=len(calls), conflicting_version=9
                )
            raise CommitConflictError(f"lost race {len(calls)}", retryable=False)
        return "committed"

    return calls, attempt


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(jobs.time, "sleep", slept.append)
    return slept


def test_retryable_conflicts_are_redone(pauses: list[float]) -> None:
    calls, attempt = _conflicts(3)
    retry = jobs.Retry(attempts=8, backoff_base_s=0.2, backoff_max_s=0.5)
    assert jobs.with_retry(attempt, retry=retry) == "committed"  # type: ignore[arg-type]
    assert calls == [1, 2, 3, 4]
    assert len(pauses) == 3  # none before the first attempt
    assert all(0 <= p <= bound for p, bound in zip(pauses, [0.4, 0.5, 0.5], strict=True))


def test_gives_up_after_the_last_attempt_naming_it(pauses: list[float]) -> None:
    calls, attempt = _conflicts(100)
    with pytest.raises(ConcurrentModificationError, match=r"lost race 5 \(gave up after 5 "):
        jobs.with_retry(attempt, retry=jobs.Retry(attempts=5))  # type: ignore[arg-type]
    assert len(calls) == 5 and len(pauses) == 4


def test_the_last_conflict_keeps_its_versions(pauses: list[float]) -> None:
    _, attempt = _conflicts(100)
    with pytest.raises(ConcurrentModificationError) as raised:
        jobs.with_retry(attempt, retry=jobs.Retry(attempts=2))  # type: ignore[arg-type]
    assert (raised.value.read_version, raised.value.conflicting_version) == (2, 9)
    assert raised.value.retryable


def test_a_conflict_that_is_not_retryable_is_not_redone(pauses: list[float]) -> None:
    calls, attempt = _conflicts(1, retryable=False)
    with pytest.raises(CommitConflictError, match=r"gave up after 1 attempt") as raised:
        jobs.with_retry(attempt)  # type: ignore[arg-type]
    assert type(raised.value) is CommitConflictError and not raised.value.retryable
    assert calls == [1] and pauses == []


def test_other_errors_are_not_retried(pauses: list[float]) -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise InvalidOptionError("bad")

    with pytest.raises(InvalidOptionError, match="bad"):
        jobs.with_retry(attempt)
    assert calls == [1]


def test_the_default_policy_is_read_when_called(
    pauses: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "RETRY", jobs.Retry(attempts=3))
    calls, attempt = _conflicts(100)
    with pytest.raises(ConcurrentModificationError, match="gave up after 3"):
        jobs.with_retry(attempt)  # type: ignore[arg-type]
    assert len(calls) == 3


# --- StagedJob -------------------------------------------------------------------------------


def _written(uri: str) -> set[str]:
    return {p.name for p in (Path(uri) / "data").iterdir()}


def _task_writes(uri: str, job: StagedJob) -> list[FragmentMetadata]:
    files = staging.TaskFiles(uri, job.job_id, storage={})
    reader = pa.RecordBatchReader.from_batches(TABLE.schema, files.watch(TABLE.to_batches()))
    fragments = write_fragments(reader, uri, schema=TABLE.schema, progress=files.progress())
    assert files.record(data=[f.path for fragment in fragments for f in fragment.files])
    return fragments


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(TABLE, path)
    return path


def test_staged_job_finishes_on_success(uri: str) -> None:
    before = _written(uri)
    with StagedJob.begin(uri, read_version=1, storage={}) as job:
        assert (Path(uri) / staging.STAGING_DIR / job.job_id / staging.OPEN_MARKER).exists()
        _task_writes(uri, job)  # a failed attempt: its files are nobody's
        kept = _task_writes(uri, job)
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(kept), read_version=1)
    assert _written(uri) == before | {f.path for fragment in kept for f in fragment.files}
    assert not (Path(uri) / "_lance_spark").exists()
    assert lance.dataset(uri).count_rows() == 20


def test_staged_job_aborts_on_failure_and_the_error_goes_on(uri: str) -> None:
    before = _written(uri)
    job = StagedJob.begin(uri, read_version=1, storage={})
    with pytest.raises(InvalidOptionError, match="the key 7"), job:
        _task_writes(uri, job)
        assert _written(uri) != before
        raise InvalidOptionError("the key 7 more than once")
    assert _written(uri) == before
    assert not (Path(uri) / "_lance_spark").exists()
    assert lance.dataset(uri).version == 1


def test_staged_job_abort_deletes_known_paths_too(uri: str) -> None:
    before = _written(uri)
    job = StagedJob.begin(uri, read_version=1, storage={}, job_id="job")
    unrecorded = write_fragments(TABLE, uri, schema=TABLE.schema)  # named by a message only
    paths = tuple(f.path for fragment in unrecorded for f in fragment.files)
    StagedJob(uri, 1, {}, job_id="job", known_paths=paths).abort()
    assert job.job_id == "job" and _written(uri) == before
