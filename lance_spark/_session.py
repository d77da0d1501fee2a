"""``register(spark)``: everything a session needs to use the ``lance`` format."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrameReader, SparkSession

from lance_spark import _sql, _threads
from lance_spark._options import STORAGE_PREFIX, secret_storage_keys
from lance_spark._source import FORMAT_NAME, LanceDataSource, SessionDefaults
from lance_spark.errors import InvalidOptionError, SecretInConfError

STORAGE_CONF_PREFIX = "spark.lance.storage."
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
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
_PRIVATE_LOCK = threading.Lock()
_PRIVATE_NUMBERS = itertools.count(1)


def register(spark: SparkSession, *, storage_options: Mapping[str, str] | None = None) -> None:
    """Register the ``lance`` format on ``spark`` (idempotent; only this session changes).

    - switches on Spark's filter pushdown for Python data sources, which is off by default;
    - takes ``storage_options`` (credentials included) as Lance storage options for every read
      and write of this session, catalog tables, SQL and :class:`LanceTable` included. They
      stay in Python: never in the Spark conf, job properties, plans or the event log; they
      reach the Python workers only inside the pickled data source;
    - also takes ``spark.lance.storage.<key>`` confs, for keys that are not secrets (a
      secret-looking key there is a :class:`~lance_spark.errors.SecretInConfError`, because
      Spark copies its conf into job properties and the event log in clear text);
      ``storage_options`` win over the conf, per-operation ``storage.<key>`` options over both;
      call ``register`` again after changing them;
    - makes ``CREATE TABLE t (cols) USING lance LOCATION 'uri'`` create the Lance table;
    - lets reads and writes run from any Python thread (``threading``, thread pools).

    Without credentials anywhere, Lance uses its standard chains (environment variables such
    as ``AWS_ACCESS_KEY_ID``, profiles, instance roles).

    Example::

        spark.conf.set("spark.lance.storage.aws_region", "eu-west-1")
        lance_spark.register(spark, storage_options={
            "aws_access_key_id": key_id, "aws_secret_access_key": secret})
        spark.read.format("lance").load("s3://bucket/pets.lance").show()
    """
    storage = {**_storage_conf(spark), **_checked(storage_options)}
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    _redact_storage_options(spark)
    defaults = SessionDefaults(
        storage=storage,
        app_id=spark.sparkContext.applicationId,
        parallelism=max(1, int(spark.sparkContext.defaultParallelism)),
    )
    spark.dataSource.register(_source_class(defaults, FORMAT_NAME))
    with _PRIVATE_LOCK:
        setattr(spark, _PRIVATE_FORMATS, {})
    _sql.install(spark, defaults)
    _threads.install()  # writes from any Python thread (see _threads for the Spark limit)


def session_storage(spark: SparkSession) -> Mapping[str, str]:
    """The storage options :func:`register` gave this session (conf and ``storage_options``)."""
    defaults: SessionDefaults | None = getattr(spark, _sql._DEFAULTS, None)
    return _storage_conf(spark) if defaults is None else defaults.storage


def lance_reader(spark: SparkSession, storage: Mapping[str, str]) -> DataFrameReader:
    """``spark.read.format("lance")`` reading with ``storage``, which is never put into the
    reader's options (Spark would show unredacted ones in plans and the event log)."""
    return spark.read.format(_format_for(spark, storage))


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backticks, inner ones doubled), for ``F.col``."""
    return "`" + name.replace("`", "``") + "`"


def _source_class(defaults: SessionDefaults, name: str) -> type[LanceDataSource]:
    # A class made here (not importable by name) is pickled by value, so the defaults reach
    # the Python workers that plan and run reads and writes: they cannot read the Spark conf.
    attrs: dict[str, Any] = {"defaults": defaults}
    if name != FORMAT_NAME:
        attrs["name"] = classmethod(lambda cls: name)
    return type("LanceDataSource", (LanceDataSource,), attrs)


def _format_for(spark: SparkSession, storage: Mapping[str, str]) -> str:
    """``lance`` when ``storage`` is the session's; else a private format carrying it."""
    # Not registered (the class registered directly, or found by Spark): no session storage.
    defaults: SessionDefaults = getattr(spark, _sql._DEFAULTS, None) or SessionDefaults()
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
            name = f"{FORMAT_NAME}_storage_{next(_PRIVATE_NUMBERS)}"
            source = _source_class(replace(defaults, storage=dict(storage)), name)
            spark.dataSource.register(source)
            formats[key] = name
    return name


def _redact_storage_options(spark: SparkSession) -> None:
    current = str(spark.conf.get(REDACTION_CONF) or "")
    if STORAGE_REDACTION_PATTERN not in current:
        joined = f"{current}|{STORAGE_REDACTION_PATTERN}" if current else STORAGE_REDACTION_PATTERN
        spark.conf.set(REDACTION_CONF, joined)


def _checked(storage_options: Mapping[str, str] | None) -> dict[str, str]:
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


def _storage_conf(spark: SparkSession) -> dict[str, str]:
    """``spark.lance.storage.<key>`` confs; :class:`SecretInConfError` if one is a secret."""
    pairs: dict[str, Any] = dict(spark.sparkContext.getConf().getAll())
    pairs.update(spark.conf.getAll)
    storage = {
        key[len(STORAGE_CONF_PREFIX) :]: str(value)
        for key, value in pairs.items()
        if key.startswith(STORAGE_CONF_PREFIX)
    }
    secrets = secret_storage_keys(storage)
    if secrets:
        confs = ", ".join(STORAGE_CONF_PREFIX + key for key in secrets)
        example = ", ".join(f"{key!r}: ..." for key in secrets)
        raise SecretInConfError(
            f"{confs} look{'s' if len(secrets) == 1 else ''} like a secret: Spark copies its "
            "conf in clear text into job properties and the event log (History Server), so "
            "lance_spark takes no secrets from it. Remove it from the conf "
            f"(spark.conf.unset({STORAGE_CONF_PREFIX + secrets[0]!r}) or spark-defaults.conf) "
            f"and give it with lance_spark.register(spark, storage_options={{{example}}}), "
            "which keeps it in Python, or through the environment (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AZURE_STORAGE_ACCOUNT_KEY, "
            "GOOGLE_APPLICATION_CREDENTIALS, a profile or an instance role). Keys taken for "
            "secrets contain secret, password, passwd, token, credential, key or sas; "
            "non-secret keys (aws_region, aws_endpoint, allow_http, ...) may stay in the conf."
        )
    return storage
