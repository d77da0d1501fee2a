"""``LanceTable``: a Delta-Lake-like table API (history, restore, tags, branches, maintenance,
indexes).

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
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import lance
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import DataType

from lance_spark import _spark
from lance_spark._spark import JobProgress
from lance_spark.errors import InvalidArgumentError, InvalidOptionError, TableNotFoundError
from lance_spark.source.dataset import branch_location
from lance_spark.source.datasource import FORMAT_NAME, normalise_uri
from lance_spark.source.options import BRANCH, MAIN_BRANCH, TimeTravel, parse_timestamp
from lance_spark.source.search_plans import plan_search
from lance_spark.source.session import lance_reader, session_storage
from lance_spark.table import arguments, changes, history, maintenance, schema
from lance_spark.table import blobs as _blobs
from lance_spark.table import branches as _branches
from lance_spark.table import clone as _clone
from lance_spark.table import detail as _detail
from lance_spark.table import search as _search
from lance_spark.table.builder import BuildMode, LanceTableBuilder
from lance_spark.table.catalog import recreate_entry
from lance_spark.table.context import TableContext
from lance_spark.table.maintenance import LanceOptimizeBuilder
from lance_spark.table.merge import LanceMergeBuilder

__all__ = ["LanceOptimizeBuilder", "LanceTable", "LanceTableBuilder"]

# What search() and nearest() both take.
_SEARCH_ARGUMENTS = {
    "k": arguments.COUNT,
    "column": arguments.NAME.orNone(),
    "columns": arguments.NAMES.orNone(),
    "filter": arguments.NAME.orNone(),
    "nprobes": arguments.COUNT.orNone(),
    "refine_factor": arguments.COUNT.orNone(),
    "metric": arguments.NAME.orNone(),
    "version": arguments.VERSION_OR_TAG.orNone(),
}


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
        self._name: str | None = None  # the catalog name, when opened with forName
        self._root = uri  # the table's own location; _uri is its branch's (see branch())
        self._branch: str | None = None  # None: the main branch

    def __repr__(self) -> str:  # never the storage options: they may hold secrets
        on = "" if self._branch is None else f", branch={self._branch!r}"
        return f"LanceTable({self._root!r}{on})"

    @property
    def uri(self) -> str:
        """The table's location, as given (catalog locations without ``file:``); for a
        table bound to a branch with :meth:`branch`, where that branch is stored."""
        return self._uri

    @property
    def currentBranch(self) -> str:
        """The branch this object reads and writes: ``"main"`` unless bound with
        :meth:`branch`.

        Example::

            t.branch("exp").currentBranch  # 'exp'
        """
        return self._branch or MAIN_BRANCH

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    @arguments.checked(
        spark=arguments.SESSION, path=arguments.PATH, storage_options=arguments.STRING_MAP.orNone()
    )
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
    @arguments.checked(spark=arguments.SESSION, name=arguments.NAME)
    def forName(cls, spark: SparkSession, name: str) -> LanceTable:
        """The catalog table ``name`` (created ``USING lance``).

        Example::

            spark.sql("CREATE TABLE pets USING lance LOCATION '/data/pets.lance'")
            t = LanceTable.forName(spark, "pets")
        """
        from lance_spark.table.catalog import entry

        found = entry(spark, name)
        if found is None:
            raise TableNotFoundError(f"no catalog table or view {name!r}")
        location = found.lance_location
        if not location:
            raise TableNotFoundError(
                f"catalog table {name!r} is not a Lance table (provider "
                f"{found.provider or 'none: a view'!r}); LanceTable.forName needs a table "
                f"created USING {FORMAT_NAME}"
            )
        table = cls.forPath(spark, normalise_uri(location))
        table._name = name
        return table

    @classmethod
    @arguments.checked(
        spark=arguments.SESSION, path=arguments.PATH, storage_options=arguments.STRING_MAP.orNone()
    )
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
        return cls(spark, path, storage_options)._context.exists()

    # --- creating -----------------------------------------------------------------------------

    @classmethod
    @arguments.checked(
        spark=arguments.SESSION,
        parquet_path=arguments.PATH,
        lance_uri=arguments.PATH,
        mode=arguments.TEXT,
        options=arguments.STRING_MAP.orNone(),
        parquetOptions=arguments.STRING_MAP.orNone(),
        storage_options=arguments.STRING_MAP.orNone(),
        progress=arguments.PROGRESS,
    )
    def convertToLance(
        cls,
        spark: SparkSession,
        parquet_path: str,
        lance_uri: str,
        *,
        mode: str = "error",
        options: Mapping[str, Any] | None = None,
        parquetOptions: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, str] | None = None,
        progress: bool | Callable[[JobProgress], None] = True,
    ) -> LanceTable:
        """Copy the Parquet data at ``parquet_path`` (a file, or a directory of files, e.g.
        a Parquet table) into the Lance table at ``lance_uri``; returns that table.

        One Spark job reads the files with Spark's Parquet reader and writes them through the
        ``lance`` writer; the driver commits them as ONE Lance version, recorded in history as
        ``CONVERT`` (with ``sourcePath`` and ``numConvertedFiles``). If anything fails nothing
        is committed and the files written are deleted. The columns are the Parquet schema's,
        with Spark's partition discovery: a directory laid out as ``label=cat/...`` gives a
        column ``label`` (last, as Spark reads it). Parquet ``list<float>`` columns stay
        lists unless ``options`` makes them vectors (``{"<col>.arrow.fixed-size-list.size":
        n}``); ``options`` takes the other write options too (``max_rows_per_file``, ...),
        ``parquetOptions`` Spark's Parquet read options (``mergeSchema``, ``basePath``,
        ``recursiveFileLookup``...).

        ``mode`` says what to do when a Lance table exists at ``lance_uri``: ``error``
        (:class:`TableAlreadyExistsError`), ``overwrite`` (a new version with only the
        converted rows; history kept), ``append``, or ``ignore`` (leave it as it is).
        ``progress``: a bar on stderr (tasks done), False for none, or a function receiving
        each :class:`~lance_spark.JobProgress`.

        Example::

            t = LanceTable.convertToLance(spark, "/data/events.parquet", "/data/events.lance")
            t.history().select("version", "operation").show()
        """
        from lance_spark.table import convert as _convert

        table = cls(spark, lance_uri, storage_options)
        _convert.convert_parquet(
            table._context,
            source=parquet_path,
            mode=mode,
            options={k: _spark.option_text(v) for k, v in (options or {}).items()},
            parquet_options={k: _spark.option_text(v) for k, v in (parquetOptions or {}).items()},
            progress=progress,
        )
        return table

    @classmethod
    @arguments.checked(storage_options=arguments.STRING_MAP.orNone())
    def create(
        cls, spark: SparkSession | None = None, *, storage_options: Mapping[str, str] | None = None
    ) -> LanceTableBuilder:
        """A builder of a new Lance table (Delta's ``DeltaTable.create``): ``execute()``
        raises :class:`TableAlreadyExistsError` when the table exists. ``spark`` None (as in
        every builder): the active session.

        Example::

            t = (LanceTable.create(spark)
                 .tableName("pets")
                 .location("/data/pets.lance")
                 .addColumn("id", "bigint", nullable=False)
                 .addColumn("label", "string", comment="the annotator's label")
                 .property("owner_team", "vision")
                 .execute())
        """
        return LanceTableBuilder(
            arguments.active_session(spark, "LanceTable.create"),
            BuildMode.CREATE,
            storage_options=storage_options,
        )

    @classmethod
    @arguments.checked(storage_options=arguments.STRING_MAP.orNone())
    def createIfNotExists(
        cls, spark: SparkSession | None = None, *, storage_options: Mapping[str, str] | None = None
    ) -> LanceTableBuilder:
        """A builder that creates the table unless it exists (then ``execute()`` returns the
        existing table unchanged).

        Example::

            t = LanceTable.createIfNotExists(spark).location(uri).addColumns("id bigint").execute()
        """
        return LanceTableBuilder(
            arguments.active_session(spark, "LanceTable.createIfNotExists"),
            BuildMode.CREATE_IF_NOT_EXISTS,
            storage_options=storage_options,
        )

    @classmethod
    @arguments.checked(storage_options=arguments.STRING_MAP.orNone())
    def createOrReplace(
        cls, spark: SparkSession | None = None, *, storage_options: Mapping[str, str] | None = None
    ) -> LanceTableBuilder:
        """A builder that replaces the table when it exists (one new version with the
        declared columns and no rows; history kept) and creates it when not.

        Example::

            t = LanceTable.createOrReplace(spark).location(uri).addColumns(df.schema).execute()
        """
        return LanceTableBuilder(
            arguments.active_session(spark, "LanceTable.createOrReplace"),
            BuildMode.CREATE_OR_REPLACE,
            storage_options=storage_options,
        )

    @classmethod
    @arguments.checked(storage_options=arguments.STRING_MAP.orNone())
    def replace(
        cls, spark: SparkSession | None = None, *, storage_options: Mapping[str, str] | None = None
    ) -> LanceTableBuilder:
        """A builder that replaces an existing table (:class:`TableNotFoundError` when there
        is none): one new version with the declared columns and no rows; history kept.

        Example::

            t = LanceTable.replace(spark).tableName("pets").addColumn("id", "bigint").execute()
        """
        return LanceTableBuilder(
            arguments.active_session(spark, "LanceTable.replace"),
            BuildMode.REPLACE,
            storage_options=storage_options,
        )

    # --- reading ------------------------------------------------------------------------------

    @arguments.checked(
        version=arguments.VERSION.orNone(),
        timestamp=arguments.TIMESTAMP.orNone(),
        tag=arguments.NAME.orNone(),
    )
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
        if self._branch is not None:
            reader = reader.option(BRANCH, self._branch)
        if version is not None:
            reader = reader.option("version", str(version))
        if timestamp is not None:
            stamp = timestamp if isinstance(timestamp, str) else history.utc(timestamp).isoformat()
            reader = reader.option("timestampAsOf", stamp)
        if tag is not None:
            reader = reader.option("tag", tag)
        return reader.load(self._root)

    @arguments.checked(filter=arguments.NAME.orNone())
    def countRows(self, filter: str | None = None) -> int:
        """Number of rows (from the metadata when there is no filter; ``filter`` is Lance SQL).

        Example::

            t.countRows()
            t.countRows("label = 'cat'")
        """
        return int(self._open().count_rows(filter))

    @arguments.checked(
        column=arguments.NAME,
        ids=arguments.ROW_NUMBERS.orNone(),
        addresses=arguments.ROW_NUMBERS.orNone(),
        where=arguments.NAME.orNone(),
    )
    def blobs(
        self,
        column: str,
        ids: Sequence[int] | None = None,
        *,
        addresses: Sequence[int] | None = None,
        where: str | None = None,
    ) -> list[lance.BlobFile | None]:
        """File-like pylance ``BlobFile`` objects for blob column ``column`` (None for a null
        value): of the rows with row ids ``ids``, row addresses ``addresses`` or matching the
        Lance predicate ``where`` (at most one; none: every row). A blob's bytes are read only
        when asked for (``read()``, ``seek()``, ``size()``), not by this call.

        Example::

            for blob in t.blobs("image", where="label = 'cat'"):
                with blob as f:
                    image = PIL.Image.open(f)
        """
        return _blobs.take_blobs(self._context, column, ids=ids, addresses=addresses, where=where)

    # --- row-level changes ----------------------------------------------------------------------

    @arguments.checked(condition=arguments.CONDITION.orNone())
    def delete(self, condition: str | Column | None = None) -> DataFrame:
        """Delete the rows matching ``condition`` (a SQL string or a Column; None: all rows).

        Runs as a Spark job (each touched fragment's deletion file is written by one task) and
        commits one new version, or none when no row matches. Returns ``num_affected_rows``.

        Example::

            t.delete("label = 'cat'")
            t.delete(F.col("age") > 10)
        """
        deleted = changes.delete_where(self._context, condition=condition)
        return self._one_row({"num_affected_rows": deleted}, ("num_affected_rows",))

    @arguments.checked(condition=arguments.CONDITION.orNone(), set=arguments.ASSIGNMENTS.orNone())
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
            raise InvalidArgumentError("LanceTable.update() needs set={column: expression, ...}")
        updated = changes.update_where(self._context, condition=condition, assignments=set)
        return self._one_row({"num_affected_rows": updated}, ("num_affected_rows",))

    @arguments.checked(name=arguments.NAME)
    def alias(self, name: str) -> LanceTable:
        """The same table, named ``name`` in MERGE conditions and expressions.

        Example::

            t.alias("t").merge(src.alias("s"), "s.id = t.id")
        """
        aliased = copy.copy(self)  # not __init__: it reads the session conf again (~20 ms)
        aliased._alias = name
        return aliased

    @arguments.checked(source=arguments.DATAFRAME, condition=arguments.CONDITION)
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
            table=self._context,
            source=source,
            condition=condition,
            target_alias=self._alias,
            after_schema_change=self._refresh_catalog,
        )

    # --- history and restore ------------------------------------------------------------------

    @arguments.checked(limit=arguments.COUNT.orNone())
    def history(self, limit: int | None = None) -> DataFrame:
        """One row per version, newest first (``limit``: only the newest ``limit`` versions).

        Columns: version, timestamp, operation, operationParameters, operationMetrics,
        userMetadata, appId. Versions committed by other Lance writers get an operation named
        after their Lance operation, empty maps and null userMetadata/appId.

        Example::

            t.history(5).select("version", "operation", "userMetadata").show()
        """
        return history.history(self._context, limit)

    @arguments.checked(version=arguments.VERSION)
    def restoreToVersion(self, version: int) -> DataFrame:
        """Commit a new version whose content is ``version``'s; returns restore metrics.

        Example::

            t.restoreToVersion(1).show()
        """
        restored = history.restore(self._context, TimeTravel(version=int(version)))
        self._refresh_catalog()  # the restored columns may differ from the entry's
        return restored

    @arguments.checked(timestamp=arguments.TIMESTAMP)
    def restoreToTimestamp(self, timestamp: str | datetime) -> DataFrame:
        """Restore the latest version committed at or before ``timestamp`` (no zone: UTC).

        Example::

            t.restoreToTimestamp("2030-01-01T00:00:00Z")
        """
        when = parse_timestamp(timestamp) if isinstance(timestamp, str) else history.utc(timestamp)
        restored = history.restore(self._context, TimeTravel(timestamp=when))
        self._refresh_catalog()
        return restored

    # --- tags ---------------------------------------------------------------------------------

    @arguments.checked(name=arguments.NAME, version=arguments.VERSION.orNone())
    def createTag(self, name: str, version: int | None = None) -> None:
        """Tag ``version`` (None: the current one) as ``name``; read it with ``toDF(tag=...)``.

        Example::

            t.createTag("train-v1")
            t.createTag("first", 1)
        """
        history.create_tag(self._context, name, version)

    @arguments.checked(name=arguments.NAME)
    def deleteTag(self, name: str) -> None:
        """Delete tag ``name`` (the version itself stays until vacuumed).

        Example::

            t.deleteTag("train-v1")
        """
        history.delete_tag(self._context, name)

    def listTags(self) -> DataFrame:
        """Tags as a DataFrame (tag, version, createdAt), by name.

        Example::

            t.listTags().show()
        """
        return history.list_tags(self._context)

    # --- branches -----------------------------------------------------------------------------

    @arguments.checked(name=arguments.NAME)
    def branch(self, name: str) -> LanceTable:
        """The same table on branch ``name`` (``"main"``: the main branch): every method of
        the returned object (``toDF``, ``merge``, ``update``, ``delete``, ``history``,
        ``restoreToVersion``, ``createTag``...) reads and commits that branch's versions
        only. :class:`~lance_spark.errors.BranchNotFoundError` (listing the branches) when
        there is no such branch.

        Example::

            exp = t.branch("exp")
            exp.update("label = 'cat'", {"label": "'kitten'"})
            exp.toDF(version=2).show()
        """
        bound = copy.copy(self)  # not __init__: it reads the session conf again (~20 ms)
        bound._uri = branch_location(self._root, name, storage=self._storage)
        bound._branch = None if name == MAIN_BRANCH else name
        return bound

    @arguments.checked(
        name=arguments.TEXT, version=arguments.VERSION_OR_TAG.orNone(), ifNotExists=arguments.FLAG
    )
    def createBranch(
        self, name: str, version: int | str | None = None, *, ifNotExists: bool = False
    ) -> LanceTable:
        """Create branch ``name`` from ``version`` (a number or a tag; None: the latest) of
        this object's branch, without copying data; returns the table on the new branch.
        A branch that exists is an error unless ``ifNotExists``. Names: letters, digits,
        ``.``, ``-``, ``_``.

        Example::

            exp = t.createBranch("exp")          # from main's latest version
            t.createBranch("first", version=1)
            exp.createBranch("exp-2")            # from branch exp's latest version
        """
        _branches.create_branch(self._context, name, version, if_not_exists=ifNotExists)
        return self.branch(name)

    @arguments.checked(name=arguments.NAME, ifExists=arguments.FLAG)
    def deleteBranch(self, name: str, *, ifExists: bool = False) -> None:
        """Delete branch ``name``: its versions and the data files only they use. A branch
        that does not exist is an error unless ``ifExists``; so is one that another branch
        was created from or that a tag names (delete those first).

        Example::

            t.deleteBranch("exp")
        """
        _branches.delete_branch(self._context, name, if_exists=ifExists)

    def listBranches(self) -> DataFrame:
        """The table's branches as a DataFrame, ``main`` first: branch, version (its latest),
        parentBranch and parentVersion (where it was created from), createdAt.

        Example::

            t.listBranches().show()
        """
        return _branches.list_branches(self._context)

    # --- maintenance --------------------------------------------------------------------------

    def optimize(self) -> LanceOptimizeBuilder:
        """Start an optimize; ``executeCompaction()`` merges small fragments.

        Example::

            t.optimize().executeCompaction(target_rows_per_fragment=1_000_000).show()
        """
        return LanceOptimizeBuilder(self._context)

    @arguments.checked(retentionHours=arguments.HOURS, dryRun=arguments.FLAG)
    def vacuum(self, retentionHours: float = 168, *, dryRun: bool = False) -> DataFrame:
        """Delete the files only versions older than ``retentionHours`` use, and what jobs
        that stopped (a killed driver, a killed task) left behind: data, deletion and index
        files no version references, and the connector's staging markers (once the files
        they name are gone), when older than that too.

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
        return maintenance.vacuum(self._context, retentionHours, dry_run=dryRun)

    # --- indexes ------------------------------------------------------------------------------

    @arguments.checked(
        column=arguments.NAME, index_type=arguments.NAME, name=arguments.NAME.orNone()
    )
    def createIndex(
        self, column: str, index_type: str, *, name: str | None = None, **params: Any
    ) -> None:
        """Build an index on ``column`` as a Spark job, committed as one new version.

        Scalar types (BTREE, BITMAP, LABEL_LIST, INVERTED, ZONEMAP, NGRAM) speed up pushed-down
        filters; vector types (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_HNSW_PQ, IVF_HNSW_SQ) need a
        vector (fixed_size_list) column and take Lance's parameters (``num_partitions``,
        ``num_sub_vectors``, ``metric``...).

        Each Spark task builds the index segment of a group of fragments (one group per core
        of the session); a vector index's IVF centroids (and PQ codebook) are trained first
        on the driver from a sample, so the driver never holds the table. A failed job
        commits nothing and leaves no index file. The index name defaults to
        ``<column>_idx``; an index of that name is built again with ``replace=True`` (the
        default for scalar types), else :class:`IndexExistsError`.

        Example::

            t.createIndex("id", "BTREE")
            t.createIndex("embedding", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
        """
        maintenance.create_index(self._context, column, index_type, name=name, **params)

    @arguments.checked(names=arguments.INDEX_NAMES.orNone(), retrain=arguments.FLAG)
    def optimizeIndices(
        self, names: str | Sequence[str] | None = None, *, retrain: bool = False
    ) -> DataFrame:
        """Bring indexes up to date with the rows appended since they were built, as a Spark
        job committed as one new version: each index gets new segments over the fragments it
        does not cover yet, with the parameters (and the vector model: no retraining) it was
        built with. The segments that hold entries for rows whose values were rewritten since
        (``updateColumns``; UPDATE and MERGE on stable row ids) are built again with them, so
        the index never answers with old values. ``retrain=True`` builds each index again,
        its vector model trained anew on today's data. ``names``: the indexes (default: all).
        An index this connector did not build and whose parameters it cannot know (a
        full-text or vector index made by pylance) is optimized by Lance's own
        ``optimize_indices`` on the driver.

        Returns a row per index: ``index``, ``type``, ``numFragmentsIndexed`` (by this
        call), ``numIndexedRows``, ``numUnindexedRows`` and ``numSegments`` afterwards,
        and the ``version`` that indexed it (null: it was up to date).

        Example::

            t.optimizeIndices().show()
            t.optimizeIndices(["embedding_idx"], retrain=True)
        """
        wanted = [names] if isinstance(names, str) else names
        return maintenance.optimize_indices(
            self._context, None if wanted is None else list(wanted), retrain=retrain
        )

    def listIndices(self) -> DataFrame:
        """Indexes as a DataFrame, by name: ``name``, ``columns``, ``type``, and how far each
        covers the table: ``numIndexedRows``, ``numUnindexedRows`` (rows appended since it
        was built or optimized, which searches scan without it; see :meth:`optimizeIndices`)
        and ``numSegments``.

        Example::

            t.listIndices().show()
        """
        return maintenance.list_indices(self._context)

    @arguments.checked(name=arguments.NAME)
    def dropIndex(self, name: str) -> None:
        """Drop the index ``name`` (a new version).

        Example::

            t.dropIndex("id_idx")
        """
        maintenance.drop_index(self._context, name)

    # --- description ----------------------------------------------------------------------

    def detail(self) -> DataFrame:
        """One row describing the table, as Delta's ``DESCRIBE DETAIL``: ``format``
        (``lance``), ``id`` (null: Lance tables have none), ``name`` (when opened with
        :meth:`forName`), ``description`` (the table comment), ``location``, ``version``,
        ``createdAt`` (the oldest surviving version's commit time), ``lastModified``,
        ``partitionColumns`` (always empty),
        ``numFragments``, ``numFiles`` (data files), ``numDeletionFiles``, ``sizeInBytes`` (of
        the data files), ``numRows``, ``numDeletedRows``, ``schema``, ``indexes``, ``tags``,
        ``storageFormatVersion``, ``stableRowIds`` and ``properties``.

        Example::

            t.detail().select("version", "numFiles", "sizeInBytes").show()
        """
        return _detail.detail(self._context, name=self._name)

    # --- search -------------------------------------------------------------------------------

    @arguments.checked(
        vector=arguments.VECTOR.orNone(), text=arguments.NAME.orNone(), **_SEARCH_ARGUMENTS
    )
    def search(
        self,
        vector: Sequence[float] | None = None,
        k: int = 10,
        *,
        column: str | None = None,
        filter: str | None = None,
        nprobes: int | None = None,
        refine_factor: int | None = None,
        metric: str | None = None,
        text: str | None = None,
        columns: Sequence[str] | None = None,
        version: int | str | None = None,
    ) -> DataFrame:
        """The ``k`` rows nearest to ``vector`` (``_distance`` column, nearest first), or with
        ``text=`` the ``k`` best matches of a full-text query (``_score``, best first).

        Vector search uses the column's vector index when it has one (``nprobes``: partitions
        probed, Lance's default when None; ``refine_factor``: re-rank ``k * refine_factor``
        candidates by exact distance, 5 by default for compressed indexes such as IVF_PQ), and
        an exact search when not. ``column`` is the vector column (needed only when the table
        has several), ``metric`` defaults to the index's (``l2`` without an index).
        Text search needs an INVERTED index (``createIndex(col, "INVERTED")``) on ``column``
        (or on any column when None). ``filter`` (a SQL condition) is applied before the
        search; ``columns`` chooses the returned columns; ``version`` a version number or tag.

        Example::

            t.search([0.1, 0.2, 0.3, 0.4], k=5).show()
            t.search(q, k=10, filter="label = 'cat'", nprobes=20)
            t.search(text="tabby cat", column="caption", k=3).show()
        """
        plan = plan_search(
            self._uri,
            storage=self._storage,
            vector=vector,
            text=text,
            k=k,
            column=column,
            filter=filter,
            nprobes=nprobes,
            refine_factor=refine_factor,
            metric=metric,
            columns=columns,
            version=version,
            branch=self._branch,
        )
        return _search.search(self._context, plan)

    @arguments.checked(
        queries=arguments.DATAFRAME, query_column=arguments.NAME.orNone(), **_SEARCH_ARGUMENTS
    )
    def nearest(
        self,
        queries: DataFrame,
        column: str | None = None,
        k: int = 10,
        *,
        query_column: str | None = None,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        nprobes: int | None = None,
        refine_factor: int | None = None,
        metric: str | None = None,
        version: int | str | None = None,
    ) -> DataFrame:
        """A distributed nearest-neighbour join: for every row of ``queries``, the ``k``
        nearest rows of this table, as rows of the query's columns, the table's columns,
        ``_distance`` and ``_rank`` (1 = nearest).

        Spark tasks search: each opens the table (one pinned version for the whole job) and
        asks its vector index (an exact search without one) for the neighbours of its query
        rows; neither the queries nor the table are collected on the driver. The query vectors
        are ``queries[query_column]`` (default: the same name as ``column``, the table's vector
        column); a row whose query vector is null has no neighbours. Query and table column
        names must differ (rename query columns, or choose the table's with ``columns``).
        ``filter``, ``nprobes``, ``refine_factor``, ``metric``, ``version``: as in
        :meth:`search`.

        Example::

            queries = spark.read.parquet("/data/queries").select("query_id", "embedding")
            pairs = t.nearest(queries, column="embedding", k=5, columns=["id", "label"])
            pairs.where("_rank = 1").show()
        """
        if not isinstance(queries, DataFrame):
            raise InvalidOptionError(
                f"nearest takes a DataFrame of query vectors, not {type(queries).__name__}"
            )
        plan = plan_search(
            self._uri,
            storage=self._storage,
            k=k,
            column=column,
            filter=filter,
            nprobes=nprobes,
            refine_factor=refine_factor,
            metric=metric,
            columns=columns,
            version=version,
            vector_from_rows=True,
            branch=self._branch,
        )
        return _search.nearest(self._context, queries, plan, query_column=query_column)

    # --- schema changes -----------------------------------------------------------------------

    @arguments.checked(old=arguments.NAME, new=arguments.NAME)
    def renameColumn(self, old: str, new: str) -> None:
        """Rename column ``old`` (a dotted path for a nested field) to ``new``: one
        metadata-only Lance version; data files are not rewritten. A table opened with
        :meth:`forName` gets its catalog entry updated too.

        Example::

            t.renameColumn("w", "weight")
        """
        schema.rename_column(self._context, old, new)
        self._refresh_catalog()

    @arguments.checked(columns=arguments.NAME, ifExists=arguments.FLAG)
    def dropColumns(self, *columns: str, ifExists: bool = False) -> None:
        """Drop columns (metadata-only: their data stays in the files until compaction
        rewrites them). A missing column is an error unless ``ifExists``.

        Example::

            t.dropColumns("debug", "tmp")
        """
        names = (
            list(columns[0]) if len(columns) == 1 and not isinstance(columns[0], str) else columns
        )
        if schema.drop_columns(self._context, list(names), if_exists=ifExists):
            self._refresh_catalog()

    @arguments.checked(
        column=arguments.NAME,
        dataType=arguments.DATA_TYPE.orNone(),
        comment=arguments.TEXT.orNone(),
    )
    def alterColumn(
        self, column: str, *, dataType: str | DataType | None = None, comment: str | None = None
    ) -> None:
        """Widen a column's type (tinyint -> smallint -> int -> bigint, float -> double;
        Lance rewrites the column) and/or set its comment (metadata-only).

        Example::

            t.alterColumn("count", dataType="bigint")
            t.alterColumn("label", comment="the annotator's label")
        """
        data_type = (
            _spark.parse_data_type(self._spark, dataType) if isinstance(dataType, str) else dataType
        )
        schema.alter_column(self._context, column, data_type=data_type, comment=comment)
        self._refresh_catalog()

    def _refresh_catalog(self) -> None:
        """After every change of the table's columns through this object (add, drop, rename,
        retype, restore, MERGE with schema evolution): a table opened by name gets its catalog
        entry re-created, since Spark keeps the columns the entry was created with."""
        # A catalog entry describes the main branch: a branch's schema is its own.
        if self._name is not None and self._branch is None:
            recreate_entry(self._spark, self._name, self._uri, self._storage)

    # --- schema evolution ---------------------------------------------------------------------

    @arguments.checked(columns=arguments.ADD_COLUMNS, on=arguments.NAME.orNone())
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
        :class:`ColumnNotFoundError`. A table opened with :meth:`forName` gets its catalog
        entry updated too. Returns one row: ``num_added_columns`` and
        ``num_affected_rows`` (rows given a value: all of them for expressions, the
        matched ones for a DataFrame).

        Example::

            t.addColumns({"x2": "x * 2", "name_len": F.length("name")})
            t.addColumns(labels_df, on="id")
        """
        from lance_spark.table import columns as _columns

        if isinstance(columns, DataFrame):
            if on is None:
                raise InvalidOptionError("addColumns(df, on=...) needs the key column `on`")
            added = _columns.add_joined_columns(self._context, source=columns, on=on)
        else:
            if on is not None:
                raise InvalidOptionError(
                    "addColumns(..., on=...) takes a DataFrame; with expressions leave `on` out"
                )
            added = _columns.add_expression_columns(self._context, expressions=columns)
        self._refresh_catalog()
        metrics = {"num_added_columns": len(added.columns), "num_affected_rows": added.matched}
        return self._one_row(metrics, ("num_added_columns", "num_affected_rows"))

    @arguments.checked(source=arguments.DATAFRAME, on=arguments.NAME)
    def updateColumns(self, source: DataFrame, on: str) -> DataFrame:
        """Replace the values of existing columns for the rows whose key ``source`` holds,
        in one new version, writing only those columns' files (a column backfill: an
        embedding or a label recomputed, without rewriting the other columns).

        Every column of ``source`` other than the key ``on`` must be a column of the table
        (else :class:`ColumnNotFoundError`); it is cast to the table column's type as an
        append casts (lossless only: else :class:`SchemaMismatchError` naming the column and
        both types). A table row whose key ``source`` holds gets its values; other rows keep
        theirs; keys the table lacks (and null keys) are ignored; a key present twice in
        ``source`` is an error. One Spark job writes, per fragment with a matched row, one new
        data file holding the updated columns for all its rows; the files of the other
        columns stay as they are, and indexes on the updated columns stop covering the
        rewritten fragments. One Lance version is committed (none when no row matched, or if
        anything fails); a concurrent commit that overlaps is retried on the newer version.
        Returns one row: ``num_updated_columns`` and ``num_affected_rows`` (matched rows).

        Example::

            t.updateColumns(new_embeddings_df, on="id")  # df: id, embedding
        """
        from lance_spark.table import columns as _columns

        updated = _columns.update_joined_columns(self._context, source=source, on=on)
        metrics = {
            "num_updated_columns": len(updated.columns),
            "num_affected_rows": updated.matched,
        }
        return self._one_row(metrics, ("num_updated_columns", "num_affected_rows"))

    # --- cloning ------------------------------------------------------------------------------

    @arguments.checked(
        target=arguments.PATH,
        version=arguments.VERSION_OR_TAG.orNone(),
        replace=arguments.FLAG,
    )
    def shallowClone(
        self, target: str, version: int | str | None = None, *, replace: bool = False
    ) -> LanceTable:
        """A table at ``target`` referring to this one's files at ``version`` (a number or a
        tag; None: the current version). Writes to either table do not affect the other.

        A Lance table already at ``target`` is an error, unless ``replace``: then the clone
        becomes its next version (its history stays, as with Delta's ``replace=True``); its
        indexes go, and fragments of this table with deleted rows are copied rather than
        referred to.

        Example::

            clone = t.shallowClone("/tmp/experiments/pets.lance", version=1)
            t.shallowClone("/tmp/experiments/pets.lance", replace=True)  # now the latest
        """
        _clone.shallow_clone(self._context, target, version, replace=replace)
        return LanceTable(self._spark, target, self._storage)

    # --- change feed --------------------------------------------------------------------------

    @arguments.checked(
        startVersion=arguments.VERSION,
        endVersion=arguments.VERSION.orNone(),
        key=arguments.NAMES.orNone(),
    )
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
            self._context,
            start_version=startVersion,
            end_version=endVersion,
            key=key,
        )

    # --- helpers ------------------------------------------------------------------------------

    @property
    def _context(self) -> TableContext:
        main = None if self._branch is None else self._root
        return TableContext(self._spark, self._uri, self._storage, self._branch, main)

    def _open(self) -> lance.LanceDataset:
        return self._context.open()

    def _one_row(self, metrics: Mapping[str, int], names: tuple[str, ...]) -> DataFrame:
        return self._context.one_row(metrics, names)
