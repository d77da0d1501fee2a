"""Lazy access to the bytes of a blob column (``LanceTable.blobs``): pylance ``BlobFile``
objects, file-like, that read a blob's bytes only when asked (for training loops that stream
images or videos row by row instead of scanning them whole)."""

from __future__ import annotations

from collections.abc import Sequence

import lance
import pyarrow as pa

from lance_spark.errors import InvalidArgumentError
from lance_spark.source import types as _types
from lance_spark.table.context import TableContext

_METHOD = "LanceTable.blobs()"


def take_blobs(
    table: TableContext,
    column: str,
    *,
    ids: Sequence[int] | None,
    addresses: Sequence[int] | None,
    where: str | None,
) -> list[lance.BlobFile | None]:
    """The blobs of ``column`` in the rows with row ids ``ids``, row addresses ``addresses``
    or matching the Lance predicate ``where`` (at most one of them; none: every row), in that
    order; None for a null value."""
    given = [
        n for n, v in (("ids", ids), ("addresses", addresses), ("where", where)) if v is not None
    ]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"{_METHOD}: give at most one of ids, addresses and where, got {' and '.join(given)}"
        )
    ds = table.open()
    _check_blob_column(ds.schema, column, table.uri)
    if ids is not None:
        return list(ds.take_blobs(column, ids=list(ids)))
    if addresses is None:
        scan = ds.scanner(columns=[], filter=where, with_row_address=True)
        addresses = scan.to_table().column("_rowaddr").to_pylist()
    return list(ds.take_blobs(column, addresses=list(addresses)))


def _check_blob_column(schema: pa.Schema, column: str, uri: str) -> None:
    blobs = _types.blob_columns(schema)
    if column in blobs:
        return
    what = "not a blob column" if column in schema.names else "not a column"
    raise InvalidArgumentError(
        f"{_METHOD}: {column!r} is {what} of the table at {uri!r}; its blob columns: "
        f"{', '.join(blobs) or 'none (write one with the <col>.lance.encoding=blob option)'}"
    )
