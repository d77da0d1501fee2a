"""Every public method of LanceTable, its MERGE builder and its table builder checks its
arguments when called: a wrong type is an ArgumentTypeError (a TypeError), a wrong value of
the right type an InvalidArgumentError (a ValueError); both name the method, the argument and
the value, and nothing runs. No Spark: the checks come before any use of the session."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.connect import functions as CF  # builds a Column without a session

from lance_spark import LanceTable, LanceTableBuilder
from lance_spark.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidOptionError,
    LanceSparkError,
)
from lance_spark.table import arguments
from lance_spark.table.builder import BuildMode
from lance_spark.table.merge import LanceMergeBuilder

T = TypeError
V = ValueError


def _table() -> Any:
    table: Any = object.__new__(LanceTable)  # no session: nothing may reach it
    return table


def _session() -> Any:
    return object.__new__(SparkSession)


def _merge() -> Any:
    builder: Any = object.__new__(LanceMergeBuilder)
    return builder


def _builder() -> LanceTableBuilder:
    session: Any = None
    return LanceTableBuilder(session, BuildMode.CREATE)


def _frame() -> Any:
    """A DataFrame without a session (its checks pass; nothing may use it)."""
    return object.__new__(DataFrame)


class _Frame:
    """Not a DataFrame."""

    def __repr__(self) -> str:  # the same test id in every pytest worker
        return "_Frame()"


# (method, argument, call, bad value, exception kind)
CASES: list[tuple[str, str, Callable[[Any], Any], Any, type[Exception]]] = [
    ("forPath", "spark", lambda v: LanceTable.forPath(v, "/t"), "spark", T),
    ("forPath", "path", lambda v: LanceTable.forPath(_session(), v), 10, T),
    ("forPath", "path", lambda v: LanceTable.forPath(_session(), v), " ", V),
    ("forPath", "storage_options", lambda v: LanceTable.forPath(_session(), "/t", v), "k=v", T),
    ("forName", "name", lambda v: LanceTable.forName(_session(), v), None, T),
    ("isLanceTable", "path", lambda v: LanceTable.isLanceTable(_session(), v), b"/t", T),
    (
        "convertToLance",
        "parquet_path",
        lambda v: LanceTable.convertToLance(_session(), v, "/t"),
        1,
        T,
    ),
    (
        "convertToLance",
        "lance_uri",
        lambda v: LanceTable.convertToLance(_session(), "/p", v),
        "",
        V,
    ),
    (
        "convertToLance",
        "mode",
        lambda v: LanceTable.convertToLance(_session(), "/p", "/t", mode=v),
        1,
        T,
    ),
    (
        "convertToLance",
        "options",
        lambda v: LanceTable.convertToLance(_session(), "/p", "/t", options=v),
        [("a", 1)],
        T,
    ),
    (
        "convertToLance",
        "progress",
        lambda v: LanceTable.convertToLance(_session(), "/p", "/t", progress=v),
        "bar",
        T,
    ),
    ("create", "spark", lambda v: LanceTable.create(v), 5, T),
    ("create", "storage_options", lambda v: LanceTable.create(_session(), storage_options=v), 1, T),
    ("createIfNotExists", "spark", lambda v: LanceTable.createIfNotExists(v), "s", T),
    ("createOrReplace", "spark", lambda v: LanceTable.createOrReplace(v), [], T),
    ("replace", "spark", lambda v: LanceTable.replace(v), 1.0, T),
    ("toDF", "version", lambda v: _table().toDF(version=v), "1", T),
    ("toDF", "version", lambda v: _table().toDF(version=v), -1, V),
    ("toDF", "timestamp", lambda v: _table().toDF(timestamp=v), 12345, T),
    ("toDF", "tag", lambda v: _table().toDF(tag=v), 3, T),
    ("countRows", "filter", lambda v: _table().countRows(v), CF.col("x") > 1, T),
    ("blobs", "column", lambda v: _table().blobs(v), 1, T),
    ("blobs", "ids", lambda v: _table().blobs("b", v), [1, "2"], V),
    ("blobs", "ids", lambda v: _table().blobs("b", v), 3, T),
    ("blobs", "addresses", lambda v: _table().blobs("b", addresses=v), (True,), V),
    ("blobs", "where", lambda v: _table().blobs("b", where=v), " ", V),
    ("delete", "condition", lambda v: _table().delete(v), 1, T),
    ("delete", "condition", lambda v: _table().delete(v), "  ", V),
    ("update", "condition", lambda v: _table().update(v, {"a": "1"}), True, T),
    ("update", "set", lambda v: _table().update("a > 1", v), {1: ""}, V),
    ("update", "set", lambda v: _table().update("a > 1", v), [("a", "1")], T),
    ("update", "set", lambda v: _table().update("a > 1", v), {"a": 1}, V),
    ("alias", "name", lambda v: _table().alias(v), 1, T),
    ("alias", "name", lambda v: _table().alias(v), "", V),
    ("merge", "source", lambda v: _table().merge(v, "t.id = s.id"), _Frame(), T),
    ("history", "limit", lambda v: _table().history(v), "10", T),
    ("history", "limit", lambda v: _table().history(v), 0, V),
    ("restoreToVersion", "version", lambda v: _table().restoreToVersion(v), "1", T),
    ("restoreToVersion", "version", lambda v: _table().restoreToVersion(v), 1.0, T),
    ("restoreToVersion", "version", lambda v: _table().restoreToVersion(v), True, T),
    ("restoreToVersion", "version", lambda v: _table().restoreToVersion(v), -2, V),
    ("restoreToTimestamp", "timestamp", lambda v: _table().restoreToTimestamp(v), 12345, T),
    (
        "restoreToTimestamp",
        "timestamp",
        lambda v: _table().restoreToTimestamp(v),
        datetime.date(2026, 1, 1),
        T,
    ),
    ("createTag", "name", lambda v: _table().createTag(v), 7, T),
    ("createTag", "version", lambda v: _table().createTag("t", v), "2", T),
    ("deleteTag", "name", lambda v: _table().deleteTag(v), "", V),
    ("branch", "name", lambda v: _table().branch(v), None, T),
    ("createBranch", "name", lambda v: _table().createBranch(v), 1, T),  # "": the name rules
    ("createBranch", "version", lambda v: _table().createBranch("b", v), 1.5, T),
    ("createBranch", "ifNotExists", lambda v: _table().createBranch("b", ifNotExists=v), "y", T),
    ("deleteBranch", "name", lambda v: _table().deleteBranch(v), "", V),
    ("deleteBranch", "ifExists", lambda v: _table().deleteBranch("b", ifExists=v), 1, T),
    ("vacuum", "retentionHours", lambda v: _table().vacuum(v), "168", T),
    ("vacuum", "retentionHours", lambda v: _table().vacuum(v), -1, V),
    ("vacuum", "dryRun", lambda v: _table().vacuum(dryRun=v), "yes", T),
    ("createIndex", "column", lambda v: _table().createIndex(v, "BTREE"), 1, T),
    ("createIndex", "index_type", lambda v: _table().createIndex("id", v), None, T),
    ("createIndex", "name", lambda v: _table().createIndex("id", "BTREE", name=v), 1, T),
    ("dropIndex", "name", lambda v: _table().dropIndex(v), "", V),
    ("optimizeIndices", "names", lambda v: _table().optimizeIndices(v), 3, T),
    ("optimizeIndices", "names", lambda v: _table().optimizeIndices(v), [], V),
    ("optimizeIndices", "retrain", lambda v: _table().optimizeIndices(retrain=v), "yes", T),
    ("search", "vector", lambda v: _table().search(v), "0.1,0.2", T),
    ("search", "vector", lambda v: _table().search(v), [0.1, "x"], V),
    ("search", "vector", lambda v: _table().search(v), np.zeros((2, 2)), V),
    ("search", "k", lambda v: _table().search([0.1], v), 0, V),
    ("search", "columns", lambda v: _table().search([0.1], columns=v), [1], V),
    ("search", "nprobes", lambda v: _table().search([0.1], nprobes=v), 2.5, T),
    ("nearest", "queries", lambda v: _table().nearest(v), [[0.1]], T),
    ("renameColumn", "old", lambda v: _table().renameColumn(v, "b"), 1, T),
    ("renameColumn", "new", lambda v: _table().renameColumn("a", v), "", V),
    ("dropColumns", "columns", lambda v: _table().dropColumns("a", v), 2, T),
    ("dropColumns", "ifExists", lambda v: _table().dropColumns("a", ifExists=v), None, T),
    ("alterColumn", "column", lambda v: _table().alterColumn(v), 1, T),
    ("alterColumn", "dataType", lambda v: _table().alterColumn("a", dataType=v), 5, T),
    ("alterColumn", "comment", lambda v: _table().alterColumn("a", comment=v), 5, T),
    ("addColumns", "columns", lambda v: _table().addColumns(v), "c int", T),
    ("addColumns", "columns", lambda v: _table().addColumns(v), {}, V),
    ("addColumns", "on", lambda v: _table().addColumns({"c": "1"}, on=v), 1, T),
    ("updateColumns", "source", lambda v: _table().updateColumns(v, on="id"), _Frame(), T),
    ("updateColumns", "on", lambda v: _table().updateColumns(_frame(), on=v), 1, T),
    ("updateColumns", "on", lambda v: _table().updateColumns(_frame(), on=v), "  ", V),
    ("shallowClone", "target", lambda v: _table().shallowClone(v), 10, T),
    ("shallowClone", "version", lambda v: _table().shallowClone("/c", version=v), 1.5, T),
    ("shallowClone", "replace", lambda v: _table().shallowClone("/c", replace=v), "yes", T),
    ("diff", "startVersion", lambda v: _table().diff(v), "1", T),
    ("diff", "endVersion", lambda v: _table().diff(1, v), -1, V),
    ("diff", "key", lambda v: _table().diff(1, key=v), 5, T),
    ("diff", "key", lambda v: _table().diff(1, key=v), [], V),
    ("whenMatchedUpdate", "condition", lambda v: _merge().whenMatchedUpdate(v, {"a": "1"}), 1, T),
    ("whenMatchedUpdate", "set", lambda v: _merge().whenMatchedUpdate(set=v), "a = 1", T),
    ("whenMatchedUpdateAll", "condition", lambda v: _merge().whenMatchedUpdateAll(v), 2, T),
    ("whenMatchedDelete", "condition", lambda v: _merge().whenMatchedDelete(v), [], T),
    (
        "whenNotMatchedInsert",
        "values",
        lambda v: _merge().whenNotMatchedInsert(values=v),
        {"": "1"},
        V,
    ),
    ("whenNotMatchedInsertAll", "condition", lambda v: _merge().whenNotMatchedInsertAll(v), "", V),
    (
        "whenNotMatchedBySourceUpdate",
        "set",
        lambda v: _merge().whenNotMatchedBySourceUpdate(set=v),
        {"a": None},
        V,
    ),
    (
        "whenNotMatchedBySourceDelete",
        "condition",
        lambda v: _merge().whenNotMatchedBySourceDelete(v),
        0,
        T,
    ),
    ("tableName", "identifier", lambda v: _builder().tableName(v), 1, T),
    ("tableName", "identifier", lambda v: _builder().tableName(v), "a..b", V),
    ("location", "location", lambda v: _builder().location(v), "", V),
    ("addColumn", "colName", lambda v: _builder().addColumn(v, "int"), "", V),
    ("addColumn", "dataType", lambda v: _builder().addColumn("x", v), 3, T),
    ("addColumn", "dataType", lambda v: _builder().addColumn("x", v), "", V),
    ("addColumn", "blob", lambda v: _builder().addColumn("x", "binary", blob=v), "yes", T),
    ("addColumn", "nullable", lambda v: _builder().addColumn("x", "int", nullable=v), "no", T),
    ("addColumn", "comment", lambda v: _builder().addColumn("x", "int", comment=v), 5, T),
    ("addColumns", "cols", lambda v: _builder().addColumns(v), 42, T),
    ("addColumns", "cols", lambda v: _builder().addColumns(v), "  ", V),
    ("addColumns", "cols", lambda v: _builder().addColumns(v), ["a int"], V),
    ("property", "key", lambda v: _builder().property(v, "x"), "", V),
    ("property", "value", lambda v: _builder().property("n", v), 1, T),
    ("comment", "comment", lambda v: _builder().comment(v), None, T),
]


@pytest.mark.parametrize(
    ("method", "argument", "call", "value", "kind"),
    CASES,
    ids=[f"{m}-{a}-{v!r}" for m, a, _, v, _ in CASES],
)
def test_a_bad_argument_is_refused_at_the_call_naming_it(
    method: str, argument: str, call: Callable[[Any], Any], value: Any, kind: type[Exception]
) -> None:
    expected = ArgumentTypeError if kind is T else InvalidArgumentError
    with pytest.raises(expected) as raised:
        call(value)
    message = str(raised.value)
    assert f"{method}()" in message and repr(argument) in message, message
    if not isinstance(value, (Column, _Frame)):
        assert repr(value) in message, message
    assert isinstance(raised.value, (LanceSparkError, kind))


def test_every_public_method_is_in_the_table() -> None:
    """Each public method with parameters has at least one case per checked parameter."""
    covered = {(m, a) for m, a, *_ in CASES}
    for cls in (LanceTable, LanceMergeBuilder, LanceTableBuilder):
        for name in dir(cls):
            method = getattr(cls, name)
            declared = getattr(method, "__wrapped__", None)
            if name.startswith("_") or declared is None:
                continue
            import inspect

            params = [p for p in inspect.signature(declared).parameters if p not in ("self", "cls")]
            for param in params:
                if param in ("params",):  # createIndex's **params: the index type's own
                    continue
                if (name, param) in covered:
                    continue
                # Parameters whose kind takes any value of their types (tested through
                # siblings of the same kind) are listed here explicitly.
                assert (name, param) in _SAME_KIND_AS_TESTED, f"{cls.__name__}.{name}({param})"


# (method, parameter) checked with a kind another row already tests.
_SAME_KIND_AS_TESTED = {
    ("forName", "spark"),
    ("isLanceTable", "spark"),
    ("isLanceTable", "storage_options"),
    ("convertToLance", "spark"),
    ("convertToLance", "parquetOptions"),
    ("convertToLance", "storage_options"),
    ("createIfNotExists", "storage_options"),
    ("createOrReplace", "storage_options"),
    ("replace", "storage_options"),
    ("merge", "condition"),
    ("search", "column"),
    ("search", "filter"),
    ("search", "refine_factor"),
    ("search", "metric"),
    ("search", "text"),
    ("search", "version"),
    ("nearest", "column"),
    ("nearest", "k"),
    ("nearest", "query_column"),
    ("nearest", "columns"),
    ("nearest", "filter"),
    ("nearest", "nprobes"),
    ("nearest", "refine_factor"),
    ("nearest", "metric"),
    ("nearest", "version"),
    ("whenMatchedDelete", "set"),
    ("whenNotMatchedInsert", "condition"),
    ("whenNotMatchedBySourceUpdate", "condition"),
}


def test_a_method_without_its_required_mapping_names_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"LanceTable\.update\(\) needs set="):
        _table().update("a > 1")
    with pytest.raises(InvalidArgumentError, match=r"whenMatchedUpdate\(\) needs set="):
        _merge().whenMatchedUpdate("s.a > 1")


def test_argument_errors_are_the_types_python_users_catch() -> None:
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(
        ArgumentTypeError, LanceSparkError
    )
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, InvalidOptionError)  # what earlier releases raised


def test_builders_take_the_active_session_and_say_when_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    with pytest.raises(InvalidArgumentError, match=r"LanceTable\.create\(\) needs a SparkSession"):
        LanceTable.create()
    active = _session()
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: active))
    for make in (
        LanceTable.create,
        LanceTable.createIfNotExists,
        LanceTable.createOrReplace,
        LanceTable.replace,
    ):
        assert make()._spark is active


def test_a_declaration_naming_no_parameter_fails_at_import() -> None:
    with pytest.raises(LanceSparkError, match="no parameters"):

        @arguments.checked(nme=arguments.NAME)
        def f(name: str) -> None: ...
