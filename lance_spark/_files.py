"""Files a write job leaves behind: per-job staging markers and deleting aborted data files.

Spark calls ``abort`` as soon as a job fails, while other tasks may still be running; their
data files would be written after ``abort`` ran and never be referenced. So each task
records the files it wrote in a marker under ``<table>/_lance_spark/staging/<job>/`` and
then checks whether the job was aborted; ``abort`` first marks the job aborted, then
deletes what every marker names. Whatever the interleaving, one of the two sees the other.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import fsspec

_log = logging.getLogger(__name__)

STAGING_DIR = "_lance_spark/staging"
ABORTED_MARKER = "_ABORTED"

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


def record_task_files(
    table_uri: str,
    job_id: str,
    paths: list[str],
    *,
    storage: Mapping[str, str],
    other_paths: list[str] | None = None,
) -> None:
    """Task side, after writing: note the files (``paths`` relative to ``data/``,
    ``other_paths`` relative to the table root, such as deletion files); if the job was
    aborted meanwhile, delete them."""
    job_dir = _job_dir(table_uri, job_id)
    fs, root = _fs(job_dir, storage)
    fs.makedirs(root, exist_ok=True)
    others = list(other_paths or [])
    with fs.open(f"{root}/{uuid.uuid4().hex}.json", "w") as out:
        json.dump({"files": paths, "other_files": others}, out)
    if fs.exists(f"{root}/{ABORTED_MARKER}"):
        delete_files(_uris(table_uri, paths, others), storage=storage)


def abort_job(
    table_uri: str, job_id: str, known_paths: Iterable[str], *, storage: Mapping[str, str]
) -> int:
    """Driver side: mark the job aborted, then delete every file its tasks recorded."""
    job_dir = _job_dir(table_uri, job_id)
    fs, root = _fs(job_dir, storage)
    paths = set(known_paths)
    try:
        fs.makedirs(root, exist_ok=True)
        fs.touch(f"{root}/{ABORTED_MARKER}")
    except (FileNotFoundError, PermissionError) as err:
        # The table's location cannot be written at all (no such bucket, no rights): no task
        # can have written a file there either; delete what the messages name, if anything.
        _log.warning("cannot mark write job %s aborted at %s: %s", job_id, table_uri, err)
        return delete_files([data_file_uri(table_uri, p) for p in sorted(paths)], storage=storage)
    others: set[str] = set()
    for marker in fs.glob(f"{root}/*.json"):
        with fs.open(marker, "r") as src:
            recorded = json.load(src)
        paths.update(recorded["files"])
        others.update(recorded.get("other_files", []))
    return delete_files(_uris(table_uri, sorted(paths), sorted(others)), storage=storage)


def finish_job(table_uri: str, job_id: str, *, storage: Mapping[str, str]) -> None:
    """Driver side, after a successful commit: the markers are no longer needed."""
    fs, root = _fs(_job_dir(table_uri, job_id), storage)
    if fs.exists(root):
        fs.rm(root, recursive=True)
    # Local file systems keep empty folders; object stores have none to remove.
    for parent in (root.rsplit("/", 1)[0], root.rsplit("/", 2)[0]):
        if fs.isdir(parent) and not fs.ls(parent):
            fs.rmdir(parent)


def delete_files(uris: Iterable[str], *, storage: Mapping[str, str]) -> int:
    """Delete the given files; a file already gone is fine. Returns how many were removed."""
    removed = 0
    for uri in uris:
        fs, path = _fs(uri, storage)
        if fs.exists(path):
            fs.rm(path)
            removed += 1
    if removed:
        _log.info("removed %d data file(s) of an aborted write", removed)
    return removed


def _uris(table_uri: str, data_paths: Iterable[str], other_paths: Iterable[str]) -> list[str]:
    return [data_file_uri(table_uri, p) for p in data_paths] + [
        table_file_uri(table_uri, p) for p in other_paths
    ]


def _job_dir(table_uri: str, job_id: str) -> str:
    return f"{table_uri.rstrip('/')}/{STAGING_DIR}/{job_id}"


def _fs(uri: str, storage: Mapping[str, str]) -> tuple[Any, str]:
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
