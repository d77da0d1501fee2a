"""The README's Python examples (```python blocks) run, in order, against the test session.

Blocks fenced ```py are illustrations that need something else (a Connect server) and are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import lance
import pytest
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_examples_run(spark: SparkSession, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {}
    try:
        for block in blocks:
            code = block.replace("/tmp/lance_spark_readme", str(tmp_path))
            exec(compile(code, str(README), "exec"), namespace)
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
    finally:
        spark.sql("DROP TABLE IF EXISTS pets")
        spark.sql("DROP TABLE IF EXISTS toys")
        spark.sql("DROP TABLE IF EXISTS pets_copy")
        spark.sql("DROP TABLE IF EXISTS reviews")
