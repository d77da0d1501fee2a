"""A Spark standalone cluster on loopback (127.0.0.1): a master and workers from the pyspark
package, for the tests (tests/_servers.py re-exports it) and the benchmarks
(``python -m benchmarks.ml_scale --cluster``).

Every process is started in its own session (process group) and the whole group is stopped on
exit, so executors and Python workers forked by a Spark worker go with it, also when the
caller or the start-up fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# C1 only and the serial GC for every Spark JVM of the tests: the data is tiny, and on 2 busy
# cores C2's compiler threads and a parallel GC cost more than they give (a JVM starts in about
# half the time: spark-sql -e "SELECT 1" ~29 s -> ~15 s). tests/conftest.py puts it in the
# environment every test JVM inherits; daemons and beeline take it from their own variables.
# The standalone cluster's master and workers always run with it (they only schedule; the
# executors they start take the application's spark.executor.extraJavaOptions).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Loopback requests must never go through a proxy the environment might configure.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerStartError(RuntimeError):
    """A server did not come up; the message carries the tail of its logs."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"<no log at {path}: {err}>"
    return "\n".join(text.splitlines()[-lines:])


class Process:
    """A child process in its own process group, logging to one file."""

    def __init__(
        self, name: str, argv: list[str], env: Mapping[str, str], log_dir: Path, cwd: Path
    ) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        return self.proc.poll()

    def describe(self) -> str:
        code = self.proc.poll()
        state = "running" if code is None else f"exited with code {code}"
        return f"--- {self.name} ({state}), {self.log} ---\n{log_tail(self.log)}"

    def stop(self, timeout: float = 15.0) -> None:
        pgid = self.proc.pid  # start_new_session: the group id is the child's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        # The leader may be gone while executors it forked are still in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with _opener.open(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


def spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not path.exists():
        raise ServerStartError(f"{path} not found: the pyspark package should ship bin/")
    return path


def spark_env() -> dict[str, str]:
    """Environment for Spark daemons and drivers that must stay on loopback."""
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP=HOST,
        SPARK_CONF_DIR=str(REPO / "conf"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    # Let find-spark-home locate the pip package instead of an unrelated installation.
    env.pop("SPARK_HOME", None)
    return env


_DAEMON_LOG4J = """\
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 2,
    cores_per_worker: int = 1,
    memory: str = "1g",
    timeout: float = 90.0,
) -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1; yields ``spark://...``.

    Returns once every worker is registered and ALIVE at the master.
    """
    base = Path(tempfile.mkdtemp(prefix="lance-spark-cluster-"))
    log_dir = base / "logs"
    work_dir = base / "work"
    log_dir.mkdir()
    work_dir.mkdir()
    log4j = base / "log4j2.properties"
    log4j.write_text(_DAEMON_LOG4J)
    env = spark_env()
    # INFO logs, so that a start failure shows why; C1 only and serial GC start faster.
    env["SPARK_DAEMON_JAVA_OPTS"] = f"-Dlog4j2.configurationFile=file:{log4j} {FAST_JVM}"
    env["SPARK_DAEMON_MEMORY"] = "512m"
    # The master's REST submission server would listen on the fixed port 6066.
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
    launcher = str(spark_class())
    port, web_port = free_port(), free_port()
    master_url = f"spark://{HOST}:{port}"
    state_url = f"http://{HOST}:{web_port}/json"
    procs: list[Process] = []
    try:
        procs.append(
            Process(
                "master",
                [
                    launcher,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web_port),
                ],
                env,
                log_dir,
                base,
            )
        )
        # A worker that finds no master retries only after 5-15 s: start workers once it listens.
        _wait_for_port(port, procs, timeout)
        for i in range(workers):
            worker_dir = work_dir / f"worker-{i}"
            worker_dir.mkdir()
            procs.append(
                Process(
                    f"worker-{i}",
                    [
                        launcher,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        "--host",
                        HOST,
                        "--cores",
                        str(cores_per_worker),
                        "--memory",
                        memory,
                        "--webui-port",
                        "0",
                        "--work-dir",
                        str(worker_dir),
                    ],
                    env,
                    log_dir,
                    base,
                )
            )
        _wait_for_workers(state_url, workers, procs, timeout)
        yield master_url
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(base, ignore_errors=True)


def _wait_for_port(port: int, procs: list[Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _raise_if_exited(procs)
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            return
        time.sleep(0.2)
    raise ServerStartError(
        f"Spark master not listening on {HOST}:{port} after {timeout:.0f}s\n"
        + "\n".join(p.describe() for p in procs)
    )


def _raise_if_exited(procs: list[Process]) -> None:
    dead = [p for p in procs if p.exited() is not None]
    if dead:
        raise ServerStartError(
            f"Spark standalone cluster failed to start: {', '.join(p.name for p in dead)} "
            "exited\n" + "\n".join(p.describe() for p in procs)
        )


def _wait_for_workers(url: str, expected: int, procs: list[Process], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    alive = 0
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        _raise_if_exited(procs)
        try:
            state = _get_json(url)
            alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
            if alive >= expected:
                return
            last_error = f"{alive} of {expected} workers alive"
        except (OSError, ValueError) as err:
            last_error = str(err)
        time.sleep(0.5)
    raise ServerStartError(
        f"Spark standalone cluster not ready after {timeout:.0f}s ({last_error}) at {url}\n"
        + "\n".join(p.describe() for p in procs)
    )
