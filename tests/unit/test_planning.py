"""Partition planning: every live row lands in exactly one partition, sizes stay balanced."""

from __future__ import annotations

import itertools
import pickle

from hypothesis import given
from hypothesis import strategies as st

from lance_spark.source.planning import FragmentInfo, plan_partitions


def _covered(parts: list, frags: list[FragmentInfo]) -> dict[int, list[tuple[int, int]]]:
    ranges: dict[int, list[tuple[int, int]]] = {}
    physical = {f.fragment_id: f.physical_rows for f in frags}
    for p in parts:
        for s in p.slices:
            start = 0 if s.start is None else s.start
            stop = physical[s.fragment_id] if s.stop is None else s.stop
            ranges.setdefault(s.fragment_id, []).append((start, stop))
    return ranges


def test_three_small_fragments_do_not_run_as_one_task() -> None:
    frags = [FragmentInfo(i, 1000, 1000) for i in range(3)]
    parts = plan_partitions(frags, rows_per_partition=1_000_000, min_partitions=2)
    assert len(parts) >= 2


def test_one_huge_fragment_is_split() -> None:
    parts = plan_partitions(
        [FragmentInfo(0, 5_000_000, 5_000_000)], rows_per_partition=1_000_000, min_partitions=2
    )
    assert len(parts) == 5
    assert all(len(p.slices) == 1 and not p.slices[0].is_whole for p in parts)


def test_many_tiny_fragments_are_packed() -> None:
    frags = [FragmentInfo(i, 10, 10) for i in range(1000)]
    parts = plan_partitions(frags, rows_per_partition=1_000_000, min_partitions=4)
    assert len(parts) == 4


def test_empty_table_has_no_partitions() -> None:
    assert plan_partitions([], rows_per_partition=10, min_partitions=2) == []
    assert plan_partitions([FragmentInfo(0, 5, 0)], rows_per_partition=10, min_partitions=2) == []


def test_partitions_pickle_small() -> None:
    parts = plan_partitions([FragmentInfo(7, 100, 90)], rows_per_partition=10, min_partitions=2)
    assert all(len(pickle.dumps(p)) < 1000 for p in parts)


@given(
    st.lists(st.integers(min_value=0, max_value=50_000), min_size=0, max_size=40),
    st.integers(min_value=100, max_value=20_000),
    st.integers(min_value=1, max_value=16),
)
def test_every_row_in_exactly_one_partition(
    sizes: list[int], rows_per_partition: int, min_partitions: int
) -> None:
    frags = [FragmentInfo(i, n, n) for i, n in enumerate(sizes)]
    parts = plan_partitions(
        frags, rows_per_partition=rows_per_partition, min_partitions=min_partitions
    )
    covered = _covered(parts, frags)
    for frag in frags:
        spans = sorted(covered.get(frag.fragment_id, []))
        if frag.live_rows == 0:
            assert spans == []
            continue
        assert spans[0][0] == 0 and spans[-1][1] == frag.physical_rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert [p.index for p in parts] == list(range(len(parts)))
    target = min(rows_per_partition, -(-sum(sizes) // min_partitions)) if sum(sizes) else 0
    for p in parts:
        rows = sum((s.stop - s.start) if not s.is_whole else sizes[s.fragment_id] for s in p.slices)
        # one piece may overshoot the target by half (fragments up to 1.5x are kept whole)
        assert len(p.slices) == 1 or rows <= target
