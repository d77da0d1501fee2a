"""The package's one import direction, checked on the source (imports inside functions count).

errors, _version  <-  _spark  <-  source.*  <-  table.*  <-  sql.*  <-  _register  <-  __init__
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "lance_spark"

LAYERS = {
    "lance_spark.errors": 0,
    "lance_spark._version": 0,
    "lance_spark._quiet": 0,
    "lance_spark._settings": 0,
    "lance_spark_daemon": 0,  # the top-level daemon module beside the package: imports none of it
    "lance_spark._spark": 1,
    "lance_spark.source": 2,
    "lance_spark.table": 3,
    "lance_spark.sql": 4,
    "lance_spark._register": 5,
    "lance_spark": 6,
    "lance_spark.doctor": 6,  # python -m lance_spark doctor: uses register and configure
    "lance_spark.__main__": 7,
}


def _module_name(path: pathlib.Path) -> str:
    parts = ("lance_spark", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    """The layer of ``module``: its longest prefix in LAYERS."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:end]))
        if layer is not None:
            return layer
    raise KeyError(module)


def _is_module(dotted: str) -> bool:
    relative = pathlib.Path(*dotted.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").exists() or (PACKAGE / relative).is_dir()


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, imported lance_spark module) for every import in ``path``, at any depth."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("lance_spark")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lance_spark"):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports"
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.append((node.lineno, candidate if _is_module(candidate) else node.module))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    for path in MODULES:
        _layer(_module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_no_upward_import(path: pathlib.Path) -> None:
    here = _module_name(path)
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {here} (layer {_layer(here)}) imports "
        f"{target} (layer {_layer(target)})"
        for line, target in _imports(path)
        if _layer(target) > _layer(here)
    ]
    assert not upward, "\n".join(upward)


def test_the_checker_sees_an_upward_import_inside_a_function(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from lance_spark.sql import front\n")
    assert _imports(module) == [(2, "lance_spark.sql.front")]
    assert _layer("lance_spark.sql.front") > _layer("lance_spark.source.reader")
