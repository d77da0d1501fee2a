"""Keeping a catalog entry in step with its Lance table.

Spark keeps the columns a catalog table had when its entry was created and asks the data
source again only for a new entry. After a schema change the entry is re-created (same name,
same location, the table's properties), so that the catalog and Lance agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import lance
from pyspark.sql import DataFrame, SparkSession

from lance_spark._spark import plain_sql, serves_lance_tables, sql_pairs, sql_string
from lance_spark.source import dataset
from lance_spark.source.datasource import FORMAT_NAME

Run = Callable[..., DataFrame]
# Keys Spark refuses in TBLPROPERTIES (CatalogV2Util.TABLE_RESERVED_PROPERTIES): a Lance
# table may hold them in its config, the catalog entry cannot.
RESERVED_PROPERTIES = frozenset(
    {"provider", "location", "owner", "comment", "external", "is_managed_location"}
)


@dataclass(frozen=True)
class Entry:
    """A catalog table or view as ``DESCRIBE TABLE EXTENDED`` shows it: ``provider`` in lower
    case (empty for a view), ``location`` as the catalog records it (None: it has none)."""

    name: str
    provider: str
    location: str | None
    managed: bool = False  # Spark deletes a managed table's data when it drops the entry

    @property
    def lance_location(self) -> str | None:
        """The Lance table's location, or None: not a Lance table."""
        return self.location if self.provider == FORMAT_NAME else None


def entry(spark: SparkSession, name: str) -> Entry | None:
    """The catalog's entry ``name`` (SQL text), or None when there is no such table or view.
    The location is the entry's (the one the session catalog serves the table at): Spark's
    ``DESCRIBE TABLE EXTENDED``, which classic and Spark Connect sessions both answer."""
    from pyspark.errors import AnalysisException

    try:
        if not spark.catalog.tableExists(name):  # no error logged for a missing table
            return None
        rows = plain_sql(spark)(f"DESCRIBE TABLE EXTENDED {name}").collect()
    except AnalysisException:  # TABLE_OR_VIEW_NOT_FOUND, a malformed name
        return None
    info = {str(r[0]).strip(): str(r[1] or "").strip() for r in rows if r[0]}
    return Entry(
        name=name,
        provider=info.get("Provider", "").lower(),
        location=info.get("Location") or None,
        managed=info.get("Type", "").upper() == "MANAGED",
    )


# The table comment, in Lance's table config (the catalog keeps no comment of its own for a
# Python data source table; Spark reserves the key, so SET TBLPROPERTIES cannot clobber it).
TABLE_COMMENT_KEY = "comment"


def properties(ds: lance.LanceDataset) -> dict[str, str]:
    """The table's properties (Lance's table config)."""
    return {str(k): str(v) for k, v in ds.config().items()}


def recreate_entry(
    spark: SparkSession,
    name: str,
    uri: str,
    storage: Mapping[str, str],
    *,
    run: Run | None = None,
) -> None:
    """Bring the catalog entry ``name`` of the Lance table at ``uri`` in step with the table
    (its columns and properties, read from its latest version).

    The companion's session catalog asks Lance for a table's columns at every load, so its
    entries keep only the properties in step (``SET TBLPROPERTIES``, which changes nothing in
    Lance when the values are Lance's already). Spark's own session catalog keeps the
    columns an entry was made with: the entry is dropped and re-created there (an external
    entry only: dropping a managed one would delete the table).

    ``run`` is the ``spark.sql`` to use (default: Spark's own, never the SQL front's)."""
    execute = run or plain_sql(spark)
    config = properties(dataset.open_latest(uri, storage=storage))
    if not serves_lance_tables(spark):
        found = entry(spark, name)
        if found is None or not found.managed:
            execute(f"DROP TABLE {name}")
            _create(execute, name, uri, config)
            return
    _set_entry_properties(execute, name, config)


def create_entry(
    spark: SparkSession,
    name: str,
    uri: str,
    storage: Mapping[str, str],
    *,
    run: Run | None = None,
) -> None:
    """Create the catalog entry ``name`` of the Lance table at ``uri``
    (``CREATE TABLE name USING lance LOCATION uri``), with the table's properties (read from
    its latest version). ``run``: as in :func:`recreate_entry`."""
    config = properties(dataset.open_latest(uri, storage=storage))
    _create(run or plain_sql(spark), name, uri, config)


def _create(execute: Run, name: str, uri: str, config: Mapping[str, str]) -> None:
    execute(f"CREATE TABLE {name} USING {FORMAT_NAME} LOCATION {sql_string(uri)}")
    _set_entry_properties(execute, name, config)


def _set_entry_properties(execute: Run, name: str, config: Mapping[str, str]) -> None:
    kept = {k: v for k, v in config.items() if k.lower() not in RESERVED_PROPERTIES}
    if kept:
        # Not in CREATE TABLE: Spark would hand them to the data source as read options.
        pairs = sql_pairs(dict(sorted(kept.items())))
        execute(f"ALTER TABLE {name} SET TBLPROPERTIES ({pairs})")
