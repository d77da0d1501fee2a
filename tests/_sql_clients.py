"""SQL through four kinds of clients, one interface: the harness of the SQL suites.

``client.kind`` is one of :data:`KINDS`; ``client.sql(statement)`` returns the statement's
rows as tuples, ``client.sql_script(statements)`` the rows of each statement (one process for
all of them where a client starts one per call). A failing statement raises
:class:`SqlClientError`, with the tail of the logs of the client (and of its server); the
statements after it in a script do not run. ``client.sql_each(statements)`` runs every
statement whatever fails, and gives each one's rows or its :class:`SqlClientError` (the
refusal cases of a test in one CLI call).

- ``classic``: the tests' classic SparkSession (``lance_spark.register``-ed), in this process:
  ``spark.sql(...).collect()``, through register's SQL front. Values are Python values.
- ``connect``: a Spark Connect client that never imports lance_spark, a subprocess
  (``_sql_connect_worker.py``) of the tests' Connect server (started with
  ``lance_spark.spark_conf()``). Values are JSON values (int, float, str, bool, None, lists,
  dicts); others come as ``str``. Every answer is checked: no module of this project may be in
  that process's ``sys.modules``.
- ``thrift``: Spark's Thrift JDBC server (``HiveThriftServer2``, from the pyspark package, with
  ``lance_spark.spark_conf()`` and a Derby metastore of its own), queried with ``beeline``
  (``--outputformat=csv2``; one beeline JVM per ``sql`` or ``sql_script`` call, ~2-4 s). Values
  are strings, as beeline prints them (``NULL`` for null).
- ``spark-sql``: the ``spark-sql`` CLI (``local[1]``, ``--properties-file`` with
  ``lance_spark.spark_conf()``, a Derby metastore shared by all its calls in the run). Values
  are strings, as it prints them (tab-separated, ``NULL`` for null). Each call is a new JVM
  (~15 s to start on 2 busy cores, ~35 s with the first Lance query): put the statements of a
  test in one ``sql_script``.

Compare across clients with :func:`rows_as_text`: every value as the text clients print it.
The text clients split rows on newlines and columns on their separator (beeline's csv2 quotes
a value with a comma in it; spark-sql does not quote tabs): values with newlines, and tabs on
``spark-sql``, do not round-trip.

Statements of a script are told apart in the text clients' output by a marker query after each
(``SELECT '<marker>'``), so a script runs in one beeline or spark-sql call. In ``sql_each`` a
second marker, ``SELECT raise_error('<marker>')``, tells the statements' errors apart on
stderr, and the CLI goes on after an error (spark-sql's ``hive.cli.errors.ignore``, beeline's
``--force``).
"""

from __future__ import annotations

import contextlib
import csv
import decimal
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from _servers import (
    FAST_JVM,
    HOST,
    REPO,
    ServerStartError,
    _Process,
    free_port,
    log_tail,
    spark_env,
    stop_tree,
)

CLASSIC = "classic"
CONNECT = "connect"
THRIFT = "thrift"
SPARK_SQL = "spark-sql"
KINDS = (CLASSIC, CONNECT, THRIFT, SPARK_SQL)

Row = tuple[Any, ...]

# One statement or one CLI call: generous, the machine may be busy (2 cores, other test runs).
STATEMENT_TIMEOUT = 300.0
CLI_TIMEOUT = 600.0


class SqlClientError(RuntimeError):
    """A statement failed in a client. ``message``: the error as the client reported it;
    ``str()`` adds the statement and the tail of the logs."""

    def __init__(self, kind: str, statement: str, message: str, logs: str = "") -> None:
        self.kind = kind
        self.statement = statement
        self.message = message
        text = f"[{kind}] {statement!r} failed: {message}"
        super().__init__(f"{text}\n{logs}" if logs else text)


# What ``sql_each`` gives for each statement: its rows, or its error.
Outcome = list[Row] | SqlClientError


class SqlClient(Protocol):
    kind: str

    def sql(self, statement: str) -> list[Row]: ...

    def sql_script(self, statements: Sequence[str]) -> list[list[Row]]: ...

    def sql_each(self, statements: Sequence[str]) -> list[Outcome]: ...


def _each(client: SqlClient, statements: Sequence[str]) -> list[Outcome]:
    """``sql_each`` of a client that answers statement by statement."""
    outcomes: list[Outcome] = []
    for statement in statements:
        try:
            outcomes.append(client.sql(statement))
        except SqlClientError as err:
            outcomes.append(err)
    return outcomes


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


# --- text ---------------------------------------------------------------------------------


def _nested_text(value: Any) -> str:
    """A value inside an array, map or struct, as Spark's CLI and Thrift server print it
    (HiveResult.toHiveString: strings quoted, null lower case)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return value_text(value)


def value_text(value: Any) -> str:
    """One value as the text clients print it (NULL, true/false, 1.5, [1,2], {"a":1})."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_nested_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{_nested_text(k)}:{_nested_text(v)}" for k, v in value.items()) + "}"
        )
    if hasattr(value, "asDict"):  # a Row: a struct
        return value_text(value.asDict())
    return str(value)


def _java_double(value: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7, else d.dddE±n."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "e" not in text else f"{value:f}"
    mantissa, exponent = f"{value:e}".split("e")
    digits = repr(float(mantissa))  # shortest: 1.5, not 1.500000
    return f"{digits}E{int(exponent)}"


def rows_as_text(rows: Sequence[Sequence[Any]]) -> list[tuple[str, ...]]:
    """Rows with every value as text (:func:`value_text`), so the rows of all client kinds
    compare equal; the text clients' rows are already text and stay as they are."""
    return [tuple(v if isinstance(v, str) else value_text(v) for v in row) for row in rows]


# --- processes ----------------------------------------------------------------------------


def _run(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float
) -> tuple[int, str, str]:
    """Runs a CLI in its own process group (the whole group is killed on a timeout)."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n<killed after {timeout:.0f}s>".encode()
        return -9, out.decode(errors="replace"), err.decode(errors="replace")
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _client_env(base: Path) -> dict[str, str]:
    """A Spark CLI's or server's environment: loopback, the venv's Python for the workers,
    the checkout's lance_spark on their path, a conf dir with only the tests' log4j2
    (warnings) so that ``lance_spark.spark_conf()`` is the whole configuration, as a user's."""
    conf = base / "conf"
    if not conf.exists():
        conf.mkdir()
        shutil.copy(REPO / "conf" / "log4j2.properties", conf / "log4j2.properties")
    env = spark_env()
    env["SPARK_CONF_DIR"] = str(conf)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


def _hive_settings(base: Path) -> dict[str, str]:
    """``lance_spark.spark_conf()`` plus a Derby metastore and a warehouse in ``base``."""
    import lance_spark

    settings = dict(lance_spark.spark_conf())
    options = settings.get("spark.driver.extraJavaOptions", "")
    settings.update(
        {
            "spark.ui.enabled": "false",
            "spark.sql.warehouse.dir": str(base / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={base / 'metastore_db'};create=true"
            ),
            # derby.log (and a relative metastore, if anything asks for one) stay in base.
            "spark.driver.extraJavaOptions": (f"{options} -Dderby.system.home={base}".strip()),
        }
    )
    return settings


# --- markers: statements of a script in one CLI call ------------------------------------------


def _marker(index: int | str, token: str) -> str:
    """The marker of statement ``index`` (``""``: the start every marker of ``token`` has)."""
    return f"__lance_spark_sql_{token}_{index}" + ("__" if index != "" else "")


def _with_markers(statements: Sequence[str], token: str, *, errors: bool = False) -> str:
    """The script: each statement, then its marker query; with ``errors``, then also a query
    that fails with the marker's text, the point in stderr where the statement's error (if
    any) ends."""
    parts = []
    for i, statement in enumerate(statements):
        parts.append(statement.strip().rstrip(";"))
        parts.append(f"SELECT '{_marker(i, token)}' AS lance_spark_marker")
        if errors:
            parts.append(f"SELECT raise_error('{_marker(i, token)}')")
    return ";\n".join(parts) + ";\n"


def _split_at_markers(lines: list[str], count: int, token: str) -> list[list[str]]:
    """The output lines of each statement that ran (up to the first that failed)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if len(blocks) < count and line == _marker(len(blocks), token):
            blocks.append(current)
            current = []
        else:
            current.append(line)
    return blocks


def _split_errors(err: str, count: int, token: str, prefix: str) -> list[list[str]]:
    """The stderr lines of each statement, cut where the CLI reports a marker's error (a
    line starting with ``prefix`` that names it); the other lines naming a marker (its
    logs) are left out."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in err.splitlines():
        if len(blocks) < count and line.startswith(prefix) and _marker(len(blocks), token) in line:
            blocks.append(current)
            current = []
        elif _marker("", token) not in line:
            current.append(line)
    return blocks


def _outcomes(
    kind: str,
    statements: Sequence[str],
    results: list[list[Row]],
    errors: list[list[str]],
    error_of: Callable[[str], str],
    failure: str,
    logs: str,
) -> list[Outcome]:
    """``sql_each``'s answer from a text client's call: each statement's rows, or its error
    (``error_of`` its stderr lines, ``""`` when none is an error). A statement with no marker
    means the call ended early: raised with ``failure``, the call's error."""
    if len(results) < len(statements) or len(errors) < len(statements):
        raise SqlClientError(kind, statements[min(len(results), len(errors))], failure, logs)
    return [
        SqlClientError(kind, statement, message, logs)
        if (message := error_of("\n".join(lines)))
        else rows
        for statement, rows, lines in zip(statements, results, errors, strict=True)
    ]


# --- classic ------------------------------------------------------------------------------


class ClassicClient:
    """Statements on a classic SparkSession in this process."""

    kind = CLASSIC

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def sql(self, statement: str) -> list[Row]:
        try:
            rows = self.spark.sql(statement).collect()
        except Exception as err:  # every failure: the harness's error
            raise SqlClientError(self.kind, statement, f"{type(err).__name__}: {err}") from err
        return [tuple(row) for row in rows]

    def sql_script(self, statements: Sequence[str]) -> list[list[Row]]:
        return [self.sql(s) for s in statements]

    def sql_each(self, statements: Sequence[str]) -> list[Outcome]:
        return _each(self, statements)


# --- connect ------------------------------------------------------------------------------


class ConnectClient:
    """A Spark Connect client in a subprocess that imports only pyspark (one per run)."""

    kind = CONNECT

    def __init__(self, url: str, log_dir: Path, timeout: float = STATEMENT_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self.log = log_dir / "connect-client.log"
        env = dict(os.environ)
        # Nothing of this checkout on its path: it could not even import lance_spark from it.
        env.pop("PYTHONPATH", None)
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("_sql_connect_worker.py")), url],
                env=env,
                cwd=log_dir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                text=True,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answer("<start>")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _answer(self, statement: str) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            line = f"<no answer after {self.timeout:.0f}s>"
        if line is None or not line.startswith("{"):
            raise SqlClientError(
                self.kind,
                statement,
                line or f"the client exited with code {self.proc.poll()}",
                self.logs(),
            )
        answer: dict[str, Any] = json.loads(line)
        # The point of this client: it never imports lance_spark, not even through Spark.
        assert not answer["modules"], (
            f"the Connect client imported {answer['modules']} running {statement!r}"
        )
        return answer

    def logs(self) -> str:
        return f"--- connect client, {self.log} ---\n{log_tail(self.log)}"

    def sql(self, statement: str) -> list[Row]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"sql": statement}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(statement)
        if "error" in answer:
            raise SqlClientError(self.kind, statement, answer["error"], self.logs())
        return [tuple(row) for row in answer["rows"]]

    def sql_script(self, statements: Sequence[str]) -> list[list[Row]]:
        return [self.sql(s) for s in statements]

    def sql_each(self, statements: Sequence[str]) -> list[Outcome]:
        return _each(self, statements)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def connect_client(url: str) -> Iterator[ConnectClient]:
    log_dir = Path(tempfile.mkdtemp(prefix="lance-spark-connect-client-"))
    client: ConnectClient | None = None
    try:
        client = ConnectClient(url, log_dir)
        yield client
    finally:
        if client is not None:
            client.close()
        shutil.rmtree(log_dir, ignore_errors=True)


# --- thrift -------------------------------------------------------------------------------

# beeline prints its prompt once when its stdin is not a terminal.
_BEELINE_PROMPT = re.compile(r"^(\d+: jdbc:hive2://\S+> )+")
_BEELINE_PROGRESS = re.compile(r"(\rnull *)+")


class ThriftClient:
    """beeline calls against a running Thrift JDBC server (one call per ``sql_script``)."""

    kind = THRIFT

    def __init__(self, server: ThriftServer) -> None:
        self.server = server

    def sql(self, statement: str) -> list[Row]:
        return self.sql_script([statement])[0]

    def _call(
        self, script: str, token: str, count: int, *, force: bool = False
    ) -> tuple[int, list[list[Row]], str]:
        """One beeline call: its exit code, the rows of each of the ``count`` statements that
        ran, its stderr. ``force``: on after an error (beeline's --force, which holds for a
        script file only, not for -e)."""
        if force:
            file = self.server.base / f"script-{token}.sql"
            file.write_text(script)
            run = ["--force=true", "-f", str(file)]
        else:
            run = ["-e", script]
        argv = [
            str(_pyspark_home() / "bin" / "beeline"),
            "-u",
            self.server.jdbc_url,
            "-n",
            "user",
            "--silent=true",
            "--outputformat=csv2",
            *run,
        ]
        env = {**self.server.env, "SPARK_BEELINE_OPTS": FAST_JVM}  # beeline's JVM
        code, out, err = _run(argv, env, self.server.base, CLI_TIMEOUT)
        # With -f beeline prints "\rnull<spaces>\rnull" (its progress line) around results.
        lines = _BEELINE_PROMPT.sub("", _BEELINE_PROGRESS.sub("", out)).splitlines()
        results: list[list[Row]] = []
        for block in _split_at_markers(lines, count, token):
            # csv2: a header line, then the rows; the marker's header ends the block. A value
            # with a comma is quoted with NUL (beeline's "disable.quoting.for.sv" default).
            body = block[:-1] if block and block[-1] == "lance_spark_marker" else block
            rows = csv.reader(body[1:], quotechar="\0")
            results.append([tuple(r) for r in rows])
        return code, results, err

    def sql_script(self, statements: Sequence[str]) -> list[list[Row]]:
        token = uuid.uuid4().hex[:8]
        code, results, err = self._call(_with_markers(statements, token), token, len(statements))
        if len(results) < len(statements):
            failed = statements[len(results)]
            raise SqlClientError(
                self.kind, failed, _beeline_error(err, code), self.server.describe()
            )
        return results

    def sql_each(self, statements: Sequence[str]) -> list[Outcome]:
        token = uuid.uuid4().hex[:8]
        script = _with_markers(statements, token, errors=True)
        code, results, err = self._call(script, token, len(statements), force=True)
        errors = _split_errors(err, len(statements), token, "Error: ")
        return _outcomes(
            self.kind,
            statements,
            results,
            errors,
            lambda text: _beeline_error(text, code, default=""),
            _beeline_error(err, code),
            self.server.describe(),
        )


def _beeline_error(err: str, code: int, default: str | None = None) -> str:
    """beeline's error lines, without the Java stack frames."""
    lines = [
        line
        for line in err.splitlines()
        if line.strip() and not line.startswith(("\tat ", "\t... ", "WARNING: Using incubator"))
    ]
    if lines:
        return "\n".join(lines)
    return f"beeline exited with code {code}" if default is None else default


class ThriftServer:
    """A running HiveThriftServer2: its JDBC URL, environment and logs."""

    def __init__(self, base: Path, port: int, env: Mapping[str, str], proc: _Process) -> None:
        self.base = base
        self.port = port
        self.env = dict(env)
        self.proc = proc
        self.jdbc_url = f"jdbc:hive2://{HOST}:{port}"

    def describe(self) -> str:
        """The tail of the server's log (beeline's error is in the exception's message)."""
        return self.proc.describe()


@contextlib.contextmanager
def thrift_server(timeout: float = 240.0) -> Iterator[ThriftServer]:
    """Spark's Thrift JDBC server (``local[2]``) from the pyspark package, on 127.0.0.1 on a
    free port, with every setting of ``lance_spark.spark_conf()`` and a Derby metastore and
    warehouse in a temp dir; yields once a beeline query answers. Stopped on exit (its
    process group and the PySpark daemons it forked)."""
    home = _pyspark_home()
    submit = home / "bin" / "spark-submit"
    if not submit.exists():
        raise ServerStartError(f"{submit} not found: the pyspark package should ship bin/")
    base = Path(tempfile.mkdtemp(prefix="lance-spark-thrift-"))
    env = _client_env(base)
    port = free_port()
    argv = [
        str(submit),
        "--class",
        "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
        "--master",
        "local[2]",
        "--name",
        "lance_spark-tests-thrift",
    ]
    for key, value in _hive_settings(base).items():
        argv += ["--conf", f"{key}={value}"]
    argv += [
        "--hiveconf",
        f"hive.server2.thrift.port={port}",
        "--hiveconf",
        f"hive.server2.thrift.bind.host={HOST}",
        "spark-internal",
    ]
    proc: _Process | None = None
    try:
        proc = _Process("thrift-server", argv, env, base, base)
        server = ThriftServer(base, port, env, proc)
        _wait_for_thrift(server, timeout)
        yield server
    finally:
        if proc is not None:
            stop_tree(proc)
        shutil.rmtree(base, ignore_errors=True)


def _wait_for_thrift(server: ThriftServer, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        if server.proc.exited() is not None:
            raise ServerStartError(f"Thrift server exited\n{server.proc.describe()}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, server.port), 1.0):
            break
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"Thrift server not listening on {HOST}:{server.port} after {timeout:.0f}s\n"
                + server.proc.describe()
            )
        time.sleep(0.5)
    # Listening: one query proves it answers.
    try:
        rows = ThriftClient(server).sql("SELECT 1")
    except SqlClientError as err:
        raise ServerStartError(f"Thrift server does not answer: {err}") from err
    if rows != [("1",)]:
        raise ServerStartError(f"Thrift server answered {rows} to SELECT 1")


# --- spark-sql ----------------------------------------------------------------------------


class SparkSqlClient:
    """The ``spark-sql`` CLI: one JVM per ``sql_script`` call, all sharing one metastore."""

    kind = SPARK_SQL

    def __init__(self, base: Path) -> None:
        self.base = base
        self.env = _client_env(base)
        self.properties = base / "spark.properties"
        self.properties.write_text(
            "".join(f"{k}={_escape(v)}\n" for k, v in _hive_settings(base).items())
        )
        self.calls = 0

    def sql(self, statement: str) -> list[Row]:
        return self.sql_script([statement])[0]

    def _call(self, script: str, *options: str) -> tuple[int, str, str, Path]:
        """One CLI call: its exit code, stdout, stderr and the log file it left."""
        self.calls += 1
        argv = [
            str(_pyspark_home() / "bin" / "spark-sql"),
            "--master",
            "local[1]",
            "--properties-file",
            str(self.properties),
            *options,
            "-S",
            "-e",
            script,
        ]
        code, out, err = _run(argv, self.env, self.base, CLI_TIMEOUT)
        log = self.base / f"spark-sql-{self.calls}.log"
        log.write_text(
            f"$ spark-sql {' '.join(options)} -e (exit code {code})\n{script}--- stdout ---\n"
            f"{out}\n--- stderr ---\n{err}"
        )
        return code, out, err, log

    def sql_script(self, statements: Sequence[str]) -> list[list[Row]]:
        token = uuid.uuid4().hex[:8]
        code, out, err, log = self._call(_with_markers(statements, token))
        results = _spark_sql_rows(out, len(statements), token)
        if len(results) < len(statements):
            failed = statements[len(results)]
            raise SqlClientError(
                self.kind, failed, _spark_sql_error(err, code), f"--- {log} ---\n{log_tail(log)}"
            )
        return results

    def sql_each(self, statements: Sequence[str]) -> list[Outcome]:
        token = uuid.uuid4().hex[:8]
        code, out, err, log = self._call(
            _with_markers(statements, token, errors=True),
            "--hiveconf",
            "hive.cli.errors.ignore=true",
        )
        return _outcomes(
            self.kind,
            statements,
            _spark_sql_rows(out, len(statements), token),
            _split_errors(err, len(statements), token, "[USER_RAISED_EXCEPTION] "),
            lambda text: _spark_sql_error(text, code, default=""),
            _spark_sql_error(err, code),
            f"--- {log} ---\n{log_tail(log)}",
        )


def _spark_sql_rows(out: str, count: int, token: str) -> list[list[Row]]:
    """The rows of each statement that ran: the CLI's lines, tab-separated."""
    blocks = _split_at_markers(out.splitlines(), count, token)
    return [[tuple(line.split("\t")) for line in block] for block in blocks]


def _escape(value: str) -> str:
    """A value for a Java properties file."""
    return value.replace("\\", "\\\\")


def _spark_sql_error(err: str, code: int, default: str | None = None) -> str:
    """The CLI's error: the lines of stderr that are neither logs nor timings (``default``,
    or the exit code, when there are none)."""
    noise = re.compile(
        r"^(\d\d:\d\d:\d\d (WARN|INFO|ERROR) |Time taken: |WARNING: |\tat |\t\.\.\. )"
    )
    lines = [line for line in err.splitlines() if line.strip() and not noise.match(line)]
    if lines:
        return "\n".join(lines)
    return f"spark-sql exited with code {code}" if default is None else default


@contextlib.contextmanager
def spark_sql_cli() -> Iterator[SparkSqlClient]:
    base = Path(tempfile.mkdtemp(prefix="lance-spark-sql-cli-"))
    try:
        yield SparkSqlClient(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
