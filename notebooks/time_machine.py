"""A time machine with Lance, on Spark: dataset versioning for model debugging.

A walkthrough of the article "Building a time machine with Lance" with the ``lance`` Spark
data source, on local Spark and local files (nothing is downloaded):

1. start a local Spark session and register the ``lance`` format;
2. ingest a synthetic, Oxford-pets-like image-classification dataset in four batches: every
   ``mode("append")`` write is one new Lance version (the embedding becomes a Lance vector);
3. list the versions Lance recorded, with the ``userMetadata`` of each write;
4. compare the label distribution of every version side by side with Spark SQL;
5. read old versions back: by number, with ``timestampAsOf``, and diff two versions;
6. a bad ingest (mislabelled rows) spotted by comparing distributions, then undone by
   overwriting the table with the version before it;
7. open the same table with pylance directly.

Run it with ``make demo`` (or ``SPARK_CONF_DIR=$PWD/conf .venv/bin/python
notebooks/time_machine.py [--data-dir DIR]``). The table is written to ``./data/time_machine``
unless ``--data-dir`` says otherwise, and is recreated on every run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    FloatType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import lance_spark

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO / "data" / "time_machine"
TABLE_NAME = "pets.lance"
SEED = 20221115

# Oxford-IIIT Pet style labels: cat breeds are capitalised, dog breeds are not.
BREEDS = (
    "Abyssinian",
    "Bengal",
    "Persian",
    "Siamese",
    "Sphynx",
    "beagle",
    "boxer",
    "pug",
    "samoyed",
    "shiba_inu",
)
EMBEDDING_DIM = 16
IMAGE_SIDE = 32  # 32x32 grayscale, raw bytes
SPLITS = ("train", "valid", "test")
SPLIT_WEIGHTS = (0.8, 0.1, 0.1)

SCHEMA = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("image", BinaryType(), nullable=False),
        StructField("label", StringType(), nullable=False),
        StructField("split", StringType(), nullable=False),
        StructField("embedding", ArrayType(FloatType(), containsNull=False), nullable=False),
        StructField("ingested_at", TimestampType(), nullable=False),
    ]
)
# The options every new table (first write, overwrite) needs: embedding becomes a vector.
VECTOR_OPTION = ("embedding.arrow.fixed-size-list.size", str(EMBEDDING_DIM))


@dataclass(frozen=True)
class Batch:
    """One labelling round: how many photos, and how often each breed occurs in it."""

    note: str
    rows: int
    weights: tuple[float, ...]  # relative frequency of each of BREEDS, in that order
    # Labelling mistakes: true breed -> the label the (bad) labelling tool wrote instead.
    mislabel: Mapping[str, str] | None = None


# The story: the first rounds hardly had any dogs; later rounds fill the gaps.
#                                                      Aby Ben Per Sia Sph bea box pug sam shi
BATCHES = (
    Batch("batch 1: first labelling round, mostly cats", 2000, (5, 4, 6, 5, 3, 2, 0, 1, 0, 0)),
    Batch("batch 2: boxers and samoyeds arrive", 2500, (3, 3, 3, 2, 2, 3, 4, 2, 3, 0)),
    Batch("batch 3: first shiba inus", 3000, (2, 2, 2, 2, 2, 3, 3, 3, 3, 4)),
    Batch("batch 4: rebalancing towards dogs", 2500, (1, 1, 1, 1, 2, 2, 3, 4, 3, 5)),
)
# A new labelling vendor whose tool maps samoyed (white, fluffy) to Persian.
BAD_BATCH = Batch(
    "batch 5: new labelling vendor",
    1500,
    (1, 1, 1, 1, 1, 1, 1, 1, 3, 1),
    mislabel={"samoyed": "Persian"},
)


# --- output helpers -----------------------------------------------------------------------------


_STARTED = time.perf_counter()


def heading(title: str, note: str = "") -> None:
    """A section heading, with the time since the script started."""
    clock = f" {time.perf_counter() - _STARTED:5.1f} s"
    print(f"\n{'=' * 4} {title} {'=' * max(4, 80 - len(title))}{clock}")
    if note:
        print(note)


def show_pandas(frame: pd.DataFrame) -> None:
    print(frame.to_string(index=False))


# --- 1. Spark ------------------------------------------------------------------------------------


def start_spark(data_dir: Path) -> SparkSession:
    """A local[2] session with the ``lance`` format registered."""
    # Set before the JVM starts (the Makefile sets them too); the Python workers inherit them.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))
    os.environ.setdefault("LANCE_LOG", "error")  # quiet Rust-side warnings in the workers
    # Starting the JVM forks this process once (to exec java), which lance warns about.
    warnings.filterwarnings("ignore", message="lance is not fork-safe")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lance-time-machine")
        .config("spark.sql.warehouse.dir", str(data_dir / "spark-warehouse"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        # A short-lived JVM: C1 JIT only cuts the demo's CPU time by about a third.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lance_spark.register(spark)
    return spark


# --- 2. data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """What generates the synthetic photos: one embedding centroid and brightness per breed."""

    centroids: np.ndarray  # (len(BREEDS), EMBEDDING_DIM)
    brightness: np.ndarray  # (len(BREEDS),)


def make_world(rng: np.random.Generator) -> World:
    centroids = rng.normal(0.0, 1.0, size=(len(BREEDS), EMBEDDING_DIM)).astype(np.float32)
    brightness = rng.uniform(40, 200, size=len(BREEDS))
    return World(centroids=centroids, brightness=brightness)


def make_batch(
    rng: np.random.Generator, world: World, batch: Batch, *, first_id: int, day: datetime
) -> pa.Table:
    """``batch.rows`` synthetic labelled photos; ids start at ``first_id``."""
    weights = np.array(batch.weights, dtype=float)
    index = rng.choice(len(BREEDS), size=batch.rows, p=weights / weights.sum())
    true_label = [BREEDS[i] for i in index]
    # Embeddings cluster around the breed's centroid, whatever label the photo is given.
    noise = rng.normal(0.0, 0.25, size=(batch.rows, EMBEDDING_DIM)).astype(np.float32)
    embedding = world.centroids[index] + noise
    pixels = world.brightness[index][:, None] + rng.normal(0, 30, (batch.rows, IMAGE_SIDE**2))
    images = np.clip(pixels, 0, 255).astype(np.uint8)
    mislabel = batch.mislabel or {}
    label = [mislabel.get(n, n) for n in true_label]
    split = rng.choice(SPLITS, size=batch.rows, p=SPLIT_WEIGHTS)
    seconds = np.sort(rng.integers(0, 8 * 3600, size=batch.rows))
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + batch.rows), pa.int64()),
            "image": pa.array([row.tobytes() for row in images], pa.binary()),
            "label": pa.array(label, pa.string()),
            "split": pa.array(split.tolist(), pa.string()),
            "embedding": pa.array(list(embedding), pa.list_(pa.float32())),
            "ingested_at": pa.array(
                [day + timedelta(seconds=int(s)) for s in seconds], pa.timestamp("us", tz="UTC")
            ),
        }
    )


def append_batch(spark: SparkSession, uri: str, table: pa.Table, number: int, note: str) -> int:
    """One ``mode("append")`` write = one new Lance version; returns that version."""
    df = spark.createDataFrame(table, schema=SCHEMA)
    writer = df.write.format("lance").mode("append").option("userMetadata", note)
    if number == 1:
        writer = writer.option(*VECTOR_OPTION)  # the first write creates the table
    writer.save(uri)
    return int(lance.dataset(uri).version)


def ingest(spark: SparkSession, uri: str, rng: np.random.Generator, world: World) -> int:
    heading(
        "2. Ingest four labelling rounds",
        "Each batch is appended with df.write.format('lance').mode('append').save(uri);\n"
        "Lance turns every write into a new version, no snapshot copies needed.",
    )
    first_id = 0
    day = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    for number, batch in enumerate(BATCHES, start=1):
        table = make_batch(rng, world, batch, first_id=first_id, day=day)
        version = append_batch(spark, uri, table, number, batch.note)
        print(f"  appended {table.num_rows:>5,} rows ({batch.note}) -> version {version}")
        first_id += table.num_rows
        day += timedelta(days=7)
    return first_id


# --- 3. versions ---------------------------------------------------------------------------------


def versions_table(uri: str) -> pd.DataFrame:
    """One row per version: commit time, rows, fragments, and what the connector recorded."""
    ds = lance.dataset(uri)
    rows = []
    for info in ds.versions():
        version = int(info["version"])
        tx = ds.read_transaction(version)
        props = dict(tx.transaction_properties or {}) if tx is not None else {}
        meta = info["metadata"]
        rows.append(
            {
                "version": version,
                "committed_at (UTC)": _utc(info["timestamp"]).strftime("%H:%M:%S.%f")[:-3],
                "operation": props.get("lance_spark.operation", "?"),
                "rows": int(meta.get("total_rows", 0)),
                "fragments": int(meta.get("total_fragments", 0)),
                "userMetadata": props.get("lance_spark.userMetadata", ""),
            }
        )
    return pd.DataFrame(rows)


def _utc(stamp: datetime) -> datetime:
    # pylance gives naive datetimes in the machine's local zone.
    return stamp.astimezone(UTC)


def show_versions(uri: str, title: str) -> None:
    heading(title, "lance.dataset(uri).versions() plus each version's transaction properties:")
    show_pandas(versions_table(uri))


# --- 4. label distribution per version ----------------------------------------------------------


def read_version(spark: SparkSession, uri: str, version: int) -> DataFrame:
    return spark.read.format("lance").option("version", str(version)).load(uri)


def register_versions(spark: SparkSession, uri: str, versions: Sequence[int]) -> None:
    """A temp view ``pets_v<N>`` per version: each is a pinned snapshot of the same table."""
    for v in versions:
        read_version(spark, uri, v).createOrReplaceTempView(f"pets_v{v}")


def distribution_sql(sources: Mapping[str, str]) -> str:
    """Pivot: one row per label, one column per source (rows and share of that source)."""
    union = "\n  UNION ALL ".join(
        f"SELECT '{name}' AS source, label, count(*) AS n FROM {relation} GROUP BY label"
        for name, relation in sources.items()
    )
    pivot = ", ".join(f"'{name}' AS `{name}`" for name in sources)
    cells = ", ".join(f"coalesce(`{name}`, '      -') AS `{name}`" for name in sources)
    return f"""
WITH counts AS (
  {union}
), shares AS (
  SELECT source, label,
         format_string('%5d %5.1f%%', n, double(100 * n / sum(n) OVER (PARTITION BY source))) AS cell
  FROM counts
)
SELECT label, {cells}
FROM shares PIVOT (first(cell) FOR source IN ({pivot}))
ORDER BY label
"""


def compare_versions(spark: SparkSession, versions: Sequence[int]) -> None:
    heading(
        "4. Label distribution of every version, side by side (Spark SQL)",
        "Each column is one version of the same table (view pets_v<N> = "
        "format('lance').option('version', N));\ncells: rows with that label, share of the version.",
    )
    sql = distribution_sql({f"v{v}": f"pets_v{v}" for v in versions})
    spark.sql(sql).show(len(BREEDS), truncate=False)
    print("A bunch of dog breeds were not even in the first batch: boxer, samoyed, shiba_inu.")


# --- 5. reading old versions --------------------------------------------------------------------


def read_old_versions(spark: SparkSession, uri: str) -> None:
    stamps = [(int(i["version"]), _utc(i["timestamp"])) for i in lance.dataset(uri).versions()]
    (v2, t2), (v3, t3) = stamps[1], stamps[2]
    between = (t2 + (t3 - t2) / 2).isoformat(timespec="milliseconds")
    heading(
        "5. Reading old versions back",
        "The latest version, a version number, and timestampAsOf (a time between the commits of\n"
        f"versions {v2} and {v3}, taken from versions()) are all just options of the same read:",
    )
    spark.read.format("lance").load(uri).createOrReplaceTempView("pets_latest")
    reader = spark.read.format("lance").option("timestampAsOf", between)
    reader.load(uri).createOrReplaceTempView("pets_as_of")
    spark.sql(
        f"""
        SELECT 'load(uri)' AS read, count(*) AS rows, count(DISTINCT label) AS labels
          FROM pets_latest
        UNION ALL SELECT 'option(\"version\", 1)', count(*), count(DISTINCT label) FROM pets_v1
        UNION ALL SELECT 'option(\"timestampAsOf\", \"{between}\")', count(*),
                         count(DISTINCT label) FROM pets_as_of
        UNION ALL SELECT 'option(\"version\", {v2})', count(*), count(DISTINCT label) FROM pets_v{v2}
        """
    ).show(truncate=False)

    print("Diff'ing data: photos in the latest version that version 1 did not have,")
    print("SELECT ... FROM pets_latest LEFT ANTI JOIN pets_v1 USING (id), by label:")
    spark.sql(
        """
        SELECT label,
               count(*) AS new_photos,
               count_if(split = 'train') AS train,
               count_if(split <> 'train') AS valid_or_test,
               min(ingested_at) AS first_ingested
        FROM pets_latest LEFT ANTI JOIN pets_v1 USING (id)
        GROUP BY label ORDER BY new_photos DESC
        """
    ).show(len(BREEDS), truncate=False)

    print("The same table in the catalog: CREATE TABLE pets USING lance LOCATION '<uri>';")
    print("SELECT ... FROM pets WITH ('version' = '1') picks the version in SQL:")
    spark.sql(f"CREATE TABLE pets USING lance LOCATION '{uri}'")
    spark.sql(
        """
        SELECT 'FROM pets WITH (''version'' = ''1'')' AS query, count(*) AS rows,
               count(DISTINCT label) AS labels
          FROM pets WITH ('version' = '1')
        UNION ALL SELECT 'FROM pets', count(*), count(DISTINCT label) FROM pets
        """
    ).show(truncate=False)


# --- 6. a bad ingest, and going back ------------------------------------------------------------


def mislabel_check(uri: str, version: int, trusted: int) -> pd.DataFrame:
    """Rows ``version`` added whose embedding is nearest another breed's centroid.

    The centroids are computed from version ``trusted``, read with pylance.
    """
    cols = ["id", "label", "embedding"]
    ref = lance.dataset(uri, version=trusted).to_table(columns=cols).to_pandas()
    names = sorted(ref["label"].unique())
    centroids = np.stack(
        [np.stack(ref.loc[ref["label"] == name, "embedding"].to_list()).mean(0) for name in names]
    )
    added = f"id > {int(ref['id'].max())}"
    new = lance.dataset(uri, version=version).to_table(columns=cols, filter=added).to_pandas()
    vectors = np.stack(new["embedding"].to_list())
    distances = ((vectors[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)
    new["looks_like"] = np.array(names)[distances.argmin(1)]
    odd = new[new["label"] != new["looks_like"]]
    counts = odd.groupby(["label", "looks_like"]).size().rename("rows").reset_index()
    return counts.sort_values("rows", ascending=False)


def bad_ingest(
    spark: SparkSession, uri: str, rng: np.random.Generator, world: World, first_id: int
) -> tuple[int, int]:
    """Append the mislabelled batch and spot it; returns (last good version, bad version)."""
    heading(
        "6. A bad ingest",
        f"Round 5 comes from a new labelling vendor: {BAD_BATCH.rows:,} photos, appended like "
        "the others.",
    )
    day = datetime(2026, 2, 2, 8, tzinfo=UTC)
    table = make_batch(rng, world, BAD_BATCH, first_id=first_id, day=day)
    bad = append_batch(spark, uri, table, len(BATCHES) + 1, BAD_BATCH.note)
    good = bad - 1
    print(f"  appended {table.num_rows:>5,} rows ({BAD_BATCH.note}) -> version {bad}")
    register_versions(spark, uri, [bad])

    print(
        f"\nThe model trained on version {bad} got worse on Persians. Compare the distributions:\n"
        f"versions {good} and {bad}, and the rows version {bad} added "
        f"(pets_v{bad} LEFT ANTI JOIN pets_v{good} USING (id)):"
    )
    sources = {
        f"v{good}": f"pets_v{good}",
        f"v{bad}": f"pets_v{bad}",
        f"added by v{bad}": f"(SELECT * FROM pets_v{bad} LEFT ANTI JOIN pets_v{good} USING (id))",
    }
    spark.sql(distribution_sql(sources)).show(len(BREEDS), truncate=False)
    print(f"Version {bad} added no samoyed at all, and a third of its photos are labelled Persian.")
    print(f"\nThe embeddings agree: rows added by version {bad} that sit nearest another breed's")
    print(f"centroid (centroids from version {good}, read with pylance):")
    show_pandas(mislabel_check(uri, bad, good))
    return good, bad


def restore(spark: SparkSession, uri: str, good: int, bad: int) -> None:
    """Overwrite the table with version ``good``: a new version with the old data."""
    heading(
        f"6b. Going back to version {good}",
        f"There is no restore API yet: read version {good} and overwrite the table with it, with\n"
        "mode('overwrite'). That is a new version whose data equals the old one; the bad version\n"
        "stays readable for the post-mortem.",
    )
    note = f"restore version {good} (undo {BAD_BATCH.note.split(':')[0]})"
    (
        read_version(spark, uri, good)
        .write.format("lance")
        .mode("overwrite")
        .option(*VECTOR_OPTION)  # an overwrite writes a new schema: keep the vector column
        .option("userMetadata", note)
        .save(uri)
    )
    restored = int(lance.dataset(uri).version)
    register_versions(spark, uri, [restored])
    show_versions(uri, "6c. Versions after the restore")

    print(
        f"\nA checksum of every row (sum of hash(all columns)) per version: {restored} equals {good}."
    )
    columns = "id, image, label, split, embedding, ingested_at"
    checks = spark.sql(
        "\nUNION ALL ".join(
            f"SELECT {v} AS version, count(*) AS rows, sum(hash({columns})) AS checksum "
            f"FROM pets_v{v}"
            for v in (good, bad, restored)
        )
    ).toPandas()
    show_pandas(checks)
    by_version = checks.set_index("version")
    same = by_version.loc[restored].tolist() == by_version.loc[good].tolist()
    print(f"version {restored} == version {good}: {same}")
    if not same:
        raise SystemExit(f"restore check failed: version {restored} differs from version {good}")


# --- 7. pylance ----------------------------------------------------------------------------------


def pylance_view(uri: str) -> None:
    heading("7. The same table with pylance", f"ds = lance.dataset({uri!r})")
    ds = lance.dataset(uri)
    print("ds.schema:")
    print("  " + str(ds.schema).replace("\n", "\n  "))
    print(f"ds.schema.field('embedding').type: {ds.schema.field('embedding').type}")
    print(f"ds.version: {ds.version}, ds.count_rows(): {ds.count_rows():,}")
    print("\nds.to_table(filter=\"label = 'samoyed'\", columns=[...]).to_pandas().head():")
    frame = ds.to_table(
        filter="label = 'samoyed'", columns=["id", "label", "split", "ingested_at", "embedding"]
    ).to_pandas()
    frame["embedding"] = frame["embedding"].map(
        lambda v: "[" + ", ".join(f"{x:.2f}" for x in v[:3]) + ", ...]"
    )
    show_pandas(frame.head())
    print(
        f"\nlance.dataset(uri, version=1).count_rows(): {lance.dataset(uri, version=1).count_rows():,}"
    )


# --- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"where the table is written (its {TABLE_NAME} is recreated); default {DEFAULT_DATA_DIR}",
    )
    return parser.parse_args(argv)


def fresh_data_dir(data_dir: Path) -> str:
    """Remove what a previous run left in ``data_dir``; returns the table's uri."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in (TABLE_NAME, "spark-warehouse"):
        shutil.rmtree(data_dir / name, ignore_errors=True)
    return str((data_dir / TABLE_NAME).resolve())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir: Path = args.data_dir.resolve()
    uri = fresh_data_dir(data_dir)

    heading("1. Start Spark", "local[2] session, lance_spark.register(spark)")
    spark = start_spark(data_dir)
    print(f"  Spark {spark.version}, pylance {lance.__version__}, table at {uri}")
    try:
        rng = np.random.default_rng(SEED)
        world = make_world(rng)
        next_id = ingest(spark, uri, rng, world)
        show_versions(uri, "3. Versions")
        versions = [int(v["version"]) for v in lance.dataset(uri).versions()]
        register_versions(spark, uri, versions)
        compare_versions(spark, versions)
        read_old_versions(spark, uri)
        good, bad = bad_ingest(spark, uri, rng, world, next_id)
        restore(spark, uri, good, bad)
        pylance_view(uri)
    finally:
        spark.stop()
    print(f"\nDone in {time.perf_counter() - _STARTED:.1f} s (table left at {uri})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
