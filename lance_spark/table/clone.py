"""Shallow clones of a Lance table (behind :meth:`LanceTable.shallowClone`).

A new target is Lance's own shallow clone. Replacing an existing target (Delta's
``replace=True``) commits the source's version as the target's next version, so the target's
history stays readable, as Delta's does:

1. the locations whose files the source's version uses (its own, and its bases when it is a
   clone itself) are registered as bases of the target, in a version of their own that
   changes no row (Lance's Overwrite cannot register bases on an existing table);
2. one ``Overwrite`` holds the source's fragments, each data file pointing at its base. A
   fragment with deleted rows is copied instead (its live rows, written into the target):
   Lance renumbers an Overwrite's fragments and refuses their deletion files, whose names
   carry the fragment's number. The target's indexes go, as with any overwrite; the
   source's are not carried (build them on the clone).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance import DatasetBasePath
from lance.fragment import FragmentMetadata, write_fragments

from lance_spark.errors import InvalidArgumentError, InvalidOptionError, TableNotFoundError
from lance_spark.source import commit as _commit
from lance_spark.source import staging
from lance_spark.source.dataset import resolve_version
from lance_spark.source.options import TimeTravel
from lance_spark.table.context import TableContext

OPERATION = "CLONE"
ADD_BASES_OPERATION = "ADD BASE PATHS"
BASE_NAME = "clone-source"
_BLOB_KEY = b"lance-encoding:blob"


def shallow_clone(
    table: TableContext, target: str, version: int | str | None, *, replace: bool
) -> None:
    """Clone ``table`` at ``version`` (a number, a tag, None: current) into ``target``.
    Without ``replace`` the target must hold no Lance table; with it, a table there gets
    the clone as its next version."""
    ds = table.open()
    reference: int | str
    if isinstance(version, str):
        # names the known tags
        number = resolve_version(ds, TimeTravel(tag=version), uri=table.uri, branch=table.branch)
        reference = version
    else:
        number = resolve_version(
            ds, TimeTravel(version=None if version is None else int(version)), uri=table.uri
        )
        reference = number
    try:
        existing = TableContext(table.spark, target, table.storage).open()
    except (TableNotFoundError, OSError):
        staging.check_new_location(target, storage=table.storage)
        ds.shallow_clone(target, reference, storage_options=dict(table.storage) or None)
        return
    if not replace:
        raise InvalidOptionError(
            f"cannot clone into {target!r}: a Lance table exists there "
            "(shallowClone(..., replace=True) replaces it)"
        )
    here = staging.location_key(table.uri, storage=table.storage)
    if staging.location_key(target, storage=table.storage) == here:
        raise InvalidArgumentError(
            f"LanceTable.shallowClone(): target={target!r} is the table itself; "
            "restoreToVersion() brings back one of its versions"
        )
    _replace(table, ds.checkout_version(number), target, existing)


def _replace(
    table: TableContext, source: lance.LanceDataset, target_uri: str, target: lance.LanceDataset
) -> None:
    storage = table.storage
    parameters = {
        "source": table.uri,
        "sourceVersion": str(source.version),
        "isShallow": "true",
        "isReplace": "true",
    }
    if source.data_storage_version != target.data_storage_version:
        raise InvalidArgumentError(
            f"LanceTable.shallowClone(): cannot replace the table at {target_uri!r}, which "
            f"stores Lance file format {target.data_storage_version}, with a clone of version "
            f"{source.version} of {table.uri!r}, stored in {source.data_storage_version}; "
            "clone into a new location, or drop the target first"
        )
    fragments = source.get_fragments()
    copied = [f for f in fragments if f.metadata.deletion_file is not None]
    if copied and any(_BLOB_KEY in (f.metadata or {}) for f in source.schema):
        raise InvalidArgumentError(
            f"LanceTable.shallowClone(): version {source.version} of {table.uri!r} has deleted "
            "rows in fragments with a blob column, which a replacing clone would copy; clone "
            "into a new location instead"
        )
    bases = _register_bases(
        source, table.uri, target_uri, target, storage=storage, app_id=table.app_id
    )
    carried: list[FragmentMetadata] = []
    for fragment in fragments:
        meta = fragment.metadata
        if meta.deletion_file is not None:
            continue
        for data_file in meta.files:
            data_file.base_id = bases.ids[data_file.base_id]
        # The target numbers its rows and versions its rows itself.
        meta.row_id_meta = None
        meta.created_at_version_meta = None
        meta.last_updated_at_version_meta = None
        carried.append(meta)
    written = _copy(source, copied, target_uri, storage=storage)
    operation = lance.LanceOperation.Overwrite(source.lance_schema, [*carried, *written])
    info = _commit.CommitInfo(
        OPERATION,
        parameters=parameters,
        metrics={
            "numCopiedFiles": sum(len(f.files) for f in written),
            "numCopiedRows": sum(f.physical_rows for f in written),
            "numReferencedFiles": sum(len(f.files) for f in carried),
            "numOutputRows": source.count_rows(),
        },
        app_id=table.app_id,
    )
    try:
        _commit.commit(
            target_uri, operation, read_version=bases.target.version, info=info, storage=storage
        )
    except BaseException:
        staging.delete_files(
            (staging.data_file_uri(target_uri, f.path) for m in written for f in m.files),
            storage=storage,
        )
        raise


@dataclass(frozen=True)
class _Bases:
    ids: Mapping[int | None, int | None]  # the source's base id (None: its own) -> the target's
    target: lance.LanceDataset  # the target, after the version registering any


def _register_bases(
    source: lance.LanceDataset,
    source_uri: str,
    target_uri: str,
    target: lance.LanceDataset,
    *,
    storage: Mapping[str, str],
    app_id: str,
) -> _Bases:
    """The target's base id for each location the source's data files are in; the ones the
    target does not know yet are added in one version."""
    wanted: dict[int | None, DatasetBasePath] = {
        None: DatasetBasePath(source_uri, name=BASE_NAME, is_dataset_root=True)
    }
    for base_id, base in source.base_paths().items():
        wanted[int(base_id)] = DatasetBasePath(
            str(base.path), name=base.name, is_dataset_root=base.is_dataset_root
        )

    def where(base: DatasetBasePath) -> tuple[str, bool]:
        return staging.location_key(str(base.path), storage=storage), bool(base.is_dataset_root)

    def known(ds: lance.LanceDataset) -> dict[tuple[str, bool], int]:
        return {where(b): int(i) for i, b in ds.base_paths().items()}

    own = staging.location_key(target_uri, storage=storage)
    registered = known(target)
    missing = [b for b in wanted.values() if where(b)[0] != own and where(b) not in registered]
    if missing:
        names = {b.name for b in target.base_paths().values()}
        for n, base in enumerate(missing):
            name = base.name or BASE_NAME
            if name in names:  # base names are unique in a table
                name = f"{name}-{target.version + 1}-{n}"
            names.add(name)
            missing[n] = DatasetBasePath(base.path, name=name, is_dataset_root=base.is_dataset_root)
        info = _commit.CommitInfo(
            ADD_BASES_OPERATION,
            parameters={"paths": ", ".join(b.path for b in missing)},
            app_id=app_id,
        )
        target.add_bases(missing, transaction_properties=info.properties())
        target = lance.dataset(target_uri, storage_options=dict(storage) or None)
        registered = known(target)
    ids = {n: None if where(b)[0] == own else registered[where(b)] for n, b in wanted.items()}
    return _Bases(ids, target)


def _copy(
    source: lance.LanceDataset,
    fragments: list[lance.LanceFragment],
    target_uri: str,
    *,
    storage: Mapping[str, str],
) -> list[FragmentMetadata]:
    """The live rows of ``fragments``, written as new fragments into the target's location
    (not committed), their files numbering the fields as the source's schema does."""
    if not fragments:
        return []
    schema = source.schema

    def batches() -> Iterator[pa.RecordBatch]:
        for fragment in fragments:
            yield from fragment.to_batches()

    written = write_fragments(
        pa.RecordBatchReader.from_batches(schema, batches()),
        target_uri,
        mode="overwrite",  # numbers the fields afresh, in pre-order, as mapped below
        data_storage_version=source.data_storage_version,
        storage_options=dict(storage) or None,
    )
    ids = list(_field_ids(source.lance_schema.fields()))
    for meta in written:
        for data_file in meta.files:
            data_file.fields = [ids[i] if i >= 0 else i for i in data_file.fields]
    return list(written)


def _field_ids(fields: Any) -> Iterator[int]:
    """The ids of Lance ``fields`` and their children, in pre-order (as a new table numbers
    them)."""
    for f in fields:
        yield int(f.id())
        yield from _field_ids(f.children())
