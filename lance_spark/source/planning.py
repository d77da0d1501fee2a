"""Partition planning: Lance fragments -> Spark input partitions.

Large fragments are split into row-address ranges and small ones packed together, so the
number of tasks follows the data and the cores, not the number of files. A partition holds
only fragment ids and offsets (small and picklable); tasks open the dataset themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class FragmentSlice:
    """Rows ``[start, stop)`` by physical offset of one fragment; ``None`` = the whole fragment."""

    fragment_id: int
    start: int | None = None
    stop: int | None = None

    @property
    def is_whole(self) -> bool:
        return self.start is None


@dataclass(frozen=True)
class LancePartition(InputPartition):
    """One Spark task: the whole fragments it reads, as runs of consecutive fragment ids
    (``[start, stop)``), then the parts of fragments it reads.

    Runs keep a partition small whatever the number of fragments: a task over 50,000
    one-row fragments ships two integers, not 50,000 objects. Build one with :meth:`of`.
    """

    index: int
    whole: tuple[tuple[int, int], ...] = ()
    parts: tuple[FragmentSlice, ...] = ()

    @classmethod
    def of(cls, index: int, slices: Iterable[FragmentSlice]) -> LancePartition:
        """The partition reading ``slices`` (whole fragments first, in the order given)."""
        runs: list[list[int]] = []
        parts: list[FragmentSlice] = []
        for s in slices:
            if not s.is_whole:
                parts.append(s)
            elif runs and runs[-1][1] == s.fragment_id:
                runs[-1][1] += 1
            else:
                runs.append([s.fragment_id, s.fragment_id + 1])
        return cls(index, tuple((a, b) for a, b in runs), tuple(parts))

    @property
    def whole_fragment_ids(self) -> list[int]:
        return [i for start, stop in self.whole for i in range(start, stop)]

    @property
    def fragment_ids(self) -> list[int]:
        """Every fragment this partition reads (a part's too)."""
        return [*self.whole_fragment_ids, *(s.fragment_id for s in self.parts)]

    @property
    def slices(self) -> tuple[FragmentSlice, ...]:
        """Every slice, whole fragments first (expanded: for tests and small partitions)."""
        return (*(FragmentSlice(i) for i in self.whole_fragment_ids), *self.parts)


@dataclass(frozen=True)
class FragmentInfo:
    """What the planner needs to know of a fragment."""

    fragment_id: int
    physical_rows: int
    live_rows: int


def limited(fragments: Sequence[FragmentInfo], limit: int) -> list[FragmentInfo]:
    """The first fragments that hold at least ``limit`` live rows (all when they hold fewer)."""
    chosen: list[FragmentInfo] = []
    rows = 0
    for frag in fragments:
        if rows >= limit:
            break
        if frag.live_rows:
            chosen.append(frag)
            rows += frag.live_rows
    return chosen


def plan_partitions(
    fragments: Sequence[FragmentInfo], *, rows_per_partition: int, min_partitions: int
) -> list[LancePartition]:
    """Split and pack fragments into partitions of roughly equal row counts.

    The target size is ``rows_per_partition`` rows, lowered so that there are at least
    ``min_partitions`` partitions when the table has enough rows for that.
    """
    total = sum(f.live_rows for f in fragments)
    if total == 0:
        return []
    target = min(rows_per_partition, max(1, math.ceil(total / max(1, min_partitions))))
    pieces = list(_split(fragments, target))
    return [LancePartition.of(i, group) for i, group in enumerate(_pack(pieces, target))]


def _split(fragments: Iterable[FragmentInfo], target: int) -> Iterable[tuple[FragmentSlice, int]]:
    """Yield (slice, estimated live rows); fragments over 1.5 targets are cut by offset."""
    for frag in fragments:
        if frag.live_rows == 0:
            continue
        if frag.live_rows <= target * 3 // 2:
            yield FragmentSlice(frag.fragment_id), frag.live_rows
            continue
        parts = math.ceil(frag.live_rows / target)
        step = math.ceil(frag.physical_rows / parts)
        density = frag.live_rows / frag.physical_rows
        for start in range(0, frag.physical_rows, step):
            stop = min(start + step, frag.physical_rows)
            yield FragmentSlice(frag.fragment_id, start, stop), round((stop - start) * density)


def _pack(pieces: Sequence[tuple[FragmentSlice, int]], target: int) -> list[list[FragmentSlice]]:
    groups: list[list[FragmentSlice]] = []
    current: list[FragmentSlice] = []
    size = 0
    for piece, rows in pieces:
        if current and size + rows > target:
            groups.append(current)
            current, size = [], 0
        current.append(piece)
        size += rows
    if current:
        groups.append(current)
    return groups
