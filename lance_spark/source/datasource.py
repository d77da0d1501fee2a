"""The ``lance`` data source: Spark's entry point for reads and writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import lance
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructField, StructType

from lance_spark.errors import ColumnNotFoundError, InvalidOptionError
from lance_spark.source import change_feed as _change_feed
from lance_spark.source import dataset, row_level
from lance_spark.source import reader as _reader
from lance_spark.source import stream_reader as _stream_reader
from lance_spark.source import stream_writer as _stream_writer
from lance_spark.source import writer as _writer
from lance_spark.source.options import (
    READ_KEYS,
    STARTING_TIMESTAMP,
    STARTING_VERSION,
    STREAM_READ_KEYS,
    AutoCompact,
    AutoIndex,
    ChangeFeedOptions,
    ReadOptions,
    change_feed_requested,
    parse_read_options,
    parse_stream_read_options,
    parse_write_options,
)

FORMAT_NAME = "lance"


@dataclass(frozen=True)
class SessionDefaults:
    """What :func:`lance_spark.register` captures from the session for the workers.

    Spark's Python data source workers cannot see the Spark conf, so the values the connector
    needs from it travel on the (pickled) data source class. ``storage`` holds the
    ``storage_options`` given to ``register`` (credentials included) merged over the
    ``spark.lance.storage.*`` confs; this class is their only carrier to the workers, so they
    never go into the Spark conf, job properties or a data source's options.
    """

    storage: Mapping[str, str] = field(default_factory=dict, repr=False)
    app_id: str | None = None
    parallelism: int = 2
    auto_compact: AutoCompact = field(default_factory=AutoCompact)  # spark.lance.autoCompact.*
    auto_index: AutoIndex = field(default_factory=AutoIndex)  # spark.lance.autoIndex.*


class LanceDataSource(DataSource):
    """Spark data source for Lance tables (``format("lance")``).

    Use :func:`lance_spark.register` rather than registering this class directly: it also
    switches on filter pushdown and passes the session's storage options to the workers.

    Example::

        import lance_spark
        lance_spark.register(spark)
        df = spark.read.format("lance").load("/data/pets.lance")
        df.write.format("lance").mode("append").save("/data/pets.lance")
    """

    defaults: ClassVar[SessionDefaults] = SessionDefaults()

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # Spark asks a streaming read for its schema too: its own options are checked by
        # streamReader(), a batch read's by reader().
        options = dict(self.options)
        if change_feed_requested(options):
            return self._change_feed_schema(options)
        options = {k: v for k, v in options.items() if k.lower() not in STREAM_READ_KEYS}
        opts = parse_read_options(options, session_storage=self.defaults.storage)
        uri = dataset.branch_location(
            self._require_uri(opts.uri), opts.branch, storage=opts.storage
        )
        ds = dataset.open_resolved(uri, opts.time_travel, storage=opts.storage, branch=opts.branch)
        return _reader.spark_schema(ds.schema, _reader.table_projection(ds.schema, opts))

    def _change_feed_schema(self, options: dict[str, str]) -> StructType:
        """A change feed's schema (batch or stream): the table's columns as of the ending
        version, then the change columns. Only the ending version matters here; the reader
        checks the rest (a stream's own options are dropped, and a stream may start from
        the snapshot or from ``latest``)."""
        kept = {k: v for k, v in options.items() if k.lower() not in _STREAM_ONLY_KEYS}
        starts = [k for k in kept if k.lower() in (STARTING_VERSION, STARTING_TIMESTAMP)]
        for key in starts:
            del kept[key]
        kept[STARTING_VERSION] = "0"
        opts = parse_read_options(kept, session_storage=self.defaults.storage)
        uri = dataset.branch_location(
            self._require_uri(opts.uri), opts.branch, storage=opts.storage
        )
        end = _change_feed.ending_version(
            uri, opts.change_feed or ChangeFeedOptions(), opts.storage
        )
        ds = dataset.open_version(uri, end, storage=opts.storage)
        table = _reader.spark_schema(ds.schema, _reader.table_projection(ds.schema, opts))
        return _change_feed.change_schema(table)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options()
        uri = dataset.branch_location(
            self._require_uri(opts.uri), opts.branch, storage=opts.storage
        )
        if opts.change_feed is not None:
            return _change_feed.reader(
                uri,
                opts.change_feed,
                output_schema=schema,
                storage=opts.storage,
                batch_size=opts.batch_size,
            )
        ds = dataset.open_resolved(uri, opts.time_travel, storage=opts.storage, branch=opts.branch)
        table_schema = ds.schema
        projection = _reader.table_projection(table_schema, opts)
        if _shape(_reader.spark_schema(table_schema, projection)) != _shape(schema):
            # A declared schema: the user's (.schema(...)) or a catalog entry's older than the
            # table: read the declared columns, by name.
            projection = _reader.user_projection(table_schema, _strip(schema), allow_absent=True)
            if projection.absent:
                _check_declared_columns(uri, ds, projection.absent, opts.storage)
        return _reader.LanceReader(
            uri=uri,
            version=int(ds.version),
            table_schema=table_schema,
            projection=projection,
            storage=dict(opts.storage),
            user_filter=opts.filter,
            batch_size=opts.batch_size,
            rows_per_partition=opts.rows_per_partition,
            min_partitions=opts.min_partitions or self.defaults.parallelism,
            fragments=_reader.fragment_infos(ds),
            data_bytes=_reader.data_bytes(ds),
            output_schema=schema,  # Spark checks batches against the schema it passed in
        )

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = parse_write_options(
            self.options,
            session_storage=self.defaults.storage,
            session_auto_compact=self.defaults.auto_compact,
            session_auto_index=self.defaults.auto_index,
        )
        uri = dataset.branch_location(
            self._require_write_uri(opts.uri), opts.branch, storage=opts.storage
        )
        if opts.row_level_operation is not None and opts.row_level_version is not None:
            return row_level.plan_writer(
                uri,
                schema.names,
                operation=opts.row_level_operation,
                version=opts.row_level_version,
                storage=opts.storage,
                app_id=self.defaults.app_id or opts.spark_app_id,
                auto_compact=opts.auto_compact,
                auto_index=opts.auto_index,
                max_rows_per_file=opts.max_rows_per_file,
                user_metadata=opts.user_metadata,
                statement_id=opts.statement_id,
                parameters=opts.statement_parameters,
                read_filter=opts.row_level_read_filter,
                added=[schema[name] for name in opts.row_level_added_columns],
            )
        return _writer.plan_write(
            uri=uri,
            spark_schema=_strip(schema),
            overwrite=overwrite,
            options=opts,
            app_id=self.defaults.app_id or opts.spark_app_id,
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = parse_write_options(
            self.options,
            session_storage=self.defaults.storage,
            session_auto_compact=self.defaults.auto_compact,
            session_auto_index=self.defaults.auto_index,
            streaming=True,
        )
        uri = self._require_write_uri(opts.uri, streaming=True)
        batch = _writer.plan_write(
            uri=uri,
            spark_schema=_strip(schema),
            overwrite=overwrite,
            options=opts,
            app_id=self.defaults.app_id or opts.spark_app_id,
            open_job=False,  # LanceStreamWriter opens it (see there)
        )
        return _stream_writer.LanceStreamWriter(
            batch, query_id=opts.streaming_query_id, complete=overwrite
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_stream_read_options(self.options, session_storage=self.defaults.storage)
        uri = self._require_uri(opts.uri)
        return _stream_reader.stream_reader(uri, opts, schema)

    def _read_options(self) -> ReadOptions:
        return parse_read_options(self.options, session_storage=self.defaults.storage)

    @staticmethod
    def _require_write_uri(uri: str | None, *, streaming: bool = False) -> str:
        """The table a write goes to: its ``path`` option, which the companion's session catalog
        sets to the target catalog table's location. Never guessed from the incoming rows:
        they may come from another Lance table (``INSERT INTO t SELECT * FROM s``)."""
        if uri:
            return normalise_uri(uri)
        if streaming:
            how = "writeStream.format('lance').start(path)"
        else:
            how = "df.write.format('lance').save(path)"
        raise InvalidOptionError(
            f"format 'lance' needs the table's path: {how}. A write into a catalog table "
            "(INSERT, insertInto, writeTo, toTable) gets it from lance_spark's session catalog "
            "(spark.sql.catalog.spark_catalog=lance_spark.companion.LanceSessionCatalog), "
            "which this session does not use: build the session with "
            "lance_spark.configure(builder) (a Spark Connect server or spark-submit with "
            "lance_spark.spark_conf()), or call lance_spark.register(spark) on a classic "
            "session; or write by path with the table's location"
        )

    @staticmethod
    def _require_uri(uri: str | None) -> str:
        if not uri:
            raise InvalidOptionError(
                "format 'lance' needs the table's path: spark.read.format('lance').load(path), "
                "or a catalog table created with CREATE TABLE ... USING lance LOCATION 'path', "
                "which gets its path from lance_spark's session catalog (spark.sql.catalog."
                "spark_catalog=lance_spark.companion.LanceSessionCatalog: set by "
                "lance_spark.configure(builder), lance_spark.spark_conf() for a Spark Connect "
                "server or spark-submit, or lance_spark.register(spark) on a classic session)"
            )
        return normalise_uri(uri)


_STREAM_ONLY_KEYS = STREAM_READ_KEYS - READ_KEYS


def _strip(schema: StructType) -> StructType:
    """The schema without the connector's field metadata."""
    return StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields])


def _shape(schema: StructType) -> list[tuple[str, object]]:
    return [(f.name, f.dataType) for f in schema.fields]


def _check_declared_columns(
    uri: str, ds: lance.LanceDataset, absent: Sequence[str], storage: Mapping[str, str]
) -> None:
    """Declared columns a version lacks read as NULL when a later version has them (an old
    version read before the column was added). A column the latest version lacks too does
    not exist, or was renamed or dropped outside the catalog's knowledge: reading NULL would
    be silently wrong, so the read fails instead."""
    latest = ds if ds.version == ds.latest_version else dataset.open_latest(uri, storage=storage)
    names = {n.lower() for n in latest.schema.names}
    stale = [c for c in absent if c.lower() not in names]
    if stale:
        raise ColumnNotFoundError(
            f"column {stale[0]!r} does not exist in the Lance table at {uri!r} (columns: "
            f"{', '.join(latest.schema.names)})"
        )


def normalise_uri(uri: str) -> str:
    """``uri`` as Lance takes it: a catalog's ``file:/path`` or ``file:///path`` location as
    a plain path; anything else unchanged.

    Example::

        normalise_uri("file:/tmp/t.lance")  # "/tmp/t.lance"
    """
    if uri.startswith("file:") and not uri.startswith("file://"):
        return uri[len("file:") :]
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return uri
