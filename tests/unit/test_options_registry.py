"""The option registry is the one declaration of every option: the key sets, the names in
messages, the options reference and the companion's resource come from it."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from lance_spark.errors import InvalidOptionError
from lance_spark.source import options
from lance_spark.source.options import parse_read_options, parse_write_options

ROOT = pathlib.Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("generate", ROOT / "scripts" / "generate_options.py")
assert _SPEC is not None and _SPEC.loader is not None
generate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(generate)

_REGENERATE = "run .venv/bin/python scripts/generate_options.py"


def test_the_options_reference_is_the_registrys_table() -> None:
    page = generate.REFERENCE.read_text()
    assert generate.BEGIN in page and generate.END in page
    assert page == generate.with_table(page), _REGENERATE


def test_the_companions_resource_is_the_registrys() -> None:
    assert generate.RESOURCE.read_text() == options.companion_resource(), _REGENERATE


def test_each_name_is_declared_once() -> None:
    keys = [o.key for o in options.OPTIONS]
    assert len(keys) == len(set(keys))
    assert not set(options.ALIASES) & set(keys), "an alias is also an option's name"
    for o in options.OPTIONS:
        assert o.kinds, o.name


def test_the_key_sets_and_names_come_from_the_registry() -> None:
    assert options.VERSION_AS_OF in options.READ_KEYS
    assert options.REPLACE_WHERE in options.WRITE_KEYS - options.STREAM_WRITE_KEYS
    assert options.SKIP_CHANGE_COMMITS in options.STREAM_READ_KEYS - options.READ_KEYS
    with pytest.raises(InvalidOptionError, match="maxFilesPerTrigger"):
        parse_read_options({"path": "/t", "maxFilesPerTrigger": "1"})


def test_the_java_connectors_names_are_taken() -> None:
    opts = parse_write_options({"path": "/t", "max_row_per_file": "10"})
    assert opts.max_rows_per_file == 10
    with pytest.raises(InvalidOptionError, match=r"max_row_per_file.*max_rows_per_file"):
        parse_write_options({"path": "/t", "max_row_per_file": "10", "max_rows_per_file": "20"})
    tuned = {"use_queued_write_buffer": "true", "queue_depth": "4", "batch_size": "64"}
    assert parse_write_options({"path": "/t", **tuned}) == parse_write_options({"path": "/t"})
    read = {"pushDownFilters": "false", "block_size": "1", "topN_push_down": "false"}
    assert parse_read_options({"path": "/t", **read}) == parse_read_options({"path": "/t"})
    with pytest.raises(InvalidOptionError, match="write_mode"):
        parse_write_options({"path": "/t", "write_mode": "overwrite"})  # changes what it does
