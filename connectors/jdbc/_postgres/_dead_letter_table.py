"""PostgreSQL's dead-letter table: quoting, column types (the row as ``jsonb``), catalog, rights."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from .._dead_letter_table import DeadLetterTable
from .._table import TableColumn, TableInfo
from ._catalog import describe_table
from ._client import PostgresClient

__all__ = ["PostgresDeadLetterTable"]


class PostgresDeadLetterTable(PostgresClient, DeadLetterTable):
    """PostgreSQL's dead-letter table."""

    types: ClassVar[dict[str, str]] = {
        "name": "text",
        "text": "text",
        "bigint": "bigint",
        "int": "integer",
        "smallint": "smallint",
        "json": "jsonb",
        "now": "timestamptz DEFAULT now()",
    }
    row_text = '"row"::text'

    def quote(self, name: str) -> str:
        """Double quotes."""
        return '"' + name.replace('"', '""') + '"'

    def is_missing(self, cur: Any) -> bool:
        """``to_regclass``: ``CREATE`` then runs only when it is (it needs a privilege)."""
        cur.execute("SELECT to_regclass(%s)", (self.table,))
        return bool(cur.fetchone()[0] is None)

    def lacks(self, cur: Any, privilege: str, statement: str, params: int) -> bool:
        """``has_table_privilege`` (granted on the table, to the user or a role it inherits)."""
        cur.execute("SELECT has_table_privilege(%s, %s)", (self.table, privilege))
        return not cur.fetchone()[0]

    def describe(self, cur: Any) -> TableInfo | None:
        """Read the catalog (:func:`~._catalog.describe_table`)."""
        return describe_table(cur, self.options.table)

    def value_of(self, value: Any, column: TableColumn) -> Any:
        """Base64 into ``bytea``; an array as a list (``'{}'`` when empty); else the default."""
        if column.base_type == "bytea" and isinstance(value, str):
            return base64.b64decode(value)
        if column.category == "A" and isinstance(value, list):
            return value if value else "{}"
        return super().value_of(value, column)
