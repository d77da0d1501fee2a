"""Compaction of a Lance table in three steps: plan, rewrite, commit once.

Lance's own planner (:meth:`lance.optimize.Compaction.plan`) picks the fragments to merge
(fewer rows than the target, or too many deleted rows) and groups them into independent
tasks. Each task (:func:`execute_task`) rewrites its fragments into new data files and
returns Lance's ``RewriteResult`` (as JSON, inside a
:class:`~lance_spark.source.write_jobs.TaskResult`); the tasks run as Spark tasks for
``executeCompaction`` / ``OPTIMIZE`` (:mod:`lance_spark.table.maintenance`) or one after the
other in this process for a write's auto compaction (:func:`compact_here`). The driver then
commits ONE ``Rewrite`` (:func:`commit_rewrites`) on the planned version, with the
connector's history entry (``OPTIMIZE`` and its metrics).

A ``Rewrite`` conflicts only with a concurrent commit that deleted or rewrote rows of the same
fragments (and with overwrites / restores); Lance rebases it over anything else. A conflict
is a :class:`~lance_spark.errors.CommitConflictError` and changes no row.

Tables with an index are committed by Lance itself (:meth:`Compaction.commit`): it remaps the
indexes to the rewritten rows (or, with stable row ids, reserves the new fragment ids first in
a version of its own, so the indexes keep covering them), which pylance does not let a
hand-built ``Rewrite`` do. Such versions carry no connector history entry (history still
names them ``OPTIMIZE``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
from lance.optimize import Compaction, CompactionOptions, CompactionTask, RewriteResult

from lance_spark.errors import JobClosedError
from lance_spark.source import commit as _commit
from lance_spark.source import dataset as _dataset
from lance_spark.source import lance_errors, staging
from lance_spark.source.reader import fragment_infos
from lance_spark.source.write_jobs import StagedJob, TaskResult, combine

_log = logging.getLogger(__name__)

OPERATION = "OPTIMIZE"
COMPACTION_METRICS = ("fragments_removed", "fragments_added", "files_removed", "files_added")
# Lance's default target_rows_per_fragment: fragments with fewer rows are compaction candidates.
DEFAULT_TARGET_ROWS_PER_FRAGMENT = 1024 * 1024


@dataclass(frozen=True)
class Planned:
    """A compaction plan: the version it read and its tasks (Lance ``CompactionTask`` JSON)."""

    read_version: int
    tasks: tuple[str, ...]
    has_indices: bool
    target_rows_per_fragment: int | None = None


@dataclass(frozen=True)
class Compacted:
    """What a compaction did: Lance's metrics and the version committed (None: nothing)."""

    metrics: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(COMPACTION_METRICS, 0))
    version: int | None = None


def _lance(obj: Any) -> Any:
    """pylance's stubs lack the JSON methods of its compaction classes (pylance 14 has them)."""
    return obj


def options(target_rows_per_fragment: int | None) -> CompactionOptions:
    opts: CompactionOptions = {}
    if target_rows_per_fragment is not None:
        opts["target_rows_per_fragment"] = int(target_rows_per_fragment)
    return opts


def plan(ds: lance.LanceDataset, target_rows_per_fragment: int | None) -> Planned:
    """Lance's plan for the version opened as ``ds`` (no task: nothing to compact)."""
    found = Compaction.plan(ds, options(target_rows_per_fragment))
    return Planned(
        read_version=int(found.read_version),
        tasks=tuple(_lance(task).json() for task in found.tasks),
        has_indices=bool(ds.describe_indices()),
        target_rows_per_fragment=target_rows_per_fragment,
    )


def small_fragments(ds: lance.LanceDataset, target_rows_per_fragment: int | None = None) -> int:
    """How many fragments of ``ds`` have fewer live rows than the compaction target (what
    Lance's planner would merge); from the manifest alone, no file is read."""
    target = target_rows_per_fragment or DEFAULT_TARGET_ROWS_PER_FRAGMENT
    return sum(1 for f in fragment_infos(ds) if f.live_rows < target)


def execute_task(
    uri: str,
    read_version: int,
    task_json: str,
    *,
    storage: Mapping[str, str],
    job_id: str,
    ds: lance.LanceDataset | None = None,
) -> TaskResult:
    """Run one Lance compaction task on the planned version; its new data files are recorded
    in job ``job_id`` (deleted again if the job is over, or when it is aborted)."""
    files = staging.TaskFiles(uri, job_id, storage=storage)
    if ds is None or int(ds.version) != read_version:
        ds = _dataset.open_version(uri, read_version, storage=storage)
    result = _lance(CompactionTask).from_json(task_json).execute(ds)
    paths = [f.path for fragment in result.new_fragments for f in fragment.files]
    if not files.record(data=paths):
        raise JobClosedError(f"compaction job over; its files in {uri} are deleted")
    return TaskResult(
        files=tuple(paths),
        counts={k: int(getattr(result.metrics, k)) for k in COMPACTION_METRICS},
        rewrites=(_lance(result).json(),),
    )


def commit_rewrites(
    uri: str,
    planned: Planned,
    rewrites: Sequence[str],
    *,
    storage: Mapping[str, str],
    app_id: str | None,
    auto: bool = False,
) -> Compacted:
    """Commit the tasks' ``rewrites`` as one version on the planned one."""
    results = [_lance(RewriteResult).from_json(j) for j in rewrites]
    metrics = dict.fromkeys(COMPACTION_METRICS, 0)
    for result in results:
        for key in COMPACTION_METRICS:
            metrics[key] += int(getattr(result.metrics, key))
    if not results:
        return Compacted(metrics, None)
    if planned.has_indices:
        return Compacted(metrics, _commit_with_lance(uri, planned, results, storage=storage))
    groups = [
        lance.LanceOperation.RewriteGroup(
            old_fragments=list(r.original_fragments), new_fragments=list(r.new_fragments)
        )
        for r in results
    ]
    parameters = {"auto": str(auto).lower()}
    if planned.target_rows_per_fragment is not None:
        parameters["targetRowsPerFragment"] = str(planned.target_rows_per_fragment)
    version = _commit.commit(
        uri,
        lance.LanceOperation.Rewrite(groups, []),
        read_version=planned.read_version,
        info=_commit.CommitInfo(
            operation=OPERATION, parameters=parameters, metrics=metrics, app_id=app_id
        ),
        storage=storage,
    )
    return Compacted(metrics, version)


def _commit_with_lance(
    uri: str, planned: Planned, results: list[RewriteResult], *, storage: Mapping[str, str]
) -> int:
    ds = _dataset.open_version(uri, planned.read_version, storage=storage)
    try:
        Compaction.commit(ds, results, options(planned.target_rows_per_fragment))
    except OSError as err:  # lance.commit.CommitConflictError is one; so is a remap failure
        conflict = lance_errors.commit_conflict(err)
        if conflict is None:
            raise
        raise _commit.lost_race(
            f"{OPERATION} on the Lance table at {uri!r} started from version "
            f"{planned.read_version}, and a version committed meanwhile deleted or rewrote rows "
            f"of the same fragments ({lance_errors.first_line(err)}). No row "
            "changed; run it again.",
            retryable=conflict.retryable,
            read_version=planned.read_version,
            conflicting_version=None,
        ) from err
    return int(ds.version)


def compact_here(
    uri: str,
    *,
    storage: Mapping[str, str],
    app_id: str | None,
    target_rows_per_fragment: int | None = None,
    auto: bool = False,
    ds: lance.LanceDataset | None = None,
) -> Compacted:
    """Plan, rewrite and commit in this process (no Spark): the tasks run one after the other
    (each uses Lance's own threads). The files of a failed attempt are deleted."""
    if ds is None:
        ds = _dataset.open_latest(uri, storage=storage)
    planned = plan(ds, target_rows_per_fragment)
    if not planned.tasks:
        return Compacted()
    with StagedJob.begin(uri, read_version=planned.read_version, storage=storage) as job:
        done = combine(
            execute_task(uri, planned.read_version, task, storage=storage, job_id=job.job_id, ds=ds)
            for task in planned.tasks
        )
        return commit_rewrites(
            uri, planned, done.rewrites, storage=storage, app_id=app_id, auto=auto
        )


def maybe_auto_compact(
    uri: str,
    version: int,
    *,
    min_num_files: int,
    storage: Mapping[str, str],
    app_id: str | None,
    what: str = "write",
    compact: Callable[[lance.LanceDataset], Compacted] | None = None,
) -> Compacted | None:
    """After a ``what`` (a write; a change) committed ``version``: compact when the table
    has at least ``min_num_files`` small fragments, as a version of its own, with
    ``compact`` (given the latest version; default: :func:`compact_here`, in this process).
    Never raises: the ``what`` stands, and a failed compaction (a concurrent writer, ...) is
    logged as a warning. None: not needed (or failed)."""
    try:
        ds = _dataset.open_latest(uri, storage=storage)  # ``version`` or later
        small = small_fragments(ds)
        if small < min_num_files:
            return None
        if compact is None:
            done = compact_here(uri, storage=storage, app_id=app_id, auto=True, ds=ds)
        else:
            done = compact(ds)
    except Exception as err:  # noqa: BLE001  (the commit stands; compaction is a bonus)
        _log.warning(
            "auto compaction of %s after version %d failed; the %s is committed, the "
            "small fragments stay until the next compaction: %s",
            uri,
            version,
            what,
            err,
        )
        return None
    _log.info(
        "auto compaction of %s after version %d: %d small fragments, %s, version %s",
        uri,
        version,
        small,
        dict(done.metrics),
        done.version,
    )
    return done
