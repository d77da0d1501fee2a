"""The Python half of the JVM companion (``jvm/``): plans one scan per request.

Spark 4.3 gives a Python data source no column pruning, LIMIT, aggregate push-down or
statistics, and keeps its planned read on the data source object that every scan of a
DataFrame shares (SPARK-58551: a reused DataFrame reads too few rows). The companion's scan
builder (``lance_spark.companion.LanceScanBuilder``) plans each scan itself and calls this
module, in a driver-side Python worker, at most twice per scan:

- phase ``filters``, when Spark pushes filters: which of them Lance evaluates exactly, and the
  read of every column with them (the scan uses it when Spark then prunes nothing and pushes
  no LIMIT or COUNT, which saves the second call);
- phase ``plan``, when the scan is built: the read of exactly the columns Spark needs, with the
  pushed filters and LIMIT, or the answer of a pushed ``COUNT(*)``.

The wire format is Spark's own filter push-down call (``data_source_pushdown_filters.py``: the
pickled data source, the table schema, the filters, the Arrow batch size, binary-as-bytes),
followed by one JSON request; the answer is that call's (the read function and partitions, the
indices of the pushed filters), followed by one JSON reply. Spark's runner writes and reads its
part on the JVM side, so filters and their literals arrive exactly as Spark serializes them.

Spark's Python daemon runs only worker modules whose name starts with ``pyspark``, so the
module the JVM names is ``pyspark_lance``, whose ``main`` is this module's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from pyspark import serializers
from pyspark.logger.worker_io import capture_outputs
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType, _parse_datatype_json_string
from pyspark.sql.worker.data_source_pushdown_filters import FilterRef, deserializeFilter
from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions
from pyspark.sql.worker.utils import worker_run
from pyspark.worker_util import pickleSer, read_command

from lance_spark._spark import COMPANION_PROTOCOL
from lance_spark.errors import LanceSparkError
from lance_spark.source.datasource import LanceDataSource
from lance_spark.source.reader import LanceReader

PROTOCOL = COMPANION_PROTOCOL  # LanceExtensions.PROTOCOL of the jar
COUNT = "count"

# pyspark's wire helpers, typed (pyspark leaves them untyped).
_UTF8: Any = serializers.UTF8Deserializer
_read_utf8: Callable[[IO[bytes]], str] = _UTF8().loads
_read_int: Callable[[IO[bytes]], int] = serializers.read_int
_read_bool: Callable[[IO[bytes]], bool] = serializers.read_bool
_write_int: Callable[[int, IO[bytes]], None] = serializers.write_int
_write_with_length: Callable[[bytes, IO[bytes]], None] = serializers.write_with_length


@dataclass(frozen=True)
class ScanRequest:
    """What the JVM asks for (the JSON after Spark's part of the call)."""

    read_schema: StructType | None = None  # None: every column
    limit: int | None = None
    aggregate: str | None = None
    # A procedure of the companion's session catalog to run instead of planning a scan
    # (lance_spark.table.procedures): {"name", "args", "app_id"}.
    procedure: dict[str, Any] | None = None

    @classmethod
    def parse(cls, text: str) -> ScanRequest:
        raw: dict[str, Any] = json.loads(text)
        protocol = raw.get("protocol")
        if protocol != PROTOCOL:
            raise LanceSparkError(
                f"the lance_spark JVM companion speaks protocol {protocol} and this lance_spark "
                f"package protocol {PROTOCOL}: use the jar shipped with this package "
                "(lance_spark.companion_jar())"
            )
        schema = raw.get("read_schema")
        read_schema = _parse_datatype_json_string(schema) if schema is not None else None
        if read_schema is not None and not isinstance(read_schema, StructType):
            raise LanceSparkError(
                f"the companion sent a read schema that is not a struct: {schema}"
            )
        limit = raw.get("limit")
        return cls(
            read_schema=read_schema,
            limit=None if limit is None else int(limit),
            aggregate=raw.get("aggregate"),
            procedure=raw.get("procedure"),
        )


def answer(
    data_source: LanceDataSource, schema: StructType, filters: list[Any], request: ScanRequest
) -> tuple[list[int], LanceReader | None, dict[str, Any]]:
    """(indices of the pushed filters, the reader of the scan or None, the JSON reply)."""
    reader = data_source.reader(schema)
    if not isinstance(reader, LanceReader):  # a subclass overriding reader(): not ours to plan
        raise LanceSparkError(f"{type(data_source).__name__}.reader() is not a LanceReader")
    refs = [FilterRef(f) for f in filters]
    rejected = {FilterRef(f) for f in reader.push_filters([r.filter for r in refs])}
    pushed = [i for i, ref in enumerate(refs) if ref not in rejected]
    if request.aggregate == COUNT:
        return pushed, None, {"count": reader.count_rows(), "metadata": reader.describe()}
    if request.aggregate is not None:
        raise LanceSparkError(f"the companion asked for an unknown aggregate {request.aggregate!r}")
    scan = reader.for_scan(request.read_schema or schema, limit=request.limit)
    rows, size = scan.statistics()
    reply: dict[str, Any] = {"metadata": scan.describe()}
    if size is not None:  # none: Spark's default size (a blob column's bytes are unknown)
        reply["bytes"] = size
    if scan.pushed_filter is not None:  # the pushed filters in Lance SQL (an overwrite's)
        reply["pushed_predicate"] = scan.pushed_filter
    if rows is not None:
        reply["rows"] = rows
    return pushed, scan, reply


# Runs a procedure on the table a data source reads: its JSON reply, and the reader of the
# Spark job it asks for (whose read function and partitions go back as a scan's do), if any.
ProcedureRunner = Callable[
    [LanceDataSource, dict[str, Any]], tuple[dict[str, Any], DataSourceReader | None]
]


def _main(infile: IO[bytes], outfile: IO[bytes], procedures: ProcedureRunner | None) -> None:
    # Spark's part of the call, in the order its runner writes it.
    data_source = read_command(pickleSer, infile)
    schema = _parse_datatype_json_string(_read_utf8(infile))
    filters = [deserializeFilter(f) for f in json.loads(_read_utf8(infile))]
    max_arrow_batch_size = _read_int(infile)
    binary_as_bytes = _read_bool(infile)
    # The companion's part.
    request = ScanRequest.parse(_read_utf8(infile))
    with capture_outputs():
        if not isinstance(data_source, LanceDataSource):
            raise LanceSparkError(
                f"the lance_spark companion plans only LanceDataSource reads, not "
                f"{type(data_source).__name__}"
            )
        if not isinstance(schema, StructType):
            raise LanceSparkError(
                f"the companion sent a table schema that is not a struct: {schema}"
            )
        if request.procedure is not None:
            if procedures is None:
                raise LanceSparkError("this planner worker runs no procedures")
            reply, job = procedures(data_source, request.procedure)
            pushed: list[int] = []
            read: tuple[DataSourceReader, StructType] | None = None
            if job is not None:
                job_schema = _parse_datatype_json_string(reply["job"]["schema"])
                if not isinstance(job_schema, StructType):
                    raise LanceSparkError(f"a procedure's job has no row schema: {job_schema}")
                read = (job, job_schema)
        else:
            pushed, scan, reply = answer(data_source, schema, filters, request)
            read = None if scan is None else (scan, scan.output_schema)
        if read is None:
            _write_int(0, outfile)  # an empty read function
            _write_int(0, outfile)  # and no partitions
        else:
            write_read_func_and_partitions(
                outfile,
                reader=read[0],
                data_source=data_source,
                schema=read[1],
                max_arrow_batch_size=max_arrow_batch_size,
                binary_as_bytes=binary_as_bytes,
            )
    _write_int(len(pushed), outfile)
    for index in pushed:
        _write_int(index, outfile)
    _write_with_length(json.dumps(reply).encode("utf-8"), outfile)


def main(
    infile: IO[bytes], outfile: IO[bytes], *, procedures: ProcedureRunner | None = None
) -> None:
    """Entry point of the planner worker (``pyspark_lance.main``, which passes the session
    catalog's ``procedures``: they live in the table layer, above this module)."""
    worker_run(lambda i, o: _main(i, o, procedures), infile, outfile)
