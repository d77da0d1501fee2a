"""Opening Lance datasets and resolving time travel to one pinned version.

The driver resolves ``version`` / ``timestampAsOf`` / ``tag`` to a version number once; tasks
then open exactly that number, so every task of a job reads the same snapshot.

This is also the one place where pylance's errors for a damaged table (a manifest or a data
file that cannot be read) become :class:`CorruptTableError` naming the table and the file.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import lance

from lance_spark.errors import (
    BranchNotFoundError,
    CorruptTableError,
    LanceSparkError,
    TableNotFoundError,
    VersionNotFoundError,
)
from lance_spark.source import lance_errors, staging
from lance_spark.source.options import MAIN_BRANCH, TimeTravel


def table_exists(uri: str, *, storage: Mapping[str, str]) -> bool:
    """True when a Lance table (at least one committed version) exists at ``uri``."""
    return latest_or_none(uri, storage=storage) is not None


def latest_or_none(uri: str, *, storage: Mapping[str, str]) -> lance.LanceDataset | None:
    """The latest version, or None when there is no table at ``uri``."""
    try:
        return open_latest(uri, storage=storage)
    except TableNotFoundError:
        return None


def open_latest(uri: str, *, storage: Mapping[str, str]) -> lance.LanceDataset:
    """Open the latest version, or raise :class:`TableNotFoundError` naming ``uri``
    (:class:`CorruptTableError` when its manifest is damaged)."""
    with _reading_manifest(uri, None, storage):
        try:
            return lance.dataset(uri, storage_options=dict(storage) or None)
        except ValueError as err:
            # pylance has no error class for a missing table: it raises ValueError("Dataset
            # at path ... was not found"); any other ValueError is not ours to reinterpret.
            if lance_errors.is_not_found(err):
                raise TableNotFoundError(f"no Lance table at {uri!r}") from None
            raise


def open_version(uri: str, version: int, *, storage: Mapping[str, str]) -> lance.LanceDataset:
    """Open a version that the driver has already resolved (used inside tasks)."""
    with _reading_manifest(uri, version, storage):
        return lance.dataset(uri, version=version, storage_options=dict(storage) or None)


def open_resolved(
    uri: str, travel: TimeTravel, *, storage: Mapping[str, str], branch: str | None = None
) -> lance.LanceDataset:
    """The version ``travel`` designates (the latest when it designates none), opened; ``uri``
    is the location of ``branch`` (None: the main branch), see :func:`branch_location`.

    A version number is opened directly (one manifest, however many versions the table has);
    the versions are listed only to word the error when it does not exist.
    """
    if travel.version is not None:
        try:
            return open_version(uri, travel.version, storage=storage)
        except ValueError as err:
            if not lance_errors.is_not_found(err):
                raise
        # Missing: the error lists the versions there are (or says there is no table).
        log = VersionLog(open_latest(uri, storage=storage), uri=uri)
        raise log.version_not_found(travel.version)
    ds = open_latest(uri, storage=storage)
    version = resolve_version(ds, travel, uri=uri, branch=branch)
    return ds if version == ds.version else open_version(uri, version, storage=storage)


# --- branches ---------------------------------------------------------------------------------

# pylance keeps branch <b> of the table at <uri> as a dataset of its own at <uri>/tree/<b>: its
# versions continue from the version it was created from; unchanged data files stay the
# parent's. Opened there, every read, write and commit is the branch's.
BRANCH_FOLDER = "tree"


def branch_uri(uri: str, branch: str | None) -> str:
    """Where ``branch`` of the table at ``uri`` is stored (None or "main": ``uri``), unchecked."""
    if branch is None or branch == MAIN_BRANCH:
        return uri
    return f"{uri.rstrip('/')}/{BRANCH_FOLDER}/{branch}"


def branch_location(uri: str, branch: str | None, *, storage: Mapping[str, str]) -> str:
    """The location of ``branch`` of the table at ``uri`` (None or "main": ``uri`` itself);
    :class:`BranchNotFoundError` listing the branches when the table has no such branch.

    Example::

        branch_location("/data/pets.lance", "exp", storage={})
        # '/data/pets.lance/tree/exp'
    """
    if branch is None or branch == MAIN_BRANCH:
        return uri
    check_branch(open_latest(uri, storage=storage), branch, uri=uri)
    return branch_uri(uri, branch)


def check_branch(ds: lance.LanceDataset, branch: str, *, uri: str) -> None:
    """:class:`BranchNotFoundError` unless ``branch`` is a branch of the table opened as ``ds``
    (at ``uri``, its main branch)."""
    known = ds.branches.list()
    if branch != MAIN_BRANCH and branch not in known:
        raise branch_not_found(branch, known, uri=uri)


def branch_not_found(branch: str, known: Iterable[str], *, uri: str) -> BranchNotFoundError:
    """The error for a ``branch`` the table at ``uri`` lacks; it lists the ``known`` ones."""
    return BranchNotFoundError(
        f"branch {branch!r} does not exist in the Lance table at {uri!r}; branches: "
        f"{', '.join([MAIN_BRANCH, *sorted(known)])}"
    )


def resolve_version(
    ds: lance.LanceDataset,
    travel: TimeTravel,
    *,
    uri: str,
    branch: str | None = None,
    log: VersionLog | None = None,
) -> int:
    """The version number ``travel`` designates in the table opened as ``ds`` (latest), which
    is ``branch`` of its table (None: the main branch). A tag names a version of one branch:
    a tag of another branch is a :class:`VersionNotFoundError` saying which.

    It reads at most a logarithmic number of manifests (``log``, when given, is reused):
    a version is checked by opening it, a timestamp found by binary search.
    """
    log = log or VersionLog(ds, uri=uri)
    if travel.version is not None:
        log.open(travel.version)  # VersionNotFoundError when it does not exist
        return travel.version
    if travel.tag is not None:
        tags = ds.tags.list()
        if travel.tag not in tags:
            known = ", ".join(sorted(tags)) or "none"
            raise VersionNotFoundError(
                f"tag {travel.tag!r} does not exist in the Lance table at {uri!r}; tags: {known}"
            )
        info = tags[travel.tag]
        tagged = info.get("branch") or MAIN_BRANCH
        if tagged != (branch or MAIN_BRANCH):
            raise VersionNotFoundError(
                f"tag {travel.tag!r} is version {info['version']} of branch {tagged!r}, not "
                f"of branch {branch or MAIN_BRANCH!r} of the Lance table at {uri!r}; read it "
                f"with .option('branch', {tagged!r})"
            )
        return int(info["version"])
    if travel.timestamp is not None:
        found = log.last_at_or_before(travel.timestamp)
        if found is None:
            numbers = log.numbers()
            first = log.timestamp(numbers[0]).isoformat() if numbers else "never"
            raise VersionNotFoundError(
                f"timestampAsOf {travel.timestamp.isoformat()} is before the first version of "
                f"the Lance table at {uri!r} (committed at {first})"
            )
        return found
    return int(ds.version)


class VersionLog:
    """The versions of the table (or branch) opened as ``latest``, read only as far as needed.

    Listing the version numbers reads no manifest (pylance's ``version_refs``: the names in
    ``_versions/``); a version's commit time reads that version's manifest, once. Finding the
    version of a timestamp is a binary search over the numbers, so it reads about log2(n)
    manifests where ``ds.versions()`` reads all n (and each holds the table's fragment list:
    160 MB for 2,000 one-row appends). Lance's own ``asof`` lookup reads them all too.

    The search takes commit times to grow with the version number, as they do when the
    writers' clocks agree (Delta makes the same assumption and adjusts skewed commit times).

    Example::

        log = VersionLog(open_latest(uri, storage={}), uri=uri)
        log.last_at_or_before(datetime(2026, 1, 1, tzinfo=UTC))  # e.g. 41
    """

    def __init__(self, latest: lance.LanceDataset, *, uri: str) -> None:
        self.latest = latest
        self.uri = uri
        self._numbers: list[int] | None = None
        self._stamps: dict[int, datetime] = {}
        # The last few versions opened (a binary search or a feed revisits its neighbours);
        # a feed over thousands of versions must not keep every manifest in memory.
        self._opened: OrderedDict[int, lance.LanceDataset] = OrderedDict()

    def numbers(self) -> list[int]:
        """Every version number, oldest first (no manifest is read)."""
        if self._numbers is None:
            with _reading_manifest(self.uri, None, {}, listing=False):
                refs = self.latest.version_refs()
            self._numbers = sorted(int(r["version"]) for r in refs)
        return self._numbers

    def open(self, version: int) -> lance.LanceDataset:
        """``version`` opened (its manifest read once); :class:`VersionNotFoundError` listing
        the versions there are when it does not exist."""
        if version == int(self.latest.version):
            return self.latest
        if version in self._opened:
            self._opened.move_to_end(version)
            return self._opened[version]
        with _reading_manifest(self.uri, version, {}):
            try:
                opened = self.latest.checkout_version(version)
            except (OSError, ValueError) as err:
                if not lance_errors.is_not_found(err):
                    raise
                raise self.version_not_found(version) from None
        self._opened[version] = opened
        if len(self._opened) > _OPENED_KEPT:
            self._opened.popitem(last=False)
        return opened

    def version_not_found(self, version: int) -> VersionNotFoundError:
        return VersionNotFoundError(
            f"version {version} of the Lance table at {self.uri!r} does not exist; "
            f"existing versions: {_ranges(self.numbers())}"
        )

    def timestamp(self, version: int) -> datetime:
        """When ``version`` was committed, in UTC (reads its manifest, once)."""
        if version not in self._stamps:
            self._stamps[version] = _utc(self.open(version).get_version()["timestamp"])
        return self._stamps[version]

    def exists(self, version: int) -> bool:
        """Whether ``version`` exists (opens it; lists the versions only when it does not)."""
        try:
            self.open(version)
        except VersionNotFoundError:
            return False
        return True

    def newest(self, count: int) -> list[int]:
        """The newest ``count`` version numbers, newest first: the numbers below the latest,
        each opened, or the listing when one of them is missing (removed by cleanup)."""
        latest = int(self.latest.version)
        guess = list(range(latest, max(0, latest - count), -1))
        if self._numbers is None and all(self.exists(v) for v in guess):
            return guess
        return list(reversed(self.numbers()[-count:]))

    def last_at_or_before(self, when: datetime) -> int | None:
        """The latest version committed at or before ``when`` (None: all are later)."""
        numbers, low = self._bisect(when, before=True)
        return numbers[low - 1] if low else None

    def first_at_or_after(self, when: datetime) -> int | None:
        """The first version committed at or after ``when`` (None: none was)."""
        numbers, low = self._bisect(when, before=False)
        return numbers[low] if low < len(numbers) else None

    def _bisect(self, when: datetime, *, before: bool) -> tuple[Sequence[int], int]:
        """(the numbers searched, the index of the first version committed after ``when``
        (``before``) or at or after it). The answer is always a version the search opened.

        The search first takes the versions to be numbered 1 .. latest, which needs no
        listing at all; a missing one (removed by cleanup, or a branch that starts at a later
        number) sends it to the listing, once.
        """
        numbers: Sequence[int] = (
            self._numbers if self._numbers is not None else range(1, int(self.latest.version) + 1)
        )
        low, high = 0, len(numbers)
        while low < high:
            mid = (low + high) // 2
            try:
                stamp = self.timestamp(numbers[mid])
            except VersionNotFoundError:
                if isinstance(numbers, list):
                    raise  # listed, yet gone: removed while searching
                return self._bisect(when, before=before)  # numbers() is listed now
            if stamp <= when if before else stamp < when:
                low = mid + 1
            else:
                high = mid
        return numbers, low


_OPENED_KEPT = 4


def _utc(stamp: object) -> datetime:
    if not isinstance(stamp, datetime):
        raise LanceSparkError(
            f"pylance gave the version timestamp {stamp!r}, not a datetime: this pylance "
            "release is not one lance_spark supports"
        )
    # pylance returns naive datetimes in the machine's local zone; astimezone() on a
    # naive datetime interprets it as local time, which is what we need.
    return stamp.astimezone(UTC)


def version_timestamps(ds: lance.LanceDataset) -> list[tuple[int, datetime]]:
    """(version, commit time in UTC) for every version, oldest first. It reads every
    manifest: :class:`VersionLog` reads only the ones it needs."""
    return [
        (int(info["version"]), _utc(info["timestamp"])) for info in versions(ds, uri=str(ds.uri))
    ]


def versions(ds: lance.LanceDataset, *, uri: str) -> list[Any]:
    """``ds.versions()`` (it reads every manifest): a damaged one is a CorruptTableError."""
    with _reading_manifest(uri, None, {}, listing=False):
        return list(ds.versions())


# Lance operations that rewrite fragments without changing any row (compaction): change
# feeds and streams skip their versions.
ROW_PRESERVING_OPERATIONS = frozenset({"Rewrite"})
# The transaction property naming the Lance operation a commit stands for, when it is
# committed as another (see operation()).
PROP_READ_AS = "lance_spark.readAs"


def first_version_since(ds: lance.LanceDataset, when: datetime) -> int | None:
    """The first version committed at or after ``when`` (None: none was)."""
    return VersionLog(ds, uri=str(ds.uri)).first_at_or_after(when)


def operation(ds: lance.LanceDataset, version: int) -> str:
    """The name of the Lance operation that committed ``version`` (``Append``, ``Update``,
    ``Rewrite``...; ``unknown`` when its transaction cannot be read). A commit the connector
    made as another operation than the one it stands for (an idempotent overwrite is an
    ``Update``) reads as the one it stands for."""
    tx = transaction(ds, version)
    if tx is None:
        return "unknown"
    read_as = (tx.transaction_properties or {}).get(PROP_READ_AS)
    return read_as or type(tx.operation).__name__


def transaction(ds: lance.LanceDataset, version: int) -> lance.Transaction | None:
    """The transaction that committed ``version`` (None: none was kept, or it cannot be
    read)."""
    try:
        tx: lance.Transaction | None = ds.read_transaction(version)
    # TypeError: pylance 14.0.2 cannot build the Python object of a compaction that rewrote
    # an index (RewrittenIndex.__init__ misses arguments); such a version reads as unknown.
    except (OSError, ValueError, RuntimeError, TypeError):
        return None
    return tx


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


# --- damaged tables ---------------------------------------------------------------------------

_U64_MAX = 2**64 - 1
_VERSIONS_DIR = "_versions"


@contextmanager
def _reading_manifest(
    uri: str, version: int | None, storage: Mapping[str, str], *, listing: bool = True
) -> Iterator[None]:
    try:
        yield
    # Only pylance's damaged-file errors are translated; everything else is re-raised as is.
    except BaseException as err:
        reason = lance_errors.damage(err)
        if reason is None:
            raise
        named = lance_errors.corrupt_file(reason)
        path = None
        if named:  # pylance names it as an object-store path: rebuild it from the table's
            name = named.rsplit("/", 1)[-1]
            path = f"{uri.rstrip('/')}/{_VERSIONS_DIR}/{name}"
            version = _manifest_version(name)
        raise _corrupt_manifest(
            uri, version, reason, _manifests(uri, storage) if listing else {}, path=path
        ) from err


def _manifests(uri: str, storage: Mapping[str, str]) -> dict[int, str]:
    """version -> manifest file, from a listing of ``_versions/`` (either naming scheme)."""
    directory = f"{uri.rstrip('/')}/{_VERSIONS_DIR}"
    try:
        fs, root = staging.table_fs(directory, storage)
        names = [str(p).rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    except OSError:
        return {}
    found: dict[int, str] = {}
    for name in names:
        version = _manifest_version(name)
        if version is not None:
            found[version] = f"{directory}/{name}"
    return found


def _manifest_version(name: str) -> int | None:
    stem, _, ext = name.partition(".")
    if ext != "manifest" or not stem.isdigit():
        return None
    # V2 names are u64::MAX - version, zero-padded to 20 digits (newest sorts first).
    return _U64_MAX - int(stem) if len(stem) == 20 else int(stem)


def _corrupt_manifest(
    uri: str, version: int | None, reason: str, found: Mapping[int, str], *, path: str | None
) -> CorruptTableError:
    if version is None and path is None and found:
        version = max(found)
    file = path or (found.get(version) if version is not None else None)
    where = file or f"{uri.rstrip('/')}/{_VERSIONS_DIR}/"
    what = "a manifest" if version is None else f"the manifest of version {version}"
    readable = sorted(v for v in found if v != version)
    if version is not None and readable and version == max(found):
        earlier = max(v for v in readable if v < version)
        advice = (
            f"Earlier versions can still be read, e.g. .option('versionAsOf', {earlier}). To "
            f"make version {earlier} the latest again, move that manifest out of "
            f"{_VERSIONS_DIR}/ (keep a copy); LanceTable.restoreToVersion(n) can then go "
            "back further."
        )
    elif readable:
        advice = (
            "Other versions can still be read with .option('versionAsOf', n) "
            f"(existing manifests: {_ranges(readable)}) and made the latest with "
            "LanceTable.restoreToVersion(n)."
        )
    else:
        advice = (
            "Other versions may still be read with .option('versionAsOf', n) and made the "
            "latest with LanceTable.restoreToVersion(n)."
        )
    return CorruptTableError(
        f"the Lance table at {uri!r} is damaged: {what} ({where}) cannot be read: {reason}. "
        + advice,
        table_uri=uri,
        path=file,
    )


@contextmanager
def reading_data(
    uri: str,
    ds: lance.LanceDataset,
    fragment_ids: Sequence[int],
    *,
    storage: Mapping[str, str],
) -> Iterator[None]:
    """Around a scan of ``fragment_ids`` of ``ds`` (in a task): a damaged or missing data
    file becomes a :class:`CorruptTableError` naming the table, the file and its fragment.

    Example::

        with reading_data(uri, ds, [0, 3], storage=storage):
            yield from scanner.to_batches()
    """
    try:
        yield
    except CorruptTableError:
        raise
    except (OSError, ValueError) as err:  # pyarrow.ArrowInvalid is a ValueError
        reason = lance_errors.damage(err)
        if reason is None and lance_errors.missing_file(str(err)):
            reason = lance_errors.without_location(str(err))
        if reason is None:
            raise
        found = _damaged_data_file(uri, ds, fragment_ids, reason, storage)
        if found is None:
            raise
        fragment_id, files = found
        named = files[0] if len(files) == 1 else "one of " + ", ".join(files)
        raise CorruptTableError(
            f"the Lance table at {uri!r} is damaged: data file {named} of fragment "
            f"{fragment_id} in version {int(ds.version)} cannot be read: {reason}. Versions "
            "written before that fragment can still be read with .option('versionAsOf', n) "
            "and made the latest again with LanceTable.restoreToVersion(n); the rows of that "
            "file are not readable in any version that contains it.",
            table_uri=uri,
            path=files[0] if len(files) == 1 else None,
        ) from err


def _damaged_data_file(
    uri: str,
    ds: lance.LanceDataset,
    fragment_ids: Sequence[int],
    reason: str,
    storage: Mapping[str, str],
) -> tuple[int, list[str]] | None:
    """(fragment id, [file]) of the file ``reason`` is about: by its name when pylance gives
    it, else the data file whose size differs from the one the manifest records or that does
    not end with Lance's magic number; all candidates when none does."""
    candidates: list[tuple[int, str, int | None]] = []
    for fragment_id in fragment_ids:
        fragment = ds.get_fragment(fragment_id)
        if fragment is None:
            continue
        meta = fragment.metadata
        for data in meta.files:
            size = getattr(data, "file_size_bytes", None)
            candidates.append((fragment_id, staging.data_file_uri(uri, data.path), size))
        if meta.deletion_file is not None:
            relative = meta.deletion_file.path(fragment_id)
            candidates.append((fragment_id, staging.table_file_uri(uri, relative), None))
    missing = lance_errors.missing_file(reason)
    if missing:
        name = missing.rsplit("/", 1)[-1]
        named = [(fid, file) for fid, file, _ in candidates if file.rsplit("/", 1)[-1] == name]
        return (named[0][0], [named[0][1]]) if named else None
    if not candidates:
        return None
    for fragment_id, file, size in candidates:
        if size and _tail(file, storage) != (size, _LANCE_MAGIC):
            return fragment_id, [file]
    return candidates[0][0], [file for _, file, _ in candidates]


_LANCE_MAGIC = b"LANC"  # the last bytes of every Lance data file


def _tail(file: str, storage: Mapping[str, str]) -> tuple[int, bytes] | None:
    """(size, last four bytes) of ``file``; None when it cannot be read."""
    try:
        fs, path = staging.table_fs(file, storage)
        size = int(fs.size(path))
        end = fs.cat_file(path, start=max(0, size - 4), end=size) if size else b""
        return size, bytes(end)
    except OSError:  # FileNotFoundError included
        return None
