"""Schema and property changes of a Lance table: rename, drop, widen, comment, properties.

Each is one Lance commit, metadata-only where Lance can (rename, drop, comment, properties; a
type change rewrites the column's data). Every argument is checked against the table first,
so a refused change commits nothing. Catalog entries are brought in step by the callers
(:class:`~lance_spark.table.LanceTable` for a table opened by name, the SQL front for DDL).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import lance
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import DataType, StructType

from lance_spark.errors import ColumnNotFoundError, InvalidOptionError, SchemaMismatchError
from lance_spark.source import types as _types
from lance_spark.source.options import DATA_STORAGE_VERSION, ENABLE_STABLE_ROW_IDS
from lance_spark.source.writer import COMMENT_KEY, with_comments, with_defaults
from lance_spark.table.catalog import RESERVED_PROPERTIES
from lance_spark.table.context import TableContext

# Write options that only a table's creation can choose, and what they choose.
CREATION_OPTIONS = {
    ENABLE_STABLE_ROW_IDS: "whether its rows have stable row ids",
    DATA_STORAGE_VERSION: "its file format version",
}
# Widening casts Lance applies and that lose no value (Delta's type widening, where Lance
# supports it): integers to wider integers, float to double.
_INTEGER_WIDTHS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def rename_column(table: TableContext, old: str, new: str) -> None:
    """See :meth:`LanceTable.renameColumn`."""
    ds = table.open()
    path = _field_path(ds, table.uri, old)
    if not isinstance(new, str) or not new or "." in new:
        raise InvalidOptionError(
            f"the new name of column {old!r} must be a non-empty name without dots, not {new!r}"
        )
    parent, _, leaf = path.rpartition(".")
    clash = [s for s in _children_names(ds, parent) if s != leaf and s.lower() == new.lower()]
    if clash:
        raise SchemaMismatchError(
            f"cannot rename column {old!r} to {new!r}: a column {clash[0]!r} already exists in "
            f"the Lance table at {table.uri!r} (Spark compares names case-insensitively)"
        )
    _types.check_column_names(pa.schema([pa.field(new, pa.null())]))
    if new == leaf:
        return
    ds.alter_columns(cast(Any, {"path": path, "name": new}))


def add_columns(
    table: TableContext,
    columns: StructType,
    *,
    existing_values: Mapping[str, str | None] | None = None,
) -> None:
    """``ALTER TABLE ... ADD COLUMNS``: new columns with their comments (``comment`` in a
    field's metadata) and default values (Spark's ``CURRENT_DEFAULT`` / ``EXISTS_DEFAULT``
    field metadata, kept by Lance), one Lance commit. Rows already there read
    ``existing_values[name]`` (the default's value, in Spark's internal form as text: the
    column is written with it), else null (metadata-only)."""
    ds = table.open()
    existing = {n.lower() for n in ds.schema.names}
    clash = [f.name for f in columns.fields if f.name.lower() in existing]
    if clash:
        raise SchemaMismatchError(
            f"ALTER TABLE ADD COLUMNS: column {clash[0]!r} already exists in the Lance table at "
            f"{table.uri!r}; columns: {', '.join(ds.schema.names)}"
        )
    arrow = to_arrow_schema(columns, timezone="UTC")
    fields = _types.arrow_schema_for_new_table(
        pa.schema([f.remove_metadata() for f in arrow]), vector_sizes={}
    )
    comments = {
        f.name: str(f.metadata[COMMENT_KEY]) for f in columns.fields if COMMENT_KEY in f.metadata
    }
    values = {k: v for k, v in (existing_values or {}).items() if v is not None}
    if not values:
        ds.add_columns(
            with_defaults(with_comments(_types.nullable_schema(fields), comments), columns)
        )
        return
    # Every new column in one commit, written: the defaults' values, nulls for the others.
    # A NOT NULL column is NOT NULL in Lance too when every row gets a value (its default).
    not_null = {f.name for f in columns.fields if f.name in values and not f.nullable}
    target = pa.schema(
        [f.with_nullable(f.name not in not_null) for f in _types.nullable_schema(fields)]
    )
    scalars = {f.name: _default_scalar(f, values[f.name]) for f in target if f.name in values}
    out = with_defaults(with_comments(target, comments), columns)

    @lance.batch_udf(output_schema=out)
    def fill(batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        arrays = [
            pa.repeat(scalars[f.name], n) if f.name in scalars else pa.nulls(n, f.type) for f in out
        ]
        return pa.record_batch(arrays, schema=out)

    ds.add_columns(fill, read_columns=[])


def _default_scalar(field: pa.Field, value: str) -> pa.Scalar:
    """The value of an added column's default for the rows already there: Spark's internal
    form of the literal (as the companion sends it) as a value of the column's Arrow type."""
    t = field.type
    try:
        if pa.types.is_boolean(t):
            return pa.scalar(value == "true", t)
        if pa.types.is_integer(t):
            return pa.scalar(int(value), t)
        if pa.types.is_floating(t):
            return pa.scalar(float(value), t)
        if pa.types.is_decimal(t):
            return pa.scalar(decimal.Decimal(value), t)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pa.scalar(value, t)
        if pa.types.is_date32(t):  # days since the epoch
            return pa.scalar(int(value), pa.int32()).cast(t)
        if pa.types.is_timestamp(t) and t.unit == "us":  # microseconds since the epoch
            return pa.scalar(int(value), pa.int64()).cast(t)
    except (ValueError, ArithmeticError, pa.ArrowException) as e:
        raise InvalidOptionError(
            f"ALTER TABLE ADD COLUMN {field.name!r} DEFAULT: cannot store the value {value!r} "
            f"as {t}: {e}"
        ) from e
    raise InvalidOptionError(
        f"ALTER TABLE ADD COLUMN {field.name!r} ... DEFAULT: the rows already in the table "
        f"would need the default's value, and Lance tables take it for columns of boolean, "
        f"numeric, decimal, string, date and timestamp types only, not {t}; add the column "
        "without DEFAULT (existing rows read null), or make it one of those types"
    )


def drop_columns(table: TableContext, names: Sequence[str], *, if_exists: bool = False) -> int:
    """See :meth:`LanceTable.dropColumns`. Returns the number of columns dropped."""
    if isinstance(names, str):
        names = [names]
    if not names:
        raise InvalidOptionError("dropColumns needs at least one column name")
    ds = table.open()
    paths = []
    for name in names:
        try:
            paths.append(_field_path(ds, table.uri, name))
        except ColumnNotFoundError:
            if not if_exists:
                raise
    if not paths:
        return 0
    top = [p for p in paths if "." not in p]
    if len(set(top)) >= len(ds.schema.names):
        raise SchemaMismatchError(
            f"cannot drop every column of the Lance table at {table.uri!r}; columns: "
            f"{', '.join(ds.schema.names)}"
        )
    ds.drop_columns(sorted(set(paths)))
    return len(set(paths))


def alter_column(
    table: TableContext,
    name: str,
    *,
    data_type: DataType | None = None,
    comment: str | None = None,
) -> None:
    """See :meth:`LanceTable.alterColumn`."""
    if data_type is None and comment is None:
        raise InvalidOptionError("alterColumn needs a new type (dataType=) or a comment")
    ds = table.open()
    path = _field_path(ds, table.uri, name)
    if data_type is not None:
        current = _field(ds, path).type
        target = _lance_type(data_type, path)
        if not current.equals(target):
            if not _widens(current, target):
                raise SchemaMismatchError(
                    f"cannot change column {path!r} from {current} to {target}: Lance tables "
                    "take widening changes only (tinyint -> smallint -> int -> bigint, "
                    "float -> double), which keep every value"
                )
            ds.alter_columns(cast(Any, {"path": path, "data_type": target}))
            ds = table.open()
    if comment is not None:
        if not isinstance(comment, str):
            raise InvalidOptionError(f"a column comment must be a string, not {comment!r}")
        ds.update_field_metadata({path: {COMMENT_KEY: comment}})


def set_nullable(table: TableContext, name: str, *, nullable: bool) -> None:
    """``ALTER COLUMN c DROP NOT NULL`` (``nullable``); a column cannot become NOT NULL
    (rows already written may hold nulls)."""
    ds = table.open()
    path = _field_path(ds, table.uri, name)
    if not nullable:
        raise SchemaMismatchError(
            f"cannot make column {path!r} NOT NULL: a Lance table's column can only become "
            "nullable (ALTER COLUMN ... DROP NOT NULL)"
        )
    if not _field(ds, path).nullable:
        ds.alter_columns(cast(Any, {"path": path, "nullable": True}))


def set_default(table: TableContext, name: str, sql: str | None) -> None:
    """``ALTER COLUMN c SET DEFAULT expr`` (``sql``: Spark's SQL of it) / ``DROP DEFAULT``
    (None): the default that INSERT, UPDATE and MERGE use from now on (Spark's
    ``CURRENT_DEFAULT``, in the Lance field's metadata), one metadata-only commit. The rows
    already there keep their values (``EXISTS_DEFAULT`` stays)."""
    ds = table.open()
    path = _field_path(ds, table.uri, name)
    if "." in path:
        raise InvalidOptionError(
            f"ALTER COLUMN {path} SET / DROP DEFAULT: Lance tables keep defaults of top-level "
            "columns only"
        )
    ds.update_field_metadata(cast(Any, {path: {_types.CURRENT_DEFAULT_KEY: sql}}))


def set_properties(table: TableContext, properties: Mapping[str, str]) -> None:
    """Set table properties (Lance's table config), one commit."""
    if not properties:
        return
    check_property_keys(properties)
    clean: dict[str, str | None] = {str(k): str(v) for k, v in properties.items()}
    ds = table.open()
    current = ds.config()
    if all(current.get(k) == v for k, v in clean.items()):
        return  # no new version for values the table has (a catalog entry kept in step)
    ds.update_config(clean)


def check_property_keys(keys: Iterable[str]) -> None:
    """Reject table property keys Spark's catalog reserves, and the write options Lance fixes
    when it creates a table (a property of that name would be stored and do nothing)
    (:class:`InvalidOptionError`)."""
    reserved = sorted(str(k) for k in keys if str(k).lower() in RESERVED_PROPERTIES)
    if reserved:
        raise InvalidOptionError(
            f"table property {reserved[0]!r} is reserved by Spark's catalog (reserved: "
            f"{', '.join(sorted(RESERVED_PROPERTIES))}); choose another key"
        )
    fixed = sorted(str(k) for k in keys if str(k).lower() in CREATION_OPTIONS)
    if fixed:
        key = fixed[0].lower()
        raise InvalidOptionError(
            f"table property {fixed[0]!r} cannot be set: Lance chooses {CREATION_OPTIONS[key]} "
            "when it creates a table, and a table keeps it. Give the write option "
            f"{key} to the write that creates the table: CREATE TABLE ... USING lance "
            f"OPTIONS ('{key}' = ...), or .option('{key}', ...)"
        )


def unset_properties(table: TableContext, keys: Sequence[str], *, if_exists: bool = False) -> None:
    """Remove table properties; a key that is not set is ignored, with or without
    ``if_exists`` (IF EXISTS), as Spark 4 does."""
    ds = table.open()
    current = ds.config()
    present = [k for k in keys if k in current]
    if present:
        ds.delete_config_keys(present)


# --- helpers --------------------------------------------------------------------------------


def _field_path(ds: lance.LanceDataset, uri: str, name: str) -> str:
    """The exact (case-resolved) dotted path of column ``name``."""
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"a column name must be a non-empty string, not {name!r}")
    parts = name.split(".")
    fields: Sequence[pa.Field] = list(ds.schema)
    resolved: list[str] = []
    for part in parts:
        match = [f for f in fields if f.name == part] or [
            f for f in fields if f.name.lower() == part.lower()
        ]
        if len(match) != 1:
            raise ColumnNotFoundError(
                f"column {name!r} does not exist in the Lance table at {uri!r}; "
                f"columns: {', '.join(ds.schema.names)}"
            )
        resolved.append(match[0].name)
        t = match[0].type
        fields = list(t) if pa.types.is_struct(t) else []
    return ".".join(resolved)


def _field(ds: lance.LanceDataset, path: str) -> pa.Field:
    field = ds.schema.field(path.split(".")[0])
    for part in path.split(".")[1:]:
        field = field.type.field(part)
    return field


def _children_names(ds: lance.LanceDataset, parent: str) -> list[str]:
    if not parent:
        return list(ds.schema.names)
    return [f.name for f in _field(ds, parent).type]


def _lance_type(data_type: DataType, path: str) -> pa.DataType:
    try:
        arrow = to_arrow_type(data_type)
    except TypeError as err:
        raise SchemaMismatchError(f"column {path!r}: {err}") from None
    field = _types.arrow_schema_for_new_table(pa.schema([pa.field("c", arrow)]), vector_sizes={})
    return field.field("c").type


def _widens(src: pa.DataType, dst: pa.DataType) -> bool:
    if src in _INTEGER_WIDTHS and dst in _INTEGER_WIDTHS:
        return _INTEGER_WIDTHS.index(dst) > _INTEGER_WIDTHS.index(src)
    return bool(pa.types.is_float32(src) and pa.types.is_float64(dst))
