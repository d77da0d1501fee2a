"""Opening Lance datasets and resolving time travel to one pinned version.

The driver resolves ``version`` / ``timestampAsOf`` / ``tag`` to a version number once; tasks
then open exactly that number, so every task of a job reads the same snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import lance

from lance_spark._options import TimeTravel
from lance_spark.errors import TableNotFoundError, VersionNotFoundError


def table_exists(uri: str, *, storage: Mapping[str, str]) -> bool:
    """True when a Lance table (at least one committed version) exists at ``uri``."""
    try:
        open_latest(uri, storage=storage)
    except TableNotFoundError:
        return False
    return True


def open_latest(uri: str, *, storage: Mapping[str, str]) -> lance.LanceDataset:
    """Open the latest version, or raise :class:`TableNotFoundError` naming ``uri``."""
    try:
        return lance.dataset(uri, storage_options=dict(storage) or None)
    except ValueError as err:
        # pylance has no error class for a missing table: it raises ValueError("Dataset at
        # path ... was not found"); any other ValueError is not ours to reinterpret.
        if "not found" in str(err).lower():
            raise TableNotFoundError(f"no Lance table at {uri!r}") from None
        raise


def open_version(uri: str, version: int, *, storage: Mapping[str, str]) -> lance.LanceDataset:
    """Open a version that the driver has already resolved (used inside tasks)."""
    return lance.dataset(uri, version=version, storage_options=dict(storage) or None)


def open_resolved(
    uri: str, travel: TimeTravel, *, storage: Mapping[str, str]
) -> lance.LanceDataset:
    """Open the version ``travel`` designates (the latest when it designates none)."""
    ds = open_latest(uri, storage=storage)
    version = resolve_version(ds, travel, uri=uri)
    return ds if version == ds.version else open_version(uri, version, storage=storage)


def resolve_version(ds: lance.LanceDataset, travel: TimeTravel, *, uri: str) -> int:
    """The version number ``travel`` designates in the table opened as ``ds`` (latest)."""
    if travel.version is not None:
        versions = _version_numbers(ds)
        if travel.version not in versions:
            raise VersionNotFoundError(
                f"version {travel.version} of the Lance table at {uri!r} does not exist; "
                f"existing versions: {_ranges(versions)}"
            )
        return travel.version
    if travel.tag is not None:
        tags = ds.tags.list()
        if travel.tag not in tags:
            known = ", ".join(sorted(tags)) or "none"
            raise VersionNotFoundError(
                f"tag {travel.tag!r} does not exist in the Lance table at {uri!r}; tags: {known}"
            )
        return int(tags[travel.tag]["version"])
    if travel.timestamp is not None:
        return _version_at(ds, travel.timestamp, uri=uri)
    return int(ds.version)


def version_timestamps(ds: lance.LanceDataset) -> list[tuple[int, datetime]]:
    """(version, commit time in UTC) for every version, oldest first."""
    out: list[tuple[int, datetime]] = []
    for info in ds.versions():
        stamp = info["timestamp"]
        if not isinstance(stamp, datetime):
            raise TypeError(f"unexpected version timestamp {stamp!r}")
        # pylance returns naive datetimes in the machine's local zone; astimezone() on a
        # naive datetime interprets it as local time, which is what we need.
        out.append((int(info["version"]), stamp.astimezone(UTC)))
    return out


def _version_at(ds: lance.LanceDataset, when: datetime, *, uri: str) -> int:
    stamps = version_timestamps(ds)
    eligible = [version for version, stamp in stamps if stamp <= when]
    if not eligible:
        first = stamps[0][1].isoformat() if stamps else "never"
        raise VersionNotFoundError(
            f"timestampAsOf {when.isoformat()} is before the first version of the Lance "
            f"table at {uri!r} (committed at {first})"
        )
    return max(eligible)


def _version_numbers(ds: lance.LanceDataset) -> list[int]:
    return sorted(int(info["version"]) for info in ds.versions())


def _ranges(numbers: Sequence[int]) -> str:
    """Compact listing: [1, 2, 3, 7] -> '1-3, 7'."""
    if not numbers:
        return "none"
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(parts)
