"""Which filters make the reader ask Lance for an index lookup at planning time."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark.source.reader import _may_use_index


@pytest.fixture
def dataset(tmp_path: Path) -> lance.LanceDataset:
    table = pa.table({"id": list(range(100)), "label": [f"l{i % 3}" for i in range(100)]})
    return lance.write_dataset(table, str(tmp_path / "t.lance"))


def test_no_index_never_asks(dataset: lance.LanceDataset) -> None:
    assert not _may_use_index(dataset, "id = 3")


def test_only_predicates_naming_an_indexed_column_ask(dataset: lance.LanceDataset) -> None:
    dataset.create_scalar_index("id", "BTREE")
    assert _may_use_index(dataset, "id = 3")
    assert _may_use_index(dataset, "label = 'a' AND `id` IN (1, 2)")
    assert not _may_use_index(dataset, "label = 'l1'")
