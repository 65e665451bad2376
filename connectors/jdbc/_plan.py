"""The write plan: which input columns go where, checked against the table.

The same check runs twice: on the driver before each batch
(:meth:`check_schema`, so that a mismatch stops the batch before anything is
written) and on the executor at the first write of each transaction (the
table may have changed in between; the executor's copy of the catalog is read
inside the transaction that writes).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from twophase.errors import ConfigurationError, DataError

from .._arrow import text_array
from .._context import ErrorContext
from ._encode import ColumnPlan
from ._options import JdbcOptions
from ._table import TableInfo
from ._type_rules import TypeRules

#: Staging-table column holding the CDC operation.
OP_COLUMN = "__twophase_op"
#: Staging-table column holding the row's position in the partition.
SEQ_COLUMN = "__twophase_seq"
#: Column names the input may not use.
RESERVED_COLUMNS = frozenset({OP_COLUMN, SEQ_COLUMN})

__all__ = [
    "OP_COLUMN",
    "RESERVED_COLUMNS",
    "SEQ_COLUMN",
    "TypeRules",
    "WritePlan",
    "checked_ops",
    "create_table_fields",
    "key_lock_hint",
    "plan_write",
]


@dataclass(frozen=True)
class WritePlan:
    """How a partition's record batches are written.

    Attributes
    ----------
    columns
        The data columns, in ``COPY`` order, with their rendering.
    op_index
        CDC: the position of the operation column in the input, else None.
    column_types
        ``(name, formatted type)`` of the written columns, to name the column
        of a server error.
    """

    columns: tuple[ColumnPlan, ...]
    op_index: int | None
    column_types: tuple[tuple[str, str], ...]

    @property
    def names(self) -> list[str]:
        """The data column names in ``COPY`` order.

        Returns
        -------
        list of str
            Column names.
        """
        return [c.name for c in self.columns]


def _is_string(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        return _is_string(arrow_type.value_type)
    return bool(
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or getattr(pa.types, "is_string_view", lambda _t: False)(arrow_type)
    )


def plan_write(
    schema: pa.Schema,
    table: TableInfo,
    options: JdbcOptions,
    table_name: str,
    types: TypeRules,
) -> WritePlan:
    """Check the input schema against the table and plan the write.

    Parameters
    ----------
    schema
        The Arrow schema of the input.
    table
        The target table from the catalog.
    options
        The sink's options.
    table_name
        The table's name for messages.
    types
        The dialect's type mapping.

    Returns
    -------
    WritePlan
        The plan.

    Raises
    ------
    ConfigurationError
        Naming the column: a column missing from the table, a type that
        cannot be written into the column, a NOT NULL column without default
        missing from the input, a key or control column missing.
    """
    names = list(schema.names)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigurationError(f"the input has two columns named {name!r}", column=name)
        seen.add(name)
        if name in RESERVED_COLUMNS:
            raise ConfigurationError(
                f"column name {name!r} is reserved by the {types.database} sink", column=name
            )
    op_index: int | None = None
    if options.mode == "cdc":
        op = options.cdc_op_column
        if op not in seen:
            raise ConfigurationError(
                f"mode='cdc' needs the operation column {op!r} (values c, r, u, d) in the "
                "input; set cdc_op_column to its name",
                column=op,
                setting="cdc_op_column",
            )
        op_index = names.index(op)
        if not _is_string(schema.field(op).type):
            raise ConfigurationError(
                f"the operation column {op!r} must be a string column (c, r, u, d), "
                f"got {schema.field(op).type}",
                column=op,
            )
    data = options.data_columns(names)
    if not data:
        raise ConfigurationError("the input has no column to write")
    plans: list[ColumnPlan] = []
    written_types: list[tuple[str, str]] = []
    for name in data:
        column = table.column(name)
        if column is None:
            folded = [c.name for c in table.columns if c.name.lower() == name.lower()]
            hint = f" (names are case-sensitive: the table has {folded[0]!r})" if folded else ""
            raise ConfigurationError(
                f"column {name!r} of the input does not exist in table {table_name}{hint}",
                column=name,
            )
        problem = types.compatibility_problem(schema.field(name).type, column)
        if problem is not None:
            if options.schema_evolution == "add_columns":
                problem += (
                    ". schema_evolution='add_columns' never changes the type of a column the "
                    "table has: ALTER it yourself, or cast the column in Spark"
                )
            raise ConfigurationError(problem, column=name)
        plans.append(
            ColumnPlan(names.index(name), name, types.column_kind(schema.field(name).type, column))
        )
        written_types.append((name, column.type_name))
    written = set(data)
    for column in table.columns:
        required = column.not_null and not column.has_default and not column.generated
        if required and column.name not in written:
            raise ConfigurationError(
                f"column {column.name!r} of table {table_name} is NOT NULL without a "
                "default, and the input has no such column",
                column=column.name,
            )
    for key in options.key_columns:
        if key not in written:
            raise ConfigurationError(
                f"key column {key!r} is not in the input", column=key, setting="key_columns"
            )
    if options.order_column is not None and options.order_column not in written:
        raise ConfigurationError(
            f"order_column {options.order_column!r} is not in the input",
            column=options.order_column,
            setting="order_column",
        )
    if (
        options.mode in ("upsert", "cdc")
        and frozenset(options.key_columns) not in table.unique_keys
    ):
        raise ConfigurationError(
            f"mode={options.mode!r} needs a unique index or primary key on exactly "
            f"({', '.join(options.key_columns)}) of table {table_name} (the merge uses it); "
            "create one, or let create_table=True create the table with that primary key",
            setting="key_columns",
        )
    return WritePlan(tuple(plans), op_index, tuple(written_types))


def create_table_fields(
    schema: pa.Schema, options: JdbcOptions, types: TypeRules
) -> list[tuple[str, str, bool]]:
    """Return the columns ``create_table=True`` creates for an input schema.

    Parameters
    ----------
    schema
        The Arrow schema of the input.
    options
        The sink's options (the CDC op column is not created; key columns are
        NOT NULL).
    types
        The dialect's type mapping.

    Returns
    -------
    list of (name, type, not null)
        For the dialect's ``create_table_statement`` (:class:`~._checks.TableChecks`).
    """
    fields = []
    for name in options.data_columns(schema.names):
        field = schema.field(name)
        key = name in options.key_columns
        try:
            sql_type = types.sql_type(field.type, key)
        except TypeError:
            raise ConfigurationError(
                f"column {name!r} has Arrow type {field.type}, which has no {types.database} "
                "counterpart",
                column=name,
            ) from None
        fields.append((name, sql_type, not field.nullable or key))
    return fields


_CDC_OPS = text_array(["c", "r", "u", "d"], pa.string())
_FALSE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x00")])[0]


def checked_ops(ops: pa.Array, options: JdbcOptions, where: ErrorContext) -> pa.Array:
    """Return the CDC operation column as strings, refusing any value but c, r, u, d.

    Parameters
    ----------
    ops
        The operation column of a record batch.
    options
        The sink's options (for the column's name).
    where
        Error context (sink, batch, partition).

    Returns
    -------
    pyarrow.Array
        The operations, as a string array.

    Raises
    ------
    DataError
        Naming the column, how many rows are bad and the first bad value; the
        batch is not written.
    """
    if pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_decode()
    ops = ops.cast(pa.string())
    valid = pc.fill_null(pc.is_in(ops, value_set=_CDC_OPS), _FALSE)
    if not pc.all(valid).as_py():
        bad = pc.filter(ops, pc.invert(valid))
        raise DataError(
            f"{len(bad)} row(s) have an operation other than 'c', 'r', 'u', 'd' "
            f"(first: {bad[0].as_py()!r}); the batch is not written",
            column=options.cdc_op_column,
            **where.keywords(),
        )
    return ops


def key_lock_hint(in_doubt: str) -> str:
    """Say what holds the rows of a key when an upsert or CDC merge waited past ``lock_timeout``.

    The sink routes every key of a batch to one partition, so its own
    transactions of one batch never wait for each other: the holder is outside
    the batch.

    Parameters
    ----------
    in_doubt
        Where the dialect lists prepared transactions (``pg_prepared_xacts``,
        ``XA RECOVER``).

    Returns
    -------
    str
        The hint.
    """
    return (
        "A lock wait exceeded lock_timeout: another transaction holds rows of the same keys. "
        "The sink writes every key of a batch from one partition, so the holder is outside "
        "this batch: another application's transaction, another sink or query writing the "
        f"same table, or a prepared transaction left behind ({in_doubt}; the sink's own are "
        "finished by its recovery)"
    )
