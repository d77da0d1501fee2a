"""The SQL front's table references (no JVM): branches (``t.branch_b``) and path identifiers
(``lance.`path```) of the statements it runs (MERGE / UPDATE / DELETE)."""

from __future__ import annotations

import pytest
from sqlglot import expressions as exp

from lance_spark.sql.targets import branch_reference, path_of


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
    assert path_of(exp.to_table("lance.`s3://bucket/my pets.lance`", dialect="spark")) == (
        "s3://bucket/my pets.lance"
    )
    assert path_of(exp.to_table("lance.pets", dialect="spark")) == "pets"
    assert path_of(exp.to_table("db.pets", dialect="spark")) is None
