"""Idempotent writes: a write names itself (application id, transaction version) and is
skipped when the table already holds a commit of it.

Delta Lake records ``SetTransaction(appId, version)`` in its log; Lance has no such table, so
the id travels in the commit's transaction properties, under the names lance-spark (Java)
uses for its streaming sink (``lance.streaming.queryId`` / ``lance.streaming.epochId``).
Two writers of ids:

- the streaming sink: the query's id (or the ``streamingQueryId`` option) and the batch id;
- ``df.write`` with ``txnAppId`` and ``txnVersion`` (Delta's options).

A write of ``(app, n)`` is skipped when the newest commit of ``app`` recorded a version
``>= n`` (Delta's rule). The record is the commits' transaction properties; ``app``'s
markers in the table's folder (:mod:`lance_spark.source.txn_markers`) are a cache of it:
its newest state file answers, with the versions after a dead writer's attempt file read.
With no state file (``app`` never wrote here, the folder was copied or restored without
them, ``_lance_spark`` was removed) every version the table kept is read, newest first,
down to the first commit of ``app``, and a shallow clone's history goes on in its source's.
A version removed by cleanup ends the walk (Delta forgets old transactions the same way),
except where a writer of ``app`` died in the middle of a commit after it (its attempt
file): then the answer is unknowable, :class:`VersionNotFoundError`, never a guess. A check
that read versions records what it found as a state file, so the next one reads only the
versions committed since.

The check is atomic with the commit: an idempotent write commits as an operation Lance
refuses to rebase over another idempotent write (see ``LanceWriter._commit_idempotent``);
when it loses, the versions committed meanwhile are checked again and the write is built on
the newest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import lance

from lance_spark.errors import TableNotFoundError, VersionNotFoundError
from lance_spark.source import dataset, lance_errors, txn_markers

_log = logging.getLogger(__name__)

PROP_TXN_APP_ID = "lance.streaming.queryId"
PROP_TXN_VERSION = "lance.streaming.epochId"


@dataclass(frozen=True)
class TxnId:
    """Who wrote a commit and which of its writes it was."""

    app_id: str
    version: int

    def properties(self) -> dict[str, str]:
        return {PROP_TXN_APP_ID: self.app_id, PROP_TXN_VERSION: str(self.version)}


@dataclass(frozen=True)
class Committed:
    """The newest commit of an application: its transaction version, in which table version."""

    txn_version: int
    table_version: int


@dataclass(frozen=True)
class Check:
    """What a look at the table found for a write: the latest version it read up to (None:
    no table) and the commit that makes the write a repeat (None: the write is new)."""

    table: lance.LanceDataset | None
    repeat: Committed | None


def check(uri: str, txn: TxnId, *, storage: Mapping[str, str]) -> Check:
    """Whether ``txn`` is a repeat on the latest version of the table at ``uri``."""
    try:
        ds = dataset.open_latest(uri, storage=storage)
    except TableNotFoundError:
        return Check(None, None)
    committed = newest_commit(ds, txn.app_id, uri=uri, storage=storage)
    repeat = committed if committed is not None and committed.txn_version >= txn.version else None
    return Check(ds, repeat)


def newest_commit(
    ds: lance.LanceDataset, app_id: str, *, uri: str, storage: Mapping[str, str]
) -> Committed | None:
    """The newest commit of ``app_id`` among the versions up to ``ds`` (the latest when it
    was opened; a newer one may be returned when a state file already covers it). None:
    there is none. Raises :class:`VersionNotFoundError` when a version the answer depends
    on was removed by cleanup."""
    return _newest(ds, app_id, txn_markers.read(uri, app_id, storage=storage), uri, storage)


def resolve_stale_attempts(
    ds: lance.LanceDataset, uri: str, *, older_than: timedelta, storage: Mapping[str, str]
) -> int:
    """Before cleanup removes old versions: for every application with an attempt file older
    than ``older_than`` (its writer died, or runs longer than the retention allows), read the
    versions after it, record the answer as a state file and remove those attempt files.
    Returns how many went. An application whose answer is already lost keeps its attempt
    files (its next check fails, naming them) and is logged."""
    cutoff = time.time() - older_than.total_seconds()
    removed = 0
    for folder in txn_markers.app_ids(uri, storage=storage):
        txn_markers.remove_partials(folder, cutoff=cutoff, storage=storage)
        stale = txn_markers.stale_attempts(folder, cutoff=cutoff, storage=storage)
        app_id = txn_markers.app_id_of(folder, storage=storage) if stale else None
        if app_id is None:
            continue
        markers = txn_markers.read(uri, app_id, storage=storage)
        # Only the attempts this check saw are settled by it.
        seen = {a.path for a in markers.attempts}
        try:
            _newest(ds, app_id, markers, uri, storage, record_always=True)
        except VersionNotFoundError as err:
            _log.warning("vacuum of %s kept the attempt files of %r: %s", uri, app_id, err)
            continue
        for attempt in stale:
            if attempt.path in seen:
                txn_markers.end_attempt(uri, attempt.path, storage=storage)
                removed += 1
    return removed


def _newest(
    ds: lance.LanceDataset,
    app_id: str,
    markers: txn_markers.Markers,
    uri: str,
    storage: Mapping[str, str],
    *,
    record_always: bool = False,
) -> Committed | None:
    """``app_id``'s newest commit up to ``ds`` from ``markers`` (read after opening ``ds``)
    and the versions no state file answers for.

    The commits' transaction properties are the record, the markers a cache of it. With no
    state file (an application that never wrote here, or the folder was copied, restored or
    its ``_lance_spark`` removed) every version the table kept is read, newest first, down
    to the first commit of ``app_id`` (a shallow clone's history goes on in its source's);
    the answer is recorded, so that happens once per application. With one, only the
    versions after it and after the oldest attempt file's read version are."""
    latest = int(ds.version)
    state = markers.state
    covered = 0 if state is None else state.covers
    known = None
    if state is not None and state.txn_version is not None and state.table_version is not None:
        known = Committed(int(state.txn_version), int(state.table_version))
    if state is None:
        oldest = 1  # nothing cached: the whole history the table kept
    elif not markers.attempts:
        # Every commit of app_id since the state's, with its attempt file gone, has a state
        # file covering it.
        return known
    else:
        oldest = max(covered, min(a.read_version for a in markers.attempts)) + 1
    found = _find(
        ds, app_id, uri=uri, newest=latest, oldest=oldest, markers=markers, storage=storage
    )
    answer = found or known
    if latest > covered or (record_always and latest >= covered):
        txn_markers.record_state(
            uri,
            app_id,
            covers=latest,
            txn_version=None if answer is None else answer.txn_version,
            table_version=None if answer is None else answer.table_version,
            storage=storage,
        )
    return answer


def _find(
    ds: lance.LanceDataset,
    app_id: str,
    *,
    uri: str,
    newest: int,
    oldest: int,
    markers: txn_markers.Markers,
    storage: Mapping[str, str],
) -> Committed | None:
    """The newest commit of ``app_id`` among the versions ``oldest..newest`` of ``ds``,
    newest first, down to the oldest one cleanup left. A shallow clone's first version
    (Lance's ``Clone``) continues in its source's history from the version cloned; a commit
    found there is reported at the clone's version."""
    source, source_uri, top, bottom = ds, uri, newest, oldest
    clone_version: int | None = None  # the version of ``ds`` a clone's history continues from
    while True:
        next_source: tuple[str, int] | None = None
        for version in range(top, bottom - 1, -1):
            try:
                tx = _transaction(source, version)
            except TypeError:
                # pylance 14 cannot build the transaction of a compaction that rewrote an
                # index (see dataset.transaction): a Rewrite, never an idempotent write.
                continue
            except (OSError, ValueError, RuntimeError) as err:
                dead_writer = source is ds and any(
                    a.read_version < version for a in markers.attempts
                )
                if not dead_writer and _removed(source, version):
                    return None  # cleanup removed it: the history left was all read
                raise _unknowable(app_id, uri, version, markers, err) from None
            if tx is None:  # written without a transaction file (old Lance writers)
                continue
            txn = _txn_id(tx.transaction_properties or {})
            if txn is not None and txn.app_id == app_id:
                return Committed(txn.version, version if clone_version is None else clone_version)
            op = tx.operation
            if isinstance(op, lance.LanceOperation.Clone) and op.ref_path:
                next_source = (str(op.ref_path), int(op.ref_version))
                if clone_version is None:
                    clone_version = version
                break
        if next_source is None:
            return None
        source_uri, top = next_source
        bottom = 1
        try:
            source = dataset.open_version(source_uri, top, storage=storage)
        except (OSError, ValueError, RuntimeError) as err:
            _log.warning(
                "idempotent writes of %r to %s: the clone's source %s cannot be read, its "
                "commits are not checked: %s",
                app_id,
                uri,
                source_uri,
                lance_errors.first_line(err),
            )
            return None


def _transaction(ds: lance.LanceDataset, version: int) -> lance.Transaction | None:
    """The transaction of ``version`` (pylance's errors when it cannot be read)."""
    tx: lance.Transaction | None = ds.read_transaction(version)
    return tx


def _removed(ds: lance.LanceDataset, version: int) -> bool:
    """Whether ``version`` is no longer among the table's versions (cleanup removed it)."""
    try:
        return version not in {int(v["version"]) for v in ds.versions()}
    except (OSError, ValueError, RuntimeError):
        return False


def _unknowable(
    app_id: str, uri: str, version: int, markers: txn_markers.Markers, err: BaseException
) -> VersionNotFoundError:
    attempts = ", ".join(a.path for a in markers.attempts) or "none"
    return VersionNotFoundError(
        f"cannot tell whether {app_id!r} already committed this write to the Lance table "
        f"at {uri!r}: version {version}, where a commit of it may be, cannot be read "
        f"({lance_errors.first_line(err)}); attempt file(s) of writers that stopped in the "
        "middle of a commit: "
        f"{attempts}. Nothing was committed. If a version was removed by cleanup before any "
        "check or vacuum of this connector settled the attempt and you know whether that write "
        "committed, write again with a new txnAppId (or streamingQueryId), or remove the "
        "attempt file(s) to treat it as not committed"
    )


def _txn_id(props: Mapping[str, str]) -> TxnId | None:
    app = props.get(PROP_TXN_APP_ID)
    number = props.get(PROP_TXN_VERSION)
    if app is None or number is None:
        return None
    try:
        return TxnId(app, int(number))
    except ValueError:
        return None
