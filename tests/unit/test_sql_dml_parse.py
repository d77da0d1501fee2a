"""SQL MERGE INTO / UPDATE / DELETE parsed into the engine's neutral form (no JVM).

Each grammar form Spark accepts becomes the same ``MergeSpec`` ingredients the builder makes;
everything that is not one of these statements, or is not Spark's grammar, is left to Spark
(``None``); a clause Spark's MERGE does not allow is an error naming the clause and its place.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lance_spark.errors import InvalidOptionError, SqlSyntaxError
from lance_spark.sql.dml import (
    MergeStatement,
    find_statement,
    parse_delete,
    parse_merge,
    parse_update,
)
from lance_spark.table.merge import Clause, ClauseKind

K = ClauseKind


def merge(text: str) -> MergeStatement:
    stmt = parse_merge(text)
    assert stmt is not None, text
    return stmt


# --- MERGE: the example of the task, clause by clause -------------------------------------------


def test_full_example() -> None:
    stmt = merge(
        "MERGE INTO pets t USING updates s ON s.id = t.id\n"
        "  WHEN MATCHED AND s.op = 'delete' THEN DELETE\n"
        "  WHEN MATCHED THEN UPDATE SET *\n"
        "  WHEN NOT MATCHED THEN INSERT *\n"
        "  WHEN NOT MATCHED BY SOURCE AND t.ingested < '2026-01-01' THEN DELETE;"
    )
    assert stmt.target_name == "pets"
    assert stmt.target_alias == "t"
    assert stmt.source_query == "SELECT * FROM updates AS s"
    assert stmt.source_alias == "s"
    assert stmt.condition == "s.id = t.id"
    assert stmt.clauses == (
        Clause(K.MATCHED_DELETE, "s.op = 'delete'", None),
        Clause(K.MATCHED_UPDATE, None, None),
        Clause(K.NOT_MATCHED_INSERT, None, None),
        Clause(K.BY_SOURCE_DELETE, "t.ingested < '2026-01-01'", None),
    )
    assert not stmt.schema_evolution


def test_explicit_assignments_and_values() -> None:
    stmt = merge(
        "MERGE INTO pets AS t USING updates AS s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET a = s.a, t.b = t.b + 1 "
        "WHEN NOT MATCHED BY TARGET AND s.x > 1 THEN INSERT (id, label) VALUES (s.id, upper(s.label)) "
        "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET t.gone = true"
    )
    assert stmt.clauses == (
        Clause(K.MATCHED_UPDATE, None, {"a": "s.a", "b": "t.b + 1"}),
        Clause(K.NOT_MATCHED_INSERT, "s.x > 1", {"id": "s.id", "label": "UPPER(s.label)"}),
        Clause(K.BY_SOURCE_UPDATE, None, {"gone": "TRUE"}),
    )


def test_single_column_insert_and_quoted_names() -> None:
    stmt = merge(
        "MERGE INTO pets t USING u s ON s.`the id` = t.`the id` "
        "WHEN MATCHED THEN UPDATE SET t.`Odd Name` = s.`x y` "
        "WHEN NOT MATCHED THEN INSERT (`the id`) VALUES (s.`the id`)"
    )
    assert stmt.condition == "s.`the id` = t.`the id`"
    assert stmt.clauses[0].assignments == {"Odd Name": "s.`x y`"}
    assert stmt.clauses[1].assignments == {"the id": "s.`the id`"}


def test_conditions_on_every_clause_kind() -> None:
    stmt = merge(
        "MERGE INTO pets t USING u s ON s.id = t.id "
        "WHEN MATCHED AND s.n > 0 THEN UPDATE SET n = s.n "
        "WHEN MATCHED AND s.n < 0 THEN DELETE "
        "WHEN NOT MATCHED AND s.n IS NOT NULL THEN INSERT * "
        "WHEN NOT MATCHED BY SOURCE AND t.n > 100 THEN UPDATE SET n = 100 "
        "WHEN NOT MATCHED BY SOURCE AND t.n < 0 THEN DELETE"
    )
    assert [c.kind for c in stmt.clauses] == [
        K.MATCHED_UPDATE,
        K.MATCHED_DELETE,
        K.NOT_MATCHED_INSERT,
        K.BY_SOURCE_UPDATE,
        K.BY_SOURCE_DELETE,
    ]
    assert [c.condition for c in stmt.clauses] == [
        "s.n > 0",
        "s.n < 0",
        "NOT s.n IS NULL",
        "t.n > 100",
        "t.n < 0",
    ]


def test_case_expression_and_subquery_in_conditions() -> None:
    stmt = merge(
        "MERGE INTO pets t USING u s ON CASE WHEN s.k IS NULL THEN s.id ELSE s.k END = t.id "
        "WHEN MATCHED AND s.id IN (SELECT id FROM banned) THEN DELETE"
    )
    assert stmt.condition == "CASE WHEN s.k IS NULL THEN s.id ELSE s.k END = t.id"
    assert stmt.clauses == (Clause(K.MATCHED_DELETE, "s.id IN (SELECT id FROM banned)", None),)


# --- MERGE: sources ----------------------------------------------------------------------------


def test_source_subquery() -> None:
    stmt = merge(
        "MERGE INTO pets t USING (SELECT id, upper(label) AS label FROM raw WHERE ok) s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET *"
    )
    assert stmt.source_query == (
        "SELECT * FROM (SELECT id, UPPER(label) AS label FROM raw WHERE ok) AS s"
    )
    assert stmt.source_alias == "s"


def test_source_subquery_without_alias() -> None:
    stmt = merge("MERGE INTO pets USING (SELECT 1 AS k) ON k = pets.id WHEN MATCHED THEN DELETE")
    assert stmt.source_query == "SELECT * FROM (SELECT 1 AS k)"
    assert stmt.source_alias is None
    assert stmt.target_alias == "pets"


def test_source_cte_is_prepended() -> None:
    stmt = merge(
        "WITH u AS (SELECT * FROM raw WHERE n > 0), v AS (SELECT * FROM u) "
        "MERGE INTO pets t USING v s ON s.id = t.id WHEN MATCHED THEN UPDATE SET *"
    )
    assert stmt.source_query == (
        "WITH u AS (SELECT * FROM raw WHERE n > 0), v AS (SELECT * FROM u) SELECT * FROM v AS s"
    )


def test_source_values_with_column_aliases() -> None:
    stmt = merge(
        "MERGE INTO pets t USING (VALUES (1, 'a'), (2, 'b')) AS s(id, label) "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET label = s.label"
    )
    assert stmt.source_query == "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS s(id, label)"
    assert stmt.source_alias == "s"


def test_source_time_travel_and_lance_path() -> None:
    stmt = merge(
        "MERGE INTO pets t USING lance.`/data/old.lance` VERSION AS OF 3 s ON s.id = t.id "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    assert stmt.source_query == "SELECT * FROM lance.`/data/old.lance` VERSION AS OF 3 AS s"
    assert stmt.source_alias == "s"


# --- MERGE: names without aliases ----------------------------------------------------------------


def test_no_aliases_table_names_qualify_columns() -> None:
    stmt = merge(
        "MERGE INTO pets USING updates ON updates.id = pets.id "
        "WHEN MATCHED THEN UPDATE SET pets.label = updates.label "
        "WHEN NOT MATCHED THEN INSERT (pets.id, label) VALUES (updates.id, updates.label)"
    )
    assert stmt.target_alias == "pets"
    assert stmt.source_alias == "updates"
    assert stmt.condition == "updates.id = pets.id"
    assert stmt.clauses[0].assignments == {"label": "updates.label"}
    assert stmt.clauses[1].assignments == {"id": "updates.id", "label": "updates.label"}


def test_multi_part_names_become_the_table_name() -> None:
    stmt = merge(
        "MERGE INTO spark_catalog.default.pets USING db2.updates "
        "ON db2.updates.id = default.pets.id AND spark_catalog.default.pets.n > 0 "
        "WHEN MATCHED THEN UPDATE SET default.pets.label = updates.label"
    )
    assert stmt.target_name == "spark_catalog.default.pets"
    assert stmt.target_alias == "pets"
    assert stmt.source_query == "SELECT * FROM db2.updates"
    assert stmt.condition == "updates.id = pets.id AND pets.n > 0"
    assert stmt.clauses[0].assignments == {"label": "updates.label"}


def test_alias_hides_the_table_name() -> None:
    # As in Spark: with an alias, `pets.id` is not the target's column (left for Spark to say).
    stmt = merge("MERGE INTO db.pets t USING u s ON s.id = db.pets.id WHEN MATCHED THEN DELETE")
    assert stmt.condition == "s.id = db.pets.id"


def test_lance_path_target() -> None:
    stmt = merge(
        "MERGE INTO lance.`/data/pets.lance` USING u ON u.id = `/data/pets.lance`.id "
        "WHEN MATCHED THEN DELETE"
    )
    assert stmt.target_name == "lance.`/data/pets.lance`"
    assert stmt.target_alias == "/data/pets.lance"
    assert stmt.condition == "u.id = `/data/pets.lance`.id"


def test_nested_field_references_keep_their_path() -> None:
    stmt = merge(
        "MERGE INTO pets t USING u s ON s.id = t.id AND t.info.age > s.info.age "
        "WHEN MATCHED THEN UPDATE SET t.info = s.info"
    )
    assert stmt.condition == "s.id = t.id AND t.info.age > s.info.age"
    assert stmt.clauses[0].assignments == {"info": "s.info"}


# --- MERGE WITH SCHEMA EVOLUTION ------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "MERGE WITH SCHEMA EVOLUTION INTO pets t USING u s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET *",
        "merge  with\n schema   evolution into pets t USING u s ON s.id = t.id "
        "WHEN MATCHED THEN UPDATE SET *",
        "WITH u AS (SELECT 1 AS id) MERGE WITH SCHEMA EVOLUTION INTO pets t USING u s "
        "ON s.id = t.id WHEN MATCHED THEN UPDATE SET *",
    ],
)
def test_schema_evolution(text: str) -> None:
    stmt = merge(text)
    assert stmt.schema_evolution
    assert stmt.target_name == "pets"
    assert stmt.clauses == (Clause(K.MATCHED_UPDATE, None, None),)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 'MERGE WITH SCHEMA EVOLUTION INTO x'",
        "MERGE WITH SCHEMA INTO pets t USING u s ON s.id = t.id WHEN MATCHED THEN DELETE",
        "MERGE WITH SCHEMA EVOLUTION pets t USING u s ON s.id = t.id WHEN MATCHED THEN DELETE",
        "MERGE INTO pets WITH SCHEMA EVOLUTION t USING u s ON s.id = t.id WHEN MATCHED THEN DELETE",
    ],
)
def test_schema_evolution_only_in_its_place(text: str) -> None:
    assert find_statement(text) is None


def test_schema_evolution_error_positions_are_those_of_the_text() -> None:
    text = (
        "MERGE WITH SCHEMA EVOLUTION INTO pets t USING u s ON s.id = t.id\n"
        "WHEN NOT MATCHED THEN UPDATE SET n = 1"
    )
    with pytest.raises(SqlSyntaxError, match=r"clause 1, line 2, col 1"):
        parse_merge(text)


# --- MERGE: clauses Spark's grammar does not have ------------------------------------------------


@pytest.mark.parametrize(
    ("clause", "problem"),
    [
        ("WHEN MATCHED THEN INSERT *", "cannot INSERT"),
        ("WHEN MATCHED THEN INSERT (id) VALUES (s.id)", "cannot INSERT"),
        ("WHEN NOT MATCHED BY SOURCE THEN INSERT *", "cannot INSERT"),
        ("WHEN NOT MATCHED THEN UPDATE SET n = 1", "cannot UPDATE"),
        ("WHEN NOT MATCHED THEN DELETE", "cannot DELETE"),
        ("WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *", "cannot UPDATE SET *"),
        ("WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.n)", "needs its column list"),
        ("WHEN NOT MATCHED THEN INSERT (id, n) VALUES (s.id)", "names 2 column(s) but gives 1"),
        ("WHEN MATCHED THEN DO NOTHING", "an action Spark's MERGE does not have"),
    ],
)
def test_invalid_clause_is_named_with_its_position(clause: str, problem: str) -> None:
    text = f"MERGE INTO pets t USING u s ON s.id = t.id WHEN MATCHED AND s.x THEN DELETE {clause}"
    with pytest.raises(SqlSyntaxError) as caught:
        parse_merge(text)
    message = str(caught.value)
    assert problem in message
    assert f"'{clause}'" in message or clause.split(" THEN ")[0] in message
    col = text.index(clause) + 1
    assert f"clause 2, line 1, col {col}" in message
    assert "Spark's MERGE allows" in message


def test_duplicate_assignment() -> None:
    with pytest.raises(InvalidOptionError, match=r"DUPLICATE_ASSIGNMENTS.*`N`"):
        parse_merge(
            "MERGE INTO p t USING u s ON s.id = t.id WHEN MATCHED THEN UPDATE SET n = 1, N = 2"
        )
    with pytest.raises(InvalidOptionError, match="DUPLICATE_ASSIGNMENTS"):
        parse_merge(
            "MERGE INTO p t USING u s ON s.id = t.id "
            "WHEN NOT MATCHED THEN INSERT (id, t.id) VALUES (1, 2)"
        )


def test_engine_rules_are_left_to_the_engine() -> None:
    # A non-last clause without condition parses: check_clauses rejects it like the builder.
    stmt = merge(
        "MERGE INTO p t USING u s ON s.id = t.id "
        "WHEN MATCHED THEN DELETE WHEN MATCHED AND s.n > 0 THEN UPDATE SET *"
    )
    assert stmt.clauses[0] == Clause(K.MATCHED_DELETE, None, None)


# --- UPDATE and DELETE ---------------------------------------------------------------------------


def test_update_example() -> None:
    stmt = parse_update("UPDATE pets SET label = 'Bob' WHERE label = 'Blob'")
    assert stmt is not None
    assert stmt.target_name == "pets"
    assert stmt.assignments == (("label", "'Bob'"),)
    assert stmt.condition == "label = 'Blob'"


@pytest.mark.parametrize(
    "text",
    [
        "UPDATE t AS x SET x.a = 1 WHERE x.b = 2",
        "UPDATE t x SET a = 1 WHERE x.b = 2",
        "UPDATE t SET t.a = 1 WHERE t.b = 2",
        "UPDATE db.t SET db.t.a = 1 WHERE t.b = 2",
        "update t set A = 1 where b = 2",
    ],
)
def test_update_qualifiers_are_stripped(text: str) -> None:
    stmt = parse_update(text)
    assert stmt is not None
    assert [(k.lower(), v) for k, v in stmt.assignments] == [("a", "1")]
    assert stmt.condition == "b = 2"
    assert stmt.target.alias == ""


def test_update_without_where_and_with_expressions() -> None:
    stmt = parse_update("UPDATE lance.`/d/p.lance` p SET n = p.n * 2, label = concat(label, '!')")
    assert stmt is not None
    assert stmt.target_name == "lance.`/d/p.lance`"
    assert stmt.assignments == (("n", "n * 2"), ("label", "CONCAT(label, '!')"))
    assert stmt.condition is None


def test_update_subquery_references_are_kept() -> None:
    stmt = parse_update(
        "UPDATE pets p SET n = 0 WHERE p.id IN (SELECT o.id FROM other o WHERE o.k = p.k)"
    )
    assert stmt is not None
    assert stmt.condition == "id IN (SELECT o.id FROM other AS o WHERE o.k = p.k)"


def test_update_errors() -> None:
    with pytest.raises(InvalidOptionError, match="DUPLICATE_ASSIGNMENTS"):
        parse_update("UPDATE pets SET a = 1, pets.A = 2")
    with pytest.raises(InvalidOptionError, match=r"WITH \.\.\. UPDATE"):
        parse_update(
            "WITH x AS (SELECT 1 AS id) UPDATE pets SET a = 1 WHERE id IN (SELECT id FROM x)"
        )


@pytest.mark.parametrize(
    ("text", "condition"),
    [
        ("DELETE FROM pets WHERE label IS NULL", "label IS NULL"),
        ("DELETE FROM pets", None),
        ("DELETE FROM pets AS p WHERE p.label IS NULL", "label IS NULL"),
        ("DELETE FROM pets p WHERE p.n > 1 AND pets_n > 2", "n > 1 AND pets_n > 2"),
        ("DELETE FROM default.pets WHERE default.pets.n > 1 OR pets.n < 0", "n > 1 OR n < 0"),
        ("DELETE FROM lance.`/x/y.lance` WHERE `/x/y.lance`.n = 1;", "n = 1"),
    ],
)
def test_delete(text: str, condition: str | None) -> None:
    stmt = parse_delete(text)
    assert stmt is not None
    assert stmt.condition == condition


# --- columns named like keywords -----------------------------------------------------------------

# Keywords Spark's parser takes as names unquoted (not reserved in its default mode): `values`,
# which sqlglot's Spark dialect reserves, and others that are plausible column names.
_KEYWORD_NAMES = ["values", "key", "value", "date", "timestamp", "comment", "data", "format"]
_KEYWORD_NAMES += ["insert", "drop", "create", "alter"]


@pytest.mark.parametrize("name", _KEYWORD_NAMES)
def test_update_keyword_columns_unquoted(name: str) -> None:
    stmt = parse_update(f"UPDATE pets p SET {name} = {name} + 1, n = p.{name} WHERE {name} > 2")
    assert stmt is not None, name
    assert stmt.assignments == ((name, f"{name} + 1"), ("n", name))
    assert stmt.condition == f"{name} > 2"


@pytest.mark.parametrize("name", _KEYWORD_NAMES)
def test_delete_keyword_columns_unquoted(name: str) -> None:
    stmt = parse_delete(f"DELETE FROM pets WHERE {name} IN (1, 2) OR pets.{name} IS NULL")
    assert stmt is not None, name
    assert stmt.condition == f"{name} IN (1, 2) OR {name} IS NULL"


@pytest.mark.parametrize("name", _KEYWORD_NAMES)
def test_merge_keyword_columns_unquoted(name: str) -> None:
    stmt = merge(
        f"MERGE INTO pets t USING (SELECT id, {name} FROM u) s "
        f"ON t.id = s.id AND t.{name} = s.{name} "
        f"WHEN MATCHED AND {name} > 0 THEN UPDATE SET {name} = s.{name} "
        f"WHEN NOT MATCHED THEN INSERT (id, {name}) VALUES (s.id, s.{name} * 2) "
        f"WHEN NOT MATCHED BY SOURCE THEN UPDATE SET {name} = {name} - 1"
    )
    assert stmt.source_query == f"SELECT * FROM (SELECT id, {name} FROM u) AS s"
    assert stmt.condition == f"t.id = s.id AND t.{name} = s.{name}"
    assert stmt.clauses == (
        Clause(K.MATCHED_UPDATE, f"{name} > 0", {name: f"s.{name}"}),
        Clause(K.NOT_MATCHED_INSERT, None, {"id": "s.id", name: f"s.{name} * 2"}),
        Clause(K.BY_SOURCE_UPDATE, None, {name: f"{name} - 1"}),
    )


@pytest.mark.parametrize(
    "text",
    [
        "MERGE INTO pets t USING (VALUES (1, 2)) AS s(id, values) ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (id, values) VALUES (s.id, s.values)",
        "MERGE INTO pets t USING u s ON t.id = s.id "
        "WHEN NOT MATCHED THEN INSERT (values) VALUES (values)",
    ],
)
def test_values_keeps_starting_a_row_list(text: str) -> None:
    stmt = merge(text)
    insert = stmt.clauses[-1]
    assert insert.kind is K.NOT_MATCHED_INSERT
    assert insert.assignments is not None
    assert "values" in insert.assignments
    assert "VALUES (1, 2)" in stmt.source_query or stmt.source_query == "SELECT * FROM u AS s"


# --- left to Spark --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM pets",
        "INSERT INTO pets VALUES (1, 'a')",
        "CREATE TABLE pets (id BIGINT) USING lance LOCATION '/tmp/p'",
        "DESCRIBE HISTORY pets",
        "",
        "MERGE INTO",
        "MERGE INTO pets t USING u s ON s.id = t.id",  # no clause: Spark's parser says so
        "MERGE INTO pets t USING u s ON s.id = t.id WHEN MATCHED THEN DELET",
        "MERGE INTO pets t USING u s ON s.id = t.id WHEN MATCHED THEN DELETE RETURNING *",
        "MERGE INTO pets VERSION AS OF 1 t USING u s ON s.id = t.id WHEN MATCHED THEN DELETE",
        "UPDATE pets SET a = 1 FROM other WHERE other.id = pets.id",
        "UPDATE pets SET a = 1 WHERE",
        "UPDATE pets SET a = 1 LIMIT 3",
        "DELETE FROM pets USING other WHERE other.id = pets.id",
        "DELETE FROM pets WHERE id = 1; DELETE FROM other",
        "DELETE FROM pets WHERE 'unterminated",
    ],
)
def test_left_to_spark(text: str) -> None:
    assert find_statement(text) is None
    assert parse_merge(text) is None
    assert parse_update(text) is None
    assert parse_delete(text) is None


def test_statement_kinds_do_not_mix() -> None:
    assert parse_merge("DELETE FROM pets") is None
    assert parse_update("DELETE FROM pets") is None
    assert parse_delete("UPDATE pets SET a = 1") is None


# --- property: any list of clauses round-trips ----------------------------------------------------

_CONDITIONS = st.sampled_from([None, "s.n > 0", "t.n < 10", "s.op = 'x' AND NOT t.id IS NULL"])
_SETS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["id", "val", "n"]),
        st.sampled_from(["s.val", "t.n + 1", "'lit'", "COALESCE(s.val, t.val)"]),
        min_size=1,
    ),
)
_CLAUSE = st.tuples(st.sampled_from(list(ClauseKind)), _CONDITIONS, _SETS)


def _render(kind: ClauseKind, condition: str | None, sets: dict[str, str] | None) -> str:
    cond = f" AND {condition}" if condition else ""
    if kind.action == "DELETE":
        action = "DELETE"
    elif kind is ClauseKind.NOT_MATCHED_INSERT:
        if sets is None:
            action = "INSERT *"
        else:
            action = f"INSERT ({', '.join(sets)}) VALUES ({', '.join(sets.values())})"
    elif sets is None:
        action = "UPDATE SET *"
    else:
        action = "UPDATE SET " + ", ".join(f"{k} = {v}" for k, v in sets.items())
    return f"{kind.group}{cond} THEN {action}"


@given(st.lists(_CLAUSE, min_size=1, max_size=6), st.booleans())
def test_clauses_round_trip(
    clauses: list[tuple[ClauseKind, str | None, dict[str, str] | None]], evolution: bool
) -> None:
    clauses = [
        (k, c, s if k.action != "DELETE" else None)
        for k, c, s in clauses
        if not (k is ClauseKind.BY_SOURCE_UPDATE and s is None)
    ]
    if not clauses:
        return
    text = (
        f"MERGE {'WITH SCHEMA EVOLUTION ' if evolution else ''}INTO lance.`/t.lance` t "
        "USING src s ON s.id = t.id " + " ".join(_render(*c) for c in clauses)
    )
    stmt = merge(text)
    assert stmt.schema_evolution is evolution
    assert [c.kind for c in stmt.clauses] == [k for k, _, _ in clauses]
    assert [c.condition for c in stmt.clauses] == [c for _, c, _ in clauses]
    assert [c.assignments for c in stmt.clauses] == [s for _, _, s in clauses]
