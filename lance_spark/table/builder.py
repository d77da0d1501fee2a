"""Creating and replacing Lance tables with Delta's table builder
(``LanceTable.create(spark).location(...).addColumn(...).execute()``).

The table is created empty, with the declared columns, in one Lance version (the same commit
``CREATE TABLE ... USING lance`` makes); column comments go into the Lance field metadata
(as ``ALTER COLUMN ... COMMENT``), properties and the table comment into Lance's table config
(as ``SET TBLPROPERTIES``), which is a second version when there are any. With
``tableName`` the catalog entry is made too (``CREATE TABLE name USING lance LOCATION``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, StructField, StructType

from lance_spark import _spark
from lance_spark.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from lance_spark.source import dataset
from lance_spark.source.datasource import FORMAT_NAME, normalise_uri
from lance_spark.source.options import WriteOptions
from lance_spark.source.session import session_storage
from lance_spark.source.writer import COMMENT_KEY, plan_write, with_comments
from lance_spark.table import arguments, catalog
from lance_spark.table.schema import check_property_keys
from lance_spark.table.writes import default_location, same_location

if TYPE_CHECKING:
    from lance_spark.table.lance_table import LanceTable

_LANCE_CONFIG_PREFIX = "lance."  # Lance's own settings in the table config: a replace keeps them


class BuildMode(Enum):
    """What :meth:`LanceTableBuilder.execute` does; the values are the ``LanceTable``
    methods that make such a builder."""

    CREATE = "create"
    CREATE_IF_NOT_EXISTS = "createIfNotExists"
    CREATE_OR_REPLACE = "createOrReplace"
    REPLACE = "replace"


@dataclass(frozen=True)
class _Column:
    name: str
    data_type: DataType | str  # a str is a Spark SQL type, parsed by execute()
    nullable: bool
    comment: str | None
    blob: bool = False  # a Lance blob column (binary only)


TypeParser = Callable[[str], DataType]
SchemaParser = Callable[[str], StructType]


class LanceTableBuilder:
    """Declares a Lance table and creates (or replaces) it with :meth:`execute`; made by
    :meth:`LanceTable.create`, :meth:`~LanceTable.createIfNotExists`,
    :meth:`~LanceTable.createOrReplace` and :meth:`~LanceTable.replace` (Delta's
    ``DeltaTableBuilder``). Every method but :meth:`execute` returns the builder.

    Example::

        t = (LanceTable.create(spark)
             .location("/data/pets.lance")
             .addColumn("id", "bigint", nullable=False)
             .addColumn("label", "string", comment="the annotator's label")
             .property("owner_team", "vision")
             .execute())
    """

    def __init__(
        self,
        spark: SparkSession,
        mode: BuildMode,
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self._spark = spark
        self._mode = mode
        self._storage_options = dict(storage_options or {})
        self._name: str | None = None
        self._location: str | None = None
        self._columns: list[_Column | str] = []  # a str: DDL columns, parsed by execute()
        self._properties: dict[str, str] = {}
        self._comment: str | None = None

    def __repr__(self) -> str:
        return f"LanceTableBuilder({self._mode.value}, name={self._name!r}, location={self._location!r})"

    # --- declaring --------------------------------------------------------------------------

    @arguments.checked(identifier=arguments.NAME)
    def tableName(self, identifier: str) -> LanceTableBuilder:
        """The catalog name (``name`` or ``db.name``); the entry is created with the table.

        Example::

            LanceTable.create(spark).tableName("pets").location("/data/pets.lance")
        """
        if _spark.parse_identifier(identifier) is None:
            raise InvalidArgumentError(
                "LanceTableBuilder.tableName() argument 'identifier' takes a table name such as "
                f"'pets' or 'db.pets', not {identifier!r}"
            )
        self._name = identifier
        return self

    @arguments.checked(location=arguments.PATH)
    def location(self, location: str) -> LanceTableBuilder:
        """Where the Lance table lives (a path or an object store URI).

        Example::

            LanceTable.create(spark).location("s3://bucket/pets.lance")
        """
        self._location = location
        return self

    @arguments.checked(
        colName=arguments.NAME,
        dataType=arguments.DATA_TYPE,
        nullable=arguments.FLAG,
        comment=arguments.TEXT.orNone(),
        blob=arguments.FLAG,
    )
    def addColumn(
        self,
        colName: str,
        dataType: str | DataType,
        *,
        nullable: bool = True,
        comment: str | None = None,
        blob: bool = False,
    ) -> LanceTableBuilder:
        """Add a column: ``dataType`` a Spark ``DataType`` or a Spark SQL type
        (``"bigint"``, ``"array<float>"``, ``"struct<x: int>"``); ``comment`` is kept in the
        Lance field metadata (``DESCRIBE`` shows it); ``blob`` makes a binary column a Lance
        blob column (as the ``<col>.lance.encoding=blob`` write option).

        Example::

            builder.addColumn("id", "bigint", nullable=False).addColumn("score", DoubleType())
        """
        if isinstance(dataType, str) and not dataType.strip():
            raise InvalidArgumentError(
                f"LanceTableBuilder.addColumn() argument 'dataType' of {colName!r} takes a Spark "
                "DataType or a Spark SQL type name such as 'bigint', not ''"
            )
        declared = [c.name for c in self._columns if isinstance(c, _Column)]
        _check_new_name(colName, declared)
        self._columns.append(_Column(colName, dataType, nullable, comment, blob))
        return self

    @arguments.checked(cols=arguments.COLUMNS)
    def addColumns(self, cols: StructType | Sequence[StructField] | str) -> LanceTableBuilder:
        """Add several columns: a ``StructType`` (or its fields) or a DDL column list
        (``"id bigint NOT NULL, label string COMMENT 'the label'"``).

        Example::

            builder.addColumns("id bigint NOT NULL, label string")
            builder.addColumns(df.schema)
        """
        if isinstance(cols, str):
            if not cols.strip():
                raise InvalidArgumentError(
                    "LanceTableBuilder.addColumns() argument 'cols' takes a non-empty DDL column "
                    f"list such as 'id bigint, label string', not {cols!r}"
                )
            self._columns.append(cols)
            return self
        fields = cols.fields if isinstance(cols, StructType) else cols
        for f in fields:
            comment = (f.metadata or {}).get(COMMENT_KEY)
            self.addColumn(f.name, f.dataType, nullable=f.nullable, comment=comment)
        return self

    @arguments.checked(key=arguments.NAME, value=arguments.TEXT)
    def property(self, key: str, value: str) -> LanceTableBuilder:
        """A table property (Lance's table config; ``SHOW TBLPROPERTIES`` shows it).

        Example::

            builder.property("owner_team", "vision")
        """
        check_property_keys([key])
        self._properties[key] = value
        return self

    @arguments.checked(comment=arguments.TEXT)
    def comment(self, comment: str) -> LanceTableBuilder:
        """The table's comment (kept in the table config under ``comment``).

        Example::

            builder.comment("pets seen by the cameras")
        """
        self._comment = comment
        return self

    # --- creating ---------------------------------------------------------------------------

    def execute(self) -> LanceTable:
        """Create (or replace) the table; returns it.

        ``create``: :class:`TableAlreadyExistsError` when a Lance table is at the location or
        the catalog has the name. ``createIfNotExists``: an existing table is returned
        unchanged (given a ``tableName`` the catalog lacks, its entry is made). ``replace``
        (:class:`TableNotFoundError` when there is no table) and ``createOrReplace``: one new
        version with the declared columns and no rows; history, tags and Lance's own
        settings are kept, the properties and comment become the declared ones.

        Example::

            t = LanceTable.createIfNotExists(spark).location(uri).addColumn("id", "int").execute()
        """
        from lance_spark.table.lance_table import LanceTable

        spark = self._spark
        schema = self.declared_schema(
            lambda text: _spark.parse_data_type(spark, text),
            lambda ddl: _spark.parse_schema(spark, ddl),
        )
        storage = {**session_storage(spark), **self._storage_options}
        sql_name = self._sql_name()
        in_catalog = sql_name is not None and bool(spark.catalog.tableExists(sql_name))
        uri = self._uri(sql_name if in_catalog else None)
        exists = dataset.table_exists(uri, storage=storage)
        named = f"table {self._name!r} (the Lance table at {uri!r})" if self._name else repr(uri)
        if (in_catalog or exists) and self._mode is BuildMode.CREATE:
            raise TableAlreadyExistsError(
                f"LanceTable.create(): {named} already exists"
                + (" in the catalog" if in_catalog else "")
                + "; use createIfNotExists() to keep it, createOrReplace() or replace() to "
                "replace it"
            )
        if exists and self._mode is BuildMode.CREATE_IF_NOT_EXISTS:
            if sql_name is not None and not in_catalog:
                catalog.create_entry(spark, sql_name, uri, storage)
            return self._table(LanceTable, uri, sql_name)
        if not exists and self._mode is BuildMode.REPLACE:
            raise TableNotFoundError(
                f"LanceTable.replace(): there is no {named} to replace; use createOrReplace() "
                "to create it"
            )
        managed = sql_name is not None and not in_catalog and self._location is None
        if managed and not exists and _spark.serves_lance_tables(spark):
            # The session catalog makes the entry (managed, so DROP deletes the table and
            # RENAME TO moves it) and the Lance table, in one statement.
            self._create_managed(str(sql_name), schema)
            self._set_config(uri, storage, replace=False)
            return self._table(LanceTable, uri, sql_name)
        self._commit(uri, storage, schema, replace=exists)
        if sql_name is not None:
            if in_catalog:
                catalog.recreate_entry(spark, sql_name, uri, storage)
            else:
                catalog.create_entry(spark, sql_name, uri, storage)
        return self._table(LanceTable, uri, sql_name)

    def declared_schema(self, parse_type: TypeParser, parse_ddl: SchemaParser) -> StructType:
        """The declared columns as a ``StructType`` (comments in the field metadata); type
        names and DDL lists parsed with ``parse_type`` / ``parse_ddl``. Raises on no column
        or a name declared twice."""
        columns: list[_Column] = []
        for entry in self._columns:
            if isinstance(entry, str):
                parsed = parse_ddl(entry)
                columns += [
                    _Column(f.name, f.dataType, f.nullable, (f.metadata or {}).get(COMMENT_KEY))
                    for f in parsed.fields
                ]
            else:
                columns.append(entry)
        if not columns:
            raise InvalidOptionError(
                f"LanceTable.{self._mode.value}() needs at least one column: "
                ".addColumn(name, type) or .addColumns('name type, ...')"
            )
        seen: list[str] = []
        fields = []
        for c in columns:
            _check_new_name(c.name, seen)
            seen.append(c.name)
            data_type = parse_type(c.data_type) if isinstance(c.data_type, str) else c.data_type
            metadata = {} if c.comment is None else {COMMENT_KEY: c.comment}
            fields.append(StructField(c.name, data_type, c.nullable, metadata))
        return StructType(fields)

    # --- helpers ----------------------------------------------------------------------------

    def _sql_name(self) -> str | None:
        """The name as SQL (each part quoted), or None."""
        if self._name is None:
            return None
        parts = _spark.parse_identifier(self._name) or (self._name,)
        return ".".join(_spark.quote_identifier(p) for p in parts)

    def _uri(self, catalog_name: str | None) -> str:
        """The table's location: the declared one, or the catalog entry's."""
        from lance_spark.table.lance_table import LanceTable

        declared = None if self._location is None else normalise_uri(self._location)
        if catalog_name is not None:
            entry = LanceTable.forName(self._spark, catalog_name).uri
            if declared is not None and not same_location(entry, declared):
                raise InvalidOptionError(
                    f"table {self._name!r} is in the catalog at {entry!r}, not at the location "
                    f"{self._location!r} given; leave location() out or drop the table first"
                )
            return entry
        if declared is not None:
            return declared
        if self._name is not None:
            return default_location(self._spark, self._name)  # a managed table
        raise InvalidOptionError(
            f"LanceTable.{self._mode.value}() needs .location(path) (or the .tableName() of "
            "a catalog table)"
        )

    def _commit(
        self, uri: str, storage: Mapping[str, str], schema: StructType, *, replace: bool
    ) -> None:
        """One version with the declared columns and no rows, then the properties."""
        plain = StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields])
        writer = plan_write(
            uri=uri,
            spark_schema=plain,
            overwrite=replace,
            # A replace declares the table's new columns (Delta's replace).
            options=WriteOptions(
                uri=uri,
                storage=storage,
                overwrite_schema=replace,
                blob_columns=tuple(
                    c.name for c in self._columns if isinstance(c, _Column) and c.blob
                ),
            ),
            app_id=_spark.app_id(self._spark),
            nullable_columns=False,  # NOT NULL stays, as in CREATE TABLE
        )
        comments = {
            f.name: f.metadata[COMMENT_KEY] for f in schema.fields if COMMENT_KEY in f.metadata
        }
        writer.target = with_comments(writer.target, comments)
        parameters = {"properties": json.dumps(self._properties, sort_keys=True)}
        if self._comment is not None:
            parameters["description"] = self._comment
        writer.commit_results([], operation=self._operation(replace), parameters=parameters)
        self._set_config(uri, storage, replace=replace)

    def _create_managed(self, sql_name: str, schema: StructType) -> None:
        columns = ", ".join(
            f"{_spark.quote_identifier(f.name)} {f.dataType.simpleString()}"
            + ("" if f.nullable else " NOT NULL")
            + (
                f" COMMENT {_spark.sql_string(str(f.metadata[COMMENT_KEY]))}"
                if COMMENT_KEY in (f.metadata or {})
                else ""
            )
            for f in schema.fields
        )
        # No OPTIONS: storage options may hold secrets, which the metastore would keep.
        _spark.plain_sql(self._spark)(f"CREATE TABLE {sql_name} ({columns}) USING {FORMAT_NAME}")

    def _operation(self, replaced: bool) -> str:
        if self._mode is BuildMode.CREATE_OR_REPLACE:
            return "CREATE OR REPLACE TABLE"
        return "REPLACE TABLE" if replaced else "CREATE TABLE"

    def _set_config(self, uri: str, storage: Mapping[str, str], *, replace: bool) -> None:
        wanted = dict(self._properties)
        if self._comment is not None:
            wanted[catalog.TABLE_COMMENT_KEY] = self._comment
        ds = dataset.open_latest(uri, storage=storage)
        current = catalog.properties(ds)
        updates: dict[str, str | None] = {k: v for k, v in wanted.items() if current.get(k) != v}
        if replace:
            updates.update(
                {
                    k: None
                    for k in current
                    if k not in wanted and not k.startswith(_LANCE_CONFIG_PREFIX)
                }
            )
        if updates:
            ds.update_config(updates)

    def _table(self, cls: type[LanceTable], uri: str, sql_name: str | None) -> LanceTable:
        table = cls(self._spark, uri, self._storage_options)
        table._name = self._name if sql_name is not None else None
        return table


def _check_new_name(name: str, declared: Sequence[str]) -> None:
    clash = next((d for d in declared if d.lower() == name.lower()), None)
    if clash is not None:
        raise SchemaMismatchError(
            f"column {name!r} is declared twice ({clash!r} already; Spark compares names "
            f"case-insensitively); columns: {', '.join(declared)}"
        )
