"""The private PySpark attributes the connector uses, in one list, checked at ``register``.

PySpark keeps no promise about names with a leading underscore; a release that renames one
would otherwise break a write hook or the Connect expression rendering at the first call that
reaches it, deep in a user's job. :func:`check_pyspark_surface` fails ``register`` instead,
naming every missing attribute and the PySpark version. An instance attribute is looked for
as an assignment (``self.<name> =``) in the source of the modules of the class and its
bases; a method or
property on the class itself.

A module that uses a new private attribute adds it to :data:`SURFACE`.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
from dataclasses import dataclass
from functools import cache

from lance_spark.errors import UnsupportedPySparkError


@dataclass(frozen=True)
class Private:
    """``owner`` (``module:Class``) has ``names``; ``used_by`` says which module of
    ``lance_spark._spark`` uses them."""

    owner: str
    names: tuple[str, ...]
    used_by: str
    connect: bool = False  # only Spark Connect sessions need it


_C = "pyspark.sql.connect"
_E = f"{_C}.expressions"
SURFACE: tuple[Private, ...] = (
    Private("pyspark.sql.session:SparkSession", ("_jsparkSession", "_jvm"), "companion, threads"),
    Private("pyspark.core.context:SparkContext", ("_jsc", "_jvm"), "companion"),
    Private("pyspark.sql.classic.dataframe:DataFrame", ("_jdf",), "plans"),
    Private("pyspark.sql.classic.column:Column", ("_jc",), "plans"),
    Private("pyspark.sql.readwriter:DataFrameReader", ("_spark", "load"), "threads"),
    Private(
        "pyspark.sql.readwriter:DataFrameWriter",
        ("_df", "_spark", "save", "saveAsTable", "insertInto", "option", "options", "format"),
        "write_hooks",
    ),
    Private(
        "pyspark.sql.readwriter:DataFrameWriterV2",
        ("_df", "_spark", "append", "overwrite", "overwritePartitions", "createOrReplace"),
        "write_hooks",
    ),
    Private(f"{_C}.column:Column", ("_expr",), "plans", connect=True),
    Private(f"{_C}.dataframe:DataFrame", ("_plan",), "plans", connect=True),
    Private(f"{_C}.plan:SubqueryAlias", ("_alias",), "plans", connect=True),
    Private(f"{_C}.readwriter:DataFrameWriter", ("_df", "_spark", "_write"), "write_hooks", True),
    Private(
        f"{_C}.readwriter:DataFrameWriterV2",
        ("_df", "_spark", "_write", "_table_name"),
        "write_hooks",
        connect=True,
    ),
    Private(f"{_E}:ColumnReference", ("_unparsed_identifier",), "connect_exprs", True),
    Private(f"{_E}:SQLExpression", ("_expr",), "connect_exprs", True),
    Private(f"{_E}:LiteralExpression", ("_value", "_dataType"), "connect_exprs", True),
    Private(f"{_E}:ColumnAlias", ("_alias", "_child"), "connect_exprs", True),
    Private(f"{_E}:CastExpression", ("_expr", "_data_type", "_eval_mode"), "connect_exprs", True),
    Private(f"{_E}:CaseWhen", ("_branches", "_else_value"), "connect_exprs", True),
    Private(f"{_E}:UnresolvedExtractValue", ("_child", "_extraction"), "connect_exprs", True),
    Private(f"{_E}:UnresolvedFunction", ("_name", "_args", "_is_distinct"), "connect_exprs", True),
    Private(f"{_E}:UnresolvedStar", ("_unparsed_target",), "connect_exprs", True),
    Private(f"{_E}:LambdaFunction", ("_arguments", "_function"), "connect_exprs", True),
    Private(
        f"{_E}:CommonInlineUserDefinedFunction",
        ("_arguments", "_function_name"),
        "connect_exprs",
        connect=True,
    ),
    Private(
        f"{_E}:CommonInlineUserDefinedFunction",
        ("_function", "_deterministic"),
        "plans",
        connect=True,
    ),
    Private(f"{_E}:PythonUDF", ("_func", "_output_type", "_eval_type"), "plans", connect=True),
    Private(f"{_C}.session:SparkSession", ("_client",), "plans", connect=True),
    Private(f"{_E}:UnresolvedNamedLambdaVariable", ("_name_parts",), "connect_exprs", connect=True),
)


@cache
def _source(path: str) -> str | None:
    try:
        return pathlib.Path(path).read_text(encoding="utf-8")
    except OSError:
        return None


def _module_text(cls: type) -> str | None:
    """The source of the module that defines ``cls`` (inspect.getsource of the class itself
    parses the whole module each time: seconds over this list)."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return None
    return None if path is None else _source(path)


def _has(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    assigned = re.compile(rf"\bself\.{re.escape(name)}\s*[:=]")
    for klass in cls.__mro__:
        if klass is object:
            continue
        text = _module_text(klass)
        if text is None or assigned.search(text):  # no source (a stripped build): cannot tell
            return True
    return False


@cache
def missing_attributes() -> tuple[str, ...]:
    """``module:Class.name`` of each attribute in :data:`SURFACE` this PySpark lacks (Connect
    entries only where PySpark's Connect client imports)."""
    missing = []
    for entry in SURFACE:
        module_name, class_name = entry.owner.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if entry.connect:  # the Connect client's dependencies are not installed
                continue
            missing.append(f"{entry.owner} (module)")
            continue
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            missing.append(f"{entry.owner} (class)")
            continue
        missing += [f"{entry.owner}.{n}" for n in entry.names if not _has(cls, n)]
    return tuple(missing)


def check_pyspark_surface() -> None:
    """Raises :class:`UnsupportedPySparkError` when this PySpark lacks a private attribute of
    :data:`SURFACE`, naming each one and the PySpark version."""
    missing = missing_attributes()
    if missing:
        import pyspark

        raise UnsupportedPySparkError(
            f"lance_spark cannot run on PySpark {pyspark.__version__}: it lacks "
            f"{', '.join(missing)}, which lance_spark uses. Install the PySpark version this "
            "lance_spark release supports (see its requirements), or a lance_spark release "
            "made for this PySpark."
        )
