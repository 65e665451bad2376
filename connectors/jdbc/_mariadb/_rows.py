"""MariaDB's upgrade of a table of twophase rows to carry ``record_format``."""

from __future__ import annotations

from typing import Any

from .._rows import FORMAT_COLUMN, FORMAT_DEFINITION, add_format_column

__all__ = ["mariadb_add_format_column", "mariadb_has_column"]


def mariadb_has_column(cur: Any, table: str, column: str) -> bool:
    """Whether ``table`` (quoted) has ``column``: a dictionary read, no metadata lock kept."""
    cur.execute(f"SHOW COLUMNS FROM {table} WHERE Field = %s", (column,))
    return bool(cur.fetchall())


def mariadb_add_format_column(cur: Any, table: str) -> bool:
    """:func:`add_format_column` for MariaDB (waits at most a second for the metadata lock)."""
    return add_format_column(
        cur,
        table,
        present=mariadb_has_column(cur, table, FORMAT_COLUMN),
        alter=[
            "SET STATEMENT lock_wait_timeout = 1 FOR "
            f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {FORMAT_DEFINITION}"
        ],
    )
