"""Generated filters on Lance (pushed down, with and without scalar indexes) vs Parquet.

The same rows are written as a Lance table (several fragments), as a second Lance table with
BTREE / BITMAP / ZONEMAP indexes, and as Parquet. Every generated predicate must select from
the Lance tables the ids Spark itself selects from the same rows in memory; Parquet is read
through Spark's own reader and reported beside them (Spark's Parquet filter pushdown drops
the rows of ``float_col = -0.0``, which Spark's own evaluation keeps). The generator is the one of
``tests/spark/test_filters_spark.py`` (which runs 120 of them in ``make test``).

    .venv/bin/python -m benchmarks.fuzz_filters --count 1000 --seed 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import lance
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import lance_spark

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "spark"))
from test_filters_spark import _ids, _predicates, _rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="predicates to generate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").appName("fuzz_filters").getOrCreate()
    lance_spark.register(spark)
    try:
        table = _rows(args.rows, seed=args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            plain_uri, indexed_uri = f"{tmp}/plain.lance", f"{tmp}/indexed.lance"
            lance.write_dataset(table, plain_uri, max_rows_per_file=max(1, args.rows // 4))
            indexed = lance.write_dataset(
                table, indexed_uri, max_rows_per_file=max(1, args.rows // 4)
            )
            indexed.create_scalar_index("i", "BTREE")
            indexed.create_scalar_index("small", "BITMAP")
            indexed.create_scalar_index("s", "BTREE")
            indexed.create_scalar_index("d", "ZONEMAP")
            pq.write_table(table, f"{tmp}/t.parquet")
            frames = {
                "lance": spark.read.format("lance").load(plain_uri),
                "lance+indexes": spark.read.format("lance").load(indexed_uri),
            }
            frames["parquet"] = spark.read.parquet(f"{tmp}/t.parquet")
            memory = spark.createDataFrame(table)
            mismatches: dict[str, list[str]] = {name: [] for name in frames}
            predicates = _predicates(table, count=args.count, seed=args.seed)
            for predicate in predicates:
                expected = _ids(memory, predicate)
                for name, frame in frames.items():
                    if _ids(frame, predicate) != expected:
                        mismatches[name].append(predicate)
            print(f"{len(predicates)} predicates on {args.rows} rows (seed {args.seed})")
            for name, bad in mismatches.items():
                print(f"  {name}: {len(predicates) - len(bad)} match Spark, {len(bad)} differ")
                for predicate in bad[:20]:
                    print(f"    differs: {predicate}")
            if mismatches["lance"] or mismatches["lance+indexes"]:
                raise SystemExit(1)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
