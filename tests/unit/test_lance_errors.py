"""What :mod:`lance_spark.source.lance_errors` recognises, provoked from the installed pylance:
a pylance upgrade that rewords an error fails here, not silently in the connector."""

from __future__ import annotations

import pathlib

import lance
import pyarrow as pa
import pytest

from lance_spark.source import lance_errors


def _table(tmp_path: pathlib.Path, name: str = "t.lance") -> str:
    uri = str(tmp_path / name)
    lance.write_dataset(pa.table({"k": list(range(10))}), uri)
    return uri


def _raised(call: object) -> BaseException:
    with pytest.raises(BaseException) as raised:
        call()  # type: ignore[operator]
    return raised.value


def test_a_missing_table_and_a_missing_version_are_not_found(tmp_path: pathlib.Path) -> None:
    missing_table = _raised(lambda: lance.dataset(str(tmp_path / "none.lance")))
    ds = lance.dataset(_table(tmp_path))
    missing_version = _raised(lambda: ds.checkout_version(9))
    for err in (missing_table, missing_version):
        assert lance_errors.is_not_found(err), err
        assert lance_errors.damage(err) is None
        assert lance_errors.commit_conflict(err) is None
        assert ".rs:" not in lance_errors.first_line(err)
    assert not lance_errors.is_not_found(ValueError("bad value"))


def test_a_damaged_manifest_is_damage_not_absence(tmp_path: pathlib.Path) -> None:
    uri = _table(tmp_path)
    (manifest,) = (pathlib.Path(uri) / "_versions").glob("*.manifest")
    manifest.write_bytes(manifest.read_bytes()[:10])
    err = _raised(lambda: lance.dataset(uri))
    reason = lance_errors.damage(err)
    assert reason is not None and ".rs:" not in reason
    assert not lance_errors.is_not_found(err)


def test_a_missing_data_file_is_named(tmp_path: pathlib.Path) -> None:
    uri = _table(tmp_path)
    (data,) = (pathlib.Path(uri) / "data").iterdir()
    data.unlink()
    err = _raised(lambda: lance.dataset(uri).to_table())
    named = lance_errors.missing_file(str(err))
    assert named is not None and named.endswith(data.name)


def test_commit_conflicts_say_whether_they_are_retryable(tmp_path: pathlib.Path) -> None:
    uri = _table(tmp_path)
    delete = lance.LanceOperation.Update(removed_fragment_ids=[0], updated_fragments=[])
    lance.LanceDataset.commit(uri, lance.Transaction(read_version=1, operation=delete))
    preempted = _raised(
        lambda: lance.LanceDataset.commit(uri, lance.Transaction(read_version=1, operation=delete))
    )
    assert lance_errors.commit_conflict(preempted) == lance_errors.Conflict(retryable=True)
    lance.write_dataset(pa.table({"k": [1]}), uri, mode="overwrite")  # version 3
    incompatible = _raised(
        lambda: lance.LanceDataset.commit(uri, lance.Transaction(read_version=2, operation=delete))
    )
    assert lance_errors.commit_conflict(incompatible) == lance_errors.Conflict(retryable=False)
    assert lance_errors.commit_conflict(ValueError("conflict")) is None
    assert lance.dataset(uri).version == 3
