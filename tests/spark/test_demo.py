"""`make demo` runs: notebooks/time_machine.ipynb executes end to end and tells its story.

The notebook starts its own SparkSession in its own kernel, so it runs in a subprocess (with
notebooks/run_notebook.py, as `make demo` does); the test then reads the executed copy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "notebooks" / "run_notebook.py"
NOTEBOOK = REPO / "notebooks" / "time_machine.ipynb"


def _texts(cell: dict[str, Any]) -> list[str]:
    """The text of each of a cell's outputs (streams, results, displays, errors)."""
    texts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            texts.append("".join(out["text"]))
        elif out["output_type"] == "error":
            texts.append("\n".join(out["traceback"]))
        else:
            texts.append("".join(out.get("data", {}).get("text/plain", "")))
    return texts


def _cell(cells: list[dict[str, Any]], marker: str) -> str:
    """All output text of the one code cell whose source contains ``marker``."""
    found = [c for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(found) == 1, f"{len(found)} cells contain {marker!r}"
    return "\n".join(_texts(found[0]))


def _scores(text: str) -> dict[str, float]:
    """Accuracy by row name from a scores table (``v4  0.986  0.985 ...``)."""
    rows = re.findall(r"^(v\d+(?: \([\w-]+\))?|[\w-]+)\s+([01]\.\d+)\s", text, re.MULTILINE)
    return {name: float(accuracy) for name, accuracy in rows}


@pytest.mark.slow
def test_time_machine_notebook_runs(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LANCE_DEMO_DIR": str(tmp_path),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_CONF_DIR": str(REPO / "conf"),
    }
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(NOTEBOOK)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    executed_path = tmp_path / "time_machine.ipynb"
    html_path = tmp_path / "time_machine.html"
    assert result.returncode == 0, (
        f"notebook failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    )
    assert f"HTML: {html_path}" in result.stdout

    cells = json.loads(executed_path.read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code), "a cell did not run"
    for i, cell in enumerate(code):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"cell {i} failed:\n" + "\n".join(_texts(cell))
            if out["output_type"] == "stream" and out["name"] == "stderr":
                text = "".join(out["text"])
                assert "Traceback" not in text and "Error" not in text, f"cell {i} stderr:\n{text}"

    # Four batches are versions 1-4; the history lists them with their userMetadata.
    ingest = _cell(cells, "for b, note in NOTES.items()")
    for version in range(1, 5):
        assert f"-> version {version}" in ingest
    history = _cell(cells, "t.history().select(")
    assert "WRITE" in history and "batch 1: first labelling round" in history

    # The label distribution: no 9 in version 1, all ten digits in version 4.
    dist = _cell(cells, "dist = pd.DataFrame(")
    assert re.search(r"^9\s+0\s+0\s+\d+\s+\d+$", dist, re.MULTILINE), dist

    # A model per version: accuracy grows with the data, version 4 is good.
    per_version = _scores(_cell(cells, "scores = scores.set_index("))
    assert list(per_version) == ["v1", "v2", "v3", "v4"], per_version
    assert per_version["v1"] < per_version["v2"] < per_version["v4"]
    assert per_version["v1"] < 0.8 and per_version["v4"] > 0.95

    # The bad batch (version 5) makes the model worse; restored as version 6.
    bad = _scores(_cell(cells, "bad_model_scores = pd.DataFrame("))
    assert bad["v5"] < bad["v4"] - 0.01, bad
    restore = _cell(cells, "t.restoreToVersion(GOOD)")
    assert re.search(r"\|6\s*\|RESTORE\s*\|\{version -> 4\}", restore), restore
    assert "version 6 has the labels of version 4: True" in restore

    # The tag reads version 4 back; the MERGE fixed the vendor's labels (version 8).
    tag = _cell(cells, 't.createTag("trained-model-v1", GOOD)')
    assert "|trained-model-v1|4      |" in tag
    tag_rows = re.search(r"tag trained-model-v1: (\d+) rows \(version 4: (\d+)\)", tag)
    assert tag_rows and tag_rows[1] == tag_rows[2], tag
    assert _scores(tag)["trained-model-v1"] == per_version["v4"]
    merge = _cell(cells, ".whenMatchedUpdate(")
    fixed = _scores(merge)
    assert fixed["v8"] > bad["v5"], fixed
    diff = _cell(cells, "changes = t.diff(")
    assert re.search(r"\|\s+7\|\s+insert\|", diff) and "update_postimage" in diff, diff

    # The PNGs are a blob column, opened lazily with blobs(); Spark returns their bytes.
    blobs = _cell(cells, 't.blobs("png"')
    assert "6 BlobFiles" in blobs and "PNG signature b'\\x89PNG'" in blobs, blobs

    # Near duplicates: an IVF_FLAT index (version 10), the 12 planted re-scans found with it,
    # then deleted (version 11).
    search = _cell(cells, 't.createIndex("image"')
    assert "index built: version 10" in search and "image_idx" in search, search
    assert "12 test images with a near-identical training image" in _cell(cells, "t.nearest(")
    assert "latest version: 11" in _cell(cells, "t.delete(")

    # The augmentation append (version 12) is not in the index until optimizeIndices (13).
    upkeep = _cell(cells, "t.optimizeIndices()")
    assert re.search(r"shifted images -> version 12", upkeep), upkeep
    unindexed = re.findall(r"^\|image_idx\|\[image\]\|IVF_FLAT\|\s*(\d+)\|\s*(\d+)\|", upkeep, re.M)
    assert len(unindexed) == 2 and int(unindexed[0][1]) > 0 and unindexed[1][1] == "0", upkeep
    assert re.search(r"\|image_idx\|IVF_FLAT\|\s*[1-9]\d*\|.*\|\s*13\|", upkeep), upkeep
    assert "latest version: 13" in upkeep

    # pylance and LanceDB see the same table and its thirteen versions.
    pylance = _cell(cells, "ds = lance.dataset(URI)")
    assert "image: fixed_size_list<item: float>[64]" in pylance
    versions = r"\s+".join(str(v) for v in range(1, 14))
    assert re.search(rf"^version\s+{versions}$", pylance, re.MULTILINE), pylance
    assert "LanceDB: version 13" in _cell(cells, "lancedb.connect(")

    # The HTML page has the pictures inside it; the table was written where asked.
    html = html_path.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64") >= 5
    assert (tmp_path / "digits.lance" / "_versions").is_dir()
