"""History, restore, tags and clones of a Lance table (behind :class:`LanceTable`).

Versions committed by lance_spark carry Delta-like transaction properties (operation,
parameters, metrics, userMetadata, appId: see :mod:`lance_spark.source.commit`); versions of
other Lance writers are described from their Lance operation.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import lance
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lance_spark.errors import InvalidOptionError, VersionNotFoundError
from lance_spark.source import commit as _commit
from lance_spark.source.dataset import (
    VersionLog,
    open_version,
    resolve_version,
    transaction,
    version_timestamps,
)
from lance_spark.source.options import TimeTravel
from lance_spark.table.context import TableContext

# Lance operation classes -> Delta-like operation names, for versions written by other Lance
# writers (no lance_spark.* transaction properties). Anything else: its name, upper-cased.
_OPERATION_NAMES = {
    "Append": "WRITE",
    "Overwrite": "WRITE",
    "Delete": "DELETE",
    "Update": "UPDATE",
    "Merge": "ADD COLUMNS",
    "Restore": "RESTORE",
    "Rewrite": "OPTIMIZE",
    "CreateIndex": "CREATE INDEX",
    "Project": "CHANGE COLUMNS",
    "UpdateConfig": "SET TBLPROPERTIES",
    "DataReplacement": "REPLACE DATA",
}

_STR_MAP = MapType(StringType(), StringType())
HISTORY_SCHEMA = StructType(
    [
        StructField("version", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("operation", StringType(), True),
        StructField("operationParameters", _STR_MAP, True),
        StructField("operationMetrics", _STR_MAP, True),
        StructField("userMetadata", StringType(), True),
        StructField("appId", StringType(), True),
    ]
)
TAGS_SCHEMA = StructType(
    [
        StructField("tag", StringType(), False),
        StructField("version", LongType(), False),
        StructField("createdAt", TimestampType(), True),
    ]
)
RESTORE_METRICS = (
    "table_size_after_restore",
    "num_of_files_after_restore",
    "num_removed_files",
    "num_restored_files",
    "removed_files_size",
    "restored_files_size",
)


def history(table: TableContext, limit: int | None) -> DataFrame:
    """One row per version, newest first (see :meth:`LanceTable.history`)."""
    return table.spark.createDataFrame(history_rows(table, limit), HISTORY_SCHEMA)


def history_rows(table: TableContext, limit: int | None) -> list[tuple[Any, ...]]:
    """The rows of :func:`history` (``HISTORY_SCHEMA``); needs no Spark session."""
    if limit is not None and limit < 1:
        raise InvalidOptionError(f"history limit={limit} must be at least 1")
    ds = table.open()
    if limit is None:
        stamps = sorted(version_timestamps(ds), key=lambda p: -p[0])
    else:  # only the manifests of the last `limit` versions are read
        log = VersionLog(ds, uri=table.uri)
        stamps = [(v, log.timestamp(v)) for v in log.newest(limit)]
    return [(v, stamp, *describe_version(ds, v)) for v, stamp in stamps]


RESTORE_SCHEMA = StructType([StructField(k, LongType(), False) for k in RESTORE_METRICS])


def restore(table: TableContext, travel: TimeTravel) -> DataFrame:
    """Commit a new version whose content is the one ``travel`` names; one row of metrics."""
    return table.spark.createDataFrame([restore_row(table, travel)], RESTORE_SCHEMA)


def restore_row(table: TableContext, travel: TimeTravel) -> tuple[int, ...]:
    """:func:`restore`'s work and its row (``RESTORE_SCHEMA``); needs no Spark session."""
    ds = table.open()
    target = resolve_version(ds, travel, uri=table.uri)
    parameters = {"version": str(target)}
    if travel.timestamp is not None:
        parameters = {"timestamp": travel.timestamp.isoformat(), **parameters}
    old = open_version(table.uri, target, storage=table.storage)
    current_files = _data_files(ds)
    target_files = _data_files(old)
    removed = current_files.keys() - target_files.keys()
    restored = target_files.keys() - current_files.keys()
    metrics = {
        "table_size_after_restore": sum(target_files.values()),
        "num_of_files_after_restore": len(target_files),
        "num_removed_files": len(removed),
        "num_restored_files": len(restored),
        "removed_files_size": sum(current_files[k] for k in removed),
        "restored_files_size": sum(target_files[k] for k in restored),
    }
    _commit.commit(
        table.uri,
        lance.LanceOperation.Restore(target),
        read_version=int(ds.version),
        info=_commit.CommitInfo(
            operation="RESTORE", parameters=parameters, metrics=metrics, app_id=table.app_id
        ),
        storage=table.storage,
    )
    return tuple(int(metrics[k]) for k in RESTORE_METRICS)


def create_tag(table: TableContext, name: str, version: int | None) -> None:
    ds = table.open()
    target = resolve_version(
        ds, TimeTravel(version=None if version is None else int(version)), uri=table.uri
    )
    tags = ds.tags.list()
    if name in tags:
        raise InvalidOptionError(
            f"tag {name!r} already exists in the Lance table at {table.uri!r} (version "
            f"{tags[name]['version']}); delete it first to move it"
        )
    ds.tags.create(name, target)


def delete_tag(table: TableContext, name: str) -> None:
    ds = table.open()
    tags = ds.tags.list()
    if name not in tags:
        known = ", ".join(sorted(tags)) or "none"
        raise VersionNotFoundError(
            f"tag {name!r} does not exist in the Lance table at {table.uri!r}; tags: {known}"
        )
    ds.tags.delete(name)


def list_tags(table: TableContext) -> DataFrame:
    tags = table.open().tags.list()
    rows = [
        (name, int(info["version"]), _utc_or_none(info.get("created_at")))
        for name, info in sorted(tags.items())
    ]
    return table.spark.createDataFrame(rows, TAGS_SCHEMA)


def describe_version(
    ds: lance.LanceDataset, version: int
) -> tuple[str, dict[str, str], dict[str, str], str | None, str | None]:
    """(operation, parameters, metrics, userMetadata, appId) of one version."""
    tx = transaction(ds, version)
    if tx is None:  # no transaction file (very old writers) or unreadable
        return ("CREATE TABLE" if version == 1 else "UNKNOWN", {}, {}, None, None)
    props = dict(tx.transaction_properties or {})
    operation = props.get(_commit.PROP_OPERATION)
    if operation is None:
        return (_lance_operation_name(tx, version), {}, {}, None, None)
    return (
        operation,
        _json_map(props.get(_commit.PROP_PARAMETERS)),
        _json_map(props.get(_commit.PROP_METRICS)),
        props.get(_commit.PROP_USER_METADATA),
        props.get(_commit.PROP_APP_ID),
    )


def _lance_operation_name(tx: lance.Transaction, version: int) -> str:
    kind = type(tx.operation).__name__
    if kind == "BaseOperation":  # an operation pylance does not expose (e.g. compaction's
        return "UNKNOWN"  # fragment-id reservation): say so rather than guess
    if kind == "Overwrite" and (version == 1 or not tx.read_version):
        return "CREATE TABLE"
    op: Any = tx.operation
    if kind == "CreateIndex" and not op.new_indices and op.removed_indices:
        return "DROP INDEX"  # Lance drops an index with a CreateIndex that adds none
    if kind in _OPERATION_NAMES:
        return _OPERATION_NAMES[kind]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", kind).upper() or "UNKNOWN"


def _json_map(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}


def _data_files(ds: lance.LanceDataset) -> dict[tuple[object, str], int]:
    """Data files of the version opened as ``ds``: (base, path) -> size in bytes (0 unknown)."""
    out: dict[tuple[object, str], int] = {}
    for fragment in ds.get_fragments():
        for data_file in fragment.data_files():
            key = (data_file.base_id, str(data_file.path))
            out[key] = int(data_file.file_size_bytes or 0)
    return out


def utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _utc_or_none(when: object) -> datetime | None:
    return utc(when) if isinstance(when, datetime) else None
