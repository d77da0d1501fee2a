"""Sections of BENCHMARKS.md that another script writes: each between two HTML comments,
replaced in place when it is regenerated and kept when ``make bench`` rewrites the rest."""

from __future__ import annotations

SCALE = "scale"  # benchmarks/scale.py (make bench-scale)
ML_SCALE = "ml-scale"  # benchmarks/ml_scale.py (make bench, after benchmarks.run)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace(text: str, name: str, section: str) -> str:
    """``text`` with section ``name`` set to ``section`` (appended when absent)."""
    begin, end = _markers(name)
    block = f"{begin}\n{section.rstrip()}\n{end}\n"
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        return f"{text.rstrip()}\n\n{block}" if text.strip() else block
    return text[:start] + block + text[stop + len(end) :].lstrip("\n")


def extract(text: str, name: str) -> str | None:
    """The block of section ``name`` in ``text``, markers included (None: absent)."""
    begin, end = _markers(name)
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        return None
    return text[start : stop + len(end)] + "\n"


def keep(old: str, new: str) -> str:
    """``new`` (a regenerated report) with the sections ``old`` had and ``new`` lacks."""
    for name in (SCALE, ML_SCALE):
        block = extract(old, name)
        if block is not None and extract(new, name) is None:
            new = f"{new.rstrip()}\n\n{block}"
    return new
