"""lance_spark's build backend: setuptools, plus the JVM companion's jar in every wheel.

Every wheel (``python -m build``, ``pip install .``, ``pip wheel``, ``pip install git+...``, an
install from the sdist) carries ``lance_spark/jars/lance-spark-companion.jar``, compiled by
``jvm/build.sh`` with javac against the jars of the build environment's pyspark. Without a JDK
the build stops with a message saying what to install: it never makes a wheel without the jar.
The wheel stays ``py3-none-any`` (Java bytecode runs on any JVM 17+).

Wheel builds alone need pyspark (``get_requires_for_build_wheel``): an sdist or an editable
install (``make venv``) does not download it. An editable install does not compile the jar
(``make jar`` puts it in ``lance_spark/jars/`` of the checkout, where the editable install
finds it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the PEP 517 hooks kept as setuptools has them)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)
from setuptools.command.build_py import build_py as _build_py

ROOT = Path(__file__).resolve().parent.parent
# The Spark the companion is compiled against: the companion uses Spark 4.3 internals.
PYSPARK = "pyspark==4.3.0"
JAR = "lance_spark/jars/lance-spark-companion.jar"
JAVA_MIN = 17
INSTALL_HINT = (
    "Install a JDK 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless; "
    "Fedora: dnf install java-17-openjdk-devel; macOS: brew install openjdk@17), or point "
    "JAVA_HOME at one, and build again. An already built lance_spark wheel needs only a "
    "Java 17+ runtime."
)


class MissingJDK(SystemExit):
    """The build cannot compile the companion (a SystemExit: the build frontends print the
    message alone, without a traceback)."""


def _java_path(env: dict[str, str]) -> str:
    """PATH with ``$JAVA_HOME/bin`` first when JAVA_HOME names a JDK."""
    path = env.get("PATH", os.defpath)
    home = env.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "javac")):
        return os.pathsep.join([os.path.join(home, "bin"), path])
    return path


def jdk_problem(env: dict[str, str] | None = None) -> str | None:
    """What keeps this machine from compiling the companion (None: a JDK 17+ is there)."""
    path = _java_path(dict(os.environ if env is None else env))
    javac = shutil.which("javac", path=path)
    if javac is None:
        return "no javac (JDK) is on PATH"
    if shutil.which("jar", path=path) is None:
        return f"{javac} is on PATH but not the jar tool of its JDK"
    try:
        shown = subprocess.run(
            [javac, "-version"], capture_output=True, text=True, timeout=120, check=False
        )
    except OSError as err:
        return f"{javac} does not run ({err})"
    found = re.search(r"javac\s+(\d+)(?:\.(\d+))?", shown.stdout + shown.stderr)
    if found is None:
        return f"{javac} -version printed no version"
    major = int(found.group(2) if found.group(1) == "1" and found.group(2) else found.group(1))
    if major < JAVA_MIN:
        return f"{javac} is version {major} ({JAVA_MIN} or newer is needed)"
    return None


def require_jdk(env: dict[str, str] | None = None) -> None:
    problem = jdk_problem(env)
    if problem is not None:
        raise MissingJDK(
            "error: building lance_spark compiles its JVM companion (jvm/) with javac, and "
            f"{problem}.\n{INSTALL_HINT}"
        )


def build_companion(out: Path, python: str = sys.executable) -> None:
    """Compile the companion into ``out`` with jvm/build.sh against ``python``'s pyspark."""
    require_jdk()
    env = dict(os.environ)
    env["PATH"] = _java_path(env)
    subprocess.run(["bash", str(ROOT / "jvm" / "build.sh"), python, str(out)], env=env, check=True)
    if not out.is_file():
        raise SystemExit(f"error: jvm/build.sh did not write {out}")


class build_py(_build_py):  # type: ignore[misc]  # setuptools' command name: lower case
    """setuptools' build_py, then the companion's jar next to the package's modules."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            print(f"lance_spark: editable install; `make jar` builds {JAR} in the checkout")
            return
        build_companion(Path(self.build_lib) / JAR)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, JAR))
        return outputs


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    # Checked first: a machine without a JDK is told so before pyspark is downloaded.
    require_jdk()
    requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    return [*requires, PYSPARK]
