"""``replaceWhere``: an overwrite that replaces only the rows matching a predicate.

``df.write.format("lance").option("replaceWhere", pred).mode("overwrite").save(uri)``
deletes the table's rows matching ``pred`` and appends the DataFrame's rows, in ONE Lance
version (an ``Update``: deletion files for the touched fragments, the new fragments). As in
Delta, every written row must match ``pred`` too, or the write fails and commits nothing.

Lance evaluates the predicate, both on the table (which rows to delete) and on the written
rows (the check), through the same scan path, so the two always agree. It is Lance SQL, as
the ``filter`` read option: a date or timestamp literal is typed (``DATE '2026-01-01'``);
Lance refuses to compare a date column with a plain string.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
from lance.fragment import FragmentMetadata

from lance_spark.errors import CorruptTableError, InvalidOptionError, ReplaceWhereMismatchError
from lance_spark.source import dataset, lance_errors, staging
from lance_spark.source.write_jobs import delete_rows

_OFFSET_BITS = 32  # a row address is (fragment id << 32) | offset
_OFFSET_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Deleted:
    """The table's side of a replaceWhere: fragments with new deletion files, fragments left
    empty, and how many rows matched."""

    updated: tuple[FragmentMetadata, ...]
    removed: tuple[int, ...]
    rows: int


def check_predicate(ds: lance.LanceDataset, predicate: str, *, uri: str) -> None:
    """Fail before any task runs when Lance cannot evaluate ``predicate`` on the table."""
    try:
        ds.scanner(columns=[], filter=predicate, with_row_address=True, limit=1).to_table()
    except (OSError, ValueError) as err:  # pylance: "Invalid user input" (both types seen)
        raise InvalidOptionError(
            f"option replaceWhere={predicate!r} cannot be evaluated on the Lance table at "
            f"{uri!r}: {lance_errors.first_line(err)}. It is Lance SQL over the table's columns "
            f"({', '.join(ds.schema.names)}); type date and timestamp literals, e.g. "
            "DATE '2026-01-01'"
        ) from None


def check_batch(batch: pa.RecordBatch, predicate: str) -> None:
    """Raise :class:`ReplaceWhereMismatchError` when a row of ``batch`` does not match."""
    if batch.num_rows == 0:
        return
    # An in-memory Lance dataset: the predicate is evaluated by the scan path that selects
    # the rows to delete from the table.
    mem = lance.write_dataset(pa.Table.from_batches([batch]), f"memory://{uuid.uuid4().hex}")
    matched = mem.to_table(columns=[], filter=predicate, with_row_address=True)
    if matched.num_rows == batch.num_rows:
        return
    kept = {int(a) & _OFFSET_MASK for a in matched.column("_rowaddr").to_pylist()}
    first = next(i for i in range(batch.num_rows) if i not in kept)
    row = json.dumps(batch.slice(first, 1).to_pylist()[0], default=str)[:300]
    raise ReplaceWhereMismatchError(
        "[DELTA_REPLACE_WHERE_MISMATCH] Written data does not conform to the replaceWhere "
        f"predicate {predicate!r}: {batch.num_rows - matched.num_rows} of {batch.num_rows} "
        f"rows of a batch do not match it, for example {row}. Nothing was committed; filter "
        "the DataFrame with the same predicate, or widen the predicate"
    )


def delete_matching(
    uri: str,
    version: int,
    predicate: str,
    *,
    storage: Mapping[str, str],
    files: staging.TaskFiles,
) -> Deleted:
    """Write deletion files for the rows of ``version`` matching ``predicate``, each recorded
    in ``files``'s job, so an aborted job deletes it."""
    ds = dataset.open_version(uri, version, storage=storage)
    matched = ds.to_table(columns=[], filter=predicate, with_row_address=True)
    addresses = np.sort(matched.column("_rowaddr").to_numpy(zero_copy_only=False))
    fragment_ids = addresses >> _OFFSET_BITS
    offsets = addresses & _OFFSET_MASK
    bounds = [0, *(np.flatnonzero(np.diff(fragment_ids)) + 1).tolist(), len(addresses)]
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    for start, end in itertools.pairwise(bounds):
        if start == end:
            continue
        fragment_id = int(fragment_ids[start])
        fragment = ds.get_fragment(fragment_id)
        if fragment is None:  # the scan of this very version found rows in it
            raise CorruptTableError(
                f"fragment {fragment_id} of version {version} of {uri!r} is gone"
            )
        changed = delete_rows(fragment, offsets[start:end], files)
        if changed is None:
            removed.append(fragment_id)
        else:
            updated.append(changed)
    return Deleted(tuple(updated), tuple(removed), matched.num_rows)
