"""scripts/ensure-java.sh, the Makefile's JDK check: it says plainly what is missing (make jar,
make test); only make java (--install) runs apt-get, and checks afterwards. Run with a PATH of
stand-ins: the machine's Java and apt-get are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from _fake_java import fake_jdk, shell_tools

REPO = Path(__file__).resolve().parents[2]


def _ensure_java(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-java.sh"), *args],
        env={"PATH": path, "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_make_says_plainly_which_java_tool_is_missing(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path)
    jre = fake_jdk(tmp_path / "jre", "17.0.15", tools=("java",))
    done = _ensure_java(f"{jre}:{tools}")
    assert done.returncode == 1
    assert done.stderr.startswith("error: no javac on PATH. Spark 4 needs Java 17+")
    assert "make java" in done.stderr and "openjdk-17-jdk-headless" in done.stderr
    assert "command not found" not in done.stderr and "line " not in done.stderr

    old = fake_jdk(tmp_path / "jdk11", "11.0.2")
    done = _ensure_java(f"{old}:{tools}")
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {old}/java is version 11, 17 or newer is needed.")

    ok = fake_jdk(tmp_path / "jdk17", "17.0.15")
    done = _ensure_java(f"{ok}:{tools}")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_make_java_installs_only_with_apt_get(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path)  # no apt-get: nothing is installed, the user is told
    done = _ensure_java(str(tools), "--install")
    assert done.returncode == 1
    assert "error: no java on PATH, and make java installs a JDK only with apt-get" in done.stderr


def _fake_apt(tmp_path: Path, installs: bool) -> str:
    """A PATH with an apt-get that logs its arguments and (``installs``) puts a JDK 17 into
    a directory already on that PATH; ``id -u`` says root."""
    tools = shell_tools(tmp_path)
    (tools / "id").unlink()
    (tools / "id").write_text("#!/bin/sh\necho 0\n")
    jdk = tmp_path / "jdk" / "bin"
    jdk.mkdir(parents=True)
    fake = fake_jdk(tmp_path / "src", "17.0.15")
    copy = f"{shutil.which('cp')} {fake}/* {jdk}/" if installs else ":"
    (tools / "apt-get").write_text(
        f'#!/bin/sh\necho "apt-get $*" >> {tmp_path}/apt.log\ncase "$1" in install) {copy};; esac\n'
    )
    for tool in ("id", "apt-get"):
        (tools / tool).chmod(0o755)
    return f"{jdk}:{tools}"


def test_make_java_installs_openjdk_17_then_checks_it(tmp_path: Path) -> None:
    path = _fake_apt(tmp_path, installs=True)
    done = _ensure_java(path, "--install")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "apt-get update -qq",
        "apt-get install -y -qq openjdk-17-jdk-headless",
    ]
    assert done.stdout.splitlines() == [
        "no java on PATH: installing openjdk-17-jdk-headless with apt-get",
        "JDK ready: javac 17.0.15",
    ]
    # installed: make java checks and says so, apt-get does not run again
    again = _ensure_java(path, "--install")
    assert (again.returncode, again.stdout) == (0, "a JDK 17+ is on PATH: javac 17.0.15\n")
    assert len((tmp_path / "apt.log").read_text().splitlines()) == 2


def test_make_java_fails_when_the_install_gives_no_jdk(tmp_path: Path) -> None:
    done = _ensure_java(_fake_apt(tmp_path, installs=False), "--install")
    assert done.returncode == 1
    assert "error: openjdk-17-jdk-headless is installed but no java on PATH" in done.stderr
