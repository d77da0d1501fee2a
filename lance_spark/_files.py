"""Deleting data files a failed job wrote (local paths and object stores, via fsspec)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import fsspec

_log = logging.getLogger(__name__)

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


def delete_files(uris: Iterable[str], *, storage: Mapping[str, str]) -> int:
    """Delete the given files; a file already gone is fine. Returns how many were removed."""
    removed = 0
    for uri in uris:
        fs, path = fsspec.core.url_to_fs(uri, **_fs_kwargs(uri, storage))
        if fs.exists(path):
            fs.rm(path)
            removed += 1
    _log.info("removed %d data file(s) of an aborted write", removed)
    return removed


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
