"""Shared fixtures: one SparkSession for the whole run, and fresh table paths."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example deadline: CI machines are shared and timings vary; speed lives in benchmarks/.
settings.register_profile("lance_spark", deadline=None, max_examples=60)
settings.load_profile("lance_spark")

REPO = Path(__file__).resolve().parent.parent
# Workers must run this interpreter (the project's venv) or they will not find the packages.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
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
