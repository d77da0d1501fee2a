"""The pure parts of the Spark Connect expression analysis in :mod:`lance_spark._spark`: name
parsing, the names an expression may read, the equalities of a MERGE condition, and SQL text
for history. Connect Columns are built with Connect's own functions; no server is needed."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.connect import functions as CF
from pyspark.sql.connect.column import Column as ConnectColumn

from lance_spark import _spark


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a", ("a",)),
        ("a.b", ("a", "b")),
        ("`a.b`", ("a.b",)),
        ("`a``b`.c", ("a`b", "c")),
        ("t.`x y`", ("t", "x y")),
        ("a b", ("a b",)),
        ("back`tick", None),  # Spark: syntax error (a backtick inside an unquoted part)
        ("`a`b", None),
        ("a..b", None),
        ("a.", None),
        (".a", None),
        ("`a", None),
    ],
)
def test_parse_identifier_follows_spark(text: str, parts: tuple[str, ...] | None) -> None:
    assert _spark.parse_identifier(text) == parts


@pytest.mark.parametrize(
    ("text", "present", "absent"),
    [
        ("id > 1", {"id"}, set()),
        ("'id' = 'x'", set(), {"id", "x"}),  # string literals name no column
        ("`a.b` = 1 AND `a``b` > 2", {"a.b", "a`b"}, set()),
        ("T.Val = s.W", {"t", "val", "s", "w"}, set()),
        ("st.f.g = 1", {"st", "f", "g"}, set()),
        ("exists(arr, x -> x > k)", {"arr", "k", "x"}, set()),
        ("current_date > d", {"current_date", "d"}, set()),  # a keyword may be a column too
    ],
)
def test_sql_names(text: str, present: set[str], absent: set[str]) -> None:
    names = _spark.sql_names(text)
    assert names is not None
    assert present <= names
    assert not (absent & names)


@pytest.mark.parametrize("text", ["s.*", "count(*) > 0", "struct(*)", "(((", "'unterminated"])
def test_sql_names_gives_up_on_stars_and_bad_text(text: str) -> None:
    assert _spark.sql_names(text) is None


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (CF.col("A.b") + 1, {"a", "b"}),
        (CF.lit("id"), set()),
        (CF.col("`x.y`").isin(1, 2), {"x.y"}),
        (CF.when(CF.col("c") > 1, CF.col("d")).otherwise(CF.col("e")), {"c", "d", "e"}),
        (CF.col("v").cast("string").alias("z"), {"v"}),
        (CF.col("st")["f"], {"st"}),  # the field is a literal
        (CF.transform("arr", lambda x: x + CF.col("k")), {"arr", "k"}),
    ],
)
def test_expression_names(column: ConnectColumn, expected: set[str]) -> None:
    assert _spark.expression_names(column._expr) == expected


def test_expression_names_of_sql_text_inside_a_tree() -> None:
    names = _spark.expression_names((CF.expr("Q + 1") > CF.col("r"))._expr)
    assert names is not None and {"q", "r"} <= names


@pytest.mark.parametrize(
    "column",
    [
        CF.col("*"),
        CF.struct("*"),
        CF.col("t.*"),
        CF.expr("s.* "),
        CF.col("x") + CF.expr("count(*)"),
    ],
)
def test_expression_names_gives_up_on_stars(column: ConnectColumn) -> None:
    assert _spark.expression_names(column._expr) is None


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ((CF.col("a") == 1) & ~CF.col("b").isNull(), "((a = 1) AND (NOT (b IS NULL)))"),
        (CF.col("`sp ace`") + CF.col("`a.b`"), "(`sp ace` + `a.b`)"),
        (CF.col("`back``tick`") == "it's", "(`back``tick` = 'it\\'s')"),
        (CF.col("t.x").isin(1, 2), "(t.x IN (1, 2))"),
        (CF.col("x").cast("int"), "CAST(x AS INT)"),
        (
            CF.when(CF.col("x") > 1, "big").otherwise(None),
            "CASE WHEN (x > 1) THEN 'big' ELSE NULL END",
        ),
        (CF.expr("x + 1").alias("y"), "x + 1 AS y"),
        (-CF.col("x"), "(- x)"),
        (CF.col("s")["f"], "s['f']"),
        (CF.upper(CF.col("n")), "upper(n)"),
        (CF.count_distinct(CF.col("n")), "count(DISTINCT n)"),
        (CF.lit(True) | CF.lit(None), "(true OR NULL)"),
        (CF.lit(b"\x01\xff"), "X'01FF'"),
    ],
)
def test_render(column: ConnectColumn, text: str) -> None:
    assert _spark.render(column._expr) == text
    assert _spark.column_text(column) == text


def test_render_lambda() -> None:
    text = _spark.render(CF.transform("arr", lambda v: v + 1)._expr)
    assert re.fullmatch(r"transform\(arr, (x_\d+) -> \(\1 \+ 1\)\)", text), text
