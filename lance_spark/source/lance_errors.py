"""Every recognition of a pylance error, in one place.

pylance (14.0.2) has error classes for a commit conflict only; a missing table or version, and
a damaged file, are ``ValueError`` / ``OSError`` / ``RuntimeError`` whose Rust text says what
happened. The connector reads those texts here and nowhere else, so a pylance upgrade that
rewords one fails ``tests/unit/test_lance_errors.py``, which provokes each error from the
installed pylance, instead of silently changing what the connector does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lance.commit import CommitConflictError as LanceCommitConflict

from lance_spark.errors import LanceSparkError

# A missing dataset ("Dataset at path ... was not found"), version ("Version N not found")
# or file ("Not found: <path>").
_NOT_FOUND = "not found"

# pylance 14.0.2 has no error class for a damaged file. It raises ValueError (opening a
# dataset), OSError (committing, checkout_version), RuntimeError (versions()), or
# pyarrow.ArrowInvalid, a ValueError (scanning), with the Rust error's text; and a Rust panic
# (pyo3's PanicException, a BaseException) for a manifest whose footer is intact but whose
# body is not. These are the texts it gives, checked for a truncated, an empty and a garbage
# manifest, and a deleted, truncated, emptied and garbage data file:
_DAMAGE_TEXTS = (
    "file size is too small",  # truncated (or garbage) file: its footer points before 0
    "does not have sufficient data",  # shorter than a footer
    " for object of size ",  # "Invalid range 0..N for object of size M bytes": read past the end
    "Encountered corrupt file",  # versions(): "... <path>: Invalid format: magic number ..."
    "does not appear to be a Lance file",  # a data file with a bad magic number
    "Requested range was invalid",  # versions(): an empty manifest
    "Invalid format: manifest length does not match",  # versions(): a garbage manifest
)
_PANIC_TEXT = "out of range for slice of length"
_MISSING_FILE = re.compile(r"Not found: (\S+?)(?:,|$)")
_CORRUPT_FILE = re.compile(r"Encountered corrupt file (\S+?):")
_RUST_LOCATION = re.compile(r",? /\S+\.rs:\d+:\d+")


def first_line(err: BaseException) -> str:
    """The first line of a pylance error's text, without the Rust source location."""
    lines = str(err).split(", /")[0].splitlines()
    return lines[0] if lines else type(err).__name__


def without_location(text: str) -> str:
    """A pylance error's text without the Rust source locations in it."""
    return _RUST_LOCATION.sub("", text).strip()


def is_not_found(err: BaseException) -> bool:
    """Whether ``err`` says a dataset, a version or a file does not exist (and is not one of
    the damaged-file errors, whose texts can also say "not found")."""
    return (
        isinstance(err, (OSError, ValueError))
        and _NOT_FOUND in str(err).lower()
        and damage(err) is None
    )


def damage(err: BaseException) -> str | None:
    """pylance's text (without Rust locations) when ``err`` says a file of the table is
    damaged, else None. An error the connector raised itself is not pylance's."""
    if isinstance(err, LanceSparkError):  # already translated (its text quotes pylance's)
        return None
    text = str(err)
    if type(err).__name__ == "PanicException":
        return text if _PANIC_TEXT in text else None
    if not isinstance(err, (OSError, ValueError, RuntimeError)):
        return None
    if any(marker in text for marker in _DAMAGE_TEXTS):
        return without_location(text)
    return None


def missing_file(text: str) -> str | None:
    """The path a "Not found: <path>" text names, else None."""
    found = _MISSING_FILE.search(text)
    return found.group(1) if found else None


def corrupt_file(text: str) -> str | None:
    """The path an "Encountered corrupt file <path>:" text names, else None."""
    found = _CORRUPT_FILE.search(text)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Conflict:
    """A commit pylance refused because another writer committed first."""

    retryable: bool  # the same change may succeed computed again on the newer version


def commit_conflict(err: BaseException) -> Conflict | None:
    """What ``err`` says of a lost commit race, or None when it is not one. pylance raises
    :class:`lance.commit.CommitConflictError` from ``LanceDataset.commit``; compaction's
    commit raises an ``OSError`` whose text says "conflict" (and "Retryable" when it is)."""
    if isinstance(err, LanceCommitConflict):
        return Conflict(retryable=bool(getattr(err, "retryable", False)))
    if isinstance(err, OSError) and "conflict" in str(err).lower():
        return Conflict(retryable="retryable" in str(err).lower())
    return None
