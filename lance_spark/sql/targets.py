"""Which table a SQL statement names: a catalog table created ``USING lance`` or a path
identifier ``lance.`/data/pets.lance``` (also ``s3://...``), or a branch of one named the
way Iceberg names branches, ``pets.branch_exp`` / ``lance.`/data/pets.lance`.branch_exp``.
Anything else is not ours."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import sqlglot
from pyspark.sql import DataFrame, SparkSession
from sqlglot import TokenType
from sqlglot import expressions as exp
from sqlglot.dialects.spark import Spark
from sqlglot.parsers.spark import SparkParser

from lance_spark.source.datasource import FORMAT_NAME, _normalise_uri
from lance_spark.source.options import MAIN_BRANCH

if TYPE_CHECKING:  # table imports the engine, which imports the SQL front
    from lance_spark.table import LanceTable

_SQLGLOT_LOG = logging.getLogger("sqlglot")

# Keywords that Spark's parser takes as names wherever a name may stand (they are not
# reserved in Spark's default mode, spark.sql.ansi.enforceReservedKeywords=false) but that
# sqlglot's Spark dialect does not: a column named ``values`` or ``insert`` works unquoted, as
# in Spark. The keywords that structure a query or an expression (SELECT, FROM, WHERE, AND,
# CASE, JOIN, ...) stay keywords here: sqlglot cannot tell them from names, so such a column
# needs backticks in the statements the front runs.
NAME_KEYWORDS = frozenset(
    {
        TokenType.VALUES,
        TokenType.ALTER,
        TokenType.CREATE,
        TokenType.DROP,
        TokenType.INSERT,
        TokenType.GRANT,
        TokenType.REVOKE,
        TokenType.ROLLBACK,
        TokenType.UNCACHE,
        TokenType.SERDE_PROPERTIES,
    }
)


class LanceSpark(Spark):
    """sqlglot's Spark dialect, with :data:`NAME_KEYWORDS` read as names."""

    class Parser(SparkParser):
        ID_VAR_TOKENS = SparkParser.ID_VAR_TOKENS | NAME_KEYWORDS

        def _parse_id_var(
            self, any_token: bool = True, tokens: Collection[TokenType] | None = None
        ) -> exp.Expr | None:
            # VALUES followed by "(" starts a list of rows (INSERT ... VALUES (...), an
            # inline table), which a column named values never is.
            following = self._next
            if (
                self._curr is not None
                and self._curr.token_type == TokenType.VALUES
                and following is not None
                and following.token_type == TokenType.L_PAREN
            ):
                return None
            found: exp.Expr | None = super()._parse_id_var(any_token, tokens)
            return found


def parse_sql(text: str) -> exp.Expr:
    """``text`` parsed with sqlglot's Spark dialect, keywords that Spark reads as names read
    as names (:class:`LanceSpark`; raises sqlglot's ParseError).

    sqlglot logs a warning for every statement it can only keep as a raw command (VACUUM,
    OPTIMIZE, ...); every ``spark.sql`` call passes through here, so those are silenced.
    """
    level = _SQLGLOT_LOG.level
    _SQLGLOT_LOG.setLevel(logging.ERROR)
    try:
        return sqlglot.parse_one(text, read=LanceSpark)
    finally:
        _SQLGLOT_LOG.setLevel(level)


def refresh_catalog_entry(
    spark: SparkSession, run: Callable[..., DataFrame], table: exp.Table, target: LanceTable
) -> None:
    """After a schema change of ``target`` (the Lance table ``table`` names), re-create a
    catalog table's entry: Spark keeps the columns it was created with, and asks the data
    source again only for a new entry. An entry describes the main branch: a change on
    another branch leaves it alone."""
    if path_of(table) is not None or target.currentBranch != MAIN_BRANCH:
        return
    from lance_spark.source.session import session_storage
    from lance_spark.table.catalog import recreate_entry

    recreate_entry(spark, table_name(table), target.uri, session_storage(spark), run=run)


def path_of(table: exp.Table) -> str | None:
    """The path of a ``lance.`<path>``` identifier, else None."""
    if table.args.get("catalog") is not None or table.db.lower() != FORMAT_NAME:
        return None
    return table.name or None


# Iceberg's spelling of a branch as a table: <table>.branch_<name>.
BRANCH_PREFIX = "branch_"


def branch_reference(table: exp.Table) -> tuple[exp.Table, str] | None:
    """(the table, the branch's name) when ``table``'s last name part is ``branch_<name>``
    after at least one other part (``pets.branch_exp``, ``lance.`/p`.branch_exp``), else
    None. Only a candidate: a catalog table of that name is still that table."""
    parts = table.parts
    last = parts[-1].name
    if len(parts) < 2 or len(parts) > 4 or len(last) <= len(BRANCH_PREFIX):
        return None
    if not last.lower().startswith(BRANCH_PREFIX):
        return None
    this, *qualifiers = [p.copy() for p in reversed(parts[:-1])]
    base = exp.Table(
        this=this,
        db=qualifiers[0] if qualifiers else None,
        catalog=qualifiers[1] if len(qualifiers) > 1 else None,
    )
    return base, last[len(BRANCH_PREFIX) :]


def lance_table(spark: SparkSession, table: exp.Table) -> LanceTable | None:
    """The Lance table ``table`` names, or None when it is not a Lance table (or absent):
    then the statement belongs to Spark. ``pets.branch_exp`` names branch ``exp`` of the
    Lance table ``pets`` when the catalog has no table of that name; an absent branch of a
    Lance table is a :class:`~lance_spark.errors.BranchNotFoundError`."""
    from lance_spark.table import LanceTable

    path = path_of(table)
    if path is not None:
        return LanceTable.forPath(spark, _normalise_uri(path))
    reference = branch_reference(table)
    base_path = None if reference is None else path_of(reference[0])
    if reference is not None and base_path is not None:  # lance.`path`.branch_b
        return LanceTable.forPath(spark, _normalise_uri(base_path)).branch(reference[1])
    from lance_spark.table.catalog import entry
    from lance_spark.table.writes import same_location

    name = table_name(table)
    found = entry(spark, name)
    location = None if found is None else found.lance_location
    if reference is not None:
        # The session catalog serves pets.branch_exp as a table at pets' location: a catalog
        # table of that name has a location of its own.
        base = lance_table(spark, reference[0])
        if base is not None and (location is None or same_location(location, base.uri)):
            return base.branch(reference[1])
    if not location:
        return None  # not a Lance table, a view, or none: Spark's own result or error
    return LanceTable.forPath(spark, _normalise_uri(location))


def table_name(table: exp.Table) -> str:
    """The table's multi-part name as Spark SQL (no alias, no time travel)."""
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p]
    return ".".join(p.sql(dialect="spark") for p in parts)
