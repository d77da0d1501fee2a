"""Servers the tests start on loopback: a Spark standalone cluster, a Spark Connect server and
a moto S3 endpoint.

Every process is started in its own session (process group) and the whole group is stopped on
exit, so executors and Python workers forked by a Spark worker go with it, also when a test
or the start-up fails.
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
import urllib.error
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
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
MOTO_REGION = "us-east-1"

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


class _Process:
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
    procs: list[_Process] = []
    try:
        procs.append(
            _Process(
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
                _Process(
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


def _wait_for_port(port: int, procs: list[_Process], timeout: float) -> None:
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


def _raise_if_exited(procs: list[_Process]) -> None:
    dead = [p for p in procs if p.exited() is not None]
    if dead:
        raise ServerStartError(
            f"Spark standalone cluster failed to start: {', '.join(p.name for p in dead)} "
            "exited\n" + "\n".join(p.describe() for p in procs)
        )


def _wait_for_workers(url: str, expected: int, procs: list[_Process], timeout: float) -> None:
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


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc), also those in other process groups
    (PySpark's worker daemon puts itself in a process group of its own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_tree(proc: _Process) -> None:
    """Stops a Spark driver's process group and the PySpark daemons it forked (they run in
    process groups of their own and leave when the JVM closes their stdin; make sure of it)."""
    workers = descendants(proc.proc.pid)
    proc.stop()
    for pid in workers:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def connect_server(
    confs: Mapping[str, str] | None = None,
    timeout: float = 180.0,
    *,
    repo_conf: bool = True,
) -> Iterator[str]:
    """A Spark Connect server (``local[2]``) on 127.0.0.1 from the pyspark package; yields
    ``sc://127.0.0.1:PORT`` once a client gets an answer from it.

    It reads the repo's ``conf/`` (spark-defaults.conf, log4j2.properties) as the tests'
    classic session does (``repo_conf`` False: an empty conf dir, Spark's defaults plus
    ``confs``, as a user's server), and its Python workers import ``lance_spark`` from this
    checkout.
    On exit its process group is stopped, and so are the PySpark daemons it forked (they run
    in process groups of their own).
    """
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    submit = spark_home / "bin" / "spark-submit"
    if not submit.exists():
        raise ServerStartError(f"{submit} not found: the pyspark package should ship bin/")
    base = Path(tempfile.mkdtemp(prefix="lance-spark-connect-"))
    warehouse = base / "warehouse"
    warehouse.mkdir()
    env = spark_env()
    env["SPARK_HOME"] = str(spark_home)
    if not repo_conf:
        (base / "conf").mkdir()
        env["SPARK_CONF_DIR"] = str(base / "conf")
    # Its Python workers must import the lance_spark under test, not an installed copy.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": str(warehouse),
        # Derby's metastore_db and derby.log, if anything asks for them, stay in the temp dir.
        "spark.driver.extraJavaOptions": _driver_java_options(base, repo_conf=repo_conf),
        **(confs or {}),
    }
    try:
        with _connect_process(submit, settings, env, base, timeout) as url:
            yield url
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def installed_connect_server(
    venv: Path,
    confs: Mapping[str, str],
    env: Mapping[str, str],
    workdir: Path,
    timeout: float = 300.0,
) -> Iterator[str]:
    """A Spark Connect server started as a user of an installed package starts one: the
    ``spark-submit`` of the virtualenv ``venv`` (its pyspark), with ``env`` (the user's shell)
    and only ``confs`` as configuration. It runs in ``workdir`` (its spark-warehouse and
    metastore go there) and logs to ``workdir/connect-server.log``, which stays for the
    caller's failure messages. Yields ``sc://127.0.0.1:PORT`` once a client gets an answer;
    stopped on exit as :func:`connect_server` is."""
    submit = venv / "bin" / "spark-submit"
    if not submit.exists():
        raise ServerStartError(f"{submit} not found: pip installs it with pyspark")
    with _connect_process(submit, confs, env, workdir, timeout) as url:
        yield url


@contextlib.contextmanager
def _connect_process(
    submit: Path, confs: Mapping[str, str], env: Mapping[str, str], base: Path, timeout: float
) -> Iterator[str]:
    """``spark-submit`` runs the Spark Connect server in the foreground (``local[2]``, bound
    to 127.0.0.1 on a free port, logging to ``base``); yields its URL once it answers. On exit
    its process group is stopped, and so are the PySpark daemons it forked (they run in
    process groups of their own)."""
    port = free_port()
    settings = {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        **confs,
    }
    argv = [
        str(submit),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--name",
        "lance_spark-tests-connect",
    ]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    argv.append("spark-internal")
    url = f"sc://{HOST}:{port}"
    proc: _Process | None = None
    try:
        proc = _Process("connect-server", argv, env, base, base)
        _wait_for_connect(url, port, proc, timeout)
        yield url
    finally:
        if proc is not None:
            stop_tree(proc)


def _driver_java_options(base: Path, *, repo_conf: bool) -> str:
    """The spark-defaults.conf driver options (a --conf would replace them) plus Derby's home."""
    options = ""
    defaults = REPO / "conf" / "spark-defaults.conf"
    for line in defaults.read_text().splitlines() if repo_conf else []:
        key, _, value = line.strip().partition(" ")
        if key == "spark.driver.extraJavaOptions":
            options = value.strip()
    return f"{options} -Dderby.system.home={base}".strip()


def _wait_for_connect(url: str, port: int, proc: _Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.exited() is not None:
            raise ServerStartError(f"Spark Connect server exited\n{proc.describe()}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            break
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"Spark Connect server not listening on {HOST}:{port} after {timeout:.0f}s\n"
                + proc.describe()
            )
        time.sleep(0.5)
    # Listening: one round trip with a client of its own proves the server answers.
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    client = ConnectSession.builder.remote(url).create()
    try:
        client.range(1).collect()
    except PySparkException as err:
        raise ServerStartError(
            f"Spark Connect server at {url} does not answer: {err}\n{proc.describe()}"
        ) from err
    finally:
        client.stop()


@contextlib.contextmanager
def moto_s3(timeout: float = 30.0) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1; yields its endpoint URL. Creates no bucket."""
    log_dir = Path(tempfile.mkdtemp(prefix="lance-spark-moto-"))
    port = free_port()
    endpoint = f"http://{HOST}:{port}"
    exe = Path(sys.executable).parent / "moto_server"
    argv = ([str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]) + [
        "-H",
        HOST,
        "-p",
        str(port),
    ]
    proc: _Process | None = None
    try:
        proc = _Process("moto", argv, os.environ, log_dir, log_dir)
        _wait_for_http(f"{endpoint}/moto-api/", proc, timeout)
        yield endpoint
    finally:
        if proc is not None:
            proc.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


def _wait_for_http(url: str, proc: _Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if proc.exited() is not None:
            raise ServerStartError(f"{proc.name} exited before answering\n{proc.describe()}")
        try:
            with _opener.open(url, timeout=2.0):
                return
        except urllib.error.HTTPError:
            return  # any HTTP answer means the server is up
        except OSError as err:
            last_error = str(err)
        time.sleep(0.2)
    raise ServerStartError(
        f"{proc.name} did not answer at {url} within {timeout:.0f}s ({last_error})\n"
        + proc.describe()
    )


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=MOTO_ACCESS_KEY,
        aws_secret_access_key=MOTO_SECRET_KEY,
        region_name=MOTO_REGION,
    )


def create_bucket(endpoint: str, name: str) -> None:
    s3_client(endpoint).create_bucket(Bucket=name)


def list_keys(endpoint: str, bucket: str, prefix: str = "") -> set[str]:
    client = s3_client(endpoint)
    keys: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.update(obj["Key"] for obj in page.get("Contents", []))
    return keys


def lance_storage_options(
    endpoint: str,
    access_key: str = MOTO_ACCESS_KEY,
    secret_key: str = MOTO_SECRET_KEY,
) -> dict[str, str]:
    """Lance storage options for the moto endpoint."""
    return {
        "aws_access_key_id": access_key,
        "aws_secret_access_key": secret_key,
        "aws_region": MOTO_REGION,
        "aws_endpoint": endpoint,
        "allow_http": "true",
    }
