"""The SQL front: statements on Lance tables that Spark cannot run by itself.

``register(spark)`` wraps ``spark.sql`` of that one session. Each statement is parsed with
sqlglot (Spark dialect); a statement that is not one this module handles, or that does not
parse, goes to Spark unchanged, so its result and its errors are Spark's own.

Handled now:

- ``lance_search('name', ...)``: a catalog table's name becomes its location (see
  :mod:`lance_spark.sql.search`), whatever the rest of the statement is.

- ``CREATE TABLE t (cols) USING lance LOCATION 'uri'``: Spark stores such a table in the
  catalog without calling the data source, so readers and writers would later get neither
  options nor the table's path. The front lets Spark create the entry, creates the (empty)
  Lance table, and re-creates the entry without columns so that Spark asks the data source
  for the schema, which carries the path in its field metadata.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot import expressions as exp

from lance_spark._spark import PLAIN_SQL_ATTR, WriteRequest, companion_statement, sql_string
from lance_spark.errors import InvalidOptionError, SchemaMismatchError, TableAlreadyExistsError
from lance_spark.source import dataset
from lance_spark.source import writer as _writer
from lance_spark.source.datasource import FORMAT_NAME, SessionDefaults, _normalise_uri
from lance_spark.source.options import parse_write_options
from lance_spark.source.session import DEFAULTS_ATTR, session_storage
from lance_spark.source.staging import remove_table
from lance_spark.sql import params
from lance_spark.sql.search import resolve_table_names
from lance_spark.sql.targets import parse_sql
from lance_spark.table import writes as _writes
from lance_spark.table.catalog import create_entry
from lance_spark.table.context import TableContext
from lance_spark.table.schema import check_property_keys, set_properties

_MARKER = "_lance_spark_sql_installed"
_REPLACE_TABLE = re.compile(r"\s*REPLACE\s+TABLE\s", re.I)


@dataclass(frozen=True)
class CreateTable:
    """``CREATE TABLE [IF NOT EXISTS] name (cols) USING lance LOCATION 'uri' [OPTIONS (...)]``."""

    name: str
    location: str | None
    options: dict[str, str]
    if_not_exists: bool
    query: str | None = None  # CREATE TABLE ... AS <query>
    replace: bool = False  # CREATE OR REPLACE TABLE
    replace_only: bool = False  # REPLACE TABLE: the table must exist
    columns: bool = True  # a column list was given
    properties: dict[str, str] = field(default_factory=dict)  # TBLPROPERTIES


def install(spark: SparkSession, defaults: SessionDefaults) -> None:
    """Wrap ``spark.sql`` of this session (once; ``defaults`` are updated every time)."""
    setattr(spark, DEFAULTS_ATTR, defaults)
    if getattr(spark, _MARKER, False):
        return
    original: Callable[..., DataFrame] = spark.sql
    setattr(spark, PLAIN_SQL_ATTR, original)

    @functools.wraps(original)
    def sql(sqlQuery: str, args: Any = None, **kwargs: Any) -> DataFrame:
        sqlQuery = resolve_table_names(spark, sqlQuery)
        if not kwargs:
            # With args: the statement with its markers bound, for the front's statements
            # only; anything else goes to Spark as given, which binds them itself.
            bound = sqlQuery if args is None else params.bind(sqlQuery, args)
            if bound is not None:
                handled = _dispatch(spark, original, bound)
                if handled is not None:
                    return handled
        return original(sqlQuery, args, **kwargs)

    spark.sql = sql  # type: ignore[method-assign]
    setattr(spark, _MARKER, True)


def _dispatch(spark: SparkSession, run: Callable[..., DataFrame], text: str) -> DataFrame | None:
    """Run ``text`` when it is a Lance statement; None leaves it to Spark. The text is parsed
    with sqlglot once here (CREATE TABLE, time travel); MERGE / UPDATE / DELETE and the
    Delta-style commands are first recognised from their tokens."""
    from lance_spark.sql import commands, dml

    call = companion_statement(spark, text)
    if call is not None:  # the companion's statements (see companion_statement)
        return run(call)
    tree = _parse_or_none(text)
    statement = _create_table_statement(tree)
    if statement is None and tree is None and _REPLACE_TABLE.match(text):
        # sqlglot does not parse REPLACE TABLE; Spark's own drops the catalog entry, then
        # fails in the source (no location): read it as CREATE OR REPLACE of an existing table.
        replaced = _create_table_statement(_parse_or_none("CREATE OR " + text.lstrip()))
        if replaced is not None:
            statement = dataclasses.replace(replaced, replace_only=True)
    if statement is not None:
        return _create_table(spark, run, text, statement)
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind", "")).upper() == "TABLE":
        return _drop_table(spark, run, text, tree)
    # DML first: WITH ... MERGE INTO is a statement, not a query to time-travel.
    result = dml.run_statement(spark, run, text)
    if result is None:
        result = commands.run_statement(spark, run, text)
    return result


def parse(text: str) -> CreateTable | None:
    """The Lance statement in ``text``, or None when Spark should run it unchanged."""
    return _create_table_statement(_parse_or_none(text))


def _parse_or_none(text: str) -> exp.Expr | None:
    try:
        return parse_sql(text)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None  # Spark's parser reports it (an unclosed quote or comment: TokenError)


def _create_table_statement(tree: exp.Expr | None) -> CreateTable | None:
    if not isinstance(tree, exp.Create) or str(tree.args.get("kind", "")).upper() != "TABLE":
        return None
    query = tree.expression
    props = tree.args.get("properties")
    provider = location = None
    options: dict[str, str] = {}
    properties: dict[str, str] = {}
    for prop in props.expressions if props else []:
        if isinstance(prop, exp.FileFormatProperty):
            provider = prop.this.name
        elif isinstance(prop, exp.LocationProperty):
            location = prop.this.name
        elif isinstance(prop, exp.OptionsProperty):
            options = {p.this.name: p.args["value"].name for p in prop.expressions}
        elif isinstance(prop, exp.Property) and prop.args.get("value") is not None:
            properties[prop.name] = prop.args["value"].name
    if (provider or "").lower() != FORMAT_NAME:
        return None
    replace = bool(tree.args.get("replace"))
    columns = isinstance(tree.this, exp.Schema)
    if query is None and not columns and location is not None and not replace:
        return None  # an existing table registered: Spark asks the source for the schema
    table = tree.this.this if columns else tree.this
    return CreateTable(
        name=table.sql(dialect="spark"),
        location=location,
        options=options,
        if_not_exists=bool(tree.args.get("exists")),
        query=None if query is None else query.sql(dialect="spark"),
        replace=replace,
        columns=columns,
        properties=properties,
    )


def _create_table_as(
    spark: SparkSession, run: Callable[..., DataFrame], text: str, stmt: CreateTable, query: str
) -> DataFrame:
    """CTAS and CREATE OR REPLACE: Spark's own would call the writer without the location
    (Python data sources get no path), so the connector writes the query's rows (one
    version) and makes the catalog entry, as ``df.writeTo(t).create()`` does."""
    if not stmt.replace and spark.catalog.tableExists(stmt.name):
        # IF NOT EXISTS: nothing to do; otherwise Spark raises TABLE_OR_VIEW_ALREADY_EXISTS.
        return spark.createDataFrame([], StructType([])) if stmt.if_not_exists else run(text)
    properties = dict(stmt.properties)
    if stmt.location is not None:
        properties["location"] = stmt.location
    # The session's spark.sql: the query may read Lance tables by path or VERSION AS OF.
    frame = spark.sql(query)
    _writes.handle(
        WriteRequest(
            spark=spark,
            df=frame,
            call="replace"
            if stmt.replace_only
            else "createOrReplace"
            if stmt.replace
            else "create",
            source=FORMAT_NAME,
            table=stmt.name,
            options=dict(stmt.options),
            properties=properties,
        )
    )
    return spark.createDataFrame([], StructType([]))


def _create_table(
    spark: SparkSession, run: Callable[..., DataFrame], text: str, stmt: CreateTable
) -> DataFrame:
    check_property_keys(stmt.properties)  # before anything is created
    if stmt.query is not None:
        return _create_table_as(spark, run, text, stmt, stmt.query)
    if not stmt.columns:
        raise InvalidOptionError(
            f"CREATE {'OR REPLACE ' if stmt.replace else ''}TABLE {stmt.name} USING lance needs "
            "columns, AS SELECT ..., or the LOCATION of an existing Lance table"
        )
    if stmt.replace:
        raise InvalidOptionError(
            f"{'REPLACE' if stmt.replace_only else 'CREATE OR REPLACE'} TABLE {stmt.name} "
            "(columns) USING lance is not supported: "
            "replace with AS SELECT ..., or DROP TABLE and CREATE TABLE"
        )
    location = stmt.location or _writes.default_location(spark, stmt.name)
    defaults: SessionDefaults = getattr(spark, DEFAULTS_ATTR)
    # Bad OPTIONS fail before the catalog entry is made.
    options = parse_write_options(stmt.options, session_storage=defaults.storage)
    existed = spark.catalog.tableExists(stmt.name)
    # A managed table's entry is made external at its default location: Spark's own DROP of
    # a managed entry (below) would delete the Lance table written there.
    result = run(text if stmt.location is not None else _with_location(text, location))
    if existed:
        return result  # IF NOT EXISTS on an existing table: Spark did nothing, nor do we
    schema = spark.table(stmt.name).schema
    uri = _normalise_uri(location)
    if stmt.location is None and dataset.table_exists(uri, storage=options.storage):
        run(f"DROP TABLE {stmt.name}")
        raise TableAlreadyExistsError(
            f"the location of the new managed table {stmt.name}, {uri!r}, already holds a "
            f"Lance table: register it with CREATE TABLE {stmt.name} USING lance LOCATION "
            f"'{uri}', or remove it"
        )
    if dataset.table_exists(uri, storage=options.storage):
        existing = dataset.open_latest(uri, storage=options.storage).schema
        if [n.lower() for n in existing.names] != [n.lower() for n in schema.names]:
            run(f"DROP TABLE {stmt.name}")
            raise SchemaMismatchError(
                f"a Lance table already exists at {uri!r} with columns "
                f"{', '.join(existing.names)}, not {', '.join(schema.names)}; use "
                f"CREATE TABLE {stmt.name} USING lance LOCATION '{uri}' without columns"
            )
    else:
        _writer.create_empty(uri=uri, spark_schema=schema, options=options, app_id=defaults.app_id)
    run(f"DROP TABLE {stmt.name}")
    if stmt.properties:
        set_properties(TableContext(spark, uri, options.storage), stmt.properties)
    # OPTIONS were for creating the Lance table; storage options may hold secrets, which
    # must not be stored in the catalog.
    create_entry(spark, stmt.name, uri, options.storage)
    return spark.createDataFrame([], StructType([]))


def _with_location(text: str, location: str) -> str:
    """``text`` with ``LOCATION 'location'`` after its ``USING lance``."""
    tokens = sqlglot.tokenize(text, read="spark")
    for using, provider in itertools.pairwise(tokens):
        if using.text.upper() == "USING" and provider.text.lower() == FORMAT_NAME:
            end = provider.end + 1
            return f"{text[:end]} LOCATION {sql_string(location)}{text[end:]}"
    raise InvalidOptionError(f"no USING {FORMAT_NAME} in {text!r}")


def _other_catalog(spark: SparkSession, name: str) -> bool:
    """True when ``name`` is a catalog of its own (``spark.sql.catalog.<name>``), not the
    session catalog."""
    if name.lower() == "spark_catalog":
        return False
    return bool(spark.conf.get(f"spark.sql.catalog.{name}", None))


def _drop_table(
    spark: SparkSession, run: Callable[..., DataFrame], text: str, tree: exp.Drop
) -> DataFrame | None:
    """DROP TABLE of a managed Lance table deletes its data too (after the entry is gone),
    as Spark does for its managed tables; an external one keeps it. None: not a Lance table,
    Spark drops it."""
    tables = tree.args.get("tables") or []
    if len(tables) != 1 or not isinstance(tables[0], exp.Table):
        return None
    first = tables[0].parts[0].name
    if len(tables[0].parts) > 1 and _other_catalog(spark, first):
        return None  # another catalog's table (the folder catalog drops its own): Spark's
    target = _writes.catalog_table(spark, tables[0].sql(dialect="spark"))
    if target is None or target.uri is None:
        return None  # not a Lance table; or none: Spark's error, or nothing with IF EXISTS
    name, uri = target.name, _normalise_uri(target.uri)
    result = run(text)
    if _writes.is_managed(spark, name, uri):
        remove_table(uri, storage=session_storage(spark))
    return result
