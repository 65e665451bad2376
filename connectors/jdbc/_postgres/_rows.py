"""PostgreSQL's upgrade of a table of twophase rows to carry ``record_format``."""

from __future__ import annotations

from typing import Any

from .._rows import FORMAT_DEFINITION, FormatColumnAdder

__all__ = ["pg_add_format_column", "pg_has_column"]


def pg_has_column(cur: Any, table: str, column: str) -> bool:
    """Whether ``table`` (quoted) has ``column``: a catalog read, which takes no lock on it."""
    cur.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attname = %s AND NOT attisdropped",
        (table, column),
    )
    return bool(cur.fetchall())


#: :func:`~.._rows.add_format_column` for PostgreSQL (waits at most half a second for the lock).
pg_add_format_column = FormatColumnAdder(
    pg_has_column,
    (
        "BEGIN",
        "SET LOCAL lock_timeout = '500ms'",
        f"ALTER TABLE {{}} ADD COLUMN IF NOT EXISTS {FORMAT_DEFINITION}",
        "COMMIT",
    ),
)
