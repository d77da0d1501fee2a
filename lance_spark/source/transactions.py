"""Idempotent writes: a write names itself (application id, transaction version) and is
skipped when the table already holds a commit of it.

Delta Lake records ``SetTransaction(appId, version)`` in its log; Lance has no such table, so
the id travels in the commit's transaction properties, under the names lance-spark (Java)
uses for its streaming sink (``lance.streaming.queryId`` / ``lance.streaming.epochId``), so
either tool recognises the other's commits. Two writers of ids:

- the streaming sink: the query's id (or the ``streamingQueryId`` option) and the batch id;
- ``df.write`` with ``txnAppId`` and ``txnVersion`` (Delta's options).

A write of ``(app, n)`` is skipped when the newest commit of ``app`` recorded a version
``>= n`` (Delta's rule). Finding it means reading the transactions of recent versions,
newest first, up to ``lookback`` of them; a Python worker remembers what it found per table,
so a long-running stream reads only the versions committed since its last batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import lance

from lance_spark.errors import TableNotFoundError
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


# (table uri, app id) -> versions looked at (lowest, highest) and the newest commit found.
_seen: dict[tuple[str, str], tuple[int, int, Committed | None]] = {}
_seen_lock = threading.Lock()


def last_committed(
    uri: str, app_id: str, *, storage: Mapping[str, str], lookback: int
) -> Committed | None:
    """The newest commit that ``app_id`` recorded in the last ``lookback`` versions of the
    table at ``uri`` (None: none, or no table)."""
    try:
        ds = dataset.open_latest(uri, storage=storage)
    except TableNotFoundError:
        return None
    latest = int(ds.version)
    floor = max(1, latest - lookback + 1)
    with _seen_lock:
        known = _seen.get((uri, app_id))
    if known is not None and known[1] > latest:  # the table was replaced: forget it
        known = None
    low, high, cached = known if known is not None else (latest + 1, latest, None)
    # Versions never looked at, newest first: those after the last look, then (when that
    # found nothing) those below the lowest version looked at.
    found = _find(ds, app_id, range(latest, max(floor, high + 1) - 1, -1))
    if found is None and cached is not None and cached.table_version >= floor:
        found = cached
    if found is None and cached is None:
        found = _find(ds, app_id, range(min(low - 1, latest), floor - 1, -1))
    with _seen_lock:
        _seen[(uri, app_id)] = (min(low, floor), latest, found)
    return found


def _find(ds: lance.LanceDataset, app_id: str, versions: range) -> Committed | None:
    for version in versions:
        txn = _txn_of(ds, version)
        if txn is not None and txn.app_id == app_id:
            return Committed(txn.version, version)
    return None


def skipped(uri: str, txn: TxnId, *, storage: Mapping[str, str], lookback: int) -> Committed | None:
    """The commit that makes ``txn`` a repeat (None: ``txn`` is new and must be written)."""
    committed = last_committed(uri, txn.app_id, storage=storage, lookback=lookback)
    if committed is not None and committed.txn_version >= txn.version:
        return committed
    return None


def _txn_of(ds: lance.LanceDataset, version: int) -> TxnId | None:
    try:
        tx = ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError) as err:
        # A version removed by cleanup (or written without a transaction file): its commit
        # cannot be recognised. Keep looking; the docs say to keep vacuum's retention longer
        # than a stream's restart.
        _log.warning("transaction of version %d unreadable (%s); not checked", version, err)
        return None
    if tx is None:
        return None
    props = tx.transaction_properties or {}
    app_id = props.get(PROP_TXN_APP_ID)
    number = props.get(PROP_TXN_VERSION)
    if app_id is None or number is None:
        return None
    try:
        return TxnId(app_id, int(number))
    except ValueError:
        return None
