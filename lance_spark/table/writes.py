"""Catalog writes on Lance tables: ``df.writeTo(t)``, ``saveAsTable``, ``insertInto``, the save
modes Spark refuses a Python data source, and managed tables.

Spark 4.3 gives a Python data source neither a catalog table's location nor its name on these
calls (see :func:`lance_spark._spark.install_write_hooks`), so each one on a Lance table is
done here as what the source can do: a write by path (one Lance version), then the catalog
entry made or re-made to match. A call on any other table is left to Spark.

Managed tables: a Lance table created without a location lives at Spark's default location
for its name (``<database location>/<table name>``), and a table whose location is that path
is managed: ``DROP TABLE`` deletes its data, as Spark does for its own managed tables. Every
other Lance catalog table is external: dropping it keeps the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from lance_spark import _spark
from lance_spark._spark import WriteRequest
from lance_spark.errors import (
    InvalidOptionError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from lance_spark.source import dataset
from lance_spark.source.datasource import FORMAT_NAME, normalise_uri
from lance_spark.source.options import OVERWRITE_SCHEMA, PATH, REPLACE_WHERE, parse_write_options
from lance_spark.source.session import session_storage
from lance_spark.table import schema as _schema
from lance_spark.table.catalog import create_entry, entry, recreate_entry
from lance_spark.table.context import TableContext

# Calls that the companion's session catalog does (createTable / stageCreate / stageReplace
# and its table's writes), when it is the session catalog.
_CATALOG_CALLS = frozenset(
    {"saveAsTable", "insertInto", "create", "replace", "createOrReplace", "append", "overwrite"}
)
# Calls for which Spark takes its default format (parquet) when none is given, even when the
# table exists and is a Lance table.
_TAKE_A_FORMAT = frozenset({"saveAsTable", "create", "replace", "createOrReplace"})
_ERROR_MODES = frozenset({"error", "errorifexists", "default"})
_SAVE_MODES = _ERROR_MODES | {"ignore", "append", "overwrite"}
_NOT_PARTITIONED = (
    "Lance tables are not partitioned ({what}): a scalar index makes filters on a column fast "
    "(LanceTable.createIndex(column, 'BTREE' or 'BITMAP')), and "
    ".option('replaceWhere', predicate) replaces the rows of one slice, as partition "
    "overwrites do"
)


@dataclass(frozen=True)
class CatalogTable:
    """A catalog table as the writes see it: ``uri`` None when it is not a Lance table."""

    name: str
    uri: str | None


def handle(req: WriteRequest) -> bool:
    """Do ``req`` when it is a write to a Lance table Spark cannot do itself; False leaves
    the call to Spark (other formats, other tables, the calls Spark does right)."""
    if req.call == "save":
        return _save(req) if _is_lance(req.source) else False
    if req.table is None:
        return False
    target = catalog_table(req.spark, req.table)
    wanted = _is_lance(req.source) or (
        req.source is None and target is not None and target.uri is not None
    )
    if not wanted:
        return False
    if target is not None and target.uri is None:
        if req.call in ("replace", "createOrReplace"):
            raise InvalidOptionError(
                f"table {req.table} exists and is not a Lance table: drop it before "
                f"{req.call}() makes it one"
            )
        return False  # Spark's own error (a format mismatch, an existing table)
    _check_not_partitioned(req)
    if req.call in _CATALOG_CALLS and _spark.serves_lance_tables(req.spark):
        if req.source is None and req.call in _TAKE_A_FORMAT:
            return _as_lance(req)
        return False  # the companion's session catalog does it: Spark's own call
    if req.call == "saveAsTable":
        return _save_as_table(req, target)
    if req.call == "insertInto":
        return _insert_into(req, target)
    if req.call in ("create", "replace", "createOrReplace"):
        return _create_or_replace(req, target)
    if target is None:
        return False  # append / overwrite of a missing table: Spark's TABLE_OR_VIEW_NOT_FOUND
    uri = _uri(target)
    if req.call == "append":
        _write(req.df, uri, "append", req.options)
    elif req.call == "overwrite":
        condition = req.condition
        options = dict(req.options)
        if condition is not None:
            # Renamed columns are fresh attributes: the condition's SQL names them without
            # the catalog's qualifier (spark_catalog.default.t.c), as Lance needs.
            table = req.spark.table(req.table)
            options[REPLACE_WHERE] = _spark.condition_sql(table.toDF(*table.columns), condition)
        _write(req.df, uri, "overwrite", options)
    else:  # overwritePartitions
        raise InvalidOptionError(
            _NOT_PARTITIONED.format(what=f"overwritePartitions() on {req.table}")
            + "; use writeTo(t).overwrite(condition) or createOrReplace()"
        )
    return True


def default_location(spark: SparkSession, name: str) -> str:
    """Where Spark puts the managed table ``name``: its database's location / the table's
    name in lower case."""
    parts = _spark.parse_identifier(name)
    if not parts:
        raise InvalidOptionError(f"{name!r} is not a table name")
    database = parts[-2] if len(parts) > 1 else spark.catalog.currentDatabase()
    location = normalise_uri(spark.catalog.getDatabase(database).locationUri)
    return f"{location.rstrip('/')}/{parts[-1].lower()}"


def is_managed(spark: SparkSession, name: str, uri: str) -> bool:
    """True when the catalog table ``name`` at ``uri`` is managed (``uri`` is its default
    location): dropping it deletes its data."""
    return same_location(uri, default_location(spark, name))


def same_location(a: str, b: str) -> bool:
    """True when the locations ``a`` and ``b`` are one (``file:`` and a trailing ``/`` aside)."""
    return normalise_uri(a).rstrip("/") == normalise_uri(b).rstrip("/")


def catalog_table(spark: SparkSession, name: str) -> CatalogTable | None:
    """The catalog table ``name`` (None: there is none)."""
    found = entry(spark, name)
    return None if found is None else CatalogTable(name, found.lance_location)


def _as_lance(req: WriteRequest) -> bool:
    """``req`` with the format ``lance``, as Spark's own call. Spark limit (4.3):
    ``saveAsTable`` and ``writeTo(t).replace() / createOrReplace()`` without a format take
    the default source, not the existing table's; a Lance table stays a Lance table, as a
    Delta table stays Delta. Can go when Spark takes the existing table's provider."""
    if req.call == "saveAsTable":
        writer = req.df.write.format(FORMAT_NAME).options(**req.options)
        if req.mode is not None:
            writer = writer.mode(req.mode)
        writer.saveAsTable(req.table or "")
        return True
    v2 = req.df.writeTo(req.table or "").using(FORMAT_NAME).options(**req.options)
    for key, value in req.properties.items():
        v2 = v2.tableProperty(key, value)
    getattr(v2, req.call)()
    return True


# --- df.write.format("lance").save(path) ----------------------------------------------------


def _save(req: WriteRequest) -> bool:
    _check_not_partitioned(req)
    mode = (req.mode or "errorifexists").lower()
    if mode not in _ERROR_MODES and mode != "ignore":
        return False  # append, overwrite: the source does them; a bad mode: Spark's error
    options = dict(req.options)
    path = req.path or options.pop(PATH, None)
    if path is None:
        return False  # Spark's own error
    uri = normalise_uri(path)
    if dataset.table_exists(uri, storage=_storage(req.spark, options)):
        if mode == "ignore":
            return True
        raise TableAlreadyExistsError(
            f"a Lance table already exists at {uri!r} and the save mode is ErrorIfExists (the "
            "default): use mode('append') to add rows, mode('overwrite') to replace them"
        )
    _write(req.df, uri, "append", options)
    return True


# --- saveAsTable / insertInto -----------------------------------------------------------------


def _save_as_table(req: WriteRequest, target: CatalogTable | None) -> bool:
    name = req.table or ""
    mode = (req.mode or "errorifexists").lower()
    if mode not in _SAVE_MODES:
        return False  # Spark's error for an unknown mode
    options = dict(req.options)
    path = options.pop(PATH, None)
    storage = _storage(req.spark, options)
    if target is not None:
        uri = _uri(target)
        if path is not None and not same_location(path, uri):
            raise InvalidOptionError(
                f"saveAsTable({name!r}) with path {path!r}: the table is at {uri!r}; "
                "drop the path option, or drop the table to move it"
            )
        if mode in _ERROR_MODES:
            raise TableAlreadyExistsError(
                f"table {name} already exists and the save mode is ErrorIfExists (the "
                "default): use mode('append') to add rows, mode('overwrite') to replace them"
            )
        if mode == "ignore":
            return True
        _write(req.df, uri, mode, options)
        if mode == "overwrite":
            recreate_entry(req.spark, name, uri, storage)
        return True
    uri = normalise_uri(path) if path is not None else default_location(req.spark, name)
    if dataset.table_exists(uri, storage=storage):
        if path is None:
            raise TableAlreadyExistsError(
                f"the location of the new managed table {name}, {uri!r}, already holds a "
                f"Lance table: register it with CREATE TABLE {name} USING lance LOCATION "
                f"'{uri}', or remove it"
            )
        if mode in _ERROR_MODES:
            raise TableAlreadyExistsError(
                f"a Lance table already exists at {uri!r} and the save mode is ErrorIfExists "
                "(the default): use mode('append') or mode('overwrite'), or another path"
            )
        if mode == "ignore":
            return True
        _write(req.df, uri, mode, options)
    else:
        _write(req.df, uri, "append", options)
    create_entry(req.spark, name, uri, storage)
    return True


def _insert_into(req: WriteRequest, target: CatalogTable | None) -> bool:
    if target is None:
        return False  # Spark's TABLE_OR_VIEW_NOT_FOUND
    name = target.name
    columns = req.spark.table(name).columns
    given = req.df.columns
    if len(given) != len(columns):
        raise SchemaMismatchError(
            f"insertInto({name!r}) matches columns by position: the DataFrame has "
            f"{len(given)} ({', '.join(given)}), the table {len(columns)} "
            f"({', '.join(columns)}); use writeTo({name!r}).append() to match them by name"
        )
    overwrite = req.overwrite if req.overwrite is not None else (req.mode or "") == "overwrite"
    _write(req.df.toDF(*columns), _uri(target), "overwrite" if overwrite else "append", req.options)
    return True


# --- writeTo(t).create() / replace() / createOrReplace() ----------------------------------------


def _create_or_replace(req: WriteRequest, target: CatalogTable | None) -> bool:
    name = req.table or ""
    properties = dict(req.properties)
    location = properties.pop("location", None)
    _schema.check_property_keys(properties)  # before anything is written
    storage = _storage(req.spark, req.options)
    if req.call == "create" and target is not None:
        raise TableAlreadyExistsError(
            f"table {name} already exists: writeTo({name!r}).create() makes a new table; use "
            "append(), overwrite(condition), replace() or createOrReplace()"
        )
    if req.call == "replace" and target is None:
        raise TableNotFoundError(
            f"table {name} does not exist, so replace() has nothing to replace; use create() "
            "or createOrReplace()"
        )
    if target is not None:
        uri = _uri(target)
        if location is not None and not same_location(location, uri):
            raise InvalidOptionError(
                f"{req.call}() of table {name} at {location!r}: the table is at {uri!r}; a "
                "replace keeps the location (drop the table to move it)"
            )
        # Delta's replace: one new version with the new rows and schema; history is kept.
        _write(req.df, uri, "overwrite", {**req.options, OVERWRITE_SCHEMA: "true"})
        _set_properties(req.spark, uri, storage, properties)
        recreate_entry(req.spark, name, uri, storage)
        return True
    uri = normalise_uri(location) if location is not None else default_location(req.spark, name)
    if dataset.table_exists(uri, storage=storage):
        raise TableAlreadyExistsError(
            f"a Lance table already exists at {uri!r}: register it with CREATE TABLE {name} "
            f"USING lance LOCATION '{uri}' and write to it, or choose another location"
        )
    _write(req.df, uri, "append", req.options)
    _set_properties(req.spark, uri, storage, properties)
    create_entry(req.spark, name, uri, storage)
    return True


# --- helpers ------------------------------------------------------------------------------------


def _uri(target: CatalogTable) -> str:
    if target.uri is None:
        raise TableNotFoundError(f"catalog table {target.name} is not a Lance table")
    return normalise_uri(target.uri)


def _write(df: DataFrame, uri: str, mode: str, options: Mapping[str, str]) -> None:
    df.write.format(FORMAT_NAME).mode(mode).options(**options).save(uri)


def _storage(spark: SparkSession, options: Mapping[str, str]) -> Mapping[str, str]:
    return parse_write_options(
        {k: v for k, v in options.items() if k.lower().startswith("storage.")},
        session_storage=session_storage(spark),
    ).storage


def _set_properties(
    spark: SparkSession, uri: str, storage: Mapping[str, str], properties: Mapping[str, str]
) -> None:
    if properties:
        _schema.set_properties(TableContext(spark, uri, storage), properties)


def _check_not_partitioned(req: WriteRequest) -> None:
    if req.partition_by:
        what = f"partitionBy({', '.join(repr(c) for c in req.partition_by)})"
        raise InvalidOptionError(_NOT_PARTITIONED.format(what=what))


def _is_lance(source: str | None) -> bool:
    return source is not None and source.lower() == FORMAT_NAME
