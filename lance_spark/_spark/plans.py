"""Expression analysis against a DataFrame: classic sessions from Spark's analysed plan
(Py4J), Spark Connect from an analysis round trip or the Column's expression tree.

Classic sessions answer from Spark's analysed plan (Py4J). A Spark Connect client has no plan:
each helper answers either with an analysis-only round trip (``df.schema`` runs the analyser
and raises Spark's own AnalysisException) or from the Column's expression tree
(``column._expr``) and the SQL text in it (sqlglot). Where Connect can only approximate, the
approximation is the safe side: more referenced columns (a wider read), no equi-join key (no
pruning, the conservative conflict check), "does not only generate rows" (the source is cached).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from lance_spark._spark.connect_exprs import expression_names, render
from lance_spark._spark.session import is_connect
from lance_spark._spark.sql import plain_sql, quote_identifier
from lance_spark.errors import InvalidArgumentError

_NON_DETERMINISTIC = frozenset(
    {"INVALID_NON_DETERMINISTIC_EXPRESSIONS", "AGGREGATE_FUNCTION_WITH_NONDETERMINISTIC_EXPRESSION"}
)
_NOT_ONE_PER_ROW = (
    "INVALID_WHERE_CONDITION",
    "WINDOW_FUNCTION_NOT_ALLOWED_IN_CLAUSE",
    "UNSUPPORTED_GENERATOR",
)
_PROBE = "__lance_spark_probe"
# Appended to "is not deterministic" when :func:`deterministic` cannot tell (None).
UNCHECKED_DETERMINISM = (
    " or its determinism cannot be checked on Spark Connect (aggregate, window and generator "
    "functions cannot be put in the join that asks Spark)"
)


def _plan(frame: DataFrame) -> Any:
    return frame._jdf.queryExecution().analyzed()


def _attribute_names(output: Any) -> dict[int, str]:
    """exprId -> name of the attributes in a JVM plan's ``output``."""
    names: dict[int, str] = {}
    iterator = output.iterator()
    while iterator.hasNext():
        attribute = iterator.next()
        names[int(attribute.exprId().id())] = str(attribute.name())
    return names


def _resolved(frame: DataFrame, column: Column) -> Any:
    """``column`` analysed against ``frame`` (classic): the JVM expression."""
    plan = _plan(frame.select(column))
    if _name(plan) == "Aggregate":  # an aggregate function: no Project
        return plan.aggregateExpressions().head()
    return plan.projectList().head()


def referenced_columns(frame: DataFrame, base: DataFrame, columns: Iterable[Column]) -> set[str]:
    """The names of ``base``'s columns that ``columns`` (resolved in ``frame``, a DataFrame
    built on ``base``) refer to.

    Classic: exact (by exprId, so a same-named column of another input does not count).
    Connect: by name, case-insensitively, over every identifier in the expression tree and in
    its SQL text (a struct field, a qualifier or a lambda variable named like a column counts
    too); a star, a subquery or an unknown node counts as every column. Never fewer columns
    than Spark would read; raises no AnalysisException (the caller's plan reports errors)."""
    if not is_connect(frame.sparkSession):
        names = _attribute_names(_plan(base).output())
        found: set[str] = set()
        for column in columns:
            references = _resolved(frame, column).references().iterator()
            while references.hasNext():
                name = names.get(int(references.next().exprId().id()))
                if name is not None:
                    found.add(name)
        return found
    available = list(base.columns)
    words: set[str] = set()
    for column in columns:
        used = expression_names(column._expr)
        if used is None:
            return set(available)
        words |= used
    return {n for n in available if n.lower() in words}


def deterministic(frame: DataFrame, column: Column) -> bool | None:
    """Whether ``column`` (resolved against ``frame``) is deterministic; raises Spark's
    AnalysisException when it does not resolve.

    Classic: ``Expression.deterministic`` of the analysed expression. Connect: Spark's check
    analysis refuses a non-deterministic expression in a join condition (an operator other than
    Project, Filter, Aggregate, Window, Generate) with INVALID_NON_DETERMINISTIC_EXPRESSIONS,
    so ``column`` is put in one and analysed; same answer for rand, uuid, shuffle, Python UDFs
    (deterministic unless ``asNondeterministic()``). None on Connect when Spark refuses the
    probe for another reason first (an aggregate, window or generator function, which a join
    condition cannot hold): the determinism of those cannot be asked there."""
    if not is_connect(frame.sparkSession):
        return bool(_resolved(frame, column).deterministic())
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    probe = frame.sparkSession.range(1).select(F.lit(1).alias(_PROBE))
    try:
        frame.join(probe, on=F.isnull(column) | F.isnotnull(column)).schema  # noqa: B018
    except AnalysisException as err:
        if str(err.getCondition() or "") in _NON_DETERMINISTIC:
            return False
        frame.select(column).schema  # noqa: B018  (raises if it does not resolve)
        return None
    return True


def one_value_per_row(rows: DataFrame, column: Column) -> bool:
    """Whether ``column`` gives one value per row of ``rows`` (no aggregate, window or
    generator function); raises Spark's AnalysisException when it does not resolve.

    Classic: ``rows.select(column)`` is a Project right over ``rows``' plan. Connect: Spark
    refuses those functions in a filter (INVALID_WHERE_CONDITION, WINDOW_FUNCTION_NOT_ALLOWED_IN_
    CLAUSE, UNSUPPORTED_GENERATOR.*), so ``rows.where(isnull(column))`` is analysed."""
    if not is_connect(rows.sparkSession):
        base = _plan(rows)
        plan = _plan(rows.select(column.alias(_PROBE)))
        return bool(plan.getClass().getSimpleName() == "Project" and plan.child().sameResult(base))
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    rows.select(column.alias(_PROBE)).schema  # noqa: B018  (raises if it does not resolve)
    try:
        rows.where(F.isnull(column)).schema  # noqa: B018
    except AnalysisException as err:
        if str(err.getCondition() or "").startswith(_NOT_ONE_PER_ROW):
            return False
        raise
    return True


def expression_sql(frame: DataFrame, column: Column) -> str:
    """``column``'s Spark SQL text (resolved against ``frame`` on classic, without an alias
    Spark gives it); on Connect rendered from the expression tree (:func:`render`)."""
    if not is_connect(frame.sparkSession):
        plan = _plan(frame.select(column.alias(_PROBE)))
        return str(plan.projectList().head().child().sql())
    return render(column._expr)


def condition_sql(frame: DataFrame, condition: Column) -> str:
    """A filter condition's Spark SQL text, resolved against ``frame`` (classic); on Connect
    rendered from the expression tree (:func:`render`)."""
    if not is_connect(frame.sparkSession):
        return str(_plan(frame.filter(condition)).condition().sql())
    return render(condition._expr)


def column_text(column: Column) -> str:
    """A Column's text without resolving it (classic: the JVM Column's ``toString``)."""
    expr = getattr(column, "_expr", None)
    if type(column).__module__.startswith("pyspark.sql.connect") and expr is not None:
        return render(expr)
    java: Any = column._jc
    return str(java.toString())


def column_sql(frame: DataFrame, column: Column, functions: list[str]) -> str:
    """A Column as Spark SQL text that Spark parses back to the same expression, for a
    statement the table API runs as SQL (classic: resolved against ``frame`` and printed by
    the companion's ``StatementSql``; Connect: the expression tree rendered exactly,
    :func:`render`). Each Python UDF in it (pandas UDFs too) is registered as a temporary
    function under a new name, which the text calls and ``functions`` receives: the caller
    drops them after the statement (:func:`drop_functions`)."""
    spark = frame.sparkSession
    if not is_connect(spark):
        java: Any = spark
        renderer = java._jvm.lance_spark.companion.StatementSql
        if type(renderer).__name__ == "JavaPackage":  # no companion: the statement says so
            return expression_sql(frame, column)
        expression = _plan(frame.select(column.alias(_PROBE))).projectList().head().child()
        rendered = [str(t) for t in renderer.render(expression, java._jsparkSession)]
        functions.extend(rendered[1:])
        return rendered[0]

    def udf(node: Any) -> str:
        function = node._function
        if type(function).__name__ != "PythonUDF":
            raise InvalidArgumentError(
                f"a Column calling {node._function_name!r}, a {type(function).__name__}, "
                "cannot be run in a statement: give a Python or pandas UDF, or register the "
                "function and call it by name in a SQL string"
            )
        name = f"lance_spark_udf_{uuid.uuid4().hex}"
        output = function._output_type
        output = getattr(output, "data_type_string", output)  # an unparsed type: its text
        client: Any = spark
        client._client.register_udf(
            function._func, output, name, function._eval_type, node._deterministic
        )
        functions.append(name)
        return name

    return render(column._expr, udf=udf)


def drop_functions(spark: SparkSession, functions: Iterable[str]) -> None:
    """Drops the temporary functions :func:`column_sql` registered."""
    for name in functions:
        plain_sql(spark)(f"DROP TEMPORARY FUNCTION IF EXISTS {quote_identifier(name)}")


# Leaves that produce the same rows on every evaluation (nothing is read).
_GENERATED_LEAVES = frozenset({"Range", "LocalRelation", "OneRowRelation"})
# Spark calls these deterministic, but each query sees its own time. Matched in the plan's
# text (one call, not a walk over every expression): a column that happens to be named like
# them only costs the cache.
_TIME_FUNCTIONS = ("current_", "now(", "localtimestamp", "unix_timestamp(")


def generates_rows(frame: DataFrame) -> bool:
    """Whether ``frame`` is a deterministic plan whose leaves only generate rows: evaluating
    it twice gives the same rows for sure. Connect exposes no analysed plan: always False
    there (the caller then caches the frame, which is correct, only not free)."""
    if is_connect(frame.sparkSession):
        return False
    plan = _plan(frame)
    if not bool(plan.deterministic()):
        return False
    text = str(plan.toString()).lower()
    if any(name in text for name in _TIME_FUNCTIONS):
        return False
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        if str(leaves.next().nodeName()) not in _GENERATED_LEAVES:
            return False
    return True


def _name(java_object: Any) -> str:
    return str(java_object.getClass().getSimpleName())


def frame_alias(frame: DataFrame) -> str | None:
    """The alias ``DataFrame.alias`` gave ``frame`` as its last step, or None."""
    if is_connect(frame.sparkSession):
        return _top_alias(frame)
    plan = frame._jdf.queryExecution().logical()
    return str(plan.alias()) if str(plan.nodeName()) == "SubqueryAlias" else None


def _top_alias(frame: DataFrame) -> str | None:
    """The alias of ``frame`` (``DataFrame.alias`` as its last step), or None."""
    from pyspark.sql.connect import plan as connect_plan

    node: Any = frame._plan
    return str(node._alias) if isinstance(node, connect_plan.SubqueryAlias) else None
