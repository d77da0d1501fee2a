"""The files that let an idempotent write tell, without reading the table's history, whether
its application already committed: ``<table>/_lance_spark/txn/<hash of the app id>/``.

- ``attempt-<uuid>.json`` ``{read_version: R}``: written before a writer's first commit
  attempt, removed by it only once the outcome is recorded (a state file when it committed).
  A writer that dies in between leaves it behind: a commit of the application may then be in
  a version after ``R`` that no state file covers.
- ``state-<C>.json`` ``{txn_version: N, table_version: V}``: the highest transaction version
  the application committed among the table versions up to ``C`` is ``N``, in version ``V``
  (both null: none). Written by a writer after its commit (``C``: its commit's version) and
  by a check that had to read versions (``C``: the newest it read). Every state file is true,
  so the one with the highest ``C`` says the most; a file is only ever (re)written with the
  same content (two writers of the same ``C`` know the same thing), which an object store's
  plain put allows.

So, listing the attempts AFTER opening the table's latest version L and the states after the
attempts: a commit of the application at a version ``<= L`` either has its attempt file in
the listing (so it lies after that attempt's ``R``) or its state file was written before the
attempt was removed, so a state file with ``C >= V`` is in the second listing.
(:func:`lance_spark.source.transactions.newest_commit` relies on that.)

They are a cache: the commits' transaction properties are the record. An application
with no state file here (the folder was copied or restored without them, ``_lance_spark``
was removed, or it never wrote) has the table's history read instead
(:mod:`lance_spark.source.transactions`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lance_spark.errors import CommitConflictError, CorruptTableError
from lance_spark.source.staging import file_mtime, is_local, table_fs

_log = logging.getLogger(__name__)

TXN_DIR = "_lance_spark/txn"
_ATTEMPT = "attempt-"
_STATE = "state-"
_SUFFIX = ".json"
_PARTIAL = ".part"
# State files kept per application besides the newest (a reader that listed an older newest
# one while this many newer ones were written re-lists).
KEEP_STATES = 4
_READ_ATTEMPTS = 10


@dataclass(frozen=True)
class Attempt:
    path: str  # in the table's file system
    read_version: int
    mtime: float


@dataclass(frozen=True)
class State:
    covers: int  # C: the answer holds for the versions up to this one
    txn_version: int | None  # N: None when the application committed nothing up to C
    table_version: int | None  # V


@dataclass(frozen=True)
class Markers:
    attempts: tuple[Attempt, ...]
    state: State | None  # the one with the highest C


def app_dir(table_uri: str, app_id: str) -> str:
    digest = hashlib.sha256(app_id.encode()).hexdigest()[:32]
    return f"{table_uri.rstrip('/')}/{TXN_DIR}/{digest}"


def read(table_uri: str, app_id: str, *, storage: Mapping[str, str]) -> Markers:
    """The application's attempt files, then its newest state file (in that order: see the
    module's docstring)."""
    fs, root = table_fs(app_dir(table_uri, app_id), storage)
    attempts = tuple(_read_attempt(fs, path, info) for path, info in _listed(fs, root, _ATTEMPT))
    for _ in range(_READ_ATTEMPTS):
        states = sorted(_listed(fs, root, _STATE))
        if not states:
            return Markers(tuple(a for a in attempts if a is not None), None)
        try:
            doc = _load(fs, states[-1][0])
        except FileNotFoundError:  # pruned by a writer of newer ones meanwhile
            continue
        state = State(_covers(states[-1][0]), doc.get("txn_version"), doc.get("table_version"))
        return Markers(tuple(a for a in attempts if a is not None), state)
    raise CommitConflictError(
        f"the transaction state files of application {app_id!r} under {root} kept changing "
        "while they were read (another writer of the same txnAppId); nothing was committed, "
        "run the job again"
    )


def begin_attempt(
    table_uri: str, app_id: str, *, read_version: int, storage: Mapping[str, str]
) -> str:
    """Write an attempt file; returns its path (for :func:`end_attempt`)."""
    fs, root = table_fs(app_dir(table_uri, app_id), storage)
    path = f"{root}/{_ATTEMPT}{uuid.uuid4().hex}{_SUFFIX}"
    _write(fs, path, {"app_id": app_id, "read_version": int(read_version)})
    return path


def end_attempt(table_uri: str, path: str, *, storage: Mapping[str, str]) -> None:
    """Remove the attempt file at ``path`` (in the file system of the table at
    ``table_uri``: an object store's paths carry no scheme)."""
    fs, _ = table_fs(table_uri, storage)
    with contextlib.suppress(FileNotFoundError):  # vacuum settled it already
        fs.rm(path)


def record_state(
    table_uri: str,
    app_id: str,
    *,
    covers: int,
    txn_version: int | None,
    table_version: int | None,
    storage: Mapping[str, str],
) -> None:
    """Write ``state-<covers>.json`` (see the module's docstring: the caller knows the answer
    for every version up to ``covers``), then prune all but the newest few."""
    fs, root = table_fs(app_dir(table_uri, app_id), storage)
    path = f"{root}/{_STATE}{covers:020d}{_SUFFIX}"
    doc = {"app_id": app_id, "txn_version": txn_version, "table_version": table_version}
    _write(fs, path, doc)
    states = sorted(p for p, _ in _listed(fs, root, _STATE))
    for old in states[: -(KEEP_STATES + 1)]:
        with contextlib.suppress(FileNotFoundError):  # another writer pruned it
            fs.rm(old)


def app_ids(table_uri: str, *, storage: Mapping[str, str]) -> list[str]:
    """The folders of the applications with markers (full paths)."""
    fs, root = table_fs(f"{table_uri.rstrip('/')}/{TXN_DIR}", storage)
    fs.invalidate_cache(root)
    try:
        return sorted(str(p) for p in fs.ls(root, detail=False))
    except FileNotFoundError:
        return []


def app_id_of(folder: str, *, storage: Mapping[str, str]) -> str | None:
    """The application whose markers are in ``folder`` (None: no readable marker)."""
    fs, root = table_fs(folder, storage)
    for path, _ in sorted(_listed(fs, root, "")):
        try:
            app = _load(fs, path).get("app_id")
        except (OSError, ValueError):  # CorruptTableError is an OSError; bad JSON a ValueError
            continue
        if isinstance(app, str):
            return app
    return None


def stale_attempts(folder: str, *, cutoff: float, storage: Mapping[str, str]) -> list[Attempt]:
    """The attempt files in ``folder`` last modified before ``cutoff``."""
    fs, root = table_fs(folder, storage)
    found = (_read_attempt(fs, p, info) for p, info in _listed(fs, root, _ATTEMPT))
    return [a for a in found if a is not None and a.mtime < cutoff]


def remove_partials(folder: str, *, cutoff: float, storage: Mapping[str, str]) -> int:
    """Delete the temporaries of writes killed before ``cutoff`` (local file systems)."""
    fs, root = table_fs(folder, storage)
    removed = 0
    try:
        listed = fs.ls(root, detail=True)
    except FileNotFoundError:
        return 0
    for info in listed:
        if str(info["name"]).endswith(_PARTIAL) and file_mtime(info) < cutoff:
            fs.rm(info["name"])
            removed += 1
    return removed


def _listed(fs: Any, root: str, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    fs.invalidate_cache(root)
    try:
        listed = fs.ls(root, detail=True)
    except FileNotFoundError:
        return []
    out = []
    for info in listed:
        name = str(info["name"]).rsplit("/", 1)[-1]
        if name.startswith(prefix) and name.endswith(_SUFFIX):
            out.append((str(info["name"]), info))
    return out


def _read_attempt(fs: Any, path: str, info: Mapping[str, Any]) -> Attempt | None:
    try:
        doc = _load(fs, path)
    except FileNotFoundError:
        return None  # its writer finished meanwhile (after recording a state)
    return Attempt(path, int(doc["read_version"]), file_mtime(info))


def _covers(path: str) -> int:
    return int(path.rsplit("/", 1)[-1][len(_STATE) : -len(_SUFFIX)])


def _load(fs: Any, path: str) -> dict[str, Any]:
    with fs.open(path, "r") as src:
        doc = json.load(src)
    if not isinstance(doc, dict):
        raise CorruptTableError(f"{path} is not a lance_spark transaction marker", path=path)
    return doc


def _write(fs: Any, path: str, doc: Mapping[str, Any]) -> None:
    """A whole file or none: an object store's put, or a local temporary renamed (its own
    name, as two writers may write the same state file at once)."""
    data = json.dumps(doc).encode()
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    partial = f"{path}.{uuid.uuid4().hex}{_PARTIAL}"
    for attempt in range(_READ_ATTEMPTS):
        try:
            fs.makedirs(os.path.dirname(path), exist_ok=True)
            fs.pipe_file(partial, data)
            break
        except FileNotFoundError:
            # A staging job that just ended removed the empty _lance_spark folder between
            # our makedirs and our write (staging._remove_empty_dirs): make it again.
            if attempt == _READ_ATTEMPTS - 1:
                raise
    os.replace(partial, path)
