"""The docs site builds strictly (no broken link, anchor or API reference), says what the code
holds (every option), and the README's quick start is the docs' quick start. No JVM."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from lance_spark.source import options
from tests.docs._pages import DOCS, REPO, nav_pages, python_blocks

MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]


def _site_copy(dest: Path) -> Path:
    """What the site is built from: mkdocs.yml, docs/, the package (API reference) and the
    root files the pages include (CHANGELOG.md, CONTRIBUTING.md, BENCHMARKS.md)."""
    shutil.copytree(DOCS, dest / "docs")
    shutil.copytree(REPO / "lance_spark", dest / "lance_spark")
    for name in ("mkdocs.yml", "CHANGELOG.md", "CONTRIBUTING.md", "BENCHMARKS.md"):
        shutil.copy(REPO / name, dest / name)
    return dest


def _build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MKDOCS, "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_site_builds_strictly_with_every_page_and_the_api_reference(tmp_path: Path) -> None:
    done = _build(_site_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    for page in nav_pages():
        rel = page.relative_to(DOCS).with_suffix("")
        built = site / ("index.html" if rel.name == "index" else f"{rel}/index.html")
        assert built.is_file(), built
    api = (site / "reference" / "api" / "index.html").read_text()
    # the reference is generated from the docstrings: the public names, their methods
    for name in ("register", "configure", "spark_conf", "companion_enabled", "LanceTable.merge",
                 "LanceTable.vacuum", "LanceMergeBuilder.execute", "LanceSparkError"):  # fmt: skip
        assert f'id="lance_spark.{name}"' in api or f'id="lance_spark.errors.{name}"' in api, name
    # every .md under docs/ is in the menu (mkdocs warns otherwise, but say it plainly)
    listed = {p.resolve() for p in nav_pages()}
    assert {p.resolve() for p in DOCS.rglob("*.md")} == listed


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    root = _site_copy(tmp_path / "link")
    page = root / "docs" / "reading.md"
    page.write_text(page.read_text() + "\nSee [nowhere](writing.md#no-such-section).\n")
    done = _build(root)
    assert done.returncode != 0
    assert "no-such-section" in done.stdout + done.stderr

    root = _site_copy(tmp_path / "ref")
    api = root / "docs" / "reference" / "api.md"
    api.write_text(api.read_text() + "\n::: lance_spark.no_such_function\n")
    done = _build(root)
    assert done.returncode != 0
    assert "no_such_function" in done.stdout + done.stderr


def _documented_options() -> set[str]:
    text = (DOCS / "reference" / "options.md").read_text()
    keys: set[str] = set()
    for row in re.findall(r"^\| (`[^|]*`) \|", text, flags=re.M):
        keys.update(k.lower() for k in re.findall(r"`([^`]+)`", row))
    return keys


def test_the_options_reference_lists_every_option_the_source_takes() -> None:
    documented = _documented_options()
    taken = (
        options.READ_KEYS
        | options.WRITE_KEYS
        | options.STREAM_READ_KEYS
        | (options.STREAM_WRITE_KEYS - {options.CHECKPOINT_LOCATION})  # Spark's, not ours
    )
    assert taken - documented == set(), "options missing from docs/reference/options.md"
    patterns = {"storage.<key>", *(f"<col>{suffix}" for suffix, _doc in options.COLUMN_OPTIONS)}
    assert documented - taken - patterns - set(options.ALIASES) == set(), (
        "documented options the source does not take"
    )
    assert set(options.ALIASES) <= documented, "aliases missing from the options reference"


def test_the_readme_quick_start_is_the_docs_quick_start() -> None:
    readme = python_blocks(REPO / "README.md")
    assert readme, "the README has a quick start"
    assert readme[0] == python_blocks(DOCS / "quickstart.md")[0]
