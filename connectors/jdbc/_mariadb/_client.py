"""The MariaDB dialect's client: PyMySQL sessions with the sink's settings, and the catalog.

Every session runs with ``time_zone = '+00:00'``, a fixed strict ``sql_mode``
(:data:`~._sql.SQL_MODE`), ``READ COMMITTED`` and the sink's timeouts:
``lock_timeout`` as ``innodb_lock_wait_timeout`` (whole seconds, at least 1),
``statement_timeout`` as ``max_statement_time`` and
``idle_in_transaction_timeout`` as ``idle_transaction_timeout``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._context import ErrorContext
from .._client import JdbcClient, ServerQuery
from .._options import QualifiedName
from .._table import TableColumn, TableInfo
from ._dbapi import PYMYSQL
from ._errors import MARIADB_ERRORS
from ._sql import SQL_MODE, literal

__all__ = ["MariaDBClient", "MariaDBServer", "describe_table", "server_info"]

#: Storage engines with transactions that XA and the marker protocol can rely on.
TRANSACTIONAL_ENGINES = frozenset({"InnoDB"})


@dataclass(frozen=True)
class MariaDBServer:
    """What the sink needs to know about the server.

    Attributes
    ----------
    version
        ``@@version``, e.g. ``"10.11.19-MariaDB-0+deb12u1"``.
    mariadb
        MariaDB (True) or MySQL (False).
    database
        The connection's current database (``DATABASE()``), or None.
    """

    version: str
    mariadb: bool
    database: str | None

    @classmethod
    def of_row(cls, version: object, database: str | None) -> MariaDBServer:
        """Return the values of ``SELECT @@version, DATABASE()``."""
        return cls(str(version), "mariadb" in str(version).lower(), database)

    def describe_version(self) -> str:
        """Return the version for messages: ``"MariaDB 10.11.19"``."""
        number = self.version.split("-")[0]
        return f"{'MariaDB' if self.mariadb else 'MySQL'} {number}"


#: Read the server's version and the current database (a cursor -> :class:`MariaDBServer`).
server_info = ServerQuery(
    "reading the server's version", "SELECT @@version, DATABASE()", MariaDBServer.of_row
)


def _where_table(table: QualifiedName) -> tuple[str, tuple[str, ...]]:
    if table.schema is None:
        return "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table.name,)
    return "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (table.schema, table.name)


def describe_table(cur: Any, table: QualifiedName) -> TableInfo | None:
    """Read a table's columns, unique keys and engine from ``information_schema``.

    ``table.schema`` is the database (None: the connection's). None when the table does
    not exist or is not visible; ``kind`` is the storage engine (``"InnoDB"``), or ``"VIEW"``.
    """
    where, params = _where_table(table)
    cur.execute(f"SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE {where}", params)
    row = cur.fetchone()
    if row is None:
        return None
    kind = "VIEW" if row[0] == "VIEW" else str(row[1] or "")
    cur.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA "
        f"FROM information_schema.COLUMNS WHERE {where} ORDER BY ORDINAL_POSITION",
        params,
    )
    columns = []
    for name, column_type, data_type, nullable, default, extra in cur.fetchall():
        extra = str(extra or "").upper()
        generated = "GENERATED" in extra or "VIRTUAL" in extra or "PERSISTENT" in extra
        columns.append(
            TableColumn(
                name=str(name),
                type_name=str(column_type),
                base_type=str(data_type).lower(),
                category="",
                element_type=None,
                not_null=nullable == "NO",
                has_default=default is not None or "AUTO_INCREMENT" in extra,
                generated=generated,
            )
        )
    cur.execute(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        f"WHERE {where} AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        params,
    )
    keys: dict[str, set[str]] = {}
    for index, column in cur.fetchall():
        keys.setdefault(str(index), set()).add(str(column))
    return TableInfo(0, kind, tuple(columns), tuple(frozenset(k) for k in keys.values()))


class MariaDBClient(JdbcClient):
    """Statements on pooled PyMySQL sessions with the sink's settings."""

    dbapi = PYMYSQL
    errors = MARIADB_ERRORS

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Return the ``SET SESSION`` values every session starts with.

        Returns
        -------
        tuple of (name, SQL literal)
            Zone, ``sql_mode`` and the sink's timeouts (the DB-API layer also sets
            ``READ COMMITTED``).
        """
        o = self.options
        return (
            ("time_zone", "'+00:00'"),
            ("sql_mode", literal(SQL_MODE)),
            ("innodb_lock_wait_timeout", str(max(1, math.ceil(o.lock_timeout)))),
            ("max_statement_time", repr(float(o.statement_timeout))),
            ("idle_transaction_timeout", str(math.ceil(o.idle_in_transaction_timeout))),
        )

    def server(self, where: ErrorContext) -> MariaDBServer:
        """Read the server's version and current database (:data:`server_info`)."""
        return self.read_server(server_info, where)
