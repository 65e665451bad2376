"""The format of the rows twophase keeps in the database: markers, fences, registries.

Every such row carries ``record_format``: 1 since the column came (0.3.0), and
rows written before it (twophase 0.2.0, whose tables had no such column) get 1
when the table is upgraded, since their layout is the same. Writers leave the
column to its default, the format they write. A release reads the
formats up to :data:`ROW_FORMAT` and refuses a row of a newer one, naming the
table, the row and the format (``docs/upgrading.md``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twophase import __version__
from twophase.errors import CoordinatorLogError

from .._context import ErrorContext, keywords_of

__all__ = [
    "FORMAT_COLUMN",
    "FORMAT_DEFINITION",
    "ROW_FORMAT",
    "FormatColumnAdder",
    "add_format_column",
    "check_row_format",
    "row_dicts",
]

_log = logging.getLogger("twophase.connectors.jdbc")

#: The format of the rows this release writes (the column's default: writers leave it out).
ROW_FORMAT = 1
#: The column that carries it, in every table of twophase's own rows.
FORMAT_COLUMN = "record_format"
#: The column's definition (both dialects): rows of a table made before it read as format 1.
FORMAT_DEFINITION = f"{FORMAT_COLUMN} SMALLINT NOT NULL DEFAULT 1"


def row_dicts(cur: Any) -> list[dict[str, Any]]:
    """Return the rows of the last ``SELECT *`` as dicts by column name.

    Readers of twophase's own rows select ``*``: a table made before 0.3.0 may
    lack ``record_format`` (see :func:`add_format_column`), and reads as format 1.
    """
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@dataclass(frozen=True)
class FormatColumnAdder:
    """A database's :func:`add_format_column`: how it asks for the column, how it adds it.

    Attributes
    ----------
    has_column
        ``(cursor, quoted table, column) -> bool``: whether the table has the
        column, asked of the catalog without waiting for a lock on the table.
    alter
        The statements that add it with a short lock wait (``{}``: the table).
    """

    has_column: Callable[[Any, str, str], bool]
    alter: tuple[str, ...]

    def __call__(self, cur: Any, table: str) -> bool:
        """Give ``table`` (quoted) its ``record_format`` if it can now; say whether it has it."""
        present = self.has_column(cur, table, FORMAT_COLUMN)
        return add_format_column(cur, table, present=present, alter=list(self.alter))


def add_format_column(cur: Any, table: str, *, present: bool, alter: list[str]) -> bool:
    """Give a table made before 0.3.0 its ``record_format`` column, without waiting.

    ``ALTER TABLE`` waits for every lock on the table, and a transaction
    prepared by the previous release can hold one until recovery commits it
    -- which runs after this. So the column is added only if no one holds the
    table; otherwise the table keeps working without it (its rows are format
    1, as every row this release writes: the column's default) and the next
    start tries again.

    Parameters
    ----------
    cur
        An autocommit cursor.
    table
        The quoted table name.
    present
        Whether the table has the column already (then nothing is run).
    alter
        The dialect's statements that add it with a short lock wait (``{}``: the table).

    Returns
    -------
    bool
        Whether the table has the column now.
    """
    if present:
        return True
    try:
        for statement in alter:
            cur.execute(statement.format(table))
    except Exception as exc:  # a lock held (a prepared transaction), or no ALTER privilege
        with contextlib.suppress(Exception):
            cur.execute("ROLLBACK")
        first = str(exc).strip().splitlines()
        _log.info(
            "%s has no %s column yet and it could not be added now (%s); its rows read as "
            "format 1, and the next start tries again",
            table,
            FORMAT_COLUMN,
            first[0] if first else type(exc).__name__,
        )
        return False
    return True


def check_row_format(
    value: Any, *, table: object, row: str, where: ErrorContext | None = None
) -> None:
    """Refuse a row of a format this release does not read.

    Parameters
    ----------
    value
        The row's ``record_format``.
    table
        The table (for the message).
    row
        Which row, e.g. ``"identity 'x', batch 4, partition 1"``.
    where
        The sink, batch and partition, named by the error (None: unknown here).

    Raises
    ------
    CoordinatorLogError
        The row is of a newer format.
    """
    fmt = 1 if value is None else int(value)
    if fmt <= ROW_FORMAT:
        return
    raise CoordinatorLogError(
        f"the row of {table} for {row} has {FORMAT_COLUMN} {fmt}, written by a twophase "
        f"release newer than {__version__}, which reads {FORMAT_COLUMN} 1 to {ROW_FORMAT}: "
        "run the release that wrote it (or a later one) on the driver and every executor "
        "(docs/upgrading.md)",
        **keywords_of(where),
    )
