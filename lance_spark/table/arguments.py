"""The public table API checks its arguments when it is called, as Delta's does.

Each public method of :class:`~lance_spark.LanceTable`, its MERGE builder and its table builder
declares what each parameter takes with :func:`checked`; a call with a value of the wrong type
raises :class:`~lance_spark.errors.ArgumentTypeError` (a ``TypeError``), with a value of the
right type that is not accepted (an empty name, a negative version)
:class:`~lance_spark.errors.InvalidArgumentError` (a ``ValueError``). Both name the method, the
argument, the value and what is accepted, before anything runs.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import DataType, StructField, StructType

from lance_spark.errors import ArgumentTypeError, InvalidArgumentError, LanceSparkError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Kind:
    """What a parameter takes: ``accepted`` says it in messages; ``types`` the Python types of
    its values (checked first); ``valid`` the rule a value of those types must follow, with
    ``rule`` saying it (None: any value of those types)."""

    accepted: str
    types: tuple[type, ...]
    valid: Callable[[Any], bool] | None = None
    rule: str = ""
    optional: bool = False

    def __call__(self, method: str, name: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, self.types) or (
            isinstance(value, bool) and bool not in self.types
        ):
            raise ArgumentTypeError(
                f"{method}() argument {name!r} takes {self._accepts()}, not {value!r} "
                f"(a {type(value).__name__})"
            )
        if self.valid is not None and not self.valid(value):
            raise InvalidArgumentError(
                f"{method}() argument {name!r} takes {self._accepts()}{self.rule}, not {value!r}"
            )

    def _accepts(self) -> str:
        return f"{self.accepted} or None" if self.optional else self.accepted

    def orNone(self) -> Kind:
        """The same kind, None accepted too."""
        return Kind(self.accepted, self.types, self.valid, self.rule, optional=True)


def _sessions() -> tuple[type, ...]:
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # Spark Connect's client dependencies are not installed
        return (SparkSession,)
    return (SparkSession, ConnectSession)


def _is_assignments(value: Mapping[Any, Any]) -> bool:
    return bool(value) and all(
        isinstance(k, str) and k and isinstance(v, (str, Column)) for k, v in value.items()
    )


def _is_names(value: str | Sequence[Any]) -> bool:
    names = [value] if isinstance(value, str) else list(value)
    return bool(names) and all(isinstance(n, str) and n for n in names)


def _is_string_map(value: Mapping[Any, Any]) -> bool:
    return all(isinstance(k, str) and k for k in value)


NAME = Kind("a non-empty string", (str,), lambda v: bool(v.strip()), " (not blank)")
TEXT = Kind("a string", (str,))
PATH = Kind("a path or URI (a non-empty string)", (str,), lambda v: bool(v.strip()), "")
CONDITION = Kind(
    "a SQL condition string or a Column",
    (str, Column),
    lambda v: not isinstance(v, str) or bool(v.strip()),
    " (not blank)",
)
EXPRESSION = Kind("a SQL expression string or a Column", (str, Column))
ASSIGNMENTS = Kind(
    "a dict of column name to SQL expression string or Column",
    (Mapping,),
    _is_assignments,
    " (not empty; non-empty string keys; str or Column values)",
)
DATAFRAME = Kind("a DataFrame", (DataFrame,))
SESSION = Kind("a SparkSession", _sessions())
# numbers.Integral: Python's and numpy's ints (never bool, see Kind.__call__).
VERSION = Kind("a version number (an int)", (numbers.Integral,), lambda v: v >= 0, " of at least 0")
COUNT = Kind("a positive int", (numbers.Integral,), lambda v: v > 0, "")
VERSION_OR_TAG = Kind(
    "a version number (an int) or a tag name (a string)",
    (numbers.Integral, str),
    lambda v: bool(v.strip()) if isinstance(v, str) else int(v) >= 0,
    " (an int of at least 0, a non-empty tag)",
)
TIMESTAMP = Kind(
    "a timestamp (a datetime or an ISO string)",
    (str, datetime.datetime),
    lambda v: not isinstance(v, str) or bool(v.strip()),
    "",
)
HOURS = Kind(
    "a number of hours (an int or a float)", (numbers.Real,), lambda v: v >= 0, " of at least 0"
)
FLAG = Kind("True or False", (bool,))
NAMES = Kind(
    "a column name or a list of column names", (str, list, tuple), _is_names, " (not empty)"
)
INDEX_NAMES = Kind(
    "an index name or a list of index names", (str, list, tuple), _is_names, " (not empty)"
)
STRING_MAP = Kind("a dict with string keys", (Mapping,), _is_string_map, "")
ROW_NUMBERS = Kind(
    "a list of row ids or row addresses (ints)",
    (list, tuple, np.ndarray),
    lambda v: all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v),
    " (every element an int)",
)


def _is_vector(value: list[Any] | tuple[Any, ...] | np.ndarray) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and value.dtype.kind in "iuf"
    return all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in value)


VECTOR = Kind(
    "a list or numpy array of numbers",
    (list, tuple, np.ndarray),
    _is_vector,
    " (one dimension; every element an int or a float)",
)
# collections.abc.Callable as a type: isinstance() holds for every callable.
PROGRESS = Kind("True, False or a function taking a JobProgress", (bool, cast(type, Callable)))
DATA_TYPE = Kind("a Spark SQL type name (a string) or a DataType", (str, DataType))
COLUMNS = Kind(
    "a StructType, a list of StructField or a DDL string such as 'id bigint, label string'",
    (StructType, list, tuple, str),
    lambda v: not isinstance(v, (list, tuple)) or all(isinstance(f, StructField) for f in v),
    " (a list of StructField only)",
)
ADD_COLUMNS = Kind(
    "a dict of new column name to SQL expression string or Column, or a DataFrame",
    (Mapping, DataFrame),
    lambda v: isinstance(v, DataFrame) or _is_assignments(v),
    " (a non-empty dict; non-empty string keys; str or Column values)",
)


def checked(**kinds: Kind) -> Callable[[F], F]:
    """Check the arguments named in ``kinds`` when the decorated method is called; a
    parameter ``*name`` is checked element by element.

    Example::

        @checked(version=VERSION)
        def restoreToVersion(self, version: int) -> DataFrame: ...
    """

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        unknown = set(kinds) - set(signature.parameters)
        if unknown:  # a declaration naming no parameter would check nothing
            raise LanceSparkError(f"{func.__qualname__} has no parameters {sorted(unknown)}")
        variadic = {
            n for n, p in signature.parameters.items() if p.kind is inspect.Parameter.VAR_POSITIONAL
        }
        method = func.__qualname__

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            for name, kind in kinds.items():
                if name not in bound.arguments:
                    continue
                value = bound.arguments[name]
                for one in value if name in variadic else (value,):
                    kind(method, name, one)
            return func(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate


def active_session(spark: Any, method: str) -> Any:
    """``spark``, or the active session when it is None (Delta's builders take the active
    one); :class:`InvalidArgumentError` when there is none."""
    if spark is not None:
        SESSION(method, "spark", spark)
        return spark
    active = SparkSession.getActiveSession()
    if active is None:
        raise InvalidArgumentError(
            f"{method}() needs a SparkSession: pass spark=..., or create one first "
            "(SparkSession.builder...getOrCreate())"
        )
    return active
