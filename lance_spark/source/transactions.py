"""Idempotent writes: a write names itself (application id, transaction version) and is
skipped when the table already holds a commit of it.

Delta Lake records ``SetTransaction(appId, version)`` in its log; Lance has no such table, so
the id travels in the commit's transaction properties, under the names lance-spark (Java)
uses for its streaming sink (``lance.streaming.queryId`` / ``lance.streaming.epochId``), so
either tool recognises the other's commits. Two writers of ids:

- the streaming sink: the query's id (or the ``streamingQueryId`` option) and the batch id;
- ``df.write`` with ``txnAppId`` and ``txnVersion`` (Delta's options).

A write of ``(app, n)`` is skipped when the newest commit of ``app`` recorded a version
``>= n`` (Delta's rule). Finding it means reading the transactions of the table's versions,
newest first, until one of ``app``'s commits, however far back it is. A Python worker
remembers what it found per table and application, so a running stream reads only the
versions committed since its last batch, and a restarted one reads back to its own newest
commit. When a version that walk needs was removed by cleanup, whether ``app`` committed
there cannot be known: :class:`VersionNotFoundError`, never a guess.

The check is atomic with the commit: an idempotent append commits as an operation Lance
refuses to rebase over another idempotent append (see
``LanceWriter._commit_idempotent_append``); when it loses, the versions committed meanwhile
are checked again and the append is built on the newest.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import lance

from lance_spark.errors import TableNotFoundError, VersionNotFoundError
from lance_spark.source import dataset

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


# (table uri, app id) -> (the highest version read, the newest commit of app at or below it).
# Versions are read from the highest down to app's newest commit (or version 1), so this is
# all there is to know about the versions up to the highest one.
_seen: dict[tuple[str, str], tuple[int, Committed | None]] = {}
_seen_lock = threading.Lock()


def check(uri: str, txn: TxnId, *, storage: Mapping[str, str]) -> Check:
    """Whether ``txn`` is a repeat on the latest version of the table at ``uri``."""
    try:
        ds = dataset.open_latest(uri, storage=storage)
    except TableNotFoundError:
        return Check(None, None)
    committed = newest_commit(ds, txn.app_id, uri=uri)
    repeat = committed if committed is not None and committed.txn_version >= txn.version else None
    return Check(ds, repeat)


def newest_commit(ds: lance.LanceDataset, app_id: str, *, uri: str) -> Committed | None:
    """The newest commit of ``app_id`` among the versions up to ``ds`` (None: there is
    none). Raises :class:`VersionNotFoundError` when a version the answer depends on was
    removed by cleanup."""
    latest = int(ds.version)
    with _seen_lock:
        known = _seen.get((uri, app_id))
    if known is not None and known[0] > latest:  # the table was replaced: forget it
        known = None
    high, cached = known if known is not None else (0, None)
    found = _find(ds, app_id, uri=uri, newest=latest, oldest=high + 1)
    if found is None:
        found = cached
    with _seen_lock:
        current = _seen.get((uri, app_id))
        if current is None or current[0] <= latest:
            _seen[(uri, app_id)] = (latest, found)
    return found


def forget(uri: str, app_id: str) -> None:
    """Drop what this worker remembers of ``app_id`` on ``uri`` (tests)."""
    with _seen_lock:
        _seen.pop((uri, app_id), None)


def _find(
    ds: lance.LanceDataset, app_id: str, *, uri: str, newest: int, oldest: int
) -> Committed | None:
    for version in range(newest, oldest - 1, -1):
        txn = _txn_of(ds, version, app_id=app_id, uri=uri)
        if txn is not None and txn.app_id == app_id:
            return Committed(txn.version, version)
    return None


def _txn_of(ds: lance.LanceDataset, version: int, *, app_id: str, uri: str) -> TxnId | None:
    try:
        tx = ds.read_transaction(version)
    except TypeError:
        # pylance 14 cannot build the transaction of a compaction that rewrote an index
        # (see dataset.transaction): a Rewrite, never an idempotent write.
        return None
    except (OSError, ValueError, RuntimeError) as err:
        raise VersionNotFoundError(
            f"cannot tell whether {app_id!r} already committed this write to the Lance table "
            f"at {uri!r}: version {version} cannot be read ({_first_line(err)}), probably "
            f"removed by vacuum, and no version after it holds a commit of {app_id!r}, so "
            "its last commit may have been there. Nothing was committed. Keep vacuum's "
            "retention longer than a stream may stay stopped (or than the time between two "
            "runs of a txnAppId writer)"
        ) from None
    if tx is None:  # written without a transaction file (old Lance writers)
        return None
    props = tx.transaction_properties or {}
    app = props.get(PROP_TXN_APP_ID)
    number = props.get(PROP_TXN_VERSION)
    if app is None or number is None:
        return None
    try:
        return TxnId(app, int(number))
    except ValueError:
        return None


def _first_line(err: BaseException) -> str:
    return str(err).split(", /")[0].splitlines()[0]
