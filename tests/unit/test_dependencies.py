"""pyproject.toml declares dependencies as a library does (ranges with upper bounds), and each
range holds the version the tests run on (constraints.txt, which make venv installs)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def test_dependency_ranges_hold_the_versions_the_tests_run_on() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = requirement.name.lower()
        assert requirement.specifier, f"{name}: a range, not any version"
        assert any(s.operator == "<" for s in requirement.specifier), f"{name}: an upper bound"
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} outside {spec}"
        # make venv installed exactly the pinned version
        assert importlib.metadata.version(name) == pins[name], name
    assert project["requires-python"] == ">=3.11"
    assert project["license"] == "Apache-2.0"
