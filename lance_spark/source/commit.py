"""Committing one Lance transaction per Spark job, with the metadata history reads later."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata

from lance_spark.errors import (
    CommitConflictError,
    ConcurrentModificationError,
    SchemaMismatchError,
)
from lance_spark.source import lance_errors
from lance_spark.source.dataset import PROP_READ_AS
from lance_spark.source.transactions import TxnId

# Keys of a version's transaction properties written by the connector.
PROP_OPERATION = "lance_spark.operation"
PROP_PARAMETERS = "lance_spark.operationParameters"
PROP_METRICS = "lance_spark.operationMetrics"
PROP_USER_METADATA = "lance_spark.userMetadata"
PROP_APP_ID = "lance_spark.appId"
PROP_ENGINE = "lance_spark.engine"
PROP_STATEMENT_ID = "lance_spark.statementId"


@dataclass(frozen=True)
class CommitInfo:
    """What a commit records about itself, read back by history."""

    operation: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, int] = field(default_factory=dict)
    user_metadata: str | None = None
    app_id: str | None = None
    txn: TxnId | None = None  # an idempotent write's id (streaming batch, txnAppId)
    # The Lance operation readers take the commit for when it is committed as another one
    # (an idempotent overwrite committed as an Update: see conflicting_overwrite_op).
    read_as: str | None = None
    statement_id: str | None = None  # the table API's id of the statement (options.STATEMENT_ID)

    def properties(self) -> dict[str, str]:
        from lance_spark._version import __version__

        props = {
            PROP_OPERATION: self.operation,
            PROP_PARAMETERS: json.dumps(dict(self.parameters), sort_keys=True),
            PROP_METRICS: json.dumps(dict(self.metrics), sort_keys=True),
            PROP_ENGINE: f"lance_spark/{__version__}",
        }
        if self.user_metadata is not None:
            props[PROP_USER_METADATA] = self.user_metadata
        if self.app_id:
            props[PROP_APP_ID] = self.app_id
        if self.txn is not None:
            props.update(self.txn.properties())
        if self.read_as is not None:
            props[PROP_READ_AS] = self.read_as
        if self.statement_id is not None:
            props[PROP_STATEMENT_ID] = self.statement_id
        return props


def commit(
    uri: str,
    operation: lance.LanceOperation.BaseOperation,
    *,
    read_version: int | None,
    info: CommitInfo,
    storage: Mapping[str, str],
    enable_stable_row_ids: bool | None = None,
) -> int:
    """Commit ``operation`` on ``read_version``; returns the new version number.

    ``read_version`` None creates the table. A conflict Lance cannot rebase becomes
    :class:`CommitConflictError` naming both versions, :class:`ConcurrentModificationError`
    when Lance says the change may succeed computed again on the newer version; the table is
    left as it was.
    """
    tx = lance.Transaction(
        read_version=read_version or 0,
        operation=operation,
        transaction_properties=info.properties(),
    )
    try:
        ds = lance.LanceDataset.commit(
            uri,
            tx,
            storage_options=dict(storage) or None,
            enable_stable_row_ids=enable_stable_row_ids,
        )
    except OSError as err:  # pylance's CommitConflictError is one
        conflict = lance_errors.commit_conflict(err)
        if conflict is None:
            raise
        latest = _latest_version(uri, storage)
        message = (
            f"{info.operation} on the Lance table at {uri!r} started from version "
            f"{read_version} but version {latest} was committed meanwhile by another writer, "
            f"and Lance cannot rebase this change onto it ({lance_errors.first_line(err)}). "
            "Nothing was committed; run the job again."
        )
        raise lost_race(
            message,
            retryable=conflict.retryable,
            read_version=read_version,
            conflicting_version=latest if isinstance(latest, int) else None,
        ) from err
    return int(ds.version)


def lost_race(
    message: str,
    *,
    retryable: bool,
    read_version: int | None,
    conflicting_version: int | None,
) -> CommitConflictError:
    """The connector's error for a commit Lance refused because another writer committed
    first: :class:`ConcurrentModificationError` when Lance says the change may succeed
    computed again on the newer version, else :class:`CommitConflictError`.

    Its own type, not a flag: an error raised in a Spark job reaches the driver as Spark's
    text of it, which keeps the type's name and the message only (_spark.connector_errors)."""
    if retryable:
        return ConcurrentModificationError(
            message, read_version=read_version, conflicting_version=conflicting_version
        )
    return CommitConflictError(message)


def create_empty(
    uri: str,
    schema: pa.Schema,
    *,
    overwrite: bool,
    info: CommitInfo,
    storage: Mapping[str, str],
    data_storage_version: str,
    enable_stable_row_ids: bool,
) -> int:
    """Create (``overwrite``: re-create) the table at ``uri`` with no rows, in Lance's file
    format ``data_storage_version``; returns the new version. A commit of an ``Overwrite``
    without fragments cannot carry the format (Lance takes its default), ``write_dataset``
    can."""
    ds = lance.write_dataset(
        schema.empty_table(),
        uri,
        schema=schema,
        mode="overwrite" if overwrite else "create",
        data_storage_version=data_storage_version,  # type: ignore[arg-type]
        enable_stable_row_ids=enable_stable_row_ids,
        transaction_properties=info.properties(),
        storage_options=dict(storage) or None,
    )
    return int(ds.version)


def append_op(fragments: Sequence[FragmentMetadata]) -> lance.LanceOperation.BaseOperation:
    return lance.LanceOperation.Append(list(fragments))


def conflicting_append_op(
    ds: lance.LanceDataset, fragments: Sequence[FragmentMetadata]
) -> lance.LanceOperation.BaseOperation:
    """An append on ``ds`` that Lance refuses to rebase over another such append, but not
    over a plain one (checked with pylance 14).

    It is an ``Update`` that lists the lowest-numbered fragment of ``ds``, unchanged, among
    its updated fragments (the sentinel of :mod:`lance_spark.table.conflicts`): two of them
    update the same fragment, or one updates a fragment a commit in between removed or
    rewrote, and Lance fails the later one, retryably. A plain Append rebases over it and it
    over a plain Append; its new fragments get ids, row ids and row versions as an
    Append's do, and the change feed and the streaming source read them as inserted rows.
    A table with no fragment has no sentinel: there it is a ``Merge`` listing the new
    fragments, which conflicts with every concurrent data change (a plain Append too)."""
    existing = ds.get_fragments()
    if not existing:
        return lance.LanceOperation.Merge(list(fragments), ds.lance_schema)
    lowest = min(existing, key=lambda f: f.fragment_id)
    return lance.LanceOperation.Update(
        removed_fragment_ids=[],
        updated_fragments=[lowest.metadata],
        new_fragments=list(fragments),
    )


def conflicting_overwrite_op(
    ds: lance.LanceDataset, schema: pa.Schema, fragments: Sequence[FragmentMetadata]
) -> lance.LanceOperation.BaseOperation | None:
    """An overwrite of ``ds`` by ``fragments`` that Lance refuses to rebase over another such
    overwrite or an idempotent append (:func:`conflicting_append_op`); None when there is
    none. Lance rebases an ``Overwrite`` over anything, so two idempotent overwrites racing
    would both commit; this is an ``Update`` removing every fragment of ``ds`` and adding
    ``fragments`` (two of them remove the same fragments: the later fails, retryably). A plain
    append committed meanwhile is kept (it reads as committed after the overwrite). Commit it
    with ``CommitInfo.read_as="Overwrite"``, so the change feed and the streaming source
    read it as the overwrite it is.

    An ``Update`` keeps the table's schema, field ids and file format, so only an overwrite
    that keeps all three has one. A table with no fragment gets a ``Merge`` listing the new
    fragments (it conflicts with every concurrent data change)."""
    from lance.schema import LanceSchema

    if LanceSchema.from_pyarrow(schema) != ds.lance_schema:
        return None
    version = str(ds.data_storage_version)
    if any(
        f"{f.file_major_version}.{f.file_minor_version}" != version
        for g in fragments
        for f in g.files
    ):
        return None
    existing = ds.get_fragments()
    if not existing:
        return lance.LanceOperation.Merge(list(fragments), ds.lance_schema)
    return lance.LanceOperation.Update(
        removed_fragment_ids=[int(f.fragment_id) for f in existing],
        updated_fragments=[],
        new_fragments=list(fragments),
    )


def overwrite_op(
    schema: pa.Schema, fragments: Sequence[FragmentMetadata]
) -> lance.LanceOperation.BaseOperation:
    return lance.LanceOperation.Overwrite(schema, list(fragments))


def replace_op(
    updated: Sequence[FragmentMetadata],
    removed: Sequence[int],
    new: Sequence[FragmentMetadata],
    *,
    predicate: str,
) -> lance.LanceOperation.BaseOperation:
    """Rows deleted (``updated``: fragments with new deletion files; ``removed``: fragments
    left empty) and ``new`` fragments appended, as one version."""
    if not updated and not removed:
        return append_op(new)
    if not new:
        return lance.LanceOperation.Delete(list(updated), list(removed), predicate)
    return lance.LanceOperation.Update(
        removed_fragment_ids=list(removed),
        updated_fragments=list(updated),
        new_fragments=list(new),
    )


def check_can_add_columns(ds: lance.LanceDataset, new_columns: Sequence[str], *, uri: str) -> None:
    """mergeSchema writes new fragments whose field ids follow the column order; that is only
    right when the table's field ids do too (no column was ever dropped or re-added)."""
    from lance.schema import LanceSchema

    if LanceSchema.from_pyarrow(ds.schema) != ds.lance_schema:
        raise SchemaMismatchError(
            f"mergeSchema cannot add column(s) {', '.join(new_columns)} to the Lance table at "
            f"{uri!r} in the same commit as the append, because columns of this table were "
            "dropped or re-added before; add the columns first (LanceDataset.add_columns) "
            "and append without mergeSchema"
        )


def add_columns_op(
    uri: str,
    read_version: int | None,
    schema: pa.Schema,
    new_fragments: Sequence[FragmentMetadata],
    *,
    storage: Mapping[str, str],
) -> lance.LanceOperation.BaseOperation:
    """One ``Merge``: every existing fragment unchanged (new columns read as null) plus the
    new fragments, under the widened schema."""
    ds = lance.dataset(uri, version=read_version, storage_options=dict(storage) or None)
    existing = [f.metadata for f in ds.get_fragments()]
    next_id = max((f.id for f in existing), default=-1) + 1
    for offset, fragment in enumerate(new_fragments):
        fragment.id = next_id + offset
    from lance.schema import LanceSchema

    return lance.LanceOperation.Merge([*existing, *new_fragments], LanceSchema.from_pyarrow(schema))


def _latest_version(uri: str, storage: Mapping[str, str]) -> int | str:
    try:
        return int(lance.dataset(uri, storage_options=dict(storage) or None).version)
    except (OSError, ValueError):
        return "unknown"
