"""Shared fixtures: one SparkSession for the whole run, and fresh table paths.

Two modes. ``spark`` is the classic (Py4J) session. A module with
``pytestmark = [..., pytest.mark.both_modes]`` runs each test that uses ``spark`` twice, ids
``[classic]`` and ``[connect]``: on the classic session and on a Spark Connect session whose
server the tests start on 127.0.0.1 (on first use, stopped at the end of the run). Everything
built on ``spark`` (``view``, the module's own fixtures) follows the mode. The Connect variants
carry the ``connect`` marker: ``-m "not connect"`` skips them. This is the pairing of Spark's
own Python tests (a base mixin plus its Connect parity class) for function-style tests.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _quick import SMOKES
from _servers import FAST_JVM
from hypothesis import settings

# No per-example deadline: CI machines are shared and timings vary; speed lives in benchmarks/.
settings.register_profile("lance_spark", deadline=None, max_examples=60)
settings.load_profile("lance_spark")

REPO = Path(__file__).resolve().parent.parent
# Workers must run this interpreter (the project's venv) or they will not find the packages.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))
# Every Spark JVM the tests start (the sessions, servers, CLIs and drivers of their own, which
# inherit this environment) with _servers.FAST_JVM: SPARK_SUBMIT_OPTS goes to a driver's JVM,
# SPARK_LAUNCHER_OPTS to the one spark-class runs first to build its command line.
os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_JVM)
os.environ.setdefault("SPARK_LAUNCHER_OPTS", FAST_JVM)


CLASSIC = "classic"
CONNECT = "connect"

# make test runs two workers (pytest-xdist: -n 2 --dist loadfile --no-loadscope-reorder, a
# file's tests on one worker, files handed out in this order). The files that take longest go
# first (longest first: the worker-seconds of each in a make test run, 2026-11-27), so that no
# worker is left alone at the end with one of them; the others keep their order.
_LONGEST_FIRST = (
    "tests/sql/test_clients.py",
    "tests/packaging/",
    "tests/spark/test_streaming.py",
    "tests/spark/test_companion_setup.py",
    "tests/spark/test_orphans.py",
    "tests/spark/test_benchmark_smoke.py",
    "tests/spark/test_console.py",
    "tests/spark/test_discovery.py",
    "tests/s3/",
    "tests/spark/test_damaged.py",
    "tests/spark/test_idempotent_writes.py",
    "tests/cluster/",
    "tests/spark/test_concurrency.py",
    "tests/spark/test_demo.py",
    "tests/docs/",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, p in enumerate(_LONGEST_FIRST) if item.nodeid.startswith(p)),
            len(_LONGEST_FIRST),
        )

    items.sort(key=rank)
    smokes = set(SMOKES.values())
    for item in items:
        if item.nodeid in smokes or item.nodeid.startswith("tests/unit/"):
            item.add_marker(pytest.mark.quick)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spark" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_modes"):
        metafunc.parametrize(
            "spark",
            [
                pytest.param(CLASSIC, id=CLASSIC),
                pytest.param(CONNECT, id=CONNECT, marks=pytest.mark.connect),
            ],
            indirect=True,
            # Per module: its classic tests run first, then its Connect tests.
            scope="module",
        )


# PySpark builds Columns, UDFs and functions (``F.col``, ``F.lit``, ``@F.udf``) for Spark
# Connect only when this variable is set ("remote mode", as in every Connect-only client);
# otherwise it builds classic Py4J objects, which a Connect DataFrame rejects.
_REMOTE_MODE = "SPARK_CONNECT_MODE_ENABLED"


@contextlib.contextmanager
def _remote_mode(on: bool) -> Iterator[None]:
    before = os.environ.get(_REMOTE_MODE)
    if on:
        os.environ[_REMOTE_MODE] = "1"
    else:
        os.environ.pop(_REMOTE_MODE, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_REMOTE_MODE, None)
        else:
            os.environ[_REMOTE_MODE] = before


def _is_connect_test(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("spark") == CONNECT


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
    """The session of the test's mode (classic unless the module runs in both modes)."""
    mode = getattr(request, "param", CLASSIC)
    session = request.getfixturevalue("classic_spark" if mode == CLASSIC else "connect_spark")
    # Remote mode also for fixtures built on a Connect ``spark``.
    with _remote_mode(mode == CONNECT):
        yield session


@pytest.fixture(autouse=True)
def _pyspark_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """Remote mode exactly for the Connect tests (and tests using ``connect_spark``)."""
    node = request.node
    on = _is_connect_test(node) or "connect_spark" in getattr(node, "fixturenames", ())
    with _remote_mode(on):
        yield


@pytest.fixture(scope="session")
def classic_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    import lance_spark

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.appName("lance_spark-tests")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .getOrCreate()
    )
    lance_spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_url() -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Spark Connect server that lives until the end of the run,
    with the JVM companion loaded from its configuration (as a user's server would be)."""
    from _servers import connect_server

    import lance_spark

    with connect_server(lance_spark.spark_conf()) as url:
        yield url


@pytest.fixture(scope="session")
def connect_spark(connect_url: str) -> Iterator[object]:
    """A Spark Connect session on the tests' server, registered like the classic one."""
    # The generic builder refuses a remote session next to the classic one in this process
    # (SESSION_ALREADY_EXIST); the Connect builder itself does not.
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    import lance_spark

    session = ConnectSession.builder.remote(connect_url).create()
    with _remote_mode(True):
        lance_spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    """A path where no table exists yet."""
    return str(tmp_path / "table.lance")


@pytest.fixture
def view(spark: object) -> Iterator[Callable[[object], str]]:
    """Registers DataFrames as temporary views (unique names) for one test; drops them after."""
    names: list[str] = []

    def register(frame: object) -> str:
        name = f"view_{uuid.uuid4().hex[:12]}"
        frame.createOrReplaceTempView(name)  # type: ignore[attr-defined]
        names.append(name)
        return name

    yield register
    for name in names:
        spark.catalog.dropTempView(name)  # type: ignore[attr-defined]
