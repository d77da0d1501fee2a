"""``LanceTable``: a Delta-Lake-like table API (history, restore, tags, maintenance, indexes).

Every method opens the Lance table anew: a ``LanceTable`` holds only the Spark session, the
table's URI and its storage options, so it never pins an old version.

Example::

    from lance_spark import LanceTable
    t = LanceTable.forPath(spark, "/data/pets.lance")
    t.history().show()
    t.restoreToVersion(1)
    t.optimize().executeCompaction()
    t.vacuum(168)
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import lance
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lance_spark import _spark
from lance_spark.errors import (
    ColumnNotFoundError,
    InvalidOptionError,
    TableNotFoundError,
    VersionNotFoundError,
)
from lance_spark.source import commit as _commit
from lance_spark.source import staging as _files
from lance_spark.source.dataset import (
    open_latest,
    open_version,
    resolve_version,
    version_timestamps,
)
from lance_spark.source.datasource import FORMAT_NAME, _normalise_uri
from lance_spark.source.options import TimeTravel, parse_timestamp
from lance_spark.source.session import lance_reader, session_storage
from lance_spark.table import changes as _dml
from lance_spark.table.merge import LanceMergeBuilder

__all__ = ["LanceOptimizeBuilder", "LanceTable"]

SCALAR_INDEX_TYPES = ("BTREE", "BITMAP", "LABEL_LIST", "INVERTED", "ZONEMAP", "NGRAM")
VECTOR_INDEX_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_PQ", "IVF_HNSW_SQ")

# Lance operation classes -> Delta-like operation names, for versions written by other Lance
# writers (no lance_spark.* transaction properties). Anything else: its name, upper-cased.
_OPERATION_NAMES = {
    "Append": "WRITE",
    "Overwrite": "WRITE",
    "Delete": "DELETE",
    "Update": "UPDATE",
    "Merge": "ADD COLUMNS",
    "Restore": "RESTORE",
    "Rewrite": "OPTIMIZE",
    "CreateIndex": "CREATE INDEX",
    "Project": "CHANGE COLUMNS",
    "UpdateConfig": "SET TBLPROPERTIES",
    "DataReplacement": "REPLACE DATA",
}

_STR_MAP = MapType(StringType(), StringType())
HISTORY_SCHEMA = StructType(
    [
        StructField("version", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("operation", StringType(), True),
        StructField("operationParameters", _STR_MAP, True),
        StructField("operationMetrics", _STR_MAP, True),
        StructField("userMetadata", StringType(), True),
        StructField("appId", StringType(), True),
    ]
)
TAGS_SCHEMA = StructType(
    [
        StructField("tag", StringType(), False),
        StructField("version", LongType(), False),
        StructField("createdAt", TimestampType(), True),
    ]
)
INDICES_SCHEMA = StructType(
    [
        StructField("name", StringType(), False),
        StructField("columns", ArrayType(StringType(), False), False),
        StructField("type", StringType(), True),
    ]
)
_RESTORE_METRICS = (
    "table_size_after_restore",
    "num_of_files_after_restore",
    "num_removed_files",
    "num_restored_files",
    "removed_files_size",
    "restored_files_size",
)
_COMPACTION_METRICS = ("fragments_removed", "fragments_added", "files_removed", "files_added")
_CLEANUP_METRICS = (
    "bytes_removed",
    "old_versions",
    "data_files_removed",
    "transaction_files_removed",
    "index_files_removed",
    "deletion_files_removed",
)

_VACUUM_SCHEMA = StructType(
    [StructField(k, LongType(), False) for k in _CLEANUP_METRICS]
    + [
        StructField("dry_run", BooleanType(), False),
        StructField("unreferenced_files_removed", LongType(), False),
        StructField("staging_markers_removed", LongType(), False),
        StructField("unreferenced_files", ArrayType(StringType(), False), False),
    ]
)
_FILE_KIND_METRICS = {"data": "data_files_removed", "deletion": "deletion_files_removed"}


def _count_file(metrics: dict[str, Any], kind: str, size: int, sign: int) -> None:
    metrics["bytes_removed"] += sign * size
    if kind in _FILE_KIND_METRICS:
        metrics[_FILE_KIND_METRICS[kind]] += sign


class LanceTable:
    """A Lance table addressed by path (or catalog name), with Delta-Lake-like methods.

    Example::

        t = LanceTable.forPath(spark, "/data/pets.lance")
        t.toDF().show()
    """

    def __init__(
        self, spark: SparkSession, uri: str, storage_options: Mapping[str, str] | None = None
    ) -> None:
        self._spark = spark
        self._uri = uri
        self._storage: dict[str, str] = {**session_storage(spark), **(storage_options or {})}
        self._alias: str | None = None

    def __repr__(self) -> str:  # never the storage options: they may hold secrets
        return f"LanceTable({self._uri!r})"

    @property
    def uri(self) -> str:
        """The table's location, as given (catalog locations without ``file:``)."""
        return self._uri

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def forPath(
        cls,
        spark: SparkSession,
        path: str,
        storage_options: Mapping[str, str] | None = None,
    ) -> LanceTable:
        """The Lance table at ``path``; :class:`TableNotFoundError` if there is none.

        Example::

            t = LanceTable.forPath(spark, "s3://bucket/pets.lance",
                                   {"aws_region": "eu-west-1"})
        """
        table = cls(spark, path, storage_options)
        table._open()
        return table

    @classmethod
    def forName(cls, spark: SparkSession, name: str) -> LanceTable:
        """The catalog table ``name`` (created ``USING lance``).

        Example::

            spark.sql("CREATE TABLE pets USING lance LOCATION '/data/pets.lance'")
            t = LanceTable.forName(spark, "pets")
        """
        from pyspark.errors import AnalysisException

        from lance_spark.source.reader import uri_from_schema

        try:
            schema = spark.table(name).schema
        except AnalysisException as err:  # TABLE_OR_VIEW_NOT_FOUND, a malformed name
            raise TableNotFoundError(
                f"no catalog table {name!r}: {str(err).splitlines()[0]}"
            ) from None
        # Spark keeps no location for Python data source tables: the connector stores the
        # table's path in the catalog schema's field metadata (see _sql / _reader).
        location = uri_from_schema(schema)
        if not location:
            rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
            info = {str(r[0]).strip(): str(r[1]).strip() for r in rows if r[0]}
            provider = info.get("Provider") or "unknown"
            raise TableNotFoundError(
                f"catalog table {name!r} is not a Lance table (provider {provider!r}); "
                f"LanceTable.forName needs a table created USING {FORMAT_NAME}"
            )
        return cls.forPath(spark, _normalise_uri(location))

    @classmethod
    def isLanceTable(
        cls,
        spark: SparkSession,
        path: str,
        storage_options: Mapping[str, str] | None = None,
    ) -> bool:
        """True when a Lance table (at least one committed version) exists at ``path``.

        Example::

            if not LanceTable.isLanceTable(spark, uri):
                df.write.format("lance").mode("append").save(uri)
        """
        try:
            cls(spark, path, storage_options)._open()
        except (TableNotFoundError, OSError):
            return False
        return True

    # --- reading ------------------------------------------------------------------------------

    def toDF(
        self,
        *,
        version: int | None = None,
        timestamp: str | datetime | None = None,
        tag: str | None = None,
    ) -> DataFrame:
        """The table as a DataFrame: the latest version, or the one chosen (at most one).

        Example::

            t.toDF().count()
            t.toDF(version=1)
            t.toDF(timestamp="2030-01-01T00:00:00Z")
            t.toDF(tag="train-v1")
        """
        reader = lance_reader(self._spark, self._storage)
        if version is not None:
            reader = reader.option("version", str(version))
        if timestamp is not None:
            stamp = timestamp if isinstance(timestamp, str) else _utc(timestamp).isoformat()
            reader = reader.option("timestampAsOf", stamp)
        if tag is not None:
            reader = reader.option("tag", tag)
        return reader.load(self._uri)

    def countRows(self, filter: str | None = None) -> int:
        """Number of rows (from the metadata when there is no filter; ``filter`` is Lance SQL).

        Example::

            t.countRows()
            t.countRows("label = 'cat'")
        """
        return int(self._open().count_rows(filter))

    # --- row-level changes ----------------------------------------------------------------------

    def delete(self, condition: str | Column | None = None) -> DataFrame:
        """Delete the rows matching ``condition`` (a SQL string or a Column; None: all rows).

        Runs as a Spark job (each touched fragment's deletion file is written by one task) and
        commits one new version, or none when no row matches. Returns ``num_affected_rows``.

        Example::

            t.delete("label = 'cat'")
            t.delete(F.col("age") > 10)
        """
        deleted = _dml.delete_where(
            self._spark,
            uri=self._uri,
            storage=self._storage,
            condition=condition,
            app_id=_spark.app_id(self._spark),
        )
        return self._one_row({"num_affected_rows": deleted}, ("num_affected_rows",))

    def update(
        self,
        condition: str | Column | None = None,
        set: Mapping[str, str | Column] | None = None,
    ) -> DataFrame:
        """Set columns of the rows matching ``condition`` (None: every row).

        ``set`` maps a column to a SQL expression string or a Column, evaluated on the old
        row; other columns keep their values. One Spark job, one new version (none when no
        row matches). Returns ``num_affected_rows``.

        Example::

            t.update(condition="label = 'Blob'", set={"label": "'Bob'", "age": "age + 2"})
        """
        if not set:
            raise InvalidOptionError("update() needs set={column: expression, ...}")
        updated = _dml.update_where(
            self._spark,
            uri=self._uri,
            storage=self._storage,
            condition=condition,
            assignments=set,
            app_id=_spark.app_id(self._spark),
        )
        return self._one_row({"num_affected_rows": updated}, ("num_affected_rows",))

    def alias(self, name: str) -> LanceTable:
        """The same table, named ``name`` in MERGE conditions and expressions.

        Example::

            t.alias("t").merge(src.alias("s"), "s.id = t.id")
        """
        aliased = copy.copy(self)  # not __init__: it reads the session conf again (~20 ms)
        aliased._alias = name
        return aliased

    def merge(self, source: DataFrame, condition: str | Column) -> LanceMergeBuilder:
        """Start a MERGE of ``source`` into this table on ``condition``; add clauses with
        ``whenMatchedUpdate`` / ``whenMatchedUpdateAll`` / ``whenMatchedDelete`` /
        ``whenNotMatchedInsert`` / ``whenNotMatchedInsertAll`` /
        ``whenNotMatchedBySourceUpdate`` / ``whenNotMatchedBySourceDelete`` and run it with
        ``execute()``: one Spark job, one new version, Delta's semantics.

        Example::

            (t.alias("t").merge(updates.alias("s"), "s.id = t.id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute())
        """
        return LanceMergeBuilder(
            spark=self._spark,
            uri=self._uri,
            storage=self._storage,
            source=source,
            condition=condition,
            target_alias=self._alias,
        )

    # --- history and restore ------------------------------------------------------------------

    def history(self, limit: int | None = None) -> DataFrame:
        """One row per version, newest first (``limit``: only the newest ``limit`` versions).

        Columns: version, timestamp, operation, operationParameters, operationMetrics,
        userMetadata, appId. Versions committed by other Lance writers get an operation named
        after their Lance operation, empty maps and null userMetadata/appId.

        Example::

            t.history(5).select("version", "operation", "userMetadata").show()
        """
        if limit is not None and limit < 1:
            raise InvalidOptionError(f"history limit={limit} must be at least 1")
        ds = self._open()
        stamps = sorted(version_timestamps(ds), key=lambda p: -p[0])
        if limit is not None:
            stamps = stamps[:limit]
        rows = [(v, stamp, *_describe_version(ds, v)) for v, stamp in stamps]
        return self._spark.createDataFrame(rows, HISTORY_SCHEMA)

    def restoreToVersion(self, version: int) -> DataFrame:
        """Commit a new version whose content is ``version``'s; returns restore metrics.

        Example::

            t.restoreToVersion(1).show()
        """
        ds = self._open()
        target = resolve_version(ds, TimeTravel(version=int(version)), uri=self._uri)
        return self._restore(ds, target, {"version": str(target)})

    def restoreToTimestamp(self, timestamp: str | datetime) -> DataFrame:
        """Restore the latest version committed at or before ``timestamp`` (no zone: UTC).

        Example::

            t.restoreToTimestamp("2030-01-01T00:00:00Z")
        """
        when = parse_timestamp(timestamp) if isinstance(timestamp, str) else _utc(timestamp)
        ds = self._open()
        target = resolve_version(ds, TimeTravel(timestamp=when), uri=self._uri)
        return self._restore(ds, target, {"timestamp": when.isoformat(), "version": str(target)})

    def _restore(
        self, ds: lance.LanceDataset, target: int, parameters: dict[str, str]
    ) -> DataFrame:
        old = open_version(self._uri, target, storage=self._storage)
        current_files = _data_files(ds)
        target_files = _data_files(old)
        removed = current_files.keys() - target_files.keys()
        restored = target_files.keys() - current_files.keys()
        metrics = {
            "table_size_after_restore": sum(target_files.values()),
            "num_of_files_after_restore": len(target_files),
            "num_removed_files": len(removed),
            "num_restored_files": len(restored),
            "removed_files_size": sum(current_files[k] for k in removed),
            "restored_files_size": sum(target_files[k] for k in restored),
        }
        _commit.commit(
            self._uri,
            lance.LanceOperation.Restore(target),
            read_version=int(ds.version),
            info=_commit.CommitInfo(
                operation="RESTORE",
                parameters=parameters,
                metrics=metrics,
                app_id=_spark.app_id(self._spark),
            ),
            storage=self._storage,
        )
        return self._one_row(metrics, _RESTORE_METRICS)

    # --- tags ---------------------------------------------------------------------------------

    def createTag(self, name: str, version: int | None = None) -> None:
        """Tag ``version`` (None: the current one) as ``name``; read it with ``toDF(tag=...)``.

        Example::

            t.createTag("train-v1")
            t.createTag("first", 1)
        """
        ds = self._open()
        target = resolve_version(
            ds, TimeTravel(version=None if version is None else int(version)), uri=self._uri
        )
        tags = ds.tags.list()
        if name in tags:
            raise InvalidOptionError(
                f"tag {name!r} already exists in the Lance table at {self._uri!r} (version "
                f"{tags[name]['version']}); delete it first to move it"
            )
        ds.tags.create(name, target)

    def deleteTag(self, name: str) -> None:
        """Delete tag ``name`` (the version itself stays until vacuumed).

        Example::

            t.deleteTag("train-v1")
        """
        ds = self._open()
        tags = ds.tags.list()
        if name not in tags:
            known = ", ".join(sorted(tags)) or "none"
            raise VersionNotFoundError(
                f"tag {name!r} does not exist in the Lance table at {self._uri!r}; tags: {known}"
            )
        ds.tags.delete(name)

    def listTags(self) -> DataFrame:
        """Tags as a DataFrame (tag, version, createdAt), by name.

        Example::

            t.listTags().show()
        """
        tags = self._open().tags.list()
        rows = [
            (name, int(info["version"]), _utc_or_none(info.get("created_at")))
            for name, info in sorted(tags.items())
        ]
        return self._spark.createDataFrame(rows, TAGS_SCHEMA)

    # --- maintenance --------------------------------------------------------------------------

    def optimize(self) -> LanceOptimizeBuilder:
        """Start an optimize; ``executeCompaction()`` merges small fragments.

        Example::

            t.optimize().executeCompaction(target_rows_per_fragment=1_000_000).show()
        """
        return LanceOptimizeBuilder(self)

    def vacuum(self, retentionHours: float = 168, *, dryRun: bool = False) -> DataFrame:
        """Delete the files only versions older than ``retentionHours`` use, and what jobs
        that stopped (a killed driver, a killed task) left behind: data and deletion files no
        version references, and the connector's staging markers, when older than that too.

        The current version and tagged versions are always kept, and so is every file
        younger than the retention: a running write may still commit it (as in Delta, a
        retention shorter than the longest write is unsafe). ``dryRun`` deletes nothing and
        reports what would go. Returns one row of metrics: Lance's cleanup counts
        (bytes_removed, old_versions, data_files_removed, ... which include the unreferenced
        files), dry_run, unreferenced_files_removed, staging_markers_removed, and
        unreferenced_files (their paths, relative to the table).

        Example::

            t.vacuum(0, dryRun=True).show()
            t.vacuum(24 * 7)
        """
        if isinstance(retentionHours, bool) or not isinstance(retentionHours, int | float):
            raise InvalidOptionError(
                f"vacuum retentionHours={retentionHours!r} must be a number of hours"
            )
        if retentionHours < 0:
            raise InvalidOptionError(f"vacuum retentionHours={retentionHours} must be at least 0")
        ds = self._open()
        older_than = timedelta(hours=retentionHours)
        orphans = _files.find_orphans(ds, self._uri, older_than=older_than, storage=self._storage)
        metrics: dict[str, Any] = dict.fromkeys(_CLEANUP_METRICS, 0)
        if dryRun:
            explained = ds.explain_cleanup_old_versions(
                older_than=older_than,
                error_if_tagged_old_versions=False,
                include_files=True,
                max_files=_files.MAX_EXPLAINED_FILES,
            )
            metrics.update({k: int(getattr(explained.stats, k)) for k in _CLEANUP_METRICS})
            # Lance's own rule removes unreferenced files older than 7 days: counted once.
            swept = {f.path for f in orphans.files}
            for candidate in explained.candidate_files:
                if candidate.unverified and _files.relative_path(candidate) in swept:
                    _count_file(metrics, candidate.kind, int(candidate.size_bytes), -1)
        else:
            orphans.remove(self._uri, storage=self._storage)
            stats = ds.cleanup_old_versions(
                older_than=older_than, error_if_tagged_old_versions=False
            )
            metrics.update({k: int(getattr(stats, k)) for k in _CLEANUP_METRICS})
        for orphan in orphans.files:
            _count_file(metrics, orphan.kind, orphan.size, 1)
        row = (
            *metrics.values(),
            bool(dryRun),
            len(orphans.files),
            len(orphans.markers),
            [f.path for f in orphans.files],
        )
        return self._spark.createDataFrame([row], _VACUUM_SCHEMA)

    # --- indexes ------------------------------------------------------------------------------

    def createIndex(
        self, column: str, index_type: str, *, name: str | None = None, **params: Any
    ) -> None:
        """Build an index on ``column`` (a new version).

        Scalar types (BTREE, BITMAP, LABEL_LIST, INVERTED, ZONEMAP, NGRAM) speed up pushed-down
        filters; vector types (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_HNSW_PQ, IVF_HNSW_SQ) need a
        vector (fixed_size_list) column and take Lance's parameters (``num_partitions``,
        ``num_sub_vectors``, ``metric``...).

        Example::

            t.createIndex("id", "BTREE")
            t.createIndex("embedding", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
        """
        kind = str(index_type).strip().upper()
        if kind not in SCALAR_INDEX_TYPES + VECTOR_INDEX_TYPES:
            raise InvalidOptionError(
                f"unknown index type {index_type!r}; valid index types: "
                f"{', '.join(SCALAR_INDEX_TYPES + VECTOR_INDEX_TYPES)}"
            )
        ds = self._open()
        if column not in ds.schema.names:
            raise ColumnNotFoundError(
                f"column {column!r} does not exist in the Lance table at {self._uri!r}; "
                f"columns: {', '.join(ds.schema.names)}"
            )
        if kind in SCALAR_INDEX_TYPES:
            ds.create_scalar_index(column, cast(Any, kind), name=name, **params)
            return
        import pyarrow as pa

        col_type = ds.schema.field(column).type
        if not pa.types.is_fixed_size_list(col_type):
            raise InvalidOptionError(
                f"column {column!r} is {col_type}, not a vector (fixed_size_list), which a "
                f"{kind} index needs (write vectors with option "
                f"'{column}.arrow.fixed-size-list.size')"
            )
        ds.create_index(column, kind, name=name, **params)

    def listIndices(self) -> DataFrame:
        """Indexes as a DataFrame (name, columns, type), by name.

        Example::

            t.listIndices().show()
        """
        rows = [
            (d.name, [str(c) for c in d.field_names], str(d.index_type))
            for d in sorted(self._open().describe_indices(), key=lambda d: str(d.name))
        ]
        return self._spark.createDataFrame(rows, INDICES_SCHEMA)

    def dropIndex(self, name: str) -> None:
        """Drop the index ``name`` (a new version).

        Example::

            t.dropIndex("id_idx")
        """
        ds = self._open()
        names = sorted(str(d.name) for d in ds.describe_indices())
        if name not in names:
            raise InvalidOptionError(
                f"index {name!r} does not exist in the Lance table at {self._uri!r}; "
                f"indexes: {', '.join(names) or 'none'}"
            )
        ds.drop_index(name)

    # --- schema evolution ---------------------------------------------------------------------

    def addColumns(
        self,
        columns: Mapping[str, str | Column] | DataFrame,
        on: str | None = None,
    ) -> DataFrame:
        """Add nullable columns, filled for every row, in one new version.

        - ``columns`` a mapping: name -> Spark SQL expression (str) or Column, evaluated on
          each row (per-row and deterministic: no aggregate, window, generator or rand());
        - ``columns`` a DataFrame and ``on`` a key column: every other column of the
          DataFrame, joined onto the table by the key (a left join like Lance's
          ``merge``: rows whose key the DataFrame lacks get null, extra keys are ignored,
          a key present twice is an error).

        The types are Spark's, mapped to Arrow as for writes. One Spark job writes one new
        data file per fragment (existing files are not rewritten) and one ``Merge`` is
        committed; nothing is committed if anything fails. A name the table already has is
        a :class:`SchemaMismatchError`, an unknown column in an expression a
        :class:`ColumnNotFoundError`. Returns one row: ``num_added_columns`` and
        ``num_affected_rows`` (rows given a value: all of them for expressions, the
        matched ones for a DataFrame).

        Example::

            t.addColumns({"x2": "x * 2", "name_len": F.length("name")})
            t.addColumns(labels_df, on="id")
        """
        from lance_spark.table import columns as _columns

        app_id = _spark.app_id(self._spark)
        if isinstance(columns, DataFrame):
            if on is None:
                raise InvalidOptionError("addColumns(df, on=...) needs the key column `on`")
            added = _columns.add_joined_columns(
                self._spark,
                uri=self._uri,
                storage=self._storage,
                source=columns,
                on=on,
                app_id=app_id,
            )
        else:
            if on is not None:
                raise InvalidOptionError(
                    "addColumns(..., on=...) takes a DataFrame; with expressions leave `on` out"
                )
            added = _columns.add_expression_columns(
                self._spark,
                uri=self._uri,
                storage=self._storage,
                expressions=columns,
                app_id=app_id,
            )
        metrics = {"num_added_columns": len(added.columns), "num_affected_rows": added.matched}
        return self._one_row(metrics, ("num_added_columns", "num_affected_rows"))

    # --- cloning ------------------------------------------------------------------------------

    def shallowClone(self, target: str, version: int | str | None = None) -> LanceTable:
        """A new table at ``target`` referring to this one's files at ``version`` (a number
        or a tag; None: the current version). Writes to either table do not affect the other.

        Example::

            clone = t.shallowClone("/tmp/experiments/pets.lance", version=1)
        """
        ds = self._open()
        reference: int | str
        if isinstance(version, str):
            resolve_version(ds, TimeTravel(tag=version), uri=self._uri)  # names known tags
            reference = version
        else:
            reference = resolve_version(
                ds, TimeTravel(version=None if version is None else int(version)), uri=self._uri
            )
        if LanceTable.isLanceTable(self._spark, target, self._storage):
            raise InvalidOptionError(f"cannot clone into {target!r}: a Lance table exists there")
        ds.shallow_clone(target, reference, storage_options=self._storage or None)
        return LanceTable(self._spark, target, self._storage)

    # --- change feed --------------------------------------------------------------------------

    def diff(
        self,
        startVersion: int,
        endVersion: int | None = None,
        key: str | list[str] | tuple[str, ...] | None = None,
    ) -> DataFrame:
        """The rows changed by the versions after ``startVersion`` up to ``endVersion``
        (None: the latest), like Delta's ``table_changes``.

        The result has the table's columns (as of ``endVersion``; a column an older version
        lacks reads as null) plus ``_change_type`` (``insert``, ``update_preimage``,
        ``update_postimage``, ``delete``) and ``_commit_version``. Per commit: a row changed
        by several versions in the range appears once per version. Rows are followed by
        their stable row id (tables created by lance_spark have them); an update that keeps
        every value is reported only for Lance ``Update`` commits, and a commit that just
        moves rows (compaction) or adds an index reports nothing. ``startVersion`` 0 means
        "before the first version".

        ``key`` (a column or a list of columns identifying a row, needed for tables without
        stable row ids): compare only the two versions, joined on the key, and report the
        net change with ``_commit_version = endVersion``.

        Example::

            t.diff(1).where("_change_type != 'update_preimage'").show()
            t.diff(3, 7, key="id").groupBy("_change_type").count().show()
        """
        from lance_spark.table import diff as _diff

        return _diff.diff(
            self._spark,
            uri=self._uri,
            storage=self._storage,
            start_version=startVersion,
            end_version=endVersion,
            key=key,
        )

    # --- helpers ------------------------------------------------------------------------------

    def _open(self) -> lance.LanceDataset:
        return open_latest(self._uri, storage=self._storage)

    def _one_row(self, metrics: Mapping[str, int], names: tuple[str, ...]) -> DataFrame:
        schema = StructType([StructField(k, LongType(), False) for k in names])
        return self._spark.createDataFrame([tuple(int(metrics[k]) for k in names)], schema)


class LanceOptimizeBuilder:
    """Returned by :meth:`LanceTable.optimize`.

    Example::

        t.optimize().executeCompaction().show()
    """

    def __init__(self, table: LanceTable) -> None:
        self._table = table

    def executeCompaction(self, target_rows_per_fragment: int | None = None) -> DataFrame:
        """Merge small fragments (and drop deleted rows) with Lance's own planner, in one new
        version (none when there is nothing to do). Returns one row of metrics.

        Example::

            t.optimize().executeCompaction(target_rows_per_fragment=1_000_000).show()
        """
        if target_rows_per_fragment is not None and target_rows_per_fragment < 1:
            raise InvalidOptionError(
                f"target_rows_per_fragment={target_rows_per_fragment} must be at least 1"
            )
        ds = self._table._open()
        result = ds.optimize.compact_files(target_rows_per_fragment=target_rows_per_fragment)
        metrics = {k: int(getattr(result, k)) for k in _COMPACTION_METRICS}
        return self._table._one_row(metrics, _COMPACTION_METRICS)


# --- module helpers ---------------------------------------------------------------------------


def _describe_version(
    ds: lance.LanceDataset, version: int
) -> tuple[str, dict[str, str], dict[str, str], str | None, str | None]:
    """(operation, parameters, metrics, userMetadata, appId) of one version."""
    try:
        tx = ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError):
        tx = None
    if tx is None:  # no transaction file (very old writers) or unreadable
        return ("CREATE TABLE" if version == 1 else "UNKNOWN", {}, {}, None, None)
    props = dict(tx.transaction_properties or {})
    operation = props.get(_commit.PROP_OPERATION)
    if operation is None:
        return (_lance_operation_name(tx, version), {}, {}, None, None)
    return (
        operation,
        _json_map(props.get(_commit.PROP_PARAMETERS)),
        _json_map(props.get(_commit.PROP_METRICS)),
        props.get(_commit.PROP_USER_METADATA),
        props.get(_commit.PROP_APP_ID),
    )


def _lance_operation_name(tx: lance.Transaction, version: int) -> str:
    kind = type(tx.operation).__name__
    if kind == "BaseOperation":  # an operation pylance does not expose (e.g. compaction's
        return "UNKNOWN"  # fragment-id reservation): say so rather than guess
    if kind == "Overwrite" and (version == 1 or not tx.read_version):
        return "CREATE TABLE"
    if kind in _OPERATION_NAMES:
        return _OPERATION_NAMES[kind]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", kind).upper() or "UNKNOWN"


def _json_map(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in parsed.items()}


def _data_files(ds: lance.LanceDataset) -> dict[tuple[object, str], int]:
    """Data files of the version opened as ``ds``: (base, path) -> size in bytes (0 unknown)."""
    out: dict[tuple[object, str], int] = {}
    for fragment in ds.get_fragments():
        for data_file in fragment.data_files():
            key = (data_file.base_id, str(data_file.path))
            out[key] = int(data_file.file_size_bytes or 0)
    return out


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _utc_or_none(when: object) -> datetime | None:
    return _utc(when) if isinstance(when, datetime) else None
