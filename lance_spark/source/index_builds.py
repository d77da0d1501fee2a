"""Index builds as Spark jobs (behind ``LanceTable.createIndex``, ``optimizeIndices``,
``CREATE INDEX`` and the ``optimize_indices`` procedure).

A build goes in four steps, none of which needs the whole table on one machine:

1. **Plan** (driver): the fragments to index (every fragment for a build; for an optimize, the
   fragments no segment of the index covers yet), in groups of about equal rows, one group per
   Spark task (at most the session's parallelism).
2. **Train** (driver, vector indexes only): IVF centroids, and for PQ the codebook, from a
   sample Lance reads (``lance.indices.IndicesBuilder``), so every segment shares one model.
   The driver holds the sample (``sample_rate`` rows per centroid), not the table.
3. **Segments** (tasks): each task opens the read version and writes one uncommitted segment
   over its group (``create_index_uncommitted(fragment_ids=...)``), records the segment's folder
   in the job's staging (:mod:`~lance_spark.source.staging`: a failed job's segments are
   deleted), and returns the segment's metadata (small: uuid, fragments, file sizes).
4. **Commit** (driver): one ``CreateIndex`` with the new segments, replacing the index's old
   segments for a build and adding to them for an optimize. Lance rebases it over appends
   committed meanwhile (their fragments stay unindexed until the next optimize).

An index built here keeps its parameters and its vector model next to the table
(``_lance_spark/indexes/<name>.json`` and ``.ivf.arrow`` / ``.pq.arrow``), so an optimize
indexes new fragments with the same parameters and centroids, without retraining. An index
this code did not build (pylance's own, or a full-text index of unknown parameters) is
optimized by Lance's own ``optimize_indices`` on the driver.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.dataset import Index
from lance.indices import IndicesBuilder

from lance_spark.errors import InvalidOptionError, JobClosedError
from lance_spark.source import commit as _commit
from lance_spark.source import lance_errors, staging
from lance_spark.source.dataset import open_latest, open_version
from lance_spark.source.write_jobs import StagedJob, TaskResult

_log = logging.getLogger(__name__)

SCALAR_INDEX_TYPES = ("BTREE", "BITMAP", "LABEL_LIST", "INVERTED", "ZONEMAP", "NGRAM")
VECTOR_INDEX_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_PQ", "IVF_HNSW_SQ")
# Lance's names of index types (IndexDescription.index_type) -> the connector's.
_LANCE_TYPES = {
    "btree": "BTREE",
    "bitmap": "BITMAP",
    "labellist": "LABEL_LIST",
    "label_list": "LABEL_LIST",
    "inverted": "INVERTED",
    "fts": "INVERTED",
    "zonemap": "ZONEMAP",
    "ngram": "NGRAM",
}
# Scalar index types whose segments need no parameter: any index of these types can be
# extended with new segments, whoever built it.
PLAIN_SCALAR = ("BTREE", "BITMAP", "LABEL_LIST", "ZONEMAP", "NGRAM")
_SAMPLE_RATE = 256  # Lance's default: rows sampled per centroid
_TARGET_PARTITION_SIZE = 8192  # Lance's default rows per IVF partition
_MAX_PARTITIONS = 4096
MODELS_DIR = "_lance_spark/indexes"
_CREATED_AT = "_row_created_at_version"  # Lance's version that created a row
CREATE = "CREATE INDEX"
OPTIMIZE = "OPTIMIZE INDEX"


@dataclass(frozen=True)
class IndexSpec:
    """What to build: index ``name`` of type ``kind`` on ``column``, with pylance's keywords
    (as :func:`~lance_spark.source.options.parse_index_params` gives them, ``replace`` left
    out)."""

    name: str
    column: str
    kind: str
    keywords: Mapping[str, Any] = field(default_factory=dict)

    @property
    def vector(self) -> bool:
        return self.kind in VECTOR_INDEX_TYPES

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "column": self.column,
            "kind": self.kind,
            "keywords": dict(self.keywords),
        }

    @classmethod
    def of_json(cls, doc: Mapping[str, Any]) -> IndexSpec:
        return cls(
            str(doc["name"]), str(doc["column"]), str(doc["kind"]), dict(doc.get("keywords") or {})
        )


@dataclass(frozen=True)
class VectorModel:
    """A vector index's shared model: IVF ``centroids`` and, for PQ, the ``codebook``
    (Arrow fixed-size lists, as Lance's trainers give them)."""

    centroids: pa.FixedSizeListArray
    codebook: pa.FixedSizeListArray | None = None
    num_sub_vectors: int | None = None

    def keywords(self) -> dict[str, Any]:
        """The keywords that make a segment use this model instead of training its own."""
        out: dict[str, Any] = {
            "ivf_centroids": self.centroids,
            "num_partitions": len(self.centroids),
        }
        if self.codebook is not None:
            out["pq_codebook"] = self.codebook
            out["num_sub_vectors"] = self.num_sub_vectors
        return out


@dataclass(frozen=True)
class IndexBuild:
    """One index's part of a job: its segments' fragment ``groups`` (one task each), the
    vector ``model`` they share, and the uuids of the segments the commit ``replaces``."""

    spec: IndexSpec
    groups: tuple[tuple[int, ...], ...]
    model: VectorModel | None = None
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildPlan:
    """A job of index builds on ``read_version`` of the table at ``uri``; ``operation`` is what
    its commit records (:data:`CREATE` or :data:`OPTIMIZE`)."""

    uri: str
    read_version: int
    builds: tuple[IndexBuild, ...]
    operation: str

    def tasks(self) -> list[tuple[int, int]]:
        """The job's tasks: (build number, group number) each."""
        return [(b, g) for b, build in enumerate(self.builds) for g in range(len(build.groups))]


@dataclass(frozen=True)
class Coverage:
    """How much of the table an index covers."""

    indexed_rows: int
    unindexed_rows: int
    segments: int


# --- plan and train (driver) --------------------------------------------------------------------


def lance_kind(index_type: str) -> str:
    """The connector's name of a Lance index type (``"BTree"`` -> ``"BTREE"``)."""
    return _LANCE_TYPES.get(index_type.lower(), index_type.upper())


def fragment_groups(
    ds: lance.LanceDataset, fragment_ids: Sequence[int] | None, *, tasks: int
) -> tuple[tuple[int, ...], ...]:
    """``fragment_ids`` (None: every fragment) in at most ``tasks`` groups of neighbouring
    fragments with about equal rows; empty fragments belong to a group like the others."""
    wanted = None if fragment_ids is None else set(fragment_ids)
    sizes = [
        (f.fragment_id, f.metadata.num_rows)
        for f in ds.get_fragments()
        if wanted is None or f.fragment_id in wanted
    ]
    if not sizes:
        return ()
    count = max(1, min(tasks, len(sizes)))
    total = sum(rows for _, rows in sizes)
    groups: list[list[int]] = [[]]
    done = 0
    for fragment_id, rows in sizes:
        # Start the next group once this one holds its share of the rows.
        if groups[-1] and len(groups) < count and done >= total * len(groups) / count:
            groups.append([])
        groups[-1].append(fragment_id)
        done += rows
    return tuple(tuple(g) for g in groups)


def train(ds: lance.LanceDataset, spec: IndexSpec) -> VectorModel | None:
    """The shared model of a vector index (None for a scalar index), trained on a sample."""
    if not spec.vector:
        return None
    keywords = spec.keywords
    rows = ds.count_rows()
    partitions = keywords.get("num_partitions")
    if partitions is None:
        size = int(keywords.get("target_partition_size") or _TARGET_PARTITION_SIZE)
        partitions = min(max(1, rows // size), _MAX_PARTITIONS)
    partitions = int(partitions)
    if partitions > rows:
        raise InvalidOptionError(
            f"index parameter num_partitions={partitions} ({spec.kind} index {spec.name!r} on "
            f"{spec.column!r}) needs at least as many rows; the table has {rows} (choose "
            f"num_partitions <= {rows})"
        )
    builder = _SampleBuilder(ds, spec.column)
    metric = str(keywords.get("metric") or "l2")
    ivf = builder.train_ivf(partitions, distance_type=metric, sample_rate=_SAMPLE_RATE)
    if "PQ" not in spec.kind:
        return VectorModel(ivf.centroids)
    bits = int(keywords.get("num_bits") or 8)
    if rows < 2**bits:
        raise InvalidOptionError(
            f"{spec.kind} index {spec.name!r} on {spec.column!r} with num_bits={bits} needs at "
            f"least {2**bits} rows to train its codebook; the table has {rows} (a smaller "
            "num_bits needs fewer, or use IVF_FLAT / IVF_SQ)"
        )
    sub_vectors = keywords.get("num_sub_vectors")
    if sub_vectors is not None and builder.dimension % int(sub_vectors):
        raise InvalidOptionError(
            f"index parameter num_sub_vectors={sub_vectors} ({spec.kind} index {spec.name!r} "
            f"on {spec.column!r}) must divide the vectors' dimension {builder.dimension}"
        )
    pq = builder.train_pq(ivf, sub_vectors, sample_rate=_SAMPLE_RATE, num_bits=bits)
    return VectorModel(ivf.centroids, pq.codebook, int(pq.num_subvectors))


class _SampleBuilder(IndicesBuilder):
    """pylance's trainer without its Python checks that the table holds ``sample_rate`` rows
    per centroid: Lance itself trains on every row when the table is smaller than the sample
    (as ``create_index`` does: pylance's own IVF_PQ build of a 300-row table trains where the
    builder refused it, "sample_rate must be an int greater than 1"). Enough rows for the
    centroids is checked by :func:`train`."""

    def _verify_ivf_sample_rate(self, sample_rate: int, num_partitions: int, num_rows: int) -> None:
        pass

    def _verify_pq_sample_rate(self, num_rows: int, sample_rate: int, num_bits: int = 8) -> None:
        pass


# --- the tasks ----------------------------------------------------------------------------------


def build_segment(
    uri: str,
    read_version: int,
    build: IndexBuild,
    group: int,
    *,
    storage: Mapping[str, str],
    job_id: str,
) -> TaskResult:
    """Inside a Spark task: the segment of ``build`` over its fragment group ``group``,
    written (and recorded in the job's staging) but not committed."""
    ds = open_version(uri, read_version, storage=storage)
    spec = build.spec
    keywords = {k: v for k, v in spec.keywords.items() if k != "target_partition_size"}
    if build.model is not None:
        keywords.update(build.model.keywords())
    segment = ds.create_index_uncommitted(
        spec.column,
        spec.kind,
        name=spec.name,
        replace=True,
        fragment_ids=list(build.groups[group]),
        **keywords,
    )
    folder = staging.index_folder(str(segment.uuid))
    files = staging.TaskFiles(uri, job_id, storage=storage)
    if not files.record(other=[folder]):
        raise JobClosedError(f"index build over; its segment on {uri} was deleted")
    if spec.kind == "INVERTED":
        # A full-text segment is written as partial files under staging/ that Lance merges
        # into the segment's own files (its metadata, then the files list Lance gives
        # is stale: None makes Lance read the folder).
        ds.merge_index_metadata(str(segment.uuid), "INVERTED")
        fs, path = staging.table_fs(staging.table_file_uri(uri, f"{folder}/staging"), storage)
        if fs.exists(path):
            fs.rm(path, recursive=True)  # empty once merged
        segment = dataclasses.replace(segment, files=None)
    return TaskResult(indices=(segment,))


# --- commit (driver) ----------------------------------------------------------------------------


def commit_build(
    plan: BuildPlan,
    segments: Sequence[Any],
    *,
    storage: Mapping[str, str],
    app_id: str | None,
) -> int:
    """Commit the job's ``segments`` (the tasks' :class:`lance.dataset.Index` objects) as one
    version; returns it. The segments a build replaces go in the same commit."""
    ds = open_version(plan.uri, plan.read_version, storage=storage)
    replaced = {u for build in plan.builds for u in build.replaces}
    removed = [
        Index(
            uuid=str(s.uuid),
            name=str(d.name),
            fields=list(d.fields),
            dataset_version=int(s.dataset_version_at_last_update),
            fragment_ids=cast(Any, set(s.fragment_ids)),  # Lance takes a set too
            index_version=int(s.index_version),
        )
        for d in ds.describe_indices()
        for s in d.segments
        if str(s.uuid) in replaced
    ]
    names = sorted({b.spec.name for b in plan.builds})
    version = _commit.commit(
        plan.uri,
        lance.LanceOperation.CreateIndex(new_indices=list(segments), removed_indices=removed),
        read_version=plan.read_version,
        info=_commit.CommitInfo(
            operation=plan.operation,
            parameters={
                "indexes": ",".join(names),
                "types": ",".join(sorted({b.spec.kind for b in plan.builds})),
            },
            metrics={
                "numSegmentsAdded": len(segments),
                "numSegmentsRemoved": len(removed),
                "numFragmentsIndexed": sum(len(g) for b in plan.builds for g in b.groups),
            },
            app_id=app_id,
        ),
        storage=storage,
    )
    for build in plan.builds:
        # A build (or a retrain) keeps its parameters and model; an optimize that built stale
        # segments again names the new ones (the kept model must outlive the segments it
        # replaced).
        if plan.operation == CREATE or build.replaces:
            uuids = [str(s.uuid) for s in segments if str(s.name) == build.spec.name]
            save_model(plan.uri, build, uuids, storage=storage)
    return version


# --- optimize: the fragments appended since ----------------------------------------------------


@dataclass(frozen=True)
class Upkeep:
    """An optimize's plan: the builds of one job (``plan``), the indexes left to Lance's own
    optimize (``by_lance``: their parameters or model are unknown here) and the indexes asked
    for (``names``)."""

    plan: BuildPlan
    by_lance: tuple[str, ...]
    names: tuple[str, ...]


def plan_upkeep(
    ds: lance.LanceDataset,
    uri: str,
    names: Sequence[str] | None,
    *,
    retrain: bool,
    tasks: int,
    storage: Mapping[str, str],
) -> Upkeep:
    """Plan an optimize of the indexes ``names`` (None: every index) of ``ds``: index the
    fragments appended since each was built (``retrain``: build each again, its vector model
    trained again, replacing its segments)."""
    described = {str(d.name): d for d in ds.describe_indices()}
    wanted = sorted(described) if names is None else list(names)
    unknown = [n for n in wanted if n not in described]
    if unknown:
        raise InvalidOptionError(
            f"index {unknown[0]!r} does not exist in the Lance table at {uri!r}; "
            f"indexes: {', '.join(sorted(described)) or 'none'}"
        )
    builds = []
    by_lance = []
    for name in wanted:
        d = described[name]
        fragments = None if retrain else unindexed_fragments(ds, name)
        if fragments == []:
            continue
        stale = () if fragments is None else stale_segments(ds, name, fragments)
        kept = load_model(ds, uri, name, storage=storage)
        kind = lance_kind(str(d.index_type))
        if kept is not None:
            spec, model = kept
        elif kind in PLAIN_SCALAR:
            spec, model = IndexSpec(name, str(d.field_names[0]), kind), None
        else:
            by_lance.append(name)
            continue
        if retrain:
            model = train(ds, spec)
        if stale:  # built again over what they still cover and the fragments they missed
            fragments = sorted(set(fragments or ()) | set(segment_fragments(ds, name, stale)))
        groups = fragment_groups(ds, fragments, tasks=tasks)
        replaces = tuple(segment_uuids(ds, name)) if retrain else stale
        builds.append(IndexBuild(spec, groups, model, replaces))
    operation = CREATE if retrain else OPTIMIZE
    plan = BuildPlan(uri, int(ds.version), tuple(builds), operation)
    return Upkeep(plan, tuple(by_lance), tuple(wanted))


def optimize_by_lance(
    uri: str, names: Sequence[str], *, retrain: bool, storage: Mapping[str, str]
) -> None:
    """Lance's own optimize (in this process) of indexes whose parameters are unknown here."""
    for name in names:
        ds = open_latest(uri, storage=storage)
        unindexed = [] if retrain else unindexed_fragments(ds, name)
        if retrain or stale_segments(ds, name, unindexed):
            ds.optimize.optimize_indices(index_names=[name], retrain=True)
        elif unindexed:
            ds.optimize.optimize_indices(index_names=[name], num_indices_to_merge=0)


def maybe_auto_index(
    uri: str,
    version: int,
    *,
    min_rows: int,
    storage: Mapping[str, str],
    app_id: str | None,
    what: str = "write",
) -> int | None:
    """After a ``what`` committed ``version`` (autoIndex): index the rows no index covers yet,
    as a version of its own, when an index has at least ``min_rows`` of them. This runs where
    the write commits (a Python process of the driver, without a Spark session), so the
    segments are built here, one after another, in a staged job like a Spark job's. Never
    raises: the ``what`` stands, and a failure is a warning. The version made, or None."""
    try:
        ds = open_latest(uri, storage=storage)
        behind = [
            str(d.name)
            for d in ds.describe_indices()
            if coverage(ds, str(d.name)).unindexed_rows >= min_rows
        ]
        if not behind:
            return None
        upkeep = plan_upkeep(ds, uri, behind, retrain=False, tasks=1, storage=storage)
        done = None
        if upkeep.plan.tasks():
            job = StagedJob.begin(uri, read_version=upkeep.plan.read_version, storage=storage)
            with job:
                segments = [
                    s
                    for b, g in upkeep.plan.tasks()
                    for s in build_segment(
                        uri,
                        upkeep.plan.read_version,
                        upkeep.plan.builds[b],
                        g,
                        storage=storage,
                        job_id=job.job_id,
                    ).indices
                ]
                done = commit_build(upkeep.plan, segments, storage=storage, app_id=app_id)
        optimize_by_lance(uri, upkeep.by_lance, retrain=False, storage=storage)
    except Exception as err:  # noqa: BLE001  (the commit stands; indexing is a bonus)
        _log.warning(
            "auto index of %s after version %d failed; the %s is committed, its rows are "
            "searched without the index until the next optimizeIndices: %s",
            uri,
            version,
            what,
            err,
        )
        return None
    _log.info("auto index of %s after version %d: %s, version %s", uri, version, behind, done)
    return done


# --- what an index is and covers ----------------------------------------------------------------


def coverage(ds: lance.LanceDataset, name: str) -> Coverage:
    """Rows of ``ds`` that index ``name`` covers and does not (rows appended since it was built
    or last optimized), and its segments."""
    stats = ds.stats.index_stats(name)
    return Coverage(
        int(stats.get("num_indexed_rows") or 0),
        int(stats.get("num_unindexed_rows") or 0),
        int(stats.get("num_segments") or 0),
    )


def unindexed_fragments(ds: lance.LanceDataset, name: str) -> list[int]:
    """The fragments of ``ds`` no segment of index ``name`` covers."""
    covered: set[int] = set()
    for d in ds.describe_indices():
        if str(d.name) == name:
            for s in d.segments:
                covered.update(int(i) for i in s.fragment_ids)
    return [f.fragment_id for f in ds.get_fragments() if f.fragment_id not in covered]


def stale_segments(ds: lance.LanceDataset, name: str, unindexed: Sequence[int]) -> tuple[str, ...]:
    """The segments of index ``name`` whose files may hold entries, now stale, for rows of the
    ``unindexed`` fragments; an optimize builds them again instead of adding a segment over
    those fragments (the old entries would answer again, beside the new ones).

    - A fragment that existed when the segment was built and that it no longer covers had
      values rewritten in place (``updateColumns``: Lance drops the fragment from the
      segment's fragments, but not the segment's entries for its rows). Fragment ids only
      grow: a fragment existed at a version when its id is at most that version's highest.
    - With stable row ids, an index holds row ids, and UPDATE and MERGE move a row to a new
      fragment under its row id: an unindexed row created at or before the segment's version
      may have entries there.

    Conservative: a vacuumed version is taken as the oldest version kept after it."""
    if not unindexed:
        return ()
    lowest = min(unindexed)
    oldest_row = _oldest_row_version(ds, unindexed) if ds.has_stable_row_ids else None
    highest: dict[int, int | None] = {}
    stale = []
    for d in ds.describe_indices():
        if str(d.name) != name:
            continue
        for s in d.segments:
            version = int(s.dataset_version_at_last_update)
            if version not in highest:
                highest[version] = _highest_fragment_id(ds, version)
            last = highest[version]
            moved = oldest_row is not None and oldest_row <= version
            if last is None or lowest <= last or moved:
                stale.append(str(s.uuid))
    return tuple(stale)


def _oldest_row_version(ds: lance.LanceDataset, fragment_ids: Sequence[int]) -> int | None:
    """The oldest version that created a live row of the fragments ``fragment_ids`` (0 when a
    row's is unknown), None when they hold no row."""
    fragments = [f for f in (ds.get_fragment(i) for i in fragment_ids) if f is not None]
    if not fragments:  # (no fragment would scan them all)
        return None
    created = ds.scanner(columns=[_CREATED_AT], fragments=fragments).to_table().column(_CREATED_AT)
    if len(created) == 0:
        return None
    if created.null_count:
        return 0
    return int(pc.min(created).as_py())


def _highest_fragment_id(ds: lance.LanceDataset, version: int) -> int | None:
    """The highest fragment id of ``version`` of ``ds`` (-1: none), or at least as high: that
    of the oldest version kept after it when it is gone (vacuumed); None when none is."""
    try:
        old = ds if int(ds.version) == version else ds.checkout_version(version)
    except (OSError, ValueError) as err:
        if not lance_errors.is_not_found(err):
            raise
        later = [int(v["version"]) for v in ds.versions() if int(v["version"]) > version]
        return _highest_fragment_id(ds, min(later)) if later else None
    return max((int(f.fragment_id) for f in old.get_fragments()), default=-1)


def segment_fragments(ds: lance.LanceDataset, name: str, uuids: Sequence[str]) -> list[int]:
    """The fragments the segments ``uuids`` of index ``name`` cover."""
    wanted = set(uuids)
    return sorted(
        {
            int(i)
            for d in ds.describe_indices()
            if str(d.name) == name
            for s in d.segments
            if str(s.uuid) in wanted
            for i in s.fragment_ids
        }
    )


def segment_uuids(ds: lance.LanceDataset, name: str) -> list[str]:
    return [str(s.uuid) for d in ds.describe_indices() if str(d.name) == name for s in d.segments]


# --- the kept parameters and model of an index built here ---------------------------------------


def save_model(
    uri: str, build: IndexBuild, uuids: Sequence[str], *, storage: Mapping[str, str]
) -> None:
    """Keep ``build``'s parameters and model for later optimizes. Never raises (the index has
    committed): without them, an optimize falls back to Lance's own."""
    base = _model_base(uri, build.spec.name)
    try:
        fs, path = staging.table_fs(base, storage)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        arrays = {}
        if build.model is not None:
            arrays["ivf"] = build.model.centroids
            if build.model.codebook is not None:
                arrays["pq"] = build.model.codebook
        for part, array in arrays.items():
            _write_array(fs, f"{path}.{part}.arrow", array)
        doc = {
            "spec": build.spec.to_json(),
            "segments": list(uuids),
            "model": sorted(arrays),
            "num_sub_vectors": None if build.model is None else build.model.num_sub_vectors,
        }
        with fs.open(f"{path}.json", "w") as out:
            out.write(json.dumps(doc, sort_keys=True))
    except (OSError, ValueError) as err:
        _log.warning(
            "index %s on %s: its parameters could not be kept (%s); optimizeIndices will "
            "use Lance's own optimize for it",
            build.spec.name,
            uri,
            err,
        )


def load_model(
    ds: lance.LanceDataset, uri: str, name: str, *, storage: Mapping[str, str]
) -> tuple[IndexSpec, VectorModel | None] | None:
    """The kept parameters and model of index ``name``, or None when there are none or they
    belong to another index of the same name (none of its segments is still in the index)."""
    base = _model_base(uri, name)
    try:
        fs, path = staging.table_fs(base, storage)
        if not fs.exists(f"{path}.json"):
            return None
        with fs.open(f"{path}.json", "r") as given:
            doc = json.loads(given.read())
        if not set(doc.get("segments") or ()) & set(segment_uuids(ds, name)):
            return None
        parts = set(doc.get("model") or ())
        model = None
        if "ivf" in parts:
            codebook = _read_array(fs, f"{path}.pq.arrow") if "pq" in parts else None
            model = VectorModel(
                _read_array(fs, f"{path}.ivf.arrow"), codebook, doc.get("num_sub_vectors")
            )
        return IndexSpec.of_json(doc["spec"]), model
    except (OSError, ValueError, KeyError) as err:
        _log.warning("index %s on %s: its kept parameters could not be read (%s)", name, uri, err)
        return None


def forget_model(uri: str, name: str, *, storage: Mapping[str, str]) -> None:
    """After the index is dropped: its kept parameters go too."""
    fs, path = staging.table_fs(_model_base(uri, name), storage)
    for suffix in (".json", ".ivf.arrow", ".pq.arrow"):
        if fs.exists(path + suffix):
            fs.rm(path + suffix)


def _model_base(uri: str, name: str) -> str:
    return f"{uri.rstrip('/')}/{MODELS_DIR}/{name}"


def _write_array(fs: Any, path: str, array: pa.Array) -> None:
    table = pa.table({"values": array})
    with fs.open(path, "wb") as out, pa.ipc.new_file(out, table.schema) as writer:
        writer.write_table(table)


def _read_array(fs: Any, path: str) -> pa.FixedSizeListArray:
    with fs.open(path, "rb") as given:
        table = pa.ipc.open_file(pa.BufferReader(given.read())).read_all()
    return table.column("values").combine_chunks()


def describe(ds: lance.LanceDataset) -> list[tuple[Any, ...]]:
    """Every index of ``ds`` by name: name, columns, type, indexed rows, unindexed rows,
    segments (what ``listIndices`` and ``DESCRIBE DETAIL`` show)."""
    rows = []
    for d in sorted(ds.describe_indices(), key=lambda d: str(d.name)):
        covered = coverage(ds, str(d.name))
        rows.append(
            (
                str(d.name),
                [str(c) for c in d.field_names],
                str(d.index_type),
                covered.indexed_rows,
                covered.unindexed_rows,
                covered.segments,
            )
        )
    return rows
