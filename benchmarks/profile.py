"""Where a scan's time goes: the connector against the floor of Spark's Python data sources.

``python -m benchmarks.profile --rows 5000000`` prints, for the benchmark's data shape:

- pylance alone, one process: a full scan, and a full scan plus the connector's conversion;
- the connector through Spark (full and 2-column scans to the ``noop`` sink, a one-row
  lookup), with the JVM companion and without it (``spark.lance.companion.enabled=false``:
  Spark plans the Python source's reads itself);
- a Python data source that does no I/O at all, yielding ready-made Arrow batches of the
  same rows: the cost of Spark's Python data source path by itself;
- a query returning one row through a Python data source and through ``spark.range``: the
  fixed cost of a query.

The numbers in benchmarks/WHERE_THE_TIME_GOES.md come from this script.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lance
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

import lance_spark
from lance_spark.source import types as _types

_ALL = "id bigint, x double, label string, vector array<float>"
_COMPANION_CONF = "spark.lance.companion.enabled"
_TWO = "id bigint, x double"


class _ReadyReader(DataSourceReader):
    """Yields one real batch of the table again and again: no I/O, no decoding."""

    def __init__(self, uri: str, target: pa.Schema, rows: int) -> None:
        self.uri, self.target, self.rows = uri, target, rows

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ds = lance.dataset(self.uri)
        batch = next(ds.scanner(columns=self.target.names, batch_size=8192).to_batches())
        ready = _types.conform_read_batch(batch, self.target)
        produced = 0
        while produced < self.rows // 2:
            yield ready
            produced += ready.num_rows


class _ReadySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lance_spark_ready_batches"

    def schema(self) -> str:
        return str(self.options["schema"])

    def reader(self, schema: StructType) -> DataSourceReader:
        target = to_arrow_schema(schema, timezone="UTC")
        return _ReadyReader(self.options["uri"], target, int(self.options["rows"]))


class _OneRowReader(DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, float]]:
        yield (1, 2.0)


class _OneRowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lance_spark_one_row"

    def schema(self) -> str:
        return _TWO

    def reader(self, schema: Any) -> DataSourceReader:
        return _OneRowReader()


def _median(action: Callable[[], object], runs: int) -> float:
    action()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark conf for the session, over conf/spark-defaults.conf (repeatable)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", os.path.join(os.path.dirname(__file__), "..", "conf"))
    builder = SparkSession.builder.master("local[2]").appName("lance_spark-profile")
    for pair in args.conf:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"--conf takes KEY=VALUE, got {pair!r}")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    lance_spark.register(spark)
    spark.dataSource.register(_ReadySource)
    spark.dataSource.register(_OneRowSource)
    work = tempfile.mkdtemp(prefix="lance_spark_profile_")
    uri = os.path.join(work, "t.lance")
    parquet = os.path.join(work, "t.parquet")
    try:
        data = spark.range(0, args.rows, numPartitions=2).selectExpr(
            "id",
            "rand(1) AS x",
            "concat('l', id % 50) AS label",
            "transform(sequence(1, 32), i -> cast((id * i) % 997 AS float)) AS vector",
        )
        data.write.format("lance").option("vector.arrow.fixed-size-list.size", "32").mode(
            "append"
        ).save(uri)
        data.write.parquet(parquet)
        ds = lance.dataset(uri)
        full = to_arrow_schema(spark.read.format("lance").load(uri).schema, timezone="UTC")

        def scan() -> None:
            for _ in ds.scanner(batch_size=8192).to_batches():
                pass

        def scan_convert() -> None:
            for batch in ds.scanner(batch_size=8192).to_batches():
                _types.conform_read_batch(batch, full)

        def noop(reader: Any) -> Callable[[], None]:
            return lambda: reader.load().write.format("noop").mode("overwrite").save()

        def ready(schema: str) -> Any:
            return (
                spark.read.format("lance_spark_ready_batches")
                .option("uri", uri)
                .option("schema", schema)
                .option("rows", str(args.rows))
            )

        # DataFrameReader.option mutates the reader: one reader per configuration.
        lance_all = spark.read.format("lance").option("path", uri)
        lance_two = spark.read.format("lance").option("path", uri).option("columns", "id,x")

        def select_two() -> None:
            frame = spark.read.format("lance").load(uri).select("id", "x")
            frame.write.format("noop").mode("overwrite").save()

        def lookup() -> None:
            spark.read.format("lance").load(uri).filter("id = 12345").collect()

        def without_companion(action: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                spark.conf.set(_COMPANION_CONF, "false")
                try:
                    action()
                finally:
                    spark.conf.unset(_COMPANION_CONF)

            return run

        rows = [
            ("pylance alone, one process: full scan", _median(scan, args.runs)),
            (
                "pylance alone: full scan + the connector's conversion",
                _median(scan_convert, args.runs),
            ),
            ("connector through Spark: full scan to noop", _median(noop(lance_all), args.runs)),
            (
                "connector without the companion: full scan to noop",
                _median(without_companion(noop(lance_all)), args.runs),
            ),
            (
                "Spark's Parquet: full scan to noop",
                _median(noop(spark.read.format("parquet").option("path", parquet)), args.runs),
            ),
            (
                "Python source yielding ready batches, no I/O: all columns",
                _median(noop(ready(_ALL)), args.runs),
            ),
            (
                'connector through Spark: `select("id", "x")` to noop',
                _median(select_two, args.runs),
            ),
            (
                'connector without the companion: `select("id", "x")` to noop',
                _median(without_companion(select_two), args.runs),
            ),
            (
                'connector without the companion: `option("columns", "id,x")` to noop',
                _median(without_companion(noop(lance_two)), args.runs),
            ),
            (
                "Spark's Parquet: columns id, x to noop",
                _median(
                    lambda: (
                        spark.read.parquet(parquet)
                        .select("id", "x")
                        .write.format("noop")
                        .mode("overwrite")
                        .save()
                    ),
                    args.runs,
                ),
            ),
            (
                "Python source yielding ready batches, no I/O: id, x",
                _median(noop(ready(_TWO)), args.runs),
            ),
            (
                "one-row lookup through the connector (`filter(id = k).collect()`)",
                _median(lookup, args.runs),
            ),
            (
                "one-row lookup through the connector without the companion",
                _median(without_companion(lookup), args.runs),
            ),
            (
                "one-row query through a Python source (`filter().collect()`)",
                _median(
                    lambda: (
                        spark.read.format("lance_spark_one_row").load().filter("id = 1").collect()
                    ),
                    args.runs,
                ),
            ),
            (
                "one-row query, `spark.range(1).filter().collect()` (JVM only)",
                _median(lambda: spark.range(1).filter("id = 0").collect(), args.runs),
            ),
        ]
        if args.conf:
            print("confs: " + ", ".join(f"`{c}`" for c in args.conf))
        print(f"| measurement ({args.rows:,} rows, local[2], median of {args.runs}) | seconds |")
        print("| --- | ---: |")
        for name, seconds in rows:
            print(f"| {name} | {seconds:.3f} |")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
