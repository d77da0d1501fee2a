"""Lance's procedures in Spark: what the companion's session catalog runs for
``CALL spark_catalog.system.<name>(table => ..., ...)`` and for the Delta statements its SQL
parser turns into such calls (``DESCRIBE HISTORY``, ``RESTORE``, ``VACUUM``, ``DESCRIBE
DETAIL``, tags, branches), from every client.

The JVM companion plans the call and hands it here through its planner call (a driver-side
Python worker, :mod:`lance_spark.source.scan_planner`): the Lance table as the catalog serves
it (the ``lance`` data source with its options: location, branch, storage) and the call's
arguments. There is no Spark session in that worker: each procedure does its work with pylance
and returns its rows, which travel back as one Arrow IPC stream. The table API
(:class:`~lance_spark.table.LanceTable`) runs the same engines.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lance_spark.errors import InvalidOptionError
from lance_spark.source import dataset
from lance_spark.source.datasource import LanceDataSource, _normalise_uri
from lance_spark.source.options import (
    TIMESTAMP_AS_OF,
    VERSION_AS_OF,
    parse_read_options,
)
from lance_spark.table import branches, detail, folder_catalog, history, maintenance
from lance_spark.table.context import TableContext

Rows = list[tuple[Any, ...]]


def _history(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    limit = args.get("limit")
    return history.HISTORY_SCHEMA, history.history_rows(
        table, None if limit is None else int(limit)
    )


def _restore(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    given = {k: str(args[k]) for k in ("version", "timestamp") if args.get(k) is not None}
    if len(given) != 1:
        raise InvalidOptionError(
            "restore takes one of version => (a number or a tag) and timestamp => (a timestamp)"
            f"; got {', '.join(sorted(given)) or 'neither'}"
        )
    key = VERSION_AS_OF if "version" in given else TIMESTAMP_AS_OF
    travel = parse_read_options({key: next(iter(given.values()))}).time_travel
    return history.RESTORE_SCHEMA, [history.restore_row(table, travel)]


def _vacuum(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    hours = args.get("retain_hours")
    row = maintenance.vacuum_row(
        table, 168.0 if hours is None else float(hours), dry_run=bool(args.get("dry_run"))
    )
    return maintenance.VACUUM_SCHEMA, [row]


def _detail(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return detail.DETAIL_SCHEMA, [detail.detail_row(table, name=args.get("name"))]


def _create_tag(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    version = args.get("version")
    history.create_tag(table, str(args["tag"]), None if version is None else int(version))
    return NO_ROWS


def _drop_tag(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    history.delete_tag(table, str(args["tag"]))
    return NO_ROWS


def _create_branch(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    version = args.get("version")
    source: int | str | None = args.get("tag") if version is None else int(version)
    branches.create_branch(
        table, str(args["branch"]), source, if_not_exists=bool(args.get("if_not_exists"))
    )
    return NO_ROWS


def _drop_branch(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    branches.delete_branch(table, str(args["branch"]), if_exists=bool(args.get("if_exists")))
    return NO_ROWS


def _branches(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return branches.BRANCHES_SCHEMA, branches.branch_rows(table)


NO_ROWS: tuple[StructType, Rows] = (StructType([]), [])
CATALOG_PREFIX = "catalog."

PROCEDURES: dict[str, Callable[[TableContext, Mapping[str, Any]], tuple[StructType, Rows]]] = {
    "history": _history,
    "restore": _restore,
    "vacuum": _vacuum,
    "detail": _detail,
    "create_tag": _create_tag,
    "drop_tag": _drop_tag,
    "create_branch": _create_branch,
    "drop_branch": _drop_branch,
    "branches": _branches,
}


def run(source: LanceDataSource, call: Mapping[str, Any]) -> dict[str, Any]:
    """Run the procedure ``call`` (``{"name", "args", "app_id"}``) on the table ``source``
    reads; the JSON reply: the result's Spark schema and its rows as base64 Arrow IPC."""
    name = str(call.get("name"))
    if name.startswith(CATALOG_PREFIX):  # the folder catalog's operations: JSON in and out
        operation = folder_catalog.OPERATIONS.get(name[len(CATALOG_PREFIX) :])
        if operation is None:
            raise InvalidOptionError(f"unknown folder catalog operation {name!r}")
        opts = parse_read_options(dict(source.options), session_storage=source.defaults.storage)
        root = _normalise_uri(opts.uri or "")
        return operation(
            root, opts.storage, {**(call.get("args") or {}), "app_id": call.get("app_id")}
        )
    procedure = PROCEDURES.get(name)
    if procedure is None:
        raise InvalidOptionError(
            f"unknown Lance procedure {name!r}; procedures: {', '.join(sorted(PROCEDURES))}"
        )
    opts = parse_read_options(dict(source.options), session_storage=source.defaults.storage)
    if not opts.uri:
        raise InvalidOptionError(f"procedure {name!r} needs the table's location")
    root = _normalise_uri(opts.uri)
    table = TableContext(
        # No session in the planner worker: the procedures use none (see the module doc).
        spark=cast(SparkSession, None),
        uri=dataset.branch_location(root, opts.branch, storage=opts.storage),
        storage=opts.storage,
        branch=opts.branch,
        main_uri=root if opts.branch else None,
        application=str(call.get("app_id") or "") or None,
    )
    schema, rows = procedure(table, dict(call.get("args") or {}))
    return {"schema": schema.json(), "arrow": _arrow_ipc(schema, rows)}


def _arrow_ipc(schema: StructType, rows: Rows) -> str:
    if not schema.fields:
        return ""  # a procedure with no result
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema.fields)
    arrays = [
        pa.array(list(values), type=field.type)
        for values, field in zip(columns, arrow_schema, strict=True)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow_schema) as writer:
        writer.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
