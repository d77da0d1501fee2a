"""Serializable row-level changes: what the versions committed since a statement's read did.

A MERGE, UPDATE or DELETE (Spark's row-level operation, :mod:`lance_spark.source.row_level`)
reads the table at a pinned version and commits one Lance transaction. Before it commits,
:func:`find_overlap` compares, version by version, the manifests committed since that read
(the fragment lists, nothing else):

- a fragment the statement changes (new deletion file) or removes was changed or removed
  meanwhile: the statement's deletions would be computed on stale rows;
- rows were added (new fragments, or fragments whose data files changed) that the statement's
  read set may contain: for a MERGE whose target read the companion pruned to the source's
  keys (``target.k IN (...)``), the added rows matching that Lance filter are counted
  (``ReadSet.filter``); for every other statement (UPDATE / DELETE conditions, a MERGE
  without such keys, ``WHEN NOT MATCHED BY SOURCE``) any added row counts, which is
  conservative. Compaction (Lance ``Rewrite``) only moves rows: it overlaps only through the
  fragments it replaces;
- the schema changed, or a version can no longer be read.

Any overlap refuses the commit with a retryable ``ConcurrentModificationError``; the table
API (:func:`lance_spark.table.changes.run_sql`) redoes the statement on the newer version.
When there is none, the statement commits with the latest version it checked as its read
version, and the remaining window (between that check and the commit) is closed by Lance's
own conflict detection: every row-level commit lists a *sentinel*, the lowest-numbered
fragment of its read version, unchanged, among its updated fragments (:func:`sentinel`). Two
row-level commits racing in that window then update the same fragment and Lance gives the
later one a retryable conflict (the lowest fragment only changes when it is removed, and
removing it conflicts with updating it). A table with no fragment has no sentinel; there an
insert-only change commits as a Lance ``Merge`` listing its new fragments, which conflicts
with every concurrent data change.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import lance
from lance.fragment import FragmentMetadata

from lance_spark.source import dataset

# Lance operations that move rows without changing what they hold.
_MOVES_ROWS = frozenset({"Rewrite"})


@dataclass(frozen=True)
class ReadSet:
    """What a statement reads, as far as conflicts go.

    ``filter`` None: any row may be read (conservative). ``untouched_rows``: the statement may
    read rows it does not change (a MERGE's matched rows no clause acts on), so a concurrent
    deletion of such a row changes its outcome; an UPDATE or DELETE changes every row its
    condition reads, and a deleted one shows up as a changed fragment."""

    untouched_rows: bool = False
    # A Lance SQL predicate every row the statement reads satisfies (the key filter of a MERGE
    # whose target read the companion pruned to the source's keys).
    filter: str | None = None


@dataclass(frozen=True)
class Overlap:
    """A version committed after a statement's read that changed what it reads or writes."""

    version: int
    operation: str
    what: str


def find_overlap(
    uri: str,
    *,
    storage: Mapping[str, str],
    read_version: int,
    latest: lance.LanceDataset,
    touched: Collection[int],
    read_set: ReadSet,
) -> Overlap | None:
    """The first version in ``(read_version, latest.version]`` that changed one of the
    fragments ``touched`` (changed or removed by the statement), added (or, when
    ``read_set.untouched_rows``, deleted) rows the statement may read, or changed the schema;
    None when there is none."""
    try:
        before = dataset.open_version(uri, read_version, storage=storage)
    except (OSError, ValueError) as err:
        return Overlap(read_version, "?", f"version {read_version} can no longer be read: {err}")
    previous = _fragments(before)
    for version in range(read_version + 1, int(latest.version) + 1):
        try:
            ds = latest if version == latest.version else _open(uri, version, storage)
        except (OSError, ValueError) as err:
            return Overlap(version, "?", f"it can no longer be read: {err}")
        name, operation = _operation(latest, version)
        current = _fragments(ds)
        if ds.lance_schema != before.lance_schema:
            return Overlap(version, operation, "it changed the table's schema")
        changed = sorted(i for i in touched if i in previous and current.get(i) != previous[i])
        if changed:
            return Overlap(
                version,
                operation,
                f"it changed or removed fragment(s) {_ids(changed)}, which this statement "
                "also changes",
            )
        added = sorted(
            i for i, doc in current.items() if _data_files(doc) != _data_files(previous.get(i))
        )
        if added and name not in _MOVES_ROWS:
            what = _read_overlap(ds, added, read_set, "added or rewrote")
            if what is not None:
                return Overlap(version, operation, what)
        if read_set.untouched_rows and name not in _MOVES_ROWS:
            # Rows deleted from fragments that keep their data files: read them as they
            # were before (a fragment with any such key counts).
            deleted = sorted(
                i for i, doc in previous.items() if i not in added and current.get(i) != doc
            )
            if deleted:
                what = _read_overlap(before, deleted, read_set, "deleted rows among")
                if what is not None:
                    return Overlap(version, operation, what)
        previous = current
        before = ds
    return None


def sentinel(ds: lance.LanceDataset, touched: Collection[int]) -> FragmentMetadata | None:
    """The fragment a row-level commit on ``ds`` lists unchanged among its updated fragments
    (None: the statement changes or removes it anyway, or the table has no fragment)."""
    fragments = ds.get_fragments()
    if not fragments:
        return None
    lowest = min(fragments, key=lambda f: f.fragment_id)
    return None if lowest.fragment_id in touched else lowest.metadata


def next_fragment_id(ds: lance.LanceDataset) -> int:
    """An id no fragment of ``ds`` and no index of it has used (a new fragment must not
    inherit an index's coverage of a removed fragment with the same id)."""
    used = [f.fragment_id for f in ds.get_fragments()]
    for index in ds.describe_indices():
        for segment in index.segments:
            used.extend(int(i) for i in segment.fragment_ids)
    return max(used, default=-1) + 1


def _read_overlap(
    ds: lance.LanceDataset, ids: list[int], read_set: ReadSet, did: str
) -> str | None:
    """What of the rows of fragments ``ids`` of ``ds`` the statement may read (None: none)."""
    fragments = [f for f in (ds.get_fragment(i) for i in ids) if f is not None]
    rows = sum(f.count_rows() for f in fragments)
    if rows == 0:
        return None
    where = f"fragment(s) {_ids(ids)}"
    if read_set.filter is not None:
        return _filter_overlap(fragments, read_set.filter, f"it {did} {where}")
    return (
        f"it {did} {where} ({rows} row(s)) and this statement's read set (its condition) "
        "is not checked row by row"
    )


def _filter_overlap(fragments: list[Any], predicate: str, did: str) -> str | None:
    """``did``, with how many rows of ``fragments`` match the statement's read filter (None:
    none does)."""
    shown = predicate if len(predicate) <= 120 else predicate[:117] + "..."
    try:
        hits = sum(f.count_rows(predicate) for f in fragments)
    except (OSError, ValueError) as err:  # Lance could not apply it: an overlap, to be safe
        return (
            f"{did}, whose rows could not be checked against this statement's read filter "
            f"{shown} ({err})"
        )
    if hits == 0:
        return None
    return f"{did}, with {hits} row(s) matching this statement's read filter {shown}"


def _open(uri: str, version: int, storage: Mapping[str, str]) -> lance.LanceDataset:
    return dataset.open_version(uri, version, storage=storage)


def _fragments(ds: lance.LanceDataset) -> dict[int, dict[str, Any]]:
    return {int(f.fragment_id): f.metadata.to_json() for f in ds.get_fragments()}


def _data_files(doc: Mapping[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    return [str(f["path"]) for f in doc.get("files", [])]


def _operation(ds: lance.LanceDataset, version: int) -> tuple[str, str]:
    """The Lance operation of ``version`` and its description (with the connector's)."""
    try:
        tx = ds.read_transaction(version)
    except (OSError, ValueError):
        return "?", "?"
    if tx is None:
        return "?", "?"
    name = type(tx.operation).__name__
    statement = (tx.transaction_properties or {}).get("lance_spark.operation")
    return name, f"{name} ({statement})" if statement else name


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:5])
    return shown + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
