"""The session's Lance defaults: storage options from the conf and ``register``, and the
readers that use them (``lance_reader``, private formats for other storage)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrameReader, SparkSession

from lance_spark import _spark
from lance_spark.errors import InvalidOptionError, SecretInConfError
from lance_spark.source.datasource import FORMAT_NAME, LanceDataSource, SessionDefaults
from lance_spark.source.options import STORAGE_PREFIX, AutoCompact, secret_storage_keys

STORAGE_CONF_PREFIX = "spark.lance.storage."
FILTER_PUSHDOWN_CONF = _spark.FILTER_PUSHDOWN_CONF
# Spark shows a data source's options in plans (EXPLAIN, the event log), hiding only those
# whose key or value matches this regex or spark.redaction.regex; the latter misses keys such
# as storage.aws_access_key_id or storage.azure_storage_account_key. register adds this.
REDACTION_CONF = "spark.sql.redaction.options.regex"
STORAGE_REDACTION_PATTERN = (
    r"(?i)(^|\.)storage\..*(secret|password|passwd|token|credential|key|sas)"
)

# Internal reads whose storage differs from the session's go through a data source registered
# under a private name (the storage travels on its pickled class, never as options).
_PRIVATE_FORMATS = "_lance_spark_private_formats"
# The SessionDefaults register() gave a session, kept on the SparkSession object.
DEFAULTS_ATTR = "_lance_spark_defaults"
_PRIVATE_LOCK = threading.Lock()
_PRIVATE_NUMBERS = itertools.count(1)


def session_storage(spark: SparkSession) -> Mapping[str, str]:
    """The storage options :func:`register` gave this session (conf and ``storage_options``)."""
    defaults: SessionDefaults | None = getattr(spark, DEFAULTS_ATTR, None)
    return storage_conf(spark) if defaults is None else defaults.storage


def session_auto_compact(spark: SparkSession) -> AutoCompact:
    """The auto compaction :func:`register` read from this session's conf (none before)."""
    defaults: SessionDefaults | None = getattr(spark, DEFAULTS_ATTR, None)
    return AutoCompact() if defaults is None else defaults.auto_compact


def reset_private_formats(spark: SparkSession) -> None:
    """Forget the private formats of ``spark`` (``register`` makes new defaults)."""
    with _PRIVATE_LOCK:
        setattr(spark, _PRIVATE_FORMATS, {})


def lance_reader(spark: SparkSession, storage: Mapping[str, str]) -> DataFrameReader:
    """``spark.read.format("lance")`` reading with ``storage``, which is never put into the
    reader's options (Spark would show unredacted ones in plans and the event log)."""
    return spark.read.format(_format_for(spark, storage))


def format_for(spark: SparkSession, storage: Mapping[str, str]) -> str:
    """The data source name that reads and writes with ``storage``: ``lance`` for the
    session's, else a private format carrying it on its class (never as options, which Spark
    shows in plans). A statement names a table with its own storage options as
    ``<format>.`<path>``` (the companion's catalog resolves the private names too)."""
    return _format_for(spark, storage)


def source_class(defaults: SessionDefaults, name: str) -> type[LanceDataSource]:
    # A class made here (not importable by name) is pickled by value, so the defaults reach
    # the Python workers that plan and run reads and writes: they cannot read the Spark conf.
    attrs: dict[str, Any] = {"defaults": defaults}
    if name != FORMAT_NAME:
        attrs["name"] = classmethod(lambda cls: name)
    return type("LanceDataSource", (LanceDataSource,), attrs)


def _format_for(spark: SparkSession, storage: Mapping[str, str]) -> str:
    """``lance`` when ``storage`` is the session's; else a private format carrying it."""
    # Not registered (the class registered directly, or found by Spark): no session storage.
    defaults: SessionDefaults = getattr(spark, DEFAULTS_ATTR, None) or SessionDefaults()
    if dict(storage) == dict(defaults.storage):
        return FORMAT_NAME
    key = tuple(sorted(storage.items()))
    with _PRIVATE_LOCK:
        formats: dict[tuple[tuple[str, str], ...], str] | None
        formats = getattr(spark, _PRIVATE_FORMATS, None)
        if formats is None:
            formats = {}
            setattr(spark, _PRIVATE_FORMATS, formats)
        name = formats.get(key)
        if name is None:
            # The JVM companion recognises these names (LanceScanTable.PRIVATE_FORMAT).
            name = f"{FORMAT_NAME}_storage_{next(_PRIVATE_NUMBERS)}"
            source = source_class(replace(defaults, storage=dict(storage)), name)
            spark.dataSource.register(source)
            formats[key] = name
    return name


def redact_storage_options(spark: SparkSession) -> None:
    try:
        current = str(spark.conf.get(REDACTION_CONF) or "")
    except PySparkException:
        # Spark Connect does not return a conf whose value looks like a secret to Spark's own
        # redaction (spark.redaction.regex): the value holds "secret|password|token", so it
        # is ours, set by an earlier register.
        return
    if STORAGE_REDACTION_PATTERN not in current:
        joined = f"{current}|{STORAGE_REDACTION_PATTERN}" if current else STORAGE_REDACTION_PATTERN
        spark.conf.set(REDACTION_CONF, joined)


def checked_storage(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """``storage_options`` of :func:`register`, validated (messages never show values)."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidOptionError(
            "register(storage_options=...) takes a mapping of Lance storage option keys to "
            f"strings, not {type(storage_options).__name__}"
        )
    checked: dict[str, str] = {}
    for key, value in storage_options.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidOptionError(
                f"register(storage_options=...): key {key!r} is not a non-empty string"
            )
        if key.lower().startswith((STORAGE_PREFIX, STORAGE_CONF_PREFIX)):
            bare = key[key.lower().index(STORAGE_PREFIX) + len(STORAGE_PREFIX) :]
            raise InvalidOptionError(
                f"register(storage_options=...): key {key!r} has a prefix; give Lance's own "
                f"key, {bare!r}"
            )
        if not isinstance(value, str):
            raise InvalidOptionError(
                f"register(storage_options=...): the value of {key!r} is a "
                f"{type(value).__name__}; storage options are strings"
            )
        checked[key] = value
    return checked


def storage_conf(spark: SparkSession) -> dict[str, str]:
    """``spark.lance.storage.<key>`` confs; :class:`SecretInConfError` if one is a secret."""
    pairs = _spark.conf_items(spark)
    storage = {
        key[len(STORAGE_CONF_PREFIX) :]: str(value)
        for key, value in pairs.items()
        if key.startswith(STORAGE_CONF_PREFIX)
    }
    refuse_secret_confs(storage, prefix=STORAGE_CONF_PREFIX)
    return storage


def refuse_secret_confs(storage: Mapping[str, str], *, prefix: str) -> None:
    """:class:`SecretInConfError` naming the confs (``prefix`` + key, never a value) of
    ``storage`` (storage options taken from Spark confs ``<prefix><key>``: the session's
    ``spark.lance.storage.``, a catalog's ``spark.sql.catalog.<name>.storage.``) that look
    like secrets: one rule for every conf prefix."""
    secrets = secret_storage_keys(storage)
    if secrets:
        confs = ", ".join(prefix + key for key in secrets)
        example = ", ".join(f"{key!r}: ..." for key in secrets)
        raise SecretInConfError(
            f"{confs} look{'s' if len(secrets) == 1 else ''} like a secret: Spark copies its "
            "conf in clear text into job properties and the event log (History Server), so "
            "lance_spark takes no secrets from it. Remove it from the conf "
            f"(spark.conf.unset({prefix + secrets[0]!r}) or spark-defaults.conf) "
            f"and give it with lance_spark.register(spark, storage_options={{{example}}}), "
            "which keeps it in Python, or through the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AZURE_STORAGE_ACCOUNT_KEY, "
            "GOOGLE_APPLICATION_CREDENTIALS, a profile or an instance role). Keys taken for "
            "secrets contain secret, password, passwd, token, credential, key or sas; "
            "non-secret keys (aws_region, aws_endpoint, allow_http, ...) may stay in the conf."
        )
