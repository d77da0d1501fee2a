"""A catalog over a folder of Lance tables, no metastore: what the companion's
``LanceFolderCatalog`` (``spark.sql.catalog.<name>=lance_spark.companion.LanceFolderCatalog``,
``spark.sql.catalog.<name>.root=<folder or object-store URI>``) asks Python.

The layout is LanceDB's: table ``<name>`` of namespace ``a.b`` is the Lance table at
``<root>/a/b/<name>.lance``; a folder that is not a table is a namespace. Nothing else is kept:
listing the folder is the catalog. These run in the companion's planner worker (no Spark
session), like :mod:`lance_spark.table.procedures`, which dispatches to them.

The companion's session catalog (``LanceSessionCatalog``) uses ``create_table``,
``check_create``, ``set_table_properties`` and ``alter_table`` too, for the ``USING lance``
tables of Spark's own catalog (their location is the catalog entry's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType, _parse_datatype_json_string

from lance_spark.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    SchemaMismatchError,
    TableAlreadyExistsError,
)
from lance_spark.source import dataset, staging
from lance_spark.source import types as _types
from lance_spark.source import writer as _writer
from lance_spark.source.options import STORAGE_PREFIX, parse_write_options
from lance_spark.source.session import refuse_secret_confs
from lance_spark.source.writer import COMMENT_KEY
from lance_spark.table.context import TableContext
from lance_spark.table.schema import (
    add_columns,
    alter_column,
    check_property_keys,
    drop_columns,
    rename_column,
    set_default,
    set_nullable,
    set_properties,
    unset_properties,
)

SUFFIX = ".lance"
# What a name in a catalog cannot hold: a path separator, or a scheme's colon (s3:, file:).
_SEPARATORS = ("/", "\\", ":")


def check_name(part: object, *, kind: str, identifier: str) -> str:
    """``part``, a namespace's or a table's name (``kind``) of ``identifier``, when it names
    one folder under a catalog's root; else :class:`InvalidArgumentError` naming it. The rule
    of every catalog that maps names to folders: checked before storage is touched, so a name
    never reaches a folder outside the root (``..``, ``a/../..``, ``/abs``, ``s3://...``)."""
    text = str(part)
    if text.strip() in ("", ".", "..") or any(s in text for s in _SEPARATORS) or "\x00" in text:
        raise InvalidArgumentError(
            f"the {kind} name {text!r} of {identifier} cannot name a Lance table's folder under "
            "the catalog's root: a namespace or table name is one folder's name, not empty, "
            "'.' or '..', and holds no '/', '\\' or ':' (a path or URI is read as "
            "lance.`<path>`)"
        )
    return text


def _shown(args: Mapping[str, Any]) -> str:
    """The request's identifier as SQL spells it (catalog, namespace, name)."""
    name = [str(args["name"])] if "name" in args else []
    parts = [f"`{p}`" for p in [*(args.get("namespace") or []), *name]]
    return ".".join([str(args.get("catalog") or "<catalog>"), *parts])


def _namespace(args: Mapping[str, Any]) -> list[str]:
    """The request's namespace, every part checked (:func:`check_name`)."""
    parts = [str(p) for p in args.get("namespace") or []]
    return [check_name(p, kind="namespace", identifier=_shown(args)) for p in parts]


def check_conf(options: Mapping[str, str], catalog: str) -> None:
    """The catalog's object-store settings (confs ``spark.sql.catalog.<catalog>.storage.<key>``)
    hold no secret: the rule of the session's ``spark.lance.storage.*`` confs
    (:class:`~lance_spark.errors.SecretInConfError` naming the conf, never its value)."""
    storage = {
        key[len(STORAGE_PREFIX) :]: value
        for key, value in options.items()
        if key.lower().startswith(STORAGE_PREFIX)
    }
    refuse_secret_confs(storage, prefix=f"spark.sql.catalog.{catalog}.{STORAGE_PREFIX}")


def _folder(root: str, namespace: list[str]) -> str:
    return "/".join([root.rstrip("/"), *namespace])


def table_location(root: str, args: Mapping[str, Any]) -> str:
    """The table's location: ``<root>/<namespace...>/<name>.lance`` for the folder catalog's
    requests (``namespace`` and ``name``, checked by :func:`check_name`), else the
    ``location`` the session catalog's entry gives."""
    if "name" not in args:
        return str(args["location"])
    namespace = _namespace(args)
    name = check_name(args["name"], kind="table", identifier=_shown(args))
    return f"{_folder(root, namespace)}/{name}{SUFFIX}"


def _entries(root: str, namespace: list[str], storage: Mapping[str, str]) -> list[str]:
    """The names in the namespace's folder (none when it does not exist)."""
    fs, path = staging.table_fs(_folder(root, namespace), storage)
    if not fs.exists(path):
        return []
    names = []
    for info in fs.ls(path, detail=True):
        if info.get("type") == "directory":
            names.append(str(info["name"]).rstrip("/").rsplit("/", 1)[-1])
    return sorted(names)


def list_tables(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    namespace = _namespace(args)
    names = [
        n[: -len(SUFFIX)]
        for n in _entries(root, namespace, storage)
        if n.endswith(SUFFIX)
        and dataset.table_exists(f"{_folder(root, namespace)}/{n}", storage=storage)
    ]
    return {"names": names}


def list_namespaces(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    namespace = _namespace(args)
    names = [
        n
        for n in _entries(root, namespace, storage)
        if not n.endswith(SUFFIX) and not n.startswith(("_", "."))
    ]
    return {"names": names}


def namespace_exists(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    fs, path = staging.table_fs(_folder(root, _namespace(args)), storage)
    return {"exists": bool(fs.exists(path)) and not path.endswith(SUFFIX)}


def create_namespace(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    fs, path = staging.table_fs(_folder(root, _namespace(args)), storage)
    if staging.is_local(fs):
        fs.makedirs(path, exist_ok=True)  # object stores have no folders: nothing to make
    return {}


def table_exists(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    location = table_location(root, args)
    return {"exists": dataset.table_exists(location, storage=storage), "location": location}


def _schema_arg(args: Mapping[str, Any], location: str) -> StructType:
    schema = _parse_datatype_json_string(str(args["schema"]))
    if not isinstance(schema, StructType):
        raise InvalidOptionError(
            f"the companion sent a table schema that is not a struct: {schema}"
        )
    if not schema.fields:
        raise InvalidOptionError(
            f"CREATE TABLE needs columns (or AS SELECT ...) for the new Lance table at {location!r}"
        )
    return schema


def _context(location: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> TableContext:
    app_id = args.get("app_id")
    branch = args.get("branch")
    return TableContext(
        # No session in the planner worker: the schema engine uses none.
        spark=cast(SparkSession, None),
        uri=dataset.branch_location(location, str(branch), storage=storage) if branch else location,
        storage=storage,
        branch=str(branch) if branch else None,
        main_uri=location if branch else None,
        application=str(app_id) if app_id else None,
    )


def check_create(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """Before a CTAS makes anything: its table properties are ones Lance can keep, and its
    location (when given) holds no Lance table yet."""
    check_property_keys(dict(args.get("properties") or {}))
    location = args.get("location")
    if location and dataset.table_exists(str(location), storage=storage):
        raise TableAlreadyExistsError(
            f"a Lance table already exists at {location!r}: register it with CREATE TABLE "
            f"<name> USING lance LOCATION '{location}' (no columns, no AS SELECT), or choose "
            "another location"
        )
    if location:
        staging.check_new_location(str(location), storage=storage)
    return {}


def create_table(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """An empty Lance table at ``location`` with the Spark schema ``schema`` (one version),
    with the table properties ``properties`` in its config. ``replace``: the table there is
    replaced (a new version, empty, with these columns); ``register``: a table already there
    with these columns is kept as it is (``CREATE TABLE t (cols) USING lance LOCATION``)."""
    location = table_location(root, args)
    schema = _schema_arg(args, location)
    properties = dict(args.get("properties") or {})
    check_property_keys(properties)  # before anything is made
    options = parse_write_options(dict(args.get("options") or {}), session_storage=storage)
    replace = bool(args.get("replace"))
    if not replace and dataset.table_exists(location, storage=storage):
        if not args.get("register"):
            raise TableAlreadyExistsError(f"a Lance table already exists at {location!r}")
        existing = dataset.open_latest(location, storage=storage).schema
        if [n.lower() for n in existing.names] != [n.lower() for n in schema.names]:
            raise SchemaMismatchError(
                f"a Lance table already exists at {location!r} with columns "
                f"{', '.join(existing.names)}, not {', '.join(schema.names)}; register it "
                "without columns: CREATE TABLE <name> USING lance LOCATION "
                f"'{location}'"
            )
        # The statement's column defaults are kept with the table (its rows are as they are).
        defaults = {
            name: _types.spark_defaults(f.metadata)
            for name, f in zip(existing.names, schema.fields, strict=True)
            if _types.spark_defaults(f.metadata)
        }
        if defaults:
            dataset.open_latest(location, storage=storage).update_field_metadata(
                cast(Any, defaults)
            )
    else:
        _writer.create_empty(
            uri=location,
            spark_schema=schema,
            options=options,
            app_id=args.get("app_id"),
            replace=replace,
        )
    set_properties(_context(location, storage, args), properties)
    return {}


def set_table_properties(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    """The table properties ``properties`` into the config of the Lance table at
    ``location`` (one version; none when there are none)."""
    location = table_location(root, args)
    set_properties(_context(location, storage, args), dict(args.get("properties") or {}))
    return {}


def alter_table(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """``ALTER TABLE`` on the Lance table at ``location``: Spark's table changes
    (``TableChange``, as the companion sends them: ``{"kind": ..., ...}``), in order."""
    table = _context(table_location(root, args), storage, args)
    changes = list(args.get("changes") or [])
    kinds = {str(c.get("kind")) for c in changes}
    if {"delete_column", "add_column"} <= kinds:
        raise InvalidOptionError(
            "ALTER TABLE ... REPLACE COLUMNS is not supported on Lance tables; use ADD COLUMNS, "
            "DROP COLUMNS, RENAME COLUMN and ALTER COLUMN ... TYPE"
        )
    if any(c.get("kind") == "set_property" and c.get("key") == "location" for c in changes):
        raise InvalidOptionError(
            "ALTER TABLE ... SET LOCATION is not supported on Lance tables (the table's data "
            "would not follow); DROP TABLE and CREATE TABLE ... USING lance LOCATION 'new path' "
            "instead"
        )
    deleted = [".".join(c["path"]) for c in changes if c.get("kind") == "delete_column"]
    if deleted:  # DROP COLUMNS (a, b): one check of them all (not every column), one version
        drop_columns(
            table,
            deleted,
            if_exists=all(c.get("if_exists") for c in changes if c.get("kind") == "delete_column"),
        )
    properties = {
        str(c["key"]): str(c["value"]) for c in changes if c.get("kind") == "set_property"
    }
    set_properties(table, properties)  # SET TBLPROPERTIES (a, b, ...): one version
    added = [c for c in changes if c.get("kind") == "add_column"]
    if added:  # ADD COLUMNS (a, b): one version
        _add_columns(table, added)
    for change in changes:
        if change.get("kind") not in ("set_property", "delete_column", "add_column"):
            _alter(table, change)
    return {}


def _add_columns(table: TableContext, changes: list[Mapping[str, Any]]) -> None:
    fields = []
    values: dict[str, str | None] = {}
    for change in changes:
        path = ".".join(str(p) for p in change.get("path") or [])
        if len(change.get("path") or []) != 1:
            raise InvalidOptionError(
                f"ALTER TABLE ADD COLUMNS {path}: Lance tables take new top-level columns only"
            )
        if change.get("position"):
            raise InvalidOptionError(
                f"ALTER TABLE ADD COLUMNS {path} {change['position']}: new columns of a Lance "
                "table come last (no FIRST / AFTER)"
            )
        comment = change.get("comment")
        metadata = {} if comment is None else {COMMENT_KEY: str(comment)}
        data_type = _parse_datatype_json_string(str(change["type"]))
        nullable = True
        if change.get("default_metadata"):  # ADD COLUMN c ... DEFAULT expr
            metadata.update(_types.spark_defaults(json.loads(str(change["default_metadata"]))))
            values[path] = change.get("default_value")
            nullable = bool(change.get("nullable", True))
        fields.append(StructField(path, data_type, nullable, metadata))
    add_columns(table, StructType(fields), existing_values=values)


def _alter(table: TableContext, change: Mapping[str, Any]) -> None:
    kind = str(change.get("kind"))
    path = ".".join(str(p) for p in change.get("path") or [])
    if kind == "remove_property":
        unset_properties(table, [str(change["key"])], if_exists=True)
    elif kind == "rename_column":
        rename_column(table, path, str(change["new"]))
    elif kind == "update_type":
        alter_column(table, path, data_type=_parse_datatype_json_string(str(change["type"])))
    elif kind == "update_comment":
        alter_column(table, path, comment=str(change["comment"]))
    elif kind == "update_nullability":
        set_nullable(table, path, nullable=bool(change["nullable"]))
    elif kind == "update_default":
        set_default(table, path, str(change.get("default") or "") or None)
    else:
        raise InvalidOptionError(
            f"ALTER TABLE on a Lance table cannot {change.get('description') or kind}; it can "
            "ADD COLUMNS, RENAME COLUMN, DROP COLUMN(S), ALTER COLUMN ... TYPE (widening) / "
            "COMMENT / DROP NOT NULL / SET DEFAULT / DROP DEFAULT, SET / UNSET TBLPROPERTIES"
        )


def drop_table(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    location = table_location(root, args)
    if not dataset.table_exists(location, storage=storage):
        return {"dropped": False}
    staging.remove_table(location, storage=storage)
    return {"dropped": True}


OPERATIONS = {
    "list_tables": list_tables,
    "list_namespaces": list_namespaces,
    "namespace_exists": namespace_exists,
    "create_namespace": create_namespace,
    "table_exists": table_exists,
    "check_create": check_create,
    "create_table": create_table,
    "set_table_properties": set_table_properties,
    "alter_table": alter_table,
    "drop_table": drop_table,
}
