"""MERGE of the table API: ``LanceTable.merge``'s builder runs Spark's own MERGE statement.

The builder's clauses become the text of ``MERGE [WITH SCHEMA EVOLUTION] INTO lance.`<uri>` AS
<alias> WITH (...) USING <the source as a temporary view> AS <its alias> ON ... WHEN ...``,
which Spark plans as the companion's row-level operation (the same path as the SQL statement
from every client: Spark's analysis, cardinality check and join; the companion's key pruning;
one Lance version). :func:`lance_spark.table.changes.run_sql` adds what the table API gives
on top: the result row, the redo on a conflicting commit, and the connector's errors.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from lance_spark import _spark
from lance_spark._spark import quote_identifier
from lance_spark.errors import (
    CardinalityViolationError,
    ColumnNotFoundError,
    InvalidArgumentError,
    InvalidOptionError,
)
from lance_spark.source import row_level
from lance_spark.table import arguments, changes
from lance_spark.table.context import TableContext


class ClauseGroup(enum.Enum):
    """A MERGE's groups of WHEN clauses: their SQL, and Spark's error condition when a clause
    other than the group's last omits its condition."""

    MATCHED = ("WHEN MATCHED", "NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION")
    NOT_MATCHED = ("WHEN NOT MATCHED", "NON_LAST_NOT_MATCHED_BY_TARGET_CLAUSE_OMIT_CONDITION")
    BY_SOURCE = (
        "WHEN NOT MATCHED BY SOURCE",
        "NON_LAST_NOT_MATCHED_BY_SOURCE_CLAUSE_OMIT_CONDITION",
    )

    @property
    def sql(self) -> str:
        return self.value[0]

    @property
    def omitted_condition(self) -> str:
        return self.value[1]


class ClauseKind(enum.Enum):
    MATCHED_UPDATE = (ClauseGroup.MATCHED, "UPDATE")
    MATCHED_DELETE = (ClauseGroup.MATCHED, "DELETE")
    NOT_MATCHED_INSERT = (ClauseGroup.NOT_MATCHED, "INSERT")
    BY_SOURCE_UPDATE = (ClauseGroup.BY_SOURCE, "UPDATE")
    BY_SOURCE_DELETE = (ClauseGroup.BY_SOURCE, "DELETE")

    @property
    def group(self) -> ClauseGroup:
        return self.value[0]

    @property
    def action(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class Clause:
    """One WHEN clause. ``assignments`` None on UPDATE / INSERT means ``*``."""

    kind: ClauseKind
    condition: str | Column | None = None
    assignments: Mapping[str, str | Column] | None = None

    def describe(self) -> str:
        cond = "" if self.condition is None else f" AND {_text(self.condition)}"
        if self.kind.action == "DELETE":
            what = "DELETE"
        elif self.assignments is None:
            what = f"{self.kind.action} *"
        else:
            what = f"{self.kind.action} ({', '.join(self.assignments)})"
        return f"{self.kind.group.sql}{cond} THEN {what}"


@dataclass(frozen=True)
class MergeSpec:
    """Everything the builder's MERGE says."""

    source: DataFrame
    condition: str | Column
    clauses: tuple[Clause, ...]
    target_alias: str | None = None
    schema_evolution: bool = False


def merge(table: TableContext, *, spec: MergeSpec) -> row_level.ChangeCounts:
    """Run ``spec`` against ``table`` as Spark's MERGE: one new version (none when no row
    changes). Raises before any write for a malformed statement."""
    check_clauses(spec.clauses)
    names = table.open().schema.names
    source_alias = _spark.frame_alias(spec.source) or "source"
    source = spec.source
    # Spark evaluates the source twice when the companion prunes the target by its keys
    # (once for the keys, once in the join), and prunes only a source that gives the same
    # rows every time: one that reads data is cached for the statement, as Delta's
    # merge.materializeSource=auto does.
    cached = source.storageLevel == StorageLevel.NONE and not _spark.generates_rows(source)
    if cached:
        source.persist(StorageLevel.MEMORY_AND_DISK)
    stack = contextlib.ExitStack()
    try:
        # A Column of the source DataFrame (``src["id"]``) keeps its side: Columns are
        # resolved against the target joined with the source, under the statement's aliases.
        text = changes.SqlText(
            table,
            around=lambda target: (
                target.alias(spec.target_alias) if spec.target_alias else target
            ).crossJoin(spec.source.alias(source_alias)),
        )
        stack.enter_context(text)
        on = changes.enclosed(text(spec.condition))
        whens = " ".join(_clause_sql(c, text, names, spec.target_alias) for c in spec.clauses)
        if all(c.kind is ClauseKind.NOT_MATCHED_INSERT for c in spec.clauses):
            # Spark limit (4.3, RewriteMergeIntoTable): a MERGE that only inserts is planned
            # as a plain append, which no check against concurrent commits covers (two such
            # MERGEs could insert the same new key twice). A clause that never acts keeps it
            # the companion's row-level operation: serializable, a MERGE in the history. The
            # companion's analyzer rule LanceInsertOnlyMerge adds the same clause to SQL, but
            # only in sessions built with the extension, not in a running session `register`
            # installed the companion on; this can go when no such session is supported.
            whens += " WHEN NOT MATCHED BY SOURCE AND false THEN DELETE"
        evolution = "WITH SCHEMA EVOLUTION " if spec.schema_evolution else ""
        alias = quote_identifier(source_alias)
        try:
            return changes.run_sql(
                table,
                alias=spec.target_alias,
                statement=lambda target, relation: (
                    f"MERGE {evolution}INTO {target} USING {relation} AS {alias} ON {on} {whens}"
                ),
                source=source,
            )
        except PySparkException as err:
            if "MERGE_CARDINALITY_VIOLATION" not in str(err):
                raise
            raise CardinalityViolationError(
                f"{_first_line(err)} Nothing was committed to the Lance table at {table.uri!r}."
            ) from err
    finally:
        stack.close()
        if cached:
            source.unpersist()


def _clause_sql(
    clause: Clause, text: changes.SqlText, names: Sequence[str], target_alias: str | None
) -> str:
    condition = (
        "" if clause.condition is None else f" AND {changes.enclosed(text(clause.condition))}"
    )
    head = f"{clause.kind.group.sql}{condition} THEN"
    if clause.kind.action == "DELETE":
        return f"{head} DELETE"
    if clause.assignments is None:
        return f"{head} {clause.kind.action} {'SET *' if clause.kind.action == 'UPDATE' else '*'}"
    columns = _assigned_columns(clause, names, target_alias)
    values = [changes.enclosed(text(v)) for v in clause.assignments.values()]
    if clause.kind.action == "UPDATE":
        sets = ", ".join(f"{c} = {v}" for c, v in zip(columns, values, strict=True))
        return f"{head} UPDATE SET {sets}"
    return f"{head} INSERT ({', '.join(columns)}) VALUES ({', '.join(values)})"


def _assigned_columns(clause: Clause, names: Sequence[str], target_alias: str | None) -> list[str]:
    """The target columns an UPDATE / INSERT clause sets, quoted; an unknown one is refused."""
    by_lower = {n.lower(): n for n in names}
    columns = []
    for key in clause.assignments or {}:
        name = by_lower.get(_unqualified(key, target_alias).lower())
        if name is None:
            raise ColumnNotFoundError(
                f"'{clause.describe()}' sets column {key!r}, which the target table does not "
                f"have; columns: {', '.join(names)}"
            )
        columns.append(quote_identifier(name))
    return columns


def check_clauses(clauses: Sequence[Clause]) -> None:
    """Spark's static rules: at least one clause, and in each group only the last clause may
    omit its condition."""
    if not clauses:
        raise InvalidOptionError(
            "a MERGE needs at least one WHEN clause (whenMatchedUpdate, whenMatchedDelete, "
            "whenNotMatchedInsert, whenNotMatchedBySourceUpdate, ...)"
        )
    for group in ClauseGroup:
        of_group = [c for c in clauses if c.kind.group is group]
        for clause in of_group[:-1]:
            if clause.condition is None:
                raise InvalidOptionError(
                    f"[{group.omitted_condition}] When there are more than one {group.sql} "
                    f"clauses in a MERGE statement, only the last {group.sql} clause can omit "
                    f"the condition; '{clause.describe()}' is not the last one"
                )


def _unqualified(key: str, alias: str | None) -> str:
    if alias and key.lower().startswith(alias.lower() + "."):
        return key[len(alias) + 1 :]
    return key.strip("`")


def _text(condition: str | Column) -> str:
    if isinstance(condition, str):
        return condition
    return _spark.column_text(condition)  # the Column's SQL-like text


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0]


class LanceMergeBuilder:
    """Builds a MERGE into a Lance table; returned by :meth:`LanceTable.merge`. The names and
    semantics are Delta Lake's ``DeltaMergeBuilder``: clauses are tried in order, the first
    whose condition holds acts, and only the last clause of each kind may omit its condition.

    Example::

        (t.alias("t").merge(updates.alias("s"), "s.id = t.id")
            .whenMatchedDelete(condition="s.op = 'delete'")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
            .show())
    """

    def __init__(
        self,
        *,
        table: TableContext,
        source: DataFrame,
        condition: str | Column,
        target_alias: str | None,
        clauses: tuple[Clause, ...] = (),
        schema_evolution: bool = False,
        after_schema_change: Callable[[], None] | None = None,
    ) -> None:
        self._table = table
        self._spec = MergeSpec(source, condition, clauses, target_alias, schema_evolution)
        # Called when the MERGE added columns (LanceTable: the catalog entry's refresh).
        self._after_schema_change = after_schema_change

    @arguments.checked(condition=arguments.CONDITION.orNone(), set=arguments.ASSIGNMENTS.orNone())
    def whenMatchedUpdate(
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None
    ) -> LanceMergeBuilder:
        """Update matched target rows: ``set`` maps target columns to expressions over the
        target and the source (other columns keep their values)."""
        if not set:
            raise InvalidArgumentError(
                "LanceMergeBuilder.whenMatchedUpdate() needs set={column: expression, ...} "
                "(whenMatchedUpdateAll() sets every column)"
            )
        return self._with(Clause(ClauseKind.MATCHED_UPDATE, condition, dict(set)))

    @arguments.checked(condition=arguments.CONDITION.orNone())
    def whenMatchedUpdateAll(self, condition: str | Column | None = None) -> LanceMergeBuilder:
        """``UPDATE SET *``: every target column from the source column of the same name."""
        return self._with(Clause(ClauseKind.MATCHED_UPDATE, condition, None))

    @arguments.checked(condition=arguments.CONDITION.orNone())
    def whenMatchedDelete(self, condition: str | Column | None = None) -> LanceMergeBuilder:
        """Delete matched target rows."""
        return self._with(Clause(ClauseKind.MATCHED_DELETE, condition, None))

    @arguments.checked(
        condition=arguments.CONDITION.orNone(), values=arguments.ASSIGNMENTS.orNone()
    )
    def whenNotMatchedInsert(
        self,
        condition: str | Column | None = None,
        values: Mapping[str, str | Column] | None = None,
    ) -> LanceMergeBuilder:
        """Insert source rows no target row matches; ``values`` maps target columns to
        expressions over the source (unnamed columns are null)."""
        if not values:
            raise InvalidArgumentError(
                "LanceMergeBuilder.whenNotMatchedInsert() needs values={column: expression, ...} "
                "(whenNotMatchedInsertAll() inserts every column)"
            )
        return self._with(Clause(ClauseKind.NOT_MATCHED_INSERT, condition, dict(values)))

    @arguments.checked(condition=arguments.CONDITION.orNone())
    def whenNotMatchedInsertAll(self, condition: str | Column | None = None) -> LanceMergeBuilder:
        """``INSERT *``: every target column from the source column of the same name."""
        return self._with(Clause(ClauseKind.NOT_MATCHED_INSERT, condition, None))

    @arguments.checked(condition=arguments.CONDITION.orNone(), set=arguments.ASSIGNMENTS.orNone())
    def whenNotMatchedBySourceUpdate(
        self, condition: str | Column | None = None, set: Mapping[str, str | Column] | None = None
    ) -> LanceMergeBuilder:
        """Update target rows no source row matches (expressions over the target only)."""
        if not set:
            raise InvalidArgumentError(
                "LanceMergeBuilder.whenNotMatchedBySourceUpdate() needs "
                "set={column: expression, ...}"
            )
        return self._with(Clause(ClauseKind.BY_SOURCE_UPDATE, condition, dict(set)))

    @arguments.checked(condition=arguments.CONDITION.orNone())
    def whenNotMatchedBySourceDelete(
        self, condition: str | Column | None = None
    ) -> LanceMergeBuilder:
        """Delete target rows no source row matches."""
        return self._with(Clause(ClauseKind.BY_SOURCE_DELETE, condition, None))

    def withSchemaEvolution(self) -> LanceMergeBuilder:
        """Let ``UpdateAll`` / ``InsertAll`` add the source's extra columns to the table (null
        in rows the MERGE does not write); a table opened with ``LanceTable.forName`` gets
        its catalog entry updated too."""
        return self._copy(self._spec.clauses, schema_evolution=True)

    def execute(self) -> DataFrame:
        """Run the MERGE: one Spark job and one new version (none when nothing changes).
        Returns one row: num_affected_rows, num_updated_rows, num_deleted_rows,
        num_inserted_rows."""
        before = self._table.open().schema
        counts = merge(self._table, spec=self._spec)
        changed = counts.version is not None and self._table.open().schema.names != before.names
        if changed and self._after_schema_change is not None:
            self._after_schema_change()
        return metrics_frame(self._table.spark, counts)

    def _with(self, clause: Clause) -> LanceMergeBuilder:
        return self._copy((*self._spec.clauses, clause), self._spec.schema_evolution)

    def _copy(self, clauses: tuple[Clause, ...], schema_evolution: bool) -> LanceMergeBuilder:
        spec = self._spec
        return LanceMergeBuilder(
            table=self._table,
            source=spec.source,
            condition=spec.condition,
            target_alias=spec.target_alias,
            clauses=clauses,
            schema_evolution=schema_evolution,
            after_schema_change=self._after_schema_change,
        )


METRIC_NAMES = ("num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows")


def metrics_frame(spark: SparkSession, counts: row_level.ChangeCounts) -> DataFrame:
    """The one-row result of a MERGE, like Delta's and Spark's."""
    schema = StructType([StructField(n, LongType(), False) for n in METRIC_NAMES])
    row = (counts.affected, counts.updated, counts.deleted, counts.inserted)
    return spark.createDataFrame([row], schema)
