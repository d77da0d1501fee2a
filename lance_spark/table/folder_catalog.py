"""A catalog over a folder of Lance tables, no metastore: what the companion's
``LanceFolderCatalog`` (``spark.sql.catalog.<name>=lance_spark.companion.LanceFolderCatalog``,
``spark.sql.catalog.<name>.root=<folder or object-store URI>``) asks Python.

The layout is LanceDB's: table ``<name>`` of namespace ``a.b`` is the Lance table at
``<root>/a/b/<name>.lance``; a folder that is not a table is a namespace. Nothing else is kept:
listing the folder is the catalog. These run in the companion's planner worker (no Spark
session), like :mod:`lance_spark.table.procedures`, which dispatches to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import StructType, _parse_datatype_json_string

from lance_spark.errors import InvalidOptionError, TableAlreadyExistsError
from lance_spark.source import dataset, staging
from lance_spark.source import writer as _writer
from lance_spark.source.options import parse_write_options

SUFFIX = ".lance"


def _folder(root: str, namespace: list[str]) -> str:
    return "/".join([root.rstrip("/"), *namespace])


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
    namespace = list(args.get("namespace") or [])
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
    namespace = list(args.get("namespace") or [])
    names = [
        n
        for n in _entries(root, namespace, storage)
        if not n.endswith(SUFFIX) and not n.startswith(("_", "."))
    ]
    return {"names": names}


def namespace_exists(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    fs, path = staging.table_fs(_folder(root, list(args.get("namespace") or [])), storage)
    return {"exists": bool(fs.exists(path)) and not path.endswith(SUFFIX)}


def create_namespace(
    root: str, storage: Mapping[str, str], args: Mapping[str, Any]
) -> dict[str, Any]:
    fs, path = staging.table_fs(_folder(root, list(args.get("namespace") or [])), storage)
    if staging.is_local(fs):
        fs.makedirs(path, exist_ok=True)  # object stores have no folders: nothing to make
    return {}


def table_exists(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    return {"exists": dataset.table_exists(str(args["location"]), storage=storage)}


def create_table(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """An empty Lance table at ``location`` with the Spark schema ``schema`` (one version)."""
    location = str(args["location"])
    if dataset.table_exists(location, storage=storage):
        raise TableAlreadyExistsError(f"a Lance table already exists at {location!r}")
    schema = _parse_datatype_json_string(str(args["schema"]))
    if not isinstance(schema, StructType):
        raise InvalidOptionError(
            f"the companion sent a table schema that is not a struct: {schema}"
        )
    if not schema.fields:
        raise InvalidOptionError(
            f"CREATE TABLE needs columns (or AS SELECT ...) for the new Lance table at {location!r}"
        )
    options = parse_write_options(dict(args.get("options") or {}), session_storage=storage)
    _writer.create_empty(
        uri=location, spark_schema=schema, options=options, app_id=args.get("app_id")
    )
    return {}


def drop_table(root: str, storage: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    location = str(args["location"])
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
    "create_table": create_table,
    "drop_table": drop_table,
}
