"""``python -m lance_spark doctor``'s checks that need no JVM: each says ok, or FAIL with the
one fix (the live-session checks run in tests/spark/test_companion_setup.py)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from lance_spark import __main__ as cli
from lance_spark import _spark, doctor


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_java_version_is_read_and_checked(tmp_path: Path) -> None:
    new = _script(tmp_path / "java17", "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2\n")
    old = _script(tmp_path / "java8", "echo 'java version \"1.8.0_392\"' >&2\n")
    assert doctor.check_java(java=new).ok
    result = doctor.check_java(java=old)
    assert not result.ok and "1.8.0_392" in result.detail
    assert result.fix is not None and "openjdk-17" in result.fix
    missing = doctor.check_java(java=str(tmp_path / "nowhere"))
    assert not missing.ok and "no java found" in missing.detail


def test_the_jar_is_found_or_named_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    jar = tmp_path / "lance-spark-companion.jar"
    monkeypatch.setattr(_spark, "companion_jar_path", lambda: str(jar))
    result = doctor.check_jar()
    assert not result.ok and str(jar) in result.detail and "reinstall" in (result.fix or "")
    jar.write_bytes(b"PK")
    assert doctor.check_jar().ok


def test_worker_python_must_import_lance_spark_with_the_drivers_versions(tmp_path: Path) -> None:
    assert doctor.check_worker_python(python=sys.executable).ok
    broken = _script(
        tmp_path / "python",
        "echo \"ModuleNotFoundError: No module named 'lance_spark'\" >&2\nexit 1\n",
    )
    result = doctor.check_worker_python(python=broken)
    assert not result.ok and broken in result.detail and "No module named" in result.detail
    assert result.fix is not None and sys.executable in result.fix
    other = _script(
        tmp_path / "python_other",
        "echo lance_spark 0.0.1; echo pyspark 4.3.0; echo pylance 14.0.2; echo pyarrow 1.0\n",
    )
    result = doctor.check_worker_python(python=other)
    assert not result.ok and "lance_spark 0.0.1 (driver:" in result.detail


def test_filter_pushdown_off_is_reported_with_its_fix() -> None:
    assert doctor.check_filter_pushdown("true", connect=True).ok
    assert doctor.check_filter_pushdown("TRUE", connect=False).ok
    for value in (None, "false"):
        result = doctor.check_filter_pushdown(value, connect=True)
        assert not result.ok and "spark.sql.python.filterPushdown.enabled" in result.detail
        assert (value or "unset") in result.detail
        assert result.fix is not None and "lance_spark.spark_conf()" in result.fix
    local = doctor.check_filter_pushdown(None, connect=False)
    assert local.fix is not None and "lance_spark.configure" in local.fix


def test_a_failed_check_prints_its_fix_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "check_java", lambda: doctor.Check("java", "none", "install"))
    monkeypatch.setattr(doctor, "check_jar", lambda: doctor.Check("companion jar", "x"))
    monkeypatch.setattr(doctor, "check_worker_python", lambda: doctor.Check("worker python", "y"))
    lines: list[str] = []
    assert doctor.run(out=lines.append) == 1
    assert lines[0] == "FAIL  java: none\n      -> install"
    assert lines[-1].startswith("      (no live session checked")


def test_the_command_line_names_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2 and cli.main(["nope"]) == 2
    assert "doctor" in capsys.readouterr().err
