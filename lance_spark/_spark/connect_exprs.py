"""Spark Connect expression trees and SQL text: names they may read, and rendering back to
Spark SQL. Pure: no session needed."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lance_spark._spark.sql import quote_identifier, sql_string
from lance_spark.errors import InvalidArgumentError

# Leaves of a Connect expression tree that name no column.
_NAMELESS_LEAVES = ("LiteralExpression", "UnresolvedNamedLambdaVariable", "DistributedSequenceID")
# Nodes whose ``children`` are all they read.
_INNER_NODES = (
    "UnresolvedFunction",
    "CaseWhen",
    "CastExpression",
    "ColumnAlias",
    "CommonInlineUserDefinedFunction",
    "LambdaFunction",
    "WindowExpression",
    "SortOrder",
    "UnresolvedExtractValue",
    "WithField",
    "DropField",
    "CallFunction",
    "NamedArgumentExpression",
)


def parse_identifier(text: str) -> tuple[str, ...] | None:
    """Spark's name parts of an unparsed identifier (``a.b``, ```a.b`.c``, backticks doubled
    inside quotes), following ``UnresolvedAttribute.parseAttributeName``; None where Spark
    reports a syntax error."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch != "`":
                current.append(ch)
            elif text[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            else:
                quoted = False
                if i + 1 < len(text) and text[i + 1] != ".":
                    return None
        elif ch == "`":
            if current:
                return None
            quoted = True
        elif ch == ".":
            if i == 0 or text[i - 1] == "." or i == len(text) - 1:
                return None
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        return None
    parts.append("".join(current))
    return tuple(parts)


def sql_names(text: str) -> set[str] | None:
    """Every word of a Spark SQL expression that could name a column, lower-cased (names,
    quoted identifiers, keywords; not string or number literals); None when it may read every
    column (a star) or sqlglot cannot read it."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tokens = sqlglot.tokenize(text, read="spark")
        tree = sqlglot.parse_one(text, read="spark")
    except SqlglotError:
        return None
    if tree is None or any(True for _ in tree.find_all(exp.Star)):
        return None
    words = set()
    for token in tokens:
        kind = token.token_type.name
        if kind == "NUMBER" or kind.endswith("STRING"):
            continue
        words.add(token.text.lower())
    return words


def expression_names(expr: Any) -> set[str] | None:
    """The lower-cased names a Connect expression tree may read (name parts of column
    references, words of SQL text in it); None when it may read any column (a star, a regex,
    a subquery, a node this function does not know)."""
    words: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind == "ColumnReference":
            parts = parse_identifier(str(node._unparsed_identifier))
            if parts is None:
                return None
            words.update(p.lower() for p in parts)
        elif kind == "SQLExpression":
            found = sql_names(str(node._expr))
            if found is None:
                return None
            words |= found
        elif kind in _NAMELESS_LEAVES:
            continue
        elif kind in _INNER_NODES:
            stack.extend(node.children)
        else:  # UnresolvedStar, UnresolvedRegex, SubqueryExpression, anything new
            return None
    return words


# Connect's function names of Column operators, rendered infix.
_INFIX = {
    "==": "=",
    "!=": "!=",
    "<=>": "<=>",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "+": "+",
    "-": "-",
    "*": "*",
    "/": "/",
    "%": "%",
    "and": "AND",
    "or": "OR",
    "&": "&",
    "|": "|",
    "^": "^",
    "like": "LIKE",
    "ilike": "ILIKE",
    "rlike": "RLIKE",
}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# Names a user-defined function node (CommonInlineUserDefinedFunction) for an exact text: the
# temporary function it was registered as for the statement.
UdfNamer = Callable[[Any], str]


def render(expr: Any, *, exact: bool = False, udf: UdfNamer | None = None) -> str:
    """Readable Spark SQL text of a Connect expression tree, for history and messages: infix
    operators, identifiers quoted where needed, SQL literals; nodes it does not know are shown
    as Connect prints them, or (``exact``) refused with :class:`InvalidArgumentError`, for
    text that Spark parses again as the same expression. ``udf`` names each user-defined
    function call (by default its own name, which SQL resolves only when registered)."""
    if udf is not None:
        exact = True
    kind = type(expr).__name__
    if kind == "ColumnReference":
        parts = parse_identifier(str(expr._unparsed_identifier))
        if parts is None:
            return str(expr._unparsed_identifier)
        return ".".join(_sql_identifier(p) for p in parts)
    if kind == "SQLExpression":
        return str(expr._expr)
    if kind == "LiteralExpression":
        return _sql_literal(expr._value, expr._dataType, exact=exact)
    if kind == "UnresolvedStar":
        target = expr._unparsed_target
        return "*" if target is None else str(target)
    if kind == "ColumnAlias":
        names = ", ".join(_sql_identifier(str(a)) for a in expr._alias)
        return f"{render(expr._child, exact=exact, udf=udf)} AS {names}"
    if kind == "CastExpression":
        data_type = expr._data_type
        type_text = data_type if isinstance(data_type, str) else data_type.simpleString()
        cast = "TRY_CAST" if expr._eval_mode == "try" else "CAST"
        return f"{cast}({render(expr._expr, exact=exact, udf=udf)} AS {str(type_text).upper()})"
    if kind == "CaseWhen":
        branches = "".join(
            f" WHEN {render(c, exact=exact, udf=udf)} THEN {render(v, exact=exact, udf=udf)}"
            for c, v in expr._branches
        )
        otherwise = (
            ""
            if expr._else_value is None
            else f" ELSE {render(expr._else_value, exact=exact, udf=udf)}"
        )
        return f"CASE{branches}{otherwise} END"
    if kind == "UnresolvedExtractValue":
        return f"{render(expr._child, exact=exact, udf=udf)}[{render(expr._extraction, exact=exact, udf=udf)}]"
    if kind == "UnresolvedFunction":
        return _render_function(
            str(expr._name), list(expr._args), bool(expr._is_distinct), exact=exact, udf=udf
        )
    if kind == "CommonInlineUserDefinedFunction":
        args = ", ".join(render(a, exact=exact, udf=udf) for a in expr._arguments)
        return f"{expr._function_name if udf is None else udf(expr)}({args})"
    if kind == "UnresolvedNamedLambdaVariable":
        return ".".join(str(p) for p in expr._name_parts)
    if kind == "LambdaFunction":
        names = ", ".join(render(a, exact=exact, udf=udf) for a in expr._arguments)
        names = names if len(expr._arguments) == 1 else f"({names})"
        return f"{names} -> {render(expr._function, exact=exact, udf=udf)}"
    if exact:
        raise InvalidArgumentError(
            f"a Column holding {kind} cannot be run as a SQL statement's expression: pass it "
            "as a SQL string (F.expr's text) instead"
        )
    return repr(expr)


def _render_function(
    name: str, args: list[Any], distinct: bool, *, exact: bool, udf: UdfNamer | None
) -> str:
    lowered = name.lower()
    if lowered in _INFIX and len(args) == 2:
        return f"({render(args[0], exact=exact, udf=udf)} {_INFIX[lowered]} {render(args[1], exact=exact, udf=udf)})"
    if lowered == "not" and len(args) == 1:
        return f"(NOT {render(args[0], exact=exact, udf=udf)})"
    if lowered == "negative" and len(args) == 1:
        return f"(- {render(args[0], exact=exact, udf=udf)})"
    if lowered in ("isnull", "isnotnull") and len(args) == 1:
        return f"({render(args[0], exact=exact, udf=udf)} IS {'NOT ' if lowered == 'isnotnull' else ''}NULL)"
    if lowered == "in" and args:
        return f"({render(args[0], exact=exact, udf=udf)} IN ({', '.join(render(a, exact=exact, udf=udf) for a in args[1:])}))"
    inner = ", ".join(render(a, exact=exact, udf=udf) for a in args)
    return f"{name}({'DISTINCT ' if distinct else ''}{inner})"


def _sql_identifier(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else quote_identifier(name)


def _sql_literal(value: Any, data_type: Any, *, exact: bool = False) -> str:
    import datetime
    import decimal

    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, (bytes, bytearray)):
        return "X'" + bytes(value).hex().upper() + "'"
    if isinstance(data_type, DateType):
        return f"DATE '{DateType().fromInternal(value)}'"
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        moment = data_type.fromInternal(value)
        if isinstance(moment, datetime.datetime):
            keyword = "TIMESTAMP_NTZ" if isinstance(data_type, TimestampNTZType) else "TIMESTAMP"
            return f"{keyword} '{moment.isoformat(sep=' ')}'"
    from pyspark.sql.types import IntegerType, MapType, NumericType, StructType

    if isinstance(data_type, StructType) and isinstance(value, (list, tuple, dict)):
        values = [value.get(f.name) for f in data_type.fields] if isinstance(value, dict) else value
        pairs = (
            f"{sql_string(f.name)}, {_sql_literal(v, f.dataType, exact=exact)}"
            for f, v in zip(data_type.fields, values, strict=True)
        )
        return f"named_struct({', '.join(pairs)})"
    if isinstance(data_type, MapType) and isinstance(value, dict):
        entries = (
            f"{_sql_literal(k, data_type.keyType, exact=exact)}, "
            f"{_sql_literal(v, data_type.valueType, exact=exact)}"
            for k, v in value.items()
        )
        return f"map({', '.join(entries)})"
    if isinstance(value, (list, tuple)):
        element = getattr(data_type, "elementType", None)
        return "array(" + ", ".join(_sql_literal(v, element, exact=exact) for v in value) + ")"
    if isinstance(value, decimal.Decimal) and value.is_finite():
        # The value's own precision and scale (Connect sends them; its _dataType may not say).
        return f"{format(value, 'f')}BD"
    if exact and isinstance(data_type, NumericType) and not isinstance(data_type, IntegerType):
        # Of its own type (1.5 alone is a decimal, 7 an int): the text cast, exact for every
        # number (NaN and infinities too).
        text = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(str(value), str(value))
        return f"CAST({sql_string(text)} AS {data_type.simpleString().upper()})"
    return str(value)
