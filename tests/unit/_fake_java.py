"""Stand-ins for a JDK and for a machine's tools, to check the build backend and
scripts/ensure-java.sh without touching the machine's Java."""

from __future__ import annotations

import shutil
from pathlib import Path


def fake_jdk(root: Path, version: str, tools: tuple[str, ...] = ("java", "javac", "jar")) -> Path:
    """A bin/ whose java and javac print ``version`` the way OpenJDK does."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for tool in tools:
        script = bin_dir / tool
        if tool == "java":
            script.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-04-15' >&2\n")
        else:
            script.write_text(f"#!/bin/sh\necho '{tool} {version}'\n")
        script.chmod(0o755)
    return bin_dir


def shell_tools(root: Path) -> Path:
    """A bin/ with only what scripts/ensure-java.sh needs besides Java (no apt-get either)."""
    bin_dir = root / "tools"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "awk", "id"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    return bin_dir
