"""PostgreSQL's marker table: its quoting, column types, duplicate key and failed ``COMMIT``."""

from __future__ import annotations

from typing import Any

from .._marker_table import MarkerTable
from ._client import PostgresClient
from ._errors import sqlstate
from ._rows import pg_add_format_column, pg_has_column

__all__ = ["PostgresMarkerTable"]


def _pg_ident(*parts: str) -> str:
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


class PostgresMarkerTable(PostgresClient, MarkerTable):
    """PostgreSQL's marker table."""

    create_statement = (
        "CREATE TABLE IF NOT EXISTS {} ("
        "identity text NOT NULL, "
        "batch_id bigint NOT NULL, "
        "partition_id integer NOT NULL, "
        "attempt integer NOT NULL, "
        "fingerprint text NOT NULL, "
        "committed_at timestamptz NOT NULL DEFAULT now(), "
        "epoch bigint NOT NULL DEFAULT 0, "
        "record_format smallint NOT NULL DEFAULT 1, "
        "PRIMARY KEY (identity, batch_id, partition_id, attempt, fingerprint))"
    )

    @property
    def table(self) -> str:
        """Return ``"schema"."table"`` or ``"table"``."""
        return _pg_ident(*self.options.marker_table.parts())

    def is_duplicate(self, exc: BaseException) -> bool:
        """SQLSTATE 23505."""
        return sqlstate(exc) == "23505"

    def is_missing(self, cur: Any, table: str) -> bool | None:
        """``to_regclass``: ``CREATE`` then runs only when it is (it needs a privilege)."""
        cur.execute("SELECT to_regclass(%s)", (table,))
        return bool(cur.fetchone()[0] is None)

    def has_column(self, cur: Any, table: str, column: str) -> bool:
        """``pg_attribute``."""
        return pg_has_column(cur, table, column)

    def add_format_column(self, cur: Any, table: str) -> None:
        """Add ``record_format`` to a table made before 0.3.0, unless a lock is held on it."""
        pg_add_format_column(cur, table)

    def commit(self, cur: Any) -> bool:
        """``COMMIT``; psycopg2's status message says ``ROLLBACK`` for a failed transaction."""
        cur.execute("COMMIT")
        return bool(cur.statusmessage == "COMMIT")
