"""MariaDB's upgrade of a table of twophase rows to carry ``record_format``."""

from __future__ import annotations

from typing import Any

from .._rows import FORMAT_DEFINITION, FormatColumnAdder

__all__ = ["mariadb_add_format_column", "mariadb_has_column"]


def mariadb_has_column(cur: Any, table: str, column: str) -> bool:
    """Whether ``table`` (quoted) has ``column``: a dictionary read, no metadata lock kept."""
    cur.execute(f"SHOW COLUMNS FROM {table} WHERE Field = %s", (column,))
    return bool(cur.fetchall())


#: :func:`~.._rows.add_format_column` for MariaDB (waits at most a second for the metadata lock).
mariadb_add_format_column = FormatColumnAdder(
    mariadb_has_column,
    (
        "SET STATEMENT lock_wait_timeout = 1 FOR "
        f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {FORMAT_DEFINITION}",
    ),
)
