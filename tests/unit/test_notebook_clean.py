"""The committed notebooks carry no outputs: results live in the executed copy `make demo`
writes under data/, never in git.

To strip a notebook: ``.venv/bin/jupyter nbconvert --clear-output --inplace notebooks/<name>.ipynb``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook() -> None:
    assert any(p.name == "time_machine.ipynb" for p in NOTEBOOKS), NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    dirty = [
        f"cell {i}: {len(cell.get('outputs', []))} output(s), execution_count "
        f"{cell.get('execution_count')}"
        for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name} has outputs or execution counts (strip them: jupyter nbconvert "
        f"--clear-output --inplace {path}):\n" + "\n".join(dirty)
    )
    assert nb["metadata"]["kernelspec"]["name"] == "python3"  # run_notebook.py's kernel
