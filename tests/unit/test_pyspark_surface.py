"""The private PySpark attributes the connector uses are listed in one place and checked at
``register`` against the installed PySpark."""

from __future__ import annotations

import ast
import pathlib

import pyspark
import pytest

from lance_spark._spark import pyspark_surface
from lance_spark._spark.pyspark_surface import SURFACE, Private, check_pyspark_surface
from lance_spark.errors import UnsupportedPySparkError

SPARK_PACKAGE = pathlib.Path(pyspark_surface.__file__).parent


def test_the_installed_pyspark_has_every_attribute_listed() -> None:
    pyspark_surface.missing_attributes.cache_clear()
    assert pyspark_surface.missing_attributes() == ()
    check_pyspark_surface()


def test_every_private_attribute_read_in_the_spark_package_is_listed() -> None:
    """An attribute with one leading underscore read in ``lance_spark/_spark`` is either
    listed in SURFACE or one of the package's own (assigned there)."""
    listed = {name for entry in SURFACE for name in entry.names}
    read: dict[str, set[str]] = {}
    own: set[str] = set()
    for path in sorted(SPARK_PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                if node.attr.startswith("__"):
                    continue
                if isinstance(node.ctx, ast.Store):
                    own.add(node.attr)
                read.setdefault(node.attr, set()).add(path.name)
    unlisted = {name: where for name, where in read.items() if name not in listed | own}
    assert not unlisted, f"add these to pyspark_surface.SURFACE: {unlisted}"


def test_a_missing_attribute_fails_register_naming_it_and_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = Private("pyspark.sql.readwriter:DataFrameWriter", ("_df", "_renamed_away"), "x")
    no_class = Private("pyspark.sql.readwriter:NoSuchWriter", ("_df",), "x")
    monkeypatch.setattr(pyspark_surface, "SURFACE", (gone, no_class))
    pyspark_surface.missing_attributes.cache_clear()
    try:
        with pytest.raises(UnsupportedPySparkError) as raised:
            check_pyspark_surface()
    finally:
        pyspark_surface.missing_attributes.cache_clear()
    message = str(raised.value)
    assert "pyspark.sql.readwriter:DataFrameWriter._renamed_away" in message
    assert "DataFrameWriter._df" not in message  # set in DataFrameWriter.__init__
    assert "pyspark.sql.readwriter:NoSuchWriter (class)" in message
    assert f"PySpark {pyspark.__version__}" in message
