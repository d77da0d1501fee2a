"""Names the companion's Java and lance_spark's Python must agree on, read from the Java
source (no JVM): a name added on one side only would make a column or a call that the other
side does not know."""

from __future__ import annotations

import re
from pathlib import Path

from lance_spark import _spark
from lance_spark.source import options, row_level
from lance_spark.source.options import (
    METADATA_COLUMN_NAMES,
    ROW_LEVEL_OPERATION,
    ROW_LEVEL_OPERATIONS,
    ROW_LEVEL_VERSION,
    TABLE_OPERATION,
    TABLE_OPERATIONS,
)
from lance_spark.table import procedures

_SOURCES = Path(__file__).resolve().parents[2] / "jvm" / "src" / "lance_spark" / "companion"


def _java(name: str) -> str:
    return (_SOURCES / name).read_text(encoding="utf-8")


def test_metadata_columns_are_the_same_on_both_sides() -> None:
    found = re.search(r"METADATA_COLUMNS = List\.of\(([^)]*)\)", _java("LanceScanBuilder.java"))
    assert found is not None
    assert tuple(re.findall(r'"([^"]+)"', found.group(1))) == METADATA_COLUMN_NAMES


def test_protocol_is_the_same_on_both_sides() -> None:
    found = re.search(r"int PROTOCOL = (\d+);", _java("LanceExtensions.java"))
    assert found is not None and int(found.group(1)) == _spark.COMPANION_PROTOCOL


def test_every_java_procedure_is_a_python_one() -> None:
    declared = set(re.findall(r'PARAMETERS\.put\("(\w+)"', _java("LanceProcedures.java")))
    assert declared == {*procedures.PROCEDURES, *procedures.JOB_PROCEDURES} - {
        "create_index",
        "drop_index",
        "indexes",
        "properties",
        "pin",
    }
    search_call = re.search(r'String CALL = "(\w+)"', _java("LanceSearchFunction.java"))
    assert search_call is not None and search_call.group(1) == procedures.SEARCH_FUNCTION_CALL


def _constant(source: str, name: str) -> str:
    """A Java constant's value: a literal, or the option a ``LanceOptions.name("x")`` names."""
    option = re.search(rf'static final \w+ {name} = LanceOptions\.name\("([^"]+)"\);', source)
    if option is not None:
        return options.OPTIONS_BY_KEY[option.group(1).lower()].name
    found = re.search(rf"static final \w+ {name} = \"?([^\";]+)\"?;", source)
    assert found is not None, name
    return found.group(1)


def test_every_option_the_companion_names_is_in_the_registry() -> None:
    named = {
        m
        for path in sorted(_SOURCES.glob("*.java"))
        for m in re.findall(r'LanceOptions\.(?:name|names)\("([^"]+)"\)', path.read_text())
    }
    assert named, "the companion names options through LanceOptions"
    for name in named:
        assert name.lower() in options.OPTIONS_BY_KEY, name
        assert options.OPTIONS_BY_KEY[name.lower()].name == name, name


def test_row_level_change_rows_are_the_same_on_both_sides() -> None:
    operation = _java("LanceRowLevelOperation.java")
    assert (
        _constant(operation, "OPERATION_COLUMN"),
        _constant(operation, "ROW_ADDRESS_COLUMN"),
        _constant(operation, "ROW_ID_COLUMN"),
    ) == row_level.DELTA_COLUMNS
    assert _constant(operation, "OPERATION_OPTION").lower() == ROW_LEVEL_OPERATION
    assert _constant(operation, "VERSION_OPTION").lower() == ROW_LEVEL_VERSION
    writer = _java("LanceDeltaWriter.java")
    codes = {int(_constant(writer, kind.upper())): kind for kind in ("delete", "update", "insert")}
    assert codes == row_level.DELTA_KINDS
    # Spark's RowLevelOperation.Command names, which the companion passes as the operation.
    assert set(ROW_LEVEL_OPERATIONS) == {"DELETE", "UPDATE", "MERGE"}


def test_table_operations_are_the_same_on_both_sides() -> None:
    catalog = _java("LanceSessionCatalog.java")
    assert _constant(catalog, "TABLE_OPERATION").lower() == TABLE_OPERATION
    named = {
        _constant(catalog, name)
        for name in ("CREATE_AS_SELECT", "REPLACE_AS_SELECT", "CREATE_OR_REPLACE_AS_SELECT")
    }
    assert named == set(TABLE_OPERATIONS)
