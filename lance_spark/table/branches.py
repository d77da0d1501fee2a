"""Branches of a Lance table (behind :class:`LanceTable`): create, delete, list.

A branch is a line of versions of its own that starts from a version of another branch:
writes to it never touch the main branch's versions, and the main branch's writes never show
on it. pylance stores branch ``b`` as a dataset at ``<table>/tree/b`` whose first version is
the one it was created from; its data files stay the parent's until rewritten, so creating a
branch copies no data.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from lance_spark.errors import InvalidOptionError
from lance_spark.source.dataset import (
    branch_not_found,
    branch_uri,
    open_latest,
    resolve_version,
)
from lance_spark.source.options import MAIN_BRANCH, TimeTravel, check_branch_name
from lance_spark.table.context import TableContext

BRANCHES_SCHEMA = StructType(
    [
        StructField("branch", StringType(), False),
        StructField("version", LongType(), False),  # its latest version
        StructField("parentBranch", StringType(), True),
        StructField("parentVersion", LongType(), True),
        StructField("createdAt", TimestampType(), True),
    ]
)


def create_branch(
    table: TableContext, name: str, version: int | str | None, *, if_not_exists: bool
) -> bool:
    """Create branch ``name`` from ``version`` (a number or a tag; None: the latest) of the
    branch ``table`` is on. False when it exists and ``if_not_exists``."""
    check_branch_name(name)
    known = open_latest(table.root, storage=table.storage).branches.list()
    if name in known:
        if if_not_exists:
            return False
        info = known[name]
        raise InvalidOptionError(
            f"branch {name!r} already exists in the Lance table at {table.root!r} (created "
            f"from version {info.get('parent_version')} of branch "
            f"{info.get('parent_branch') or MAIN_BRANCH!r}); delete it first to create it anew"
        )
    source = table.open()
    travel = TimeTravel(tag=version) if isinstance(version, str) else TimeTravel(version=version)
    target = resolve_version(source, travel, uri=table.uri, branch=table.branch)
    # An int is a version of the branch `source` is on (pylance's rule for create_branch).
    source.create_branch(name, target, storage_options=dict(table.storage) or None)
    return True


def delete_branch(table: TableContext, name: str, *, if_exists: bool) -> bool:
    """Delete branch ``name`` (its own versions and the files only they use). False when it
    does not exist and ``if_exists``."""
    if name == MAIN_BRANCH:
        raise InvalidOptionError(
            f"{MAIN_BRANCH!r} is the table's main branch and cannot be created or deleted"
        )
    root = open_latest(table.root, storage=table.storage)
    known = root.branches.list()
    if name not in known:
        if if_exists:
            return False
        raise branch_not_found(name, known, uri=table.root)
    children = sorted(b for b, info in known.items() if info.get("parent_branch") == name)
    if children:
        raise InvalidOptionError(
            f"branch {name!r} of the Lance table at {table.root!r} cannot be deleted: branch "
            f"{', '.join(map(repr, children))} was created from it; delete that first"
        )
    tags = sorted(t for t, info in root.tags.list().items() if info.get("branch") == name)
    if tags:
        raise InvalidOptionError(
            f"branch {name!r} of the Lance table at {table.root!r} cannot be deleted: tag "
            f"{', '.join(map(repr, tags))} names a version of it; delete the tag first"
        )
    root.branches.delete(name)
    return True


def list_branches(table: TableContext) -> DataFrame:
    """Every branch, ``main`` first then by name: its latest version, the branch and version
    it was created from, and when."""
    return table.spark.createDataFrame(branch_rows(table), BRANCHES_SCHEMA)


def branch_rows(table: TableContext) -> list[tuple[Any, ...]]:
    """The rows of :func:`list_branches` (``BRANCHES_SCHEMA``); needs no Spark session."""
    root = open_latest(table.root, storage=table.storage)
    rows: list[tuple[Any, ...]] = [(MAIN_BRANCH, int(root.version), None, None, None)]
    for name, info in sorted(root.branches.list().items()):
        latest = open_latest(branch_uri(table.root, name), storage=table.storage)
        rows.append(
            (
                name,
                int(latest.version),
                info.get("parent_branch") or MAIN_BRANCH,
                int(info["parent_version"]),
                _created(info.get("create_at")),
            )
        )
    return rows


def _created(seconds: object) -> datetime | None:
    # pylance gives a branch's creation time as seconds since the epoch.
    return datetime.fromtimestamp(seconds, UTC) if isinstance(seconds, int) else None
