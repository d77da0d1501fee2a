"""The one error hierarchy of lance_spark.

Every error the connector raises on purpose is a :class:`LanceSparkError`. Errors caused by
bad input (an option, a column, a version, a path) also subclass :class:`ValueError`, so
callers that already catch ``ValueError`` keep working.

Example::

    from lance_spark.errors import LanceSparkError, InvalidOptionError
    try:
        spark.read.format("lance").option("verison", 3).load(uri)
    except Exception as e:  # Spark wraps worker errors; the message names the option
        assert "verison" in str(e)
"""

from __future__ import annotations

import re

__all__ = [
    "ArgumentTypeError",
    "BranchNotFoundError",
    "CardinalityViolationError",
    "ColumnNotFoundError",
    "CommitConflictError",
    "CompanionNotFoundError",
    "ConcurrentModificationError",
    "CorruptTableError",
    "IndexExistsError",
    "InvalidArgumentError",
    "InvalidOptionError",
    "JobClosedError",
    "LanceSparkError",
    "PerformanceWarning",
    "ReplaceWhereMismatchError",
    "SchemaMismatchError",
    "SecretInConfError",
    "StreamChangeError",
    "TableAlreadyExistsError",
    "TableNotFoundError",
    "UnquotableColumnError",
    "UnsupportedPySparkError",
    "UnsupportedTypeError",
    "VersionNotFoundError",
]


class LanceSparkError(Exception):
    """Base class of every error raised by lance_spark."""


class InvalidOptionError(LanceSparkError, ValueError):
    """An option is unknown, malformed, or conflicts with another option."""


class InvalidArgumentError(InvalidOptionError):
    """An argument of a public method has a value it does not take (an empty name, a negative
    version, a clause added to a MERGE that ran already); the message names the method, the
    argument, the value and what is accepted. A kind of :class:`InvalidOptionError`, which
    earlier releases raised for bad arguments."""


class ArgumentTypeError(LanceSparkError, TypeError):
    """An argument of a public method has a type it does not take (``restoreToVersion("1")``,
    ``update(set={1: "x"})``); the message names the method, the argument, the value and the
    types accepted."""


class SecretInConfError(InvalidOptionError):
    """A storage option that looks like a secret was given in the Spark conf
    (``spark.lance.storage.<key>``), which Spark copies in clear text into job properties and
    the event log; give it with ``lance_spark.register(spark, storage_options={...})`` or
    through the environment instead."""


class UnsupportedTypeError(LanceSparkError, ValueError):
    """A column's type cannot be represented on the other side (Lance <-> Spark)."""


class SchemaMismatchError(LanceSparkError, ValueError):
    """Written data does not fit the table's schema (missing, extra or mistyped column)."""


class ReplaceWhereMismatchError(LanceSparkError, ValueError):
    """Rows written with ``replaceWhere`` do not all match its predicate (Delta's
    ``DELTA_REPLACE_WHERE_MISMATCH``); nothing was committed."""


class ColumnNotFoundError(LanceSparkError, ValueError):
    """A column named by the user does not exist in the table."""


class TableNotFoundError(LanceSparkError, ValueError):
    """No Lance table exists at the given path."""


class TableAlreadyExistsError(LanceSparkError, ValueError):
    """A table is to be created where one exists already (a Lance table at the path, or a
    catalog entry of that name); the message names it and the way to write to it anyway."""


class IndexExistsError(InvalidOptionError):
    """An index is to be built under a name the table's index has already, without
    ``replace``; the message names the index and the table."""


class VersionNotFoundError(LanceSparkError, ValueError):
    """A version, timestamp or tag does not resolve to a version of the table."""


class BranchNotFoundError(LanceSparkError, ValueError):
    """A branch named by the user does not exist in the table; the message lists the ones
    that do."""


class CardinalityViolationError(LanceSparkError, ValueError):
    """A MERGE matched one target row with several source rows (Spark's
    ``MERGE_CARDINALITY_VIOLATION``); the table is left unchanged."""


class CommitConflictError(LanceSparkError):
    """A commit lost a race with another writer and could not be rebased.

    ``retryable`` is True when Lance reports that the same change may succeed when it is
    computed again on the newer version.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ConcurrentModificationError(CommitConflictError):
    """A MERGE, UPDATE, DELETE or addColumns kept meeting concurrent commits that changed rows
    it reads (or the fragments it changes), and was redone until its attempts ran out. Nothing
    of it was committed; the message names the version it read, the version that overlapped
    and what overlapped.

    Example::

        from lance_spark.errors import ConcurrentModificationError
        try:
            t.alias("t").merge(src.alias("s"), "s.id = t.id").whenNotMatchedInsertAll().execute()
        except ConcurrentModificationError as e:
            print(e.read_version, e.conflicting_version)  # run it again later
    """

    def __init__(
        self,
        message: str,
        *,
        read_version: int | None = None,
        conflicting_version: int | None = None,
    ) -> None:
        super().__init__(message, retryable=True)
        if read_version is None and conflicting_version is None:
            # Raised again from Spark's text of the worker's error: the versions it names.
            for pattern in _VERSIONS:
                found = pattern.search(message)
                if found is not None:
                    read_version, conflicting_version = int(found[1]), int(found[2])
                    break
        self.read_version = read_version
        self.conflicting_version = conflicting_version


# How the connector's messages name the two versions (source/conflicts.py, source/commit.py).
_VERSIONS = (
    re.compile(r"read version (\d+), and version (\d+)"),
    re.compile(r"started from version (\d+) but version (\d+)"),
)


class StreamChangeError(LanceSparkError):
    """A streaming read reached a version that changed or removed existing rows (UPDATE,
    DELETE, MERGE, overwrite, restore), or that has columns the stream's schema lacks. The
    message names the version; the option ``skipChangeCommits`` skips such versions."""


class CorruptTableError(LanceSparkError, OSError):
    """A file of a Lance table is damaged or missing: a version's manifest (under
    ``_versions/``) or a data file. The message names the table and the file and says what
    can still be done (read an earlier version with ``versionAsOf``, ``restoreToVersion``).

    An :class:`OSError` (the damage is in storage, not in the caller's input), like the error
    pylance raises for the same failure when writing.

    Example::

        try:
            LanceTable.forPath(spark, uri).toDF().count()
        except CorruptTableError as err:
            print(err.table_uri, err.path)
    """

    def __init__(
        self, message: str, *, table_uri: str | None = None, path: str | None = None
    ) -> None:
        super().__init__(message)
        self.table_uri = table_uri
        self.path = path


class UnquotableColumnError(LanceSparkError, ValueError):
    """A column name that Lance SQL cannot reference (it contains a backtick)."""


class JobClosedError(LanceSparkError):
    """A task attempt found its job already committed or aborted: what it wrote is nobody's
    (only ever raised inside a task of a job that is over)."""


class UnsupportedPySparkError(LanceSparkError):
    """This PySpark release lacks a private attribute lance_spark relies on (raised by
    ``register``); the message names each one and the PySpark version."""


class CompanionNotFoundError(LanceSparkError):
    """This installation of lance_spark has no JVM companion jar (a wheel built without a
    JDK, or a checkout where ``make jar`` has not run)."""


class PerformanceWarning(UserWarning):
    """A warning (not an error) that a session misses settings that make the connector
    faster; silence it with ``warnings.filterwarnings("ignore", category=PerformanceWarning)``."""
