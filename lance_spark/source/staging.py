"""Files a write job leaves behind: per-job staging markers, and deleting what no commit uses.

Every job (an append, a row-level change, addColumns) leaves no file it does not commit:

- The driver marks the job open (``_OPEN`` under ``<table>/_lance_spark/staging/<job>/``)
  before any task runs. Each task attempt records every file it writes in a marker there as
  soon as the file exists: the data files Lance finishes (its write-progress hook), the
  deletion files, and the Lance temporaries it has open (a killed write leaves a ``.tmp*``
  file in ``data/``; on Linux the task finds its own in ``/proc/self/fd``, so it never names
  another writer's). After writing a marker the task checks that the job is still open; if
  not, it deletes what it just recorded and stops.
- When the job ends, committed or not, the driver closes it (removes ``_OPEN``), then deletes
  every file the markers name that no version after the job's read version references (the
  files of failed, killed and speculative attempts; all of them when nothing was committed),
  then the markers. Whatever the interleaving with a late task, one of the two sees the
  other. Checking the versions instead of trusting the outcome also keeps a commit that
  succeeded but reported an error from losing its files.
- A killed driver closes nothing: :func:`find_orphans` (``vacuum``) removes every file
  under ``data/``, ``_deletions/`` and ``_indices/`` that no version (of any branch) uses,
  whatever its name, and the staging markers of jobs that stopped, once they are older than
  the retention (Delta's rule: a job must not run longer than that). Lance's cleanup lists
  the unreferenced files of its own kinds (data files with their blob files, temporaries,
  index folders); the files it leaves out (deletion files newer than the oldest version,
  files that are not Lance's) are checked against the versions here. A job's markers go
  only once every file they name is gone or referenced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import fsspec
import lance
import pyarrow as pa
from lance.progress import FragmentWriteProgress

from lance_spark.errors import InvalidOptionError, JobClosedError, LanceSparkError
from lance_spark.source import lance_errors

_log = logging.getLogger(__name__)

STAGING_DIR = "_lance_spark/staging"
OPEN_MARKER = "_OPEN"
# Folders of the table whose files a task writes (relative to the table's root).
_WRITTEN_DIRS = ("data", "_deletions")
_TEMPORARY_PREFIX = ".tmp"  # Lance writes a local file as data/.tmpXXXXXX, then renames it
# Candidate kinds of Lance's cleanup that vacuum removes when no version references them.
INDEX_DIR = "_indices"
VERSIONS_DIR = "_versions"  # a folder holding one is a Lance table
_SWEPT_KINDS = {"data": "data", "deletion": "_deletions", "index": INDEX_DIR}
_DATA_SUFFIX = ".lance"
_DELETION_SUFFIXES = (".arrow", ".bin")
MAX_EXPLAINED_FILES = 1_000_000
_EVERY_VERSION = 2**31 - 1

# Lance storage-option keys -> s3fs arguments. Only what s3fs needs to reach the same bucket.
_S3_KEYS = {
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
}


def data_file_uri(table_uri: str, relative_path: str) -> str:
    """Where a fragment's data file lives (``FragmentMetadata`` paths are relative to data/)."""
    return f"{table_uri.rstrip('/')}/data/{relative_path}"


def table_file_uri(table_uri: str, relative_path: str) -> str:
    """A file given relative to the table's root (deletion files: ``_deletions/...``)."""
    return f"{table_uri.rstrip('/')}/{relative_path}"


# --- the driver ---------------------------------------------------------------------------------


_BEGIN_ATTEMPTS = 20


def begin_job(table_uri: str, job_id: str, *, storage: Mapping[str, str]) -> None:
    """Driver side, before any task runs: mark the job open."""
    fs, root = table_fs(_job_dir(table_uri, job_id), storage)
    for attempt in range(_BEGIN_ATTEMPTS):
        try:
            if is_local(fs):  # (s3fs would create a missing bucket)
                fs.makedirs(root, exist_ok=True)
            fs.touch(f"{root}/{OPEN_MARKER}")
            return
        except OSError as err:
            # FileNotFoundError: another job that just ended removed the empty staging folders
            # between our makedirs of the parents and of our own folder (_remove_empty_dirs):
            # make them again. A location that cannot be written at all fails every attempt.
            if isinstance(err, FileNotFoundError) and attempt < _BEGIN_ATTEMPTS - 1:
                continue
            raise LanceSparkError(
                f"cannot write to the Lance table at {table_uri!r}: {err}"
            ) from err


def finish_job(
    table_uri: str, job_id: str, *, read_version: int | None, storage: Mapping[str, str]
) -> int:
    """Driver side, after the job committed (or found nothing to commit): delete what its
    failed or speculative attempts wrote, then its markers. Never raises: the commit stands,
    and what cannot be deleted now is left for ``vacuum``. Returns how many files went."""
    try:
        return _close(table_uri, job_id, (), read_version=read_version, storage=storage)
    except (OSError, ValueError) as err:
        _log.warning(
            "write job %s on %s committed, but its leftovers could not be removed (vacuum "
            "removes them later): %s",
            job_id,
            table_uri,
            err,
        )
        return 0


def abort_job(
    table_uri: str,
    job_id: str,
    known_paths: Iterable[str],
    *,
    read_version: int | None,
    storage: Mapping[str, str],
) -> int:
    """Driver side, when the job failed: close it, then delete every file its tasks recorded
    (and ``known_paths``, data files relative to data/) that no version references."""
    try:
        return _close(table_uri, job_id, known_paths, read_version=read_version, storage=storage)
    except (FileNotFoundError, PermissionError) as err:
        # The table's location cannot be written at all (no such bucket, no rights): no task
        # can have written a file there either.
        _log.warning("cannot clean up write job %s at %s: %s", job_id, table_uri, err)
        return 0


def _close(
    table_uri: str,
    job_id: str,
    known_paths: Iterable[str],
    *,
    read_version: int | None,
    storage: Mapping[str, str],
) -> int:
    fs, root = table_fs(_job_dir(table_uri, job_id), storage)
    open_marker = f"{root}/{OPEN_MARKER}"
    if fs.exists(open_marker):
        with contextlib.suppress(FileNotFoundError):
            fs.rm(open_marker)  # from here on, a late task deletes what it writes itself
    recorded = Recorded(files={f"data/{p}" for p in known_paths})
    fs.invalidate_cache(root)  # tasks in other processes wrote the markers
    markers = []
    for marker in fs.glob(f"{root}/*.json"):
        try:
            recorded.update(_read_marker(fs, marker))
        except FileNotFoundError:
            # A late task's marker: it saw the job closed and deleted its files, then the
            # marker, after the listing (a busy machine makes this likely).
            continue
        markers.append(marker)
    removed = 0
    if recorded.files or recorded.temporary:
        referenced = _referenced(table_uri, read_version, recorded.files, storage=storage)
        if referenced is None:
            _log.warning(
                "write job %s on %s: a version after %s could not be read; its files are left "
                "for vacuum",
                job_id,
                table_uri,
                read_version,
            )
        else:
            unused = sorted(recorded.files - referenced) + sorted(recorded.temporary)
            removed = delete_files((table_file_uri(table_uri, p) for p in unused), storage=storage)
    for marker in markers:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(marker)
    _remove_empty_dirs(fs, root)
    return removed


def _referenced(
    table_uri: str, read_version: int | None, wanted: Collection[str], *, storage: Mapping[str, str]
) -> set[str] | None:
    """Which of ``wanted`` (paths relative to the table root) the versions after
    ``read_version`` reference; None when one of them cannot be read."""
    if not wanted:
        return set()
    options = dict(storage) or None
    try:
        latest = lance.dataset(table_uri, storage_options=options)
    except ValueError as err:
        if lance_errors.is_not_found(err):
            return set()  # no version at all (a failed CREATE)
        raise
    found: set[str] = set()
    indices = any(p.startswith(f"{INDEX_DIR}/") for p in wanted)
    for version in range(int(latest.version), read_version or 0, -1):
        try:
            ds = latest if version == latest.version else latest.checkout_version(version)
        except ValueError as err:
            if lance_errors.is_not_found(err):
                continue  # vacuumed
            return None
        found.update(_version_files(ds, indices=indices) & set(wanted))
        if len(found) == len(wanted):
            break
    return found


def _version_files(ds: lance.LanceDataset, *, indices: bool = False) -> set[str]:
    """The data and deletion files of a version, relative to the table's root; with
    ``indices``, its index segments' folders too (``_indices/<uuid>``)."""
    files: set[str] = set()
    for fragment in ds.get_fragments():
        meta = fragment.metadata
        files.update(f"data/{f.path}" for f in meta.files)
        if meta.deletion_file is not None:
            files.add(meta.deletion_file.path(meta.id))
    if indices:
        files.update(index_folder(str(s.uuid)) for d in ds.describe_indices() for s in d.segments)
    return files


def index_folder(uuid: str) -> str:
    """An index segment's folder, relative to the table's root: what an index build's task
    records (:meth:`TaskFiles.record`) for the segment it wrote."""
    return f"{INDEX_DIR}/{uuid}"


def delete_files(uris: Iterable[str], *, storage: Mapping[str, str]) -> int:
    """Delete the given files; a file already gone is fine. Returns how many were removed."""
    removed = 0
    for uri in uris:
        fs, path = table_fs(uri, storage)
        if fs.exists(path):
            fs.rm(path, recursive=True)  # an index segment is a folder
            removed += 1
    if removed:
        _log.info("removed %d file(s) no commit uses", removed)
    return removed


# --- the tasks ----------------------------------------------------------------------------------


@dataclass
class Recorded:
    """Files named by markers: ``files`` relative to the table's root (data and deletion
    files), ``temporary`` the Lance temporaries (also relative to the root)."""

    files: set[str] = field(default_factory=set)
    temporary: set[str] = field(default_factory=set)

    def update(self, other: Recorded) -> None:
        self.files |= other.files
        self.temporary |= other.temporary


class TaskFiles:
    """One task attempt's record of what it writes to ``table_uri`` for job ``job_id``.

    Example (inside a task)::

        files = TaskFiles(uri, job_id, storage=storage)
        reader = pa.RecordBatchReader.from_batches(schema, files.watch(batches))
        fragments = write_fragments(reader, uri, progress=files.progress())
        files.record(data=[f.path for fr in fragments for f in fr.files])
    """

    def __init__(self, table_uri: str, job_id: str, *, storage: Mapping[str, str]) -> None:
        self._uri = table_uri
        self._storage = storage
        self._fs, self._root = table_fs(_job_dir(table_uri, job_id), storage)
        self._recorded: set[str] = set()
        self._local_root = _local_root(self._fs, table_uri, storage)
        self._fds: frozenset[str] | None = None  # the descriptors of the last check

    def record(self, *, data: Iterable[str] = (), other: Iterable[str] = ()) -> bool:
        """Note written files (``data`` relative to data/, ``other`` relative to the table's
        root, such as deletion files). Returns False when the job is over: then they are
        deleted again."""
        files = {f"data/{p}" for p in data} | set(other)
        return self._record(sorted(files - self._recorded), [])

    def watch(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, noting the Lance temporaries this process has open before each next
        batch is pulled (the pull may block: a killed task dies there)."""
        iterator = iter(batches)
        while True:
            self.check_temporaries(if_changed=True)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch

    def check_temporaries(self, *, if_changed: bool = False) -> None:
        """Record the Lance temporaries this process has open; raises :class:`JobClosedError`
        when the job is over (Lance then deletes what the interrupted write wrote).

        ``if_changed``: only when the process's set of open file descriptors changed since
        the last check: the per-batch check, which would otherwise ``readlink`` every
        descriptor before every batch. Lance opens each temporary right before calling the
        progress hook's ``begin``, which checks in full; the per-batch check is for any
        temporary opened otherwise."""
        if self._local_root is None:
            return
        fds = _fd_numbers()
        if if_changed and fds == self._fds:
            return
        self._fds = fds
        new = sorted(_open_temporaries(self._local_root, fds) - self._recorded)
        if new and not self._record([], new):
            raise JobClosedError(f"write job over; stopped writing to {self._uri}")

    def progress(self) -> FragmentWriteProgress:
        """A write-progress hook for ``write_fragments`` recording each finished file."""
        return _Progress(self)

    def _record(self, files: list[str], temporary: list[str]) -> bool:
        if not files and not temporary:
            return True
        marker = f"{self._root}/{uuid.uuid4().hex}.json"
        _write_atomically(self._fs, marker, {"files": files, "temporary": temporary})
        self._recorded.update(files, temporary)
        self._fs.invalidate_cache(self._root)  # the driver removes _OPEN from elsewhere
        if self._fs.exists(f"{self._root}/{OPEN_MARKER}"):
            return True
        # The job was closed meanwhile (committed without this attempt, or aborted): the
        # driver may not have seen this marker, so delete what it names, then the marker.
        delete_files(
            (table_file_uri(self._uri, p) for p in files + temporary), storage=self._storage
        )
        self._fs.rm(marker)
        _remove_empty_dirs(self._fs, self._root)
        return False


class _Progress(FragmentWriteProgress):
    def __init__(self, files: TaskFiles) -> None:
        self._files = files

    def begin(self, fragment: Any, **kwargs: Any) -> None:
        self._files.check_temporaries()  # Lance has just opened the fragment's temporary

    def complete(self, fragment: Any, **kwargs: Any) -> None:
        if not self._files.record(data=[f.path for f in fragment.files]):
            raise JobClosedError("write job over")


def _fd_numbers() -> frozenset[str]:
    """This process's open file descriptors (Linux; elsewhere none)."""
    try:
        return frozenset(os.listdir("/proc/self/fd"))
    except OSError:
        return frozenset()


def _open_temporaries(local_root: str, fds: Iterable[str]) -> set[str]:
    """Lance temporaries under the table's written folders that this process has open
    among the descriptors ``fds`` (paths relative to the table's root)."""
    found: set[str] = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        folder, name = os.path.split(target)
        parent, sub = os.path.split(folder)
        if parent == local_root and sub in _WRITTEN_DIRS and name.startswith(_TEMPORARY_PREFIX):
            found.add(f"{sub}/{name}")
    return found


def _local_root(fs: Any, table_uri: str, storage: Mapping[str, str]) -> str | None:
    """The table's real local path, when it is on the local file system."""
    if not is_local(fs):
        return None
    _, path = table_fs(table_uri, storage)
    return os.path.realpath(path)


def is_local(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def _write_atomically(fs: Any, path: str, doc: Mapping[str, Any]) -> None:
    data = json.dumps(doc).encode()
    if not is_local(fs):
        fs.pipe_file(path, data)  # an object store's PUT is atomic
        return
    fs.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.part"
    fs.pipe_file(partial, data)
    fs.mv(partial, path)


def _read_marker(fs: Any, marker: str) -> Recorded:
    with fs.open(marker, "r") as src:
        doc = json.load(src)
    # "files" are relative to the table's root; markers of older versions of the connector
    # named data files relative to data/ and deletion files in "other_files".
    files = {p if "/" in p else f"data/{p}" for p in doc.get("files", [])}
    files.update(doc.get("other_files", []))
    return Recorded(files=files, temporary=set(doc.get("temporary", [])))


# --- vacuum ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Orphan:
    """A data, deletion or index file no version references (path relative to the table's
    root)."""

    path: str
    kind: str  # "data", "deletion", "index" (Lance's cleanup kinds) or "other" (not Lance's)
    size: int


@dataclass(frozen=True)
class Orphans:
    """What ``vacuum`` removes besides Lance's cleanup: unreferenced files, and the staging
    folders of jobs that stopped, all older than the retention. A job's markers are among
    ``markers`` only when every file they name is referenced, already gone, or in ``files``."""

    files: tuple[Orphan, ...]
    markers: tuple[str, ...]  # full paths in the table's file system
    jobs: tuple[str, ...] = ()  # the folders of those jobs (full paths)

    def remove(self, table_uri: str, *, storage: Mapping[str, str]) -> None:
        """Delete the files, then (only when all of them went) the markers."""
        delete_files((table_file_uri(table_uri, f.path) for f in self.files), storage=storage)
        fs, root = table_fs(table_uri, storage)
        if is_local(fs):  # an index's files are in a folder of their own
            for folder in sorted({f.path.rsplit("/", 1)[0] for f in self.files}, reverse=True):
                if folder.startswith(f"{_SWEPT_KINDS['index']}/"):
                    with contextlib.suppress(OSError):
                        os.rmdir(f"{root}/{folder}")
        if self.markers:
            fs.rm(list(self.markers))
        for job in self.jobs:
            _remove_empty_dirs(fs, job)


def find_orphans(
    ds: lance.LanceDataset,
    table_uri: str,
    *,
    older_than: timedelta,
    storage: Mapping[str, str],
    lines: Sequence[str] = (),
) -> Orphans:
    """The data, deletion and index files no version references, and the staging markers of
    jobs, that were last modified more than ``older_than`` ago.

    ``lines``: the locations of every branch of the table, main included (their versions may
    reference this location's files); default: ``table_uri`` alone."""
    cutoff = time.time() - older_than.total_seconds()
    lines = tuple(lines) or (table_uri,)
    # Keeping every version, Lance's cleanup lists just the files no version references
    # (it calls them unverified), whatever their age: the age is checked here.
    explained = ds.explain_cleanup_old_versions(
        retain_versions=_EVERY_VERSION,
        delete_unverified=True,
        error_if_tagged_old_versions=False,
        include_files=True,
        max_files=MAX_EXPLAINED_FILES,
    )
    if explained.candidate_files_truncated:
        _log.warning(
            "vacuum of %s: more than %d candidate files; the rest goes in the next vacuum",
            table_uri,
            MAX_EXPLAINED_FILES,
        )
    candidates = {}
    for c in explained.candidate_files:
        relative = relative_path(c)
        if c.unverified and relative is not None:
            candidates[relative] = Orphan(relative, c.kind, int(c.size_bytes))
    folders = set(_SWEPT_KINDS.values())
    listed = _listing(table_uri, folders, storage=storage)
    old = {p for p, (mtime, _) in listed.items() if mtime < cutoff}
    # What Lance's cleanup does not list is checked against the versions here: the
    # unreferenced deletion files newer than its oldest version (those a running job may
    # still commit, to Lance), and any file in data/ that is not Lance's (a stray file, a
    # temporary of a killed writer).
    unlisted = {p for p in old - candidates.keys() if not _vouched_for(p, listed, candidates)}
    if unlisted:
        for path in sorted(unlisted - _referenced_in(table_uri, lines, unlisted, storage=storage)):
            candidates[path] = Orphan(path, _kind(path), listed[path][1])
    files = tuple(f for p, f in sorted(candidates.items()) if p in old)
    jobs = _stale_jobs(table_uri, cutoff, storage=storage)
    done = _finished_jobs(
        table_uri,
        lines,
        jobs,
        {f.path for f in files},
        listed=_Listing(folders, listed),
        storage=storage,
    )
    markers = tuple(m for job in done for m in jobs[job])
    return Orphans(files, markers, tuple(done))


def _vouched_for(path: str, listed: Mapping[str, Any], candidates: Mapping[str, Orphan]) -> bool:
    """True for a file whose use Lance's cleanup has judged when it did not list it: a data
    file (``data/<name>.lance``), a file in the folder named after one (its blob files) while
    that data file is there and used, and anything under ``_indices/`` (an index's folder is
    used or listed whole)."""
    folder, _, name = path.partition("/")
    if folder == _SWEPT_KINDS["index"]:
        return True
    if folder != _SWEPT_KINDS["data"]:
        return False
    if "/" not in name:
        return name.endswith(_DATA_SUFFIX)
    owner = f"{folder}/{name.split('/', 1)[0]}{_DATA_SUFFIX}"
    return owner in listed and owner not in candidates


def _kind(path: str) -> str:
    """The cleanup kind of an unlisted file: "deletion" for Lance's deletion files, "other"
    for a file that is not Lance's."""
    folder, _, name = path.partition("/")
    if folder == _SWEPT_KINDS["deletion"] and name.endswith(_DELETION_SUFFIXES):
        return "deletion"
    return "other"


def relative_path(candidate: Any) -> str | None:
    """A data, deletion or index file of Lance's cleanup explanation, relative to the table's
    root (None for other kinds)."""
    folder = _SWEPT_KINDS.get(candidate.kind)
    if folder is None:
        return None
    return f"{folder}/{str(candidate.path).rsplit(f'/{folder}/', 1)[-1]}"


def _referenced_in(
    table_uri: str, lines: Sequence[str], wanted: Collection[str], *, storage: Mapping[str, str]
) -> set[str]:
    """Which of ``wanted`` (data and deletion files, relative to the root of the table at
    ``table_uri``) a version of a branch at ``lines`` references.

    Each branch's versions are read from the latest down, until all are found or no older
    version can reference those left: a deletion file is named ``<fragment>-<read
    version>-<n>``, and only versions after its read version (of any branch: a branch's
    versions are numbered on from its parent's) can hold it."""
    options = dict(storage) or None
    here = location_key(table_uri, storage=storage)
    pending = set(wanted)
    for line in lines:
        try:
            latest = lance.dataset(line, storage_options=options)
        except ValueError as err:
            if lance_errors.is_not_found(err):
                continue  # no version at all
            raise
        for version in range(int(latest.version), 0, -1):
            if not pending or version <= min(_read_version(p) for p in pending):
                break
            try:
                ds = latest if version == latest.version else latest.checkout_version(version)
            except ValueError as err:
                if lance_errors.is_not_found(err):
                    continue  # vacuumed
                raise
            pending -= _files_at(ds, line, here, storage=storage)
    return set(wanted) - pending


def _files_at(
    ds: lance.LanceDataset, line: str, root: str, *, storage: Mapping[str, str]
) -> set[str]:
    """The data and deletion files of version ``ds`` (of the branch at ``line``) that are
    stored under ``root`` (a :func:`location_key`), relative to it."""
    bases = {int(i): location_key(str(b.path), storage=storage) for i, b in ds.base_paths().items()}
    own = location_key(line, storage=storage)
    files: set[str] = set()
    for fragment in ds.get_fragments():
        meta = fragment.metadata
        for f in meta.files:
            if (own if f.base_id is None else bases.get(int(f.base_id))) == root:
                files.add(f"data/{f.path}")
        deletion = meta.deletion_file
        if deletion is not None:
            base = own if deletion.base_id is None else bases.get(int(deletion.base_id))
            if base == root:
                files.add(deletion.path(meta.id))
    return files


def location_key(uri: str, *, storage: Mapping[str, str]) -> str:
    """A location, comparable whatever its spelling (``file://``, a symlink, a trailing /)."""
    fs, path = table_fs(uri, storage)
    return os.path.realpath(path) if is_local(fs) else path.rstrip("/")


def _read_version(path: str) -> int:
    """The read version in a deletion file's name (0 for other files and other names)."""
    if not path.startswith(f"{_SWEPT_KINDS['deletion']}/"):
        return 0
    parts = path.rsplit("/", 1)[-1].split("-")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


def _stale_jobs(
    table_uri: str, cutoff: float, *, storage: Mapping[str, str]
) -> dict[str, list[str]]:
    """The staging folders of jobs nothing touched since ``cutoff``, with their files."""
    fs, root = table_fs(_staging_dir(table_uri), storage)
    fs.invalidate_cache(root)
    if not fs.exists(root):
        return {}
    stale: dict[str, list[str]] = {}
    for job in fs.ls(root, detail=False):
        found = fs.find(job, detail=True)
        # An empty folder (a job killed while creating it) is as old as itself.
        newest = max(file_mtime(i) for i in found.values()) if found else file_mtime(fs.info(job))
        if newest < cutoff:
            stale[job] = sorted(found)
    return stale


@dataclass(frozen=True)
class _Listing:
    """The files :func:`_listing` found under ``folders`` of a table (relative paths)."""

    folders: frozenset[str] | set[str]
    files: Mapping[str, tuple[float, int]]


def _finished_jobs(
    table_uri: str,
    lines: Sequence[str],
    jobs: Mapping[str, Sequence[str]],
    removed: Collection[str],
    *,
    listed: _Listing,
    storage: Mapping[str, str],
) -> list[str]:
    """The stale ``jobs`` whose markers may go: every file they name is gone, among
    ``removed``, or referenced by a version. The others keep their markers (a file younger
    than the retention, such as a temporary still being written), so a later vacuum can
    still tell what they wrote.

    For all the jobs together: one listing per folder their files are in (``listed``: the
    folders vacuum listed already) and one walk of the versions (a file's answer does not
    depend on the files asked with it, see :func:`_referenced_in`)."""
    named: dict[str, set[str]] = {}
    for job, found in sorted(jobs.items()):
        fs, _ = table_fs(job, storage)
        recorded = Recorded()
        try:
            for marker in (p for p in found if p.endswith(".json")):
                recorded.update(_read_marker(fs, marker))
        except (OSError, ValueError) as err:
            _log.warning(
                "vacuum of %s: staging marker of %s unreadable, kept: %s", table_uri, job, err
            )
            continue
        named[job] = (recorded.files | recorded.temporary) - set(removed)
    present = _existing(table_uri, set().union(*named.values()), listed, storage=storage)
    referenced = _referenced_in(table_uri, lines, present, storage=storage) if present else set()
    done = []
    for job, paths in named.items():
        left = (paths & present) - referenced
        if left:
            _log.info(
                "vacuum of %s: job %s kept its staging markers: %s still there, unreferenced "
                "and younger than the retention",
                table_uri,
                job.rsplit("/", 1)[-1],
                ", ".join(sorted(left)),
            )
            continue
        done.append(job)
    return done


def _existing(
    table_uri: str, paths: Collection[str], listed: _Listing, *, storage: Mapping[str, str]
) -> set[str]:
    """Which of ``paths`` (relative to the table's root) exist: looked up in one listing of
    each folder they are in (``listed`` covers some already), on a local file system and an
    object store alike; a path in no folder is asked for by itself."""
    folders = {p.split("/", 1)[0] for p in paths if "/" in p}
    more = _listing(table_uri, folders - set(listed.folders), storage=storage)
    found = set()
    for p in paths:
        if "/" in p:
            if p in listed.files or p in more:
                found.add(p)
        elif _exists(table_file_uri(table_uri, p), storage=storage):
            found.add(p)
    return found


def _exists(uri: str, *, storage: Mapping[str, str]) -> bool:
    fs, path = table_fs(uri, storage)
    return bool(fs.exists(path))


def _listing(
    table_uri: str, folders: Iterable[str], *, storage: Mapping[str, str]
) -> dict[str, tuple[float, int]]:
    """Every file under ``folders`` of the table: (modification time, size)."""
    listed: dict[str, tuple[float, int]] = {}
    for folder in folders:
        fs, root = table_fs(table_file_uri(table_uri, folder), storage)
        fs.invalidate_cache(root)
        if not fs.exists(root):
            continue
        for path, info in fs.find(root, detail=True).items():
            relative = f"{folder}/{path[len(root) :].lstrip('/')}"
            listed[relative] = (file_mtime(info), int(info.get("size") or 0))
    # A Lance table inside this one's folder (pylance made it there, or an older release) is
    # not this table's: none of its files is listed, so vacuum never deletes them.
    nested = tuple(f"{n}/" for n in nested_tables(listed))
    return {p: v for p, v in listed.items() if not p.startswith(nested)}


def _nested_in(table_uri: str, *, storage: Mapping[str, str]) -> list[str]:
    """The Lance tables inside the swept folders of the table (relative paths)."""
    found: list[str] = []
    for folder in set(_SWEPT_KINDS.values()):
        fs, root = table_fs(table_file_uri(table_uri, folder), storage)
        if fs.exists(root):
            found += [
                f"{folder}/{p[len(root) :].strip('/')}/{VERSIONS_DIR}/"
                for p in fs.find(root, withdirs=True)
                if p.rstrip("/").endswith(f"/{VERSIONS_DIR}")
            ]
    return nested_tables(found)


def file_mtime(info: Mapping[str, Any]) -> float:
    value = info.get("mtime", info.get("LastModified"))
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return time.time()  # unknown: treat as new, so it is kept


# --- file systems ---------------------------------------------------------------------------------


def nested_tables(paths: Iterable[str]) -> list[str]:
    """The folders of ``paths`` (file paths relative to a table's root) that are Lance tables
    of their own, holding a ``_versions/`` folder (``data/t.lance``), outermost only."""
    marker = f"/{VERSIONS_DIR}/"
    found = sorted({p.split(marker, 1)[0] for p in paths if marker in p})
    return [f for f in found if not any(f.startswith(f"{o}/") for o in found)]


def check_cleanup_spares(
    ds: lance.LanceDataset,
    table_uri: str,
    *,
    older_than: timedelta,
    storage: Mapping[str, str],
) -> None:
    """Refuses (:class:`LanceSparkError` naming both tables) a cleanup of the table at
    ``table_uri`` that would delete files of a Lance table inside its folder: Lance's cleanup
    takes any file under ``data/`` or ``_indices/`` that no version references and is older
    than 7 days for its own. Nothing is deleted then."""
    nested = _nested_in(table_uri, storage=storage)
    if not nested:
        return
    _log.warning(
        "vacuum of %s: the Lance tables inside its folder are left alone: %s",
        table_uri,
        ", ".join(nested),
    )
    explained = ds.explain_cleanup_old_versions(
        older_than=older_than,
        error_if_tagged_old_versions=False,
        include_files=True,
        max_files=MAX_EXPLAINED_FILES,
    )
    _, root = table_fs(table_uri, storage)
    prefix = f"{root.strip('/')}/"
    hit = sorted(
        {
            n
            for c in explained.candidate_files
            for n in nested
            if str(c.path).lstrip("/").removeprefix(prefix).startswith(f"{n}/")
        }
    )
    if hit:
        raise LanceSparkError(
            f"VACUUM of the Lance table at {table_uri!r} refused: its folder holds the Lance "
            f"table{'s' if len(hit) > 1 else ''} "
            f"{', '.join(repr(table_file_uri(table_uri, h)) for h in hit)}, older than "
            "7 days, whose files Lance's cleanup would delete as unreferenced ones. Nothing "
            "was deleted; move that table out of this table's folder, then VACUUM"
        )


def check_new_location(uri: str, *, storage: Mapping[str, str]) -> None:
    """Refuses (:class:`InvalidOptionError` naming both paths) ``uri`` as a new Lance table's
    location when a folder above it is a Lance table (``<t>/data/x.lance``,
    ``<t>/_indices/x.lance``: that table's VACUUM would delete it) or when a Lance table is
    inside it (its folder would hold another table's files)."""
    fs, path = table_fs(uri, storage)
    path = path.rstrip("/")
    spelled = uri.rstrip("/")
    scheme = spelled[: -len(path)] if path and spelled.endswith(path) else ""
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    while parent:
        if fs.exists(f"{parent}/{VERSIONS_DIR}"):
            raise InvalidOptionError(
                f"cannot create a Lance table at {uri!r}: it is inside the folder of the Lance "
                f"table at {scheme + parent!r}, whose VACUUM would delete its files; choose a "
                "location outside every Lance table's folder"
            )
        parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    if not fs.exists(path):
        return
    suffix = f"/{VERSIONS_DIR}"
    inside = sorted(
        p.rstrip("/")[: -len(suffix)]
        for p in fs.find(path, withdirs=True)
        if p.rstrip("/").endswith(suffix)
    )
    if inside:
        raise InvalidOptionError(
            f"cannot create a Lance table at {uri!r}: its folder holds the Lance table at "
            f"{scheme + inside[0]!r}; choose a location that holds no Lance table"
        )


def remove_table(table_uri: str, *, storage: Mapping[str, str]) -> None:
    """Delete every file of the table at ``table_uri`` (a managed table that was dropped)."""
    fs, root = table_fs(table_uri, storage)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _remove_empty_dirs(fs: Any, job_root: str) -> None:
    """Local file systems keep empty folders; object stores have none to remove."""
    if not is_local(fs):
        return
    for folder in (job_root, job_root.rsplit("/", 1)[0], job_root.rsplit("/", 2)[0]):
        try:
            os.rmdir(folder)
        except OSError:
            return  # not empty (or gone): so are its parents


def _job_dir(table_uri: str, job_id: str) -> str:
    return f"{_staging_dir(table_uri)}/{job_id}"


def _staging_dir(table_uri: str) -> str:
    return f"{table_uri.rstrip('/')}/{STAGING_DIR}"


def table_fs(uri: str, storage: Mapping[str, str]) -> tuple[Any, str]:
    fs, path = fsspec.core.url_to_fs(uri, **_fs_kwargs(uri, storage))
    return fs, str(path)


def _fs_kwargs(uri: str, storage: Mapping[str, str]) -> dict[str, Any]:
    if not uri.startswith(("s3://", "s3a://")):
        return {}
    kwargs: dict[str, Any] = {}
    client: dict[str, Any] = {}
    lowered = {k.lower(): v for k, v in storage.items()}
    for key, value in lowered.items():
        if key in _S3_KEYS:
            kwargs[_S3_KEYS[key]] = value
    endpoint = lowered.get("aws_endpoint") or lowered.get("endpoint")
    if endpoint:
        client["endpoint_url"] = endpoint
    region = lowered.get("aws_region") or lowered.get("region")
    if region:
        client["region_name"] = region
    if client:
        kwargs["client_kwargs"] = client
    return kwargs
