"""``make test-quick``'s smokes (tests/_quick.py) name tests that exist, one per area."""

from __future__ import annotations

import ast
from pathlib import Path

from _quick import SMOKES

REPO = Path(__file__).resolve().parents[2]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_smoke_names_a_test_function_of_its_file() -> None:
    for area, node_id in SMOKES.items():
        file, _, name = node_id.partition("::")
        function = name.partition("[")[0]
        path = REPO / file
        assert path.is_file(), (area, node_id)
        assert function in _functions(path), (area, node_id)


def test_the_smokes_are_one_per_area_and_cover_the_spark_tiers() -> None:
    assert len(set(SMOKES.values())) == len(SMOKES)
    tiers = {node_id.split("/")[1] for node_id in SMOKES.values()}
    assert {"spark", "sql"} <= tiers
    assert any("connect" in node_id for node_id in SMOKES.values())
