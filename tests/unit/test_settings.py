"""The recommended session settings: what ``configure`` merges into a builder and what
``register`` reports as missing (lance_spark._settings)."""

from __future__ import annotations

from lance_spark import _settings

FLAGS = " ".join(_settings.ARROW_UNCHECKED_FLAGS)


def test_an_empty_builder_gets_every_recommended_value() -> None:
    merged = _settings.builder_settings({})
    assert merged == {s.key: s.value for s in _settings.RECOMMENDED}
    assert merged[_settings.MAX_BYTES_PER_BATCH_CONF] == str(2**31 - 1)
    assert merged[_settings.UNIX_SOCKET_CONF] == "true"


def test_java_options_are_appended_to_the_users_once() -> None:
    merged = _settings.builder_settings({_settings.DRIVER_JAVA_OPTIONS: "-Xss4m -Dfoo=1"})
    assert merged[_settings.DRIVER_JAVA_OPTIONS] == f"-Xss4m -Dfoo=1 {FLAGS}"
    again = _settings.builder_settings(merged)
    assert again[_settings.DRIVER_JAVA_OPTIONS] == merged[_settings.DRIVER_JAVA_OPTIONS]


def test_a_value_the_user_chose_is_kept() -> None:
    merged = _settings.builder_settings(
        {_settings.MAX_BYTES_PER_BATCH_CONF: "32m", _settings.UNIX_SOCKET_CONF: "false"}
    )
    assert merged[_settings.MAX_BYTES_PER_BATCH_CONF] == "32m"
    assert merged[_settings.UNIX_SOCKET_CONF] == "false"
    # ... and is a choice, not a missing setting.
    chosen = {**merged, _settings.MAX_BYTES_PER_BATCH_CONF: "32m"}
    assert _settings.missing(chosen.get) == []


def test_missing_names_what_a_session_lacks() -> None:
    everything = {s.key: s.value for s in _settings.RECOMMENDED}
    assert _settings.missing(everything.get) == []
    # Spark puts its own JVM options around the user's: the flags only need to be present.
    spark_style = {
        **everything,
        _settings.EXECUTOR_JAVA_OPTIONS: f"-Djava.net.preferIPv6Addresses=false {FLAGS} -XX:+X",
    }
    assert _settings.missing(spark_style.get) == []
    partial = {**everything, _settings.DRIVER_JAVA_OPTIONS: _settings.ARROW_UNCHECKED_FLAGS[0]}
    del partial[_settings.UNIX_SOCKET_CONF]
    lacking = [s.key for s in _settings.missing(partial.get)]
    assert lacking == [_settings.UNIX_SOCKET_CONF, _settings.DRIVER_JAVA_OPTIONS]
    assert [s.key for s in _settings.missing({}.get)] == [s.key for s in _settings.RECOMMENDED]
    text = _settings.describe(_settings.missing(partial.get))
    assert _settings.UNIX_SOCKET_CONF in text and FLAGS in text


def test_every_setting_says_why_and_its_trade_off() -> None:
    for setting in _settings.RECOMMENDED:
        assert setting.why and setting.trade_off and setting.summary
