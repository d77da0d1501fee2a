"""Write what the option registry (lance_spark/source/options.py, OPTIONS) makes: the table of
docs/reference/options.md and the JVM companion's options.properties.

    .venv/bin/python scripts/generate_options.py

tests/unit/test_options_registry.py fails when either differs from the registry.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lance_spark.source import options  # noqa: E402

REFERENCE = ROOT / "docs" / "reference" / "options.md"
RESOURCE = ROOT / "jvm" / "resources" / "lance_spark" / "companion" / "options.properties"
BEGIN = "<!-- options: generated from lance_spark/source/options.py by scripts/generate_options.py -->\n"
END = "<!-- end of options -->\n"


def with_table(page: str) -> str:
    """``page`` with the text between BEGIN and END replaced by the registry's table."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + BEGIN + options.reference_table() + END + tail


def main() -> None:
    REFERENCE.write_text(with_table(REFERENCE.read_text()))
    RESOURCE.parent.mkdir(parents=True, exist_ok=True)
    RESOURCE.write_text(options.companion_resource())
    print(f"wrote {REFERENCE.relative_to(ROOT)} and {RESOURCE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
