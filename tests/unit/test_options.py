"""Option parsing: case-insensitive keys, typo detection, typed values, secrets kept out of repr."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import InvalidOptionError
from lance_spark.source.options import (
    CHANGE_FEED_KEYS,
    INDEX_PARAMETERS,
    READ_KEYS,
    STREAM_READ_KEYS,
    STREAM_WRITE_KEYS,
    WRITE_KEYS,
    check_branch_name,
    check_plain_names,
    decode_names,
    encode_names,
    parse_index_params,
    parse_read_options,
    parse_stream_read_options,
    parse_timestamp,
    parse_write_options,
)


def test_defaults_read_latest_whole_table() -> None:
    opts = parse_read_options({"path": "/t.lance"})
    assert opts.uri == "/t.lance"
    assert opts.time_travel.version is None and opts.time_travel.tag is None
    assert opts.columns is None and opts.filter is None and opts.metadata_columns == ()


@pytest.mark.parametrize("key", ["version", "versionAsOf", "VERSIONASOF", "Version"])
def test_version_keys_are_case_insensitive(key: str) -> None:
    assert parse_read_options({key: "5"}).time_travel.version == 5


def test_typo_is_an_error_naming_it_and_the_valid_keys() -> None:
    with pytest.raises(InvalidOptionError) as err:
        parse_read_options({"verison": "3"})
    message = str(err.value)
    assert "'verison'" in message
    assert "Did you mean 'version'" in message
    assert "versionAsOf" in message and "timestampAsOf" in message


def test_write_option_on_read_says_so() -> None:
    with pytest.raises(InvalidOptionError, match="'mergeSchema' is a write option"):
        parse_read_options({"mergeSchema": "true"})


def test_spark_keys_are_accepted() -> None:
    opts = parse_read_options(
        {"path": "file:/x", "location": "file:/x", "owner": "me", "provider": "lance"}
    )
    assert opts.uri == "file:/x"


@pytest.mark.parametrize(
    "options",
    [
        {"version": "1", "tag": "a"},
        {"versionAsOf": "1", "timestampAsOf": "2026-01-01"},
        {"version": "1", "versionAsOf": "2"},
    ],
)
def test_more_than_one_time_travel_option_is_an_error(options: dict[str, str]) -> None:
    with pytest.raises(InvalidOptionError, match="at most one"):
        parse_read_options(options)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5"])
def test_bad_version_names_the_value(value: str) -> None:
    with pytest.raises(InvalidOptionError, match=repr(value)):
        parse_read_options({"version": value})


@pytest.mark.parametrize("value", ["0", "-1"])
def test_version_as_of_below_one_names_the_value(value: str) -> None:
    with pytest.raises(InvalidOptionError, match=repr(value)):
        parse_read_options({"versionAsOf": value})


def test_version_as_of_a_name_is_a_tag() -> None:
    """``VERSION AS OF 'train-v1'``: the session catalog passes Spark's version as given."""
    travel = parse_read_options({"versionAsOf": "train-v1"}).time_travel
    assert travel.tag == "train-v1" and travel.version is None
    assert parse_read_options({"versionAsOf": "12"}).time_travel.version == 12


def test_timestamp_forms() -> None:
    expected = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    assert parse_timestamp("2026-01-31T12:00:00Z") == expected
    assert parse_timestamp("2026-01-31 12:00:00") == expected  # no zone: UTC
    assert parse_timestamp("2026-01-31T13:00:00+01:00") == expected
    # What the session catalog hands Python for TIMESTAMP AS OF: Java's Instant.toString().
    assert parse_timestamp("2026-01-31T12:00:00.000123Z") == expected.replace(microsecond=123)
    with pytest.raises(InvalidOptionError, match="not an ISO-8601"):
        parse_timestamp("yesterday")


def test_columns_and_metadata_columns() -> None:
    opts = parse_read_options({"columns": "id, label", "metadata_columns": "_rowaddr,_fragid"})
    assert opts.columns == ("id", "label")
    assert opts.metadata_columns == ("_rowaddr", "_fragid")
    with pytest.raises(InvalidOptionError, match="'_rowidx'"):
        parse_read_options({"metadata_columns": "_rowidx"})
    with pytest.raises(InvalidOptionError, match="twice"):
        parse_read_options({"columns": "id,id"})
    with pytest.raises(InvalidOptionError, match="comma-separated"):
        parse_read_options({"columns": "id,,x"})


def test_storage_options_merge_session_and_per_read_and_stay_out_of_repr() -> None:
    opts = parse_read_options(
        {"storage.aws_secret_access_key": "s3cr3t", "storage.aws_region": "eu-west-1"},
        session_storage={"aws_region": "us-east-1", "aws_endpoint": "http://127.0.0.1:9"},
    )
    assert opts.storage == {
        "aws_secret_access_key": "s3cr3t",
        "aws_region": "eu-west-1",
        "aws_endpoint": "http://127.0.0.1:9",
    }
    assert "s3cr3t" not in repr(opts)
    write = parse_write_options({"storage.aws_secret_access_key": "s3cr3t"})
    assert "s3cr3t" not in repr(write)


def test_write_options() -> None:
    opts = parse_write_options(
        {
            "mergeschema": "true",
            "userMetadata": "run 7",
            "embedding.arrow.fixed-size-list.size": "16",
            "max_rows_per_file": "1000",
            "enable_stable_row_ids": "false",
            "data_storage_version": "2.1",
        }
    )
    assert opts.merge_schema is True
    assert opts.user_metadata == "run 7"
    assert opts.vector_sizes == {"embedding": 16}
    assert opts.max_rows_per_file == 1000
    assert opts.enable_stable_row_ids is False
    assert opts.data_storage_version == "2.1"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"mergeSchema": "maybe"}, "true or false"),
        ({"max_rows_per_file": "0"}, "at least 1"),
        ({"max_rows_per_file": "many"}, "not a whole number"),
        ({"v.arrow.fixed-size-list.size": "0"}, "fixed-size-list.size"),
        ({"version": "3"}, "'version' is a read option"),
        ({"data_storage_version": "V2_1"}, r"'V2_1' is not a Lance file format; valid: 2\.0, "),
        ({"data_storage_version": "9.9"}, "valid: 2.0, 2.1, 2.2, 2.3, stable, next, legacy, 0.1"),
    ],
)
def test_bad_write_options(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=fragment):
        parse_write_options(options)


@given(
    st.sampled_from(sorted(READ_KEYS | WRITE_KEYS | STREAM_READ_KEYS | STREAM_WRITE_KEYS)),
    st.data(),
)
def test_any_casing_of_a_known_key_is_accepted_on_its_side(key: str, data: st.DataObject) -> None:
    cased = "".join(c.upper() if data.draw(st.booleans()) else c for c in key)
    values = {
        "branch": "exp",
        "version": "2",
        "versionasof": "2",
        "timestampasof": "2026-01-01",
        "tag": "t",
        "columns": "a",
        "filter": "a > 1",
        "metadata_columns": "_rowid",
        "batch_size": "10",
        "rows_per_partition": "10",
        "min_partitions": "2",
        "mergeschema": "true",
        "usermetadata": "x",
        "max_rows_per_file": "10",
        "max_rows_per_group": "10",
        "max_bytes_per_file": "10",
        "data_storage_version": "2.1",
        "enable_stable_row_ids": "true",
        "txnappid": "app",
        "sparkappid": "local-1",
        "txnversion": "3",
        "streamingqueryid": "q",
        "checkpointlocation": "/ck",
        "startingversion": "2",
        "startingtimestamp": "2026-01-01",
        "maxfilespertrigger": "3",
        "maxbytespertrigger": "1m",
        "skipchangecommits": "true",
        "readchangefeed": "true",
        "endingversion": "3",
        "endingtimestamp": "2026-02-01",
        "reportoverwrites": "true",
        "replacewhere": "id > 1",
        "overwriteschema": "true",
        "autocompact": "true",
        "autocompact.minnumfiles": "5",
        "autoindex": "true",
        "autoindex.minrows": "5",
        "rowleveloperation": "merge",
        "rowlevelversion": "4",
        "rowlevelreadfilter": "`id` IN (1,2)",
        "rowleveladdedcolumns": "tag",
        "tableoperation": "create table as select",
        "statementid": "abc",
        "statementparameters": '{"predicate": "id > 1"}',
        # The Java lance-spark connector's tuning, taken and ignored.
        "pushdownfilters": "false",
        "block_size": "1",
        "index_cache_size": "1",
        "metadata_cache_size": "1",
        "topn_push_down": "false",
        "use_queued_write_buffer": "true",
        "queue_depth": "4",
    }
    # txnAppId and txnVersion go together; so do rowLevelOperation and rowLevelVersion.
    partner = {
        "txnappid": {"txnVersion": "1"},
        "txnversion": {"txnAppId": "a"},
        "rowleveloperation": {"rowLevelVersion": "1"},
        "rowlevelversion": {"rowLevelOperation": "DELETE"},
    }.get(key, {})
    options = {cased: values[key], **partner}
    if key in CHANGE_FEED_KEYS:
        options = {"readChangeFeed": "true", "startingVersion": "1", **options}
        if key == "startingtimestamp":
            del options["startingVersion"]
        if key == "endingtimestamp":
            options.pop("endingversion", None)
        parse_read_options(options)
    elif key in READ_KEYS:
        parse_read_options(options)
    elif key in WRITE_KEYS:
        parse_write_options(options)
    elif key in STREAM_READ_KEYS:
        parse_stream_read_options(options)
    else:
        parse_write_options(options, streaming=True)


def test_row_level_options_go_together_and_name_the_operation() -> None:
    opts = parse_write_options(
        {"path": "/t", "rowLevelOperation": "update", "rowLevelVersion": "7"}
    )
    assert (opts.row_level_operation, opts.row_level_version) == ("UPDATE", 7)
    with pytest.raises(InvalidOptionError, match="go together"):
        parse_write_options({"path": "/t", "rowLevelVersion": "7"})
    with pytest.raises(InvalidOptionError, match="'upsert' is not one of DELETE, UPDATE, MERGE"):
        parse_write_options({"path": "/t", "rowLevelOperation": "upsert", "rowLevelVersion": "1"})
    with pytest.raises(InvalidOptionError, match="rowLevelOperation"):
        parse_write_options({"rowLevelOperation": "MERGE", "rowLevelVersion": "1"}, streaming=True)


def test_the_read_filter_of_a_row_level_operation() -> None:
    opts = parse_write_options(
        {
            "path": "/t",
            "rowLevelOperation": "MERGE",
            "rowLevelVersion": "3",
            "rowLevelReadFilter": "`id` IN (1,2)",
        }
    )
    assert opts.row_level_read_filter == "`id` IN (1,2)"
    assert parse_write_options({"path": "/t"}).row_level_read_filter is None
    with pytest.raises(InvalidOptionError, match="rowLevelReadFilter"):
        parse_write_options({"rowLevelReadFilter": "true"}, streaming=True)


def test_statement_options_of_the_table_api() -> None:
    opts = parse_write_options(
        {"path": "/t", "statementId": "s1", "statementParameters": '{"predicate": "id < 3"}'}
    )
    assert (opts.statement_id, dict(opts.statement_parameters)) == ("s1", {"predicate": "id < 3"})
    assert parse_write_options({"path": "/t"}).statement_parameters == {}
    for bad in ("[1]", "{", '{"predicate": 1}'):
        with pytest.raises(InvalidOptionError, match=r"statementParameters=.*JSON object"):
            parse_write_options({"path": "/t", "statementParameters": bad})
    with pytest.raises(InvalidOptionError, match="statementId"):
        parse_write_options({"statementId": "s1"}, streaming=True)


# --- branches -------------------------------------------------------------------------------


def test_branch_option_on_reads_and_writes() -> None:
    assert parse_read_options({"path": "/t", "Branch": " exp "}).branch == "exp"
    assert parse_write_options({"path": "/t", "branch": "exp"}).branch == "exp"
    # "main" is the main branch, as no option is
    assert parse_read_options({"branch": "main"}).branch is None
    assert parse_write_options({}).branch is None
    # with time travel and the change feed: a version of that branch
    opts = parse_read_options({"branch": "exp", "versionAsOf": "3"})
    assert (opts.branch, opts.time_travel.version) == ("exp", 3)
    feed = parse_read_options({"branch": "exp", "readChangeFeed": "true", "startingVersion": "1"})
    assert feed.branch == "exp" and feed.change_feed is not None
    with pytest.raises(InvalidOptionError, match="option branch is empty"):
        parse_read_options({"branch": "  "})
    with pytest.raises(InvalidOptionError, match="'branch' is a read option"):
        parse_stream_read_options({"branch": "exp"})


@pytest.mark.parametrize("name", ["exp", "exp-1", "A_b.2", "-x", "x."])
def test_valid_branch_names(name: str) -> None:
    assert check_branch_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "letters, digits"),
        ("a b", "letters, digits"),
        ("a/b", "letters, digits"),
        ("caf\u00e9", "letters, digits"),
        ("a@b", "letters, digits"),
        ("main", "main branch"),
        ("a..b", "'..'"),
        ("..", "'..'"),
        (".", "only dots"),
        ("x.lock", "'.lock'"),
    ],
)
def test_invalid_branch_names_say_why(name: str, fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(repr(name))) as caught:
        check_branch_name(name)
    assert fragment in str(caught.value)


# --- the columns option carries any name ----------------------------------------------------


def test_columns_as_a_json_list_keep_names_exactly() -> None:
    opts = parse_read_options({"columns": '["a,b", " c ", "we`ird", "ünï", "[x"]'})
    assert opts.columns == ("a,b", " c ", "we`ird", "ünï", "[x")
    assert opts.columns_plain is None
    plain = parse_read_options({"columns": "id, label"})
    assert plain.columns == ("id", "label") and plain.columns_plain == "id, label"


@given(st.lists(st.text(min_size=1), min_size=1, max_size=6, unique=True))
def test_encoded_names_decode_to_the_same_names(names: list[str]) -> None:
    encoded = encode_names(names)
    assert decode_names(encoded) == tuple(names)
    assert parse_read_options({"COLUMNS": encoded}).columns == tuple(names)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('["a", ', "not a JSON list"),
        ('["a", 1]', "JSON list of strings"),
        ("[]", "at least one column"),
        ('["a", ""]', "no empty name"),
        ('["a", "a"]', "'a' twice"),
    ],
)
def test_bad_json_columns_name_the_value(value: str, fragment: str) -> None:
    with pytest.raises(InvalidOptionError) as e:
        parse_read_options({"columns": value})
    assert fragment in str(e.value) and "columns" in str(e.value)


@pytest.mark.parametrize(
    ("value", "column"),
    [
        ("id,a,b", "a,b"),
        ("a, b ,id", "a,b"),
        ("A,B", "a,b"),  # names resolve ignoring case
        ("id,lead", " lead"),
        ("id, trail", "trail "),
    ],
)
def test_a_plain_list_that_could_mean_an_odd_column_is_an_error_naming_it(
    value: str, column: str
) -> None:
    table = ["id", "a", "b", "a,b", " lead", "trail "]
    with pytest.raises(InvalidOptionError) as e:
        check_plain_names(value, table)
    message = str(e.value)
    assert repr(column) in message and encode_names([column]) in message


def test_a_plain_list_of_ordinary_names_passes_next_to_odd_columns() -> None:
    check_plain_names("id, a", ["id", "a", "b", "a,b", " lead"])
    check_plain_names("b,a", ["id", "a", "b", "a,b"])  # not "a,b" in that order


# --- index parameters ----------------------------------------------------------------------------


def test_index_types_are_the_maintenance_ones() -> None:
    from lance_spark.table.maintenance import SCALAR_INDEX_TYPES, VECTOR_INDEX_TYPES

    assert sorted(INDEX_PARAMETERS) == sorted(SCALAR_INDEX_TYPES + VECTOR_INDEX_TYPES)


@pytest.mark.parametrize(
    ("index_type", "params", "expected"),
    [
        ("BTREE", {}, {}),
        ("IVF_FLAT", {"distance_type": "Cosine"}, {"metric": "cosine"}),
        (
            "IVF_FLAT",
            {"METRIC": "dot", "num_partitions": "4"},
            {"metric": "dot", "num_partitions": 4},
        ),
        (
            "IVF_PQ",
            {"num_partitions": 2, "num_sub_vectors": 4, "num_bits": 8, "replace": "TRUE"},
            {"num_partitions": 2, "num_sub_vectors": 4, "num_bits": 8, "replace": True},
        ),
        (
            "IVF_HNSW_SQ",
            {"m": 8, "ef_construction": "50", "max_level": 4, "distance_type": "l2"},
            {"m": 8, "ef_construction": 50, "max_level": 4, "metric": "l2"},
        ),
        (
            "INVERTED",
            {"with_position": "true", "stem": False, "lower_case": " False ", "language": "French"},
            {"with_position": True, "stem": False, "lower_case": False, "language": "French"},
        ),
        ("INVERTED", {"base_tokenizer": "NGRAM"}, {"base_tokenizer": "ngram"}),
    ],
)
def test_index_params(
    index_type: str, params: dict[str, object], expected: dict[str, object]
) -> None:
    assert parse_index_params(index_type, params) == expected


@pytest.mark.parametrize(
    ("index_type", "params", "fragment"),
    [
        (
            "IVF_FLAT",
            {"num_sub_vectors": 4},
            r"index parameter 'num_sub_vectors' does not apply to index type IVF_FLAT \(it is a "
            r"parameter of IVF_PQ, IVF_HNSW_PQ\); valid parameters for IVF_FLAT: distance_type, "
            r"metric, num_partitions, target_partition_size, replace$",
        ),
        ("IVF_PQ", {"m": 16}, "'m' does not apply to index type IVF_PQ .*IVF_HNSW_PQ, IVF_HNSW_SQ"),
        (
            "IVF_SQ",
            {"ef_construction": 16},
            "'ef_construction' does not apply to index type IVF_SQ",
        ),
        ("BTREE", {"with_position": True}, "valid parameters for BTREE: replace$"),
        ("IVF_PQ", {"num_partitons": 2}, "'num_partitons' does not apply to index type IVF_PQ;"),
        (
            "IVF_FLAT",
            {"metric": "cosine", "distance_type": "dot"},
            r"'metric' and 'distance_type' \(index type IVF_FLAT\) set the same thing",
        ),
        (
            "IVF_FLAT",
            {"distance_type": "manhattan"},
            r"distance_type='manhattan' \(index type IVF_FLAT\) must be one of l2, euclidean, cosine",
        ),
        ("INVERTED", {"with_position": "yes"}, "with_position='yes' .* must be true or false"),
        ("INVERTED", {"with_position": 1}, "with_position=1 .* must be true or false"),
        ("IVF_PQ", {"num_sub_vectors": "four"}, "num_sub_vectors='four' .* a whole number"),
        ("IVF_PQ", {"num_sub_vectors": True}, "num_sub_vectors=True .* a whole number"),
        ("IVF_PQ", {"num_sub_vectors": 2.5}, "num_sub_vectors=2.5 .* a whole number"),
        ("INVERTED", {"language": 3}, "language=3 .* must be a string"),
    ],
)
def test_bad_index_params(index_type: str, params: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidOptionError, match=fragment):
        parse_index_params(index_type, params)


def test_read_change_data_is_an_alias_of_read_change_feed() -> None:
    opts = {"readChangeData": "true", "startingVersion": "1"}
    assert (
        parse_read_options(opts).change_feed
        == parse_read_options({"readChangeFeed": "true", "startingVersion": "1"}).change_feed
    )
    assert parse_read_options({**opts, "readChangeFeed": "true"}).change_feed is not None
    with pytest.raises(InvalidOptionError, match="readChangeData='true' and readChangeFeed="):
        parse_read_options({**opts, "readChangeFeed": "false"})


def test_table_operation_is_one_of_the_catalogs_statements() -> None:
    opts = {"tableOperation": "create  or replace table as select"}
    assert parse_write_options(opts).table_operation == "CREATE OR REPLACE TABLE AS SELECT"
    assert parse_write_options({}).table_operation is None
    with pytest.raises(InvalidOptionError, match="tableOperation='DROP TABLE' is not one of"):
        parse_write_options({"tableOperation": "DROP TABLE"})
    with pytest.raises(InvalidOptionError, match="tableOperation"):
        parse_write_options({"tableOperation": "CREATE TABLE AS SELECT"}, streaming=True)


def test_auto_index_from_options_and_session_conf() -> None:
    from lance_spark.source.options import AutoIndex, parse_auto_index_conf

    assert parse_auto_index_conf({}) == AutoIndex(enabled=False, min_rows=100_000)
    session = parse_auto_index_conf(
        {"spark.lance.autoIndex.enabled": "TRUE", "spark.lance.autoIndex.minRows": "10"}
    )
    assert session == AutoIndex(enabled=True, min_rows=10)
    opts = parse_write_options({"path": "/t", "autoIndex.minRows": "7"}, session_auto_index=session)
    assert opts.auto_index == AutoIndex(enabled=True, min_rows=7)
    assert parse_write_options({"path": "/t", "AUTOINDEX": "false"}).auto_index.enabled is False
    with pytest.raises(InvalidOptionError, match=r"spark.lance.autoIndex.minRows='0'.*at least 1"):
        parse_auto_index_conf({"spark.lance.autoIndex.minRows": "0"})
    with pytest.raises(InvalidOptionError, match=r"spark.lance.autoIndex.enabled='maybe'"):
        parse_auto_index_conf({"spark.lance.autoIndex.enabled": "maybe"})
    with pytest.raises(InvalidOptionError, match="autoIndex"):
        parse_write_options({"path": "/t", "autoIndex": "perhaps"})


def test_blob_encoding_is_a_per_column_write_option() -> None:
    opts = parse_write_options({"path": "/t", "image.lance.encoding": "blob"})
    assert opts.blob_columns == ("image",)
    with pytest.raises(InvalidOptionError, match=r"image.lance.encoding='gzip'.*encodings: blob"):
        parse_write_options({"path": "/t", "image.lance.encoding": "gzip"})
