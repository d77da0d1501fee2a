"""Every touch of Spark internals (Py4J, ``sparkContext``, plans, PySpark's private attributes),
each with a Spark Connect path; the bottom of the package next to :mod:`lance_spark.errors`.
It imports only pyspark (and sqlglot, to read SQL text in Connect expressions).

On a Spark Connect session there is no JVM on the client (``sparkContext``, ``_jdf``, ``_jc``
and ``_jsparkSession`` raise ``JVM_ATTRIBUTE_NOT_SUPPORTED``), so each helper answers from
what both APIs offer, and says in its docstring which Spark limit it works around.

One module a concern; the rest of the package uses the names re-exported here
(``from lance_spark import _spark``; ``_spark.is_connect(spark)``):

- :mod:`.session`: what a session is and has (kind, app id, parallelism, confs), Spark's
  parsing of type names and DDL, a Python function pickled as Spark's JVM runs it.
- :mod:`.sql`: Spark's own ``spark.sql`` beside the SQL front, a statement with a DataFrame
  in it, quoting of identifiers, literals and option lists.
- :mod:`.failures`: a connector error rebuilt from Spark's text of it; Spark's error types.
- :mod:`.plans`: expression analysis against a DataFrame (classic: the analysed plan).
- :mod:`.connect_exprs`: Spark Connect expression trees and SQL text (pure).
- :mod:`.threads`: PySpark patch 1, the JVM's active session in every Python thread.
- :mod:`.write_hooks`: PySpark patch 2, ``df.write`` / ``df.writeTo`` offered to the
  connector first.
- :mod:`.pyspark_surface`: the private PySpark attributes the connector uses, checked at
  ``register``.
- :mod:`.companion`: the JVM companion: its jar, confs, protocol, whether it is on.
- :mod:`.progress`: progress of a Spark job run by the connector.
- :mod:`.workers`: what the connector does once in each of Spark's Python workers.

A name here is the module's function itself: a test that replaces one (``companion_jar_path``)
replaces it in its module too, where that module's own functions look it up.
"""

from __future__ import annotations

from lance_spark._spark.companion import (
    COMPANION_ENABLED_CONF,
    COMPANION_EXTENSION,
    COMPANION_JAR_NAME,
    COMPANION_PROTOCOL,
    COMPANION_PROTOCOL_FUNCTION,
    FILTER_PUSHDOWN_CONF,
    QUIET_DAEMON_MODULE,
    SESSION_CATALOG_CLASS,
    SESSION_CATALOG_CONF,
    companion_conf,
    companion_enabled,
    companion_jar,
    companion_jar_path,
    companion_protocol,
    companion_statement,
    enable_companion,
    quiet_python_daemon,
    quiet_reregistration,
    quiet_spark_daemon,
    require_companion,
    serves_lance_tables,
    use_session_catalog,
)
from lance_spark._spark.connect_exprs import expression_names, parse_identifier, render, sql_names
from lance_spark._spark.failures import connector_errors, error_summary, spark_errors
from lance_spark._spark.plans import (
    UNCHECKED_DETERMINISM,
    column_sql,
    column_text,
    condition_sql,
    deterministic,
    drop_functions,
    expression_sql,
    frame_alias,
    generates_rows,
    one_value_per_row,
    referenced_columns,
)
from lance_spark._spark.progress import JobProgress, JobTracker, ProgressReport, track_jobs
from lance_spark._spark.pyspark_surface import check_pyspark_surface
from lance_spark._spark.session import (
    app_id,
    conf_items,
    default_parallelism,
    is_connect,
    parse_data_type,
    parse_schema,
    python_function_command,
)
from lance_spark._spark.sql import (
    PLAIN_SQL_ATTR,
    option_text,
    plain_sql,
    quote_identifier,
    sql_pairs,
    sql_string,
    sql_with_relation,
)
from lance_spark._spark.threads import active_session, install_thread_sessions
from lance_spark._spark.workers import freeze_worker_heap
from lance_spark._spark.write_hooks import WriteHandler, WriteRequest, install_write_hooks

__all__ = [
    "COMPANION_ENABLED_CONF",
    "COMPANION_EXTENSION",
    "COMPANION_JAR_NAME",
    "COMPANION_PROTOCOL",
    "COMPANION_PROTOCOL_FUNCTION",
    "FILTER_PUSHDOWN_CONF",
    "PLAIN_SQL_ATTR",
    "QUIET_DAEMON_MODULE",
    "SESSION_CATALOG_CLASS",
    "SESSION_CATALOG_CONF",
    "UNCHECKED_DETERMINISM",
    "JobProgress",
    "JobTracker",
    "ProgressReport",
    "WriteHandler",
    "WriteRequest",
    "active_session",
    "app_id",
    "check_pyspark_surface",
    "column_sql",
    "column_text",
    "companion_conf",
    "companion_enabled",
    "companion_jar",
    "companion_jar_path",
    "companion_protocol",
    "companion_statement",
    "condition_sql",
    "conf_items",
    "connector_errors",
    "default_parallelism",
    "deterministic",
    "drop_functions",
    "enable_companion",
    "error_summary",
    "expression_names",
    "expression_sql",
    "frame_alias",
    "freeze_worker_heap",
    "generates_rows",
    "install_thread_sessions",
    "install_write_hooks",
    "is_connect",
    "one_value_per_row",
    "option_text",
    "parse_data_type",
    "parse_identifier",
    "parse_schema",
    "plain_sql",
    "python_function_command",
    "quiet_python_daemon",
    "quiet_reregistration",
    "quiet_spark_daemon",
    "quote_identifier",
    "referenced_columns",
    "render",
    "require_companion",
    "serves_lance_tables",
    "spark_errors",
    "sql_names",
    "sql_pairs",
    "sql_string",
    "sql_with_relation",
    "track_jobs",
    "use_session_catalog",
]
