"""Catalog reads: server capabilities, table columns, unique keys, privileges.

Every function takes an open cursor and passes names as values
(``to_regclass(%s)``), never as SQL text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from .._client import ServerQuery
from .._options import QualifiedName
from .._table import TableColumn, TableInfo

__all__ = [
    "ServerInfo",
    "TableInfo",
    "describe_table",
    "has_privileges",
    "schema_can_create",
    "server_info",
]


@dataclass(frozen=True)
class ServerInfo:
    """What the sink needs to know about the server.

    Attributes
    ----------
    version
        ``server_version_num`` (150004 for 15.4).
    max_prepared_transactions
        The setting; 0 means ``PREPARE TRANSACTION`` is disabled.
    prepared_in_use
        Prepared transactions currently held on the server (all databases).
    database
        ``current_database()``.
    """

    version: int
    max_prepared_transactions: int
    prepared_in_use: int
    database: str

    def describe_version(self) -> str:
        """Return the version as text, e.g. ``"15.4"``.

        Returns
        -------
        str
            Major and minor version.
        """
        return f"{self.version // 10000}.{self.version % 10000}"


#: Read the server's version and prepared-transaction capacity (a cursor -> :class:`ServerInfo`).
server_info = ServerQuery(
    "reading the server settings",
    "SELECT current_setting('server_version_num')::int, "
    "current_setting('max_prepared_transactions')::int, "
    "(SELECT count(*) FROM pg_catalog.pg_prepared_xacts)::int, current_database()",
    ServerInfo,
)


_DESCRIBE = """
SELECT a.attname,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       bt.typname,
       bt.typcategory,
       et.typname,
       a.attnotnull,
       a.atthasdef OR a.attidentity <> '',
       a.attgenerated <> '' OR a.attidentity = 'a'
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_type bt
  ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_catalog.pg_type e0 ON e0.oid = bt.typelem AND bt.typcategory = 'A'
LEFT JOIN pg_catalog.pg_type et
  ON et.oid = CASE WHEN e0.typtype = 'd' THEN e0.typbasetype ELSE e0.oid END
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_UNIQUE_KEYS = """
SELECT ARRAY(
         SELECT a.attname
         FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
         JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE k.n <= i.indnkeyatts)
FROM pg_catalog.pg_index i
WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
"""


def describe_table(cur: Any, table: QualifiedName) -> TableInfo | None:
    """Read a table's columns and unique keys from ``pg_catalog`` (None: no such table).

    ``table`` is looked up by ``to_regclass``: the search path finds one without a schema.
    """
    cur.execute(
        "SELECT c.oid, c.relkind FROM pg_catalog.pg_class c WHERE c.oid = to_regclass(%s)",
        (sql.Identifier(*table.parts()).as_string(cur),),
    )
    row = cur.fetchone()
    if row is None:
        return None
    oid, kind = row
    cur.execute(_DESCRIBE, (oid,))
    columns = tuple(TableColumn(*r) for r in cur.fetchall())
    cur.execute(_UNIQUE_KEYS, (oid,))
    keys = tuple(frozenset(r[0]) for r in cur.fetchall())
    return TableInfo(int(oid), str(kind), columns, keys)


def has_privileges(cur: Any, oid: int, privileges: tuple[str, ...]) -> list[str]:
    """Return which of ``privileges`` the current user lacks on a table.

    INSERT and UPDATE count as held when granted on the table or on any column
    (column-level grants); DELETE must be granted on the table.

    Parameters
    ----------
    cur
        A cursor.
    oid
        The table's oid.
    privileges
        E.g. ``("INSERT", "UPDATE")``.

    Returns
    -------
    list of str
        The missing ones, empty when all are held.
    """
    missing = []
    for privilege in privileges:
        function = "has_table_privilege" if privilege == "DELETE" else "has_any_column_privilege"
        cur.execute(f"SELECT {function}(%s::oid, %s)", (oid, privilege))
        if not cur.fetchone()[0]:
            missing.append(privilege)
    return missing


def schema_can_create(cur: Any, schema: str | None) -> tuple[str, bool]:
    """Whether the current user may create tables in a schema.

    Parameters
    ----------
    cur
        A cursor.
    schema
        The schema, or None for ``current_schema()``.

    Returns
    -------
    tuple
        ``(schema name, allowed)``.
    """
    if schema is None:
        cur.execute("SELECT current_schema()")
        schema = cur.fetchone()[0]
        if schema is None:
            return "(no schema on search_path)", False
    cur.execute(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s) "
        "THEN has_schema_privilege(%s, 'CREATE') ELSE false END",
        (schema, schema),
    )
    return str(schema), bool(cur.fetchone()[0])
