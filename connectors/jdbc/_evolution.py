"""Schema evolution: which columns of a batch are added to its table, alike in every dialect.

With ``schema_evolution="add_columns"``, :meth:`~._checks.TableChecks.check_schema`
asks :func:`columns_to_add` for the batch's columns the table lacks, and runs
the dialect's ``add_column_statement`` for each, on the driver, before phase 1.
A column is only ever added, nullable, of the type ``create_table=True`` would
create; nothing is dropped, renamed or retyped. What cannot be added is
refused by name here, before any statement runs. The rules and why are in
``docs/jdbc.md``, "Schema changes".
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from twophase.errors import ConfigurationError

from ._options import JdbcOptions
from ._plan import RESERVED_COLUMNS
from ._table import TableInfo
from ._type_rules import TypeRules

__all__ = ["LOCK_HINT", "NewColumn", "columns_to_add"]

#: Said of a statement that waited too long while adding a column.
LOCK_HINT = (
    "If it waited for a lock: adding a column takes a short exclusive lock on the table, and "
    "another transaction held the table longer than lock_timeout (a long query or "
    "transaction, a prepared transaction of another application). Nothing was written; the "
    "batch is tried again when the query restarts"
)


@dataclass(frozen=True)
class NewColumn:
    """A column a batch adds to the table: always nullable.

    Attributes
    ----------
    name
        The column name, exactly as in the batch.
    sql_type
        The type ``create_table=True`` would create for the batch's column.
    """

    name: str
    sql_type: str


def columns_to_add(
    schema: pa.Schema, table: TableInfo, options: JdbcOptions, types: TypeRules
) -> tuple[NewColumn, ...]:
    """Return the batch's columns the table lacks, refusing by name those that cannot be added.

    Parameters
    ----------
    schema
        The Arrow schema of the batch.
    table
        The table as the catalog shows it now.
    options
        The sink's options (``schema_evolution``, the key and the CDC columns).
    types
        The dialect's type rules (the type each added column gets).

    Returns
    -------
    tuple of NewColumn
        In the batch's column order; empty with ``schema_evolution="none"``,
        or when the batch repeats or reserves a name (the write plan refuses
        it, naming it, before anything is added).

    Raises
    ------
    ConfigurationError
        Naming the column and the setting: a key column the table lacks (the
        key's unique index cannot be made by adding a column), a name the
        table has in another case, a type the database has no counterpart for.
    """
    if options.schema_evolution != "add_columns":
        return ()
    names = options.data_columns(schema.names)
    if len(set(names)) != len(names) or RESERVED_COLUMNS.intersection(names):
        return ()
    existing = {column.name for column in table.columns}
    folded = {column.name.lower(): column.name for column in table.columns}
    added: list[NewColumn] = []
    for name in names:
        if name in existing:
            continue
        what = f"column {name!r} of the batch is not in table {options.table}"
        if name.lower() in folded:
            raise ConfigurationError(
                f"{what}, which has {folded[name.lower()]!r}: schema_evolution='add_columns' "
                "does not add a column whose name differs from one of the table's only in case "
                "(a database that folds names would refuse it, one that does not would keep "
                "both). Rename the column in Spark",
                column=name,
                setting="schema_evolution",
            )
        if name in options.key_columns:
            raise ConfigurationError(
                f"{what}, and it is a key column: schema_evolution='add_columns' adds nullable "
                "columns only, and the merge needs a unique index on exactly the key columns. "
                "Add the column and the index yourself",
                column=name,
                setting="key_columns",
            )
        arrow_type = schema.field(name).type
        try:
            sql_type = types.sql_type(arrow_type)
        except TypeError:
            raise ConfigurationError(
                f"{what}, and its Arrow type {arrow_type} has no {types.database} counterpart, "
                "so schema_evolution='add_columns' cannot add it. Cast it in Spark, or add the "
                "column yourself",
                column=name,
                setting="schema_evolution",
            ) from None
        added.append(NewColumn(name, sql_type))
    return tuple(added)
