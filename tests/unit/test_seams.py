"""Layers meet through public names: no module imports another module's ``_``-name or reads
one off an imported module (a ``_``-named module of the package, like ``_spark``, is itself
public to the package)."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "lance_spark"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _is_module(dotted: str) -> bool:
    relative = pathlib.Path(*dotted.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").exists() or (PACKAGE / relative).is_dir()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str) -> list[str]:
    """``line: name`` of each other module's private name ``source`` imports or reads."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> a lance_spark module
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lance_spark"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _is_module(dotted):
                    modules[alias.asname or alias.name] = dotted
                elif _private(alias.name):
                    found.append(f"{node.lineno}: {dotted}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("lance_spark") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
        ):
            found.append(f"{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_other_modules_private_names(path: pathlib.Path) -> None:
    uses = private_uses(path.read_text())
    assert not uses, f"{path.relative_to(PACKAGE.parent)}: " + "; ".join(uses)


def test_the_check_sees_an_import_and_an_attribute() -> None:
    source = (
        "from lance_spark.source.writer import _secret\n"
        "from lance_spark.source import staging\n"
        "def f():\n    return staging._fs\n"
    )
    assert private_uses(source) == [
        "1: lance_spark.source.writer._secret",
        "4: lance_spark.source.staging._fs",
    ]
