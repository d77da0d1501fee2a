"""The build backend (build_backend/lance_spark_build.py) that compiles the JVM companion into
every wheel: no wheel without a JDK 17+ (none, a too old one, one without its jar tool), the
message saying what to install; a JDK found through JAVA_HOME. No JVM."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from _fake_java import fake_jdk

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build_backend"))

import lance_spark_build as backend  # noqa: E402


def test_no_javac_stops_the_build_saying_what_to_install(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # no javac there, no JAVA_HOME
    assert backend.jdk_problem(env) == "no javac (JDK) is on PATH"
    with pytest.raises(backend.MissingJDK) as raised:
        backend.require_jdk(env)
    message = str(raised.value)
    assert "no javac (JDK) is on PATH" in message
    assert "apt-get install openjdk-17-jdk-headless" in message
    assert len(message.splitlines()) == 2


def test_the_wheel_hook_builds_no_wheel_without_javac(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    out = tmp_path / "build" / backend.JAR
    with pytest.raises(backend.MissingJDK, match="openjdk-17-jdk-headless"):
        backend.build_companion(out)
    with pytest.raises(backend.MissingJDK, match="no javac"):
        backend.get_requires_for_build_wheel()  # before pyspark is downloaded
    assert not out.exists()


def test_an_old_jdk_or_a_jdk_without_jar_is_named(tmp_path: Path) -> None:
    old = fake_jdk(tmp_path / "jdk11", "11.0.2")
    assert (
        backend.jdk_problem({"PATH": str(old)})
        == f"{old}/javac is version 11 (17 or newer is needed)"
    )
    eight = fake_jdk(tmp_path / "jdk8", "1.8.0_392")
    assert "is version 8 " in str(backend.jdk_problem({"PATH": str(eight)}))
    partial = fake_jdk(tmp_path / "nojar", "17.0.2", tools=("java", "javac"))
    assert "not the jar tool" in str(backend.jdk_problem({"PATH": str(partial)}))


def test_java_home_is_used_when_javac_is_not_on_path(tmp_path: Path) -> None:
    fake_jdk(tmp_path / "jdk21", "21.0.4")
    env = {"PATH": str(tmp_path / "empty"), "JAVA_HOME": str(tmp_path / "jdk21")}
    assert backend.jdk_problem(env) is None


def test_wheel_builds_require_the_pyspark_the_tests_run_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setuptools' own hook runs egg_info in the current directory: left out here
    monkeypatch.setattr(backend._setuptools, "get_requires_for_build_wheel", lambda _=None: [])
    assert backend.get_requires_for_build_wheel() == [backend.PYSPARK]
    assert f"pyspark=={importlib.metadata.version('pyspark')}" == backend.PYSPARK
