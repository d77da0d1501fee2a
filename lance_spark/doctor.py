"""``python -m lance_spark doctor``: checks what lance_spark needs, and says what to fix.

Each check prints one line, ``ok`` or ``FAIL`` with the one thing to do; the exit status is
the number of failed checks (0: all is well). The checks, in order: Java, the JVM companion's
jar, the interpreter of Spark's Python workers (``PYSPARK_PYTHON``), and a live session: the
companion loaded, Spark's filter pushdown on without ``register``, the session catalog that
serves Lance tables, a Lance table written and read through Spark, the recommended settings.
``--remote sc://host:port`` checks a Spark Connect server's session instead of a local one.

Example::

    $ python -m lance_spark doctor
    ok    java: openjdk version "17.0.13" (/usr/bin/java)
    ok    companion jar: .../lance_spark/jars/lance-spark-companion.jar
    ...
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from lance_spark import _settings, _spark
from lance_spark._register import configure, register

MIN_JAVA = 17
# The packages whose versions a worker must share with the driver.
_PACKAGES = ("lance_spark", "pyspark", "pylance", "pyarrow")


@dataclass(frozen=True)
class Check:
    """One line of the report: ``fix`` is the one thing to do when it failed (None: ok)."""

    name: str
    detail: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.fix is None

    def line(self) -> str:
        status = "ok  " if self.ok else "FAIL"
        text = f"{status}  {self.name}: {self.detail}"
        return text if self.ok else f"{text}\n      -> {self.fix}"


def check_java(*, java: str | None = None) -> Check:
    """A Java runtime of version 17 or later, as Spark will find it (``JAVA_HOME``, else
    ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    found = java or (os.path.join(home, "bin", "java") if home else shutil.which("java"))
    install = (
        f"install a Java {MIN_JAVA}+ runtime (Debian/Ubuntu: apt-get install "
        "openjdk-17-jre-headless) or set JAVA_HOME to one"
    )
    if not found or not os.path.exists(found):
        return Check("java", "no java found (JAVA_HOME, PATH)", install)
    try:
        done = subprocess.run(
            [found, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as err:
        return Check("java", f"{found} does not run: {err}", install)
    first = (done.stderr or done.stdout).strip().splitlines()
    version = first[0] if first else "?"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version)
    major = 0
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # 1.8 and older
            major = int(match.group(2))
    if major < MIN_JAVA:
        return Check("java", f"{version} ({found})", install)
    return Check("java", f"{version} ({found})")


def check_jar() -> Check:
    """The companion's jar inside this installation."""
    path = _spark.companion_jar_path()
    if not os.path.isfile(path):
        return Check(
            "companion jar",
            f"missing: {path}",
            "reinstall lance_spark from a wheel built with a JDK (pip builds one when javac "
            "is on the PATH); in a checkout: make jar",
        )
    return Check("companion jar", path)


def _versions_script() -> str:
    return (
        "import importlib.metadata as m, sys\n"
        f"for name in {_PACKAGES!r}:\n"
        "    try:\n"
        "        print(name, m.version(name))\n"
        "    except m.PackageNotFoundError:\n"
        "        print(name, 'missing')\n"
        "import lance_spark\n"
    )


def _local_versions() -> dict[str, str]:
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def check_worker_python(*, python: str | None = None) -> Check:
    """The interpreter Spark starts its Python workers with imports lance_spark, with the
    driver's versions of lance_spark, pyspark, pylance and pyarrow."""
    chosen = python or os.environ.get("PYSPARK_PYTHON")
    where = "PYSPARK_PYTHON" if chosen else "python3 on the PATH (PYSPARK_PYTHON is not set)"
    interpreter = chosen or shutil.which("python3") or "python3"
    fix = f"set PYSPARK_PYTHON to this interpreter: export PYSPARK_PYTHON={sys.executable}"
    try:
        done = subprocess.run(
            [interpreter, "-c", _versions_script()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as err:
        return Check("worker python", f"{interpreter} ({where}) does not run: {err}", fix)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return Check(
            "worker python", f"{interpreter} ({where}) cannot import lance_spark: {last}", fix
        )
    theirs = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    ours = _local_versions()
    differ = [
        f"{n} {theirs.get(n)} (driver: {ours[n]})" for n in _PACKAGES if theirs.get(n) != ours[n]
    ]
    if differ:
        return Check("worker python", f"{interpreter} ({where}) has {', '.join(differ)}", fix)
    return Check("worker python", f"{interpreter} ({where})")


def check_filter_pushdown(value: str | None, *, connect: bool) -> Check:
    """Spark's filter pushdown for Python data sources as the session was built (``value``:
    its ``spark.sql.python.filterPushdown.enabled`` before ``register``, None: unset). Off,
    the companion pushes no filter into Lance in the sessions that do not call ``register``
    (every client session of a Connect server whose clients never import lance_spark)."""
    key = _spark.FILTER_PUSHDOWN_CONF
    if str(value).strip().lower() == "true":
        return Check("filter pushdown", f"{key} = true")
    fix = (
        "start the Spark Connect server with the settings of lance_spark.spark_conf()"
        if connect
        else "build the session with lance_spark.configure(SparkSession.builder) "
        "(spark-submit: lance_spark.spark_conf())"
    )
    return Check(
        "filter pushdown",
        f"{key} = {value or 'unset'} (Spark's default: false): sessions that do not call "
        "lance_spark.register push no filter into Lance",
        f"{fix}, or set {key}=true",
    )


def check_session_catalog(value: str | None, *, connect: bool) -> Check:
    """The session catalog as the session was built (``value``: its
    ``spark.sql.catalog.spark_catalog`` before ``register``, None: unset). The companion's
    ``LanceSessionCatalog`` serves catalog tables ``USING lance``, ``VERSION AS OF`` and
    ``lance.`path``` to every client; another one (Delta's, Iceberg's) cannot."""
    key, ours = _spark.SESSION_CATALOG_CONF, _spark.SESSION_CATALOG_CLASS
    if value == ours or (value is None and not connect):  # register sets it on a classic one
        return Check("session catalog", f"{key} = {ours}")
    if value is None:
        return Check(
            "session catalog",
            f"{key} is unset: clients that never call lance_spark.register get no catalog "
            "tables USING lance, VERSION AS OF or lance.`path`",
            "start the Spark Connect server with the settings of lance_spark.spark_conf()",
        )
    return Check(
        "session catalog",
        f"{key} = {value}: catalog tables USING lance, VERSION AS OF and lance.`path` need "
        f"{ours}; reads and writes by path work",
        f"use a session of its own for Lance tables, or drop {key}",
    )


def check_session(
    spark: Any, *, connect: bool, pushdown: str | None, catalog: str | None = None
) -> list[Check]:
    """The companion in ``spark``, its filter pushdown (``pushdown``: the conf's value before
    ``register`` set it, see :func:`check_filter_pushdown`), a round trip of a small Lance
    table, the settings."""
    checks = []
    if _spark.companion_enabled(spark):
        checks.append(Check("companion in session", "loaded"))
    else:
        fix = (
            "start the Spark Connect server with the settings of lance_spark.spark_conf()"
            if connect
            else "build the session with lance_spark.configure(SparkSession.builder)"
        )
        checks.append(Check("companion in session", "not loaded", fix))
    checks.append(check_filter_pushdown(pushdown, connect=connect))
    checks.append(check_session_catalog(catalog, connect=connect))
    if not connect:
        with tempfile.TemporaryDirectory(prefix="lance_spark_doctor_") as tmp:
            checks.append(_round_trip(spark, os.path.join(tmp, "doctor.lance")))
    lacking = _settings.missing(lambda key: _conf(spark, key))
    if lacking:
        checks.append(
            Check(
                "recommended settings",
                "missing " + ", ".join(s.key for s in lacking),
                "build the session with lance_spark.configure(...) (a Connect server or "
                "spark-submit: lance_spark.spark_conf())",
            )
        )
    else:
        checks.append(Check("recommended settings", "all set"))
    return checks


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a conf the session cannot answer is a missing one
        return None
    return None if value is None else str(value)


def _round_trip(spark: Any, uri: str) -> Check:
    try:
        frame = spark.range(10).selectExpr("id", "id % 3 AS k")
        frame.write.format("lance").save(uri)
        back = spark.read.format("lance").load(uri)
        counts = (back.where("k = 1").count(), back.count())
    except Exception as err:  # noqa: BLE001 - the report names whatever went wrong
        text = str(err).strip().splitlines()
        return Check(
            "write and read",
            f"failed: {text[0] if text else type(err).__name__}",
            "see the message above; a worker that cannot import lance_spark needs "
            "PYSPARK_PYTHON (see worker python)",
        )
    if counts != (3, 10):
        return Check(
            "write and read",
            f"wrong counts {counts} (expected (3, 10))",
            "report this: it is a bug",
        )
    return Check("write and read", "10 rows written and read back through Spark")


def run(*, remote: str | None = None, out: Callable[[str], None] = print) -> int:
    """Run every check, print its line; the number of failed checks."""
    checks = [check_java(), check_jar(), check_worker_python()]
    for check in checks:
        out(check.line())
    if remote is None and not (checks[0].ok and checks[1].ok):
        out("      (no live session checked: fix the above first)")
        return sum(not c.ok for c in checks)
    try:
        session = _session_checks(remote)
    except Exception as err:  # noqa: BLE001 - the report names whatever went wrong
        text = str(err).strip().splitlines()
        session = [
            Check(
                "session",
                f"failed: {text[0] if text else type(err).__name__}",
                "fix the checks above (a worker that cannot import lance_spark fails every "
                "session)",
            )
        ]
    for check in session:
        out(check.line())
    failed = sum(not c.ok for c in [*checks, *session])
    out("all checks passed" if not failed else f"{failed} check(s) failed")
    return failed


def _session_checks(remote: str | None) -> list[Check]:
    from pyspark.sql import SparkSession

    if remote is not None:
        spark = SparkSession.builder.remote(remote).getOrCreate()
    else:
        builder = SparkSession.builder.master("local[1]").appName("lance_spark doctor")
        builder = builder.config("spark.ui.enabled", "false")
        # no progress bar drawn between the check lines
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        spark = configure(builder).getOrCreate()
    try:
        # As built: register sets both.
        pushdown = _conf(spark, _spark.FILTER_PUSHDOWN_CONF)
        catalog = _conf(spark, _spark.SESSION_CATALOG_CONF)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checks say it, with the fix
            register(spark)
        return check_session(spark, connect=remote is not None, pushdown=pushdown, catalog=catalog)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lance_spark doctor", description=__doc__)
    parser.add_argument("--remote", help="a Spark Connect server to check (sc://host:port)")
    args = parser.parse_args(argv)
    return min(run(remote=args.remote), 100)
