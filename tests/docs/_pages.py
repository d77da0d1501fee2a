"""The docs site's pages in the order of its menu (mkdocs.yml's nav), and their code blocks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# The examples write under this folder; the tests put their own temporary folder in its place.
EXAMPLE_ROOT = "/tmp/lance_spark_readme"


def _walk(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _walk(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _walk(value)


def nav_pages() -> list[Path]:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return [DOCS / page for page in _walk(config["nav"])]


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks (a block fenced ```py is an illustration, not run)."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
