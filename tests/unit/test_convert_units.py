"""convertToLance's pure parts: modes, paths, the progress tracker and the stderr bar."""

from __future__ import annotations

import re

import pytest

from lance_spark import InvalidOptionError, JobProgress
from lance_spark._spark import JobTracker
from lance_spark.table.convert import StderrProgress, _check_paths, _mode


def test_modes_are_spark_save_modes_in_any_case() -> None:
    assert _mode("Overwrite") == "overwrite" and _mode("ERRORIFEXISTS") == "errorifexists"
    with pytest.raises(InvalidOptionError, match=r"'merge' is not one of error, errorifexists"):
        _mode("merge")


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("/data/pets", "/data/pets"),
        ("/data/pets/", "/data/pets"),
        ("/data/pets", "/data/pets/lance"),
        ("/data/pets/part=1", "/data"),
        ("s3://b/pets", "s3://b/pets/out.lance"),
        ("file:/data/pets", "/data/pets"),
    ],
)
def test_a_target_in_or_around_the_source_is_refused(source: str, target: str) -> None:
    with pytest.raises(InvalidOptionError, match="in or around the Parquet data"):
        _check_paths(source, target)


def test_sibling_paths_are_fine() -> None:
    _check_paths("/data/pets", "/data/pets.lance")
    _check_paths("s3://b/pets", "s3://b/pets2")
    with pytest.raises(InvalidOptionError, match="lance_uri as a non-empty string"):
        _check_paths("/data/pets", "")


def test_tracker_reports_changes_then_finish_once() -> None:
    seen: list[JobProgress] = []
    tracker = JobTracker(seen.append, None)
    tracker.update(0, 0)  # no task scheduled yet: nothing to report
    tracker.update(1, 4)
    tracker.update(1, 4)
    tracker.update(3, 4)
    tracker.finish(tasks=4, rows=10)
    tracker.update(4, 4)  # late poll after the end
    assert seen == [
        JobProgress(1, 4),
        JobProgress(3, 4),
        JobProgress(4, 4, finished=True, rows=10),
    ]


def test_finish_polls_and_trusts_the_tasks_it_is_told() -> None:
    seen: list[JobProgress] = []
    JobTracker(seen.append, lambda: (2, 2)).finish(rows=5)
    assert seen == [JobProgress(2, 2), JobProgress(2, 2, finished=True, rows=5)]
    seen.clear()
    # Spark Connect may report nothing for a short job: the count of results stands in.
    JobTracker(seen.append, None).finish(tasks=3, rows=0)
    assert seen == [JobProgress(3, 3, finished=True, rows=0)]


def test_stderr_bar_redraws_one_line_then_ends_it(capsys: pytest.CaptureFixture[str]) -> None:
    bar = StderrProgress("convert a -> b", width=4)
    bar(JobProgress(1, 2))
    bar(JobProgress(2, 2))
    bar(JobProgress(2, 2, finished=True, rows=1234))
    err = capsys.readouterr().err
    assert err.startswith("\rconvert a -> b: [##--] 1/2 tasks\rconvert a -> b: [####] 2/2 tasks")
    assert re.search(r"\rconvert a -> b: 2 tasks, 1,234 rows in \d+\.\d s *\n$", err)
    assert err.count("\n") == 1


def test_stderr_bar_close_ends_an_unfinished_line(capsys: pytest.CaptureFixture[str]) -> None:
    bar = StderrProgress("convert", width=2)
    bar.close()
    assert capsys.readouterr().err == ""
    bar(JobProgress(0, 3))
    bar.close()
    assert capsys.readouterr().err == "\rconvert: [--] 0/3 tasks\n"
