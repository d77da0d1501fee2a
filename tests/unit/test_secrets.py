"""Secrets and the Spark conf: which storage keys ``register`` refuses in ``spark.lance.storage.*``,
what its error says, and how ``register(storage_options=...)`` is validated (no JVM: the session
is a stand-in with the two conf views ``storage_conf`` reads)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lance_spark.errors import InvalidOptionError, SecretInConfError
from lance_spark.source.options import secret_storage_keys
from lance_spark.source.session import STORAGE_REDACTION_PATTERN, checked_storage, storage_conf

VALUE = "lsp-unit-SECRET-value"

SECRET_KEYS = [
    "aws_secret_access_key",
    "secret_access_key",
    "aws_access_key_id",
    "access_key_id",
    "aws_session_token",
    "session_token",
    "token",
    "aws_sse_customer_key_base64",
    "azure_storage_account_key",
    "account_key",
    "access_key",
    "azure_storage_access_key",
    "azure_client_secret",
    "client_secret",
    "azure_storage_sas_key",
    "azure_storage_sas_token",
    "sas_token",
    "bearer_token",
    "azure_storage_token",
    "google_service_account_key",
    "service_account_key",
    "google_application_credentials",
    "oss_secret_access_key",
    "proxy_password",
    "hf_token",
    "api_key",
    "AWS_SECRET_ACCESS_KEY",
]
PLAIN_KEYS = [
    "aws_region",
    "region",
    "aws_endpoint",
    "endpoint",
    "allow_http",
    "allow_invalid_certificates",
    "aws_virtual_hosted_style_request",
    "aws_s3_express",
    "aws_skip_signature",
    "aws_role_arn",
    "aws_sse_kms_key_id",
    "aws_sse_bucket_key_enabled",
    "aws_web_identity_token_file",
    "azure_federated_token_file",
    "google_service_account_path",
    "aws_container_credentials_relative_uri",
    "azure_storage_account_name",
    "azure_client_id",
    "azure_tenant_id",
    "connect_timeout",
    "timeout",
    "user_agent",
    "proxy_url",
    "client_max_retries",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_looking_keys_are_found(key: str) -> None:
    assert secret_storage_keys({key: VALUE, "aws_region": "eu-west-1"}) == [key]


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_plain_keys_are_not_secrets(key: str) -> None:
    assert secret_storage_keys({key: "some-value"}) == []


@pytest.mark.parametrize(
    "value", ["http://user:pa55@proxy.local:3128", "https://:tok@host/", "s3://a:b@bucket/x"]
)
def test_a_url_with_a_password_is_a_secret_whatever_its_key(value: str) -> None:
    assert secret_storage_keys({"proxy_url": value}) == ["proxy_url"]


@pytest.mark.parametrize(
    "value", ["http://proxy.local:3128", "http://user@proxy.local/", "http://127.0.0.1:9000"]
)
def test_a_url_without_a_password_is_not(value: str) -> None:
    assert secret_storage_keys({"aws_endpoint": value}) == []


class _Conf:
    def __init__(self, pairs: dict[str, str]) -> None:
        self.getAll = pairs  # RuntimeConfig.getAll is a property


class _SparkConf:
    def __init__(self, pairs: dict[str, str]) -> None:
        self._pairs = pairs

    def getAll(self) -> list[tuple[str, str]]:
        return list(self._pairs.items())


class _Context:
    def __init__(self, pairs: dict[str, str]) -> None:
        self._conf = _SparkConf(pairs)

    def getConf(self) -> _SparkConf:
        return self._conf


class FakeSession:
    """What ``storage_conf`` reads of a SparkSession: the SparkConf and the session conf."""

    def __init__(self, spark_conf: dict[str, str], session_conf: dict[str, str]) -> None:
        self.sparkContext = _Context(spark_conf)
        self.conf = _Conf(session_conf)


def _storage_conf_of(spark_conf: dict[str, str], session_conf: dict[str, str]) -> Any:
    return storage_conf(FakeSession(spark_conf, session_conf))  # type: ignore[arg-type]


def test_conf_keys_that_are_not_secrets_are_taken() -> None:
    storage = _storage_conf_of(
        {"spark.lance.storage.aws_region": "eu-west-1", "spark.master": "local[1]"},
        {"spark.lance.storage.aws_endpoint": "http://127.0.0.1:9000"},
    )
    assert storage == {"aws_region": "eu-west-1", "aws_endpoint": "http://127.0.0.1:9000"}


@pytest.mark.parametrize("where", ["session", "spark-defaults"])
def test_secret_in_conf_is_refused_with_the_key_and_the_alternative(where: str) -> None:
    pairs = {
        "spark.lance.storage.aws_region": "eu-west-1",
        "spark.lance.storage.aws_secret_access_key": VALUE,
    }
    session, defaults = (pairs, {}) if where == "session" else ({}, pairs)
    with pytest.raises(SecretInConfError) as caught:
        _storage_conf_of(defaults, session)
    message = str(caught.value)
    assert "spark.lance.storage.aws_secret_access_key" in message
    assert "register(spark, storage_options=" in message
    assert "AWS_SECRET_ACCESS_KEY" in message  # the environment alternative
    assert "spark.conf.unset('spark.lance.storage.aws_secret_access_key')" in message
    assert "aws_region" in message  # non-secret keys may stay (named as examples)
    assert VALUE not in message and VALUE not in repr(caught.value)
    # One error hierarchy: bad input is an InvalidOptionError and a ValueError.
    assert isinstance(caught.value, InvalidOptionError) and isinstance(caught.value, ValueError)


def test_every_secret_conf_key_is_named() -> None:
    with pytest.raises(SecretInConfError) as caught:
        _storage_conf_of(
            {},
            {
                "spark.lance.storage.aws_access_key_id": VALUE,
                "spark.lance.storage.aws_secret_access_key": VALUE,
            },
        )
    message = str(caught.value)
    assert "spark.lance.storage.aws_access_key_id" in message
    assert "spark.lance.storage.aws_secret_access_key" in message
    assert VALUE not in message


def test_register_storage_options_are_validated_without_showing_values() -> None:
    assert checked_storage(None) == {}
    assert checked_storage({"aws_secret_access_key": VALUE}) == {"aws_secret_access_key": VALUE}
    with pytest.raises(InvalidOptionError, match="'aws_region'") as caught:
        checked_storage({"storage.aws_region": "eu-west-1"})
    assert "prefix" in str(caught.value)
    with pytest.raises(InvalidOptionError, match="'aws_secret_access_key'") as caught:
        checked_storage({"spark.lance.storage.aws_secret_access_key": VALUE})
    assert VALUE not in str(caught.value)
    with pytest.raises(InvalidOptionError, match="'allow_http' is a bool"):
        checked_storage({"allow_http": True})  # type: ignore[dict-item]
    with pytest.raises(InvalidOptionError, match="not a non-empty string"):
        checked_storage({"": VALUE})
    with pytest.raises(InvalidOptionError, match="mapping"):
        checked_storage([("aws_region", "x")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "redacted"),
    [
        ("storage.aws_access_key_id", True),
        ("storage.azure_storage_account_key", True),
        ("storage.google_service_account_key", True),
        ("storage.azure_storage_sas_token", True),
        ("option.storage.aws_session_token", True),  # a catalog table's OPTIONS
        ("STORAGE.AWS_SECRET_ACCESS_KEY", True),
        ("storage.aws_region", False),
        ("storage.aws_endpoint", False),
        ("path", False),
        ("columns", False),
    ],
)
def test_option_redaction_pattern(option: str, redacted: bool) -> None:
    # Spark redacts an option when the pattern is found anywhere in its key (Java regex; this
    # one is also valid Python).
    assert (re.search(STORAGE_REDACTION_PATTERN, option) is not None) is redacted
