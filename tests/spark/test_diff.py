"""LanceTable.diff: the change feed (per commit by stable row id, or net by key).

Every expected result is derived from pylance reads of the versions involved: for each
commit, rows only in the newer version are inserts, rows only in the older one deletes, and
rows whose values differ an update_preimage / update_postimage pair.
"""

from __future__ import annotations

from typing import Any

import lance
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from lance_spark import LanceTable
from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, VersionNotFoundError

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]

Change = tuple[Any, ...]  # (_commit_version, _change_type, *the table's columns)


def _table(spark: SparkSession, uri: str, n: int = 8) -> LanceTable:
    spark.range(0, n, numPartitions=2).selectExpr(
        "id", "concat('l', id) AS label", "cast(id * 10 AS int) AS score"
    ).write.format("lance").mode("append").save(uri)
    return LanceTable.forPath(spark, uri)


def _result(df: DataFrame) -> list[Change]:
    assert df.columns[-2:] == ["_change_type", "_commit_version"]
    names = df.columns[:-2]
    rows = df.collect()
    return sorted(
        ((r["_commit_version"], r["_change_type"], *(r[n] for n in names)) for r in rows),
        key=repr,
    )


def _version(uri: str, version: int, columns: list[str]) -> tuple[set[str], dict[Any, Change]]:
    """Version ``version`` read with pylance: its columns, and its rows by id (with None for
    the ``columns`` it lacks)."""
    if version == 0:
        return set(columns), {}
    table = lance.dataset(uri, version=version).to_table()
    rows = {r["id"]: tuple(r.get(c) for c in columns) for r in table.to_pylist()}
    return set(table.column_names), rows


def _differ(columns: list[str], both: set[str], old: Change, new: Change) -> bool:
    """Values differ in a column both versions have (an added column is no update)."""
    return any(o != n for c, o, n in zip(columns, old, new, strict=True) if c in both)


def _expected(uri: str, start: int, end: int, columns: list[str]) -> list[Change]:
    """Per-commit changes of (start, end] computed from pylance reads, matched by id."""
    out: list[Change] = []
    for version in range(start + 1, end + 1):
        old_cols, before = _version(uri, version - 1, columns)
        new_cols, after = _version(uri, version, columns)
        out += _compare(version, columns, old_cols & new_cols, before, after)
    return sorted(out, key=repr)


def _expected_net(uri: str, start: int, end: int, columns: list[str]) -> list[Change]:
    """Net changes from start to end computed from pylance reads, matched by id."""
    old_cols, before = _version(uri, start, columns)
    new_cols, after = _version(uri, end, columns)
    return sorted(_compare(end, columns, old_cols & new_cols, before, after), key=repr)


def _compare(
    version: int,
    columns: list[str],
    both: set[str],
    before: dict[Any, Change],
    after: dict[Any, Change],
) -> list[Change]:
    out: list[Change] = [(version, "delete", *before[i]) for i in before.keys() - after.keys()]
    out += [(version, "insert", *after[i]) for i in after.keys() - before.keys()]
    for i in before.keys() & after.keys():
        if _differ(columns, both, before[i], after[i]):
            out += [
                (version, "update_preimage", *before[i]),
                (version, "update_postimage", *after[i]),
            ]
    return out


COLUMNS = ["id", "label", "score"]


def test_append_is_insert(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    spark.createDataFrame([(100, "new", 1)], "id long, label string, score int").write.format(
        "lance"
    ).mode("append").save(table_uri)
    df = t.diff(1)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"),
        ("label", "string"),
        ("score", "int"),
        ("_change_type", "string"),
        ("_commit_version", "bigint"),
    ]
    assert _result(df) == [(2, "insert", 100, "new", 1)]
    assert _result(df) == _expected(table_uri, 1, 2, COLUMNS)


def test_update_has_pre_and_post_images(spark: SparkSession, table_uri: str) -> None:
    _table(spark, table_uri)
    lance.dataset(table_uri).update({"label": "'B'", "score": "score + 1"}, where="id IN (2, 5)")
    assert _result(LanceTable.forPath(spark, table_uri).diff(1)) == [
        (2, "update_postimage", 2, "B", 21),
        (2, "update_postimage", 5, "B", 51),
        (2, "update_preimage", 2, "l2", 20),
        (2, "update_preimage", 5, "l5", 50),
    ]


def test_delete_is_delete(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    lance.dataset(table_uri).delete("id >= 6")
    assert _result(t.diff(1)) == [(2, "delete", 6, "l6", 60), (2, "delete", 7, "l7", 70)]


def test_sequence_of_commits_per_commit_version(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, n=20)
    extra = pa.table(
        {
            "id": pa.array([100, 101], pa.int64()),
            "label": ["a", "b"],
            "score": pa.array([1, 2], pa.int32()),
        }
    )
    lance.write_dataset(extra, table_uri, mode="append")  # v2
    lance.dataset(table_uri).update({"label": "'x'"}, where="id = 3")  # v3
    lance.dataset(table_uri).delete("id = 4 OR id = 100")  # v4
    lance.dataset(table_uri).update({"label": "'y'"}, where="id = 3")  # v5: id 3 again
    t.update("id = 5 OR id = 101", {"score": "score * 2"})  # v6, through the connector
    t.delete("id = 6")  # v7
    spark.createDataFrame([(200, "s", 9)], "id long, label string, score int").write.format(
        "lance"
    ).mode("append").save(table_uri)  # v8
    t.optimize().executeCompaction()  # moves rows: no change
    t.createIndex("id", "BTREE")  # no change
    end = lance.dataset(table_uri).version
    assert end >= 10

    everything = _result(t.diff(1))
    assert everything == _expected(table_uri, 1, end, COLUMNS)
    assert [c for c in everything if c[2] == 3] == [
        (3, "update_postimage", 3, "x", 30),
        (3, "update_preimage", 3, "l3", 30),
        (5, "update_postimage", 3, "y", 30),
        (5, "update_preimage", 3, "x", 30),
    ]
    assert {c[0] for c in everything} == set(range(2, 9))  # nothing after version 8
    # endVersion defaults to the latest; a sub-range; from before the first version
    assert _result(t.diff(1, end)) == everything
    assert _result(t.diff(3, 6)) == _expected(table_uri, 3, 6, COLUMNS)
    assert _result(t.diff(0, 2)) == _expected(table_uri, 0, 2, COLUMNS)
    assert len([c for c in _result(t.diff(0, 2)) if c[1] == "insert"]) == 22
    assert _result(t.diff(8)) == []  # compaction and index only


def test_update_through_lance_table_keeps_row_identity(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    t.update("id = 1", {"label": "'one'"})
    t.delete("id = 2")
    assert _result(t.diff(1)) == [
        (2, "update_postimage", 1, "one", 10),
        (2, "update_preimage", 1, "l1", 10),
        (3, "delete", 2, "l2", 20),
    ]


def test_update_to_the_same_value_is_still_an_update(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri)
    lance.dataset(table_uri).update({"label": "label"}, where="id = 7")
    assert _result(t.diff(1)) == [
        (2, "update_postimage", 7, "l7", 70),
        (2, "update_preimage", 7, "l7", 70),
    ]


def test_added_column_is_null_in_older_versions(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, n=4)
    lance.dataset(table_uri).delete("id = 0")  # v2
    lance.dataset(table_uri).add_columns({"bonus": "score + 1"})  # v3: no row change
    lance.dataset(table_uri).update({"bonus": "0"}, where="id = 1")  # v4
    columns = [*COLUMNS, "bonus"]
    result = _result(t.diff(1))
    assert result == [
        (2, "delete", 0, "l0", 0, None),
        (4, "update_postimage", 1, "l1", 10, 0),
        (4, "update_preimage", 1, "l1", 10, 11),
    ]
    assert result == _expected(table_uri, 1, 4, columns)
    assert t.diff(1).columns == [*columns, "_change_type", "_commit_version"]


def test_restore_and_overwrite(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, n=4)
    t.update("id = 1", {"label": "'one'"})  # v2
    t.delete("id = 2")  # v3
    t.restoreToVersion(1)  # v4: undoes both
    spark.createDataFrame([(9, "nine", 90)], "id long, label string, score int").write.format(
        "lance"
    ).mode("overwrite").save(table_uri)  # v5
    result = _result(t.diff(3))
    assert result == _expected(table_uri, 3, 5, COLUMNS)
    assert [c for c in result if c[0] == 4] == [
        (4, "insert", 2, "l2", 20),
        (4, "update_postimage", 1, "l1", 10),
        (4, "update_preimage", 1, "one", 10),
    ]
    assert sorted(c[1] for c in result if c[0] == 5) == ["delete"] * 4 + ["insert"]


def test_nested_and_map_columns(spark: SparkSession, table_uri: str) -> None:
    spark.sql(
        "SELECT id, map('k', cast(id AS int)) AS m, named_struct('a', id, 'b', 'x') AS s "
        "FROM range(4)"
    ).write.format("lance").mode("append").save(table_uri)
    t = LanceTable.forPath(spark, table_uri)
    t.update("id = 1", {"m": "map('k', 100)", "s": "named_struct('a', 100L, 'b', 'y')"})  # v2
    t.restoreToVersion(1)  # v3: compared by value (maps as JSON)
    result = [(c[0], c[1], c[2], c[3], tuple(c[4])) for c in _result(t.diff(1))]
    assert result == [
        (2, "update_postimage", 1, {"k": 100}, (100, "y")),
        (2, "update_preimage", 1, {"k": 1}, (1, "x")),
        (3, "update_postimage", 1, {"k": 1}, (1, "x")),
        (3, "update_preimage", 1, {"k": 100}, (100, "y")),
    ]
    # by key: versions 1 and 3 hold the same rows
    assert _result(t.diff(1, key="id")) == []
    assert len(_result(t.diff(1, 2, key="id"))) == 2


def test_metadata_row_version_columns(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, n=3)
    t.update("id = 1", {"label": "'one'"})
    rows = (
        spark.read.format("lance")
        .option("metadata_columns", "_row_created_at_version,_row_last_updated_at_version")
        .load(table_uri)
        .collect()
    )
    versions = {r.id: (r._row_created_at_version, r._row_last_updated_at_version) for r in rows}
    assert versions == {0: (1, 1), 1: (1, 2), 2: (1, 1)}


# --- by key (tables without stable row ids) -------------------------------------------------------


def _unstable(uri: str) -> None:
    first = pa.table(
        {"id": [1, 2, 3, 4], "label": ["a", "b", "c", "d"], "tags": [[1], [2], [], None]}
    )
    lance.write_dataset(first, uri, enable_stable_row_ids=False)  # v1
    lance.dataset(uri).update({"label": "'B'"}, where="id = 2")  # v2
    lance.dataset(uri).delete("id = 3")  # v3
    more = pa.table({"id": [5], "label": ["e"], "tags": [[5, 5]]})
    lance.write_dataset(more, uri, mode="append")  # v4
    lance.dataset(uri).update({"label": "'b'"}, where="id = 2")  # v5: back to the start
    lance.dataset(uri).update({"tags": "[4]"}, where="id = 4")  # v6


def test_key_mode_on_a_table_without_stable_row_ids(spark: SparkSession, table_uri: str) -> None:
    _unstable(table_uri)
    assert not lance.dataset(table_uri).has_stable_row_ids
    t = LanceTable.forPath(spark, table_uri)
    with pytest.raises(InvalidOptionError, match=r"stable row ids.*key="):
        t.diff(1)
    columns = ["id", "label", "tags"]
    net = _result(t.diff(1, key="id"))
    assert net == [
        (6, "delete", 3, "c", []),
        (6, "insert", 5, "e", [5, 5]),
        (6, "update_postimage", 4, "d", [4]),
        (6, "update_preimage", 4, "d", None),
    ]  # id 2 changed and changed back: no net change
    assert net == _expected_net(table_uri, 1, 6, columns)
    assert _result(t.diff(1, 3, key=["id"])) == [
        (3, "delete", 3, "c", []),
        (3, "update_postimage", 2, "B", [2]),
        (3, "update_preimage", 2, "b", [2]),
    ]
    assert len(_result(t.diff(0, 1, key="id"))) == 4  # all inserts of version 1
    assert _result(t.diff(4, key=["id", "label"])) == [
        (6, "delete", 2, "B", [2]),
        (6, "insert", 2, "b", [2]),
        (6, "update_postimage", 4, "d", [4]),
        (6, "update_preimage", 4, "d", None),
    ]


def test_key_must_be_unique(spark: SparkSession, table_uri: str) -> None:
    lance.write_dataset(pa.table({"id": [1, 1], "v": [1, 2]}), table_uri)
    lance.write_dataset(pa.table({"id": [2], "v": [3]}), table_uri, mode="append")
    with pytest.raises(Exception, match=r"diff key \(id\) is not unique in version [12] "):
        LanceTable.forPath(spark, table_uri).diff(1, key="id").collect()


# --- errors ---------------------------------------------------------------------------------------


def test_errors(spark: SparkSession, table_uri: str) -> None:
    t = _table(spark, table_uri, n=2)
    t.delete("id = 0")  # v2
    with pytest.raises(VersionNotFoundError, match=r"version 7 .*existing versions: 1-2"):
        t.diff(7)
    with pytest.raises(VersionNotFoundError, match="version 9 "):
        t.diff(1, 9)
    with pytest.raises(InvalidOptionError, match=r"startVersion=2.*endVersion=2"):
        t.diff(2)
    with pytest.raises(InvalidOptionError, match=r"startVersion=2.*endVersion=1"):
        t.diff(2, 1)
    with pytest.raises(
        InvalidOptionError, match=r"diff\(\) argument 'startVersion' takes .* not -1"
    ):
        t.diff(-1)
    with pytest.raises(TypeError, match=r"argument 'startVersion' takes .* not True \(a bool\)"):
        t.diff(True)
    with pytest.raises(ColumnNotFoundError, match=r"'nope'.*columns: id, label, score"):
        t.diff(1, key="nope")
    with pytest.raises(InvalidOptionError, match="key"):
        t.diff(1, key=[])
