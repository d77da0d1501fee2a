"""Two messages Lance prints on the connector's normal paths, silenced exactly.

- ``lance is not fork-safe ...``: pylance warns before every ``fork()`` of a process that
  imported it. Starting a SparkSession forks once to launch the JVM (py4j's ``Popen`` with a
  ``preexec_fn``), which execs at once and never touches Lance; Spark's Python workers are
  forked by a daemon that has not imported Lance. Only that warning is filtered; it can go
  when pylance warns only where Lance state would be inherited.
- ``No existing dataset at ... it will be created`` (Rust target
  ``lance::dataset::write::insert``, WARN): printed by every write task of a job that creates
  a table, since each task writes its fragments before the one commit creates the table.
  ``LANCE_LOG`` keeps Lance's default level (warn) and raises only that target to error; a
  ``LANCE_LOG`` set by the user is left alone.
"""

from __future__ import annotations

import os
import warnings

LANCE_LOG = "LANCE_LOG"
_DEFAULT_LANCE_LOG = "warn,lance::dataset::write::insert=error"


def install() -> None:
    """Apply both (idempotent). Runs when ``lance_spark`` is imported, in the driver and in
    every Python worker, before Lance is imported."""
    os.environ.setdefault(LANCE_LOG, _DEFAULT_LANCE_LOG)
    warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)


install()
