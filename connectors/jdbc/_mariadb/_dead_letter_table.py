"""MariaDB's dead-letter table: quoting, column types (the row as checked JSON), catalog, rights."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, ClassVar

from .._dead_letter_table import DeadLetterTable
from .._table import TableColumn, TableInfo
from ._client import MariaDBClient, describe_table

__all__ = ["MariaDBDeadLetterTable"]

_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_DATETIME = frozenset({"datetime", "timestamp"})
#: A statement refused for a privilege the user lacks on a table, or on a column of it.
_DENIED = frozenset({1142, 1143})


class MariaDBDeadLetterTable(MariaDBClient, DeadLetterTable):
    """MariaDB's dead-letter table (InnoDB; the row is JSON text checked by ``JSON_VALID``)."""

    types: ClassVar[dict[str, str]] = {
        "name": "VARCHAR(64)",
        "text": "TEXT",
        "bigint": "BIGINT",
        "int": "INT",
        "smallint": "SMALLINT",
        "json": "LONGTEXT",
        "now": "DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)",
    }
    row_check = " CHECK (JSON_VALID(`row`))"
    table_options = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    row_text = "`row`"

    def quote(self, name: str) -> str:
        """Backticks."""
        return "`" + name.replace("`", "``") + "`"

    def is_missing(self, cur: Any) -> bool:
        """``information_schema.TABLES`` (in the connection's database when unqualified)."""
        name = self.options.dead_letters
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s",
            (name.schema, name.name),
        )
        return int(cur.fetchone()[0]) == 0

    def lacks(self, cur: Any, privilege: str, statement: str, params: int) -> bool:
        """``EXPLAIN`` the statement, which runs nothing: the server applies the grants.

        The user's own, a database pattern's and its roles' (those of a role are not in
        the user's ``information_schema``): refused with 1142 or 1143 (a column's).
        """
        try:
            cur.execute(f"EXPLAIN {statement}", (None,) * params)
        except self.errors.error as exc:
            if self.errors.code_of(exc) in _DENIED:
                return True
            raise
        cur.fetchall()
        return False

    def describe(self, cur: Any) -> TableInfo | None:
        """Read the catalog (:func:`~._client.describe_table`)."""
        return describe_table(cur, self.options.table)

    def value_of(self, value: Any, column: TableColumn) -> Any:
        """Base64 into binary types; a timestamp in UTC without its offset; else the default."""
        if column.base_type in _BINARY and isinstance(value, str):
            return base64.b64decode(value)
        if column.base_type in _DATETIME and isinstance(value, str):
            moment = dt.datetime.fromisoformat(value)  # the sessions run in UTC
            if moment.tzinfo is not None:
                moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return moment.isoformat(sep=" ")
        return super().value_of(value, column)
