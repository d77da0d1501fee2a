"""Lance tables through every kind of SQL client (tests/_sql_clients.py): a Lance table written
by pylance, declared with CREATE TABLE ... USING lance LOCATION, read, filtered and appended to
with SQL; versions, tags, timestamps, path identifiers and branches through the companion's
session catalog."""

from __future__ import annotations

import calendar
import re
from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _merge_cases import CASES, TARGET_SCHEMA, merge_sql, table_rows
from _sql_clients import (
    CLASSIC,
    SPARK_SQL,
    THRIFT,
    Outcome,
    Row,
    SqlClient,
    SqlClientError,
    rows_as_text,
    value_text,
)

from lance_spark.table.history import describe_version

# A refused statement and a pattern its error names (None: any error).
Refusal = tuple[str, str | None]


def _table_name(client: SqlClient, what: str) -> str:
    """A table name of its own per test and client kind (the classic and Connect catalogs
    live for the whole run)."""
    return f"clients_{what}_{client.kind.replace('-', '_')}"


def _script_then_drop(client: SqlClient, statements: list[str], *tables: str) -> list[list[Row]]:
    """The results of ``statements`` run as one script; ``tables`` dropped afterwards, also
    when a statement failed (the spark-sql CLI's metastore is its run's alone: no JVM for
    it)."""
    try:
        return client.sql_script(statements)
    finally:
        if client.kind != SPARK_SQL:
            for table in tables:
                client.sql(f"DROP TABLE IF EXISTS {table}")


def _refused(outcomes: list[Outcome], cases: list[Refusal]) -> None:
    """The last ``len(cases)`` outcomes of a ``sql_each`` are the cases' errors, each naming
    what it should (``None``: any error); the outcomes before them ran without one."""
    ran, failed = outcomes[: -len(cases)], outcomes[-len(cases) :]
    errors = [o for o in ran if isinstance(o, SqlClientError)]
    assert not errors, str(errors[0])
    for (statement, named), outcome in zip(cases, failed, strict=True):
        assert isinstance(outcome, SqlClientError), f"{statement!r} answered {outcome}"
        assert outcome.statement == statement, str(outcome)
        if named is not None:
            assert re.search(named, outcome.message), str(outcome)


def _write_pets(path: Path) -> None:
    """Version 1: ids 1-3; version 2 (when asked): id 4."""
    lance.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}), str(path)
    )


@pytest.mark.spark
def test_create_read_filter_insert(sql_client: SqlClient, tmp_path: Path) -> None:
    path = tmp_path / "pets.lance"
    _write_pets(path)
    name = _table_name(sql_client, "pets")
    results = sql_client.sql_script(
        [
            f"DROP TABLE IF EXISTS {name}",
            f"CREATE TABLE {name} USING lance LOCATION '{path}'",
            f"SELECT id, name FROM {name} WHERE id >= 2 ORDER BY id",
            f"INSERT INTO {name} VALUES (4, 'd'), (5, NULL)",
            f"SELECT count(*), count(name), max(id) FROM {name}",
            f"SELECT id, name FROM {name} WHERE name IS NULL OR id = 1 ORDER BY id",
            f"DESCRIBE HISTORY {name} LIMIT 1",
            f"DROP TABLE {name}",
            # How each client gives values: rows_as_text makes them the same text.
            "SELECT 1.5D, true, NULL, array(1, 2), 'x,y', CAST(2.50 AS DECIMAL(4, 2))",
        ]
    )
    assert rows_as_text(results[2]) == [("2", "b"), ("3", "c")]
    assert rows_as_text(results[4]) == [("5", "4", "5")]
    assert rows_as_text(results[5]) == [("1", "a"), ("5", "NULL")]
    # The table as pylance sees it: one more version, the rows inserted through the client.
    dataset = lance.dataset(str(path))
    assert dataset.version == 2
    table = dataset.to_table().sort_by("id")
    assert table["id"].to_pylist() == [1, 2, 3, 4, 5]
    assert table["name"].to_pylist() == ["a", "b", "c", "d", None]
    # The INSERT's history entry names the application, whichever client wrote it.
    insert = rows_as_text(results[6])
    assert [(r[0], r[2]) for r in insert] == [("2", "WRITE")]
    assert insert[0][6].startswith("local-"), insert
    assert rows_as_text(results[8]) == [("1.5", "true", "NULL", "[1,2]", "x,y", "2.50")]
    if sql_client.kind == CLASSIC:  # the typed client: Python values
        assert results[4] == [(5, 4, 5)]
    if sql_client.kind in (THRIFT, SPARK_SQL):  # the text clients: what they print
        assert results[4] == [("5", "4", "5")]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "NULL"),
        (True, "true"),
        (3, "3"),
        (1.5, "1.5"),
        (1e7, "1.0E7"),
        (1.5e-4, "1.5E-4"),
        (Decimal("2.50"), "2.50"),
        ([1, None, "a"], '[1,null,"a"]'),
        ({"k": [1.0]}, '{"k":[1.0]}'),
        ("NULL", "NULL"),
    ],
)
def test_value_text_prints_as_the_text_clients(value: object, text: str) -> None:
    assert value_text(value) == text


@pytest.mark.spark
def test_versions_tags_paths_and_branches_through_the_session_catalog(
    sql_client: SqlClient, tmp_path: Path
) -> None:
    """``VERSION AS OF`` (a number, a tag), ``TIMESTAMP AS OF``, ``lance.`path``` and a branch
    as ``t.branch_<name>``, read and written, through every client: the companion's session
    catalog serves them inside Spark (no client-side SQL handling); results against pylance."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    dataset = lance.write_dataset(
        pa.table({"id": pa.array([4], pa.int64()), "name": ["d"]}), str(path), mode="append"
    )
    dataset.tags.create("first", 1)
    dataset.create_branch("exp", 2)
    # pylance's commit time of version 1 (naive UTC), as epoch microseconds.
    v1 = next(v for v in dataset.versions() if v["version"] == 1)["timestamp"]
    v1_micros = calendar.timegm(v1.timetuple()) * 1_000_000 + v1.microsecond
    name = _table_name(sql_client, "travel")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"SELECT id FROM {name} VERSION AS OF 1 ORDER BY id",
        f"SELECT id FROM {name} VERSION AS OF 'first' ORDER BY id",
        f"SELECT id FROM {name} TIMESTAMP AS OF timestamp_micros({v1_micros}) ORDER BY id",
        f"SELECT count(*), max(id) FROM lance.`{path}`",
        f"SELECT count(*) FROM lance.`{path}` VERSION AS OF 1",
        f"INSERT INTO {name}.branch_exp VALUES (9, 'z')",
        f"SELECT id FROM {name}.branch_exp ORDER BY id",
        f"SELECT count(*) FROM {name}",
        f"INSERT INTO lance.`{path}` VALUES (5, 'e')",
        f"SELECT id FROM {name} WHERE id > 3 ORDER BY id",
    ]
    results = _script_then_drop(sql_client, statements, name)
    version_1 = [
        (str(i),) for i in lance.dataset(str(path), version=1).to_table()["id"].to_pylist()
    ]
    assert rows_as_text(results[2]) == version_1 == [("1",), ("2",), ("3",)]
    assert rows_as_text(results[3]) == version_1
    assert rows_as_text(results[4]) == version_1
    assert rows_as_text(results[5]) == [("4", "4")]
    assert rows_as_text(results[6]) == [("3",)]
    # The branch got the row, main did not (pylance: the branch's dataset at tree/<name>).
    branch = lance.dataset(str(path / "tree" / "exp")).to_table()["id"].to_pylist()
    assert sorted(branch) == [1, 2, 3, 4, 9]
    assert rows_as_text(results[8]) == [(str(i),) for i in sorted(branch)]
    assert rows_as_text(results[9]) == [("4",)]
    assert rows_as_text(results[11]) == [("4",), ("5",)]
    assert sorted(lance.dataset(str(path)).to_table()["id"].to_pylist()) == [1, 2, 3, 4, 5]


@pytest.mark.spark
def test_catalog_errors_name_what_is_missing(sql_client: SqlClient, tmp_path: Path) -> None:
    """A version, a tag or a branch the table lacks fails with Lance's message naming it, in
    every client; a write into an old version is refused; nothing is written."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    name = _table_name(sql_client, "missing")
    setup = [f"DROP TABLE IF EXISTS {name}", f"CREATE TABLE {name} USING lance LOCATION '{path}'"]
    cases: list[Refusal] = [
        (f"SELECT * FROM {name} VERSION AS OF 7", "version 7"),
        (f"SELECT * FROM {name} VERSION AS OF 'nope'", "nope"),
        (f"SELECT * FROM {name}.branch_nope", "nope"),
    ]
    try:
        outcomes = sql_client.sql_each(
            [*setup, cases[0][0], f"SELECT count(*) FROM {name}", *(s for s, _ in cases[1:])]
        )
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    # The statement between two refused ones answers (its rows are its own).
    assert rows_as_text(outcomes.pop(3)) == [("3",)]
    _refused(outcomes, cases)
    assert lance.dataset(str(path)).version == 1


@pytest.mark.spark
def test_history_restore_vacuum_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """Delta's DESCRIBE HISTORY, RESTORE and VACUUM (and their CALL form) on a Lance table,
    in every client: the companion's parser and procedures; results against pylance."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    lance.write_dataset(
        pa.table({"id": pa.array([4], pa.int64()), "name": ["d"]}), str(path), mode="append"
    )
    name = _table_name(sql_client, "history")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"DESC HISTORY {name}",
        f"RESTORE TABLE {name} TO VERSION AS OF 1",
        f"SELECT count(*) FROM {name}",
        f"DESCRIBE HISTORY {name} LIMIT 1",
        f"VACUUM {name} RETAIN 0 HOURS DRY RUN",
        f"VACUUM '{path}' RETAIN 0 HOURS",
        f"CALL spark_catalog.system.history(table => '{name}')",
        f"ALTER TABLE {name} CREATE TAG `train-v1`",
        f"ALTER TABLE {name} CREATE BRANCH exp AS OF VERSION 'train-v1'",
        f"SHOW BRANCHES IN {name}",
        f"DESC DETAIL {name}",
        f"ALTER TABLE {name} DROP BRANCH exp",
    ]
    results = _script_then_drop(sql_client, statements, name)
    history = rows_as_text(results[2])
    assert [(r[0], r[2]) for r in history] == [("2", "WRITE"), ("1", "CREATE TABLE")]
    # RESTORE: one row of metrics; version 3 holds version 1's rows (pylance).
    assert len(results[3]) == 1 and len(results[3][0]) == 6
    dataset = lance.dataset(str(path))
    assert sorted(dataset.to_table()["id"].to_pylist()) == [1, 2, 3]
    assert rows_as_text(results[4]) == [("3",)]
    assert [(r[0], r[2]) for r in rows_as_text(results[5])] == [("3", "RESTORE")]
    # VACUUM: the dry run counts the two old versions, the real one removes them.
    dry, done = rows_as_text(results[6])[0], rows_as_text(results[7])[0]
    assert dry[1] == "2" and dry[6] == "true"
    assert done[1] == "2" and done[6] == "false"
    assert [v["version"] for v in lance.dataset(str(path)).versions()] == [3]
    assert [r[0] for r in rows_as_text(results[8])] == ["3"]
    # Tags, branches and DESCRIBE DETAIL (pylance: the tag, the branch while it lived).
    assert lance.dataset(str(path)).tags.list()["train-v1"]["version"] == 3
    assert [(r[0], r[1]) for r in rows_as_text(results[11])] == [("main", "3"), ("exp", "3")]
    detail = rows_as_text(results[12])
    assert len(detail) == 1 and detail[0][0] == "lance" and detail[0][2] == name
    assert lance.dataset(str(path)).branches.list() == {}


@pytest.mark.spark
def test_optimize_indexes_and_properties_through_every_client(
    sql_client: SqlClient, tmp_path: Path
) -> None:
    """OPTIMIZE (a Spark job the companion's procedure asks for), Spark's CREATE / DROP INDEX
    (and lance_spark's first spelling of CREATE INDEX), SHOW TBLPROPERTIES and DESCRIBE
    EXTENDED with the properties pylance set: in every client, checked with pylance."""
    path = tmp_path / "frags.lance"
    for start in range(0, 12, 3):  # four fragments of three rows
        lance.write_dataset(
            pa.table(
                {
                    "id": pa.array(range(start, start + 3), pa.int64()),
                    "label": [f"v{i % 2}" for i in range(start, start + 3)],
                }
            ),
            str(path),
            mode="append" if start else "create",
        )
    lance.dataset(str(path)).update_config({"team": "vision"})
    before = lance.dataset(str(path)).to_table().sort_by("id").to_pydict()
    name = _table_name(sql_client, "maintenance")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"OPTIMIZE {name}",  # 2
        f"OPTIMIZE '{path}'",  # 3
        f"CREATE INDEX id_idx ON {name} (id)",
        f"CREATE INDEX label_bits ON {name} USING BITMAP (label)",
        f"CREATE INDEX IF NOT EXISTS label_bits ON {name} USING BITMAP (label)",
        f"CREATE INDEX label_text ON {name} (label) USING INVERTED WITH (with_position = true)",
        f"DROP INDEX label_bits ON {name}",
        f"SHOW TBLPROPERTIES {name}",  # 9
        f"SHOW TBLPROPERTIES {name} ('team')",  # 10
        f"DESCRIBE TABLE EXTENDED {name}",  # 11
        f"SELECT label FROM {name} WHERE id = 7",  # 12
        f"DESCRIBE HISTORY {name} LIMIT 1",  # 13
        f"INSERT INTO {name} VALUES (12, 'v0'), (13, 'v1')",
        f"OPTIMIZE {name} INDEXES",  # 15: the inserted fragment into both indexes
        f"OPTIMIZE {name} INDEX id_idx",  # 16: nothing left to do
    ]
    results = _script_then_drop(sql_client, statements, name)
    dataset = lance.dataset(str(path))
    inserted = len(dataset.get_fragments()) - 1
    optimized = [(r[0], r[2], r[3], r[4]) for r in rows_as_text(results[15])]
    assert optimized == [(n, str(inserted), "14", "0") for n in ("id_idx", "label_text")]
    assert [(r[0], r[2], r[6]) for r in rows_as_text(results[16])] == [("id_idx", "0", "NULL")]
    assert dataset.stats.index_stats("id_idx")["num_unindexed_rows"] == 0
    # OPTIMIZE: four fragments into one (pylance), the same rows; the second has nothing to do.
    assert rows_as_text(results[2]) == [("4", "1", "4", "1", "6")]
    assert rows_as_text(results[3]) == [("0", "0", "0", "0", "NULL")]
    assert dataset.get_fragments()[0].count_rows() == 12  # the INSERT's come after
    assert dataset.to_table(filter="id < 12").sort_by("id").to_pydict() == before
    indexes = {d.name: str(d.index_type) for d in dataset.describe_indices()}
    assert sorted(indexes) == ["id_idx", "label_text"]
    assert "Inverted" in indexes["label_text"] and "BTree" in indexes["id_idx"]
    assert ("team", "vision") in rows_as_text(results[9])
    assert rows_as_text(results[10]) == [("team", "vision")]
    assert "team=vision" in _describe_value(results[11], "Table Properties")
    assert rows_as_text(results[12]) == [("v1",)]
    assert [r[2] for r in rows_as_text(results[13])] == ["DROP INDEX"]


@pytest.mark.spark
def test_update_columns_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """ALTER TABLE t UPDATE COLUMNS ... FROM source ON key (a Spark job joining the source,
    which the companion's procedure asks for) in every client: the matched rows get the
    source's values, the others keep theirs, a column list updates only those columns, one
    version each, only the updated columns' files written; checked with pylance."""
    path = tmp_path / "backfill.lance"
    for start in (0, 4):  # two fragments
        lance.write_dataset(
            pa.table(
                {
                    "id": pa.array(range(start, start + 4), pa.int64()),
                    "label": [f"l{i}" for i in range(start, start + 4)],
                    "score": pa.array([float(i) for i in range(start, start + 4)]),
                }
            ),
            str(path),
            mode="append" if start else "create",
        )
    version = lance.dataset(str(path)).version
    name = _table_name(sql_client, "backfill")
    source = f"{name}_source"
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"CREATE OR REPLACE TEMPORARY VIEW {source} AS SELECT * FROM VALUES "
        "(1L, 'new1', 10.0D), (6L, 'new6', 60.0D), (99L, 'none', 0.0D) AS v(id, label, score)",
        f"ALTER TABLE {name} UPDATE COLUMNS label, score FROM {source} ON id",  # 3
        f"ALTER TABLE '{path}' UPDATE COLUMNS (score) FROM {source} ON ID",  # 4
        f"DESCRIBE HISTORY {name} LIMIT 1",  # 5
    ]
    # A query in place of the source's name is not the statement's: Spark's syntax error.
    refused = f"ALTER TABLE {name} UPDATE COLUMNS score FROM (SELECT * FROM {source}) ON id"
    try:
        outcomes = sql_client.sql_each([*statements, refused])
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    _refused(outcomes, [(refused, r"(?i)syntax")])
    assert rows_as_text(outcomes[3]) == [("2", "2")]
    assert rows_as_text(outcomes[4]) == [("1", "2")]
    assert [r[2] for r in rows_as_text(outcomes[5])] == ["UPDATE COLUMNS"]
    dataset = lance.dataset(str(path))
    assert dataset.version == version + 2
    rows = dataset.to_table().sort_by("id").to_pydict()
    assert rows["label"] == ["l0", "new1", "l2", "l3", "l4", "l5", "new6", "l7"]
    assert rows["score"] == [0.0, 10.0, 2.0, 3.0, 4.0, 5.0, 60.0, 7.0]
    label = dataset.lance_schema.field("label").id()
    for fragment in dataset.get_fragments():  # the label column: each fragment's first file
        files = [f for f in fragment.metadata.files if label in f.fields]
        assert len(files) == 1


@pytest.mark.spark
def test_index_errors_name_what_is_wrong(sql_client: SqlClient, tmp_path: Path) -> None:
    """A second index of one name, an index over two columns, a parameter of another index
    type, DROP INDEX of an absent index: refused with what is wrong; Lance unchanged."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    name = _table_name(sql_client, "index_errors")
    setup = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"CREATE INDEX id_idx ON {name} (id)",  # version 2
    ]
    refused: list[Refusal] = [
        (f"CREATE INDEX id_idx ON {name} (name)", "INDEX_ALREADY_EXISTS"),
        (f"CREATE INDEX two ON {name} (id, name)", "a Lance index covers one column; got 2"),
        (
            f"CREATE INDEX p ON {name} USING BTREE (id) OPTIONS (num_partitions = 2)",
            "index parameter 'num_partitions' does not apply to index type BTREE",
        ),
        (f"DROP INDEX nope ON {name}", "INDEX_NOT_FOUND"),
    ]
    try:
        outcomes = sql_client.sql_each([*setup, *(s for s, _ in refused)])
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    _refused(outcomes, refused)
    assert lance.dataset(str(path)).version == 2
    assert [d.name for d in lance.dataset(str(path)).describe_indices()] == ["id_idx"]


@pytest.mark.spark
def test_metadata_columns_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """Lance's metadata columns of a catalog table: selectable by name, usable in conditions
    (with a pushed filter too) and at an old version, never in ``SELECT *``; against pylance."""
    path = tmp_path / "meta.lance"
    lance.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}),
        str(path),
        enable_stable_row_ids=True,
    )
    lance.write_dataset(
        pa.table({"id": pa.array([4, 5], pa.int64()), "name": ["d", "e"]}), str(path), mode="append"
    )
    name = _table_name(sql_client, "meta")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"SELECT id, _rowid, _rowaddr, _fragid, _row_created_at_version, "
        f"_row_last_updated_at_version FROM {name} ORDER BY id",  # 2
        f"SELECT id FROM {name} WHERE _fragid = 1 AND id > 4",  # 3
        f"SELECT count(*) FROM {name} WHERE _rowid >= 2",  # 4
        f"SELECT * FROM {name} WHERE id = 1",  # 5
        f"SELECT _rowid, id FROM {name} VERSION AS OF 1 ORDER BY id",  # 6
    ]
    results = _script_then_drop(sql_client, statements, name)
    expected = lance.dataset(str(path)).to_table(with_row_id=True, with_row_address=True)
    ids, rowids, addresses = (expected[c].to_pylist() for c in ("id", "_rowid", "_rowaddr"))
    want = sorted(
        (str(i), str(r), str(a), str(a >> 32), "1" if i <= 3 else "2", "1" if i <= 3 else "2")
        for i, r, a in zip(ids, rowids, addresses, strict=True)
    )
    assert rows_as_text(results[2]) == want
    assert rows_as_text(results[3]) == [("5",)]
    assert rows_as_text(results[4]) == [(str(sum(1 for r in rowids if r >= 2)),)]
    assert rows_as_text(results[5]) == [("1", "a")]  # no metadata column in SELECT *
    assert rows_as_text(results[6]) == [("0", "1"), ("1", "2"), ("2", "3")]


@pytest.mark.spark
def test_insert_replace_where_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """``INSERT INTO t REPLACE WHERE cond SELECT ...`` (Spark's overwrite by a condition, the
    catalog table's ``SupportsOverwrite``): the matching rows replaced in one Lance version
    (Delta's replaceWhere); rows that do not match the condition are refused, nothing
    committed."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    name = _table_name(sql_client, "replace_where")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"INSERT INTO {name} REPLACE WHERE id >= 2 SELECT 20L AS id, 'x' AS name",
        f"SELECT id, name FROM {name} ORDER BY id",  # 3
    ]
    refused: list[Refusal] = [
        (
            f"INSERT INTO {name} REPLACE WHERE id >= 2 SELECT 0L, 'bad'",
            "DELTA_REPLACE_WHERE_MISMATCH",
        )
    ]
    try:
        outcomes = sql_client.sql_each([*statements, *(s for s, _ in refused)])
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    _refused(outcomes, refused)
    assert rows_as_text(outcomes[3]) == [("1", "a"), ("20", "x")]
    dataset = lance.dataset(str(path))
    assert dataset.version == 2  # the refused statement committed nothing
    assert sorted(dataset.to_table()["id"].to_pylist()) == [1, 20]


@pytest.mark.spark
def test_convert_to_lance_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """CONVERT TO LANCE (Delta's CONVERT TO DELTA, written at its own location) and its CALL
    form in every client: Spark's Parquet reader (partition discovery included) feeds one Spark
    job whose tasks write Lance fragments, committed as one CONVERT version; checked with
    pyarrow's reading of the Parquet data and pylance's of the table. Refusals change nothing;
    a job that fails commits nothing."""
    source = tmp_path / "events"
    for label, start in (("a", 0), ("b", 3)):
        (source / f"label={label}").mkdir(parents=True)
        rows = pa.table({"id": pa.array(range(start, start + 3), pa.int64()), "x": [0.5] * 3})
        pq.write_table(rows, source / f"label={label}" / "part.parquet")
    broken = tmp_path / "broken"
    broken.mkdir()
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), broken / "a.parquet")
    pq.write_table(pa.table({"id": ["x"]}), broken / "b.parquet")
    target = tmp_path / "events.lance"
    refused: list[Refusal] = [
        (f"CONVERT TO LANCE parquet.`{source}` LOCATION '{target}'", "already exists"),
        (f"CONVERT TO LANCE parquet.`{target}` LOCATION '{tmp_path}/c.lance'", "is a Lance table"),
        (
            f"CALL spark_catalog.system.convert(table => 'lance.`{target}`', "
            f"source => '{source}', mode => 'sometimes')",
            "mode 'sometimes' is not one of",
        ),
        (f"CONVERT TO LANCE parquet.`{tmp_path}/nope` LOCATION '{tmp_path}/n.lance'", "nope"),
        (
            f"CALL spark_catalog.system.convert(table => 'lance.`{target}`', "
            f"source => '{broken}', mode => 'overwrite')",
            None,  # the job fails: Spark's error, as the client reports it
        ),
        (f"CONVERT TO LANCE parquet.`{broken}` LOCATION '{tmp_path}/b.lance'", None),
    ]
    results = sql_client.sql_each(
        [
            f"CONVERT TO LANCE parquet.`{source}` LOCATION '{target}'",
            f"SELECT id, x, label FROM lance.`{target}` ORDER BY id",
            f"CALL spark_catalog.system.convert(table => 'lance.`{target}`', "
            f"source => '{source}', mode => 'append')",
            f"DESCRIBE HISTORY lance.`{target}`",
            *(s for s, _ in refused),
        ]
    )
    # The refusals ran after the history was read: they changed nothing (checked below).
    _refused(results, refused)
    assert rows_as_text(results[0]) == [("1", "2", "6")]
    expected = pq.read_table(source).to_pydict()  # pyarrow's discovery of the same layout
    spark_rows = sorted(zip(expected["id"], expected["x"], expected["label"], strict=True))
    assert rows_as_text(results[1]) == [tuple(value_text(v) for v in r) for r in spark_rows]
    assert rows_as_text(results[2]) == [("2", "2", "6")]
    history = [(r[0], r[2]) for r in rows_as_text(results[3])]
    assert history == [("2", "CONVERT"), ("1", "CONVERT")]
    dataset = lance.dataset(str(target))
    table = dataset.to_table().sort_by("id")
    assert table.column_names == ["id", "x", "label"]
    assert table["id"].to_pylist() == sorted([*expected["id"], *expected["id"]])
    assert dataset.version == 2  # the two converts; no refused statement committed
    for never in ("c.lance", "n.lance", "b.lance"):
        with pytest.raises(ValueError):
            lance.dataset(str(tmp_path / never))


@pytest.mark.spark
def test_lance_search_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """The ``lance_search`` table function is the companion's, in every client: by path and by
    catalog name (the session catalog gives the location), with named arguments, joined with
    the table; the nearest rows and distances are pylance's. A branch's name is refused."""
    path = tmp_path / "vecs.lance"
    vectors = [[float(i), float(i % 3), 1.0, float(-i)] for i in range(12)]
    lance.write_dataset(
        pa.table(
            {
                "id": pa.array(range(12), pa.int64()),
                "vec": pa.array(vectors, pa.list_(pa.float32(), 4)),
            }
        ),
        str(path),
    )
    query = [4.2, 1.0, 1.0, -4.0]
    literal = "array(" + ", ".join(repr(x) for x in query) + ")"
    expected = lance.dataset(str(path)).to_table(
        columns=["id"], nearest={"column": "vec", "q": query, "k": 3}
    )
    expected_ids = [str(i) for i in expected["id"].to_pylist()]
    lance.dataset(str(path)).create_branch("exp", 1)
    name = _table_name(sql_client, "search")
    refused: list[Refusal] = [
        (
            f"SELECT * FROM lance_search('{name}.branch_exp', {literal}, 3)",
            "searches a table's main branch",
        )
    ]
    try:
        results = sql_client.sql_each(
            [
                f"DROP TABLE IF EXISTS {name}",
                f"CREATE TABLE {name} USING lance LOCATION '{path}'",
                f"SELECT id, _distance FROM lance_search('{path}', {literal}, 3) "
                "ORDER BY _distance",
                f"SELECT id FROM lance_search(k => 3, table => '{name}', vector => {literal}) "
                "ORDER BY _distance",
                f"SELECT s.id, t.id * 10 FROM lance_search('{name}', {literal}, 2) s "
                f"JOIN {name} t ON s.id = t.id ORDER BY s._distance",
                *(s for s, _ in refused),
            ]
        )
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    _refused(results, refused)
    by_path = rows_as_text(results[2])
    assert [r[0] for r in by_path] == expected_ids
    distances = expected["_distance"].to_pylist()
    assert [float(r[1]) for r in by_path] == pytest.approx(distances, rel=1e-5)
    assert [r[0] for r in rows_as_text(results[3])] == expected_ids
    assert rows_as_text(results[4]) == [(i, str(int(i) * 10)) for i in expected_ids[:2]]


def _table_names(rows: list[tuple[object, ...]]) -> list[str]:
    """The names in SHOW TABLES rows, sorted: (namespace, tableName, isTemporary), or the name
    alone as the spark-sql CLI prints it (Hive's format)."""
    return sorted(str(r[1] if len(r) == 3 else r[0]) for r in rows_as_text(rows))


@pytest.mark.spark
def test_a_folder_of_lance_tables_as_a_catalog(sql_client: SqlClient, tmp_path: Path) -> None:
    """``LanceFolderCatalog`` over a folder in LanceDB's layout (``<root>/<name>.lance``), no
    metastore, in every client: a table written by pylance is listed and read; tables created
    by SQL (columns, CTAS, in a namespace) are Lance tables pylance opens there; DROP removes
    one; ALTER TABLE changes the Lance table."""
    root = tmp_path / "db"
    root.mkdir()
    lance.write_dataset(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}), str(root / "from_pylance.lance")
    )
    catalog = f"folder_{sql_client.kind.replace('-', '_')}"
    results = sql_client.sql_script(
        [
            f"SET spark.sql.catalog.{catalog}=lance_spark.companion.LanceFolderCatalog",
            f"SET spark.sql.catalog.{catalog}.root={root}",
            f"SHOW TABLES IN {catalog}",
            f"SELECT sum(id) FROM {catalog}.from_pylance",
            f"CREATE TABLE {catalog}.pets (id BIGINT, name STRING)",
            f"INSERT INTO {catalog}.pets VALUES (1, 'a'), (2, 'b')",
            f"CREATE TABLE {catalog}.doubled AS SELECT id * 2 AS id FROM {catalog}.from_pylance",
            f"CREATE NAMESPACE {catalog}.team",
            f"CREATE TABLE {catalog}.team.small AS SELECT 7 AS x",
            f"SHOW TABLES IN {catalog}",
            f"SHOW TABLES IN {catalog}.team",
            f"SELECT count(*) FROM {catalog}.pets VERSION AS OF 1",
            f"SELECT sum(id) FROM {catalog}.doubled",
            f"DROP TABLE {catalog}.doubled",
            f"SHOW TABLES IN {catalog}",
            f"ALTER TABLE {catalog}.pets ADD COLUMNS (score DOUBLE)",
            f"ALTER TABLE {catalog}.pets RENAME COLUMN name TO label",
            f"SELECT id, label, score IS NULL FROM {catalog}.pets ORDER BY id",
            # Column defaults are kept with the Lance table: INSERT and ADD COLUMN use them.
            f"CREATE TABLE {catalog}.dflt (id BIGINT, n INT DEFAULT 7)",
            f"INSERT INTO {catalog}.dflt (id) VALUES (1)",
            f"ALTER TABLE {catalog}.dflt ADD COLUMN s STRING DEFAULT 'x'",
        ]
    )
    assert lance.dataset(str(root / "dflt.lance")).to_table().to_pylist() == [
        {"id": 1, "n": 7, "s": "x"}
    ]
    assert _table_names(results[2]) == ["from_pylance"]
    assert rows_as_text(results[3]) == [("6",)]
    pets = lance.dataset(str(root / "pets.lance"), version=2).to_table().sort_by("id")
    assert pets.to_pydict() == {"id": [1, 2], "name": ["a", "b"]}
    assert lance.dataset(str(root / "team" / "small.lance")).to_table()["x"].to_pylist() == [7]
    assert _table_names(results[9]) == ["doubled", "from_pylance", "pets"]
    assert _table_names(results[10]) == ["small"]
    assert rows_as_text(results[11]) == [("0",)]  # version 1: the empty table CREATE made
    assert rows_as_text(results[12]) == [("12",)]  # CTAS: 2 + 4 + 6
    assert _table_names(results[14]) == ["from_pylance", "pets"]
    assert not (root / "doubled.lance").exists()
    # ALTER TABLE changes the Lance table in the folder (pylance sees it).
    assert lance.dataset(str(root / "pets.lance")).schema.names == ["id", "label", "score"]
    assert rows_as_text(results[17]) == [("1", "a", "true"), ("2", "b", "true")]


def _describe_value(rows: list[tuple[object, ...]], key: str) -> str:
    """The value of ``key`` (``Location``, ``Type``) in DESCRIBE TABLE EXTENDED's rows."""
    found = [str(r[1]).strip() for r in rows_as_text(rows) if str(r[0]).strip() == key]
    assert found, rows
    return found[0]


def _local(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


@pytest.mark.spark
def test_ddl_is_the_session_catalogs(sql_client: SqlClient, tmp_path: Path) -> None:
    """CREATE TABLE (columns, managed) makes the Lance table; RENAME TO moves a managed table
    and DROP then deletes it, so the name can be created again; CTAS writes one version;
    CREATE OR REPLACE keeps the history; ALTER TABLE (columns, properties with Spark's
    literals, booleans included) changes Lance: in every client, checked with pylance."""
    name = _table_name(sql_client, "ddl")
    moved, ctas = f"{name}_moved", f"{name}_ctas"
    ext = tmp_path / "ext.lance"
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"DROP TABLE IF EXISTS {moved}",
        f"DROP TABLE IF EXISTS {ctas}",
        f"CREATE TABLE {name} (id BIGINT, label STRING) USING lance",
        f"SELECT count(*) FROM {name}",  # 4
        f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')",
        f"DESCRIBE TABLE EXTENDED {name}",  # 6
        f"ALTER TABLE {name} RENAME TO {moved}",
        f"SELECT id, label FROM {moved} ORDER BY id",  # 8
        f"DESCRIBE TABLE EXTENDED {moved}",  # 9
        f"DROP TABLE {moved}",
        f"CREATE TABLE {name} (x INT) USING lance",
        f"SELECT count(*) FROM {name}",  # 12
        f"DROP TABLE {name}",
        f"CREATE TABLE {ctas} USING lance LOCATION '{ext}' AS SELECT id, 'v' AS s FROM range(3)",
        f"DESCRIBE HISTORY {ctas}",  # 15
        f"CREATE OR REPLACE TABLE {ctas} USING lance AS SELECT id * 10 AS id FROM range(2)",
        f"ALTER TABLE {ctas} ADD COLUMNS (score DOUBLE COMMENT 'model score')",
        f"ALTER TABLE {ctas} RENAME COLUMN id TO key",
        f"ALTER TABLE {ctas} SET TBLPROPERTIES ('reviewed' = true, 'level' = 2)",
        f"SHOW TBLPROPERTIES {ctas}",  # 20
        f"SELECT key, score IS NULL FROM {ctas} ORDER BY key",  # 21
        f"DROP TABLE {ctas}",
    ]
    results = _script_then_drop(sql_client, statements, name, moved, ctas)
    assert rows_as_text(results[4]) == [("0",)]
    assert rows_as_text(results[8]) == [("1", "a"), ("2", "b")]
    first, second = (_local(_describe_value(results[i], "Location")) for i in (6, 9))
    assert _describe_value(results[6], "Type") == "MANAGED"
    assert first != second and second.name == moved.lower()
    assert not second.exists()  # DROP of the moved managed table deleted its data
    assert rows_as_text(results[12]) == [("0",)]
    assert not first.exists()
    # CTAS: one version; the replace: a new version of the same table (pylance).
    assert [(r[0], r[2]) for r in rows_as_text(results[15])] == [("1", "CREATE TABLE AS SELECT")]
    dataset = lance.dataset(str(ext))
    assert dataset.to_table().to_pydict() == {"key": [0, 10], "score": [None, None]}
    assert dataset.schema.field("score").metadata == {b"comment": b"model score"}
    first_version = lance.dataset(str(ext), version=1).to_table().to_pydict()
    assert first_version == {"id": [0, 1, 2], "s": ["v", "v", "v"]}
    assert lance.dataset(str(ext), version=2).to_table().to_pydict() == {"id": [0, 10]}
    assert dataset.config()["reviewed"] == "true" and dataset.config()["level"] == "2"
    assert {("reviewed", "true"), ("level", "2")} <= set(rows_as_text(results[20]))
    assert rows_as_text(results[21]) == [("0", "true"), ("10", "true")]


@pytest.mark.spark
def test_refused_ddl_changes_nothing(sql_client: SqlClient, tmp_path: Path) -> None:
    """A CTAS with a property Lance cannot keep, a partitioned Lance table and ALTER TABLE
    ... REPLACE COLUMNS fail with errors naming what is wrong; no table, entry or version is
    left behind."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    name = _table_name(sql_client, "refused")
    setup = [f"DROP TABLE IF EXISTS {name}", f"DROP TABLE IF EXISTS {name}_new"]
    cases: list[Refusal] = [
        (
            f"CREATE TABLE {name}_new USING lance TBLPROPERTIES ('enable_stable_row_ids' = "
            "'true') AS SELECT 1 AS a",
            "enable_stable_row_ids",
        ),
        (f"CREATE TABLE {name}_new (a INT, b INT) USING lance PARTITIONED BY (a)", "partitioned"),
        (f"ALTER TABLE {name} REPLACE COLUMNS (a INT)", "REPLACE COLUMNS"),
        (f"ALTER TABLE {name} ALTER COLUMN id SET NOT NULL", "non-nullable"),
    ]
    register = f"CREATE TABLE {name} USING lance LOCATION '{path}'"
    try:
        outcomes = sql_client.sql_each([*setup, register, *(s for s, _ in cases), "SHOW TABLES"])
    finally:
        if sql_client.kind != SPARK_SQL:
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
    left = outcomes.pop()
    assert not isinstance(left, SqlClientError), str(left)
    # Each case after the one before it: a CTAS that left a table would fail the next case.
    _refused(outcomes, cases)
    assert f"{name}_new" not in _table_names(left)
    assert lance.dataset(str(path)).version == 1


_ARROW_TYPES = {"long": pa.int64(), "int": pa.int32(), "string": pa.string()}


def _lance_table(path: Path, schema: str, rows: list[tuple[object, ...]], parts: int = 1) -> None:
    """``rows`` of the Spark DDL ``schema`` written by pylance in ``parts`` fragments."""
    fields = [(n, _ARROW_TYPES[t]) for n, t in (c.split() for c in schema.split(","))]
    arrow = pa.schema(fields)
    size = max(1, -(-len(rows) // parts))
    for start in range(0, max(len(rows), 1), size):
        chunk = rows[start : start + size]
        table = pa.Table.from_pylist([dict(zip(arrow.names, r, strict=True)) for r in chunk], arrow)
        lance.write_dataset(table, str(path), mode="append" if path.exists() else "create")


@pytest.mark.spark
def test_merge_cases_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """Every MERGE case that succeeds (tests/_merge_cases.py), as SQL, in one script per
    client: the tables as Spark's own evaluation of the same MERGE in the case says (Spark's
    errors are checked on PySpark classic and Connect, tests/spark/test_sql_dml.py)."""
    cases = [c for c in CASES if not isinstance(c.expected, type) and c.transform is None]
    statements = []
    for number, case in enumerate(cases):
        target, source = tmp_path / f"t{number}.lance", tmp_path / f"s{number}.lance"
        _lance_table(target, TARGET_SCHEMA, case.target, parts=2)
        _lance_table(source, case.source_schema, case.source)
        text = merge_sql(case, str(target), f"lance.`{source}`")
        statements.append(" ".join(text.split("\n")))
    sql_client.sql_script(statements)
    for number, case in enumerate(cases):
        assert isinstance(case.expected, list)
        expected = sorted(case.expected, key=lambda r: tuple((v is None, str(v)) for v in r))
        assert table_rows(str(tmp_path / f"t{number}.lance")) == expected, case.name


@pytest.mark.spark
def test_merge_update_delete_through_every_client(sql_client: SqlClient, tmp_path: Path) -> None:
    """MERGE with all three clause kinds, UPDATE with a subquery, DELETE, as Spark plans them
    on the companion's table, from every client: one Lance version each, the history entries
    with their metrics."""
    path = tmp_path / "pets.lance"
    _lance_table(path, "id long, name string", [(1, "a"), (2, "b"), (3, "c"), (4, "d")], parts=2)
    changes = tmp_path / "changes.lance"
    _lance_table(
        changes, "id long, name string, op string", [(1, "A", "u"), (2, "", "d"), (9, "I", "u")]
    )
    name = _table_name(sql_client, "dml")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"MERGE INTO {name} t USING lance.`{changes}` s ON s.id = t.id "
        "WHEN MATCHED AND s.op = 'd' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET name = s.name "
        "WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name) "
        "WHEN NOT MATCHED BY SOURCE AND t.id = 4 THEN DELETE",
        f"UPDATE {name} SET name = concat(name, '!') "
        f"WHERE id IN (SELECT id FROM lance.`{changes}` WHERE op = 'u')",
        f"DELETE FROM {name} WHERE name = 'c'",
        f"SELECT id, name FROM {name} ORDER BY id",  # 5
        f"DESCRIBE HISTORY {name} LIMIT 3",  # 6
    ]
    results = _script_then_drop(sql_client, statements, name)
    assert rows_as_text(results[5]) == [("1", "A!"), ("9", "I!")]
    dataset = lance.dataset(str(path))
    assert dataset.version == 5
    assert [(r[0], r[2]) for r in rows_as_text(results[6])] == [
        ("5", "DELETE"),
        ("4", "UPDATE"),
        ("3", "MERGE"),
    ]
    metrics = {v: describe_version(dataset, v)[2] for v in (3, 4, 5)}
    changed = ("numUpdatedRows", "numDeletedRows", "numInsertedRows")
    assert [tuple(metrics[v][k] for k in changed) for v in (3, 4, 5)] == [
        ("1", "2", "1"),
        ("2", "0", "0"),
        ("0", "1", "0"),
    ]
    assert metrics[3]["numTargetRowsDeleted"] == "2"
