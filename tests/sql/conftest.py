"""Fixtures of the SQL suites: ``sql_client``, the same SQL through each kind of client
(tests/_sql_clients.py). Every server and CLI set-up is started once per run, on first use,
and stopped at the end of the run by the fixture that started it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _sql_clients import (
    CLASSIC,
    CONNECT,
    SPARK_SQL,
    THRIFT,
    ClassicClient,
    ConnectClient,
    SparkSqlClient,
    SqlClient,
    ThriftClient,
    ThriftServer,
    connect_client,
    spark_sql_cli,
    thrift_server,
)

# The marks of each kind: -m "not jdbc" / "not sqlcli" / "not connect" skip a kind.
CLIENT_PARAMS = [
    pytest.param(CLASSIC, id=CLASSIC),
    pytest.param(CONNECT, id=CONNECT, marks=pytest.mark.connect),
    pytest.param(THRIFT, id=THRIFT, marks=pytest.mark.jdbc),
    pytest.param(SPARK_SQL, id=SPARK_SQL, marks=pytest.mark.sqlcli),
]


@pytest.fixture(scope="session")
def thrift_jdbc_server() -> Iterator[ThriftServer]:
    """Spark's Thrift JDBC server with ``lance_spark.spark_conf()``, for the whole run."""
    with thrift_server() as server:
        yield server


@pytest.fixture(scope="session")
def connect_sql_client(connect_url: str) -> Iterator[ConnectClient]:
    """A Connect client process that never imports lance_spark, on the run's Connect server."""
    with connect_client(connect_url) as client:
        yield client


@pytest.fixture(scope="session")
def spark_sql_client() -> Iterator[SparkSqlClient]:
    """The spark-sql CLI, with ``lance_spark.spark_conf()`` and one metastore for the run."""
    with spark_sql_cli() as client:
        yield client


@pytest.fixture(params=CLIENT_PARAMS)
def sql_client(request: pytest.FixtureRequest) -> SqlClient:
    """The test's kind of client (each test runs once per kind)."""
    kind = request.param
    if kind == CLASSIC:
        return ClassicClient(request.getfixturevalue("classic_spark"))
    if kind == CONNECT:
        client: ConnectClient = request.getfixturevalue("connect_sql_client")
        return client
    if kind == THRIFT:
        return ThriftClient(request.getfixturevalue("thrift_jdbc_server"))
    spark_sql: SparkSqlClient = request.getfixturevalue("spark_sql_client")
    return spark_sql
