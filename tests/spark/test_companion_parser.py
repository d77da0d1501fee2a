"""The companion's SQL parser (``LanceSqlParser``): which Delta statements become which calls
of the session catalog's procedures. The statements themselves run in every client in
tests/sql and tests/spark/test_sql_commands.py; here the translation, through Py4J."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.spark]

CALL = "CALL spark_catalog.system."


@pytest.mark.parametrize(
    ("statement", "call"),
    [
        ("DESCRIBE HISTORY pets", "history(table => 'pets')"),
        ("desc history db.pets limit 3;", "history(table => 'db.pets', limit => 3)"),
        ("DESCRIBE HISTORY pets.branch_exp", "history(table => 'pets.branch_exp')"),
        ("DESCRIBE HISTORY `my pets`", "history(table => '`my pets`')"),
        ("DESCRIBE HISTORY '/d/it''s.lance'", None),  # '' is not Spark's escape: not ours
        ("DESCRIBE HISTORY '/d/it\\'s.lance'", "history(table => 'lance.`/d/it\\'s.lance`')"),
        ("DESCRIBE HISTORY lance.`/d/p.lance`", "history(table => 'lance.`/d/p.lance`')"),
        ("RESTORE TABLE pets TO VERSION AS OF 3", "restore(table => 'pets', version => 3)"),
        ("RESTORE pets VERSION AS OF 'train-v1'", "restore(table => 'pets', tag => 'train-v1')"),
        (
            "RESTORE pets TO TIMESTAMP AS OF '2026-01-01 00:00:00'",
            "restore(table => 'pets', timestamp => '2026-01-01 00:00:00')",
        ),
        ("VACUUM pets", "vacuum(table => 'pets')"),
        (
            "VACUUM 's3://b/p.lance' RETAIN 0.5 HOURS DRY RUN",
            "vacuum(table => 'lance.`s3://b/p.lance`', retain_hours => 0.5, dry_run => true)",
        ),
        ("DESC DETAIL pets", "detail(table => 'pets')"),
        ("DESCRIBE DETAIL '/d/p.lance'", "detail(table => 'lance.`/d/p.lance`')"),
        (
            "ALTER TABLE pets CREATE TAG `train-v1`",
            "create_tag(table => 'pets', tag => 'train-v1')",
        ),
        (
            "ALTER TABLE pets CREATE TAG v1 AS OF VERSION 2",
            "create_tag(table => 'pets', tag => 'v1', version => 2)",
        ),
        ("ALTER TABLE pets DROP TAG `train-v1`", "drop_tag(table => 'pets', tag => 'train-v1')"),
        ("ALTER TABLE pets CREATE BRANCH exp", "create_branch(table => 'pets', branch => 'exp')"),
        (
            "alter table db.pets create branch if not exists `exp-1` as of version 2;",
            "create_branch(table => 'db.pets', branch => 'exp-1', version => 2, "
            "if_not_exists => true)",
        ),
        (
            "ALTER TABLE pets CREATE BRANCH 'exp' AS OF VERSION 'train-v1'",
            "create_branch(table => 'pets', branch => 'exp', tag => 'train-v1')",
        ),
        ("ALTER TABLE pets DROP BRANCH exp", "drop_branch(table => 'pets', branch => 'exp')"),
        (
            "ALTER TABLE pets DROP BRANCH IF EXISTS `exp-1`",
            "drop_branch(table => 'pets', branch => 'exp-1', if_exists => true)",
        ),
        ("SHOW BRANCHES IN pets", "branches(table => 'pets')"),
        ("show branches from db.pets", "branches(table => 'db.pets')"),
        ("SHOW BRANCHES IN '/d/p.lance'", "branches(table => 'lance.`/d/p.lance`')"),
        ("ALTER TABLE pets CREATE TAG", None),
        ("ALTER TABLE pets CREATE BRANCH b AS OF VERSION x", None),
        ("ALTER TABLE pets DROP BRANCH a b", None),
        ("OPTIMIZE pets", "optimize(table => 'pets')"),
        ("optimize '/d/p.lance';", "optimize(table => 'lance.`/d/p.lance`')"),
        ("OPTIMIZE pets ZORDER BY (id)", None),
        (
            "CONVERT TO LANCE parquet.`/d/events` LOCATION '/d/events.lance'",
            "convert(table => 'lance.`/d/events.lance`', source => '/d/events')",
        ),
        (
            "convert to lance '/d/e' location 's3://b/e.lance';",
            "convert(table => 'lance.`s3://b/e.lance`', source => '/d/e')",
        ),
        (
            "CONVERT TO LANCE db.events LOCATION '/d/e.lance'",
            "convert(table => 'lance.`/d/e.lance`', source => 'db.events')",
        ),
        ("CONVERT TO LANCE parquet.`/d/e`", None),
        (
            "ALTER TABLE pets UPDATE COLUMNS label, `a,b` FROM db.src ON id",
            "update_columns(table => 'pets', source => 'db.src', on => 'id', "
            """columns => '["label","a,b"]')""",
        ),
        (
            "alter table '/d/p.lance' update columns (score) from `my src` on `ID`",
            "update_columns(table => 'lance.`/d/p.lance`', source => '`my src`', on => 'ID', "
            """columns => '["score"]')""",
        ),
        ("ALTER TABLE pets UPDATE COLUMNS FROM src ON id", None),
        ("ALTER TABLE pets UPDATE COLUMNS (a, b FROM src ON id", None),
        ("ALTER TABLE pets UPDATE COLUMNS a FROM src", None),
        ("ALTER TABLE pets UPDATE COLUMNS a FROM (SELECT * FROM src) ON id", None),
        ("ALTER TABLE pets UPDATE COLUMNS a FROM src ON id AND x", None),
        ("CONVERT TO DELTA parquet.`/d/e`", None),
        ("CONVERT TO LANCE parquet.`/d/e` LOCATION '/d/e.lance' NO STATISTICS", None),
        ("SHOW BRANCHES IN pets LIMIT 2", None),
        ("SHOW BRANCHES pets", None),
        ("ALTER TABLE pets ADD COLUMNS (note STRING)", None),
        ("ALTER TABLE pets RENAME TO cats", None),
        ("VACUUM pets RETAIN 5", None),
        ("VACUUM pets RETAIN x HOURS", None),
        ("RESTORE TABLE pets TO VERSION 3", None),
        ("DESCRIBE HISTORY pets LIMIT", None),
        ("DESCRIBE TABLE pets", None),
        ("SELECT 1", None),
        ("VACUUM pets -- a comment", None),
        ("", None),
    ],
)
def test_translation(classic_spark: Any, statement: str, call: str | None) -> None:
    parser = classic_spark._jvm.lance_spark.companion.LanceSqlParser
    found = parser.translate(statement)
    assert found == (None if call is None else CALL + call)


@pytest.mark.parametrize(
    ("statement", "spark_statement"),
    [
        (
            "CREATE INDEX idx ON pets (id) USING BTREE",
            "CREATE INDEX `idx` ON pets USING `BTREE` (`id`)",
        ),
        (
            "create index v on db.vecs (vec) using ivf_pq "
            "with (num_partitions = 2, metric = 'cosine', with_position = true)",
            "CREATE INDEX `v` ON db.vecs USING `ivf_pq` (`vec`) "
            "OPTIONS (`num_partitions` = 2, `metric` = 'cosine', `with_position` = true)",
        ),
        (
            "CREATE INDEX n ON '/d/p.lance' (note) WITH (stem = FALSE)",
            "CREATE INDEX `n` ON lance.`/d/p.lance` (`note`) OPTIONS (`stem` = false)",
        ),
        ("CREATE INDEX idx ON pets (id)", None),  # Spark's spelling too
        ("CREATE INDEX idx ON pets USING BTREE (id)", None),  # Spark's
        ("CREATE INDEX idx ON pets (id) WITH (k = yes)", None),  # Spark's error
        ("CREATE INDEX idx ON pets (id, name) USING BTREE", None),
    ],
)
def test_first_create_index_spelling_becomes_spark_s(
    classic_spark: Any, statement: str, spark_statement: str | None
) -> None:
    parser = classic_spark._jvm.lance_spark.companion.LanceSqlParser
    assert parser.translate(statement) == spark_statement
