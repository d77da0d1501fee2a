"""The layout table of docs/project/internals.md names every module of the package, and only
modules that exist."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "project" / "internals.md"


def _listed() -> set[str]:
    section = DOC.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed: set[str] = set()
    package = ""
    for line in section.splitlines():
        row = re.match(r"\| `([^`]+)` \|", line)
        if row is None:
            continue
        name = row.group(1)
        if name.startswith("  "):  # a module of the package row above
            listed.add(package + name.strip())
        else:
            package = name if name.endswith("/") else package
            listed.add(name)
    return listed


def test_every_module_is_in_the_layout_table_and_every_row_exists() -> None:
    listed = _listed()
    modules = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "lance_spark").rglob("*.py")
        if path.name != "__init__.py" or path.parent.name == "lance_spark"
    }
    assert sorted(modules - listed) == [], "add these to the Layout table of internals.md"
    absent = sorted(name for name in listed if not (ROOT / name.rstrip("/")).exists())
    assert absent == [], "the Layout table names files that do not exist"
