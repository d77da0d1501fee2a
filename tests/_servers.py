"""Servers the tests start on loopback: a Spark standalone cluster (from
benchmarks/spark_cluster.py), a Spark Connect server and a moto S3 endpoint.

Every process is started in its own session (process group) and the whole group is stopped on
exit, so executors and Python workers forked by a Spark worker go with it, also when a test
or the start-up fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The standalone cluster lives in benchmarks/spark_cluster.py (``benchmarks.ml_scale
# --cluster`` starts it too); `benchmarks` is not part of the installed package: import it
# from the checkout.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.spark_cluster import (  # noqa: E402
    FAST_JVM,
    HOST,
    ServerStartError,
    _get_json,
    _opener,
    free_port,
    log_tail,
    spark_class,
    spark_env,
    standalone_cluster,
)
from benchmarks.spark_cluster import Process as _Process  # noqa: E402

__all__ = [
    "FAST_JVM",
    "HOST",
    "REPO",
    "ServerStartError",
    "_Process",
    "_get_json",
    "free_port",
    "log_tail",
    "spark_class",
    "spark_env",
    "standalone_cluster",
]

MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"
MOTO_REGION = "us-east-1"


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
