"""pylance's errors for damaged files become CorruptTableError naming the table and the file
(no JVM: lance_spark.source.dataset directly). One case per kind of damage checked against
pylance 14.0.2; other errors keep their own type."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark.errors import CorruptTableError, TableNotFoundError, VersionNotFoundError
from lance_spark.source import dataset as _dataset
from lance_spark.source.options import TimeTravel


def _make(tmp_path: Path) -> str:
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": pa.array([0, 1, 2], pa.int64())}), uri)
    lance.write_dataset(pa.table({"id": pa.array([3, 4], pa.int64())}), uri, mode="append")
    return uri


def _manifest(uri: str, version: int) -> str:
    return f"{uri}/_versions/{2**64 - 1 - version:020d}.manifest"


def _damage(path: str, how: str) -> None:
    data = Path(path).read_bytes()
    if how == "truncate":
        Path(path).write_bytes(data[: len(data) // 2])
    elif how == "empty":
        Path(path).write_bytes(b"")
    elif how == "garbage":
        Path(path).write_bytes(os.urandom(len(data)))
    elif how == "garbage, footer kept":  # pylance panics on this one
        Path(path).write_bytes(os.urandom(len(data) - 16) + data[-16:])
    elif how == "delete":
        os.remove(path)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncate", "empty", "garbage", "garbage, footer kept"])
def test_damaged_latest_manifest(tmp_path: Path, how: str) -> None:
    uri = _make(tmp_path)
    manifest = _manifest(uri, 2)
    assert os.path.exists(manifest)
    _damage(manifest, how)
    for open_it in (
        lambda: _dataset.open_latest(uri, storage={}),
        lambda: _dataset.open_version(uri, 2, storage={}),
        lambda: _dataset.table_exists(uri, storage={}),
        lambda: _dataset.open_resolved(uri, TimeTravel(), storage={}),
    ):
        with pytest.raises(CorruptTableError) as info:
            open_it()
        err = info.value
        assert (err.table_uri, err.path) == (uri, manifest)
        assert uri in str(err) and manifest in str(err) and "version 2" in str(err)
        assert "'versionAsOf', 1" in str(err)
    # the intact version still opens, also through time travel
    assert _dataset.open_version(uri, 1, storage={}).count_rows() == 3
    assert _dataset.open_resolved(uri, TimeTravel(version=1), storage={}).count_rows() == 3


@pytest.mark.parametrize("how", ["truncate", "empty", "garbage"])
def test_damaged_older_manifest_in_the_version_list(tmp_path: Path, how: str) -> None:
    uri = _make(tmp_path)
    _damage(_manifest(uri, 1), how)
    latest = _dataset.open_latest(uri, storage={})  # the latest manifest is intact
    with pytest.raises(CorruptTableError) as info:
        _dataset.version_timestamps(latest)  # reads every manifest
    assert uri in str(info.value) or str(latest.uri) in str(info.value)


@pytest.mark.parametrize("how", ["delete", "truncate", "empty", "garbage"])
def test_damaged_data_file(tmp_path: Path, how: str) -> None:
    uri = _make(tmp_path)
    ds = _dataset.open_latest(uri, storage={})
    fragment = ds.get_fragments()[-1]
    file = f"{uri}/data/{fragment.metadata.files[0].path}"
    _damage(file, how)
    with (
        pytest.raises(CorruptTableError) as info,
        _dataset.reading_data(uri, ds, [0, fragment.fragment_id], storage={}),
    ):
        ds.to_table()
    err = info.value
    assert (err.table_uri, err.path) == (uri, file)
    assert f"fragment {fragment.fragment_id}" in str(err) and file in str(err)
    # fragment 0 alone is intact
    with _dataset.reading_data(uri, ds, [0], storage={}):
        assert ds.scanner(fragments=[ds.get_fragment(0)]).to_table().num_rows == 3


def test_other_errors_keep_their_type(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        _dataset.open_latest(str(tmp_path / "absent.lance"), storage={})
    uri = _make(tmp_path)
    with pytest.raises(VersionNotFoundError):
        _dataset.open_resolved(uri, TimeTravel(version=7), storage={})
    ds = _dataset.open_latest(uri, storage={})
    with (  # not a damaged file: untouched
        pytest.raises(ValueError, match="nope") as info,
        _dataset.reading_data(uri, ds, [0], storage={}),
    ):
        raise ValueError("nope")
    assert not isinstance(info.value, CorruptTableError)
