"""Options of the ``lance`` data source, parsed once into frozen dataclasses.

Spark hands a data source its options as a case-insensitive mapping of strings. Every key
is validated here: an unknown key is an error that lists the valid ones, so a typo such as
``verison`` fails loudly instead of silently reading the latest version.

Storage options (credentials, endpoints) come from ``storage.<key>`` options, from
``register(spark, storage_options={...})`` and from the Spark conf ``spark.lance.storage.<key>``
(captured by :func:`lance_spark.register`; secret-looking keys are refused there, see
:func:`secret_storage_keys`). They are kept out of every ``repr`` so they never reach a log
line or an error message.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from lance_spark.errors import InvalidOptionError

# --- the registry ---------------------------------------------------------------------------
# Every option of the source is declared once, below: its Spark spelling, where it applies,
# its default and meaning as the options reference (docs/reference/options.md) shows them,
# and its other names. The key sets, the names in messages, that reference and the resource
# the JVM companion reads (jvm/resources/.../options.properties) are made from it; the tests
# fail when the reference or the resource differs from what the registry makes.

Kind = Literal["read", "write", "stream_read", "stream_write"]
READ: frozenset[Kind] = frozenset({"read"})
WRITE: frozenset[Kind] = frozenset({"write"})
STREAM_READ: frozenset[Kind] = frozenset({"stream_read"})
STREAM_WRITE: frozenset[Kind] = frozenset({"stream_write"})
ANY_WRITE = WRITE | STREAM_WRITE
_SIDES: dict[frozenset[Kind], str] = {
    READ: "read",
    WRITE: "write",
    STREAM_READ: "streaming read",
    STREAM_WRITE: "streaming write",
    ANY_WRITE: "(streaming) write",
    READ | STREAM_READ: "read, streaming read",
    READ | WRITE | STREAM_WRITE: "read, (streaming) write",
}


@dataclass(frozen=True)
class Option:
    """One option of the ``lance`` source.

    ``name`` is Spark's spelling (Spark hands a source its keys lower-cased; messages and the
    reference use this one); ``aliases`` are other names taken for it (Delta's older ones, the
    Java lance-spark connector's), ``ignored`` an option taken only so that a job written for
    the Java connector runs unchanged (it changes nothing here); ``documented`` False for a
    key Spark itself sets.
    """

    name: str
    kinds: frozenset[Kind]
    doc: str
    default: str = ""
    side: str | None = None  # the reference's "side" column, when the kinds do not say it all
    aliases: tuple[str, ...] = ()
    ignored: bool = False
    documented: bool = True

    @property
    def key(self) -> str:
        return self.name.lower()


OPTIONS: list[Option] = []


def _option(
    name: str,
    kinds: frozenset[Kind],
    doc: str,
    *,
    default: str = "",
    side: str | None = None,
    aliases: tuple[str, ...] = (),
    ignored: bool = False,
    documented: bool = True,
) -> str:
    """Declare an option; returns its key (lower case), the name the parsers look it up by."""
    OPTIONS.append(Option(name, kinds, doc, default, side, aliases, ignored, documented))
    return name.lower()


def _java_tuning(names: Sequence[str], kinds: frozenset[Kind]) -> None:
    """Declare the Java lance-spark connector's tuning options ``names``: taken so that its
    jobs run unchanged, ignored (lance_spark tunes the same things its own way)."""
    for name in names:
        _option(
            name,
            kinds,
            "the Java lance-spark connector's tuning: taken so that its jobs run unchanged, "
            "no effect here",
            ignored=True,
        )


def _listed(values: Sequence[str]) -> str:
    return ", ".join(f"`{v}`" for v in values)


# --- keys shared by reads and writes -------------------------------------------------------
PATH = "path"
STORAGE_PREFIX = "storage."
CATALOG_OPTION_PREFIX = "option."
MAIN_BRANCH = "main"
# The branch a read or write is on (Lance branches; absent or "main": the main branch).
BRANCH = _option(
    "branch",
    READ | ANY_WRITE,
    "the [branch](../branches.md) to read (its versions for `versionAsOf`...) or commit to; "
    "it must exist",
    default="`main`",
)
# Keys Spark itself puts into the options of a data source (catalog tables, DataFrameReader).
SPARK_KEYS = frozenset({"path", "paths", "location", "provider", "owner", "comment", "external"})

# Storage keys taken for secrets: the lower-cased key contains one of these words...
SECRET_KEY_WORDS = ("secret", "password", "passwd", "token", "credential", "key", "sas")
# ...unless it names where the secret is (a file, a path, a URI), not the secret itself,
SECRET_LOCATION_SUFFIXES = ("_file", "_path", "_uri")
# ...or is one of these (an identifier and a flag that happen to contain "key").
NOT_SECRET_KEYS = frozenset({"aws_sse_kms_key_id", "aws_sse_bucket_key_enabled"})
# A value holding a URL with a password (``http://user:pass@proxy``) is a secret too.
_URL_WITH_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]*@")

# --- read keys ------------------------------------------------------------------------------
VERSION = _option("version", READ, "version number to read", default="latest")
VERSION_AS_OF = _option("versionAsOf", READ, "version number to read (Delta's name)")
TIMESTAMP_AS_OF = _option(
    "timestampAsOf", READ, "ISO-8601 time; the latest version committed at or before it"
)
TAG = _option("tag", READ, "a tag's version")
COLUMNS = _option(
    "columns",
    READ,
    "columns to read, in that order: a comma-separated list (`id, label`; each name is "
    'stripped) or a JSON list of names, kept exactly (`["a,b", " padded "]`). A '
    "comma-separated list that could mean a column whose name has a comma or surrounding "
    "spaces is an error naming that column",
    default="all",
)
FILTER = _option("filter", READ, "a Lance SQL predicate applied in the scan")
METADATA_COLUMNS = _option(
    "metadata_columns",
    READ,
    "any of `_rowid`, `_rowaddr`, `_fragid`, `_row_created_at_version`, "
    "`_row_last_updated_at_version` (bigint columns)",
)
DEFAULT_BATCH_SIZE = 8192
BATCH_SIZE = _option(
    "batch_size",
    READ | STREAM_READ | ANY_WRITE,
    "rows per Arrow batch of a read; on a write taken for the Java connector's jobs and "
    "ignored (Spark sends a Python writer batches of "
    "`spark.sql.execution.arrow.maxRecordsPerBatch` rows)",
    default=str(DEFAULT_BATCH_SIZE),
    side="read, streaming read, (streaming) write",
)
# A fragment larger than this is split by row range; smaller ones are packed together.
# Large enough that a table of a few million rows makes one task per core: every task pays
# a fixed cost (a Python worker, opening the table), measured in BENCHMARKS.md.
DEFAULT_ROWS_PER_PARTITION = 4_000_000
ROWS_PER_PARTITION = _option(
    "rows_per_partition",
    READ,
    "fragments larger than this are split, smaller packed",
    default=str(DEFAULT_ROWS_PER_PARTITION),
)
DEFAULT_MIN_PARTITIONS = 0  # 0: the number of cores Spark reports, see _planning
MIN_PARTITIONS = _option(
    "min_partitions",
    READ,
    "at least this many tasks when the table has the rows",
    default="Spark's default parallelism",
)
# The Java connector's read tuning, which lance_spark does on its own terms: taken, ignored.
_java_tuning(
    ("pushDownFilters", "block_size", "index_cache_size", "metadata_cache_size", "topN_push_down"),
    READ,
)

# _row_created_at_version / _row_last_updated_at_version: the version that inserted / last
# rewrote each row (Lance keeps them per fragment; what diff uses to tell updates apart).
ROW_VERSION_COLUMNS = ("_row_created_at_version", "_row_last_updated_at_version")
METADATA_COLUMN_NAMES = ("_rowid", "_rowaddr", "_fragid", *ROW_VERSION_COLUMNS)

# The change data feed (Delta's names): readChangeFeed with a version or time range.
READ_CHANGE_FEED = _option(
    "readChangeFeed",
    READ | STREAM_READ,
    "read the changes of a version range, or stream them (see "
    "[Change data feed](../streaming.md#change-data-feed)); `readChangeData` is Delta's "
    "older name",
    default="false",
    aliases=("readChangeData",),
)
STARTING_VERSION = _option(
    "startingVersion",
    READ | STREAM_READ,
    "a change feed read: the first version of the range (this or `startingTimestamp`); a "
    "streaming read: the first version to read (or `latest`)",
    default="streaming: the current snapshot",
    side="read (change feed), streaming read",
)
STARTING_TIMESTAMP = _option(
    "startingTimestamp",
    READ | STREAM_READ,
    "the first version committed at or after this time (of the range, or of the stream)",
    side="read (change feed), streaming read",
)
ENDING_VERSION = _option(
    "endingVersion", READ, "last version of the range", default="latest", side="read (change feed)"
)
ENDING_TIMESTAMP = _option(
    "endingTimestamp",
    READ,
    "the last version committed at or before this time ends the range",
    default="latest",
    side="read (change feed)",
)
REPORT_OVERWRITES = _option(
    "reportOverwrites",
    READ | STREAM_READ,
    "report an overwrite or restore in the range instead of failing",
    default="false",
    side="read (change feed), streaming read",
)
CHANGE_FEED_KEYS = frozenset(
    {
        READ_CHANGE_FEED,
        STARTING_VERSION,
        STARTING_TIMESTAMP,
        ENDING_VERSION,
        ENDING_TIMESTAMP,
        REPORT_OVERWRITES,
    }
)

# --- write keys -----------------------------------------------------------------------------
MERGE_SCHEMA = _option("mergeSchema", ANY_WRITE, "add new columns on append", default="false")
USER_METADATA = _option("userMetadata", ANY_WRITE, "free text recorded with the commit")
DEFAULT_MAX_ROWS_PER_FILE = 1_048_576
MAX_ROWS_PER_FILE = _option(
    "max_rows_per_file",
    ANY_WRITE,
    "Lance writer setting; `max_row_per_file` is the Java lance-spark connector's name",
    default=str(DEFAULT_MAX_ROWS_PER_FILE),
    aliases=("max_row_per_file",),
)
DEFAULT_MAX_ROWS_PER_GROUP = 1024
MAX_ROWS_PER_GROUP = _option(
    "max_rows_per_group",
    ANY_WRITE,
    "Lance writer setting",
    default=str(DEFAULT_MAX_ROWS_PER_GROUP),
)
DEFAULT_MAX_BYTES_PER_FILE = 90 * 1024**3
MAX_BYTES_PER_FILE = _option(
    "max_bytes_per_file", ANY_WRITE, "Lance writer setting", default="90 GiB"
)
# Lance file formats a new table can be written in (pylance 14's write_dataset; "stable" is
# 2.2, "next" 2.3, "legacy" 0.1).
DATA_STORAGE_VERSIONS = ("2.0", "2.1", "2.2", "2.3", "stable", "next", "legacy", "0.1")
DATA_STORAGE_VERSION = _option(
    "data_storage_version",
    ANY_WRITE,
    f"file format of a table the write creates, rows or none ({_listed(DATA_STORAGE_VERSIONS)})",
    default="Lance's default",
)
ENABLE_STABLE_ROW_IDS = _option(
    "enable_stable_row_ids",
    ANY_WRITE,
    "stable row ids for tables the connector creates (fixed at creation: refused as a table "
    "property)",
    default="true",
)
_java_tuning(("use_queued_write_buffer", "queue_depth"), ANY_WRITE)
# `<col>.arrow.fixed-size-list.size`: the option name lance-spark (Java) users know.
VECTOR_SIZE_SUFFIX = ".arrow.fixed-size-list.size"
# `<col>.lance.encoding=blob`: binary column <col> as a Lance blob column (the Java lance-spark
# connector's name; the column metadata key is `lance-encoding:blob`).
BLOB_ENCODING_SUFFIX = ".lance.encoding"
BLOB_ENCODINGS = ("blob",)
# The per-column options (`<col><suffix>`), as the options reference lists them.
COLUMN_OPTIONS: tuple[tuple[str, str], ...] = (
    (
        VECTOR_SIZE_SUFFIX,
        "make array column `<col>` a vector (`fixed_size_list`) of that length when creating "
        "the table",
    ),
    (
        BLOB_ENCODING_SUFFIX,
        "`blob`: make binary column `<col>` a Lance blob column when creating the table (see "
        "[Blob columns](../writing.md#blob-columns)); on append the table's column must be one",
    ),
)
# Idempotent batch writes (Delta's names): skip a write already committed for (app, version).
TXN_APP_ID = _option(
    "txnAppId",
    WRITE,
    "an idempotent write: skipped when the table holds `(txnAppId, txnVersion)` or a later "
    "version of that `txnAppId`",
)
TXN_VERSION = _option("txnVersion", WRITE, "the version of an idempotent write (see `txnAppId`)")
# The Spark application recorded in the history entry (appId): the JVM companion gives every
# write its application's id, which a session without register has no other way to know.
SPARK_APP_ID = _option(
    "sparkAppId",
    ANY_WRITE,
    "the application id recorded in history (`appId`); the JVM companion sets it on every "
    "write, `register`'s session id wins",
    default="the session's application",
)
# A row-level operation Spark plans (MERGE / UPDATE / DELETE through the companion's catalog):
# the write of its change rows, and the version its scan pinned. Set by the companion only.
ROW_LEVEL_OPERATIONS = ("DELETE", "UPDATE", "MERGE")
ROW_LEVEL_OPERATION = _option(
    "rowLevelOperation",
    WRITE,
    "set by the JVM companion only: the write of the change rows of a `MERGE` / `UPDATE` / "
    "`DELETE` Spark planned (`MERGE`, `UPDATE` or `DELETE`)",
    default="none",
)
ROW_LEVEL_VERSION = _option(
    "rowLevelVersion",
    WRITE,
    "set by the JVM companion only: the version the scan of a row-level operation read",
    default="none",
)
# The Lance predicate every row the operation's scan read satisfies (a MERGE's key filter), for
# the check against concurrent commits: rows added meanwhile that do not match it are no
# conflict. Set by the companion only.
ROW_LEVEL_READ_FILTER = _option(
    "rowLevelReadFilter",
    WRITE,
    "set by the JVM companion only: the Lance predicate a `MERGE`'s scan read the target "
    "with (its key filter); rows committed meanwhile that do not match it do not conflict "
    "with the statement",
    default="none",
)
# The columns a MERGE WITH SCHEMA EVOLUTION adds, last in its change rows: committed with the
# MERGE's own version. Set by the companion only.
ROW_LEVEL_ADDED_COLUMNS = _option(
    "rowLevelAddedColumns",
    WRITE,
    "set by the JVM companion only: the new columns (comma-separated) a `MERGE WITH SCHEMA "
    "EVOLUTION` adds to the table, in the same version as its changes",
    default="none",
)
# The id the table API gives a MERGE / UPDATE / DELETE it runs as Spark SQL: recorded in the
# history entry, where the table API finds the version (and the metrics) of its statement;
# and the statement's history parameters (JSON: its predicate, the columns it sets).
STATEMENT_ID = _option(
    "statementId",
    WRITE,
    "set by the table API only: the id recorded with the version a `merge` / `update` / "
    "`delete` commits (where the table API finds its metrics)",
    default="none",
)
STATEMENT_PARAMETERS = _option(
    "statementParameters",
    WRITE,
    "a row-level statement's own history parameters (JSON object of strings), over the ones "
    "the JVM companion reads from Spark's plan (`predicate`, a `MERGE`'s clauses)",
    default="none",
)
# The catalog statement a write makes a table with, as its history entry names it (Delta's
# names); without it a write is a WRITE. Set by the companion only.
TABLE_OPERATIONS = (
    "CREATE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE AS SELECT",
)
TABLE_OPERATION = _option(
    "tableOperation",
    WRITE,
    "set by the JVM companion only: the catalog statement the write makes a table with, as "
    f"history names it ({_listed(TABLE_OPERATIONS)}); other writes are `WRITE`",
    default="none",
)
# Streaming writes: the id recorded with each batch (default: the query's own id).
STREAMING_QUERY_ID = _option(
    "streamingQueryId",
    STREAM_WRITE,
    "the id recorded with each micro-batch",
    default="the query's id",
)
CHECKPOINT_LOCATION = _option(
    "checkpointLocation",
    STREAM_WRITE,
    "Spark's, passed to a streaming sink",
    documented=False,
)
# Overwrites (Delta's names): replace only the rows matching a predicate, in one version; and
# replace the table's schema (without it an overwrite keeps the table's columns and types).
REPLACE_WHERE = _option(
    "replaceWhere",
    WRITE,
    "a Lance SQL predicate: delete the matching rows and append the written ones in one "
    "version; every written row must match ([Writing](../writing.md))",
    side="write (overwrite)",
)
OVERWRITE_SCHEMA = _option(
    "overwriteSchema",
    WRITE,
    "replace the table's schema with the DataFrame's on overwrite",
    default="false",
    side="write (overwrite)",
)
# Auto compaction after a write (Delta's names): compact, as a version of its own, when the
# committed table has at least minNumFiles small fragments (fewer rows than Lance's compaction
# target). Write options, with session defaults from these confs (read by register).
DEFAULT_AUTO_COMPACT = False
DEFAULT_AUTO_COMPACT_MIN_NUM_FILES = 50  # Delta's default
AUTO_COMPACT_CONF = "spark.lance.autoCompact.enabled"
AUTO_COMPACT_MIN_NUM_FILES_CONF = "spark.lance.autoCompact.minNumFiles"
AUTO_COMPACT = _option(
    "autoCompact",
    ANY_WRITE,
    "compact after the commit when the table has `autoCompact.minNumFiles` small fragments "
    "(see [Table maintenance](../table-api.md))",
    default=f"`{AUTO_COMPACT_CONF}`, else false",
)
AUTO_COMPACT_MIN_NUM_FILES = _option(
    "autoCompact.minNumFiles",
    ANY_WRITE,
    "at least 1",
    default=f"`{AUTO_COMPACT_MIN_NUM_FILES_CONF}`, else {DEFAULT_AUTO_COMPACT_MIN_NUM_FILES}",
)
# Auto indexing after a write: index the appended rows (a version of its own) when one of the
# table's indexes leaves at least autoIndex.minRows rows unindexed. Write options, with session
# defaults from these confs (read by register).
DEFAULT_AUTO_INDEX = False
DEFAULT_AUTO_INDEX_MIN_ROWS = 100_000
AUTO_INDEX_CONF = "spark.lance.autoIndex.enabled"
AUTO_INDEX_MIN_ROWS_CONF = "spark.lance.autoIndex.minRows"
AUTO_INDEX = _option(
    "autoIndex",
    ANY_WRITE,
    "after the commit, index the rows an index of the table does not cover when they are "
    "at least `autoIndex.minRows` (see [Indexes](../table-api.md))",
    default=f"`{AUTO_INDEX_CONF}`, else false",
)
AUTO_INDEX_MIN_ROWS = _option(
    "autoIndex.minRows",
    ANY_WRITE,
    "at least 1",
    default=f"`{AUTO_INDEX_MIN_ROWS_CONF}`, else {DEFAULT_AUTO_INDEX_MIN_ROWS}",
)
# --- streaming read keys (spark.readStream; Delta's names) --------------------------------
MAX_FILES_PER_TRIGGER = _option(  # Lance fragments per micro-batch
    "maxFilesPerTrigger",
    STREAM_READ,
    "fragments per micro-batch (at least one)",
    default="no limit",
)
MAX_BYTES_PER_TRIGGER = _option(  # bytes of fragments per micro-batch (soft)
    "maxBytesPerTrigger",
    STREAM_READ,
    "bytes of fragments per micro-batch (soft: at least one fragment)",
    default="no limit",
)
SKIP_CHANGE_COMMITS = _option(
    "skipChangeCommits",
    STREAM_READ,
    "skip versions that change existing rows instead of failing",
    default="false",
)


def _keys(kind: Kind) -> frozenset[str]:
    return frozenset(o.key for o in OPTIONS if kind in o.kinds)


READ_KEYS = _keys("read")
WRITE_KEYS = _keys("write")
STREAM_READ_KEYS = _keys("stream_read")
STREAM_WRITE_KEYS = _keys("stream_write")
OPTIONS_BY_KEY = {o.key: o for o in OPTIONS}
_IGNORED = frozenset(o.key for o in OPTIONS if o.ignored)  # not offered in messages
# Other names of an option (lower case): the option they name.
ALIASES = {alias.lower(): o.key for o in OPTIONS for alias in o.aliases}
# Spark's own spelling of options, for messages (Spark lower-cases keys on the way in).
_DISPLAY = {o.key: o.name for o in OPTIONS} | {
    alias.lower(): alias for o in OPTIONS for alias in o.aliases
}
# The words a boolean option takes as true (and the JVM companion with it).
TRUE_WORDS = ("true", "1", "yes")


def _display(key: str) -> str:
    return _DISPLAY.get(key, key)


def reference_table() -> str:
    """The options reference's table (docs/reference/options.md), made from the registry."""
    rows = [
        "| option | side | default | meaning |",
        "|---|---|---|---|",
    ]
    for o in OPTIONS:
        if not o.documented:
            continue
        names = ", ".join(f"`{n}`" for n in (o.name, *o.aliases))
        side = o.side or _SIDES[o.kinds]
        rows.append(f"| {names} | {side} | {o.default} | {o.doc} |")
    for suffix, doc in COLUMN_OPTIONS:
        rows.append(f"| `<col>{suffix}` | write | | {doc} |")
    rows.append("| `storage.<key>` | both | | Lance storage option `<key>` |")
    return "\n".join(rows) + "\n"


def companion_resource() -> str:
    """``options.properties`` for the JVM companion (``lance_spark.companion.LanceOptions``)."""
    lines = ["# Generated from lance_spark/source/options.py (OPTIONS); do not edit."]
    lines += [f"option.{o.key}={o.name}" for o in OPTIONS]
    lines += [f"alias.{alias}={key}" for alias, key in sorted(ALIASES.items())]
    lines.append("boolean.true=" + ",".join(TRUE_WORDS))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class TimeTravel:
    """Which version to read: at most one field is set; none means the latest."""

    version: int | None = None
    timestamp: datetime | None = None
    tag: str | None = None

    def describe(self) -> str:
        if self.version is not None:
            return f"version {self.version}"
        if self.timestamp is not None:
            return f"timestamp {self.timestamp.isoformat()}"
        if self.tag is not None:
            return f"tag {self.tag!r}"
        return "the latest version"


@dataclass(frozen=True)
class ChangeFeedOptions:
    """The range of a change feed read: versions from ``starting_*`` to ``ending_*``
    (inclusive; no ending: the latest)."""

    starting_version: int | None = None
    starting_timestamp: datetime | None = None
    ending_version: int | None = None
    ending_timestamp: datetime | None = None
    report_overwrites: bool = False


@dataclass(frozen=True)
class ReadOptions:
    """Parsed options of ``spark.read.format("lance")``."""

    uri: str | None
    branch: str | None = None  # None: the main branch
    time_travel: TimeTravel = TimeTravel()
    columns: tuple[str, ...] | None = None
    # The raw value when `columns` came as a plain comma-separated list (None for a JSON
    # list): the reader checks it against the table's names, see check_plain_names.
    columns_plain: str | None = None
    filter: str | None = None
    metadata_columns: tuple[str, ...] = ()
    batch_size: int = DEFAULT_BATCH_SIZE
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    min_partitions: int = DEFAULT_MIN_PARTITIONS
    change_feed: ChangeFeedOptions | None = None  # readChangeFeed=true
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class AutoCompact:
    """Whether a write compacts the table after committing, and from how many small
    fragments on (write options autoCompact / autoCompact.minNumFiles, session confs
    spark.lance.autoCompact.enabled / spark.lance.autoCompact.minNumFiles)."""

    enabled: bool = DEFAULT_AUTO_COMPACT
    min_num_files: int = DEFAULT_AUTO_COMPACT_MIN_NUM_FILES


@dataclass(frozen=True)
class AutoIndex:
    """Whether a write indexes the rows its table's indexes do not cover after committing,
    and from how many such rows on (write options autoIndex / autoIndex.minRows, session
    confs spark.lance.autoIndex.enabled / spark.lance.autoIndex.minRows)."""

    enabled: bool = DEFAULT_AUTO_INDEX
    min_rows: int = DEFAULT_AUTO_INDEX_MIN_ROWS


@dataclass(frozen=True)
class WriteOptions:
    """Parsed options of ``df.write.format("lance")``."""

    uri: str | None
    branch: str | None = None  # None: the main branch
    merge_schema: bool = False
    user_metadata: str | None = None
    vector_sizes: Mapping[str, int] = field(default_factory=dict)
    # `<col>.lance.encoding=blob` options: the columns (as given, Spark lower-cases them).
    blob_columns: tuple[str, ...] = ()
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    max_rows_per_group: int = DEFAULT_MAX_ROWS_PER_GROUP
    max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE
    data_storage_version: str | None = None
    enable_stable_row_ids: bool | None = None
    # txnAppId + txnVersion of a batch write (both or neither).
    txn_app_id: str | None = None
    txn_version: int | None = None
    spark_app_id: str | None = None
    # A row-level operation's change rows (DELETE / UPDATE / MERGE) and its pinned version.
    row_level_operation: str | None = None
    row_level_version: int | None = None
    row_level_read_filter: str | None = None  # the Lance filter its scan read with
    row_level_added_columns: tuple[str, ...] = ()  # a MERGE WITH SCHEMA EVOLUTION's new columns
    statement_id: str | None = None  # the table API's id of a row-level statement
    statement_parameters: Mapping[str, str] = field(default_factory=dict)
    table_operation: str | None = None  # the catalog statement that writes it (None: WRITE)
    streaming_query_id: str | None = None
    # replaceWhere: the Lance SQL predicate of the rows an overwrite replaces (None: all).
    replace_where: str | None = None
    overwrite_schema: bool = False
    auto_compact: AutoCompact = AutoCompact()
    auto_index: AutoIndex = AutoIndex()
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class StreamReadOptions:
    """Parsed options of ``spark.readStream.format("lance")``."""

    uri: str | None
    starting_version: int | None = None
    starting_timestamp: datetime | None = None
    max_files: int | None = None
    max_bytes: int | None = None
    skip_change_commits: bool = False
    read_change_feed: bool = False  # change rows (Delta's columns) instead of appended rows
    report_overwrites: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)


def parse_read_options(
    options: Mapping[str, str], *, session_storage: Mapping[str, str] | None = None
) -> ReadOptions:
    """Validate and parse read options (keys compared case-insensitively)."""
    opts = _lower(options)
    _check_known(opts, READ_KEYS, "read")
    change_feed = _change_feed(opts)
    return ReadOptions(
        change_feed=change_feed,
        uri=_uri(opts),
        branch=_branch(opts),
        time_travel=_time_travel(opts),
        columns=_name_list(opts, COLUMNS),
        columns_plain=_plain_text(opts, COLUMNS),
        filter=_non_empty(opts, FILTER),
        metadata_columns=_metadata_columns(opts),
        batch_size=_positive_int(opts, BATCH_SIZE, DEFAULT_BATCH_SIZE),
        rows_per_partition=_positive_int(opts, ROWS_PER_PARTITION, DEFAULT_ROWS_PER_PARTITION),
        min_partitions=_non_negative_int(opts, MIN_PARTITIONS, DEFAULT_MIN_PARTITIONS),
        storage=_storage(opts, session_storage),
    )


def change_feed_requested(options: Mapping[str, str]) -> bool:
    """Whether ``options`` ask for the change feed (``readChangeFeed``, parsed as every boolean
    option is; an invalid value is reported by the full parse)."""
    opts = _lower(options)
    try:
        return _bool(opts, READ_CHANGE_FEED, default=False)
    except InvalidOptionError:
        return False


_NOT_WITH_CHANGE_FEED = (VERSION, VERSION_AS_OF, TIMESTAMP_AS_OF, TAG, COLUMNS, METADATA_COLUMNS)


def _change_feed(opts: Mapping[str, str]) -> ChangeFeedOptions | None:
    if not _bool(opts, READ_CHANGE_FEED, default=False):
        used = sorted(_display(k) for k in CHANGE_FEED_KEYS - {READ_CHANGE_FEED} if k in opts)
        if used:
            raise InvalidOptionError(
                f"option {used[0]} is a change feed option: add .option('readChangeFeed', "
                "'true') to read the changes of a version range"
            )
        return None
    clash = [_display(k) for k in _NOT_WITH_CHANGE_FEED if k in opts]
    if clash:
        raise InvalidOptionError(
            f"option {clash[0]} does not apply to a change feed read (readChangeFeed=true), "
            "which reads the versions between startingVersion and endingVersion"
        )
    if (STARTING_VERSION in opts) == (STARTING_TIMESTAMP in opts):
        raise InvalidOptionError(
            "a change feed read (readChangeFeed=true) needs exactly one of startingVersion "
            "and startingTimestamp"
        )
    if ENDING_VERSION in opts and ENDING_TIMESTAMP in opts:
        raise InvalidOptionError("give endingVersion or endingTimestamp, not both")

    def stamp(key: str) -> datetime | None:
        value = opts.get(key)
        return None if value is None else parse_timestamp(value, key=key)

    return ChangeFeedOptions(
        starting_version=(
            None if STARTING_VERSION not in opts else _non_negative_int(opts, STARTING_VERSION, 0)
        ),
        starting_timestamp=stamp(STARTING_TIMESTAMP),
        ending_version=(
            None if ENDING_VERSION not in opts else _non_negative_int(opts, ENDING_VERSION, 0)
        ),
        ending_timestamp=stamp(ENDING_TIMESTAMP),
        report_overwrites=_bool(opts, REPORT_OVERWRITES, default=False),
    )


def parse_stream_read_options(
    options: Mapping[str, str], *, session_storage: Mapping[str, str] | None = None
) -> StreamReadOptions:
    """Validate and parse the options of a streaming read."""
    opts = _lower(options)
    _check_known(opts, STREAM_READ_KEYS, "streaming read")
    if STARTING_VERSION in opts and STARTING_TIMESTAMP in opts:
        raise InvalidOptionError(
            "options startingVersion and startingTimestamp both say where the stream starts; "
            "give one of them"
        )
    starting_version = None
    if STARTING_VERSION in opts:
        if opts[STARTING_VERSION].strip().lower() == "latest":
            starting_version = -1  # the versions after the latest one: new commits only
        else:
            starting_version = _positive_int(opts, STARTING_VERSION, 1)
    timestamp = opts.get(STARTING_TIMESTAMP)
    max_files = opts.get(MAX_FILES_PER_TRIGGER)
    max_bytes = opts.get(MAX_BYTES_PER_TRIGGER)
    return StreamReadOptions(
        uri=_uri(opts),
        starting_version=starting_version,
        starting_timestamp=(
            None if timestamp is None else parse_timestamp(timestamp, key=STARTING_TIMESTAMP)
        ),
        max_files=None if max_files is None else _positive_int(opts, MAX_FILES_PER_TRIGGER, 1),
        max_bytes=None if max_bytes is None else _byte_size(max_bytes, MAX_BYTES_PER_TRIGGER),
        skip_change_commits=_bool(opts, SKIP_CHANGE_COMMITS, default=False),
        read_change_feed=_bool(opts, READ_CHANGE_FEED, default=False),
        report_overwrites=_bool(opts, REPORT_OVERWRITES, default=False),
        batch_size=_positive_int(opts, BATCH_SIZE, DEFAULT_BATCH_SIZE),
        storage=_storage(opts, session_storage),
    )


_BYTE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_BYTE_SIZE = re.compile(r"^\s*(\d+)\s*([bkmgt]?)b?\s*$", re.IGNORECASE)


def _byte_size(value: str, key: str) -> int:
    """``1048576``, ``512k``, ``10m``, ``1g`` (or ``10mb``...): a size in bytes, >= 1."""
    match = _BYTE_SIZE.match(value)
    if match is None or int(match.group(1)) < 1:
        raise InvalidOptionError(
            f"option {_display(key)}={value!r} is not a size in bytes (for example 1048576, "
            "512k, 10m or 1g)"
        )
    return int(match.group(1)) * _BYTE_UNITS[(match.group(2) or "b").lower()]


def parse_write_options(
    options: Mapping[str, str],
    *,
    session_storage: Mapping[str, str] | None = None,
    session_auto_compact: AutoCompact | None = None,
    session_auto_index: AutoIndex | None = None,
    streaming: bool = False,
) -> WriteOptions:
    """Validate and parse write options (keys compared case-insensitively); ``streaming``:
    the options of ``writeStream`` (no txnAppId / txnVersion: the batch id is the version).
    ``session_auto_compact`` / ``session_auto_index``: the session's auto compaction and
    indexing, which the options override."""
    opts = _lower(options)
    column_keys = {k for k in opts if k.endswith((VECTOR_SIZE_SUFFIX, BLOB_ENCODING_SUFFIX))}
    known = STREAM_WRITE_KEYS if streaming else WRITE_KEYS
    kind = "streaming write" if streaming else "write"
    _check_known({k: v for k, v in opts.items() if k not in column_keys}, known, kind)
    app_id, txn_version = _txn(opts)
    row_level = _row_level(opts)
    replace_where = _replace_where(opts)
    overwrite_schema = _bool(opts, OVERWRITE_SCHEMA, default=False)
    if replace_where is not None and overwrite_schema:
        raise InvalidOptionError(
            "options replaceWhere and overwriteSchema cannot be used together: replaceWhere "
            "keeps the table's schema (overwrite the whole table to change it)"
        )
    return WriteOptions(
        txn_app_id=app_id,
        txn_version=txn_version,
        spark_app_id=_non_empty(opts, SPARK_APP_ID),
        row_level_operation=row_level[0],
        row_level_version=row_level[1],
        row_level_read_filter=_non_empty(opts, ROW_LEVEL_READ_FILTER),
        row_level_added_columns=tuple(
            c for c in (_non_empty(opts, ROW_LEVEL_ADDED_COLUMNS) or "").split(",") if c
        ),
        statement_id=_non_empty(opts, STATEMENT_ID),
        statement_parameters=_statement_parameters(opts),
        table_operation=_table_operation(opts),
        streaming_query_id=_non_empty(opts, STREAMING_QUERY_ID),
        uri=_uri(opts),
        branch=_branch(opts),
        merge_schema=_bool(opts, MERGE_SCHEMA, default=False),
        user_metadata=opts.get(USER_METADATA),
        vector_sizes=_vector_sizes(opts),
        blob_columns=_blob_columns(opts),
        max_rows_per_file=_positive_int(opts, MAX_ROWS_PER_FILE, DEFAULT_MAX_ROWS_PER_FILE),
        max_rows_per_group=_positive_int(opts, MAX_ROWS_PER_GROUP, DEFAULT_MAX_ROWS_PER_GROUP),
        max_bytes_per_file=_positive_int(opts, MAX_BYTES_PER_FILE, DEFAULT_MAX_BYTES_PER_FILE),
        data_storage_version=_data_storage_version(opts),
        enable_stable_row_ids=_optional_bool(opts, ENABLE_STABLE_ROW_IDS),
        storage=_storage(opts, session_storage),
        replace_where=replace_where,
        overwrite_schema=overwrite_schema,
        auto_compact=_auto_compact(opts, session_auto_compact or AutoCompact()),
        auto_index=_auto_index(opts, session_auto_index or AutoIndex()),
    )


def _statement_parameters(opts: Mapping[str, str]) -> dict[str, str]:
    text = opts.get(STATEMENT_PARAMETERS)
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise InvalidOptionError(
            f"option statementParameters={text!r} must be a JSON object of strings "
            "(set by LanceTable's update / delete / merge)"
        )
    return {str(k): v for k, v in parsed.items()}


def _auto_compact(opts: Mapping[str, str], session: AutoCompact) -> AutoCompact:
    return AutoCompact(
        enabled=_bool(opts, AUTO_COMPACT, default=session.enabled),
        min_num_files=_positive_int(opts, AUTO_COMPACT_MIN_NUM_FILES, session.min_num_files),
    )


def parse_auto_compact_conf(conf: Mapping[str, object]) -> AutoCompact:
    """The session's auto compaction from its Spark conf (``spark.lance.autoCompact.*``);
    a bad value is an :class:`InvalidOptionError` naming the conf."""
    return AutoCompact(
        enabled=_conf_flag(conf, AUTO_COMPACT_CONF, DEFAULT_AUTO_COMPACT),
        min_num_files=_conf_count(
            conf, AUTO_COMPACT_MIN_NUM_FILES_CONF, DEFAULT_AUTO_COMPACT_MIN_NUM_FILES, "fragments"
        ),
    )


def _conf_flag(conf: Mapping[str, object], key: str, default: bool) -> bool:
    given = conf.get(key)
    if given is None:
        return default
    text = str(given).strip().lower()
    if text not in _TRUE | _FALSE:
        raise InvalidOptionError(f"Spark conf {key}={given!r} must be true or false")
    return text in _TRUE


def _conf_count(conf: Mapping[str, object], key: str, default: int, what: str) -> int:
    given = conf.get(key)
    if given is None:
        return default
    text = str(given).strip()
    number = int(text) if text.isdigit() else 0
    if number < 1:
        raise InvalidOptionError(
            f"Spark conf {key}={given!r} must be a whole number of {what}, at least 1"
        )
    return number


def _auto_index(opts: Mapping[str, str], session: AutoIndex) -> AutoIndex:
    return AutoIndex(
        enabled=_bool(opts, AUTO_INDEX, default=session.enabled),
        min_rows=_positive_int(opts, AUTO_INDEX_MIN_ROWS, session.min_rows),
    )


def parse_auto_index_conf(conf: Mapping[str, object]) -> AutoIndex:
    """The session's auto indexing from its Spark conf (``spark.lance.autoIndex.*``); a bad
    value is an :class:`InvalidOptionError` naming the conf."""
    return AutoIndex(
        enabled=_conf_flag(conf, AUTO_INDEX_CONF, DEFAULT_AUTO_INDEX),
        min_rows=_conf_count(conf, AUTO_INDEX_MIN_ROWS_CONF, DEFAULT_AUTO_INDEX_MIN_ROWS, "rows"),
    )


def _replace_where(opts: Mapping[str, str]) -> str | None:
    given = opts.get(REPLACE_WHERE)
    if given is None:
        return None
    if not given.strip():
        raise InvalidOptionError(
            "option replaceWhere is empty: give the predicate of the rows to replace, for "
            "example \"day >= DATE '2026-01-01'\""
        )
    return given.strip()


def _data_storage_version(opts: Mapping[str, str]) -> str | None:
    given = opts.get(DATA_STORAGE_VERSION)
    if given is None:
        return None
    value = given.strip().lower()
    if value not in DATA_STORAGE_VERSIONS:
        raise InvalidOptionError(
            f"option {DATA_STORAGE_VERSION}={given!r} is not a Lance file format; valid: "
            f"{', '.join(DATA_STORAGE_VERSIONS)}"
        )
    return value


def _row_level(opts: Mapping[str, str]) -> tuple[str | None, int | None]:
    """rowLevelOperation and rowLevelVersion (both or neither): set by the companion."""
    operation = _non_empty(opts, ROW_LEVEL_OPERATION)
    if operation is None and ROW_LEVEL_VERSION not in opts:
        return None, None
    if operation is None or ROW_LEVEL_VERSION not in opts:
        raise InvalidOptionError(
            "options rowLevelOperation and rowLevelVersion go together (the companion sets "
            "both for the change rows of a MERGE, UPDATE or DELETE)"
        )
    if operation.upper() not in ROW_LEVEL_OPERATIONS:
        raise InvalidOptionError(
            f"option rowLevelOperation={operation!r} is not one of "
            f"{', '.join(ROW_LEVEL_OPERATIONS)}"
        )
    return operation.upper(), _non_negative_int(opts, ROW_LEVEL_VERSION, 0)


def _table_operation(opts: Mapping[str, str]) -> str | None:
    given = _non_empty(opts, TABLE_OPERATION)
    if given is None:
        return None
    operation = " ".join(given.upper().split())
    if operation not in TABLE_OPERATIONS:
        raise InvalidOptionError(
            f"option tableOperation={given!r} is not one of {', '.join(TABLE_OPERATIONS)}"
        )
    return operation


def _txn(opts: Mapping[str, str]) -> tuple[str | None, int | None]:
    app_id = _non_empty(opts, TXN_APP_ID)
    given = opts.get(TXN_VERSION)
    if (app_id is None) != (given is None):
        missing = _display(TXN_VERSION if given is None else TXN_APP_ID)
        present = _display(TXN_APP_ID if given is None else TXN_VERSION)
        raise InvalidOptionError(
            f"option {present} needs option {missing} too: an idempotent write is named by "
            "both (txnAppId: the application, txnVersion: the number of this write, >= 0)"
        )
    if given is None:
        return None, None
    return app_id, _non_negative_int(opts, TXN_VERSION, 0)


def parse_timestamp(value: str, *, key: str = TIMESTAMP_AS_OF) -> datetime:
    """Parse an ISO-8601 timestamp; one without a zone is taken as UTC."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidOptionError(
            f"option {_display(key)}={value!r} is not an ISO-8601 timestamp "
            "(for example '2026-01-31T12:00:00Z' or '2026-01-31 12:00:00+01:00')"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# --- helpers ------------------------------------------------------------------------------------


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    given: dict[str, str] = {}  # canonical key -> the key it was given as
    for key, value in options.items():
        lowered = str(key).lower()
        # Spark stores a catalog table's OPTIONS (...) as "option.<key>" table properties.
        if lowered.startswith(CATALOG_OPTION_PREFIX):
            lowered = lowered[len(CATALOG_OPTION_PREFIX) :]
        canonical = ALIASES.get(lowered, lowered)
        aliased = lowered != canonical or given.get(canonical, canonical) != canonical
        if aliased and canonical in out and out[canonical] != str(value):
            raise InvalidOptionError(
                f"options {_display(given[canonical])}={out[canonical]!r} and "
                f"{_display(lowered)}={str(value)!r} name the same option with different "
                "values: give one of them"
            )
        out[canonical] = str(value)
        given[canonical] = lowered
    return out


_KINDS = {
    "read": READ_KEYS,
    "write": WRITE_KEYS,
    "streaming read": STREAM_READ_KEYS,
    "streaming write": STREAM_WRITE_KEYS,
}


def _check_known(opts: Mapping[str, str], known: frozenset[str], kind: str) -> None:
    for key in opts:
        if key in known or key in SPARK_KEYS or key.startswith(STORAGE_PREFIX):
            continue
        valid = sorted(_display(k) for k in known - _IGNORED)
        close = difflib.get_close_matches(key, [*known], n=1)
        hint = f" Did you mean {_display(close[0])!r}?" if close else ""
        other = next((name for name, keys in _KINDS.items() if key in keys), None)
        if other is not None:
            hint = f" {_display(key)!r} is a {other} option."
        raise InvalidOptionError(
            f"unknown {kind} option {key!r} for format 'lance'.{hint} Valid {kind} options: "
            f"{', '.join(valid)}, and storage.<key> for object-store settings."
        )


def _uri(opts: Mapping[str, str]) -> str | None:
    uri = opts.get(PATH) or opts.get("location")
    if opts.get("paths"):
        raise InvalidOptionError(
            "format 'lance' reads one table at a time; load(path) takes a single path, "
            f"got several: {opts['paths']}"
        )
    return uri or None


def _branch(opts: Mapping[str, str]) -> str | None:
    value = opts.get(BRANCH)
    if value is None:
        return None
    name = value.strip()
    if not name:
        raise InvalidOptionError(
            "option branch is empty: give a branch's name, or leave the option out to use "
            f"the main branch ({MAIN_BRANCH!r})"
        )
    return None if name == MAIN_BRANCH else name


# What lance_spark lets a new branch be called: Lance's rule for one path segment (letters,
# digits, '.', '-', '_'; no '..', no '.lock' ending), in ASCII and without Lance's '/'
# (a branch "a/b" is stored inside branch "a"'s folder, which deleting "a" leaves behind).
_BRANCH_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def check_branch_name(name: str) -> str:
    """``name`` if it can name a new branch, else :class:`InvalidOptionError` saying why.

    Example::

        check_branch_name("exp-1")  # 'exp-1'
        check_branch_name("a b")    # InvalidOptionError
    """
    if not isinstance(name, str) or not _BRANCH_NAME.match(name):
        raise InvalidOptionError(
            f"{name!r} is not a valid branch name: use letters, digits, '.', '-' and '_' "
            "(for example 'exp-1')"
        )
    if name == MAIN_BRANCH:
        raise InvalidOptionError(
            f"{MAIN_BRANCH!r} is the table's main branch and cannot be created or deleted"
        )
    if ".." in name or name.endswith(".lock") or name.strip(".") == "":
        raise InvalidOptionError(
            f"{name!r} is not a valid branch name: it may not contain '..', end with "
            "'.lock' or be only dots"
        )
    return name


def _time_travel(opts: Mapping[str, str]) -> TimeTravel:
    given = [k for k in (VERSION, VERSION_AS_OF, TIMESTAMP_AS_OF, TAG) if opts.get(k)]
    if len(given) > 1:
        names = ", ".join(_display(k) for k in given)
        raise InvalidOptionError(
            f"options {names} each choose a version to read; give at most one of them"
        )
    if not given:
        return TimeTravel()
    key = given[0]
    value = opts[key]
    if key == TAG:
        return TimeTravel(tag=value)
    if key == VERSION_AS_OF and not value.strip().lstrip("+-").isdigit():
        # VERSION AS OF 'train-v1' (the session catalog passes Spark's version as given): a tag
        return TimeTravel(tag=value)
    if key == TIMESTAMP_AS_OF:
        return TimeTravel(timestamp=parse_timestamp(value))
    try:
        version = int(value)
    except ValueError:
        raise InvalidOptionError(
            f"option {_display(key)}={value!r} is not a version number (a whole number >= 1)"
        ) from None
    if version < 1:
        raise InvalidOptionError(
            f"option {_display(key)}={value!r} is not a version number (a whole number >= 1)"
        )
    return TimeTravel(version=version)


def _non_empty(opts: Mapping[str, str], key: str) -> str | None:
    value = opts.get(key)
    if value is None:
        return None
    if not value.strip():
        raise InvalidOptionError(f"option {_display(key)} is empty")
    return value


def encode_names(names: Sequence[str]) -> str:
    """``names`` as a value of the ``columns`` option that carries any name exactly: a JSON
    list (the plain comma-separated form would split ``"a,b"`` and strip spaces)."""
    return json.dumps(list(names))


def decode_names(value: str, *, key: str = COLUMNS) -> tuple[str, ...]:
    """The names in a ``columns`` value: a JSON list of strings (``["a,b", "c"]``, names
    kept exactly) or a plain comma-separated list (``a, c``: split on commas, each name
    stripped). Raises :class:`InvalidOptionError` for an empty name, a name given twice or
    a malformed JSON list."""
    if _is_json_list(value):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise InvalidOptionError(
                f"option {_display(key)}={value!r} starts with '[' but is not a JSON list of "
                f'column names ({err.msg} at position {err.pos}); for example ["a,b", "c"]'
            ) from None
        if not isinstance(parsed, list) or not all(isinstance(n, str) for n in parsed):
            raise InvalidOptionError(
                f"option {_display(key)}={value!r} must be a JSON list of strings, "
                'for example ["a,b", "c"]'
            )
        names = tuple(parsed)
        if not names or any(not n for n in names):
            raise InvalidOptionError(
                f"option {_display(key)}={value!r} must list at least one column and no empty name"
            )
    else:
        names = tuple(part.strip() for part in value.split(","))
        if not names or any(not n for n in names):
            raise InvalidOptionError(
                f"option {_display(key)}={value!r} must be a comma-separated list of column "
                'names (or a JSON list such as ["a,b", "c"] for names with commas)'
            )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidOptionError(f"option {_display(key)} names {duplicates[0]!r} twice")
    return names


def check_plain_names(value: str, table_names: Sequence[str], *, key: str = COLUMNS) -> None:
    """Refuse a plain comma-separated ``value`` that cannot say what it means on a table with
    ``table_names``: it is split on commas and each part stripped, so a column whose name
    contains a comma (``a,b`` reads as ``a`` and ``b``) or has leading or trailing spaces
    cannot be named that way. When such a column's parts appear in ``value`` (compared
    ignoring case, as names are resolved), the error names the column and shows the JSON
    list to use instead."""
    parts = [part.strip().lower() for part in value.split(",")]
    for name in table_names:
        if "," not in name and name == name.strip():
            continue
        pieces = [piece.strip().lower() for piece in name.split(",")]
        width = len(pieces)
        if any(parts[i : i + width] == pieces for i in range(len(parts) - width + 1)):
            raise InvalidOptionError(
                f"option {_display(key)}={value!r} is ambiguous: the table has a column named "
                f"{name!r}, which a comma-separated list cannot name (it is split on commas "
                f"and each name is stripped); give the columns as a JSON list of names, such "
                f"as {encode_names([name])}"
            )


def _is_json_list(value: str) -> bool:
    return value.lstrip().startswith("[")


def _plain_text(opts: Mapping[str, str], key: str) -> str | None:
    value = opts.get(key)
    return None if value is None or _is_json_list(value) else value


def _name_list(opts: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    value = opts.get(key)
    if value is None:
        return None
    return decode_names(value, key=key)


def _metadata_columns(opts: Mapping[str, str]) -> tuple[str, ...]:
    names = _name_list(opts, METADATA_COLUMNS) or ()
    for name in names:
        if name not in METADATA_COLUMN_NAMES:
            raise InvalidOptionError(
                f"option metadata_columns names {name!r}; valid metadata columns: "
                f"{', '.join(METADATA_COLUMN_NAMES)}"
            )
    return names


def _int(opts: Mapping[str, str], key: str, default: int) -> int:
    value = opts.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidOptionError(
            f"option {_display(key)}={value!r} is not a whole number"
        ) from None


def _positive_int(opts: Mapping[str, str], key: str, default: int) -> int:
    number = _int(opts, key, default)
    if number < 1:
        raise InvalidOptionError(f"option {_display(key)}={number} must be at least 1")
    return number


def _non_negative_int(opts: Mapping[str, str], key: str, default: int) -> int:
    number = _int(opts, key, default)
    if number < 0:
        raise InvalidOptionError(f"option {_display(key)}={number} must be at least 0")
    return number


_TRUE = frozenset(TRUE_WORDS)
_FALSE = frozenset({"false", "0", "no"})


def _optional_bool(opts: Mapping[str, str], key: str) -> bool | None:
    value = opts.get(key)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidOptionError(f"option {_display(key)}={value!r} must be true or false")


def _bool(opts: Mapping[str, str], key: str, *, default: bool) -> bool:
    parsed = _optional_bool(opts, key)
    return default if parsed is None else parsed


def _vector_sizes(options: Mapping[str, str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for key, value in options.items():
        if not str(key).lower().endswith(VECTOR_SIZE_SUFFIX):
            continue
        column = str(key)[: -len(VECTOR_SIZE_SUFFIX)]
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size < 1 or not column:
            raise InvalidOptionError(
                f"option {key}={value!r}: expected <column>{VECTOR_SIZE_SUFFIX}=<length >= 1>"
            )
        sizes[column] = size
    return sizes


def _blob_columns(options: Mapping[str, str]) -> tuple[str, ...]:
    columns = []
    for key, value in options.items():
        if not str(key).lower().endswith(BLOB_ENCODING_SUFFIX):
            continue
        column = str(key)[: -len(BLOB_ENCODING_SUFFIX)]
        if not column or str(value).strip().lower() not in BLOB_ENCODINGS:
            raise InvalidOptionError(
                f"option {key}={value!r}: expected <column>{BLOB_ENCODING_SUFFIX}=<encoding>, "
                f"encodings: {', '.join(BLOB_ENCODINGS)}"
            )
        columns.append(column)
    return tuple(columns)


def _storage(opts: Mapping[str, str], session_storage: Mapping[str, str] | None) -> dict[str, str]:
    storage = dict(session_storage or {})
    for key, value in opts.items():
        if key.startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
            storage[key[len(STORAGE_PREFIX) :]] = value
    return storage


def secret_storage_keys(storage: Mapping[str, str]) -> list[str]:
    """The keys of ``storage`` that look like secrets (sorted), for the conf path to refuse.

    A key looks like a secret when, lower-cased, it contains ``secret``, ``password``,
    ``passwd``, ``token``, ``credential``, ``key`` or ``sas`` (``aws_secret_access_key``,
    ``aws_access_key_id``, ``aws_session_token``, ``azure_storage_account_key``,
    ``azure_storage_sas_token``, ``azure_client_secret``, ``google_service_account_key``,
    ...), except keys ending in ``_file``, ``_path`` or ``_uri`` (where a secret is, not the
    secret) and ``aws_sse_kms_key_id`` / ``aws_sse_bucket_key_enabled``. A value that is a URL
    with a password (``http://user:pass@host``) makes its key secret whatever its name.

    Example::

        secret_storage_keys({"aws_region": "eu-west-1", "aws_secret_access_key": "..."})
        # ['aws_secret_access_key']
    """
    found = []
    for key, value in storage.items():
        lowered = key.lower()
        named = (
            any(word in lowered for word in SECRET_KEY_WORDS)
            and not lowered.endswith(SECRET_LOCATION_SUFFIXES)
            and lowered not in NOT_SECRET_KEYS
        )
        if named or _URL_WITH_PASSWORD.search(str(value)):
            found.append(key)
    return sorted(found)


# --- index parameters (LanceTable.createIndex, CREATE INDEX ... WITH (...)) ---------------------


@dataclass(frozen=True)
class IndexParam:
    """A parameter of an index type: ``kind`` is "int", "bool", "str" or "choice" (one of
    ``choices``, compared ignoring case); ``keyword`` is pylance's name when it differs."""

    name: str
    kind: str
    choices: tuple[str, ...] = ()
    keyword: str | None = None


_INDEX_REPLACE = IndexParam("replace", "bool")
_METRICS = ("l2", "euclidean", "cosine", "dot", "hamming")
# Lance's (Rust, Java) name and pylance's name of the vector distance.
_IVF = (
    IndexParam("distance_type", "choice", _METRICS, keyword="metric"),
    IndexParam("metric", "choice", _METRICS),
    IndexParam("num_partitions", "int"),
    IndexParam("target_partition_size", "int"),
    _INDEX_REPLACE,
)
_PQ = (IndexParam("num_sub_vectors", "int"), IndexParam("num_bits", "int"))
_SQ = (IndexParam("num_bits", "int"),)
_HNSW = (
    IndexParam("m", "int"),
    IndexParam("ef_construction", "int"),
    IndexParam("max_level", "int"),
)
_INVERTED = (
    IndexParam("with_position", "bool"),
    IndexParam(
        "base_tokenizer", "choice", ("simple", "whitespace", "raw", "ngram", "icu", "icu/split")
    ),
    IndexParam("language", "str"),
    IndexParam("max_token_length", "int"),
    IndexParam("lower_case", "bool"),
    IndexParam("stem", "bool"),
    IndexParam("remove_stop_words", "bool"),
    IndexParam("ascii_folding", "bool"),
    IndexParam("block_size", "int"),
    IndexParam("memory_limit", "int"),
    IndexParam("num_workers", "int"),
    _INDEX_REPLACE,
)
# Every index type the connector builds, with the parameters it takes (pylance 14's).
INDEX_PARAMETERS: dict[str, tuple[IndexParam, ...]] = {
    "BTREE": (_INDEX_REPLACE,),
    "BITMAP": (_INDEX_REPLACE,),
    "LABEL_LIST": (_INDEX_REPLACE,),
    "INVERTED": _INVERTED,
    "ZONEMAP": (_INDEX_REPLACE,),
    "NGRAM": (_INDEX_REPLACE,),
    "IVF_FLAT": _IVF,
    "IVF_PQ": _IVF + _PQ,
    "IVF_SQ": _IVF + _SQ,
    "IVF_HNSW_PQ": _IVF + _PQ + _HNSW,
    "IVF_HNSW_SQ": _IVF + _SQ + _HNSW,
}


def parse_index_params(index_type: str, params: Mapping[str, object]) -> dict[str, object]:
    """``params`` of an ``index_type`` index (a key of :data:`INDEX_PARAMETERS`) checked and
    converted to pylance's keywords and types: an unknown or inapplicable parameter, or a
    value of the wrong kind, is an :class:`InvalidOptionError` naming it, the index type and
    the valid parameters. Booleans may be given as true / false strings, whole numbers as
    strings of digits.

    Example::

        parse_index_params("IVF_PQ", {"distance_type": "cosine", "num_sub_vectors": "4"})
        # {'metric': 'cosine', 'num_sub_vectors': 4}
    """
    valid = {p.name: p for p in INDEX_PARAMETERS[index_type]}
    out: dict[str, object] = {}
    given: dict[str, str] = {}  # pylance keyword -> the parameter that set it
    for key, value in params.items():
        lowered = str(key).lower()
        param = valid.get(lowered)
        if param is None:
            others = [t for t, ps in INDEX_PARAMETERS.items() if any(p.name == lowered for p in ps)]
            hint = f" (it is a parameter of {', '.join(others)})" if others else ""
            raise InvalidOptionError(
                f"index parameter {key!r} does not apply to index type {index_type}{hint}; "
                f"valid parameters for {index_type}: {', '.join(valid)}"
            )
        keyword = param.keyword or param.name
        if keyword in given:
            raise InvalidOptionError(
                f"index parameters {given[keyword]!r} and {key!r} (index type {index_type}) "
                "set the same thing; give one of them"
            )
        given[keyword] = str(key)
        out[keyword] = _index_value(index_type, param, value)
    return out


def _index_value(index_type: str, param: IndexParam, value: object) -> object:
    def bad(expected: str) -> InvalidOptionError:
        return InvalidOptionError(
            f"index parameter {param.name}={value!r} (index type {index_type}) must be {expected}"
        )

    text = value.strip().lower() if isinstance(value, str) else None
    if param.kind == "bool":
        if isinstance(value, bool):
            return value
        if text in ("true", "false"):
            return text == "true"
        raise bad("true or false")
    if param.kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text is not None and text.isdigit():
            return int(text)
        raise bad("a whole number")
    if not isinstance(value, str) or not value.strip():
        raise bad("a string" if param.kind == "str" else f"one of {', '.join(param.choices)}")
    if param.kind == "choice":
        if text not in param.choices:
            raise bad(f"one of {', '.join(param.choices)}")
        return text
    return value
