"""Lance's procedures in Spark: what the companion's session catalog runs for
``CALL spark_catalog.system.<name>(table => ..., ...)`` and for the Delta statements its SQL
parser turns into such calls (``DESCRIBE HISTORY``, ``RESTORE``, ``VACUUM``, ``DESCRIBE
DETAIL``, tags, branches), from every client.

The JVM companion plans the call and hands it here through its planner call (a driver-side
Python worker, :mod:`lance_spark.source.scan_planner`): the Lance table as the catalog serves
it (the ``lance`` data source with its options: location, branch, storage) and the call's
arguments. There is no Spark session in that worker: each procedure does its work with pylance
and returns its rows, which travel back as one Arrow IPC stream. The table API
(:class:`~lance_spark.table.LanceTable`) runs the same engines.

A procedure whose work is a Spark job (``optimize``: one Spark task per Lance compaction task)
returns a :class:`Job` instead: the companion runs its reader's partitions as a Spark job
(:class:`~lance_spark.table.job_runner.TaskReader`) and calls the procedure again with the job's
state and results (``resume``), or with no results when the job failed, so the procedure
deletes what it staged. The procedure then commits and returns its rows, or a new job (a
retryable conflict: the attempt is redone, as :func:`~lance_spark.table.job_runner.with_retry` does).
"""

from __future__ import annotations

import base64
import json
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lance_spark import _spark
from lance_spark.errors import CommitConflictError, InvalidOptionError
from lance_spark.source import dataset
from lance_spark.source.datasource import LanceDataSource, normalise_uri
from lance_spark.source.options import (
    TIMESTAMP_AS_OF,
    VERSION_AS_OF,
    decode_names,
    parse_read_options,
)
from lance_spark.source.search_plans import search_udtf
from lance_spark.source.write_jobs import StagedJob
from lance_spark.source.writer import ROWS
from lance_spark.table import (
    branches,
    catalog,
    columns,
    convert,
    detail,
    folder_catalog,
    history,
    maintenance,
)
from lance_spark.table import job_runner as _jobs
from lance_spark.table.context import TableContext

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Input:
    """Data a job reads with Spark's own reader (``spark.read.format(format).options(options)
    .load(path)`` in the companion): CONVERT TO LANCE's Parquet table."""

    format: str
    path: str
    options: Mapping[str, str]


@dataclass(frozen=True)
class Query:
    """Data a job reads as a Spark SQL query the companion runs in the statement's session
    (``spark.sql(query)``): UPDATE COLUMNS's join of the Lance table and the source."""

    query: str


@dataclass(frozen=True)
class Job:
    """A Spark job a procedure needs before it can finish (see the module doc): the tasks of
    ``reader``; or, with ``input``, ``task`` run on every partition of that data (as
    :func:`~lance_spark.table.job_runner.run_tasks` runs it) or, without ``task``, no job: the
    companion reads the data's schema and gives it back (``Resume.input``)."""

    state: dict[str, Any]  # JSON: given back with the job's results
    reader: _jobs.TaskReader | None = None
    input: Input | Query | None = None
    task: _jobs.Task | None = None


@dataclass(frozen=True)
class InputInfo:
    """What the companion found reading a job's :class:`Input` (or :class:`Query`): its Spark
    schema and files."""

    schema: StructType
    files: int


@dataclass(frozen=True)
class Resume:
    """A procedure's next call: its job's ``state`` and ``results`` (None: the job failed),
    or its input's ``input`` (a job with an input and no task)."""

    state: Mapping[str, Any]
    results: list[bytes] | None
    input: InputInfo | None = None


Outcome = tuple[StructType, Rows] | Job


def _history(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    limit = args.get("limit")
    return history.HISTORY_SCHEMA, history.history_rows(
        table, None if limit is None else int(limit)
    )


def _restore(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    given = {k: str(args[k]) for k in ("version", "timestamp") if args.get(k) is not None}
    if len(given) != 1:
        raise InvalidOptionError(
            "restore takes one of version => (a number or a tag) and timestamp => (a timestamp)"
            f"; got {', '.join(sorted(given)) or 'neither'}"
        )
    key = VERSION_AS_OF if "version" in given else TIMESTAMP_AS_OF
    travel = parse_read_options({key: next(iter(given.values()))}).time_travel
    return history.RESTORE_SCHEMA, [history.restore_row(table, travel)]


def _vacuum(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    hours = args.get("retain_hours")
    row = maintenance.vacuum_row(
        table, 168.0 if hours is None else float(hours), dry_run=bool(args.get("dry_run"))
    )
    return maintenance.VACUUM_SCHEMA, [row]


def _detail(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return detail.DETAIL_SCHEMA, [detail.detail_row(table, name=args.get("name"))]


def _create_tag(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    version = args.get("version")
    history.create_tag(table, str(args["tag"]), None if version is None else int(version))
    return NO_ROWS


def _drop_tag(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    history.delete_tag(table, str(args["tag"]))
    return NO_ROWS


def _create_branch(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    version = args.get("version")
    source: int | str | None = args.get("tag") if version is None else int(version)
    branches.create_branch(
        table, str(args["branch"]), source, if_not_exists=bool(args.get("if_not_exists"))
    )
    return NO_ROWS


def _drop_branch(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    branches.delete_branch(table, str(args["branch"]), if_exists=bool(args.get("if_exists")))
    return NO_ROWS


def _branches(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return branches.BRANCHES_SCHEMA, branches.branch_rows(table)


def _optimize(table: TableContext, args: Mapping[str, Any], resume: Resume | None) -> Outcome:
    if resume is None:
        target = maintenance.target_rows(
            None, args.get("target_rows_per_fragment"), what="optimize target_rows_per_fragment"
        )
        return _compaction_attempt(table, target, number=1)
    attempt = maintenance.CompactionAttempt.of_state(table, resume.state["compaction"])
    if resume.results is None:
        attempt.job.abort()  # the Spark job failed: the companion raises its error
        return NO_ROWS
    try:
        with attempt.job:
            done = attempt.commit(_jobs.results_of(resume.results))
    except CommitConflictError as err:
        number = int(resume.state["attempt"])
        _jobs.give_up(err, number)  # raises when no attempt is left
        time.sleep(_jobs.RETRY.pause(number + 1))
        return _compaction_attempt(
            table, attempt.planned.target_rows_per_fragment, number=number + 1
        )
    return maintenance.COMPACTION_SCHEMA, [maintenance.compaction_row(done)]


def _compaction_attempt(table: TableContext, target: int | None, *, number: int) -> Outcome:
    started = maintenance.begin_compaction(table, target)
    if started is None:
        return maintenance.COMPACTION_SCHEMA, [maintenance.compaction_row(None)]
    reader = _jobs.TaskReader(len(started.planned.tasks), started.task())
    return Job({"compaction": started.state(), "attempt": number}, reader=reader)


CONVERT_SCHEMA = StructType(
    [
        StructField("version", LongType()),
        StructField("num_converted_files", LongType()),
        StructField("num_output_rows", LongType()),
    ]
)


def _convert(table: TableContext, args: Mapping[str, Any], resume: Resume | None) -> Outcome:
    """CONVERT TO LANCE: the Parquet data at ``source`` into the Lance table at the target
    path, one Spark job and one ``CONVERT`` version (:mod:`~lance_spark.table.convert`, as
    ``LanceTable.convertToLance``). Three calls: check and ask for the data's schema; plan the
    writer and ask for the write job; commit (or delete what the failed job wrote)."""
    source = args.get("source")
    if resume is None:
        how = convert.begin(
            str(source or ""), table.uri, storage=table.storage, mode=args.get("mode") or "error"
        )
        if how is None:  # mode ignore, a table exists
            return CONVERT_SCHEMA, [(None, 0, 0)]
        return Job({"mode": how}, input=_parquet(str(source)))
    if "writer" not in resume.state:  # the data's schema is known: the write job
        if resume.input is None:
            return NO_ROWS  # reading the data failed: nothing was written
        made_folder = convert.makes_folder(table.uri)  # before the writer stages there
        writer = convert.plan_writer(
            table.uri,
            resume.input.schema,
            how=str(resume.state["mode"]),
            options={},
            storage=table.storage,
            app_id=table.application,
        )
        state = {
            "writer": base64.b64encode(pickle.dumps(writer)).decode("ascii"),
            "made_folder": made_folder,
            "files": resume.input.files,
        }
        return Job(state, input=_parquet(str(source)), task=convert.write_task(writer))
    writer = pickle.loads(base64.b64decode(resume.state["writer"]))  # the state this procedure gave
    made_folder = bool(resume.state["made_folder"])
    if resume.results is None:
        convert.abort(writer, made_folder=made_folder)  # the companion raises the job's error
        return NO_ROWS
    try:
        done = _jobs.results_of(resume.results)
        version = convert.commit(writer, done, source=str(source), files=int(resume.state["files"]))
    except BaseException:
        convert.abort(writer, made_folder=made_folder)
        raise
    return CONVERT_SCHEMA, [(version, int(resume.state["files"]), done.counts.get(ROWS, 0))]


def _parquet(path: str) -> Input:
    return Input("parquet", path, {})


# As LanceTable.updateColumns answers.
UPDATE_COLUMNS_SCHEMA = StructType(
    [
        StructField("num_updated_columns", LongType()),
        StructField("num_affected_rows", LongType()),
    ]
)


def _update_columns(table: TableContext, args: Mapping[str, Any], resume: Resume | None) -> Outcome:
    """``ALTER TABLE t UPDATE COLUMNS c1, c2 FROM source ON key``: as
    ``LanceTable.updateColumns`` (:mod:`~lance_spark.table.columns`), one Spark job and one
    ``UPDATE COLUMNS`` version (none when no row matched). The calls: ask for the source's
    schema; check and ask for the job (the join as one query over the table at the version
    read and the source, run by the companion in the statement's session); commit (or delete
    what the failed job wrote), or ask for the job again after a retryable conflict."""
    source = str(args["source"])
    if resume is None:
        return Job({}, input=Query(f"SELECT * FROM {source}"))
    if "plan" not in resume.state:  # the source's schema is known, or reading it failed
        if resume.input is None:
            return NO_ROWS  # the companion raises the error
        return _update_columns_attempt(table, args, resume.input.schema, number=1)
    plan = columns.ColumnUpdate.of_state(resume.state["plan"])
    job = StagedJob(table.uri, plan.version, table.storage, job_id=str(resume.state["job_id"]))
    if resume.results is None:
        job.abort()  # the Spark job failed: the companion raises its error
        return NO_ROWS
    try:
        with job:
            done = columns.commit_update(table, plan, _jobs.results_of(resume.results))
    except CommitConflictError as err:
        number = int(resume.state["attempt"])
        _jobs.give_up(err, number)  # raises when no attempt is left
        time.sleep(_jobs.RETRY.pause(number + 1))
        schema = StructType.fromJson(json.loads(resume.state["schema"]))
        return _update_columns_attempt(table, args, schema, number=number + 1)
    return UPDATE_COLUMNS_SCHEMA, [(len(done.columns), done.matched)]


def _update_columns_attempt(
    table: TableContext, args: Mapping[str, Any], source: StructType, *, number: int
) -> Outcome:
    chosen = args.get("columns")
    plan = columns.plan_update(
        dataset.open_latest(table.uri, storage=table.storage),
        source,
        str(args["on"]),
        uri=table.uri,
        columns=None if chosen is None else decode_names(str(chosen), key="columns"),
    )
    job = StagedJob.begin(table.uri, read_version=plan.version, storage=table.storage)
    state = {
        "plan": plan.state(),
        "job_id": job.job_id,
        "schema": source.json(),
        "attempt": number,
    }
    query = plan.sql(table=str(args["table"]), source=str(args["source"]))
    task = columns.update_task(plan, storage=table.storage, job_id=job.job_id)
    return Job(state, input=Query(query), task=task)


# What create_index / drop_index did: the companion raises Spark's IndexAlreadyExistsException
# / NoSuchIndexException for "exists" / "missing" (IF [NOT] EXISTS then ignores them).
INDEX_OUTCOME_SCHEMA = StructType([StructField("outcome", StringType())])


def _index_exists(table: TableContext, name: str) -> bool:
    return any(row[0] == name for row in maintenance.index_rows(table))


def _create_index(table: TableContext, args: Mapping[str, Any], resume: Resume | None) -> Outcome:
    """CREATE INDEX: a Spark job (as ``LanceTable.createIndex``); "exists" when the index is
    there (the companion raises Spark's IndexAlreadyExistsException)."""
    if resume is not None:
        return _finish_index_job(table, args, resume)
    name = None if args.get("index") is None else str(args["index"])
    if name is not None and _index_exists(table, name):
        return INDEX_OUTCOME_SCHEMA, [("exists",)]
    return _index_build_attempt(table, args, number=1)


def _index_build_attempt(table: TableContext, args: Mapping[str, Any], *, number: int) -> Outcome:
    params = {str(k): v for k, v in dict(args.get("params") or {}).items()}
    started = maintenance.begin_index_build(
        table,
        str(args["column"]),
        str(args.get("type") or maintenance.DEFAULT_INDEX_TYPE),
        name=None if args.get("index") is None else str(args["index"]),
        params=params,
        tasks=int(args.get(PARALLELISM) or 1),
    )
    if started is None:
        return INDEX_OUTCOME_SCHEMA, [("done",)]
    reader = _jobs.TaskReader(len(started.plan.tasks()), started.task())
    return Job({"index": started.state(), "attempt": number}, reader=reader)


def _optimize_indices(
    table: TableContext, args: Mapping[str, Any], resume: Resume | None
) -> Outcome:
    """``CALL ... optimize_indices(table => t[, index => name][, retrain => true])`` and
    ``OPTIMIZE t INDEXES``: as ``LanceTable.optimizeIndices``."""
    if resume is not None:
        return _finish_index_job(table, args, resume)
    return _index_upkeep_attempt(table, args, number=1)


def _index_upkeep_attempt(table: TableContext, args: Mapping[str, Any], *, number: int) -> Outcome:
    names = None if args.get("index") is None else [str(args["index"])]
    retrain = bool(args.get("retrain"))
    upkeep = maintenance.begin_index_upkeep(
        table, names, retrain=retrain, tasks=int(args.get(PARALLELISM) or 1)
    )
    state = {"by_lance": list(upkeep.by_lance), "names": list(upkeep.names), "attempt": number}
    if upkeep.attempt is None:
        return _index_upkeep_done(table, state, args, None)
    state["index"] = upkeep.attempt.state()
    reader = _jobs.TaskReader(len(upkeep.attempt.plan.tasks()), upkeep.attempt.task())
    return Job(state, reader=reader)


def _index_upkeep_done(
    table: TableContext,
    state: Mapping[str, Any],
    args: Mapping[str, Any],
    attempt: maintenance.IndexAttempt | None,
    version: int | None = None,
) -> Outcome:
    upkeep = maintenance.IndexUpkeep(attempt, tuple(state["by_lance"]), tuple(state["names"]))
    retrain = bool(args.get("retrain"))
    maintenance.optimize_by_lance(table, upkeep.by_lance, retrain=retrain)
    rows = maintenance.index_upkeep_rows(table, upkeep, version)
    return maintenance.OPTIMIZE_INDICES_SCHEMA, rows


def _finish_index_job(table: TableContext, args: Mapping[str, Any], resume: Resume) -> Outcome:
    """The second call of an index job: commit what its tasks wrote (or delete it when the
    job failed); a retryable conflict begins the procedure's next attempt."""
    attempt = maintenance.IndexAttempt.of_state(table, resume.state["index"])
    if resume.results is None:
        attempt.job.abort()  # the Spark job failed: the companion raises its error
        return NO_ROWS
    optimizing = "names" in resume.state
    try:
        with attempt.job:
            version = attempt.commit(_jobs.results_of(resume.results))
    except CommitConflictError as err:
        number = int(resume.state["attempt"])
        _jobs.give_up(err, number)  # raises when no attempt is left
        time.sleep(_jobs.RETRY.pause(number + 1))
        if optimizing:
            return _index_upkeep_attempt(table, args, number=number + 1)
        return _index_build_attempt(table, args, number=number + 1)
    if optimizing:
        return _index_upkeep_done(table, resume.state, args, attempt, version)
    return INDEX_OUTCOME_SCHEMA, [("done",)]


def _drop_index(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    name = str(args["index"])
    if not _index_exists(table, name):
        return INDEX_OUTCOME_SCHEMA, [("missing",)]
    maintenance.drop_index(table, name)
    return INDEX_OUTCOME_SCHEMA, [("done",)]


def _properties(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return PROPERTIES_SCHEMA, sorted(catalog.properties(table.open()).items())


def _pin(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    """The latest version: the one a MERGE / UPDATE / DELETE that Spark plans reads."""
    return PIN_SCHEMA, [(int(table.open().version),)]


def _indexes(table: TableContext, args: Mapping[str, Any]) -> tuple[StructType, Rows]:
    return maintenance.INDICES_SCHEMA, maintenance.index_rows(table)


NO_ROWS: tuple[StructType, Rows] = (StructType([]), [])
PARALLELISM = "_parallelism"  # not an argument of a call: the session's, given by run()
PROPERTIES_SCHEMA = StructType(
    [StructField("key", StringType(), False), StructField("value", StringType(), False)]
)
PIN_SCHEMA = StructType([StructField("version", LongType(), False)])
CATALOG_PREFIX = "catalog."

PROCEDURES: dict[str, Callable[[TableContext, Mapping[str, Any]], tuple[StructType, Rows]]] = {
    "history": _history,
    "restore": _restore,
    "vacuum": _vacuum,
    "detail": _detail,
    "create_tag": _create_tag,
    "drop_tag": _drop_tag,
    "create_branch": _create_branch,
    "drop_branch": _drop_branch,
    "branches": _branches,
    "drop_index": _drop_index,
    "indexes": _indexes,
    "properties": _properties,
    "pin": _pin,
}

# The companion's call for the ``lance_search`` table function of a session (no table): the
# pickled UDTF class (``search_udtf`` with the session's storage options, credentials given to
# ``register`` included, which stay inside the pickled Python as for the data source).
SEARCH_FUNCTION_CALL = "search_function"

# Procedures whose work is a Spark job (see the module doc).
JOB_PROCEDURES: dict[str, Callable[[TableContext, Mapping[str, Any], Resume | None], Outcome]] = {
    "optimize": _optimize,
    "convert": _convert,
    "create_index": _create_index,
    "optimize_indices": _optimize_indices,
    "update_columns": _update_columns,
}


def run(
    source: LanceDataSource, call: Mapping[str, Any]
) -> tuple[dict[str, Any], _jobs.TaskReader | None]:
    """Run the procedure ``call`` (``{"name", "args", "app_id"}``, and ``resume``: ``{"state",
    "results"}`` for a job's second call) on the table ``source`` reads; the JSON reply (the
    result's Spark schema and its rows as base64 Arrow IPC; or ``job``: its state and the
    schema of its results) and the job's reader, if it asks for a job."""
    name = str(call.get("name"))
    if name.startswith(CATALOG_PREFIX):  # the folder catalog's operations: JSON in and out
        operation = folder_catalog.OPERATIONS.get(name[len(CATALOG_PREFIX) :])
        if operation is None:
            raise InvalidOptionError(f"unknown folder catalog operation {name!r}")
        catalog = (call.get("args") or {}).get("catalog")
        if catalog:  # the folder catalog's confs, before anything reads them
            folder_catalog.check_conf(dict(source.options), str(catalog))
        opts = parse_read_options(dict(source.options), session_storage=source.defaults.storage)
        root = normalise_uri(opts.uri or "")
        reply = operation(
            root, opts.storage, {**(call.get("args") or {}), "app_id": call.get("app_id")}
        )
        return reply, None
    if name == SEARCH_FUNCTION_CALL:  # the session's, no table: see the constant
        handler = search_udtf(source.defaults.storage)
        command = _spark.python_function_command(handler)
        return {"udtf": base64.b64encode(command).decode("ascii")}, None
    if name not in PROCEDURES and name not in JOB_PROCEDURES:
        known = sorted([*PROCEDURES, *JOB_PROCEDURES])
        raise InvalidOptionError(
            f"unknown Lance procedure {name!r}; procedures: {', '.join(known)}"
        )
    opts = parse_read_options(dict(source.options), session_storage=source.defaults.storage)
    if not opts.uri:
        raise InvalidOptionError(f"procedure {name!r} needs the table's location")
    root = normalise_uri(opts.uri)
    table = TableContext(
        # No session in the planner worker: the procedures use none (see the module doc).
        spark=cast(SparkSession, None),
        uri=dataset.branch_location(root, opts.branch, storage=opts.storage),
        storage=opts.storage,
        branch=opts.branch,
        main_uri=root if opts.branch else None,
        application=str(call.get("app_id") or "") or None,
    )
    args = dict(call.get("args") or {})
    args[PARALLELISM] = source.defaults.parallelism  # the tasks of an index job
    outcome: Outcome
    if name in JOB_PROCEDURES:
        outcome = JOB_PROCEDURES[name](table, args, _resume(call.get("resume")))
    else:
        outcome = PROCEDURES[name](table, args)
    if isinstance(outcome, Job):
        job: dict[str, Any] = {"state": outcome.state, "schema": _jobs.RESULT_SCHEMA.json()}
        given = outcome.input
        if isinstance(given, Query):
            job["input"] = {"query": given.query}
        elif given is not None:
            job["input"] = {"format": given.format, "path": given.path, "options": given.options}
        if outcome.task is not None:
            command = _jobs.map_command(outcome.task)
            job["map"] = base64.b64encode(command).decode("ascii")
        return {"schema": StructType([]).json(), "arrow": "", "job": job}, outcome.reader
    schema, rows = outcome
    return {"schema": schema.json(), "arrow": _arrow_ipc(schema, rows)}, None


def _resume(raw: Any) -> Resume | None:
    if raw is None:
        return None
    results = raw.get("results")
    found = raw.get("input")
    info = None
    if found is not None:
        schema = StructType.fromJson(json.loads(found["schema"]))
        info = InputInfo(schema=schema, files=int(found["files"]))
    return Resume(
        state=dict(raw["state"]),
        results=None if results is None else [base64.b64decode(r) for r in results],
        input=info,
    )


def _arrow_ipc(schema: StructType, rows: Rows) -> str:
    if not schema.fields:
        return ""  # a procedure with no result
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema.fields)
    arrays = [
        pa.array(list(values), type=field.type)
        for values, field in zip(columns, arrow_schema, strict=True)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow_schema) as writer:
        writer.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
