"""The Spark settings that make Python data sources (``lance`` among them) faster, with the
trade-off of each: what :func:`lance_spark.configure` adds to a session builder, what
``register`` reports as missing, and what ``conf/spark-defaults.conf`` holds.

Figures are from ``make bench`` (BENCHMARKS.md); none of these settings changes a result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

UNIX_SOCKET_CONF = "spark.python.unix.domain.socket.enabled"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
MAX_BYTES_PER_BATCH_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
# Int.MaxValue: the one value for which Spark skips its per-row batch size check.
NO_BYTE_LIMIT = str(2**31 - 1)
ARROW_UNCHECKED_FLAGS = (
    "-Darrow.enable_unsafe_memory_access=true",
    "-Darrow.enable_null_check_for_get=false",
)


@dataclass(frozen=True)
class Setting:
    """One recommended setting. ``flags``: JVM options appended to the setting's value
    (``value`` is then their join)."""

    key: str
    value: str
    summary: str
    why: str
    trade_off: str
    flags: tuple[str, ...] = ()

    def is_set(self, current: str | None) -> bool:
        """Whether ``current`` (the session's value, None when unset) has it: JVM options
        that include the flags, or any value the user chose (a choice, not an omission)."""
        if self.flags:
            present = (current or "").split()
            return all(flag in present for flag in self.flags)
        return current is not None

    def merged(self, current: str | None) -> str:
        """The value to set: JVM options are appended to the user's; a plain value the user
        chose is kept (``configure`` does not override a setting already on the builder)."""
        if self.flags:
            present = (current or "").split()
            return " ".join([*present, *(f for f in self.flags if f not in present)])
        return self.value if current is None else current


_ARROW_WHY = (
    "Spark converts every Arrow batch a Python source returns into rows, element by element; "
    "Arrow Java's per-access bounds and null checks are about a fifth of that JVM time "
    "(a full scan's JVM CPU 2.8 s -> 2.2 s on 5M rows)"
)
_ARROW_TRADE_OFF = (
    "a malformed Arrow buffer reads out of bounds instead of raising an exception; applies to "
    "every Arrow path of the JVM (pandas UDFs, mapInArrow, toPandas)"
)


def _arrow_checks_off(key: str, where: str) -> Setting:
    return Setting(
        key=key,
        value=" ".join(ARROW_UNCHECKED_FLAGS),
        summary=f"no Arrow Java checks per value read ({where})",
        why=_ARROW_WHY,
        trade_off=_ARROW_TRADE_OFF,
        flags=ARROW_UNCHECKED_FLAGS,
    )


RECOMMENDED: tuple[Setting, ...] = (
    Setting(
        key=UNIX_SOCKET_CONF,
        value="true",
        summary="~35 ms less per Python round trip",
        why=(
            "Python workers talk to the JVM over a Unix domain socket instead of loopback TCP: "
            "about 35 ms less per Python round trip, most of the fixed cost of a small query"
        ),
        trade_off="none on Linux and macOS; needs a writable local temporary directory",
    ),
    _arrow_checks_off(DRIVER_JAVA_OPTIONS, "driver"),
    _arrow_checks_off(EXECUTOR_JAVA_OPTIONS, "executors"),
    Setting(
        key=MAX_BYTES_PER_BATCH_CONF,
        value=NO_BYTE_LIMIT,
        summary="no batch size check per row sent to Python",
        why=(
            "Spark 4.3 measures the Arrow batch it sends to Python after every row unless this "
            "is Int.MaxValue: about two thirds of the JVM time of feeding a Python writer or "
            "mapInArrow. Lance writes size their batches without it (the JVM companion, per "
            "task); this also speeds up MERGE / UPDATE / DELETE / addColumns jobs and your own "
            "Arrow UDFs"
        ),
        trade_off=(
            "batches sent to Python are bounded by spark.sql.execution.arrow.maxRecordsPerBatch "
            "rows (10,000) only, not by 64 MiB: lower that for rows of large values (images)"
        ),
    ),
)


def builder_settings(current: Mapping[str, str]) -> dict[str, str]:
    """The recommended settings merged into a builder's ``current`` options."""
    return {s.key: s.merged(current.get(s.key)) for s in RECOMMENDED}


def missing(get: Callable[[str], str | None]) -> list[Setting]:
    """The recommended settings a session lacks; ``get(key)`` is its value (None: unset)."""
    return [s for s in RECOMMENDED if not s.is_set(get(s.key))]


def describe(settings: list[Setting]) -> str:
    """One line per setting: key = value (what it saves)."""
    return "\n".join(f"  {s.key} = {s.value} ({s.summary})" for s in settings)
