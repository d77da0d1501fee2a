"""Vector and full-text search of a Lance table, run inside Spark tasks.

The driver turns a request into a :class:`SearchPlan` (:func:`plan_search`): the version is
pinned, the vector column, the index's defaults and the returned columns are resolved, and
every bad argument is refused there, naming it. A plan is small and picklable; tasks open
the pinned version and let Lance search (its vector index when the column has one, an exact
flat search when not; its INVERTED index for text):

- :func:`search_batches`: one query (``LanceTable.search``, run by a one-row ``mapInArrow``);
- :func:`search_rows`: the same as Python rows, for the ``lance_search`` SQL function
  (:func:`search_udtf`, a Python UDTF whose ``analyze`` makes the plan);
- :func:`nearest_batches`: every row of a batch of query vectors at once (Lance's batch
  nearest-neighbour query), for the distributed nearest-neighbour join ``LanceTable.nearest``.

Results keep the table's columns, converted to the types Spark reads (vectors become arrays),
plus ``_distance`` (vector search, smaller is nearer) or ``_score`` (text search, larger is
better).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import FloatType, IntegerType, StructField, StructType, UserDefinedType
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult

from lance_spark.errors import ColumnNotFoundError, InvalidOptionError
from lance_spark.source import dataset
from lance_spark.source.datasource import normalise_uri
from lance_spark.source.options import TimeTravel
from lance_spark.source.types import (
    BLOB_HANDLING,
    arrow_read_schema,
    conform_read_batch,
    spark_schema_from_arrow,
    stored_udt,
)

DISTANCE_COLUMN = "_distance"
SCORE_COLUMN = "_score"
RANK_COLUMN = "_rank"
DEFAULT_K = 10
# Compressed vector indexes (PQ, SQ, RQ) rank candidates by approximate distances; re-ranking
# this many times k candidates by their exact distance brings recall@10 from ~0.4-0.8 to
# >= 0.9 on clustered embeddings at Lance's default nprobes (tests/spark/test_search.py), for
# k * factor extra row reads. refine_factor=1 asks for the index's own ranking.
DEFAULT_REFINE_FACTOR = 5
METRICS = ("l2", "cosine", "dot", "hamming")
# Query vectors sent to Lance in one batch nearest-neighbour query by a join task.
NEAREST_CHUNK_ROWS = 256
_QUERY_INDEX = "query_index"  # the column Lance's batch query adds
_UNCOMPRESSED_INDEXES = frozenset({"IVF_FLAT", "FLAT"})
_VECTOR_VALUE_TYPES = {
    "float": np.float32,
    "halffloat": np.float32,
    "double": np.float64,
    "uint8": np.uint8,
}


@dataclass(frozen=True)
class SearchPlan:
    """One search, resolved on the driver: what every task needs, nothing more.

    ``vector`` is set for a query known when the plan is made (``LanceTable.search``, a
    constant ``lance_search`` argument); a join's queries come from its rows.
    """

    uri: str
    version: int
    columns: tuple[str, ...]  # table columns returned, in the table's order
    k: int
    result_schema: pa.Schema  # columns + score column, in the Arrow types Spark reads
    column: str | None = None  # vector column (vector search)
    dimension: int = 0
    value_type: str = "float"
    vector: tuple[float, ...] | None = None
    metric: str | None = None
    nprobes: int | None = None
    refine_factor: int | None = None
    filter: str | None = None
    text: str | None = None
    text_columns: tuple[str, ...] = ()
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold secrets

    @property
    def score_column(self) -> str:
        return SCORE_COLUMN if self.text is not None else DISTANCE_COLUMN

    @property
    def spark_schema(self) -> StructType:
        """The result's Spark schema: the table's columns, then the score column."""
        return StructType(
            [
                *spark_schema_from_arrow(self.result_schema.remove(len(self.columns))).fields,
                StructField(self.score_column, FloatType(), True),
            ]
        )


def plan_search(
    uri: str,
    *,
    storage: Mapping[str, str],
    vector: Any = None,
    text: str | None = None,
    k: Any = DEFAULT_K,
    column: str | None = None,
    filter: str | None = None,
    nprobes: Any = None,
    refine_factor: Any = None,
    metric: str | None = None,
    columns: Sequence[str] | None = None,
    version: int | str | None = None,
    vector_from_rows: bool = False,
    branch: str | None = None,
) -> SearchPlan:
    """Check a search request against the table and pin what it reads.

    Exactly one of ``vector`` (a sequence of numbers), ``text`` or ``vector_from_rows`` (the
    join: one query per row, given later). Raises :class:`InvalidOptionError`,
    :class:`ColumnNotFoundError` or :class:`TableNotFoundError` naming the bad argument.
    """
    if text is not None and (vector is not None or vector_from_rows):
        raise InvalidOptionError("search takes a vector or text=..., not both")
    if text is None and vector is None and not vector_from_rows:
        raise InvalidOptionError(
            "search needs a query: a vector (search([0.1, ...])) or text (search(text='...'))"
        )
    ds = _open(uri, version, storage, branch)
    k = _positive_int("k", k)
    nprobes = None if nprobes is None else _positive_int("nprobes", nprobes)
    refine = None if refine_factor is None else _positive_int("refine_factor", refine_factor)
    returned = _returned_columns(ds, uri, columns)
    base = {
        "uri": uri,
        "version": int(ds.version),
        "columns": returned,
        "k": k,
        "filter": _checked_filter(ds, filter),
        "storage": dict(storage),
    }
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise InvalidOptionError(f"text must be a non-empty string, not {text!r}")
        if metric is not None or nprobes is not None or refine is not None:
            raise InvalidOptionError(
                "metric, nprobes and refine_factor apply to vector search, not to text search"
            )
        return SearchPlan(
            **base,
            result_schema=_result_schema(ds, returned, SCORE_COLUMN),
            text=text,
            text_columns=_text_columns(ds, uri, column),
        )
    name, dimension, value_type = _vector_column(ds, uri, column)
    index_type, index_metric = _vector_index(ds, name)
    if metric is not None:
        metric = str(metric).strip().lower()
        if metric not in METRICS:
            raise InvalidOptionError(
                f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}"
            )
    compressed = index_type is not None and index_type not in _UNCOMPRESSED_INDEXES
    # Only when the index's own metric ranks: another metric is an exact flat search.
    if refine is None and compressed and metric in (None, index_metric):
        refine = DEFAULT_REFINE_FACTOR
    plan = SearchPlan(
        **base,
        result_schema=_result_schema(ds, returned, DISTANCE_COLUMN),
        column=name,
        dimension=dimension,
        value_type=value_type,
        metric=metric,
        nprobes=nprobes,
        refine_factor=refine,
    )
    if vector is not None:
        plan = replace(plan, vector=tuple(float(x) for x in query_vector(plan, vector)))
    return plan


def query_vector(plan: SearchPlan, vector: Any) -> np.ndarray:
    """``vector`` as the numpy array Lance takes for ``plan``'s column, or
    :class:`InvalidOptionError` naming the column and the dimensions."""
    if isinstance(vector, str | bytes) or vector is None:
        raise InvalidOptionError(
            f"the query vector must be a sequence of numbers, not {type(vector).__name__}"
        )
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidOptionError(
            "the query vector must be a sequence of numbers (list, tuple, numpy array)"
        ) from None
    if array.ndim != 1 or array.shape[0] != plan.dimension:
        raise InvalidOptionError(
            f"the query vector has {array.size} values; column {plan.column!r} holds "
            f"vectors of {plan.dimension}"
        )
    if not np.isfinite(array).all():
        raise InvalidOptionError("the query vector holds NaN or infinite values")
    return array.astype(_VECTOR_VALUE_TYPES[plan.value_type])


# --- inside tasks ---------------------------------------------------------------------------


def open_pinned(plan: SearchPlan) -> lance.LanceDataset:
    """The version ``plan`` searches (open it once per task)."""
    return dataset.open_version(plan.uri, plan.version, storage=plan.storage)


def search_table(
    plan: SearchPlan,
    queries: np.ndarray | None = None,
    *,
    ds: lance.LanceDataset | None = None,
) -> pa.Table:
    """Run ``plan`` (its own query, or ``queries``: a 2-D array, one query per row) on the
    pinned version (``ds`` when the caller has it open). A batch result starts with Lance's
    ``query_index`` column."""
    ds = ds if ds is not None else open_pinned(plan)
    common: dict[str, Any] = {
        "filter": plan.filter,
        "prefilter": plan.filter is not None,
        "disable_scoring_autoprojection": True,
        "blob_handling": BLOB_HANDLING,  # blob columns as their bytes
    }
    if plan.text is not None:
        query: dict[str, Any] = {"query": plan.text}
        if plan.text_columns:
            query["columns"] = list(plan.text_columns)
        return ds.to_table(
            columns=[*plan.columns, SCORE_COLUMN],
            full_text_query=query,
            limit=plan.k,
            **common,
        )
    q = np.asarray(plan.vector) if queries is None else list(queries)
    nearest: dict[str, Any] = {"column": plan.column, "q": q, "k": plan.k}
    if plan.metric is not None:
        nearest["metric"] = plan.metric
    if plan.nprobes is not None:
        nearest["nprobes"] = plan.nprobes
    if plan.refine_factor is not None:
        nearest["refine_factor"] = plan.refine_factor
    columns = [*plan.columns, DISTANCE_COLUMN]
    if queries is not None:
        columns.insert(0, _QUERY_INDEX)
    return ds.to_table(columns=columns, nearest=nearest, **common)


def search_batches(plan: SearchPlan) -> Iterator[pa.RecordBatch]:
    """The results of ``plan``'s own query, nearest (or best) first, as Spark reads them."""
    result = search_table(plan).sort_by(_ranking(plan))
    for batch in result.to_batches():
        yield conform_read_batch(batch, plan.result_schema)


def search_rows(plan: SearchPlan) -> Iterator[tuple[Any, ...]]:
    """The same as :func:`search_batches`, one tuple per row (for the SQL function)."""
    # A user-defined type's values as the UDT's objects (a row gives Spark objects, not the
    # structs they are stored as).
    udts = {
        i: f.dataType
        for i, f in enumerate(plan.spark_schema.fields)
        if isinstance(f.dataType, UserDefinedType)
    }
    for batch in search_batches(plan):
        columns = [c.to_pylist() for c in batch.columns]
        for i, udt in udts.items():
            columns[i] = [
                None if v is None else udt.deserialize(tuple(v.values())) for v in columns[i]
            ]
        yield from zip(*columns, strict=True)


def nearest_batches(
    plan: SearchPlan, query_column: str, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """For every row of ``batches`` (query rows), its ``plan.k`` nearest rows of the table:
    the query row's columns, the table's, ``_distance`` and ``_rank`` (1 = nearest). A row
    whose query vector is null has no neighbours (as a null join key matches nothing)."""
    target = plan.result_schema
    ds: lance.LanceDataset | None = None  # opened once per task, at the first query
    for batch in batches:
        for start in range(0, batch.num_rows, NEAREST_CHUNK_ROWS):
            chunk = batch.slice(start, NEAREST_CHUNK_ROWS)
            rows, vectors = _query_vectors(plan, query_column, chunk)
            if rows.size == 0:
                continue
            ds = ds if ds is not None else open_pinned(plan)
            found = search_table(plan, vectors, ds=ds)
            if found.num_rows == 0:
                continue
            found = found.sort_by([(_QUERY_INDEX, "ascending"), (DISTANCE_COLUMN, "ascending")])
            query_index = found.column(_QUERY_INDEX).to_numpy()
            take = pa.array(rows[query_index])
            neighbours = conform_read_batch(
                pa.RecordBatch.from_arrays(
                    [found.column(name).combine_chunks() for name in target.names],
                    names=target.names,
                ),
                target,
            )
            arrays = [
                *chunk.take(take).columns,
                *neighbours.columns,
                pa.array(_ranks(query_index), pa.int32()),
            ]
            names = [*chunk.schema.names, *target.names, RANK_COLUMN]
            yield pa.RecordBatch.from_arrays(arrays, names=names)


def nearest_schema(plan: SearchPlan, queries: StructType) -> StructType:
    """The join's Spark schema: query columns, table columns, ``_distance``, ``_rank``."""
    return StructType(
        [
            *queries.fields,
            *plan.spark_schema.fields,
            StructField(RANK_COLUMN, IntegerType(), False),
        ]
    )


# --- the SQL function -----------------------------------------------------------------------


@dataclass
class SearchAnalysis(AnalyzeResult):
    """What ``analyze`` hands to ``eval``: the plan, so that every row of the statement
    searches the version whose schema the statement was analysed with."""

    plan: SearchPlan | None = None


def search_udtf(storage: Mapping[str, str]) -> type:
    """The ``lance_search`` table function's class for a session with these storage options.

    ``lance_search(table, vector, k, column, filter, nprobes, refine_factor, text, version,
    metric)``: ``table`` is a Lance path (the companion's ``LanceSearchFunction``, which serves
    this class as the SQL function, puts a catalog table's location in place of its name);
    arguments can be given by name (``k => 5``).
    """
    session_storage = dict(storage)

    class LanceSearch:
        @staticmethod
        def analyze(
            table: AnalyzeArgument,
            vector: AnalyzeArgument | None = None,
            k: AnalyzeArgument | None = None,
            column: AnalyzeArgument | None = None,
            filter: AnalyzeArgument | None = None,
            nprobes: AnalyzeArgument | None = None,
            refine_factor: AnalyzeArgument | None = None,
            text: AnalyzeArgument | None = None,
            version: AnalyzeArgument | None = None,
            metric: AnalyzeArgument | None = None,
        ) -> AnalyzeResult:
            uri = _constant("table", table)
            if not isinstance(uri, str) or not uri:
                raise InvalidOptionError(
                    f"lance_search: table must be a Lance table's path or name, not {uri!r}"
                )
            query = _constant("vector", vector)
            if vector is not None and query is None:
                raise InvalidOptionError(
                    "lance_search: the query vector must be a constant (an array literal); "
                    "to search with a column of vectors use LanceTable.nearest"
                )
            plan = plan_search(
                normalise_uri(uri),
                storage=session_storage,
                vector=query,
                text=_constant("text", text),
                k=_constant("k", k, DEFAULT_K),
                column=_constant("column", column),
                filter=_constant("filter", filter),
                nprobes=_constant("nprobes", nprobes),
                refine_factor=_constant("refine_factor", refine_factor),
                metric=_constant("metric", metric),
                version=_constant("version", version),
            )
            return SearchAnalysis(schema=plan.spark_schema, plan=plan)

        def __init__(self, analyze_result: SearchAnalysis | None = None) -> None:
            if analyze_result is None or analyze_result.plan is None:
                raise InvalidOptionError("lance_search runs only as a table-valued function")
            self._plan = analyze_result.plan

        def eval(self, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, ...]]:
            yield from search_rows(self._plan)

    LanceSearch.__name__ = LanceSearch.__qualname__ = "LanceSearch"
    return LanceSearch


# --- helpers --------------------------------------------------------------------------------


def _open(
    uri: str, version: int | str | None, storage: Mapping[str, str], branch: str | None
) -> lance.LanceDataset:
    if version is None:
        travel = TimeTravel()
    elif isinstance(version, bool):
        raise InvalidOptionError(f"version must be a version number or a tag, not {version!r}")
    elif isinstance(version, int) or (isinstance(version, str) and version.strip().isdigit()):
        travel = TimeTravel(version=int(version))
    elif isinstance(version, str):
        travel = TimeTravel(tag=version)
    else:
        raise InvalidOptionError(f"version must be a version number or a tag, not {version!r}")
    return dataset.open_resolved(uri, travel, storage=storage, branch=branch)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            as_int = None
        if as_int is None or as_int != value:
            raise InvalidOptionError(f"{name} must be a positive integer, not {value!r}")
        value = as_int
    if int(value) < 1:
        raise InvalidOptionError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


def _returned_columns(
    ds: lance.LanceDataset, uri: str, columns: Sequence[str] | None
) -> tuple[str, ...]:
    names = list(ds.schema.names)
    if columns is None:
        return tuple(names)
    if isinstance(columns, str):
        columns = [columns]
    missing = [c for c in columns if c not in names]
    if missing:
        raise _not_found(ds, uri, missing[0])
    wanted = set(columns)
    return tuple(n for n in names if n in wanted)


def _result_schema(ds: lance.LanceDataset, columns: Sequence[str], score: str) -> pa.Schema:
    fields = [ds.schema.field(name) for name in columns]
    read = arrow_read_schema(pa.schema(fields))
    # An MLlib vector column keeps its metadata: spark_schema reads it back as the UDT.
    read = pa.schema(
        [
            r.with_metadata(f.metadata) if stored_udt(f) else r
            for r, f in zip(read, fields, strict=True)
        ]
    )
    return read.append(pa.field(score, pa.float32()))


def _checked_filter(ds: lance.LanceDataset, filter: str | None) -> str | None:
    if filter is None:
        return None
    if not isinstance(filter, str) or not filter.strip():
        raise InvalidOptionError(f"filter must be a SQL condition (a string), not {filter!r}")
    try:
        ds.scanner(filter=filter, columns=[], with_row_id=True, limit=1).explain_plan()
    except (ValueError, OSError) as err:  # pylance reports a bad condition as ValueError
        raise InvalidOptionError(
            f"filter {filter!r} is not a condition Lance can run: {err}"
        ) from None
    return filter


def _vector_columns(ds: lance.LanceDataset) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    for f in ds.schema:
        t = f.type
        if pa.types.is_fixed_size_list(t) and str(t.value_type) in _VECTOR_VALUE_TYPES:
            found[f.name] = (int(t.list_size), str(t.value_type))
    return found


def _vector_column(ds: lance.LanceDataset, uri: str, column: str | None) -> tuple[str, int, str]:
    vectors = _vector_columns(ds)
    if column is None:
        if len(vectors) != 1:
            raise InvalidOptionError(
                f"the Lance table at {uri!r} has "
                + (
                    "no vector (fixed_size_list) column to search"
                    if not vectors
                    else f"several vector columns ({', '.join(vectors)}); name one with column="
                )
            )
        column = next(iter(vectors))
    if column not in ds.schema.names:
        raise _not_found(ds, uri, column)
    if column not in vectors:
        raise InvalidOptionError(
            f"column {column!r} is {ds.schema.field(column).type}, not a vector of numbers; "
            f"vector columns: {', '.join(vectors) or 'none'} (write vectors with option "
            f"'{column}.arrow.fixed-size-list.size')"
        )
    dimension, value_type = vectors[column]
    return column, dimension, value_type


def _not_found(ds: lance.LanceDataset, uri: str, column: str) -> ColumnNotFoundError:
    return ColumnNotFoundError(
        f"column {column!r} does not exist in the Lance table at {uri!r}; "
        f"columns: {', '.join(ds.schema.names)}"
    )


def _indexes_on(ds: lance.LanceDataset, column: str) -> list[Any]:
    return [d for d in ds.describe_indices() if [str(n) for n in d.field_names] == [column]]


def _vector_index(ds: lance.LanceDataset, column: str) -> tuple[str | None, str | None]:
    for index in _indexes_on(ds, column):
        kind = str(index.index_type).upper()
        if kind.startswith("IVF") or "HNSW" in kind or kind == "FLAT":
            details = index.details if isinstance(index.details, dict) else {}
            metric = details.get("metric_type")
            return kind, str(metric).lower() if metric else None
    return None, None


def _text_columns(ds: lance.LanceDataset, uri: str, column: str | None) -> tuple[str, ...]:
    indexed = sorted(
        str(d.field_names[0])
        for d in ds.describe_indices()
        if str(d.index_type).upper() == "INVERTED" and len(d.field_names) == 1
    )
    if column is None:
        if not indexed:
            raise InvalidOptionError(
                f"text search needs an INVERTED index and the Lance table at {uri!r} has none; "
                "create one with createIndex(column, 'INVERTED')"
            )
        return ()
    if column not in ds.schema.names:
        raise _not_found(ds, uri, column)
    if column not in indexed:
        raise InvalidOptionError(
            f"text search on column {column!r} needs an INVERTED index on it; create one with "
            f"createIndex({column!r}, 'INVERTED') (columns with one: "
            f"{', '.join(indexed) or 'none'})"
        )
    return (column,)


def _ranking(plan: SearchPlan) -> list[tuple[str, str]]:
    if plan.text is not None:
        return [(SCORE_COLUMN, "descending")]
    return [(DISTANCE_COLUMN, "ascending")]


def _ranks(query_index: np.ndarray) -> np.ndarray:
    """1, 2, ... within each run of equal values of a sorted ``query_index``."""
    positions = np.arange(query_index.size)
    starts = np.r_[0, np.flatnonzero(np.diff(query_index)) + 1]
    lengths = np.diff(np.r_[starts, query_index.size])
    ranks: np.ndarray = (positions - np.repeat(starts, lengths) + 1).astype(np.int32)
    return ranks


def _query_vectors(
    plan: SearchPlan, query_column: str, chunk: pa.RecordBatch
) -> tuple[np.ndarray, np.ndarray]:
    """The row numbers of ``chunk`` with a query vector, and those vectors (2-D)."""
    values = chunk.column(chunk.schema.get_field_index(query_column))
    valid = np.flatnonzero(values.is_valid().to_numpy(zero_copy_only=False))
    dtype = _VECTOR_VALUE_TYPES[plan.value_type]
    if valid.size == 0:
        return valid, np.empty((0, plan.dimension), dtype)
    present = values.take(pa.array(valid))
    lengths = pc.list_value_length(present).to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(lengths != plan.dimension)
    if wrong.size:
        raise InvalidOptionError(
            f"query column {query_column!r} holds a vector of {int(lengths[wrong[0]])} values; "
            f"column {plan.column!r} of the Lance table holds vectors of {plan.dimension}"
        )
    flat = pc.list_flatten(present)
    if flat.null_count:
        raise InvalidOptionError(f"query column {query_column!r} holds a vector with a null value")
    matrix = flat.to_numpy(zero_copy_only=False).astype(dtype).reshape(-1, plan.dimension)
    return valid, matrix


def _constant(name: str, argument: AnalyzeArgument | None, default: Any = None) -> Any:
    if argument is None:
        return default
    if not argument.isConstantExpression:
        raise InvalidOptionError(f"lance_search: argument {name} must be a constant")
    value = argument.value
    return default if value is None else value
