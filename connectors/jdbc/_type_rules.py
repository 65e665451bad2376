"""A dialect's type rules as a description: the table it declares; the logic all dialects share.

A dialect declares an ordered table of :class:`TypeRow` (which Arrow types,
the SQL type ``create_table=True`` creates for them, the base types of
existing columns that accept them, how their values are rendered), plus the
few special cases a database has, as small hooks of :class:`TypeRules`.
What is the same in every database is written here once: every question is
asked of the unwrapped Arrow type (:func:`~._table.unwrap`: dictionary, large
and view variants), a null column goes into any column, the check of an input
column against the table's column and its messages, the refusal of a type no
row names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ._table import TableColumn, unwrap

__all__ = ["TypeRow", "TypeRules"]

#: A test of an (unwrapped) Arrow type.
ArrowTest = Callable[[pa.DataType], bool]
#: A hook that looks at the input type and the target column.
ColumnTest = Callable[[pa.DataType, TableColumn], bool]


@dataclass(frozen=True)
class TypeRow:
    """One row of a dialect's type table: which Arrow types, and what becomes of them.

    Attributes
    ----------
    arrow
        The Arrow families of the row, space-separated: ``"int32 uint16"`` is
        ``pyarrow.types.is_int32`` or ``is_uint16``; ``timestamp_tz`` and
        ``timestamp_ntz`` are timestamps with and without a zone.
    created
        The SQL type ``create_table=True`` creates, or a function of the
        Arrow type giving it (None: the database has no counterpart).
    accepted
        The base types of existing columns the values go into (as the
        dialect's catalog names them), or a function of the Arrow type giving
        them (None: no column takes them).
    kind
        How the values are rendered (one of the dialect's kinds), or a
        function of the Arrow type and the target column (None when the
        table is being created) giving it.
    key_created
        The type created instead when the column is part of the primary key.
    tests
        The ``pyarrow.types`` tests ``arrow`` names (derived; an unknown name
        is refused with a ValueError when the row is declared).
    """

    arrow: str
    created: str | Callable[[pa.DataType], str | None] | None
    accepted: frozenset[str] | Callable[[pa.DataType], frozenset[str]] | None
    kind: str | Callable[[pa.DataType, TableColumn | None], str]
    key_created: str | None = None
    tests: tuple[ArrowTest, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", tuple(_family(n) for n in self.arrow.split()))

    def matches(self, arrow_type: pa.DataType) -> bool:
        """Whether the (unwrapped) Arrow type belongs to this row."""
        return any(test(arrow_type) for test in self.tests)


#: The Arrow families a row may name besides ``pyarrow.types.is_<name>``: timestamps by zone.
_FAMILIES: dict[str, ArrowTest] = {
    "timestamp_tz": lambda t: pa.types.is_timestamp(t) and t.tz is not None,
    "timestamp_ntz": lambda t: pa.types.is_timestamp(t) and t.tz is None,
}


def _family(name: str) -> ArrowTest:
    test = _FAMILIES.get(name) or getattr(pa.types, f"is_{name}", None)
    if test is None:
        raise ValueError(f"no Arrow family {name!r} (pyarrow.types has no is_{name})")
    return test


def _never(_arrow_type: pa.DataType, _column: TableColumn) -> bool:
    return False


def _no_hint(_arrow_type: pa.DataType, _column: TableColumn) -> str:
    return ""


@dataclass(frozen=True)
class TypeRules:
    """A dialect's type rules: its table, its name, its special cases; the logic is here.

    Attributes
    ----------
    database
        The database's name, for messages.
    rows
        The type table, first match wins (on the unwrapped Arrow type).
    other_kind
        The rendering kind of an Arrow type no row names.
    generated_note
        Said of a generated column after "is generated", before "and cannot be written".
    also_accepts
        ``(arrow_type, column) -> bool``: a column the row's base types do not
        name but that takes the values (PostgreSQL: enums, arrays).
    hint
        ``(arrow_type, column) -> str``: appended to the message of a refused
        column (PostgreSQL: what a lost or missing time zone asks for).
    """

    database: str
    rows: tuple[TypeRow, ...]
    other_kind: str
    generated_note: str = ""
    also_accepts: ColumnTest = _never
    hint: Callable[[pa.DataType, TableColumn], str] = _no_hint

    def row(self, arrow_type: pa.DataType) -> TypeRow | None:
        """Return the row of an Arrow type (unwrapped here), or None when no row names it."""
        t = unwrap(arrow_type)
        for row in self.rows:
            if row.matches(t):
                return row
        return None

    def created(self, arrow_type: pa.DataType, key: bool = False) -> str | None:
        """Return the type created for an Arrow type, or None when there is none."""
        t = unwrap(arrow_type)
        row = self.row(t)
        if row is None:
            return None
        if key and row.key_created is not None:
            return row.key_created
        return row.created(t) if callable(row.created) else row.created

    def accepted(self, arrow_type: pa.DataType) -> frozenset[str] | None:
        """Return the base types of the columns that take an Arrow type (None: none does)."""
        t = unwrap(arrow_type)
        row = self.row(t)
        if row is None or row.accepted is None:
            return None
        return row.accepted(t) if callable(row.accepted) else row.accepted

    def sql_type(self, arrow_type: pa.DataType, key: bool = False) -> str:
        """Return the type a column of this Arrow type is created as.

        Parameters
        ----------
        arrow_type
            The Arrow type of the input column.
        key
            The column is part of the primary key.

        Returns
        -------
        str
            A type usable in ``CREATE TABLE``.

        Raises
        ------
        TypeError
            The Arrow type has no counterpart in the database.
        """
        created = self.created(arrow_type, key)
        if created is None:
            raise TypeError(f"no {self.database} type for Arrow type {arrow_type}")
        return created

    def compatibility_problem(self, arrow_type: pa.DataType, column: TableColumn) -> str | None:
        """Why values of ``arrow_type`` cannot be written into ``column`` (None: they can).

        Parameters
        ----------
        arrow_type
            The Arrow type of the input column.
        column
            The target column from the catalog.

        Returns
        -------
        str or None
            A sentence naming both types, or ``None`` when compatible.
        """
        if column.generated:
            return (
                f"column {column.name!r} is generated{self.generated_note} and cannot be "
                "written; drop it from the input"
            )
        t = unwrap(arrow_type)
        if pa.types.is_null(t):
            return None
        accepted = self.accepted(t)
        if accepted is None:
            return f"Arrow type {arrow_type} is not supported by the {self.database} sink"
        if column.base_type in accepted or self.also_accepts(t, column):
            return None
        written = self.created(t) or "nothing"
        return (
            f"column {column.name!r} is {column.type_name} but the input column is "
            f"{arrow_type} (written as {written}){self.hint(t, column)}"
        )

    def column_kind(self, arrow_type: pa.DataType, column: TableColumn | None) -> str:
        """How the values of one input column are rendered.

        Parameters
        ----------
        arrow_type
            The Arrow type of the input column.
        column
            The target column (``None`` when creating the table: the created type).

        Returns
        -------
        str
            One of the dialect's kinds.
        """
        t = unwrap(arrow_type)
        row = self.row(t)
        if row is None:
            return self.other_kind
        return row.kind(t, column) if callable(row.kind) else row.kind
