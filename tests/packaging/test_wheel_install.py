"""What a user installs is the product: the wheel and the sdist built from a clean copy of the
repository, the wheel installed into a new virtualenv outside it, then used from there.

``python -m build`` builds the sdist, then the wheel from the unpacked sdist: the wheel's jar
proves the sdist can rebuild the companion. The build runs without isolation, in the project
venv (the same setuptools and pyspark an isolated build installs, without downloading them).
The new virtualenv gets the wheel with plain ``pip install``, as a user does; its dependencies
are held to constraints.txt (the versions make test runs on) and come from pip's cache, which
make venv filled (about 45 s on two cores). A second one, made with Python 3.12, gets the sdist
the same way: pip builds the wheel in an isolated build environment, javac compiling the jar
against that environment's pyspark (about 40 s more). A Spark Connect server started from the
first one with ``lance_spark.spark_conf()`` serves a client that never imported lance_spark.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _servers import installed_connect_server, log_tail

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().with_name("_user_script.py")
JAR = "lance_spark/jars/lance-spark-companion.jar"
TIMEOUT = 1200


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False, **kwargs
    )
    if done.returncode != 0:
        pytest.fail(
            f"{cmd} exited with {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
        )
    return done


def _clean_copy(dest: Path) -> Path:
    """The repository's files as a fresh clone has them, with this working tree's changes:
    tracked and untracked files, not ignored ones (no .venv, no jar, no build output)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    src = _clean_copy(tmp_path_factory.mktemp("src"))
    assert not (src / JAR).exists()
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)])
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_is_pure_python_with_the_companion_jar(dist: dict[str, Path]) -> None:
    wheel = dist["wheel"]
    assert wheel.name == "lance_spark-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        assert {JAR, "lance_spark/py.typed", "pyspark_lance.py", "lance_spark_daemon.py"} <= names
        tags = whl.read("lance_spark-0.1.0.dist-info/WHEEL").decode()
        metadata = whl.read("lance_spark-0.1.0.dist-info/METADATA").decode()
        license_text = whl.read("lance_spark-0.1.0.dist-info/licenses/LICENSE").decode()
        jar = whl.read(JAR)
    assert "Tag: py3-none-any" in tags and "Root-Is-Purelib: true" in tags
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Dist: pyspark<4.4,>=4.3.0" in metadata
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    jar_path = dist["wheel"].parent / "companion.jar"
    jar_path.write_bytes(jar)
    with zipfile.ZipFile(jar_path) as classes:
        assert "lance_spark/companion/LanceExtensions.class" in classes.namelist()


def test_the_sdist_has_what_rebuilds_the_jar(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "jvm/build.sh", "build_backend/lance_spark_build.py"} <= names
    java = {n for n in names if n.startswith("jvm/src/") and n.endswith(".java")}
    assert java == {str(p.relative_to(REPO)) for p in (REPO / "jvm" / "src").rglob("*.java")}
    assert not [n for n in names if n.endswith((".jar", ".class"))]


@pytest.fixture(scope="module")
def user_venv(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("user") / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(REPO / "constraints.txt"), str(dist["wheel"])],
    )  # fmt: skip
    return venv


def _python_3_12() -> tuple[str, str | None]:
    """The python3.12 on PATH, resolved to its interpreter, and None; without one, this
    interpreter and a sentence saying so. A pyenv shim runs a version only when it is
    selected: PYENV_VERSION selects it (a real python3.12 ignores the variable)."""
    found = shutil.which("python3.12")
    if found is not None:
        ask = [found, "-c", "import sys; print(sys.executable)"]
        for env in (None, {**os.environ, "PYENV_VERSION": "3.12"}):
            done = subprocess.run(
                ask, capture_output=True, text=True, env=env, timeout=120, check=False
            )
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip(), None
    return sys.executable, (
        f"no python3.12 on PATH: the sdist was installed with {sys.executable} "
        f"(Python {platform.python_version()}) instead"
    )


@pytest.fixture(scope="module")
def sdist_venv_3_12(
    dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str | None]:
    """A new Python 3.12 virtualenv with the sdist installed by plain ``pip install``: build
    isolation, as a user gets it (pip installs setuptools and pyspark into a temporary build
    environment, then the backend compiles the jar). Returns the venv and, when no Python 3.12
    was found, what made it instead (see :func:`_python_3_12`)."""
    python, fallback = _python_3_12()
    venv = tmp_path_factory.mktemp("user312") / "venv"
    _run([python, "-m", "venv", str(venv)])
    done = _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         str(dist["sdist"]), "-c", str(REPO / "constraints.txt")],
    )  # fmt: skip
    # Built here from the sdist, not a wheel pip cached from an earlier run.
    assert "Building wheel for lance_spark" in done.stdout, done.stdout[-4000:]
    return venv, fallback


def _user_env(venv: Path) -> dict[str, str]:
    """A user's shell: the new venv's python for Spark's workers, no repository settings
    (SPARK_CONF_DIR) and nothing a Spark session of this test run left in the environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("SPARK_", "PYSPARK_", "_PYSPARK"))
    }
    python = str(venv / "bin" / "python")
    env.update(
        PYSPARK_PYTHON=python,
        PYSPARK_DRIVER_PYTHON=python,
        VIRTUAL_ENV=str(venv),
        PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]),
    )
    return env


def _spark_conf(python: str, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """``lance_spark.spark_conf()`` as the installed package gives it."""
    code = "import json, lance_spark; print(json.dumps(lance_spark.spark_conf()))"
    conf: dict[str, str] = json.loads(_run([python, "-c", code], cwd=cwd, env=env).stdout)
    return conf


def _quick_start(venv: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The user script's quick start and reuse patterns (register mode), run from outside the
    repository with the venv's python."""
    script = shutil.copy(SCRIPT, tmp_path / "quick_start.py")
    return _run(
        [str(venv / "bin" / "python"), str(script), "register", str(tmp_path / "data")],
        cwd=tmp_path,
        env=_user_env(venv),
    )


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no RESULT line\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def _installed_jar(venv: Path) -> Path:
    site = next((venv / "lib").glob("python3*/site-packages"))
    return site / JAR


def _spark_jars(result: dict[str, Any]) -> list[str]:
    """The session's spark.jars as paths (spark-submit hands Spark the jar as a file: URI)."""
    return [j.removeprefix("file://") for j in result["spark_jars"].split(",")]


def _check(result: dict[str, Any], venv: Path, *, jar: bool = True) -> None:
    package = _installed_jar(venv).parent.parent
    assert Path(result["lance_spark"]).parent == package  # the installed copy, not the checkout
    assert result["jar"] == str(_installed_jar(venv))
    assert result["jar_exists"] is jar
    assert result["companion_enabled"] is jar
    # The companion pushes filters to Lance (its scan names them); without it, Spark filters.
    assert ("LanceFilter=" in result["explain_k1"]) is jar, result["explain_k1"]
    # The counts a plain Python computation gives (100 rows, k = id % 3).
    ids = range(100)
    assert result["cats"] == [1, 3]
    assert result["pets_after_filter"] == 4
    assert result["k1"] == sum(1 for i in ids if i % 3 == 1) == 33
    assert result["all_after_k1"] == 100
    assert result["view_k0"] == sum(1 for i in ids if i % 3 == 0) == 34
    assert result["view_k1"] == 33
    assert result["self_join"] == sum(1 for i in ids if i % 3 == 1 and i + 1 < 100) == 33


def test_the_installed_wheel_runs_the_quick_start_and_reuse_patterns(
    user_venv: Path, tmp_path: Path
) -> None:
    done = _quick_start(user_venv, tmp_path)
    result = _result(done)
    _check(result, user_venv)
    assert not [w for w in result["warnings"] if "companion" in w], result["warnings"]


def test_spark_submit_with_spark_conf(user_venv: Path, tmp_path: Path) -> None:
    env = _user_env(user_venv)
    python = str(user_venv / "bin" / "python")
    conf = _spark_conf(python, tmp_path, env)
    script = shutil.copy(SCRIPT, tmp_path / "job.py")
    args = [f"--conf={key}={value}" for key, value in conf.items()]
    done = _run(
        [str(user_venv / "bin" / "spark-submit"), "--master", "local[2]", *args,
         str(script), "submit", str(tmp_path / "data")],
        cwd=tmp_path,
        env=env,
    )  # fmt: skip
    result = _result(done)
    _check(result, user_venv)
    assert result["jar"] in _spark_jars(result), result["spark_jars"]
    assert result["companion_before_register"] is True


def test_without_the_jar_the_answers_stay_right_and_one_line_says_why(
    user_venv: Path, tmp_path: Path
) -> None:
    """The installed package with its jar removed (a wheel built without one): the same
    script gives the same counts, slower, and hears one line saying what to do."""
    jar = _installed_jar(user_venv)
    kept = tmp_path / "kept.jar"
    shutil.move(jar, kept)
    try:
        done = _quick_start(user_venv, tmp_path)
    finally:
        shutil.move(kept, jar)
    result = _result(done)
    _check(result, user_venv, jar=False)
    said = [w for w in result["warnings"] if "companion" in w]
    assert len(said) == 1 and "\n" not in said[0], said
    assert "right but slower" in said[0] and "reinstall lance_spark" in said[0]


def test_the_sdist_installed_on_python_3_12_has_the_jar_and_runs_the_quick_start(
    sdist_venv_3_12: tuple[Path, str | None], tmp_path: Path
) -> None:
    """``pip install lance_spark-0.1.0.tar.gz`` on Python 3.12 (python3.12 from PATH): the
    wheel pip builds carries the jar, and the quick start gives the right counts with it.
    On a machine without python3.12 the same checks run on this interpreter's Python, and a
    warning in the test summary says that 3.12 was not tested."""
    venv, fallback = sdist_venv_3_12
    assert _installed_jar(venv).is_file()
    done = _quick_start(venv, tmp_path)
    result = _result(done)
    if fallback is None:
        assert result["python"].startswith("3.12."), result["python"]
    else:
        assert result["python"] == platform.python_version(), fallback
        warnings.warn(fallback, stacklevel=1)
    _check(result, venv)
    assert not [w for w in result["warnings"] if "companion" in w], result["warnings"]


def test_a_connect_server_started_with_spark_conf_serves_a_client_that_never_imported_us(
    user_venv: Path, tmp_path: Path
) -> None:
    """The installed wheel's spark-submit runs a Spark Connect server with every key of
    ``lance_spark.spark_conf()`` as --conf; a client of the same venv that imports
    lance_spark only at the end (format("lance") is the server's discovery of pyspark_lance)
    gets the right counts for the reuse patterns and filters pushed to Lance, and then
    ``companion_enabled`` says the server loaded the companion."""
    env = _user_env(user_venv)
    python = str(user_venv / "bin" / "python")
    conf = _spark_conf(python, tmp_path, env)
    confs = {
        **conf,
        # The test's own choice, not a user's: no web UI (ports 4040+ are shared here).
        "spark.ui.enabled": "false",
    }
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    script = shutil.copy(SCRIPT, tmp_path / "client.py")
    with installed_connect_server(user_venv, confs, env, server_dir) as url:
        done = subprocess.run(
            [python, str(script), "connect", str(tmp_path / "data"), url],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=tmp_path,
            env=env,
            check=False,
        )
    server_log = f"--- server log ---\n{log_tail(server_dir / 'connect-server.log', 80)}"
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}\n{server_log}"
    result = _result(done)
    assert result["imported_before_end"] is False
    _check(result, user_venv)
    # The server's spark.jars (spark_conf's): the installed jar.
    assert result["jar"] in _spark_jars(result), result["spark_jars"]
