"""Parsing of the Delta-style SQL commands (no JVM): what is recognised, the arguments, the
position in syntax errors, and what is left to Spark."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import expressions as exp

from lance_spark.sql.commands import parse_command
from lance_spark.sql.targets import branch_reference, path_of


def _args(text: str) -> tuple[str, str, dict[str, object]]:
    command = parse_command(text)
    assert command is not None, text
    assert command.error is None, command.error
    return command.kind, command.table.sql(dialect="spark"), dict(command.args)


@pytest.mark.parametrize(
    ("text", "kind", "table", "args"),
    [
        ("OPTIMIZE pets", "OPTIMIZE", "pets", {}),
        (
            "CREATE INDEX idx_id ON pets (id) USING BTREE",
            "CREATE INDEX",
            "pets",
            {"name": "idx_id", "column": "id", "type": "BTREE", "params": {}},
        ),
        (
            "CREATE INDEX v_idx ON pets (v) USING IVF_PQ WITH (num_partitions = 2, metric = 'cosine')",
            "CREATE INDEX",
            "pets",
            {
                "name": "v_idx",
                "column": "v",
                "type": "IVF_PQ",
                "params": {"num_partitions": 2, "metric": "cosine"},
            },
        ),
        (
            "CREATE INDEX t_idx ON pets (note) USING INVERTED "
            "WITH (with_position = true, stem = FALSE, lower_case = 'true', block_size = 128)",
            "CREATE INDEX",
            "pets",
            {
                "name": "t_idx",
                "column": "note",
                "type": "INVERTED",
                "params": {
                    "with_position": True,
                    "stem": False,
                    "lower_case": "true",
                    "block_size": 128,
                },
            },
        ),
    ],
)
def test_commands_and_arguments(text: str, kind: str, table: str, args: dict[str, object]) -> None:
    assert _args(text) == (kind, table, args)


@pytest.mark.parametrize(
    ("text", "table", "branch", "path"),
    [
        ("pets.branch_exp", "pets", "exp", None),
        ("db.pets.BRANCH_exp", "db.pets", "exp", None),
        ("cat.db.pets.branch_exp", "cat.db.pets", "exp", None),
        ("pets.`branch_exp-1`", "pets", "exp-1", None),
        (
            "lance.`/data/pets.lance`.branch_exp",
            "lance.`/data/pets.lance`",
            "exp",
            "/data/pets.lance",
        ),
    ],
)
def test_branch_references(text: str, table: str, branch: str, path: str | None) -> None:
    found = branch_reference(exp.to_table(text, dialect="spark"))
    assert found is not None
    assert (found[0].sql(dialect="spark"), found[1], path_of(found[0])) == (table, branch, path)


@pytest.mark.parametrize("text", ["branch_exp", "pets.branch_", "pets.branches", "lance.`/p`"])
def test_not_branch_references(text: str) -> None:
    assert branch_reference(exp.to_table(text, dialect="spark")) is None


def test_path_identifiers() -> None:
    command = parse_command("OPTIMIZE lance.`s3://bucket/my pets.lance`")
    assert command is not None
    assert path_of(command.table) == "s3://bucket/my pets.lance"
    assert path_of(parse_command("OPTIMIZE lance.pets").table) == "pets"  # type: ignore[union-attr]
    assert path_of(parse_command("OPTIMIZE db.pets").table) is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("OPTIMIZE pets now", "unexpected input at 'now'"),
        ("CREATE INDEX i ON pets id", "expected ( at 'id'"),
        ("CREATE INDEX i ON pets (id) WITH (k 1)", "expected = at '1'"),
        (
            "CREATE INDEX i ON pets (id) WITH (k = yes)",
            "expected a value (a number, a quoted string, true or false) at 'yes'",
        ),
    ],
)
def test_malformed_commands_keep_the_error_for_a_lance_table(text: str, message: str) -> None:
    command = parse_command(text)
    assert command is not None and command.error is not None
    assert message in str(command.error)
    assert "PARSE_SYNTAX_ERROR" in str(command.error)
    assert "Grammar:" in str(command.error)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "DESCRIBE TABLE pets",
        "DESCRIBE pets",
        "ALTER TABLE pets RENAME TO cats",
        "ALTER TABLE pets ADD COLUMNS (note STRING)",
        "ALTER TABLE pets RENAME COLUMN w TO weight",
        "ALTER TABLE pets SET TBLPROPERTIES ('a' = true)",
        "REFRESH TABLE pets",
        "ALTER TABLE pets SET SERDEPROPERTIES ('a' = 'b')",
        "CREATE TABLE t (a INT) USING parquet",
        "INSERT INTO pets VALUES (1)",
        "VACUUM pets",
        "DESCRIBE HISTORY pets",
        "RESTORE TABLE pets TO VERSION AS OF 1",
        "OPTIMIZE 'x'",
        "SHOW BRANCHES pets",
        "SHOW TABLES IN db",
        "",
    ],
)
def test_other_statements_are_not_commands(text: str) -> None:
    assert parse_command(text) is None


@given(st.text(max_size=60))
def test_never_crashes_on_arbitrary_text(text: str) -> None:
    command = parse_command(text)
    assert command is None or command.kind in {
        "OPTIMIZE",
        "CREATE INDEX",
        "SHOW TBLPROPERTIES",
        "DESCRIBE EXTENDED",
    }


@pytest.mark.parametrize(
    ("text", "kind", "args"),
    [
        ("SHOW TBLPROPERTIES pets ('a')", "SHOW TBLPROPERTIES", {"key": "a"}),
    ],
)
def test_show_tblproperties_is_parsed(text: str, kind: str, args: dict[str, object]) -> None:
    command = parse_command(text)
    assert command is not None and command.error is None and command.kind == kind
    for name, value in args.items():
        assert command.arg(name) == value
