"""MERGE: Delta's and Spark's MERGE semantics planned as one change DataFrame for ``_dml``.

The target (pinned, with row addresses) is joined with the source on the merge condition
(inner, right or full outer join, whichever the clauses need). One CASE picks, for each
joined row, the first clause in order whose kind and condition hold; further CASEs compute
the row's new values. The result is the change rows of :mod:`lance_spark.table.changes`, so MERGE runs
on the same job, commit and retry path as UPDATE and DELETE. ``LanceTable.merge`` and the SQL
front end both build a :class:`MergeSpec` and call :func:`merge`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, LongType, StructField, StructType

from lance_spark import _spark
from lance_spark._spark import quote_identifier
from lance_spark.errors import ColumnNotFoundError, InvalidArgumentError, InvalidOptionError
from lance_spark.source import commit as _commit
from lance_spark.source import conflicts, dataset, row_level
from lance_spark.source import types as _types
from lance_spark.table import arguments, merge_pruning
from lance_spark.table import changes as _dml

_TARGET_PRESENT = "__lance_spark_target_present"
_SOURCE_PRESENT = "__lance_spark_source_present"
_ACTION = "__lance_spark_action"


class ClauseKind(enum.Enum):
    MATCHED_UPDATE = ("WHEN MATCHED", "UPDATE")
    MATCHED_DELETE = ("WHEN MATCHED", "DELETE")
    NOT_MATCHED_INSERT = ("WHEN NOT MATCHED", "INSERT")
    BY_SOURCE_UPDATE = ("WHEN NOT MATCHED BY SOURCE", "UPDATE")
    BY_SOURCE_DELETE = ("WHEN NOT MATCHED BY SOURCE", "DELETE")

    @property
    def group(self) -> str:
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
        return f"{self.kind.group}{cond} THEN {what}"


@dataclass(frozen=True)
class MergeSpec:
    """Everything a MERGE statement says, however it was written (builder or SQL)."""

    source: DataFrame
    condition: str | Column
    clauses: tuple[Clause, ...]
    target_alias: str | None = None
    schema_evolution: bool = False


def merge(
    spark: SparkSession,
    *,
    uri: str,
    storage: Mapping[str, str],
    spec: MergeSpec,
    app_id: str | None,
) -> row_level.ChangeCounts:
    """Run ``spec`` against the Lance table at ``uri``: one Spark job, one new version (none
    when no row changes). Raises before any write for a malformed statement."""
    check_clauses(spec.clauses)
    by_source = any(c.kind.group == "WHEN NOT MATCHED BY SOURCE" for c in spec.clauses)
    pruner = merge_pruning.KeyPruner(
        spec.source,
        max_rows=merge_pruning.max_source_rows(spark),
        enabled=not by_source,  # those clauses act on the rows the source does not match
    )

    def plan(target: _dml.Pinned) -> _dml.ChangePlan:
        needed = _needed_columns(target, spec)
        row_filter, read_key = _pruning(pruner, target, spec)
        narrowed = _dml.narrow(spark, target, needed, storage, filter=row_filter)
        # A matched row no clause acts on is read but not changed (untouched_rows).
        read_set = conflicts.ReadSet(key=read_key, untouched_rows=True)
        plan = _plan(narrowed, spec, storage)
        return replace(plan, statement=replace(plan.statement, read_set=read_set))

    try:
        return _dml.run(spark, uri=uri, storage=storage, app_id=app_id, plan=plan)
    finally:
        pruner.release()


def _pruning(
    pruner: merge_pruning.KeyPruner, target: _dml.Pinned, spec: MergeSpec
) -> tuple[str | None, conflicts.KeyReadSet | None]:
    """The Lance filter that keeps only the target rows the source's keys can match, and
    those keys as the MERGE's read set (None, None: no equi-key, or no keys collected)."""
    tgt = _aliased(target, spec)
    key = merge_pruning.find_equi_key(tgt, spec.source, _dml.as_column(spec.condition))
    if key is None or key.target_column not in target.schema.names:
        return None, None
    keys = pruner.keys(key)
    if keys is None:
        return None, None
    read_key = conflicts.KeyReadSet(key.target_column, keys)
    return pruner.predicate(key, target.schema), read_key


def _aliased(target: _dml.Pinned, spec: MergeSpec) -> DataFrame:
    """The target's rows under the statement's target alias, if it has one."""
    return target.rows.alias(spec.target_alias) if spec.target_alias else target.rows


def check_clauses(clauses: Sequence[Clause]) -> None:
    """Spark's static rules: at least one clause, and in each group only the last clause may
    omit its condition."""
    if not clauses:
        raise InvalidOptionError(
            "a MERGE needs at least one WHEN clause (whenMatchedUpdate, whenMatchedDelete, "
            "whenNotMatchedInsert, whenNotMatchedBySourceUpdate, ...)"
        )
    codes = {
        "WHEN MATCHED": "NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION",
        "WHEN NOT MATCHED": "NON_LAST_NOT_MATCHED_BY_TARGET_CLAUSE_OMIT_CONDITION",
        "WHEN NOT MATCHED BY SOURCE": "NON_LAST_NOT_MATCHED_BY_SOURCE_CLAUSE_OMIT_CONDITION",
    }
    for group, code in codes.items():
        of_group = [c for c in clauses if c.kind.group == group]
        for clause in of_group[:-1]:
            if clause.condition is None:
                raise InvalidOptionError(
                    f"[{code}] When there are more than one {group} clauses in a MERGE "
                    f"statement, only the last {group} clause can omit the condition; "
                    f"'{clause.describe()}' is not the last one"
                )


def _needed_columns(target: _dml.Pinned, spec: MergeSpec) -> set[str]:
    """The target columns the MERGE reads: those its expressions name, and those an UPDATE
    copies unchanged into the rewritten row. An upsert by key (``UPDATE SET *`` from a source
    with every column) reads only the key: the rewritten rows take their values from the
    source."""
    tgt = _aliased(target, spec)
    joined = tgt.join(spec.source, on=_dml.as_column(spec.condition), how="full")
    expressions = [_dml.as_column(spec.condition)]
    needed: set[str] = set()
    source_names = {n.lower() for n in spec.source.columns}
    for clause in spec.clauses:
        if clause.condition is not None:
            expressions.append(_dml.as_column(clause.condition))
        if clause.kind.action != "UPDATE":
            if clause.assignments is not None:
                expressions.extend(_dml.as_column(v) for v in clause.assignments.values())
            continue
        if clause.assignments is None:
            needed.update(n for n in target.schema.names if n.lower() not in source_names)
            continue
        expressions.extend(_dml.as_column(v) for v in clause.assignments.values())
        assigned = {_unqualified(k, spec.target_alias).lower() for k in clause.assignments}
        needed.update(n for n in target.schema.names if n.lower() not in assigned)
    try:
        needed |= _dml.referenced_columns(joined, target, expressions)
    except AnalysisException:
        return set(target.schema.names)  # let the full plan report the error
    return needed


def _plan(target: _dml.Pinned, spec: MergeSpec, storage: Mapping[str, str]) -> _dml.ChangePlan:
    tgt = target.rows.withColumn(_TARGET_PRESENT, F.lit(True))
    if spec.target_alias:
        tgt = tgt.alias(spec.target_alias)
    src = spec.source.withColumn(_SOURCE_PRESENT, F.lit(True))
    groups = {c.kind.group for c in spec.clauses}
    how = "inner"
    if "WHEN NOT MATCHED BY SOURCE" in groups:
        how = "full"
    elif "WHEN NOT MATCHED" in groups:
        how = "right"
    condition = _dml.as_column(spec.condition)
    joined = tgt.join(src, on=condition, how=how)
    _dml.check_deterministic(joined, condition, "the MERGE condition")

    table_names = list(target.schema.names)
    source_fields = {f.name: f for f in spec.source.schema.fields}
    added = _added_columns(spec, table_names, list(source_fields.values()))
    out_names = table_names + [f.name for f in added]
    table_types = _types.spark_schema_from_arrow(target.schema).fields
    types: dict[str, DataType] = {f.name: f.dataType for f in table_types}
    types.update({f.name: f.dataType for f in added})
    read = set(target.rows.columns)  # the columns _needed_columns kept
    targets = {n: target.rows[quote_identifier(n)] for n in table_names if n in read}
    sources = {n: src[quote_identifier(n)] for n in source_fields}

    present = {
        "WHEN MATCHED": tgt[_TARGET_PRESENT].isNotNull() & src[_SOURCE_PRESENT].isNotNull(),
        "WHEN NOT MATCHED": tgt[_TARGET_PRESENT].isNull(),
        "WHEN NOT MATCHED BY SOURCE": src[_SOURCE_PRESENT].isNull(),
    }
    # The first clause (in order) whose kind and condition hold wins; groups are disjoint.
    branches = []
    for index, clause in enumerate(spec.clauses):
        holds = present[clause.kind.group]
        if clause.condition is not None:
            checked = _checked(clause, clause.condition, "condition", joined, tgt, src)
            holds = holds & checked
        branches.append((holds, F.lit(index)))
    staged = joined.withColumn(_ACTION, _case(branches))

    chosen = F.col(_ACTION)
    kinds = [(chosen == i, F.lit(_KINDS[c.kind.action])) for i, c in enumerate(spec.clauses)]
    values: dict[str, list[tuple[Column, Column]]] = {n: [] for n in out_names}
    writes = False
    for index, clause in enumerate(spec.clauses):
        if clause.kind.action == "DELETE":
            continue
        writes = True
        assigned = _assignments(clause, spec, target.schema, added, targets, sources)
        for name in out_names:
            if name in assigned:
                value = assigned[name]
                if clause.assignments is not None:  # user-written, not expanded from `*`
                    value = _checked(clause, value, f"value of {name}", staged, tgt, src)
            elif clause.kind.action == "UPDATE" and name in targets:
                value = targets[name]
            else:
                value = F.lit(None)
            values[name].append((chosen == index, _dml.as_column(value)))
    check = _checks_cardinality(spec.clauses)
    if check:
        # A matched row no clause acts on still counts for the cardinality check.
        kinds.append((present["WHEN MATCHED"], F.lit(row_level.KIND_MATCHED)))
    data = [_case(values[n]).cast(types[n]).alias(n) for n in out_names] if writes else []
    rows = staged.select(*target.address(), _case(kinds).alias(row_level.KIND), *data).filter(
        F.col(row_level.KIND).isNotNull()
    )
    predicate = _text(spec.condition)
    return _dml.ChangePlan(
        rows=rows,
        statement=row_level.Statement(
            operation="MERGE",
            write_schema=_write_schema(target, rows, added, storage) if writes else None,
            parameters={
                "predicate": predicate,
                "clauses": "; ".join(c.describe() for c in spec.clauses),
                "schemaEvolution": str(spec.schema_evolution).lower(),
            },
            predicate=predicate,
        ),
        check_cardinality=check,
    )


def _case(branches: Sequence[tuple[Column, Column]]) -> Column:
    """CASE WHEN c1 THEN v1 WHEN c2 THEN v2 ... END (NULL when no branch holds)."""
    if not branches:
        return F.lit(None)
    (first_condition, first_value), *rest = branches
    case = F.when(first_condition, first_value)
    for condition, value in rest:
        case = case.when(condition, value)
    return case


_KINDS = {
    "UPDATE": row_level.KIND_UPDATE,
    "DELETE": row_level.KIND_DELETE,
    "INSERT": row_level.KIND_INSERT,
}


def _checked(
    clause: Clause,
    value: str | Column,
    what: str,
    joined: DataFrame,
    tgt: DataFrame,
    src: DataFrame,
) -> Column:
    """``value`` as a Column, checked: INSERT clauses may only see the source and NOT MATCHED
    BY SOURCE clauses only the target (as in Spark), and nothing may be non-deterministic."""
    column = _dml.as_column(value)
    side = {"WHEN NOT MATCHED": src, "WHEN NOT MATCHED BY SOURCE": tgt}.get(clause.kind.group)
    if side is not None:
        try:
            side.select(column).schema  # noqa: B018  (analysis only)
        except AnalysisException as err:
            seen = "source" if side is src else "target"
            raise InvalidOptionError(
                f"the {what} of '{clause.describe()}' may only reference {seen} columns: "
                f"{_first_line(err)}"
            ) from err
    return _dml.check_deterministic(joined, column, f"the {what} of '{clause.describe()}'")


def _assignments(
    clause: Clause,
    spec: MergeSpec,
    table: pa.Schema,
    added: Sequence[StructField],
    targets: Mapping[str, Column],
    sources: Mapping[str, Column],
) -> dict[str, str | Column]:
    """Target column -> value of an UPDATE or INSERT clause (``*`` expanded by name)."""
    by_lower = {n.lower(): n for n in [*table.names, *(f.name for f in added)]}
    if clause.assignments is None:
        source_by_lower = {n.lower(): n for n in sources}
        result: dict[str, str | Column] = {}
        for name in table.names:
            source_name = source_by_lower.get(name.lower())
            if source_name is not None:
                result[name] = sources[source_name]
            elif not spec.schema_evolution:
                raise ColumnNotFoundError(
                    f"'{clause.describe()}' sets every target column from the source column "
                    f"of the same name, but the source has no column {name!r}; source "
                    f"columns: {', '.join(sources)}. Name the columns to set, or call "
                    "withSchemaEvolution() to keep (UPDATE) or null (INSERT) the others"
                )
        for field in added:
            result[field.name] = sources[field.name]
        return result
    result = {}
    for key, value in clause.assignments.items():
        name = by_lower.get(_unqualified(key, spec.target_alias).lower())
        if name is None:
            raise ColumnNotFoundError(
                f"'{clause.describe()}' sets column {key!r}, which the target table does not "
                f"have; columns: {', '.join(table.names)}"
            )
        result[name] = value
    if clause.kind is ClauseKind.NOT_MATCHED_INSERT:
        for field in table:
            if not field.nullable and field.name not in result:
                raise ColumnNotFoundError(
                    f"'{clause.describe()}' gives no value for the NOT NULL column {field.name!r}"
                )
    return result


def _unqualified(key: str, alias: str | None) -> str:
    if alias and key.lower().startswith(alias.lower() + "."):
        return key[len(alias) + 1 :]
    return key.strip("`")


def _added_columns(
    spec: MergeSpec, table_names: Sequence[str], source_fields: Sequence[StructField]
) -> list[StructField]:
    """With schema evolution, the source columns a ``*`` clause brings that the table lacks."""
    stars = any(c.assignments is None and c.kind.action != "DELETE" for c in spec.clauses)
    if not (spec.schema_evolution and stars):
        return []
    known = {n.lower() for n in table_names}
    return [
        StructField(f.name, f.dataType, True) for f in source_fields if f.name.lower() not in known
    ]


def _checks_cardinality(clauses: Sequence[Clause]) -> bool:
    """Spark checks that no target row is matched twice, unless the only MATCHED clause is an
    unconditional DELETE (deleting a row twice is harmless) or there is none."""
    matched = [c for c in clauses if c.kind.group == "WHEN MATCHED"]
    only_delete = (
        len(matched) == 1
        and matched[0].kind is ClauseKind.MATCHED_DELETE
        and matched[0].condition is None
    )
    return bool(matched) and not only_delete


def _write_schema(
    target: _dml.Pinned, rows: DataFrame, added: Sequence[StructField], storage: Mapping[str, str]
) -> pa.Schema:
    if not added:
        return target.schema
    incoming = to_arrow_schema(
        StructType([f for f in rows.schema.fields if not f.name.startswith("__lance_spark")]),
        timezone="UTC",
    )
    incoming = pa.schema([f.remove_metadata() for f in incoming])
    schema = _types.reconcile_write_schema(incoming, target.schema, merge_schema=True)
    ds = dataset.open_version(target.uri, target.version, storage=storage)
    _commit.check_can_add_columns(ds, [f.name for f in added], uri=target.uri)
    return schema


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
        spark: SparkSession,
        uri: str,
        storage: Mapping[str, str],
        source: DataFrame,
        condition: str | Column,
        target_alias: str | None,
        clauses: tuple[Clause, ...] = (),
        schema_evolution: bool = False,
        after_schema_change: Callable[[], None] | None = None,
    ) -> None:
        self._spark = spark
        self._uri = uri
        self._storage = storage
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
        counts = merge(
            self._spark,
            uri=self._uri,
            storage=self._storage,
            spec=self._spec,
            app_id=_spark.app_id(self._spark),
        )
        if counts.added_columns and self._after_schema_change is not None:
            self._after_schema_change()
        return metrics_frame(self._spark, counts)

    def _with(self, clause: Clause) -> LanceMergeBuilder:
        return self._copy((*self._spec.clauses, clause), self._spec.schema_evolution)

    def _copy(self, clauses: tuple[Clause, ...], schema_evolution: bool) -> LanceMergeBuilder:
        spec = self._spec
        return LanceMergeBuilder(
            spark=self._spark,
            uri=self._uri,
            storage=self._storage,
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
