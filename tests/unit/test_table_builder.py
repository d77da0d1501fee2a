"""LanceTableBuilder's checks of what is declared (no Spark: types parsed by stand-ins)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from lance_spark import InvalidOptionError, LanceTableBuilder, SchemaMismatchError
from lance_spark.table.builder import BuildMode

_TYPES: dict[str, DataType] = {"int": IntegerType(), "bigint": LongType(), "string": StringType()}
_DDL = {
    "a int, b string COMMENT 'bee'": StructType(
        [
            StructField("a", IntegerType(), True),
            StructField("b", StringType(), True, {"comment": "bee"}),
        ]
    ),
    "B bigint NOT NULL": StructType([StructField("B", LongType(), False)]),
}


def _builder(mode: BuildMode = BuildMode.CREATE) -> LanceTableBuilder:
    session: Any = None  # nothing here reaches Spark before execute()
    return LanceTableBuilder(session, mode)


def _schema(builder: LanceTableBuilder) -> StructType:
    return builder.declared_schema(_TYPES.__getitem__, _DDL.__getitem__)


def test_declared_columns_in_order_with_types_nullability_and_comments() -> None:
    builder = (
        _builder()
        .addColumn("id", "bigint", nullable=False, comment="the key")
        .addColumns("a int, b string COMMENT 'bee'")
        .addColumns([StructField("c", IntegerType(), True, {"comment": "see"})])
        .addColumn("d", StringType())
    )
    schema = _schema(builder)
    assert [(f.name, f.dataType, f.nullable) for f in schema] == [
        ("id", LongType(), False),
        ("a", IntegerType(), True),
        ("b", StringType(), True),
        ("c", IntegerType(), True),
        ("d", StringType(), True),
    ]
    assert [f.metadata.get("comment") for f in schema] == ["the key", None, "bee", "see", None]


def test_a_name_declared_twice_is_refused_in_any_case() -> None:
    builder = _builder().addColumn("id", "int")
    with pytest.raises(SchemaMismatchError, match=r"'ID' is declared twice.*columns: id"):
        builder.addColumn("ID", "bigint")
    # A DDL list is parsed by execute(): its clash is found there.
    builder = _builder().addColumn("b", "int").addColumns("B bigint NOT NULL")
    with pytest.raises(SchemaMismatchError, match="'B' is declared twice"):
        _schema(builder)


def test_no_column_is_refused_naming_the_method() -> None:
    with pytest.raises(InvalidOptionError, match=r"LanceTable\.replace\(\) needs at least one"):
        _schema(_builder(BuildMode.REPLACE))


def test_reserved_property_keys_are_refused_at_once() -> None:
    # Types and empty values: tests/unit/test_table_arguments.py.
    with pytest.raises(InvalidOptionError, match=r"'location' is reserved.*choose another"):
        _builder().property("location", "/x")


def test_property_values_must_be_strings_as_in_delta() -> None:
    with pytest.raises(TypeError, match=r"property\(\) argument 'value' takes a string, not True"):
        _builder().property("flag", True)  # type: ignore[arg-type]
    assert _builder().property("n", "3")._properties == {"n": "3"}
