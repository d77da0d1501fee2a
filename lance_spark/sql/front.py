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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from sqlglot import expressions as exp

from lance_spark._spark import sql_string
from lance_spark.errors import InvalidOptionError, SchemaMismatchError
from lance_spark.source import dataset
from lance_spark.source import writer as _writer
from lance_spark.source.datasource import FORMAT_NAME, SessionDefaults, _normalise_uri
from lance_spark.source.options import parse_write_options
from lance_spark.source.session import DEFAULTS_ATTR
from lance_spark.sql import params
from lance_spark.sql.search import resolve_table_names
from lance_spark.sql.targets import parse_sql

_MARKER = "_lance_spark_sql_installed"


@dataclass(frozen=True)
class CreateTable:
    """``CREATE TABLE [IF NOT EXISTS] name (cols) USING lance LOCATION 'uri' [OPTIONS (...)]``."""

    name: str
    location: str | None
    options: dict[str, str]
    if_not_exists: bool
    query: str | None = None  # CREATE TABLE ... AS <query>


def install(spark: SparkSession, defaults: SessionDefaults) -> None:
    """Wrap ``spark.sql`` of this session (once; ``defaults`` are updated every time)."""
    setattr(spark, DEFAULTS_ATTR, defaults)
    if getattr(spark, _MARKER, False):
        return
    original: Callable[..., DataFrame] = spark.sql

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

    tree = _parse_or_none(text)
    statement = _create_table_statement(tree)
    if statement is not None:
        return _create_table(spark, run, text, statement)
    # DML first: WITH ... MERGE INTO is a statement, not a query to time-travel.
    result = dml.run_statement(spark, run, text)
    if result is None:
        result = commands.run_statement(spark, run, text, tree=tree)
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
    if query is None and not isinstance(tree.this, exp.Schema):
        return None  # no column list and no query: Spark calls the source itself
    props = tree.args.get("properties")
    provider = location = None
    options: dict[str, str] = {}
    for prop in props.expressions if props else []:
        if isinstance(prop, exp.FileFormatProperty):
            provider = prop.this.name
        elif isinstance(prop, exp.LocationProperty):
            location = prop.this.name
        elif isinstance(prop, exp.OptionsProperty):
            options = {p.this.name: p.args["value"].name for p in prop.expressions}
    if (provider or "").lower() != FORMAT_NAME:
        return None
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    return CreateTable(
        name=table.sql(dialect="spark"),
        location=location,
        options=options,
        if_not_exists=bool(tree.args.get("exists")),
        query=None if query is None else query.sql(dialect="spark"),
    )


def _create_table_as(
    spark: SparkSession, run: Callable[..., DataFrame], text: str, stmt: CreateTable, query: str
) -> DataFrame:
    """CTAS: Spark's own CTAS would call the writer without the LOCATION (Python data sources
    get no path), so the query's rows are written to the location by the connector, then the
    catalog entry is created."""
    if stmt.location is None:
        raise InvalidOptionError(
            f"CREATE TABLE {stmt.name} USING lance AS SELECT ... needs LOCATION 'path'"
        )
    if spark.catalog.tableExists(stmt.name):
        # IF NOT EXISTS: nothing to do; otherwise Spark raises TABLE_OR_VIEW_ALREADY_EXISTS.
        return spark.createDataFrame([], StructType([])) if stmt.if_not_exists else run(text)
    defaults: SessionDefaults = getattr(spark, DEFAULTS_ATTR)
    uri = _normalise_uri(stmt.location)
    storage = parse_write_options(stmt.options, session_storage=defaults.storage).storage
    if dataset.table_exists(uri, storage=storage):
        raise InvalidOptionError(
            f"CREATE TABLE {stmt.name} ... AS SELECT: a Lance table already exists at {uri!r}; "
            f"register it with CREATE TABLE {stmt.name} USING lance LOCATION '{uri}' and "
            "INSERT INTO it"
        )
    # The session's spark.sql: the query may read Lance tables by path or VERSION AS OF.
    spark.sql(query).write.format(FORMAT_NAME).options(**stmt.options).mode("append").save(uri)
    return run(f"CREATE TABLE {stmt.name} USING {FORMAT_NAME} LOCATION {sql_string(uri)}")


def _create_table(
    spark: SparkSession, run: Callable[..., DataFrame], text: str, stmt: CreateTable
) -> DataFrame:
    if stmt.query is not None:
        return _create_table_as(spark, run, text, stmt, stmt.query)
    if stmt.location is None:
        raise InvalidOptionError(
            f"CREATE TABLE {stmt.name} ... USING lance needs LOCATION 'path': the table lives "
            "at that path, and the catalog keeps a reference to it"
        )
    existed = spark.catalog.tableExists(stmt.name)
    result = run(text)
    if existed:
        return result  # IF NOT EXISTS on an existing table: Spark did nothing, nor do we
    schema = spark.table(stmt.name).schema
    uri = _normalise_uri(stmt.location)
    defaults: SessionDefaults = getattr(spark, DEFAULTS_ATTR)
    options = parse_write_options(stmt.options, session_storage=defaults.storage)
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
        # The creating write of a job with no rows: one version, the declared columns.
        writer = _writer.plan_write(
            uri=uri,
            spark_schema=schema,
            overwrite=False,
            options=options,
            app_id=defaults.app_id,
            nullable_columns=False,
        )
        writer.commit([])
    run(f"DROP TABLE {stmt.name}")
    # OPTIONS were for creating the Lance table; storage options may hold secrets, which
    # must not be stored in the catalog.
    return run(f"CREATE TABLE {stmt.name} USING {FORMAT_NAME} LOCATION {sql_string(uri)}")
