"""The catalogs' ALTER TABLE on a Lance table (``folder_catalog.alter_table``, what the
companion's session catalog asks Python): each statement is one Lance version, a refused one
changes nothing; no JVM."""

from __future__ import annotations

import re
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, StringType

from lance_spark.errors import InvalidArgumentError, InvalidOptionError, SchemaMismatchError
from lance_spark.table import folder_catalog


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"id": [1, 2], "name": ["a", "b"]}), path)
    return path


def _alter(uri: str, *changes: dict[str, object]) -> None:
    folder_catalog.alter_table(uri, {}, {"location": uri, "changes": list(changes)})


def test_add_columns_and_properties_are_one_version_each(uri: str) -> None:
    _alter(
        uri,
        {"kind": "add_column", "path": ["note"], "type": StringType().json(), "comment": "free"},
        {"kind": "add_column", "path": ["score"], "type": DoubleType().json(), "comment": None},
    )
    ds = lance.dataset(uri)
    assert ds.schema.names == ["id", "name", "note", "score"]
    assert ds.schema.field("note").metadata == {b"comment": b"free"}
    version = ds.version
    _alter(
        uri,
        {"kind": "set_property", "key": "team", "value": "ml"},
        {"kind": "set_property", "key": "reviewed", "value": "true"},
    )
    assert lance.dataset(uri).version == version + 1
    assert lance.dataset(uri).config() == {"team": "ml", "reviewed": "true"}
    # The same values again (a catalog entry kept in step): no version.
    _alter(uri, {"kind": "set_property", "key": "team", "value": "ml"})
    assert lance.dataset(uri).version == version + 1


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (
            [
                {"kind": "delete_column", "path": ["id"], "if_exists": False},
                {"kind": "delete_column", "path": ["name"], "if_exists": False},
                {"kind": "add_column", "path": ["x"], "type": StringType().json()},
            ],
            InvalidOptionError,
            "REPLACE COLUMNS is not supported",
        ),
        (
            [{"kind": "set_property", "key": "location", "value": "/elsewhere"}],
            InvalidOptionError,
            "SET LOCATION is not supported",
        ),
        (
            [
                {"kind": "delete_column", "path": ["id"], "if_exists": False},
                {"kind": "delete_column", "path": ["name"], "if_exists": False},
            ],
            SchemaMismatchError,
            "every column",
        ),
        (
            [{"kind": "update_nullability", "path": ["id"], "nullable": False}],
            SchemaMismatchError,
            "NOT NULL",
        ),
        (
            [{"kind": "unsupported", "description": "UpdateColumnPosition(id, FIRST)"}],
            InvalidOptionError,
            r"cannot UpdateColumnPosition\(id, FIRST\)",
        ),
    ],
)
def test_refused_changes_commit_nothing(
    uri: str, changes: list[dict[str, object]], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        _alter(uri, *changes)
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.schema.names == ["id", "name"]


def test_catalog_names_are_one_folder_under_the_root(tmp_path: Path) -> None:
    """``folder_catalog.check_name``, every catalog request's rule: a namespace or table name
    that is empty, '.', '..' or holds a path separator or a scheme is refused naming it; the
    request touches no storage (the victim next to the root stays)."""
    root = str(tmp_path / "db")
    victim = tmp_path / "victim.lance"
    lance.write_dataset(pa.table({"id": [1]}), str(victim))
    assert folder_catalog.table_location(root, {"namespace": ["a", "b"], "name": "t"}) == (
        f"{root}/a/b/t.lance"
    )
    bad = ["", " ", ".", "..", "../victim", "a/../../x", "/abs", "a\\b", "s3://b/k", "file:x"]
    for name in bad:
        for args in ({"namespace": [name], "name": "t"}, {"namespace": ["ns"], "name": name}):
            kind = "namespace" if args["namespace"] == [name] else "table"
            with pytest.raises(
                InvalidArgumentError, match=f"the {kind} name {re.escape(repr(name))}"
            ):
                folder_catalog.drop_table(root, {}, {**args, "catalog": "db"})
        with pytest.raises(InvalidArgumentError, match="namespace name"):
            folder_catalog.create_namespace(root, {}, {"namespace": [name]})
    with pytest.raises(InvalidArgumentError, match=r"db\.`\.\.`\.`victim`"):
        folder_catalog.drop_table(
            root, {}, {"namespace": [".."], "name": "victim", "catalog": "db"}
        )
    assert lance.dataset(str(victim)).count_rows() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.lance"]
