"""SQL time travel, history, restore and maintenance statements on Lance tables, by catalog
name and by path, each checked for its result and its effect on the table's versions."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import lance
import pytest
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession

from lance_spark import InvalidOptionError, LanceTable

pytestmark = [pytest.mark.spark, pytest.mark.both_modes]


@pytest.fixture
def pets(spark: SparkSession, table_uri: str) -> Iterator[str]:
    """Catalog table ``pets``: version 1 has ids 0-9, version 2 adds ids 10-14."""
    spark.range(0, 10, numPartitions=2).selectExpr("id", "concat('v', id) AS label").write.format(
        "lance"
    ).mode("append").save(table_uri)
    spark.range(10, 15).selectExpr("id", "concat('v', id) AS label").write.format("lance").mode(
        "append"
    ).save(table_uri)
    spark.sql("DROP TABLE IF EXISTS pets")
    spark.sql(f"CREATE TABLE pets USING lance LOCATION '{table_uri}'")
    yield table_uri
    spark.sql("DROP TABLE IF EXISTS pets")


def _count(spark: SparkSession, sql: str) -> int:
    return int(spark.sql(sql).collect()[0][0])


def test_version_and_timestamp_as_of(spark: SparkSession, pets: str) -> None:
    assert _count(spark, "SELECT count(*) FROM pets VERSION AS OF 1") == 10
    assert _count(spark, "SELECT count(*) FROM pets VERSION AS OF 2") == 15
    assert _count(spark, "SELECT count(*) FROM pets") == 15
    v1 = lance.dataset(pets).versions()[0]["timestamp"].astimezone().isoformat()
    assert _count(spark, f"SELECT count(*) FROM pets TIMESTAMP AS OF '{v1}'") == 10
    assert _count(spark, f"SELECT count(*) FROM lance.`{pets}` VERSION AS OF 1") == 10


def _temporary_views(spark: SparkSession) -> list[str]:
    return sorted(t.name for t in spark.catalog.listTables() if t.isTemporary)


def test_time_travel_is_analysed_lazily_and_leaves_no_view(spark: SparkSession, pets: str) -> None:
    before = _temporary_views(spark)
    old = spark.sql(f"SELECT id FROM lance.`{pets}` VERSION AS OF 1 WHERE id >= 8")
    named = spark.sql("SELECT p.id FROM pets VERSION AS OF 1 AS p WHERE p.id < 2")
    # A Connect session analyses a query again when it runs: after spark.sql has returned,
    # and after other statements. Nothing the front made for the statement may be gone.
    spark.sql("INSERT INTO pets VALUES (100, 'v100')")
    assert sorted(r.id for r in old.collect()) == [8, 9]
    assert sorted(r.id for r in named.collect()) == [0, 1]
    assert sorted(r.id for r in old.union(named).collect()) == [0, 1, 8, 9]
    assert _temporary_views(spark) == before


def test_time_travel_keeps_the_statement_s_braces(spark: SparkSession, pets: str) -> None:
    # The rewritten statement goes through str.format (DataFrame arguments of spark.sql).
    row = spark.sql(
        "SELECT '{x}' AS a, '{{y}}' AS b, '}' AS c, count(*) AS `n{}` FROM pets VERSION AS OF 1"
    ).first()
    assert tuple(row) == ("{x}", "{{y}}", "}", 10)
    assert row.asDict() == {"a": "{x}", "b": "{{y}}", "c": "}", "n{}": 10}


def test_time_travel_of_another_table_is_spark_s(spark: SparkSession, pets: str) -> None:
    # One reference is not a Lance table: the whole statement is Spark's, with its error.
    before = _temporary_views(spark)  # (other tests' views, e.g. the README's, may exist)
    with pytest.raises(AnalysisException) as caught:
        spark.sql("SELECT * FROM pets VERSION AS OF 1 JOIN nowhere VERSION AS OF 2").collect()
    assert "Lance" not in str(caught.value)
    assert _temporary_views(spark) == before


def test_parameterised_statements_go_to_spark(spark: SparkSession, pets: str) -> None:
    # With args or keyword arguments spark.sql is Spark's own, unchanged.
    assert spark.sql("SELECT :a + 1 AS v", {"a": 4}).first().v == 5
    assert spark.sql("SELECT ? AS v", [7]).first().v == 7
    frame = spark.table("pets")
    assert spark.sql("SELECT count(*) AS n FROM {t} WHERE id < {k}", t=frame, k=3).first().n == 3


def test_unclosed_quote_is_spark_s_parse_error(spark: SparkSession, pets: str) -> None:
    # sqlglot cannot tokenize it: the statement goes to Spark, whose parser reports it.
    with pytest.raises(ParseException, match=r"PARSE_SYNTAX_ERROR|UNCLOSED"):
        spark.sql("SELECT 'abc FROM pets")
    with pytest.raises(ParseException):
        spark.sql("SELECT 1 /* not closed")


def test_two_versions_of_one_table_joined(spark: SparkSession, pets: str) -> None:
    rows = spark.sql(
        "SELECT new.id FROM pets VERSION AS OF 2 new LEFT ANTI JOIN pets VERSION AS OF 1 old "
        "ON new.id = old.id ORDER BY new.id"
    ).collect()
    assert [r.id for r in rows] == [10, 11, 12, 13, 14]
    # Spark's own evaluation of the same question, on DataFrames of the two versions.
    t = LanceTable.forPath(spark, pets)
    expected = t.toDF(version=2).join(t.toDF(version=1), "id", "left_anti").orderBy("id")
    assert [r.id for r in expected.collect()] == [r.id for r in rows]


def test_path_identifier_in_a_query(spark: SparkSession, pets: str) -> None:
    rows = spark.sql(f"SELECT label FROM lance.`{pets}` WHERE id = 3").collect()
    assert [r.label for r in rows] == ["v3"]


def test_describe_history(spark: SparkSession, pets: str) -> None:
    rows = spark.sql("DESCRIBE HISTORY pets").collect()
    assert [r.version for r in rows] == [2, 1]
    assert [r.operation for r in rows] == ["WRITE", "WRITE"]  # Delta's name of a save()
    limited = spark.sql(f"DESCRIBE HISTORY lance.`{pets}` LIMIT 1").collect()
    assert [r.version for r in limited] == [2]


def test_restore_to_version_and_timestamp(spark: SparkSession, pets: str) -> None:
    metrics = spark.sql("RESTORE TABLE pets TO VERSION AS OF 1").collect()
    assert len(metrics) == 1
    ds = lance.dataset(pets)
    assert ds.version == 3 and ds.count_rows() == 10
    assert _count(spark, "SELECT count(*) FROM pets") == 10
    v2 = lance.dataset(pets, version=2).versions()[1]["timestamp"].astimezone().isoformat()
    spark.sql(f"RESTORE pets TO TIMESTAMP AS OF '{v2}'")
    assert lance.dataset(pets).version == 4 and lance.dataset(pets).count_rows() == 15
    assert spark.sql("DESCRIBE HISTORY pets LIMIT 1").first().operation == "RESTORE"


def test_optimize_and_vacuum(spark: SparkSession, pets: str) -> None:
    fragments = len(lance.dataset(pets).get_fragments())
    assert fragments >= 3
    spark.sql("OPTIMIZE pets").collect()
    ds = lance.dataset(pets)
    assert len(ds.get_fragments()) == 1 and ds.count_rows() == 15
    files_before = sorted(p.name for p in (Path(pets) / "data").iterdir())
    dry = spark.sql("VACUUM pets RETAIN 0 HOURS DRY RUN").first()
    assert dry.dry_run and dry.data_files_removed == fragments
    assert sorted(p.name for p in (Path(pets) / "data").iterdir()) == files_before
    spark.sql("VACUUM pets RETAIN 0 HOURS").collect()
    assert len(os.listdir(Path(pets) / "data")) == 1
    assert _count(spark, "SELECT count(*) FROM pets") == 15


def test_vacuum_removes_unreferenced_files(spark: SparkSession, pets: str) -> None:
    # Files of a write that never committed (a killed driver), and its staging marker.
    written = lance.fragment.write_fragments(
        lance.dataset(pets).to_table(), pets, mode="append", max_rows_per_file=10
    )
    orphans = sorted(f"data/{f.path}" for fragment in written for f in fragment.files)
    job = Path(pets) / "_lance_spark" / "staging" / "dead-job"
    job.mkdir(parents=True)
    (job / "_OPEN").touch()
    kept = spark.sql("VACUUM pets").first()  # 168 hours: they are too new to go
    assert kept.unreferenced_files_removed == 0 and kept.staging_markers_removed == 0

    dry = spark.sql("VACUUM pets RETAIN 0 HOURS DRY RUN").first()
    assert dry.dry_run and dry.unreferenced_files == orphans and len(orphans) == 2
    assert dry.unreferenced_files_removed == 2 and dry.staging_markers_removed == 1
    assert dry.old_versions == 1 and dry.data_files_removed == 2  # orphans; v1 files stay
    assert all((Path(pets) / p).exists() for p in orphans) and (job / "_OPEN").exists()

    done = spark.sql("VACUUM pets RETAIN 0 HOURS").first()
    assert done.asDict() == {**dry.asDict(), "dry_run": False}
    assert not any((Path(pets) / p).exists() for p in orphans)
    assert not (Path(pets) / "_lance_spark").exists()
    assert _count(spark, "SELECT count(*) FROM pets") == 15


def test_add_columns_refreshes_the_catalog(spark: SparkSession, pets: str) -> None:
    version = lance.dataset(pets).version
    spark.sql("ALTER TABLE pets ADD COLUMNS (note STRING, score DOUBLE)")
    ds = lance.dataset(pets)
    assert ds.version == version + 1
    assert ds.schema.names == ["id", "label", "note", "score"]
    assert spark.table("pets").columns == ["id", "label", "note", "score"]
    spark.sql("INSERT INTO pets VALUES (99, 'x', 'hello', 1.5)")
    row = spark.sql("SELECT note, score FROM pets WHERE id = 99").first()
    assert (row.note, row.score) == ("hello", 1.5)
    assert _count(spark, "SELECT count(*) FROM pets WHERE note IS NULL") == 15
    with pytest.raises(Exception, match="`label` already exists"):
        spark.sql("ALTER TABLE pets ADD COLUMNS (label STRING)")


def test_tags(spark: SparkSession, pets: str) -> None:
    spark.sql("ALTER TABLE pets CREATE TAG `train-v1` AS OF VERSION 1")
    spark.sql(f"ALTER TABLE lance.`{pets}` CREATE TAG latest")
    assert lance.dataset(pets).tags.list()["train-v1"]["version"] == 1
    assert lance.dataset(pets).tags.list()["latest"]["version"] == 2
    assert _count(spark, "SELECT count(*) FROM pets VERSION AS OF 'train-v1'") == 10
    spark.sql("ALTER TABLE pets DROP TAG `train-v1`")
    assert "train-v1" not in lance.dataset(pets).tags.list()


def test_branches(spark: SparkSession, pets: str) -> None:
    spark.sql("ALTER TABLE pets CREATE BRANCH exp AS OF VERSION 1")
    spark.sql(f"ALTER TABLE lance.`{pets}` CREATE BRANCH IF NOT EXISTS exp")  # exists: no-op
    spark.sql("ALTER TABLE pets CREATE BRANCH `head-1`")
    branch = os.path.join(pets, "tree", "exp")
    info = lance.dataset(pets).branches.list()
    assert sorted(info) == ["exp", "head-1"] and info["exp"]["parent_version"] == 1
    assert info["head-1"]["parent_version"] == 2
    shown = spark.sql("SHOW BRANCHES IN pets").collect()
    assert [(r.branch, r.version, r.parentVersion) for r in shown] == [
        ("main", 2, None),
        ("exp", 1, 1),
        ("head-1", 2, 2),
    ]
    assert [r.branch for r in spark.sql(f"SHOW BRANCHES FROM '{pets}'").collect()] == [
        r.branch for r in shown
    ]

    # queries, row-level changes and time travel on pets.branch_exp: the branch's versions
    assert _count(spark, "SELECT count(*) FROM pets.branch_exp") == 10
    spark.sql(
        "MERGE INTO pets.branch_exp t USING (SELECT id, 'new' AS label FROM range(8, 12)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql("UPDATE pets.branch_exp SET label = 'one' WHERE id = 1")
    spark.sql(f"DELETE FROM lance.`{pets}`.branch_exp WHERE id = 0")
    expected = (
        spark.range(0, 12)
        .where("id != 0")
        .selectExpr(
            "id",
            "CASE WHEN id = 1 THEN 'one' WHEN id >= 8 THEN 'new' ELSE concat('v', id) END AS label",
        )
    )
    got = spark.sql("SELECT id, label FROM pets.branch_exp").collect()
    assert sorted(map(tuple, got)) == sorted(map(tuple, expected.collect()))
    data = lance.dataset(branch).to_table().to_pydict()
    assert sorted(zip(data["id"], data["label"], strict=True)) == sorted(map(tuple, got))
    old = spark.sql(f"SELECT id FROM lance.`{pets}`.branch_exp VERSION AS OF 2 b").collect()
    assert sorted(r.id for r in old) == list(range(12))  # the MERGE, before UPDATE and DELETE
    history = spark.sql("DESCRIBE HISTORY pets.branch_exp").collect()
    assert [r.operation for r in history][:3] == ["DELETE", "UPDATE", "MERGE"]
    # main: its two versions and rows, its catalog entry
    assert [int(v["version"]) for v in lance.dataset(pets).versions()] == [1, 2]
    assert _count(spark, "SELECT count(*) FROM pets WHERE label = 'v1'") == 1
    assert _count(spark, "SELECT count(*) FROM pets") == 15

    # Spark's own table options: a read and an INSERT of a catalog table's branch
    spark.sql("INSERT INTO pets WITH ('branch' = 'exp') SELECT 50, 'v50'")
    assert 50 in lance.dataset(branch).to_table().to_pydict()["id"]
    assert 50 not in lance.dataset(pets).to_table().to_pydict()["id"]
    spark.sql("INSERT OVERWRITE pets WITH ('branch' = 'head-1') SELECT 60, 'v60'")
    head = os.path.join(pets, "tree", "head-1")
    assert lance.dataset(head).to_table().to_pydict() == {"id": [60], "label": ["v60"]}
    assert [int(v["version"]) for v in lance.dataset(pets).versions()] == [1, 2]
    with_options = "SELECT count(*) FROM pets WITH ('branch' = 'exp', 'version' = '2')"
    assert _count(spark, with_options) == 12 == len(lance.dataset(branch, version=2).to_table())
    spark.sql("INSERT INTO pets.branch_exp SELECT 51, 'v51'")  # the branch as a table
    assert 51 in lance.dataset(branch).to_table().to_pydict()["id"]
    assert [int(v["version"]) for v in lance.dataset(pets).versions()] == [1, 2]

    with pytest.raises(Exception, match=r"'nope' does not exist.*main, exp, head-1"):
        spark.sql("SELECT * FROM pets.branch_nope")  # the session catalog asks Lance
    with pytest.raises(Exception, match="'exp' already exists"):  # Lance's message
        spark.sql("ALTER TABLE pets CREATE BRANCH exp")
    spark.sql("ALTER TABLE pets DROP BRANCH exp")
    spark.sql(f"ALTER TABLE lance.`{pets}` DROP BRANCH IF EXISTS exp")  # absent: no-op
    with pytest.raises(Exception, match=r"'exp' does not exist.*branches: main, head-1"):
        spark.sql("ALTER TABLE pets DROP BRANCH exp")
    assert sorted(lance.dataset(pets).branches.list()) == ["head-1"]


def test_create_index(spark: SparkSession, pets: str) -> None:
    spark.sql("CREATE INDEX idx_id ON pets (id) USING BTREE")
    spark.sql("CREATE INDEX label_idx ON pets (label) USING BITMAP")
    names = sorted(i.name for i in lance.dataset(pets).describe_indices())
    assert names == ["idx_id", "label_idx"]
    assert spark.sql("SELECT label FROM pets WHERE id = 12").first().label == "v12"


def _index_stats(uri: str, name: str) -> dict[str, object]:
    segment = lance.dataset(uri).stats.index_stats(name)["indices"][0]
    assert isinstance(segment, dict)
    return segment


@pytest.fixture
def vectors(spark: SparkSession, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Catalog table ``vecs`` (and its path): 64 rows of id, note, vec (4 floats)."""
    uri = str(tmp_path / "vecs.lance")
    spark.range(64).selectExpr(
        "id",
        "concat('note ', id) AS note",
        "array(cast(id AS float), cast(id % 7 AS float), 1.0f, cast(id % 3 AS float)) AS vec",
    ).write.format("lance").option("vec.arrow.fixed-size-list.size", "4").save(uri)
    spark.sql("DROP TABLE IF EXISTS vecs")
    spark.sql(f"CREATE TABLE vecs USING lance LOCATION '{uri}'")
    yield "vecs", uri
    spark.sql("DROP TABLE IF EXISTS vecs")


@pytest.mark.parametrize("by_name", [True, False], ids=["catalog", "path"])
def test_create_index_parameters_are_honoured(
    spark: SparkSession, vectors: tuple[str, str], by_name: bool
) -> None:
    name, uri = vectors
    target = name if by_name else f"lance.`{uri}`"
    spark.sql(
        f"CREATE INDEX v_cos ON {target} (vec) USING ivf_flat "
        "WITH (distance_type = 'cosine', num_partitions = 2)"
    )
    assert _index_stats(uri, "v_cos")["metric_type"] == "cosine"
    spark.sql(f"CREATE INDEX n_pos ON {target} (note) USING INVERTED WITH (with_position = true)")
    spark.sql(
        f"CREATE INDEX n_nopos ON {target} (note) USING INVERTED "
        "WITH (WITH_POSITION = 'False', stem = FALSE)"
    )
    assert _index_stats(uri, "n_pos")["params"]["with_position"] is True  # type: ignore[index]
    nopos = _index_stats(uri, "n_nopos")["params"]
    assert (nopos["with_position"], nopos["stem"]) == (False, False)  # type: ignore[index]
    table = LanceTable.forName(spark, name) if by_name else LanceTable.forPath(spark, uri)
    table.createIndex(
        "vec", "IVF_HNSW_SQ", name="v_dot", metric="DOT", num_partitions=2, m=8, replace="true"
    )
    hnsw = _index_stats(uri, "v_dot")
    assert hnsw["metric_type"] == "dot"
    assert hnsw["sub_index"]["params"]["m"] == 8  # type: ignore[index]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "CREATE INDEX i ON {t} (vec) USING IVF_FLAT WITH (num_partitions = 2, num_sub_vectors = 2)",
            r"index parameter 'num_sub_vectors' does not apply to index type IVF_FLAT \(it is a "
            r"parameter of IVF_PQ, IVF_HNSW_PQ\); valid parameters for IVF_FLAT: distance_type, "
            r"metric, num_partitions, target_partition_size, replace",
        ),
        (
            "CREATE INDEX i ON {t} (vec) USING IVF_PQ WITH (num_sub_vectors = 2, m = 16)",
            "'m' does not apply to index type IVF_PQ .* valid parameters for IVF_PQ: distance_type",
        ),
        (
            "CREATE INDEX i ON {t} (id) USING BTREE WITH (ef_construction = 16)",
            "'ef_construction' does not apply to index type BTREE .* for BTREE: replace",
        ),
        (
            "CREATE INDEX i ON {t} (vec) USING IVF_FLAT WITH (distance_type = 'manhattan')",
            "distance_type='manhattan' .* must be one of l2, euclidean, cosine, dot, hamming",
        ),
        (
            "CREATE INDEX i ON {t} (note) USING INVERTED WITH (with_position = 'yes')",
            "with_position='yes' .* must be true or false",
        ),
    ],
)
def test_create_index_refuses_what_does_not_apply(
    spark: SparkSession, vectors: tuple[str, str], statement: str, message: str
) -> None:
    name, uri = vectors
    version = lance.dataset(uri).version
    for target in (name, f"lance.`{uri}`"):
        with pytest.raises(AnalysisException, match="InvalidOptionError: .*" + message):
            spark.sql(statement.format(t=target))
    with pytest.raises(InvalidOptionError, match="'num_sub_vectors' does not apply"):
        LanceTable.forName(spark, name).createIndex("vec", "IVF_FLAT", num_sub_vectors=2)
    assert lance.dataset(uri).version == version
    assert lance.dataset(uri).describe_indices() == []


def test_create_table_with_columns_and_no_rows_keeps_data_storage_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "v21.lance")
    spark.sql("DROP TABLE IF EXISTS v21")
    spark.sql(
        f"CREATE TABLE v21 (id BIGINT, label STRING) USING lance LOCATION '{uri}' "
        "OPTIONS (data_storage_version = '2.1')"
    )
    try:
        ds = lance.dataset(uri)
        assert (ds.data_storage_version, ds.count_rows(), ds.schema.names) == (
            "2.1",
            0,
            ["id", "label"],
        )
        spark.sql("INSERT INTO v21 VALUES (1, 'a')")
        assert lance.dataset(uri).data_storage_version == "2.1"
        assert [tuple(r) for r in spark.table("v21").collect()] == [(1, "a")]
    finally:
        spark.sql("DROP TABLE IF EXISTS v21")
    with pytest.raises(AnalysisException, match="'V2' is not a Lance file format"):
        spark.sql(
            f"CREATE TABLE v21 (id BIGINT) USING lance LOCATION '{tmp_path}/bad.lance' "
            "OPTIONS (data_storage_version = 'V2')"
        )
    assert not spark.catalog.tableExists("v21")
    assert not (tmp_path / "bad.lance").exists()


def test_create_table_as_select(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "ctas.lance")
    spark.sql("DROP TABLE IF EXISTS ctas")
    spark.sql(
        f"CREATE TABLE ctas USING lance LOCATION '{uri}' AS "
        "SELECT id, id * 2 AS twice FROM range(7)"
    )
    ds = lance.dataset(uri)
    assert ds.version == 1
    assert sorted(ds.to_table().to_pydict()["twice"]) == [0, 2, 4, 6, 8, 10, 12]
    assert _count(spark, "SELECT sum(twice) FROM ctas") == 42
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_ALREADY_EXISTS"):
        spark.sql(f"CREATE TABLE ctas USING lance LOCATION '{uri}' AS SELECT 1 AS id")
    spark.sql(f"CREATE TABLE IF NOT EXISTS ctas USING lance LOCATION '{uri}' AS SELECT 1 AS id")
    assert lance.dataset(uri).version == 1
    spark.sql("DROP TABLE ctas")
    with pytest.raises(AnalysisException, match=r"TableAlreadyExistsError: .*already exists at"):
        spark.sql(f"CREATE TABLE ctas USING lance LOCATION '{uri}' AS SELECT 1 AS id")
    assert not spark.catalog.tableExists("ctas") and lance.dataset(uri).version == 1


def test_create_table_as_select_of_an_old_version(
    spark: SparkSession, pets: str, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ctas_old.lance")
    spark.sql("DROP TABLE IF EXISTS ctas_old")
    spark.sql(
        f"CREATE TABLE ctas_old USING lance LOCATION '{uri}' AS "
        f"SELECT id, label FROM lance.`{pets}` VERSION AS OF 1 WHERE id < 5"
    )
    assert sorted(lance.dataset(uri).to_table().to_pydict()["id"]) == [0, 1, 2, 3, 4]
    assert _count(spark, "SELECT count(*) FROM ctas_old") == 5
    spark.sql("DROP TABLE ctas_old")


@pytest.mark.parametrize(
    "statement",
    [
        "VACUUM pets RETAIN x HOURS",
        "VACUUM pets RETAIN 5",
        "RESTORE TABLE pets TO VERSION 3",
        "DESCRIBE HISTORY pets LIMIT",
        "ALTER TABLE pets CREATE TAG",
        "ALTER TABLE pets CREATE BRANCH b AS OF VERSION x",
        "OPTIMIZE pets now",
        "CREATE INDEX i ON pets id",
    ],
)
def test_malformed_companion_statements_are_spark_parse_errors(
    spark: SparkSession, pets: str, statement: str
) -> None:
    """The companion's parser leaves a statement it does not recognise to Spark's, whose
    error points at the position; nothing runs."""
    version = lance.dataset(pets).version
    # Spark calls a CREATE INDEX it cannot parse an INVALID_STATEMENT_OR_CLAUSE.
    with pytest.raises(ParseException, match=r"PARSE_SYNTAX_ERROR|INVALID_STATEMENT_OR_CLAUSE"):
        spark.sql(statement).collect()
    assert lance.dataset(pets).version == version


def test_statements_on_other_tables_go_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    spark.sql("DROP TABLE IF EXISTS plain")
    spark.sql(f"CREATE TABLE plain (id INT) USING parquet LOCATION '{tmp_path / 'plain'}'")
    spark.sql("INSERT INTO plain VALUES (1)")
    assert _count(spark, "SELECT count(*) FROM plain") == 1
    with pytest.raises((AnalysisException, ParseException)) as ours:
        spark.sql("SELECT * FROM plain VERSION AS OF 1")
    assert "Lance" not in str(ours.value).splitlines()[0]  # Spark's message (a stack may say)
    with pytest.raises(Exception, match="not a Lance table"):
        spark.sql("VACUUM plain")  # the companion's VACUUM, on a Parquet table
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("DESCRIBE HISTORY nowhere")
    spark.sql("DROP TABLE plain")
    # named like a branch (db.branch_x), but a table of its own: Spark's
    spark.sql("DROP TABLE IF EXISTS branch_plain")
    spark.sql(f"CREATE TABLE branch_plain (id INT) USING parquet LOCATION '{tmp_path / 'bp'}'")
    spark.sql("INSERT INTO default.branch_plain VALUES (7)")
    assert _count(spark, "SELECT max(id) FROM default.branch_plain") == 7
    with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql("SELECT * FROM nowhere.branch_x")
    spark.sql("DROP TABLE branch_plain")
