"""PostgreSQL's upgrade of a table of twophase rows to carry ``record_format``."""

from __future__ import annotations

from typing import Any

from .._rows import FORMAT_COLUMN, FORMAT_DEFINITION, add_format_column

__all__ = ["pg_add_format_column", "pg_has_column"]


def pg_has_column(cur: Any, table: str, column: str) -> bool:
    """Whether ``table`` (quoted) has ``column``: a catalog read, which takes no lock on it."""
    cur.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attname = %s AND NOT attisdropped",
        (table, column),
    )
    return bool(cur.fetchall())


def pg_add_format_column(cur: Any, table: str) -> bool:
    """:func:`add_format_column` for PostgreSQL (waits at most half a second for the lock)."""
    return add_format_column(
        cur,
        table,
        present=pg_has_column(cur, table, FORMAT_COLUMN),
        alter=[
            "BEGIN",
            "SET LOCAL lock_timeout = '500ms'",
            f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {FORMAT_DEFINITION}",
            "COMMIT",
        ],
    )
