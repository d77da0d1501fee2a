"""``make test-quick``: the unit tests plus one end-to-end smoke per area, for the development
loop (a few minutes); ``make test`` runs everything. ``tests/conftest.py`` marks these and every
test under ``tests/unit`` ``quick``; ``tests/unit/test_quick.py`` checks each one still exists.
An area that gains a suite of its own gets its smoke here."""

from __future__ import annotations

# area -> the node id of its smoke (the classic variant: the Connect area has its own smoke).
SMOKES: dict[str, str] = {
    "read": "tests/spark/test_read.py::test_read_matches_pylance[classic]",
    "write": "tests/spark/test_write.py::test_written_table_read_back_by_pylance_matches_spark[classic]",
    "companion scan": "tests/spark/test_companion.py::test_reader_receives_only_the_needed_columns[classic]",
    "catalog": "tests/spark/test_catalog.py::test_existing_table_select_insert_overwrite_and_versions[classic]",
    "merge, update, delete (SQL)": "tests/spark/test_sql_dml.py::test_catalog_table_merge_update_delete[classic]",
    "update (table API)": "tests/spark/test_update.py::test_update_with_column_condition_and_values[classic]",
    "table API": "tests/spark/test_table.py::test_history_restore_and_foreign_versions[classic]",
    "Lance statements": "tests/spark/test_sql_commands.py::test_version_and_timestamp_as_of[classic]",
    "streaming": "tests/spark/test_streaming.py::test_sink_commits_one_version_per_batch_with_query_and_batch_ids[classic]",
    "change feed": "tests/spark/test_change_feed.py::test_change_feed_equals_diff_and_pylance[classic]",
    "indexes": "tests/spark/test_index_builds.py::test_scalar_indexes_are_built_per_fragment_group_and_answer_like_spark[classic]",
    "blobs": "tests/spark/test_blobs.py::test_spark_writes_a_blob_column_pylance_reads[classic]",
    "Spark Connect": "tests/spark/test_connect.py::test_lance_round_trip_on_connect",
    "SQL clients (spark-sql CLI)": "tests/sql/test_clients.py::test_create_read_filter_insert[spark-sql]",
}
