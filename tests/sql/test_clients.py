"""What works today through every kind of SQL client (tests/_sql_clients.py): a Lance table
written by pylance, declared with CREATE TABLE ... USING lance LOCATION, read, filtered and
appended to with SQL; and the gap issue 30 closes (time travel in Spark's own SQL)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from _sql_clients import (
    CLASSIC,
    SPARK_SQL,
    THRIFT,
    SqlClient,
    SqlClientError,
    rows_as_text,
    value_text,
)


def _table_name(client: SqlClient, what: str) -> str:
    """A table name of its own per test and client kind (the classic and Connect catalogs
    live for the whole run)."""
    return f"clients_{what}_{client.kind.replace('-', '_')}"


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
    assert rows_as_text(results[7]) == [("1.5", "true", "NULL", "[1,2]", "x,y", "2.50")]
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
def test_time_travel_needs_the_catalog_today(sql_client: SqlClient, tmp_path: Path) -> None:
    """``VERSION AS OF`` on a catalog table works only through register's SQL front, which
    runs in the client's Python process (classic here). Every client without it gets Spark's
    UNSUPPORTED_FEATURE.TIME_TRAVEL from the session catalog.

    Issue 30 (Lance tables in Spark's own catalog) turns this into a positive test: version 1
    through every client."""
    path = tmp_path / "pets.lance"
    _write_pets(path)
    lance.write_dataset(
        pa.table({"id": pa.array([4], pa.int64()), "name": ["d"]}), str(path), mode="append"
    )
    name = _table_name(sql_client, "travel")
    statements = [
        f"DROP TABLE IF EXISTS {name}",
        f"CREATE TABLE {name} USING lance LOCATION '{path}'",
        f"SELECT id, name FROM {name} VERSION AS OF 1 ORDER BY id",
    ]
    try:
        if sql_client.kind == CLASSIC:
            old = sql_client.sql_script(statements)[-1]
            assert rows_as_text(old) == [("1", "a"), ("2", "b"), ("3", "c")]
        else:
            # One script: a spark-sql call is a JVM start.
            with pytest.raises(SqlClientError) as caught:
                sql_client.sql_script(statements)
            assert caught.value.statement == statements[-1], str(caught.value)
            assert "TIME_TRAVEL" in caught.value.message, str(caught.value)
            # -s shows what each client reports (a Connect error carries the server's stack).
            print(f"[{sql_client.kind}] {caught.value.message.splitlines()[0]}")
    finally:
        if sql_client.kind != SPARK_SQL:  # its metastore is the run's alone: no JVM for it
            sql_client.sql(f"DROP TABLE IF EXISTS {name}")
