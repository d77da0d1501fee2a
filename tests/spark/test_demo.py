"""`make demo` runs: notebooks/time_machine.py succeeds end to end and prints its story.

The demo starts its own SparkSession, so it runs in a subprocess (the test session's Spark
cannot be shared with it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "notebooks" / "time_machine.py"


@pytest.mark.slow
def test_time_machine_demo_runs(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_CONF_DIR": str(REPO / "conf"),
    }
    data_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, str(DEMO), "--data-dir", str(data_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout
    assert result.returncode == 0, f"demo failed:\n{output[-4000:]}\n{result.stderr[-4000:]}"

    for heading in (
        "1. Start Spark",
        "2. Ingest four labelling rounds",
        "3. Versions",
        "4. Label distribution of every version, side by side",
        "5. Reading old versions back",
        "6. A bad ingest",
        "6c. Versions after the restore",
        "7. The same table with pylance",
    ):
        assert heading in output, f"missing section {heading!r}:\n{output}"

    # Four appends are versions 1-4, the bad batch is 5, the restore is 6.
    for version in range(1, 5):
        assert f"-> version {version}" in output
    assert "batch 5: new labelling vendor) -> version 5" in output
    assert "version 6 == version 4: True" in output
    # The versions table lists the userMetadata of the writes.
    assert "batch 1: first labelling round, mostly cats" in output
    assert "restore version 4" in output
    # The distribution pivot has a column per version, and pylance sees a vector column.
    assert "v1" in output and "v4" in output
    assert "fixed_size_list<item: float>[16]" in output
    assert "lance.dataset(uri, version=1).count_rows(): 2,000" in output
    assert "Done in" in output
    # The table was written where asked, nowhere else.
    assert (data_dir / "pets.lance" / "_versions").is_dir()
