"""Every Python example of the docs site runs: the pages' ```python blocks, in the order of the
site's menu, in one namespace (each page continues from the ones before it, as the quick start
says), on the test run's classic session; the Spark Connect page runs its own example on the
test run's Connect server. A block fenced ```py is an illustration and is not run."""

from __future__ import annotations

from pathlib import Path

import lance
import pytest
from pyspark.sql import SparkSession

from tests.docs._pages import DOCS, EXAMPLE_ROOT, nav_pages, python_blocks

pytestmark = pytest.mark.spark

CONNECT_PAGE = DOCS / "connect.md"
CATALOG_TABLES = ("pets", "toys", "pets_copy", "reviews")


def _run(page: Path, namespace: dict[str, object], root: Path) -> int:
    blocks = python_blocks(page)
    for number, block in enumerate(blocks, 1):
        code = block.replace(EXAMPLE_ROOT, str(root))
        try:
            exec(compile(code, f"{page.relative_to(DOCS)} (block {number})", "exec"), namespace)
        except Exception as exc:
            exc.add_note(f"in the example {number} of docs/{page.relative_to(DOCS)}")
            raise
    return len(blocks)


def test_every_page_runs_in_the_order_of_the_menu(spark: SparkSession, tmp_path: Path) -> None:
    pages = [p for p in nav_pages() if p != CONNECT_PAGE]
    namespace: dict[str, object] = {}
    ran: dict[str, int] = {}
    try:
        for page in pages:
            ran[page.stem] = _run(page, namespace, tmp_path)
    finally:
        for table in CATALOG_TABLES:
            spark.sql(f"DROP TABLE IF EXISTS {table}")
    # the guides have examples (a page whose blocks lost their fence would run nothing)
    for guide in ("quickstart", "reading", "writing", "time-travel", "merge-update-delete",
                  "catalog", "table-api", "branches", "creating-tables", "streaming",
                  "search", "sql"):  # fmt: skip
        assert ran[guide] >= 1, guide
    # what the examples made, read back with pylance
    ds = lance.dataset(str(tmp_path / "pets.lance"))
    assert ds.schema.field("embedding").type.list_size == 2
    assert ds.count_rows() > 0
    assert lance.dataset(str(tmp_path / "toys.lance")).count_rows() == 1
    photos = lance.dataset(str(tmp_path / "photos.lance"))
    assert photos.version == 1 and photos.count_rows() == 3
    assert photos.schema.field("embedding").type.list_size == 2
    reviews = lance.dataset(str(tmp_path / "reviews.lance"))
    assert reviews.schema.names == ["id", "verdict"]
    assert reviews.checkout_version(3).count_rows() == 1
    features = lance.dataset(str(tmp_path / "features.lance"))
    assert features.count_rows() == 10


def test_the_spark_connect_page_runs_on_a_connect_server(
    connect_spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = python_blocks(CONNECT_PAGE)
    assert len(blocks) == 1
    # The page's session is the test run's Connect session: PySpark makes no second (remote)
    # session in a process that runs a classic one, as this test process does.
    make_session = 'SparkSession.builder.remote("sc://127.0.0.1:15002").getOrCreate()'
    assert make_session in blocks[0]
    code = blocks[0].replace(make_session, "_connect_session").replace(EXAMPLE_ROOT, str(tmp_path))
    namespace: dict[str, object] = {"_connect_session": connect_spark}
    exec(compile(code, "connect.md", "exec"), namespace)
    assert capsys.readouterr().out.splitlines()[-1] == "True"  # companion_enabled(spark)
    pets = lance.dataset(str(tmp_path / "connect_pets.lance"))
    assert pets.version == 2
    rows = sorted(pets.to_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "label": "cat"},
        {"id": 2, "label": "hound"},
        {"id": 3, "label": "owl"},
    ]
