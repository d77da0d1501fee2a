"""Distributed compaction (``executeCompaction`` / ``OPTIMIZE`` as a Spark job) and
auto compaction after writes (the ``autoCompact`` option and ``spark.lance.autoCompact.*``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import cast

import lance
import pytest
from pyspark.sql import SparkSession

import lance_spark
from lance_spark import InvalidOptionError, LanceTable, TableNotFoundError, _spark
from lance_spark.source.options import AUTO_COMPACT_CONF, AUTO_COMPACT_MIN_NUM_FILES_CONF

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


def _append(spark: SparkSession, uri: str, start: int, n: int, **options: str) -> None:
    frame = spark.range(start, start + n, numPartitions=1).selectExpr(
        "id", "concat('l', id % 3) AS label"
    )
    frame.write.format("lance").mode("append").options(**options).save(uri)


def _rows(uri: str, version: int | None = None) -> list[tuple[int, str]]:
    table = lance.dataset(uri, version=version).to_table()
    return sorted(zip(table["id"].to_pylist(), table["label"].to_pylist(), strict=True))


def _operations(uri: str) -> list[str]:
    """The connector's operation name of every version, oldest first."""
    ds = lance.dataset(uri)
    names = []
    for version in range(1, ds.version + 1):
        props = ds.read_transaction(version).transaction_properties or {}
        names.append(props.get("lance_spark.operation", "?"))
    return names


def _staging_left(uri: str) -> list[str]:
    root = os.path.join(uri, "_lance_spark", "staging")
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


def test_execute_compaction_runs_as_job_and_keeps_rows(spark: SparkSession, table_uri: str) -> None:
    for i in range(16):
        _append(spark, table_uri, i * 5, 5)
    before = lance.dataset(table_uri)
    assert len(before.get_fragments()) == 16
    rows, files = _rows(table_uri), set(os.listdir(os.path.join(table_uri, "data")))

    # 80 rows, target 40: Lance plans two tasks of 8 fragments, each a Spark task
    m = LanceTable.forPath(spark, table_uri).optimize().executeCompaction(targetRowsPerFragment=40)
    got = m.first()
    assert got is not None
    after = lance.dataset(table_uri)
    assert after.version == before.version + 1 == got.version  # one version, no reservation
    assert len(after.get_fragments()) == 2 and _rows(table_uri) == rows
    assert (got.fragments_removed, got.fragments_added) == (16, 2)
    assert (got.files_removed, got.files_added) == (16, 2)
    new_files = set(os.listdir(os.path.join(table_uri, "data"))) - files
    assert len(new_files) == 2 and not _staging_left(table_uri)
    assert type(after.read_transaction(after.version).operation).__name__ == "Rewrite"

    entry = LanceTable.forPath(spark, table_uri).history(1).first()
    assert entry is not None and entry.operation == "OPTIMIZE"
    assert entry.operationMetrics == {
        "fragments_removed": "16",
        "fragments_added": "2",
        "files_removed": "16",
        "files_added": "2",
    }
    assert entry.operationParameters == {"auto": "false", "targetRowsPerFragment": "40"}
    # stable row ids move with the rows: the change feed and diff see no change
    assert sorted(after.to_table(with_row_id=True)["_rowid"].to_pylist()) == sorted(
        before.to_table(with_row_id=True)["_rowid"].to_pylist()
    )


def test_optimize_sql_and_nothing_to_do(spark: SparkSession, table_uri: str) -> None:
    for i in range(4):
        _append(spark, table_uri, i * 3, 3)
    name = "lance_compaction_sql"
    spark.sql(f"CREATE TABLE {name} USING lance LOCATION '{table_uri}'")
    try:
        got = spark.sql(f"OPTIMIZE {name}").first()
        assert got is not None and got.fragments_removed == 4 and got.fragments_added == 1
        version = lance.dataset(table_uri).version
        assert got.version == version and _operations(table_uri)[-1] == "OPTIMIZE"

        # one fragment left: Lance plans nothing, so no version
        again = spark.sql(f"OPTIMIZE {name}").first()
        assert again is not None and again.version is None
        assert (again.fragments_removed, again.fragments_added) == (0, 0)
        t = LanceTable.forPath(spark, table_uri)
        assert t.optimize().executeCompaction().first().version is None  # type: ignore[union-attr]
        assert lance.dataset(table_uri).version == version
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_failed_optimize_job_changes_nothing(spark: SparkSession, table_uri: str) -> None:
    """OPTIMIZE's Spark job fails (a data file of one fragment is gone): the error is the
    job's, no version is committed and the files the other tasks wrote are deleted."""
    for i in range(4):
        _append(spark, table_uri, i * 3, 3)
    ds = lance.dataset(table_uri)
    victim = ds.get_fragments()[0].data_files()[0].path
    os.remove(os.path.join(table_uri, "data", victim))
    files = set(os.listdir(os.path.join(table_uri, "data")))
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        spark.sql(f"OPTIMIZE '{table_uri}'").collect()
    assert lance.dataset(table_uri).version == ds.version
    assert set(os.listdir(os.path.join(table_uri, "data"))) == files


def test_compaction_errors_change_nothing(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(TableNotFoundError):
        LanceTable.forPath(spark, table_uri).optimize()
    for i in range(6):
        _append(spark, table_uri, i * 4, 4)
    t = LanceTable.forPath(spark, table_uri)
    with pytest.raises(InvalidOptionError, match=r"targetRowsPerFragment.*at least 1"):
        t.optimize().executeCompaction(targetRowsPerFragment=0)
    with pytest.raises(InvalidOptionError, match="give one of them"):
        t.optimize().executeCompaction(targetRowsPerFragment=8, target_rows_per_fragment=9)

    # A data file of the last task's fragments is gone: that Spark task fails, and what the
    # other tasks wrote is deleted; the table keeps its version.
    ds = lance.dataset(table_uri)
    version = ds.version
    last = ds.get_fragments()[-1].metadata.files[0].path
    os.remove(os.path.join(table_uri, "data", last))
    files = set(os.listdir(os.path.join(table_uri, "data")))
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        t.optimize().executeCompaction(targetRowsPerFragment=8)
    assert lance.dataset(table_uri).version == version
    assert set(os.listdir(os.path.join(table_uri, "data"))) == files
    assert not _staging_left(table_uri)


def test_auto_compact_option(spark: SparkSession, table_uri: str) -> None:
    auto = {"autoCompact": "true", "autoCompact.minNumFiles": "3"}
    _append(spark, table_uri, 0, 2, **auto)  # v1: 1 small fragment
    _append(spark, table_uri, 2, 2, **auto)  # v2: 2
    assert _operations(table_uri) == ["WRITE", "WRITE"]
    rows = _rows(table_uri)
    _append(spark, table_uri, 4, 2, **auto)  # v3: 3 small fragments -> v4 compacts them
    assert _operations(table_uri) == ["WRITE", "WRITE", "WRITE", "OPTIMIZE"]
    ds = lance.dataset(table_uri)
    assert len(ds.get_fragments()) == 1 and _rows(table_uri) == _rows(table_uri, 3)
    assert _rows(table_uri) == sorted([*rows, (4, "l1"), (5, "l2")])
    props = ds.read_transaction(4).transaction_properties or {}
    assert json.loads(props["lance_spark.operationParameters"]) == {"auto": "true"}
    assert json.loads(props["lance_spark.operationMetrics"])["fragments_removed"] == 3

    _append(spark, table_uri, 6, 2, **auto)  # v5: 2 small fragments, below the threshold
    _append(spark, table_uri, 8, 2)  # v6: 3, but this write has no autoCompact
    assert _operations(table_uri)[4:] == ["WRITE", "WRITE"]
    assert len(lance.dataset(table_uri).get_fragments()) == 3


def test_auto_compact_off_by_default(spark: SparkSession, table_uri: str) -> None:
    for i in range(5):
        _append(spark, table_uri, i, 1, **{"autoCompact.minNumFiles": "2"})
    assert _operations(table_uri) == ["WRITE"] + ["WRITE"] * 4
    assert len(lance.dataset(table_uri).get_fragments()) == 5


def test_auto_compact_bad_option(spark: SparkSession, table_uri: str) -> None:
    with pytest.raises(Exception, match=r"autoCompact='maybe' must be true or false"):
        _append(spark, table_uri, 0, 1, autoCompact="maybe")
    with pytest.raises(Exception, match=r"autoCompact.minNumFiles=0 must be at least 1"):
        _append(spark, table_uri, 0, 1, **{"autoCompact.minNumFiles": "0"})
    assert not os.path.exists(os.path.join(table_uri, "_versions"))


def _fresh_session(spark: SparkSession, request: pytest.FixtureRequest) -> SparkSession:
    """A new session of the same kind as ``spark`` (a second ``register`` on one Connect
    session fails: Connect does not read back the redaction conf register set)."""
    if _spark.is_connect(spark):
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        url = request.getfixturevalue("connect_url")
        return cast(SparkSession, ConnectSession.builder.remote(url).create())
    return spark.newSession()


@pytest.fixture
def auto_compact_session(
    spark: SparkSession, request: pytest.FixtureRequest
) -> Iterator[SparkSession]:
    """A new session registered with spark.lance.autoCompact.enabled=true, minNumFiles=3."""
    session = _fresh_session(spark, request)
    session.conf.set(AUTO_COMPACT_CONF, "true")
    session.conf.set(AUTO_COMPACT_MIN_NUM_FILES_CONF, "3")
    lance_spark.register(session)
    yield session
    if _spark.is_connect(session):
        session.stop()


def test_auto_compact_session_conf(auto_compact_session: SparkSession, table_uri: str) -> None:
    spark = auto_compact_session
    for i in range(3):
        _append(spark, table_uri, i * 2, 2)
    assert _operations(table_uri) == ["WRITE", "WRITE", "WRITE", "OPTIMIZE"]
    _append(spark, table_uri, 6, 2, autoCompact="false")  # the option wins
    _append(spark, table_uri, 8, 2, autoCompact="false")
    assert _operations(table_uri)[4:] == ["WRITE", "WRITE"]
    # a DELETE (the change engine, on the driver) compacts with the distributed job
    LanceTable.forPath(spark, table_uri).delete("id = 9")
    assert _operations(table_uri)[6:] == ["DELETE", "OPTIMIZE"]
    assert len(lance.dataset(table_uri).get_fragments()) == 1
    assert [r[0] for r in _rows(table_uri)] == [0, 1, 2, 3, 4, 5, 6, 7, 8]


def test_auto_compact_bad_conf(spark: SparkSession, request: pytest.FixtureRequest) -> None:
    session = _fresh_session(spark, request)
    session.conf.set(AUTO_COMPACT_MIN_NUM_FILES_CONF, "many")
    try:
        with pytest.raises(InvalidOptionError, match=r"minNumFiles='many'.*at least 1"):
            lance_spark.register(session)
    finally:
        if _spark.is_connect(session):
            session.stop()


def test_compaction_of_a_table_with_an_index(spark: SparkSession, table_uri: str) -> None:
    """Lance commits it (it keeps the index covering the rewritten fragments)."""
    for i in range(4):
        _append(spark, table_uri, i * 3, 3)
    lance.dataset(table_uri).create_scalar_index("id", "BTREE")
    rows = _rows(table_uri)
    got = LanceTable.forPath(spark, table_uri).optimize().executeCompaction().first()
    ds = lance.dataset(table_uri)
    assert got is not None and got.fragments_removed == 4 and got.version == ds.version
    assert _rows(table_uri) == rows
    (index,) = ds.describe_indices()
    covered = set(getattr(index, "fragment_ids", None) or ds.list_indices()[0]["fragment_ids"])
    assert covered == {f.fragment_id for f in ds.get_fragments()}
    assert ds.to_table(filter="id = 7")["id"].to_pylist() == [7]
    # pylance 14 cannot read back this Rewrite's transaction (a TypeError in
    # RewrittenIndex): history still lists every version, that one as UNKNOWN.
    history = LanceTable.forPath(spark, table_uri).history().collect()
    assert [r.version for r in history] == list(range(ds.version, 0, -1))
    assert history[0].operation == "UNKNOWN"
