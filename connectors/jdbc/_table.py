"""A target table as the write plan sees it: columns and unique keys, in any dialect."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["TableColumn", "TableInfo", "is_type", "unwrap"]


@dataclass(frozen=True)
class TableColumn:
    """One column of the target table, as read from the catalog.

    Attributes
    ----------
    name
        The column name.
    type_name
        The declared type, as the catalog shows it (PostgreSQL's
        ``format_type()``: ``"character varying(5)"``; MariaDB's
        ``COLUMN_TYPE``: ``"varchar(5)"``).
    base_type
        The base type's name, domains resolved (PostgreSQL's ``typname``:
        ``"int4"``, ``"_int4"``; MariaDB's ``DATA_TYPE``: ``"int"``).
    category
        The dialect's category of the base type (PostgreSQL's
        ``typcategory``: ``"A"`` for arrays...; empty where there is none).
    element_type
        For arrays, the element type's name (domains resolved).
    not_null
        Whether the column is ``NOT NULL``.
    has_default
        Whether the column has a default or is an identity column.
    generated
        Whether the column is generated or ``GENERATED ALWAYS AS IDENTITY``
        (it cannot be written).
    """

    name: str
    type_name: str
    base_type: str
    category: str
    element_type: str | None
    not_null: bool
    has_default: bool
    generated: bool = False


@dataclass(frozen=True)
class TableInfo:
    """A table's columns and unique keys.

    Attributes
    ----------
    oid
        The table's id in the catalog (PostgreSQL's oid; 0 where there is none).
    kind
        What the catalog says the table is (PostgreSQL's ``relkind``; MariaDB's
        storage engine).
    columns
        The columns, in table order.
    unique_keys
        The column sets of every usable unique index (for ``ON CONFLICT``).
    """

    oid: int
    kind: str
    columns: tuple[TableColumn, ...]
    unique_keys: tuple[frozenset[str], ...]

    def column(self, name: str) -> TableColumn | None:
        """Return the column of that exact name, if any.

        Parameters
        ----------
        name
            Column name (case-sensitive).

        Returns
        -------
        TableColumn or None
            The column.
        """
        for col in self.columns:
            if col.name == name:
                return col
        return None


def is_type(predicate: str, arrow_type: pa.DataType) -> bool:
    """Apply a ``pyarrow.types`` predicate that older pyarrow versions may lack."""
    function = getattr(pa.types, predicate, None)
    return bool(function is not None and function(arrow_type))


def unwrap(arrow_type: pa.DataType) -> pa.DataType:
    """Map the Arrow variants that carry the same values onto one type."""
    if pa.types.is_dictionary(arrow_type):
        return unwrap(arrow_type.value_type)
    if pa.types.is_large_string(arrow_type) or is_type("is_string_view", arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type) or is_type("is_binary_view", arrow_type):
        return pa.binary()
    if pa.types.is_fixed_size_binary(arrow_type):
        return pa.binary()
    if pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return pa.list_(arrow_type.value_type)
    if is_type("is_list_view", arrow_type) or is_type("is_large_list_view", arrow_type):
        return pa.list_(arrow_type.value_type)
    if pa.types.is_date64(arrow_type):
        return pa.date32()
    return arrow_type
